//! What a worker thread does: claim a step, compute its indices, gather every
//! stream into fresh buffers, and drop the batch into the reorder window.

use std::{
    panic::{self, AssertUnwindSafe},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
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
    /// The first step not requested ahead yet.
    pub(crate) ahead_to: AtomicU64,
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
    fn read_ahead(&self, claim: &Claim) {
        if self.lookahead == 0 {
            return;
        }
        let last = claim.step.saturating_add(self.lookahead);
        let from = self
            .ahead_to
            .fetch_max(last.saturating_add(1), Ordering::AcqRel)
            .max(claim.step.saturating_add(1));
        if from > last {
            return;
        }
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
        self.ahead_to.store(0, Ordering::Release);
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
