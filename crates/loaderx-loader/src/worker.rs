//! What a worker thread does: claim a step, compute its indices, gather every
//! stream into fresh buffers, and drop the batch into the reorder window.

use std::{
    panic::{self, AssertUnwindSafe},
    sync::{Arc, Mutex, PoisonError},
};

use crate::{
    Batch, BufferAllocator, Column, Error, Layout, Result, Source, Stream, StreamKind,
    window::{Claim, Outcome, Window},
};

/// Everything the loader and its workers share.
pub(crate) struct Shared<A: BufferAllocator> {
    pub(crate) streams: Box<[Stream]>,
    pub(crate) allocator: A,
    pub(crate) window: Window<A::Buffer>,
    pub(crate) local_batch: usize,
    /// Steps past a claimed one whose records are requested ahead.
    pub(crate) lookahead: u64,
    /// How far records are requested ahead, and for which restore.
    pub(crate) ahead: Mutex<Ahead>,
}

/// The first step whose records are not requested ahead yet (`next`), as
/// of the window's `generation` (its count of restores).
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    generation: u64,
    next: u64,
}

impl<A: BufferAllocator> Shared<A> {
    /// Gives every buffer of `batch` back to the allocator.
    pub(crate) fn release(&self, batch: Batch<A::Buffer>) {
        self.release_columns(batch.columns);
    }

    fn release_columns(&self, columns: Vec<Column<A::Buffer>>) {
        for column in columns {
            self.allocator.recycle(column.stream, column.data);
        }
    }

    /// Requests ahead the records of the steps up to `lookahead` past
    /// `claim`'s that no worker has requested yet ([`Source::prefetch`]).
    /// A claim made before a restore requests nothing: its steps are of
    /// the old position. The requests are made under the `ahead` lock,
    /// which [`forget_ahead`](Self::forget_ahead) takes too, so a restore's
    /// forgetting comes wholly before or after them.
    fn read_ahead(&self, claim: &Claim) {
        if self.lookahead == 0 {
            return;
        }
        let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        if claim.generation < ahead.generation {
            return;
        }
        if claim.generation > ahead.generation {
            *ahead = Ahead {
                generation: claim.generation,
                next: 0,
            };
        }
        let last = claim.step.saturating_add(self.lookahead);
        let from = ahead.next.max(claim.step.saturating_add(1));
        if from > last {
            return;
        }
        ahead.next = last.saturating_add(1);
        let Ok(mut indices) = batch_indices(self.local_batch) else {
            return;
        };
        for step in from..=last {
            if claim.sampler.indices_at(step, &mut indices).is_err() {
                return;
            }
            for stream in &*self.streams {
                stream.source.prefetch(&indices);
            }
        }
    }

    /// Forgets what was requested ahead: the next claim starts afresh (a
    /// restore to another step, or a close).
    pub(crate) fn forget_ahead(&self) {
        if self.lookahead == 0 {
            return;
        }
        let generation = self.window.generation();
        let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        *ahead = Ahead {
            generation: generation.max(ahead.generation),
            next: 0,
        };
        for stream in &*self.streams {
            stream.source.forget_prefetched();
        }
    }

    /// Releases the buffers of outcomes nobody will take.
    pub(crate) fn discard(&self, outcomes: impl IntoIterator<Item = Outcome<A::Buffer>>) {
        for batch in outcomes.into_iter().flatten() {
            self.release(batch);
        }
    }
}

/// Per-worker memory reused across batches.
#[derive(Debug, Default)]
struct Scratch {
    lengths: Vec<u32>,
}

/// A worker's life: produce claimed steps until the window closes.
pub(crate) fn run<A: BufferAllocator>(shared: &Shared<A>) {
    let mut scratch = Scratch::default();
    while let Some(claim) = shared.window.claim() {
        shared.read_ahead(&claim);
        // A panicking source or allocator must not leave its step unfilled:
        // the consumer would wait for it forever.
        let outcome =
            panic::catch_unwind(AssertUnwindSafe(|| produce(shared, &claim, &mut scratch)))
                .unwrap_or_else(|payload| {
                    scratch = Scratch::default();
                    Err(Error::WorkerPanicked {
                        step: claim.step,
                        message: panic_message(payload.as_ref()),
                    })
                });
        if let Some(unwanted) = shared.window.complete(&claim, outcome) {
            shared.discard([unwanted]);
        }
    }
}

/// A zeroed buffer for the `local_batch` indices of a batch, or
/// [`Error::SettingTooLarge`] (never an abort: the size is the user's).
pub(crate) fn batch_indices(local_batch: usize) -> Result<Vec<u64>> {
    let mut indices = Vec::new();
    indices
        .try_reserve_exact(local_batch)
        .map_err(|_| Error::SettingTooLarge {
            setting: "batch_size",
            value: local_batch as u64,
            what: "the indices of a batch (this rank's share)",
            bytes: (local_batch as u64).saturating_mul(8),
        })?;
    indices.resize(local_batch, 0);
    Ok(indices)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// The batch of `claim.step`: its indices, then one column per stream.
fn produce<A: BufferAllocator>(
    shared: &Shared<A>,
    claim: &Claim,
    scratch: &mut Scratch,
) -> Outcome<A::Buffer> {
    let mut indices = batch_indices(shared.local_batch)?;
    claim.sampler.indices_at(claim.step, &mut indices)?;
    let mut columns = Vec::with_capacity(shared.streams.len());
    for (number, stream) in shared.streams.iter().enumerate() {
        match gather_column(shared, stream, number, claim.step, &indices, scratch) {
            Ok(column) => columns.push(column),
            Err(e) => {
                shared.release_columns(columns);
                return Err(e);
            }
        }
    }
    Ok(Batch {
        step: claim.step,
        indices,
        columns,
    })
}

/// Gathers one stream at `indices` into a buffer from the allocator.
fn gather_column<A: BufferAllocator>(
    shared: &Shared<A>,
    stream: &Stream,
    number: usize,
    step: u64,
    indices: &[u64],
    scratch: &mut Scratch,
) -> Result<Column<A::Buffer>> {
    let gather_error = |source| Error::Gather {
        stream: Arc::clone(&stream.name),
        step,
        source,
    };
    let out_of_memory = |bytes| Error::OutOfMemory {
        stream: Arc::clone(&stream.name),
        bytes,
    };
    let allocate = |len: usize| {
        let data = shared.allocator.allocate(number, len)?;
        assert_eq!(
            data.as_ref().len(),
            len,
            "the allocator returned a buffer of the wrong size"
        );
        Some(data)
    };
    let (data, layout) = match stream.kind {
        // The store checks every record's size while it validates the batch
        // (`gather_exact`): a shorter record would leave stale bytes in a
        // reused buffer.
        StreamKind::Fixed { item_len } => {
            let len = indices
                .len()
                .checked_mul(item_len)
                .ok_or_else(|| out_of_memory(u64::MAX))?;
            let mut data = allocate(len).ok_or_else(|| out_of_memory(len as u64))?;
            if let Err(e) = stream.source.gather_exact(indices, data.as_mut(), item_len) {
                shared.allocator.recycle(number, data);
                return Err(gather_error(e));
            }
            (data, Layout::Fixed { item_len })
        }
        // Sizes and bytes through one view, so no delete can come between
        // them and leave a record shorter than its slot.
        StreamKind::Ragged => {
            let lengths = &mut scratch.lengths;
            let mut gathered = None;
            let mut short_of = None;
            stream
                .source
                .with_view(&mut |view| {
                    lengths.clear();
                    let mut offsets = Vec::new();
                    if lengths.try_reserve_exact(indices.len()).is_err()
                        || offsets.try_reserve_exact(indices.len() + 1).is_err()
                    {
                        short_of = Some(u64::MAX);
                        return Ok(());
                    }
                    lengths.resize(indices.len(), 0);
                    view.lengths(indices, lengths)?;
                    let mut end = 0u64;
                    offsets.push(end);
                    for &l in lengths.iter() {
                        end += u64::from(l);
                        offsets.push(end);
                    }
                    let Some(mut data) = usize::try_from(end).ok().and_then(allocate) else {
                        short_of = Some(end);
                        return Ok(());
                    };
                    if let Err(e) =
                        view.gather_ragged(indices, data.as_mut(), &offsets[..indices.len()])
                    {
                        shared.allocator.recycle(number, data);
                        return Err(e);
                    }
                    gathered = Some((data, Layout::Ragged { offsets }));
                    Ok(())
                })
                .map_err(gather_error)?;
            if let Some(bytes) = short_of {
                return Err(out_of_memory(bytes));
            }
            gathered.expect("the view ran")
        }
    };
    Ok(Column {
        name: Arc::clone(&stream.name),
        stream: number,
        data,
        layout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{StreamKind, VecPool};
    use loaderx_sampler::{Mode, Sampler};

    /// A source that only records what is requested ahead of it.
    #[derive(Debug, Default)]
    struct Recorder {
        asked: Mutex<Vec<Vec<u64>>>,
        forgotten: Mutex<usize>,
    }

    impl Source for Recorder {
        fn len(&self) -> u64 {
            1000
        }
        fn gather(&self, _: &[u64], _: &mut [u8], _: usize) -> loaderx_store::Result<()> {
            Ok(())
        }
        fn gather_exact(&self, _: &[u64], _: &mut [u8], _: usize) -> loaderx_store::Result<()> {
            Ok(())
        }
        fn gather_ragged(&self, _: &[u64], _: &mut [u8], _: &[u64]) -> loaderx_store::Result<()> {
            Ok(())
        }
        fn lengths(&self, _: &[u64], _: &mut [u32]) -> loaderx_store::Result<()> {
            Ok(())
        }
        fn prefetch(&self, idxs: &[u64]) {
            self.asked.lock().unwrap().push(idxs.to_vec());
        }
        fn forget_prefetched(&self) {
            *self.forgotten.lock().unwrap() += 1;
        }
        fn with_view(
            &self,
            f: &mut dyn FnMut(&dyn Source) -> loaderx_store::Result<()>,
        ) -> loaderx_store::Result<()> {
            f(self)
        }
    }

    fn claim(sampler: &Sampler, step: u64, generation: u64) -> Claim {
        Claim {
            step,
            generation,
            sampler: sampler.clone(),
        }
    }

    /// The first index of each step requested ahead since the last look.
    fn steps_asked(source: &Recorder, sampler: &Sampler) -> Vec<u64> {
        let mut indices = vec![0u64; 4];
        let asked = std::mem::take(&mut *source.asked.lock().unwrap());
        asked
            .iter()
            .map(|idxs| {
                (0..1000 / 4)
                    .find(|&s| {
                        sampler.indices_at(s, &mut indices).unwrap();
                        indices == *idxs
                    })
                    .expect("a step's indices")
            })
            .collect()
    }

    #[test]
    fn a_claim_made_before_a_restore_requests_nothing_ahead() {
        let sampler = Sampler::new(1000, 4, Mode::Sequential, 7).unwrap();
        let source = Arc::new(Recorder::default());
        let shared = Shared {
            streams: vec![crate::Stream::new(
                "x",
                source.clone(),
                StreamKind::Fixed { item_len: 1 },
            )]
            .into_boxed_slice(),
            allocator: VecPool::new(),
            window: Window::new(sampler.clone(), 4).unwrap(),
            local_batch: 4,
            lookahead: 3,
            ahead: Mutex::default(),
        };
        shared.read_ahead(&claim(&sampler, 100, 0));
        assert_eq!(steps_asked(&source, &sampler), [101, 102, 103]);
        shared.read_ahead(&claim(&sampler, 101, 0));
        assert_eq!(steps_asked(&source, &sampler), [104]);
        // A restore to step 5: the window's generation moves on.
        let mut at = sampler.state();
        at.step = 5;
        shared.window.restore(&at).unwrap();
        shared.forget_ahead();
        assert_eq!(*source.forgotten.lock().unwrap(), 1);
        // A worker still on a claim of the old position asks for nothing
        // and moves nothing: the new position's steps are still requested.
        shared.read_ahead(&claim(&sampler, 102, 0));
        assert_eq!(steps_asked(&source, &sampler), Vec::<u64>::new());
        shared.read_ahead(&claim(&sampler, 5, 1));
        assert_eq!(steps_asked(&source, &sampler), [6, 7, 8]);
    }
}
