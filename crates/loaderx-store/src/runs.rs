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
//! runs, and touches only the records themselves (and the lengths of the
//! chunk files the index spans, as every gather checks those it reads).
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

/// Chunk files an index may span for a covered gather to borrow them all
/// at once (a store written with the default four lanes fills four at a
/// time). Over more (a store of small records past 16 GiB with four
/// lanes), gathers take the general path, with their entries still read
/// from the index rather than the table (`batch_entries`).
pub(crate) const MAX_CHUNKS: usize = 8;

/// Buckets an index has at least, once it covers as many records: each
/// run's end splits a bucket, whose records are found by a search, so a
/// store of few long runs (four lanes' chunks) is cut finer than four
/// buckets a run, to keep those records rare (up to 96 KiB of tables).
const MIN_BUCKETS: u64 = 4096;

/// A bucket of [`RawRuns::direct`] that runs span.
const SPLIT: u64 = u64::MAX;

/// [`RawRuns::finder`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finder<'a> {
    direct: &'a [u64],
    buckets: &'a [u32],
    firsts: &'a [u64],
    places: &'a [(u32, u64)],
    shift: u32,
    len: u64,
}

impl Finder<'_> {
    /// `(slot, offset, first, len)` when the index holds one run: record
    /// `i` then lies at `offset + (i − first) · len` of the chunk in `slot`.
    pub(crate) fn single_run(self) -> Option<(usize, u64, u64, u64)> {
        match (self.places, self.firsts) {
            (&[(slot, offset)], &[first]) => Some((slot as usize, offset, first, self.len)),
            _ => None,
        }
    }

    /// [`RawRuns::find`].
    #[inline(always)]
    // Called once per record of a covered gather: it must inline into the
    // copy loop, or a gather of labels pays a call per record
    // (`docs/BENCHMARKS.md`, "What limits", small records).
    #[allow(clippy::inline_always)]
    pub(crate) fn find(self, index: u64) -> (usize, u64) {
        let b = (index >> self.shift) as usize;
        let start = self.direct[b];
        if start != SPLIT {
            let within = index & ((1 << self.shift) - 1);
            return (
                (start >> 32) as usize,
                (start & 0xffff_ffff) + within * self.len,
            );
        }
        let (lo, hi) = (self.buckets[b] as usize, self.buckets[b + 1] as usize);
        let k = lo + self.firsts[lo + 1..=hi].partition_point(|&first| first <= index);
        let (slot, offset) = self.places[k];
        (slot as usize, offset + (index - self.firsts[k]) * self.len)
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct RawRuns {
    /// The length of every indexed record (0 until the first is indexed).
    len: u32,
    /// The first record of each run, ascending (apart from the runs' places
    /// so the search reads only these).
    firsts: Vec<u64>,
    /// Each run's place: records `firsts[k] ..` lie in chunk
    /// `chunks[places[k].0]` from byte `places[k].1` on, `len` bytes apart.
    places: Vec<(u32, u64)>,
    /// The chunk ids runs lie in, by slot.
    chunks: Vec<u32>,
    /// Where the indexed records of each chunk (by slot) end.
    ends: Vec<u64>,
    /// The runs by buckets of `1 << shift` records: `buckets[b]` is the
    /// run holding record `b << shift` (the last entry: the last run), so
    /// the records of bucket `b` lie in runs `buckets[b] ..= buckets[b + 1]`
    /// and a search looks among those alone — usually one, when runs are
    /// at least a bucket long. Rebuilt after each step of indexing.
    buckets: Vec<u32>,
    /// For each bucket that lies in one run, where its first record is:
    /// the run's slot in the high 32 bits, the record's offset (a `u32`,
    /// as every offset in a chunk) in the low; [`SPLIT`] for a bucket that
    /// runs span. Most buckets lie in one run, and their records are found
    /// with one load and a multiply, without a search.
    direct: Vec<u64>,
    shift: u32,
    /// `covered` when the buckets were last built: an indexing step cut
    /// short by a panic leaves the index unused until the next one.
    bucketed: u64,
    /// Entries `0 .. covered` are indexed.
    covered: u64,
    /// An entry that breaks the pattern was met: no more indexing.
    given_up: bool,
}

impl RawRuns {
    /// Whether records `idxs` are all covered (and the index is in use).
    pub(crate) fn covers(&self, idxs: &[u64], head: &Head) -> bool {
        self.usable(head).is_some() && idxs.iter().all(|&i| i < self.covered)
    }

    /// The length of every indexed record, when the index is in use for a
    /// gather under `head`.
    pub(crate) fn usable(&self, head: &Head) -> Option<u32> {
        (!self.given_up
            && self.len > 0
            && self.covered <= head.length
            && self.covered == self.bucketed)
            .then_some(self.len)
    }

    /// Entries `0 .. covered()` are indexed.
    pub(crate) fn covered(&self) -> u64 {
        self.covered
    }

    /// The chunks the indexed records lie in, by slot, each with where its
    /// indexed records end.
    pub(crate) fn chunks(&self) -> impl ExactSizeIterator<Item = (u32, u64)> + '_ {
        self.chunks.iter().copied().zip(self.ends.iter().copied())
    }

    /// Where covered record `index` lies: its chunk's slot and its offset
    /// there (a search among the runs of its bucket).
    #[inline]
    pub(crate) fn find(&self, index: u64) -> (usize, u64) {
        self.finder().find(index)
    }

    /// [`find`](Self::find) for a loop over many records: the index's
    /// tables as plain slices, which the loop keeps at hand instead of
    /// loading them from the index for every record.
    pub(crate) fn finder(&self) -> Finder<'_> {
        Finder {
            direct: &self.direct,
            buckets: &self.buckets,
            firsts: &self.firsts,
            places: &self.places,
            shift: self.shift,
            len: u64::from(self.len),
        }
    }

    /// Rebuilds [`buckets`](Self::buckets) for the runs as they are now:
    /// four to eight buckets per run, and at least [`MIN_BUCKETS`] in all
    /// while there are records to fill them (at most 6 MiB with their
    /// direct places, for the most runs an index holds).
    fn bucket(&mut self) {
        self.buckets.clear();
        self.direct.clear();
        self.bucketed = self.covered;
        if self.covered == 0 {
            return;
        }
        let want = (4 * self.firsts.len() as u64).max(MIN_BUCKETS);
        self.shift = (self.covered / want).checked_ilog2().unwrap_or(0);
        let mut k = 0;
        let last = (self.covered - 1) >> self.shift;
        for b in 0..=last {
            let first = b << self.shift;
            while k + 1 < self.firsts.len() && self.firsts[k + 1] <= first {
                k += 1;
            }
            self.buckets.push(k as u32);
        }
        self.buckets.push((self.firsts.len() - 1) as u32);
        for (b, pair) in self.buckets.windows(2).enumerate() {
            let k = pair[0] as usize;
            let start = if pair[0] == pair[1] {
                let (slot, offset) = self.places[k];
                let first = (b as u64) << self.shift;
                let at = offset + (first - self.firsts[k]) * u64::from(self.len);
                u64::from(slot) << 32 | at
            } else {
                SPLIT
            };
            self.direct.push(start);
        }
    }

    /// Whether a gather should index the next step.
    pub(crate) fn wants_more(&self, head: &Head) -> bool {
        !self.given_up && self.covered < head.length
    }

    /// Where covered record `index` lies (raw, `len` bytes).
    pub(crate) fn loc(&self, index: u64) -> RecordLoc {
        let (slot, offset) = self.find(index);
        RecordLoc {
            // Each covered record's offset is its entry's (checked when it
            // was indexed), a u32.
            offset: offset as u32,
            phys_length: self.len,
            logic_length: self.len,
            chunk_id: self.chunks[slot],
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
        let len = u64::from(self.len);
        let follows = self.places.last().is_some_and(|&(slot, offset)| {
            let first = self.firsts[self.firsts.len() - 1];
            self.chunks[slot as usize] == loc.chunk_id
                && offset + (index - first) * len == u64::from(loc.offset)
        });
        let slot = if follows {
            self.places[self.places.len() - 1].0 as usize
        } else {
            if self.places.len() >= MAX_RUNS {
                self.given_up = true;
                return;
            }
            let slot = self
                .chunks
                .iter()
                .position(|&c| c == loc.chunk_id)
                .unwrap_or_else(|| {
                    self.chunks.push(loc.chunk_id);
                    self.ends.push(0);
                    self.chunks.len() - 1
                });
            self.firsts.push(index);
            self.places.push((slot as u32, u64::from(loc.offset)));
            slot
        };
        self.ends[slot] = self.ends[slot].max(u64::from(loc.offset) + len);
        self.covered = index + 1;
    }
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Indexes the next [`STEP`] entries below `head.length`, unless another
    /// thread is at it. A damaged entry is not this gather's error (it may
    /// not be among its records): the index gives up, and the gather that
    /// reads that entry reports it. A table file shorter than `head` says
    /// (cut behind the store's back) is not read at all (its entries would
    /// be read through the map): nothing is indexed, and the gather's
    /// general path names the file. `drained` as for
    /// [`check_meta_len`](Store::check_meta_len).
    pub(crate) fn index_raw_runs(&self, head: &Head, drained: Option<&crate::storage::Drained>) {
        if self.check_meta_len(head, drained).is_err() {
            return;
        }
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
        runs.bucket();
    }

    /// Forgets the index (the table is about to change in place).
    pub(crate) fn forget_raw_runs(&mut self) {
        *self
            .raw_runs
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = RawRuns::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records laid out in order in one chunk make one run, which the
    /// finder gives whole; a record elsewhere makes a second.
    #[test]
    fn one_run_is_given_whole_until_a_second_begins() {
        let mut runs = RawRuns::default();
        let loc = |offset: u32, chunk_id: u32| RecordLoc {
            offset,
            phys_length: 8,
            logic_length: 8,
            chunk_id,
            codec: CodecTag::RAW,
            crc: 0,
        };
        for i in 0..100u32 {
            runs.push(u64::from(i), &loc(40 + 8 * i, 7));
        }
        runs.bucket();
        let (slot, offset, first, len) = runs.finder().single_run().unwrap();
        assert_eq!((runs.chunks[slot], offset, first, len), (7, 40, 0, 8));
        for i in 0..100 {
            assert_eq!(runs.find(i), (slot, offset + (i - first) * len));
        }
        runs.push(100, &loc(0, 8));
        runs.bucket();
        assert!(runs.finder().single_run().is_none());
    }

    /// Runs of 1 to ~5,000 records in three chunks, in an irregular order,
    /// each a whole number of records: `find` must agree with a plain scan
    /// of the runs for every record, whatever the bucket size came out as,
    /// in buckets one run holds and in buckets runs split.
    #[test]
    fn find_agrees_with_a_scan_of_the_runs() {
        let mut runs = RawRuns::default();
        let mut state = 0x9E37_79B9u64;
        let mut ends = [0u32; 3];
        let mut index = 0u64;
        let mut truth = Vec::new();
        for r in 0..300u64 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let n = if r % 7 == 0 {
                1 + (state >> 33) % 5_000
            } else {
                1 + (state >> 60)
            };
            let chunk = ((state >> 20) % 3) as usize;
            for _ in 0..n {
                let loc = RecordLoc {
                    offset: ends[chunk],
                    phys_length: 8,
                    logic_length: 8,
                    chunk_id: chunk as u32 + 10,
                    codec: CodecTag::RAW,
                    crc: 0,
                };
                truth.push((chunk, u64::from(ends[chunk])));
                runs.push(index, &loc);
                ends[chunk] += 8;
                index += 1;
            }
            runs.bucket();
            assert!(!runs.given_up);
        }
        // Both ways of finding a record are exercised: buckets inside one
        // run (direct) and buckets runs split (a search).
        assert!(runs.direct.contains(&SPLIT));
        assert!(runs.direct.iter().any(|&d| d != SPLIT));
        for (i, &(chunk, offset)) in truth.iter().enumerate() {
            let (slot, found) = runs.find(i as u64);
            assert_eq!(
                (runs.chunks[slot] as usize - 10, found),
                (chunk, offset),
                "record {i}"
            );
        }
        let lent: Vec<(u32, u64)> = runs.chunks().collect();
        for (id, end) in lent {
            assert_eq!(end, u64::from(ends[id as usize - 10]));
        }
    }
}
