//! [`verify`](Store::verify) and [`damaged`](Store::damaged) over storage
//! whose every read is a request to a server ([`Storage::fetches`]): the
//! records are checked a batch at a time, each batch's entries and bytes
//! fetched together, so a scan costs a few requests per batch, not one
//! round trip per record.

use std::collections::HashMap;

use loaderx_format::{Head, RecordLoc};

use crate::{Codec, Error, Result, Store, storage::FileId, storage::Storage};

/// Records whose entries are read at once.
const ENTRIES_PER_BATCH: u64 = 4096;

/// Stored bytes fetched at once, at most (one record larger than this is
/// fetched alone).
const BYTES_PER_FETCH: u64 = 64 << 20;

impl<C: Codec, S: Storage> Store<C, S> {
    /// The records of `head` checked as `scan` checks them (entries
    /// against the format and the chunks' lengths `lens`, every record
    /// decoded with its checksum checked), in batches.
    pub(crate) fn scan_fetched(
        &self,
        head: &Head,
        lens: &HashMap<u32, u64>,
        stop_at_first: bool,
    ) -> Result<Vec<(u64, String)>> {
        let mut found = Vec::new();
        // A damage a record's own: collected, or the scan's end.
        let mut damaged = |index: u64, e: Error| -> Result<()> {
            match e {
                Error::Corrupt { .. } | Error::NotAStore { .. } if !stop_at_first => {
                    found.push((index, e.to_string()));
                    Ok(())
                }
                e => Err(e),
            }
        };
        let mut start = 0u64;
        while start < head.length {
            let idxs: Vec<u64> = (start..head.length.min(start + ENTRIES_PER_BATCH)).collect();
            let mut entries = Vec::with_capacity(idxs.len());
            let fault = self.files.read_entries(&idxs, head.length, &mut entries)?;
            let good = fault.as_ref().map_or(entries.len(), |(at, _)| *at);
            let mut sound: Vec<(u64, RecordLoc)> = Vec::with_capacity(good);
            for (&index, loc) in idxs.iter().zip(&entries[..good]) {
                let checked = self
                    .check_entry(index, loc, head)
                    .and_then(|()| self.check_chunk_end(index, loc, lens));
                match checked {
                    Ok(()) => sound.push((index, *loc)),
                    Err(e) => damaged(index, e)?,
                }
            }
            self.check_fetched(&sound, &mut damaged)?;
            start = match fault {
                // Past the damaged entry, one at a time from there; past
                // the whole block for a record of a run (its block could
                // not be checked: every record of it is damaged alike).
                Some((at, e)) => {
                    let index = idxs[at];
                    let block = if self.layout().runs() && self.files.checks_blocks() {
                        self.files.run_block_of(index)?
                    } else {
                        None
                    };
                    if let (Error::Corrupt { path, reason, .. }, Some((_, end))) = (&e, block) {
                        let (path, reason) = (path.clone(), reason.clone());
                        damaged(index, e)?;
                        for entry in index + 1..end {
                            let (path, reason) = (path.clone(), reason.clone());
                            damaged(
                                entry,
                                Error::Corrupt {
                                    path,
                                    entry,
                                    reason,
                                },
                            )?;
                        }
                        end
                    } else {
                        damaged(index, e)?;
                        index + 1
                    }
                }
                None => idxs.last().map_or(head.length, |&last| last + 1),
            };
        }
        Ok(found)
    }

    /// That record `index` (entry `loc`) ends within its chunk file, of
    /// length `lens[chunk]` when the scan began.
    pub(crate) fn check_chunk_end(
        &self,
        index: u64,
        loc: &RecordLoc,
        lens: &HashMap<u32, u64>,
    ) -> Result<()> {
        let have = lens.get(&loc.chunk_id).copied().unwrap_or(0);
        if loc.end() > have {
            return Err(Error::Corrupt {
                path: self.file_path(FileId::Chunk(loc.chunk_id)),
                entry: index,
                reason: format!(
                    "bytes end at {}, past the end of chunk file {}.zr ({have} bytes)",
                    loc.end(),
                    loc.chunk_id
                ),
            });
        }
        Ok(())
    }

    /// Fetches the stored bytes of `records` (at most `BYTES_PER_FETCH` at
    /// a time) and decodes each, its checksum checked.
    fn check_fetched(
        &self,
        records: &[(u64, RecordLoc)],
        damaged: &mut impl FnMut(u64, Error) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = Vec::new();
        let mut rest = records;
        while !rest.is_empty() {
            let mut bytes = 0u64;
            let take = rest
                .iter()
                .take_while(|(_, loc)| {
                    bytes += u64::from(loc.phys_length);
                    bytes <= BYTES_PER_FETCH
                })
                .count()
                .max(1);
            let (batch, later) = rest.split_at(take);
            rest = later;
            let ranges: Vec<(FileId, u64, usize)> = batch
                .iter()
                .map(|(_, loc)| {
                    (
                        FileId::Chunk(loc.chunk_id),
                        u64::from(loc.offset),
                        loc.phys_length as usize,
                    )
                })
                .collect();
            self.files.with_many_bytes(&ranges, "read", |fetched| {
                for ((index, loc), stored) in batch.iter().zip(fetched) {
                    // A table entry may claim up to 2 GiB for a record of a
                    // few stored bytes: the allocation may fail, never abort.
                    let need = loc.logic_length as usize;
                    scratch.clear();
                    scratch
                        .try_reserve_exact(need)
                        .map_err(|_| Error::OutOfMemory { bytes: need as u64 })?;
                    scratch.resize(need, 0);
                    if let Err(e) = self.decode_from(*index, loc, &mut scratch, true, Some(stored))
                    {
                        damaged(*index, e)?;
                    }
                }
                Ok(())
            })??;
        }
        Ok(())
    }
}
