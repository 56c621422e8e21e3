//! Deleting records: the tail of the table is swapped into each hole, so the
//! index space stays dense. Only the table changes; bytes stay until `compact`.
//! All-or-nothing through the undo log (`undo.rs`).

use std::collections::BTreeMap;

use crate::files::Entry;

use crate::{
    Codec, Error, Result, Store,
    lock::StoreLock,
    storage::{FileId, Storage},
    undo,
};

impl<C: Codec, S: Storage> Store<C, S> {
    /// Removes the records at `idxs` (any order, duplicates allowed).
    ///
    /// Indices are processed in descending order and each hole is filled with
    /// the current last record, so afterwards the live records are exactly
    /// `0..len()` and surviving records may have new indices. Every index is
    /// checked before anything changes, and a delete interrupted by an I/O
    /// error or a crash is rolled back (now, or when the store is next opened
    /// for writing).
    ///
    /// Other handles may be reading the entries a delete rewrites, so it
    /// needs the store to itself: it fails with [`Error::Locked`] while
    /// another handle, in this or another process, has it open. Pending
    /// appends are committed first; the delete is durable when it returns.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::IndexOutOfRange`] (nothing deleted),
    /// [`Error::Locked`], or an I/O failure (the delete is rolled back).
    pub fn delete(&mut self, idxs: &[u64]) -> Result<()> {
        // Entries move in place: the index of raw records must not outlive them.
        self.forget_raw_runs();
        self.check_writable("delete")?;
        if idxs.is_empty() {
            return Ok(());
        }
        // A handle that is the writer sees the whole store: refuse bad
        // indices before committing anything. Any other handle may be
        // behind another writer's commits, so its indices are checked once
        // the store is ours and its view caught up.
        if self.lock.as_ref().is_none_or(StoreLock::is_writer) {
            let len = self.len();
            if let Some(&bad) = idxs.iter().find(|&&i| i >= len) {
                return Err(Error::IndexOutOfRange { index: bad, len });
            }
        }
        if self.layout().runs() {
            return self.exclusively(|store| store.delete_runs(idxs));
        }
        self.exclusively(|store| store.delete_exclusive(idxs))
    }

    /// The delete, with the store to ourselves and nothing pending. Each step
    /// is durable before the next starts: the undo log (and its name), then
    /// the table and header, then the log's removal (`docs/FORMAT.md`,
    /// "Delete").
    fn delete_exclusive(&mut self, idxs: &[u64]) -> Result<()> {
        let head = self.head();
        self.check_meta_len(&head, None)?;
        let len = head.length;
        if let Some(&bad) = idxs.iter().find(|&&i| i >= len) {
            return Err(Error::IndexOutOfRange { index: bad, len });
        }
        let mut targets = idxs.to_vec();
        targets.sort_unstable_by(|a, b| b.cmp(a));
        targets.dedup();

        // Work out the final table first, then write only what changes.
        let mut filled: BTreeMap<u64, Entry> = BTreeMap::new();
        let mut length = head.length;
        for &idx in &targets {
            length -= 1;
            if idx != length {
                let moved = match filled.get(&length) {
                    Some(entry) => *entry,
                    None => self.files.read_full(length)?,
                };
                filled.insert(idx, moved);
            }
        }
        filled.retain(|&slot, _| slot < length);
        let mut originals = Vec::with_capacity(filled.len());
        for &slot in filled.keys() {
            originals.push((slot, self.files.read_full(slot)?));
        }
        let log = undo::Log {
            head,
            entries: originals,
            units: Vec::new(),
        };
        self.write_undo(&log)?;

        let new = loaderx_format::Head { length, ..head };
        let applied = filled
            .iter()
            .try_for_each(|(&slot, entry)| self.files.write_full(slot, entry, "write table"))
            .and_then(|()| self.files.write_head(&new, "write header"))
            .and_then(|()| self.files.sync(FileId::Meta));
        if let Err(e) = applied {
            // Put back what was overwritten; if even that fails, the undo log
            // on disk will do it at the next writable open.
            let undone = undo::roll_back(&self.files, &log)
                .and_then(|()| self.files.sync(FileId::Meta))
                .and_then(|()| self.remove_undo());
            if undone.is_ok() {
                return Err(e);
            }
            self.poison(&e);
            return Err(e);
        }
        if let Err(e) = self.remove_undo() {
            // The log would undo this delete at the next open: say it failed.
            self.poison(&e);
            return Err(e);
        }
        *self
            .committed
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = new;
        self.frontier.publish_len(length);
        Ok(())
    }
}
