//! [`Loader`]: the consumer's side — batches in order, recycling, state,
//! restore, and shutdown.

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use loaderx_sampler::{Sampler, SamplerState};

use crate::{Batch, BufferAllocator, LoaderBuilder, Result, Stream, VecPool, worker::Shared};

/// An endless, prefetching loader: batch after batch of every stream at the
/// sampler's indices, in sampler order.
///
/// All methods take `&self`, so one thread may [`close`](Loader::close)
/// while another waits in [`next`](Loader::next). With several consumers,
/// each batch goes to exactly one of them.
///
/// Errors of a batch (a failed gather, a record of the wrong size, …) are
/// returned in its place, in order, and consume its step: the loader stays
/// usable and the next call returns the following step. To retry a failed
/// step, [`restore`](Loader::restore) a state taken before it.
///
/// Dropping the loader closes it.
pub struct Loader<A: BufferAllocator = VecPool> {
    shared: Arc<Shared<A>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    num_workers: usize,
}

impl Loader<VecPool> {
    /// Starts configuring a loader drawing indices from `sampler`, from its
    /// current step on.
    pub fn builder(sampler: Sampler) -> LoaderBuilder<VecPool> {
        LoaderBuilder::new(sampler)
    }
}

impl<A: BufferAllocator> Loader<A> {
    pub(crate) fn from_parts(
        shared: Arc<Shared<A>>,
        workers: Vec<JoinHandle<()>>,
        num_workers: usize,
    ) -> Loader<A> {
        Loader {
            shared,
            workers: Mutex::new(workers),
            num_workers,
        }
    }

    /// The next batch in sampler order, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// The batch's own error (see the type docs), or
    /// [`Error::Closed`](crate::Error::Closed) once the loader is closed.
    pub fn next(&self) -> Result<Batch<A::Buffer>> {
        match self.shared.window.take(None)? {
            Some(batch) => Ok(batch),
            None => unreachable!("waiting without a deadline never times out"),
        }
    }

    /// Like [`Loader::next`], but gives up after `timeout` with `Ok(None)`,
    /// so a caller can check for interrupts between waits. The batch is not
    /// lost: the next call returns it.
    ///
    /// # Errors
    ///
    /// As [`Loader::next`].
    pub fn next_timeout(&self, timeout: Duration) -> Result<Option<Batch<A::Buffer>>> {
        self.shared.window.take(Instant::now().checked_add(timeout))
    }

    /// Gives a batch's buffers back to the allocator for reuse.
    pub fn recycle(&self, batch: Batch<A::Buffer>) {
        self.shared.release(batch);
    }

    /// The sampler state of the next batch [`Loader::next`] will return: a
    /// loader built from `Sampler::from_state` of it, or
    /// [`restore`](Loader::restore)d to it, continues with exactly that batch.
    pub fn state(&self) -> SamplerState {
        self.shared.window.state()
    }

    /// Continues from `state`: drops the batches prefetched so far, and the
    /// next batch is `state`'s step. As `Sampler::restore`, takes the seed
    /// and step from the state and keeps this loader's rank and world size.
    ///
    /// Batches that workers are gathering at the time are finished and then
    /// dropped, so for the length of one gather memory may exceed the
    /// `prefetch` bound by up to `num_workers` batches.
    ///
    /// # Errors
    ///
    /// The state belongs to another stream (`len`, batch size or mode
    /// differ), or the loader is closed.
    pub fn restore(&self, state: &SamplerState) -> Result<()> {
        let dropped = self.shared.window.restore(state)?;
        self.shared.discard(dropped);
        self.shared.forget_ahead();
        Ok(())
    }

    /// Stops the loader: wakes every waiting consumer (their call returns
    /// [`Error::Closed`](crate::Error::Closed)), drops the prefetched
    /// batches, and waits for the workers to exit. A worker in the middle of
    /// a gather finishes that gather first, so `close` takes at most about
    /// one gather; it never waits for a consumer. Idempotent.
    ///
    /// A source that needs a lock the caller holds (a binding's interpreter
    /// lock, say) must have it released around this call.
    pub fn close(&self) {
        let dropped = self.shared.window.close();
        self.shared.discard(dropped);
        // Held while joining, so a concurrent `close` returns only once the
        // workers are gone too.
        let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        let me = thread::current().id();
        for handle in workers.drain(..) {
            if handle.thread().id() != me {
                // A worker that panicked outside a batch has nothing to report.
                let _ = handle.join();
            }
        }
        // After the join: no worker requests more ahead now.
        self.shared.forget_ahead();
    }

    /// Whether [`Loader::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.window.is_closed()
    }

    /// Finished batches waiting to be taken (diagnostics; it changes as
    /// workers run).
    pub fn prefetched(&self) -> usize {
        self.shared.window.prefetched()
    }

    /// The streams, in column order.
    pub fn streams(&self) -> &[Stream] {
        &self.shared.streams
    }

    /// The allocator, e.g. to recycle a single column's buffer.
    pub fn allocator(&self) -> &A {
        &self.shared.allocator
    }

    /// Records per batch per stream: this rank's share of a global batch.
    pub fn local_batch_size(&self) -> usize {
        self.shared.local_batch
    }

    /// Number of worker threads.
    pub fn num_workers(&self) -> usize {
        self.num_workers
    }
}

impl<A: BufferAllocator> Drop for Loader<A> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<A: BufferAllocator> fmt::Debug for Loader<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loader")
            .field("streams", &self.shared.streams)
            .field("num_workers", &self.num_workers)
            .field("state", &self.state())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaders_and_batches_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Loader>();
        send::<Batch>();
        send_sync::<Stream>();
    }
}
