//! A handle's index of where small raw records lie, so gathers of them skip
//! the record table.
//!
//! A gather of 8-byte labels spends most of its time on the table: per
//! record one entry to load (a cache miss of its own on a big table), its
//! checksum, its validation — then one 8-byte copy. Yet a store written by
//! appends lays its records out in order: record `i + 1` right after record
//! `i` in the same chunk file, until the chunk rolls over. So a handle
//! indexes the table once, as *runs*: record `first + k` of a run lies at
//! `offset + k · len` of the run's chunk, every record raw and `len` bytes.
//! A gather whose records are all covered computes their places from the
//! runs, and touches only the records themselves (and the chunk files'
//! lengths, as every gather does).
//!
//! What the index may hold: every entry it covers was read, checked against
//! its own checksum and validated (as a gather's entries are) when it was
//! indexed; entries below a handle's length do not change while the handle
//! is open except by its own `delete` and `compact` (which need every other
//! handle closed, and take `&mut self`: they drop the index). Appends only
//! add entries past the length, which a later gather indexes in turn.
//!
//! The index is built a step at a time, by gathers that found their batch
//! to be all small raw records of one length, [`STEP`] entries per gather,
//! so no gather pays for a whole table. A store whose records are not all
//! raw and of one small length — compressed, ragged, images, or records
//! written out of order often enough that runs would not stay few — is
//! given up on at the first entry that breaks the pattern: its gathers take
//! the table path as before. So does a handle that checks raw records'
//! checksums (`OpenOptions::check_raw`), which needs each entry's CRC.

use std::ops::Range;

use loaderx_format::{CodecTag, Head, RecordLoc};

use crate::{Codec, Store, storage::Storage};

/// Records longer than this are not indexed: copying one costs more than
/// reading its entry, so the table path is as fast.
pub(crate) const MAX_LEN: u32 = 16 << 10;

/// Entries a gather indexes at a time (about a millisecond of work).
const STEP: u64 = 1 << 16;

/// Runs an index may hold before it is given up on: beyond this the records
/// were not written in order, and searching the runs would cost what the
/// table does.
const MAX_RUNS: usize = 1 << 16;

/// Chunk files a covered batch may touch for [`RawRuns::place`] to place
/// it (a store written with the default four lanes fills four at a time).
pub(crate) const MAX_CHUNKS: usize = 8;

/// Records `first ..` (up to the next run, or the end of what is covered)
/// lie in chunk `chunks[slot]` from byte `offset` on, `len` bytes apart.
#[derive(Debug, Clone, Copy)]
struct Run {
    first: u64,
    slot: u32,
    offset: u64,
}

/// Where the records of a covered batch lie ([`RawRuns::place`]).
#[derive(Debug)]
pub(crate) struct Placed {
    /// The length of every record.
    pub(crate) len: u32,
    /// Each chunk the batch touches: its id and the span of its bytes the
    /// batch's records lie in (`start .. end`).
    pub(crate) chunks: Vec<(u32, u64, u64)>,
    /// Record `idxs[i]` lies at byte `at[i].1` of chunk `chunks[at[i].0]`.
    pub(crate) at: Vec<(u32, u64)>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct RawRuns {
    /// The length of every indexed record (0 until the first is indexed).
    len: u32,
    runs: Vec<Run>,
    /// The chunk ids runs lie in, by slot.
    chunks: Vec<u32>,
    /// Entries `0 .. covered` are indexed.
    covered: u64,
    /// An entry that breaks the pattern was met: no more indexing.
    given_up: bool,
}

impl RawRuns {
    /// Whether records `idxs` are all covered (and the index is in use).
    pub(crate) fn covers(&self, idxs: &[u64], head: &Head) -> bool {
        !self.given_up
            && self.len > 0
            && self.covered <= head.length
            && idxs.iter().all(|&i| i < self.covered)
    }

    /// Where each record of `idxs` lies, when the index covers them all and
    /// they lie in at most [`MAX_CHUNKS`] chunk files (else `None`): one
    /// search of the runs per record, no table entry read.
    pub(crate) fn place(&self, idxs: &[u64], head: &Head) -> Option<Placed> {
        if self.given_up || self.len == 0 || self.covered > head.length {
            return None;
        }
        let len = u64::from(self.len);
        // The chunks this batch touches, numbered in the order it meets
        // them: each one's slot in the index and the span of its bytes the
        // batch's records lie in.
        let mut slots = [0u32; MAX_CHUNKS];
        let mut spans = [(u64::MAX, 0u64); MAX_CHUNKS];
        let mut touched = 0;
        let mut at = Vec::new();
        at.try_reserve_exact(idxs.len()).ok()?;
        for &index in idxs {
            if index >= self.covered {
                return None;
            }
            let run = self.runs[self.runs.partition_point(|r| r.first <= index) - 1];
            let offset = run.offset + (index - run.first) * len;
            let b = match slots[..touched].iter().position(|&s| s == run.slot) {
                Some(b) => b,
                None if touched < MAX_CHUNKS => {
                    slots[touched] = run.slot;
                    touched += 1;
                    touched - 1
                }
                None => return None,
            };
            let span = &mut spans[b];
            *span = (span.0.min(offset), span.1.max(offset + len));
            at.push((b as u32, offset));
        }
        let chunks = (0..touched)
            .map(|b| (self.chunks[slots[b] as usize], spans[b].0, spans[b].1))
            .collect();
        Some(Placed {
            len: self.len,
            chunks,
            at,
        })
    }

    /// Whether a gather should index the next step.
    pub(crate) fn wants_more(&self, head: &Head) -> bool {
        !self.given_up && self.covered < head.length
    }

    /// Where covered record `index` lies (raw, `len` bytes).
    pub(crate) fn loc(&self, index: u64) -> RecordLoc {
        let k = self.runs.partition_point(|r| r.first <= index) - 1;
        let run = self.runs[k];
        let offset = run.offset + (index - run.first) * u64::from(self.len);
        let chunk_id = self.chunks[run.slot as usize];
        RecordLoc {
            // Each covered record's offset is its entry's (checked when it
            // was indexed), a u32.
            offset: offset as u32,
            phys_length: self.len,
            logic_length: self.len,
            chunk_id,
            codec: CodecTag::RAW,
            crc: 0,
        }
    }

    /// Takes entry `index` (the next one: `index == covered`) into the
    /// index, or gives up when it breaks the pattern.
    fn push(&mut self, index: u64, loc: &RecordLoc) {
        debug_assert_eq!(index, self.covered);
        if loc.codec != CodecTag::RAW
            || loc.logic_length == 0
            || loc.logic_length > MAX_LEN
            || (self.len != 0 && loc.logic_length != self.len)
        {
            self.given_up = true;
            return;
        }
        self.len = loc.logic_length;
        let follows = self.runs.last().is_some_and(|r| {
            self.chunks[r.slot as usize] == loc.chunk_id
                && r.offset + (index - r.first) * u64::from(self.len) == u64::from(loc.offset)
        });
        if !follows {
            if self.runs.len() >= MAX_RUNS {
                self.given_up = true;
                return;
            }
            let slot = self
                .chunks
                .iter()
                .position(|&c| c == loc.chunk_id)
                .unwrap_or_else(|| {
                    self.chunks.push(loc.chunk_id);
                    self.chunks.len() - 1
                });
            self.runs.push(Run {
                first: index,
                slot: slot as u32,
                offset: u64::from(loc.offset),
            });
        }
        self.covered = index + 1;
    }
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Indexes the next [`STEP`] entries below `head.length`, unless another
    /// thread is at it. A damaged entry is not this gather's error (it may
    /// not be among its records): the index gives up, and the gather that
    /// reads that entry reports it.
    pub(crate) fn index_raw_runs(&self, head: &Head) {
        let Ok(mut runs) = self.raw_runs.try_write() else {
            return;
        };
        // An index past `head.length` was built by a gather that took a
        // later head (appends on another thread): the entries below this
        // head are the same, so there is nothing to add from this one.
        // Only `delete` and `compact` change entries in place, and they
        // forget the index.
        if !runs.wants_more(head) {
            return;
        }
        let range: Range<u64> = runs.covered..head.length.min(runs.covered + STEP);
        let mut locs = Vec::new();
        let read = self.files.read_entry_range(range.clone(), &mut locs);
        let Ok(fault) = read else {
            runs.given_up = true;
            return;
        };
        for (index, loc) in range.zip(&locs) {
            if self.check_entry(index, loc, head).is_err() {
                runs.given_up = true;
            }
            runs.push(index, loc);
            if runs.given_up {
                return;
            }
        }
        if fault.is_some() {
            runs.given_up = true;
        }
    }

    /// Forgets the index (the table is about to change in place).
    pub(crate) fn forget_raw_runs(&mut self) {
        *self
            .raw_runs
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = RawRuns::default();
    }
}
