//! [`LoaderBuilder`]: the streams, sampler and settings of a loader, checked
//! before any thread starts.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    thread,
};

use loaderx_sampler::Sampler;

use crate::{
    BufferAllocator, Error, Loader, Result, Stream, StreamKind, VecPool,
    window::Window,
    worker::{self, Shared},
};

/// Configures a [`Loader`]; made by [`Loader::builder`].
///
/// Defaults: 4 workers, 4 batches of prefetch, a [`VecPool`] allocator (the
/// defaults of the Python `DataLoader`).
#[derive(Debug)]
pub struct LoaderBuilder<A: BufferAllocator = VecPool> {
    sampler: Sampler,
    streams: Vec<Stream>,
    num_workers: usize,
    prefetch: usize,
    lookahead: u64,
    allocator: A,
}

impl LoaderBuilder<VecPool> {
    /// A loader drawing batch indices from `sampler`, starting at its
    /// current step (so a sampler made with `Sampler::from_state` resumes a
    /// checkpoint).
    pub fn new(sampler: Sampler) -> LoaderBuilder<VecPool> {
        LoaderBuilder {
            sampler,
            streams: Vec::new(),
            num_workers: 4,
            prefetch: 4,
            lookahead: 0,
            allocator: VecPool::new(),
        }
    }
}

impl<A: BufferAllocator> LoaderBuilder<A> {
    /// Adds a stream; batches hold its column at this position.
    #[must_use]
    pub fn stream(mut self, stream: Stream) -> Self {
        self.streams.push(stream);
        self
    }

    /// Adds several streams, in order.
    #[must_use]
    pub fn streams(mut self, streams: impl IntoIterator<Item = Stream>) -> Self {
        self.streams.extend(streams);
        self
    }

    /// Number of worker threads (at least 1). Workers beyond `prefetch`
    /// would have nothing to do (at most `prefetch` batches are in the
    /// making at once), so at most `prefetch` are started.
    #[must_use]
    pub fn num_workers(mut self, num_workers: usize) -> Self {
        self.num_workers = num_workers;
        self
    }

    /// How many batches may be claimed or finished ahead of the consumer (at
    /// least 1). Memory is about `prefetch` batches, plus what the consumer holds.
    #[must_use]
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// How many steps past the one a worker claims have their records
    /// requested ahead ([`Source::prefetch`](crate::Source::prefetch); default 0): for
    /// stores read by requests to a server, so the records of the next
    /// batches are on their way while the current ones are gathered and
    /// consumed. The sources bound what they hold (a remote store's
    /// `lookahead_bytes`); local stores ignore it.
    #[must_use]
    pub fn lookahead(mut self, steps: u64) -> Self {
        self.lookahead = steps;
        self
    }

    /// Uses `allocator` for batch buffers.
    pub fn allocator<B: BufferAllocator>(self, allocator: B) -> LoaderBuilder<B> {
        LoaderBuilder {
            sampler: self.sampler,
            streams: self.streams,
            num_workers: self.num_workers,
            prefetch: self.prefetch,
            lookahead: self.lookahead,
            allocator,
        }
    }

    /// Checks the configuration and starts the workers.
    ///
    /// # Errors
    ///
    /// No streams, duplicate names, a fixed `item_len` of 0, streams of
    /// different lengths, a sampler drawing past the streams' length, zero
    /// workers or prefetch, a batch size or prefetch whose memory cannot be
    /// allocated ([`Error::SettingTooLarge`]), or a thread that would not
    /// start.
    pub fn build(self) -> Result<Loader<A>> {
        self.check()?;
        let local_batch = self.sampler.local_batch_size();
        // The indices of a batch, which every batch allocates: a size that
        // cannot be had fails here rather than in every batch.
        worker::batch_indices(local_batch)?;
        let started = self.num_workers.min(self.prefetch);
        let mut workers = Vec::new();
        workers
            .try_reserve_exact(started)
            .map_err(|_| Error::SettingTooLarge {
                setting: "num_workers",
                value: started as u64,
                what: "its thread handles",
                bytes: u64::MAX,
            })?;
        let shared = Arc::new(Shared {
            local_batch,
            window: Window::new(self.sampler, self.prefetch)?,
            streams: self.streams.into_boxed_slice(),
            allocator: self.allocator,
            lookahead: self.lookahead,
            ahead: Mutex::default(),
        });
        for i in 0..started {
            let for_worker = Arc::clone(&shared);
            let spawned = thread::Builder::new()
                .name(format!("loaderx-loader-{i}"))
                .spawn(move || worker::run(&for_worker));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    // Dropping the partial loader closes it and joins the
                    // workers already started.
                    drop(Loader::from_parts(shared, workers, self.num_workers));
                    return Err(Error::Spawn(e));
                }
            }
        }
        Ok(Loader::from_parts(shared, workers, self.num_workers))
    }

    fn check(&self) -> Result<()> {
        for (setting, value) in [
            ("num_workers", self.num_workers),
            ("prefetch", self.prefetch),
        ] {
            if value == 0 {
                return Err(Error::ZeroSetting { setting });
            }
        }
        let first = self.streams.first().ok_or(Error::NoStreams)?;
        let expected = first.source.len();
        let mut names = HashSet::new();
        for stream in &self.streams {
            if !names.insert(&*stream.name) {
                return Err(Error::DuplicateStream {
                    name: Arc::clone(&stream.name),
                });
            }
            if stream.kind == (StreamKind::Fixed { item_len: 0 }) {
                return Err(Error::ZeroItemLen {
                    stream: Arc::clone(&stream.name),
                });
            }
            let len = stream.source.len();
            if len != expected {
                return Err(Error::StreamLength {
                    stream: Arc::clone(&stream.name),
                    len,
                    expected,
                });
            }
        }
        if self.sampler.len() > expected {
            return Err(Error::SamplerLength {
                sampler_len: self.sampler.len(),
                stream_len: expected,
            });
        }
        Ok(())
    }
}
