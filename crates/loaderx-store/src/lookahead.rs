//! Reading ahead: a gather's records requested before the gather, where
//! every read is a request to a server ([`Storage::fetches`]).

use crate::{Codec, Error, Result, Store, storage::FileId, storage::Storage};

impl<C: Codec, S: Storage> Store<C, S> {
    /// Starts reading records `idxs` for a gather expected soon (a loader's
    /// next batches), where the storage reads by requests: their table
    /// entries are read now, their records' bytes requested and kept by the
    /// storage, within its bound, for the gather that asks for them
    /// ([`Storage::prefetch`]). Does nothing on local storage. Indices out
    /// of range, and records past a damaged entry, are skipped: the gather
    /// refuses them.
    ///
    /// # Errors
    /// A closed store, or the table's read failing.
    pub fn prefetch(&self, idxs: &[u64]) -> Result<()> {
        if idxs.is_empty() || !self.files.fetches() {
            return Ok(());
        }
        self.check_usable()?;
        let head = self.head();
        self.check_meta_len(&head, None)?;
        if self.layout().runs() {
            // A run's records are read with their block when blocks are
            // checked: read the blocks ahead, not the records.
            let ranges =
                self.files
                    .runs_ahead_ranges(idxs, head.length, self.files.checks_blocks())?;
            self.files.prefetch(&ranges);
            return Ok(());
        }
        let mut entries = Vec::new();
        entries
            .try_reserve_exact(idxs.len())
            .map_err(|_| Error::OutOfMemory {
                bytes: (idxs.len() * std::mem::size_of::<loaderx_format::RecordLoc>()) as u64,
            })?;
        let fault = self.files.read_entries(idxs, head.length, &mut entries)?;
        let good = fault.map_or(entries.len(), |(at, _)| at);
        let ranges: Vec<(FileId, u64, usize)> = idxs
            .iter()
            .zip(&entries[..good])
            .filter(|&(&idx, loc)| idx < head.length && loc.phys_length > 0)
            .map(|(_, loc)| {
                (
                    FileId::Chunk(loc.chunk_id),
                    u64::from(loc.offset),
                    loc.phys_length as usize,
                )
            })
            .collect();
        self.files.prefetch(&ranges);
        Ok(())
    }

    /// Drops what [`prefetch`](Store::prefetch) started or holds and no
    /// gather has read yet.
    pub fn forget_prefetched(&self) {
        self.files.forget_prefetched();
    }

    /// Whether every read of this store is a request to a server (a store
    /// opened by URL): the case [`prefetch`](Store::prefetch) serves.
    pub fn reads_by_requests(&self) -> bool {
        self.files.fetches()
    }
}
