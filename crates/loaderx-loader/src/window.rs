//! The reorder window: which steps workers may claim, where finished batches
//! wait, and the hand-off to the consumer in sampler order.
//!
//! State, under one mutex: `next_deliver` (the step the consumer gets next),
//! `next_claim` (the next step a worker may take), and `prefetch` slots, slot
//! `i` holding the finished result of step `next_deliver + i`. A worker may
//! claim step `s` only while `s < next_deliver + prefetch`, so at most
//! `prefetch` batches exist between claim and delivery, whatever the number
//! of workers. Workers compute and gather outside the lock; they only take
//! it to claim and to drop a result in its slot.
//!
//! Waiting uses two condition variables (`claimable` for workers,
//! `deliverable` for consumers) and a `closed` flag that wakes everyone;
//! nothing polls. `restore` bumps a generation number so that batches of
//! steps claimed before it are discarded when they come in.

use std::{
    collections::VecDeque,
    sync::{Condvar, Mutex, MutexGuard, PoisonError},
    time::Instant,
};

use loaderx_sampler::{Sampler, SamplerState};

use crate::{Batch, Error, Result};

/// A step a worker has taken on, with what it needs to produce it.
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) step: u64,
    pub(crate) generation: u64,
    /// The sampler as of the claim (its own step counter is unused).
    pub(crate) sampler: Sampler,
}

/// What a worker hands back: the batch, or why it failed.
pub(crate) type Outcome<B> = Result<Batch<B>>;

struct State<B> {
    sampler: Sampler,
    generation: u64,
    next_claim: u64,
    next_deliver: u64,
    slots: VecDeque<Option<Outcome<B>>>,
    closed: bool,
}

impl<B> State<B> {
    /// Slot of `step`, if it is inside the window.
    fn slot(&self, step: u64) -> Option<usize> {
        let ahead = step.wrapping_sub(self.next_deliver);
        usize::try_from(ahead)
            .ok()
            .filter(|&ahead| ahead < self.slots.len())
    }

    /// Empties every slot, returning what they held.
    fn drain(&mut self) -> Vec<Outcome<B>> {
        self.slots.iter_mut().filter_map(Option::take).collect()
    }
}

/// The shared window; see the module docs.
pub(crate) struct Window<B> {
    state: Mutex<State<B>>,
    claimable: Condvar,
    deliverable: Condvar,
}

impl<B> Window<B> {
    /// A window of `prefetch` slots whose first step is `sampler.step()`;
    /// [`Error::SettingTooLarge`] when the slots cannot be allocated.
    pub(crate) fn new(sampler: Sampler, prefetch: usize) -> Result<Window<B>> {
        let step = sampler.step();
        let mut slots = VecDeque::new();
        slots
            .try_reserve_exact(prefetch)
            .map_err(|_| Error::SettingTooLarge {
                setting: "prefetch",
                value: prefetch as u64,
                what: "its batch slots",
                bytes: (prefetch as u64)
                    .saturating_mul(std::mem::size_of::<Option<Outcome<B>>>() as u64),
            })?;
        slots.resize_with(prefetch, || None);
        Ok(Window {
            state: Mutex::new(State {
                sampler,
                generation: 0,
                next_claim: step,
                next_deliver: step,
                slots,
                closed: false,
            }),
            claimable: Condvar::new(),
            deliverable: Condvar::new(),
        })
    }

    /// The state, even if a thread panicked holding the lock: every update
    /// below leaves it consistent at each point a panic could occur.
    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks until a step can be claimed and claims it, or returns `None`
    /// once the window is closed.
    pub(crate) fn claim(&self) -> Option<Claim> {
        let mut state = self.lock();
        loop {
            if state.closed {
                return None;
            }
            if state.slot(state.next_claim).is_some() {
                break;
            }
            state = self
                .claimable
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let step = state.next_claim;
        state.next_claim = step.wrapping_add(1);
        Some(Claim {
            step,
            generation: state.generation,
            sampler: state.sampler.clone(),
        })
    }

    /// Puts the outcome of `claim` in its slot. Hands it back when nobody
    /// will take it (the window closed or was restored since the claim), for
    /// the caller to release its buffers.
    pub(crate) fn complete(&self, claim: &Claim, outcome: Outcome<B>) -> Option<Outcome<B>> {
        let mut state = self.lock();
        if state.closed || state.generation != claim.generation {
            return Some(outcome);
        }
        // A claimed step stays inside the window: `next_deliver` cannot pass
        // a step that has not completed.
        let Some(slot) = state.slot(claim.step) else {
            debug_assert!(false, "step {} completed outside the window", claim.step);
            return Some(outcome);
        };
        state.slots[slot] = Some(outcome);
        drop(state);
        if slot == 0 {
            self.deliverable.notify_all();
        }
        None
    }

    /// Takes the next batch in step order, waiting for it until `deadline`
    /// (forever when `None`). `Ok(None)` means the deadline passed.
    pub(crate) fn take(&self, deadline: Option<Instant>) -> Result<Option<Batch<B>>> {
        let mut state = self.lock();
        loop {
            if state.closed {
                return Err(Error::Closed);
            }
            if state.slots.front().is_some_and(Option::is_some) {
                break;
            }
            state = match deadline {
                None => self
                    .deliverable
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(None);
                    }
                    self.deliverable
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        let outcome = state.slots.pop_front().flatten();
        state.slots.push_back(None);
        state.next_deliver = state.next_deliver.wrapping_add(1);
        drop(state);
        // One more step became claimable.
        self.claimable.notify_one();
        match outcome {
            Some(outcome) => outcome.map(Some),
            None => unreachable!("the front slot was checked to be full"),
        }
    }

    /// Closes the window: wakes every waiter, and returns the batches that
    /// will never be delivered. Idempotent.
    pub(crate) fn close(&self) -> Vec<Outcome<B>> {
        let mut state = self.lock();
        state.closed = true;
        let drained = state.drain();
        drop(state);
        self.claimable.notify_all();
        self.deliverable.notify_all();
        drained
    }

    /// Whether [`Window::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The sampler state of the next batch to be delivered.
    pub(crate) fn state(&self) -> SamplerState {
        let state = self.lock();
        let mut saved = state.sampler.state();
        saved.step = state.next_deliver;
        saved
    }

    /// Restarts the stream at `saved` (see `Sampler::restore`: seed and step
    /// from the state, rank and world size kept). Returns the batches of the
    /// old position that will never be delivered.
    pub(crate) fn restore(&self, saved: &SamplerState) -> Result<Vec<Outcome<B>>> {
        let mut state = self.lock();
        if state.closed {
            return Err(Error::Closed);
        }
        let mut sampler = state.sampler.clone();
        sampler.restore(saved)?;
        state.sampler = sampler;
        state.generation = state.generation.wrapping_add(1);
        state.next_claim = saved.step;
        state.next_deliver = saved.step;
        let drained = state.drain();
        drop(state);
        self.claimable.notify_all();
        Ok(drained)
    }

    /// The number of restores so far: a claim made before the latest
    /// carries a smaller one.
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Finished batches waiting to be delivered (not necessarily the next).
    pub(crate) fn prefetched(&self) -> usize {
        self.lock().slots.iter().filter(|s| s.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Arc, mpsc},
        thread,
    };

    use loaderx_sampler::Mode;

    use super::*;

    #[expect(
        clippy::unnecessary_wraps,
        reason = "the window holds outcomes; these tests feed it successful ones"
    )]
    fn batch(step: u64) -> Outcome<Vec<u8>> {
        Ok(Batch {
            step,
            indices: vec![step],
            columns: Vec::new(),
        })
    }

    #[test]
    fn out_of_order_completions_are_delivered_in_order_within_the_bound() {
        let sampler = Sampler::new(10, 1, Mode::Sequential, 0).unwrap();
        let window = Arc::new(Window::<Vec<u8>>::new(sampler, 3).unwrap());
        let claims: Vec<Claim> = (0..3).map(|_| window.claim().unwrap()).collect();
        assert_eq!(claims.iter().map(|c| c.step).collect::<Vec<_>>(), [0, 1, 2]);

        // The window is full of claims: a fourth claim waits until a delivery.
        let waiter = {
            let window = Arc::clone(&window);
            thread::spawn(move || window.claim().map(|c| c.step))
        };
        for claim in claims.iter().rev() {
            assert!(window.complete(claim, batch(claim.step)).is_none());
        }
        assert_eq!(window.prefetched(), 3);
        assert_eq!(window.take(None).unwrap().unwrap().step, 0);
        assert_eq!(waiter.join().unwrap(), Some(3));
        for step in 1..3 {
            assert_eq!(window.take(None).unwrap().unwrap().step, step);
        }
        assert_eq!(window.state().step, 3);
        // Closing wakes a claim that would wait, and refuses late results.
        let late = window.claim().unwrap();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let window = Arc::clone(&window);
            thread::spawn(move || {
                tx.send(window.claim().map(|c| c.step)).unwrap();
                window.claim().is_some()
            })
        };
        assert_eq!(rx.recv().unwrap(), Some(5));
        assert!(window.close().is_empty());
        assert!(!waiter.join().unwrap());
        assert!(window.complete(&late, batch(late.step)).is_some());
        assert!(matches!(window.take(None), Err(Error::Closed)));
    }
}
