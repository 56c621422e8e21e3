//! Deleting records: the tail of the table is swapped into each hole, so the
//! index space stays dense. Only the table changes; bytes stay until `compact`.

use std::{collections::BTreeMap, sync::atomic::Ordering};

use loaderx_format::{RecordLoc, entry_offset};

use crate::{Codec, Error, Result, Store, storage::Storage};

impl<C: Codec, S: Storage> Store<C, S> {
    /// Removes the records at `idxs` (any order, duplicates allowed).
    ///
    /// Indices are processed in descending order and each hole is filled with
    /// the current last record, so afterwards the live records are exactly
    /// `0..len()` and surviving records may have new indices. Every index is
    /// checked before anything changes.
    pub fn delete(&mut self, idxs: &[u64]) -> Result<()> {
        if self.is_read_only() {
            return Err(Error::ReadOnly {
                path: self.path.clone(),
                op: "delete",
            });
        }
        if idxs.is_empty() {
            return Ok(());
        }
        let header = self.header();
        let len = u64::from(header.length);
        if let Some(&bad) = idxs.iter().find(|&&i| i >= len) {
            return Err(Error::IndexOutOfRange { index: bad, len });
        }
        let mut targets = idxs.to_vec();
        targets.sort_unstable_by(|a, b| b.cmp(a));
        targets.dedup();

        // Work out the final table first, then write only what changes.
        let mut filled: BTreeMap<u32, RecordLoc> = BTreeMap::new();
        let mut length = header.length;
        for &idx in &targets {
            let idx = idx as u32;
            length -= 1;
            if idx != length {
                let moved = match filled.get(&length) {
                    Some(loc) => *loc,
                    None => self.raw_entry(length)?,
                };
                filled.insert(idx, moved);
            }
        }
        filled.retain(|&slot, _| slot < length);

        let mut originals = Vec::with_capacity(filled.len());
        for &slot in filled.keys() {
            originals.push((slot, self.raw_entry(slot)?));
        }
        let result = filled
            .iter()
            .try_for_each(|(&slot, loc)| {
                self.write_meta(entry_offset(slot), &loc.encode(), "write table")
            })
            .and_then(|()| {
                let new = loaderx_format::Header { length, ..header };
                self.write_meta(0, &new.encode(), "write header")
            });
        if let Err(e) = result {
            // Put back what was overwritten; the header still has the old length.
            for (slot, loc) in originals {
                let _ = self.write_meta(entry_offset(slot), &loc.encode(), "restore table");
            }
            return Err(e);
        }
        self.len.store(length, Ordering::Release);
        Ok(())
    }
}
