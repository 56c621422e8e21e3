//! Gathering records into a caller's buffer: validate everything first, then
//! decode in parallel straight into the destination.
//!
//! Unsafe here (allowed by name in `lib.rs`): the workers write each
//! record into its place in the destination through
//! [`SharedDst::range_mut`]. Sound because, before any worker starts, every
//! place was checked to lie inside the destination (`Placement::at`) and
//! not to overlap another (strided slots are at least as wide as their
//! records; explicit offsets pass `check_disjoint`), each record belongs to
//! one range of the batch, handed to one worker, and the destination is
//! borrowed mutably for the whole gather.

use std::sync::atomic::{AtomicBool, Ordering};

use loaderx_format::{CodecTag, Head, RecordLoc};

use crate::{
    Codec, Error, Result, Store,
    parallel::{self, SharedDst},
    runs::{Finder, MAX_CHUNKS},
    storage::{FileId, Storage},
};

/// Batches at least this long touch their table entries ahead of decoding
/// them (`Files::prefetch_entries`).
const PREFETCH_AT_LEAST: usize = 8;

/// Batches of at most this many stored bytes in all also fetch their
/// records' cache lines ahead of copying them (`Files::prefetch_records`):
/// for an 8-byte label the copy is one cache miss, and taken one after
/// another those misses were most of the gather. Larger batches would push
/// their own first lines out of the cache before they are copied.
const PREFETCH_RECORDS_UP_TO: u64 = 512 << 10;

/// How many records ahead of the copy `copy_from_spans` asks for lines.
const PREFETCH_DISTANCE: usize = 16;

/// Records a covered gather finds before it copies them
/// (`gather_covered`).
const COPY_BLOCK: usize = 32;

/// Bytes of records a covered gather's block asks for before copying them:
/// a block of 2 KiB records that asked for all of theirs would push its
/// own first lines out of the L1 cache (32 KiB or more) before the copy.
const PREFETCH_BLOCK_BYTES: usize = 16 << 10;

/// Chunks a batch of raw records may lie in for `copy_raw_runs` to borrow
/// each chunk's map once (finding a record's chunk is a linear search).
const MAX_SPANS: usize = 32;

/// One record for [`Store::copy_from_spans`]: `len` bytes at byte `offset`
/// of the chunk in span `slot`, copied to byte `at` of the destination.
#[derive(Debug, Clone, Copy)]
struct SmallCopy {
    slot: u32,
    offset: u64,
    at: usize,
    len: usize,
}

/// `dst.copy_from_slice(src)`, without a call into `memcpy` for the sizes
/// of scalar records (a label is one 8-byte load and store).
#[inline]
fn copy_small(dst: &mut [u8], src: &[u8]) {
    match (dst.len(), src.len()) {
        (8, 8) => dst[..8].copy_from_slice(&src[..8]),
        (4, 4) => dst[..4].copy_from_slice(&src[..4]),
        (16, 16) => dst[..16].copy_from_slice(&src[..16]),
        _ => dst.copy_from_slice(src),
    }
}

/// Copies the records `idxs` of one length from the chunk maps `maps` to
/// `out`, `stride` bytes apart: `N` bytes each, or `out`'s length less
/// `stride` times the others when `N` is 0 (a length with no copy of its
/// own). `false` as soon as `finder` places a record outside its chunk's
/// map (a broken index; records before it may have been written).
///
/// A block's records (up to [`COPY_BLOCK`], and [`PREFETCH_BLOCK_BYTES`]
/// of them) are found first, and their lines asked for when `prefetch`;
/// then copied. A prefetch does not hold up the instructions
/// after it, so the first loop has the block's cache misses in flight at
/// once; finding a record takes some thirty instructions, and with the
/// copy in the same loop only a few records' misses fit in the processor's
/// window. Two loops are what keeps a gather of scalar labels bound by
/// memory, not by misses taken one at a time (`docs/BENCHMARKS.md`, "What
/// limits", small records).
#[inline]
fn copy_found<const N: usize>(
    finder: Finder<'_>,
    maps: &[&[u8]],
    idxs: &[u64],
    out: &mut [u8],
    stride: usize,
    prefetch: bool,
) -> bool {
    // A store written in order into one chunk (one run): each record's
    // place is a multiply, with no table to look in.
    if let Some((slot, start, first, len)) = finder.single_run() {
        let find = move |i: u64| (slot, start + (i - first) * len);
        return copy_found_with::<N>(find, maps, idxs, out, stride, prefetch);
    }
    copy_found_with::<N>(|i| finder.find(i), maps, idxs, out, stride, prefetch)
}

/// [`copy_found`], each record's chunk slot and offset given by `find`.
#[inline]
fn copy_found_with<const N: usize>(
    find: impl Fn(u64) -> (usize, u64),
    maps: &[&[u8]],
    idxs: &[u64],
    out: &mut [u8],
    stride: usize,
    prefetch: bool,
) -> bool {
    let len = if N == 0 {
        out.len() - (idxs.len() - 1) * stride
    } else {
        N
    };
    let block_len = (PREFETCH_BLOCK_BYTES / len).clamp(1, COPY_BLOCK);
    let mut srcs: [&[u8]; COPY_BLOCK] = [&[]; COPY_BLOCK];
    for (block, at) in idxs
        .chunks(block_len)
        .zip((0..).step_by(block_len * stride))
    {
        for (src, &i) in srcs.iter_mut().zip(block) {
            let (slot, offset) = find(i);
            let found = usize::try_from(offset)
                .ok()
                .and_then(|o| maps.get(slot)?.get(o..o.checked_add(len)?));
            let Some(found) = found else {
                return false;
            };
            if prefetch {
                if N > 0 && N <= 16 {
                    // One line: a scalar record sits inside one when its
                    // offset is a multiple of its size, as appends lay
                    // records of one size out.
                    crate::hints::prefetch(std::iter::once(&found[..1]));
                } else {
                    crate::hints::prefetch(std::iter::once(found));
                }
            }
            *src = found;
        }
        for (k, src) in srcs[..block.len()].iter().enumerate() {
            let o = at + k * stride;
            if N > 0 {
                out[o..o + N].copy_from_slice(&src[..N]);
            } else {
                copy_small(&mut out[o..o + len], src);
            }
        }
    }
    true
}

/// Where record `i` of a gather lands in the destination.
#[derive(Debug, Clone, Copy)]
enum Placement<'a> {
    /// At `i · stride`; each record must fit in its slot.
    Strided(usize),
    /// At `i · item_len`; each record must be exactly `item_len` bytes.
    Exact(usize),
    /// At `offsets[i]`; ranges must not overlap.
    Offsets(&'a [u64]),
    /// At `offsets[i]` (`Bounded(offsets, bounds)`), each record at most
    /// `bounds[i]` bytes; the ranges `offsets[i] .. + bounds[i]` inside
    /// the destination and disjoint (checked by the caller,
    /// [`gather_ragged_spread`], for the batch of all its stores).
    Bounded(&'a [u64], &'a [u32]),
    /// At `slots[i] · item_len` (`Slots(slots, item_len)`), each record
    /// exactly `item_len` bytes; the slots are distinct (the caller's
    /// promise: [`Store::gather_exact_slots`]).
    Slots(&'a [usize], usize),
}

impl Placement<'_> {
    /// Where record `idx` (the `i`-th of the batch) lands in a destination
    /// of `dst_len` bytes, refusing a record that does not fit its place.
    fn at<C: Codec, S: Storage>(
        self,
        store: &Store<C, S>,
        i: usize,
        idx: u64,
        loc: &RecordLoc,
        dst_len: usize,
    ) -> Result<usize> {
        let len = u64::from(loc.logic_length);
        let at = match self {
            Placement::Strided(stride) => {
                if len > stride as u64 {
                    return Err(Error::BufferTooSmall {
                        what: "destination slot (stride)",
                        position: i,
                        need: len,
                        have: stride as u64,
                    });
                }
                (i as u64).checked_mul(stride as u64)
            }
            Placement::Exact(item_len) | Placement::Slots(_, item_len) => {
                if len != item_len as u64 {
                    return Err(Error::RecordLength {
                        path: store.path().to_path_buf(),
                        index: idx,
                        position: i,
                        expected: item_len,
                        found: loc.logic_length,
                    });
                }
                let slot = match self {
                    Placement::Slots(slots, ..) => slots[i],
                    _ => i,
                };
                (slot as u64).checked_mul(item_len as u64)
            }
            Placement::Offsets(offsets) => Some(offsets[i]),
            Placement::Bounded(offsets, bounds) => {
                if len > u64::from(bounds[i]) {
                    return Err(Error::BufferTooSmall {
                        what: "destination range (the record's length as read before)",
                        position: i,
                        need: len,
                        have: u64::from(bounds[i]),
                    });
                }
                Some(offsets[i])
            }
        };
        let end = at.and_then(|a| a.checked_add(len));
        match (at, end) {
            (Some(at), Some(end)) if end <= dst_len as u64 => Ok(at as usize),
            _ => Err(Error::BufferTooSmall {
                what: "destination",
                position: i,
                need: end.unwrap_or(u64::MAX),
                have: dst_len as u64,
            }),
        }
    }
}

/// Relative cost of producing one byte of a record with each codec, in units
/// of copying a raw byte, for deciding whether a batch is worth sharing with
/// the pool: the ratios of their per-core decode speeds to a copy's, in
/// round figures (the decode rows of `docs/bench/rust.md`, "Store").
fn decode_cost(codec: CodecTag) -> u64 {
    match codec {
        CodecTag::RAW => 1,
        CodecTag::LZ4 => 4,
        CodecTag::ZSTD | CodecTag::ZSTD_DICT => 20,
        _ => 64,
    }
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Decodes record `idxs[i]` into `dst[i · stride ..]` for every `i`.
    ///
    /// Every index and destination range is validated before anything is
    /// written; then records are decoded in parallel (small batches on the
    /// calling thread) with no intermediate copy.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`], [`Error::BufferTooSmall`] when a record does
    /// not fit its slot or `dst`, [`Error::Corrupt`] for a damaged entry or
    /// record; `dst` is untouched unless every index and place passed its
    /// check (a record found damaged while decoding, or a read that fails,
    /// leaves the records decoded before it written).
    pub fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        // SAFETY: `dst` is borrowed exclusively for the whole call.
        unsafe { self.gather_placed(idxs, &SharedDst::new(dst), Placement::Strided(stride), None) }
    }

    /// Decodes record `idxs[i]` into `dst[i · item_len ..]` for every `i`,
    /// where every record must be exactly `item_len` bytes: a record of
    /// another size fails the whole call with [`Error::RecordLength`]
    /// (code -6) before anything is written, so a typed batch never holds a
    /// half-filled or stale item. Sizes are checked while the batch is
    /// validated, at no extra cost over [`gather`](Store::gather).
    ///
    /// # Errors
    /// As [`gather`](Self::gather), plus [`Error::RecordLength`].
    pub fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], item_len: usize) -> Result<()> {
        // SAFETY: `dst` is borrowed exclusively for the whole call.
        unsafe { self.gather_placed(idxs, &SharedDst::new(dst), Placement::Exact(item_len), None) }
    }

    /// [`gather_exact`](Self::gather_exact) into slots of a destination
    /// other calls write too: record `idxs[i]` into the `item_len` bytes at
    /// `slots[i] · item_len` of `dst` (a collection's parts filling one
    /// batch side by side).
    ///
    /// The chunks' lengths are checked against `drained` (one drain of
    /// the file watches for the whole batch).
    ///
    /// # Safety
    /// The slots are distinct, and no other thread reads or writes their
    /// bytes while this runs (their bounds are checked here); `dst`
    /// outlives the call.
    ///
    /// # Errors
    /// As [`gather_exact`](Self::gather_exact); the slots are untouched
    /// unless every check passed.
    pub(crate) unsafe fn gather_exact_slots(
        &self,
        idxs: &[u64],
        dst: &SharedDst,
        slots: &[usize],
        item_len: usize,
        drained: &crate::storage::Drained,
    ) -> Result<()> {
        Error::check_len("slots", idxs.len(), slots.len())?;
        // SAFETY: this function's contract.
        if unsafe { self.gather_covered_slots(idxs, dst, slots, item_len, drained)? } {
            return Ok(());
        }
        // SAFETY: this function's contract (the slots' bytes are this
        // call's alone, and `dst` outlives it).
        unsafe { self.gather_placed(idxs, dst, Placement::Slots(slots, item_len), Some(drained)) }
    }

    /// [`gather_exact_slots`](Self::gather_exact_slots) from the handle's
    /// index of small raw records (`runs.rs`), indexing the store first
    /// when it has not been (a collection's part is often a few records,
    /// each batch asking for one or two: the fixed cost of the table path,
    /// paid per part, would cost more than the copies). Every chunk file
    /// the index spans is checked against its length, then borrowed with
    /// the others at once; each record is found in the runs and copied to
    /// its slot. `false`, with nothing written, when the index does not
    /// cover the records or cannot serve them (the general path takes
    /// them then, and names what is wrong).
    ///
    /// # Safety
    /// As [`gather_exact_slots`](Self::gather_exact_slots).
    unsafe fn gather_covered_slots(
        &self,
        idxs: &[u64],
        dst: &SharedDst,
        slots: &[usize],
        item_len: usize,
        drained: &crate::storage::Drained,
    ) -> Result<bool> {
        if self.files.fetches() || (self.layout().checksums() && self.check_raw) {
            return Ok(false);
        }
        let fits = |&slot: &usize| {
            slot.checked_add(1)
                .and_then(|n| n.checked_mul(item_len))
                .is_some_and(|end| end <= dst.len())
        };
        if !slots.iter().all(fits) {
            return Ok(false);
        }
        self.check_usable()?;
        let head = self.head();
        // Records read with `pread` (`copy_reads_at`) take the general path,
        // as in `gather_covered`.
        let covered = |runs: &crate::runs::RawRuns| {
            runs.usable(&head).map(|len| len as usize) == Some(item_len)
                && (item_len as u64) < parallel::copy_reads_at()
                && runs.chunks().len() <= MAX_CHUNKS
                && idxs.iter().all(|&i| i < runs.covered())
        };
        let Some(mut runs) = runs_now(&self.raw_runs) else {
            return Ok(false);
        };
        if !covered(&runs) {
            if !runs.wants_more(&head) {
                return Ok(false);
            }
            drop(runs);
            self.index_raw_runs(&head, Some(drained));
            match runs_now(&self.raw_runs) {
                Some(now) if covered(&now) => runs = now,
                _ => return Ok(false),
            }
        }
        let Some(ranges) = self.indexed_chunks(&runs, Some(drained)) else {
            return Ok(false);
        };
        let ranges = &ranges[..runs.chunks().len()];
        let finder = runs.finder();
        let copied = self.files.with_many_bytes(ranges, "read", |maps| {
            let mut found = Vec::new();
            found.try_reserve_exact(idxs.len()).ok()?;
            // Every record is found before any is written: a broken index
            // (which its invariants rule out) leaves the slots untouched.
            for &i in idxs {
                let (chunk, offset) = finder.find(i);
                let at = usize::try_from(offset).ok()?;
                found.push(maps.get(chunk)?.get(at..at.checked_add(item_len)?)?);
            }
            for (src, &slot) in found.iter().zip(slots) {
                // SAFETY: the slot lies inside `dst` (`fits`), no other
                // thread touches it (this function's contract), and it is
                // `item_len` bytes, as is `src`.
                let out = unsafe { dst.range_mut(slot * item_len, item_len) };
                copy_small(out, src);
            }
            Some(())
        });
        Ok(matches!(copied, Ok(Some(()))))
    }

    /// Decodes record `idxs[i]` into `dst[offsets[i] ..]` for every `i`.
    /// Destination ranges must lie inside `dst` and must not overlap.
    ///
    /// # Errors
    /// As [`gather`](Self::gather), plus [`Error::LengthMismatch`] and
    /// [`Error::OverlappingDestinations`].
    pub fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
        Error::check_len("offsets", idxs.len(), offsets.len())?;
        // SAFETY: `dst` is borrowed exclusively for the whole call.
        unsafe {
            self.gather_placed(
                idxs,
                &SharedDst::new(dst),
                Placement::Offsets(offsets),
                None,
            )
        }
    }

    /// Every gather: records `idxs` into their places in `dst`. With
    /// `drained`, file lengths are checked against that drain of the file
    /// watches (a batch spread over stores takes one for all of them).
    ///
    /// # Safety
    /// No other thread reads or writes the bytes of `dst` that `place`
    /// puts records in while this runs (an exclusive borrow made `dst`, or
    /// the caller gave this call those bytes alone: its slots, or its
    /// bounded ranges); `dst` outlives the call. The places themselves are
    /// checked here (inside `dst`, and apart from each other).
    unsafe fn gather_placed(
        &self,
        idxs: &[u64],
        dst: &SharedDst,
        place: Placement<'_>,
        drained: Option<&crate::storage::Drained>,
    ) -> Result<()> {
        self.check_usable()?;
        if idxs.is_empty() {
            return Ok(());
        }
        let head = self.head();
        let oom = |bytes: usize| Error::OutOfMemory {
            bytes: bytes as u64,
        };
        // Raw records copied from the map (not read with pread, not checked):
        // a batch of only those takes `copy_raw_runs`.
        let raw_checked = self.layout().checksums() && self.check_raw;
        if !raw_checked
            && idxs.len() >= PREFETCH_AT_LEAST
            && self.gather_covered(idxs, dst, place, &head)?
        {
            return Ok(());
        }
        let mut locs: Vec<(usize, RecordLoc)> = Vec::new();
        locs.try_reserve_exact(idxs.len())
            .map_err(|_| oom(idxs.len() * std::mem::size_of::<(usize, RecordLoc)>()))?;
        let mut decoded: Vec<RecordLoc> = Vec::new();
        decoded
            .try_reserve_exact(idxs.len())
            .map_err(|_| oom(idxs.len() * std::mem::size_of::<RecordLoc>()))?;
        // Blocks of runs a store read by requests fetched to check them.
        let mut blocks = Vec::new();
        let (indexed, mut fault) =
            self.batch_entries(idxs, &head, raw_checked, &mut decoded, &mut blocks, drained)?;
        let copy_reads_at = parallel::copy_reads_at();
        let mut all_mapped_raw = !raw_checked;
        let mut stored = 0u64;
        let mut work = 0u64;
        for (i, &idx) in idxs.iter().enumerate() {
            if idx >= head.length {
                return Err(Error::IndexOutOfRange {
                    index: idx,
                    len: head.length,
                });
            }
            if let Some((_, e)) = fault.take_if(|(at, _)| *at == i) {
                return Err(e);
            }
            let loc = decoded[i];
            if !indexed {
                self.check_entry(idx, &loc, &head)?;
            }
            let len = u64::from(loc.logic_length);
            stored += u64::from(loc.phys_length);
            all_mapped_raw &=
                loc.codec == CodecTag::RAW && u64::from(loc.phys_length) < copy_reads_at;
            locs.push((place.at(self, i, idx, &loc, dst.len())?, loc));
            work += len * decode_cost(loc.codec);
        }
        if let Placement::Offsets(_) = place {
            check_disjoint(&locs)?;
        }
        self.check_chunks_still_hold(idxs, &locs, drained)?;
        if self.files.fetches() {
            return self.decode_fetched_batch(idxs, &locs, dst, work, &blocks);
        }
        let prefetch = idxs.len() >= PREFETCH_AT_LEAST && stored <= PREFETCH_RECORDS_UP_TO;
        if prefetch && !all_mapped_raw {
            self.files.prefetch_records(locs.iter().map(|(_, l)| l));
        }

        let shared = dst;
        parallel::for_ranges(idxs.len(), work, |range| {
            if all_mapped_raw {
                return self.copy_raw_runs(&locs[range], shared, prefetch);
            }
            for i in range {
                let (at, loc) = &locs[i];
                // SAFETY: `at + logic_length` was checked against the buffer
                // above, and the ranges of distinct records do not overlap
                // (strided slots are at least as wide as their records;
                // explicit offsets passed `check_disjoint`; bounded ones lie
                // inside ranges the caller checked, their records no
                // longer than their bounds). Each index `i`
                // belongs to exactly one range handed to one worker, and
                // `dst` outlives this call.
                let out = unsafe { shared.range_mut(*at, loc.logic_length as usize) };
                self.decode_into(idxs[i], loc, out)?;
            }
            Ok(())
        })?;
        // A batch of small raw records of one length: index the next step of
        // the table, so later gathers can skip it.
        if !indexed && all_mapped_raw && idxs.len() >= PREFETCH_AT_LEAST {
            let len = locs[0].1.logic_length;
            if len <= crate::runs::MAX_LEN && locs.iter().all(|(_, l)| l.logic_length == len) {
                self.index_raw_runs(&head, drained);
            }
        }
        Ok(())
    }
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// The rest of a gather from storage that [`fetches`](Storage::fetches):
    /// the records' exact stored ranges handed over at once (but those that
    /// lie in one of `blocks`, the run blocks the table read fetched and
    /// checked, taken from there), then each decoded from its bytes into
    /// its validated place as its request arrives (the records of one
    /// request in parallel when worth it), checked as any record is, so
    /// the fetched bytes of a whole batch are never held at once. A
    /// request that fails ends the gather with its error; else, of records
    /// that fail their check or decode, the first in `idxs` is reported.
    /// Either way the records decoded before stay written in `dst`.
    fn decode_fetched_batch(
        &self,
        idxs: &[u64],
        locs: &[(usize, RecordLoc)],
        dst: &SharedDst,
        work: u64,
        blocks: &[(FileId, u64, Vec<u8>)],
    ) -> Result<()> {
        let by_start: std::collections::BTreeMap<(FileId, u64), &[u8]> = blocks
            .iter()
            .map(|(file, offset, bytes)| ((*file, *offset), bytes.as_slice()))
            .collect();
        let in_block = |l: &RecordLoc| -> Option<&[u8]> {
            let (file, at, len) = (
                FileId::Chunk(l.chunk_id),
                u64::from(l.offset),
                u64::from(l.phys_length),
            );
            let (&(f, from), bytes) = by_start.range(..=(file, at)).next_back()?;
            let within = at - from;
            (f == file && within + len <= bytes.len() as u64)
                .then(|| &bytes[within as usize..(within + len) as usize])
        };
        // Each record is either held in a block (its position in `locs`,
        // and its bytes there) or asked for (its position, and its stored
        // range).
        let mut held: Vec<usize> = Vec::new();
        let mut held_bytes: Vec<&[u8]> = Vec::new();
        let mut asked: Vec<usize> = Vec::new();
        let mut ranges: Vec<(FileId, u64, usize)> = Vec::new();
        for (i, (_, l)) in locs.iter().enumerate() {
            if let Some(bytes) = in_block(l) {
                held.push(i);
                held_bytes.push(bytes);
            } else {
                asked.push(i);
                ranges.push((
                    FileId::Chunk(l.chunk_id),
                    u64::from(l.offset),
                    l.phys_length as usize,
                ));
            }
        }
        let shared = dst;
        let first: std::sync::Mutex<Option<(usize, Error)>> = std::sync::Mutex::new(None);
        // Decodes the records at `positions` of `locs` from `bytes`, one
        // each; keeps the failure first in `idxs`.
        let decode = |positions: &[usize], bytes: &[&[u8]]| {
            let part = (work / locs.len().max(1) as u64).saturating_mul(positions.len() as u64);
            let _ = parallel::for_ranges(positions.len(), part, |range| {
                for k in range {
                    let i = positions[k];
                    let (at, loc) = &locs[i];
                    // SAFETY: as in `gather_placed`: `at + logic_length` lies
                    // inside the destination, distinct records' ranges do not
                    // overlap, and each record is decoded once: the ones in
                    // blocks here, every other one in the one group the
                    // storage hands it over in (`Files::with_bytes_as_fetched`
                    // passes on no range twice, whatever the storage does),
                    // and within a call each index belongs to one range
                    // handed to one worker.
                    let out = unsafe { shared.range_mut(*at, loc.logic_length as usize) };
                    if let Err(e) = self.decode_fetched(idxs[i], loc, bytes[k], out) {
                        let mut first = first
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if first.as_ref().is_none_or(|(j, _)| i < *j) {
                            *first = Some((i, e));
                        }
                    }
                }
                Ok(())
            });
        };
        decode(&held, &held_bytes);
        // The bytes as the storage holds them (no copy of a record).
        self.files
            .with_bytes_as_fetched(&ranges, "read", &mut |group, bytes| {
                let positions: Vec<usize> = group.iter().map(|&g| asked[g]).collect();
                decode(&positions, bytes);
            })?;
        match first
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// The entries of `idxs` into `decoded`: from the handle's index of
    /// small raw records when it covers the batch (`runs.rs`; they were
    /// checked when indexed: `true`), else from the table (`false`, with the
    /// first entry that failed to decode, by position).
    fn batch_entries(
        &self,
        idxs: &[u64],
        head: &Head,
        raw_checked: bool,
        decoded: &mut Vec<RecordLoc>,
        blocks: &mut Vec<(FileId, u64, Vec<u8>)>,
        drained: Option<&crate::storage::Drained>,
    ) -> Result<(bool, Option<(usize, Error)>)> {
        // `try_read`: a gather never waits for the index (another thread
        // may be extending it, or, in a forked child, a thread of the parent
        // may have been extending it at the fork and never will finish).
        if !raw_checked
            && idxs.len() >= PREFETCH_AT_LEAST
            && let Some(runs) = runs_now(&self.raw_runs)
            && runs.covers(idxs, head)
        {
            decoded.extend(idxs.iter().map(|&i| runs.loc(i)));
            return Ok((true, None));
        }
        self.check_meta_len(head, drained)?;
        Ok((
            false,
            self.files
                .read_entries_keeping(idxs, head.length, decoded, blocks)?,
        ))
    }

    /// The ranges to borrow for a gather the run index covers: each chunk
    /// file it spans (at most [`MAX_CHUNKS`]), up to where its indexed
    /// records end, in the index's order. `None` when a file no longer
    /// holds them (cut behind the store's back: the general path names the
    /// records lost, or reads those still there) or its length cannot be
    /// had; lengths are checked against `drained` when given.
    fn indexed_chunks(
        &self,
        runs: &crate::runs::RawRuns,
        drained: Option<&crate::storage::Drained>,
    ) -> Option<[(FileId, u64, usize); MAX_CHUNKS]> {
        let mut ranges = [(FileId::Meta, 0, 0); MAX_CHUNKS];
        for (range, (id, end)) in ranges.iter_mut().zip(runs.chunks()) {
            let lent = usize::try_from(end).ok()?;
            let held = self.current_chunk_len(id, drained).ok()?;
            if end > held {
                return None;
            }
            *range = (FileId::Chunk(id), 0, lent);
        }
        Some(ranges)
    }

    /// Gathers a batch of small raw records the handle's index covers
    /// (`runs.rs`) into strided or exact places: every chunk file the index
    /// spans (at most [`MAX_CHUNKS`]) checked against its length now and
    /// borrowed at once, then each record found in the runs and copied from
    /// its chunk's map in one pass, with nothing else built per record.
    /// `false`, with nothing written, when the batch is not covered, or is
    /// placed by offsets, or anything the general path checks would refuse
    /// it (the general path takes it then, and names what is wrong), and
    /// when a chunk's map cannot be borrowed. (`false` also for a record the index places outside
    /// its chunk's indexed bytes, which the index's invariants rule out;
    /// records before it may have been written then.)
    fn gather_covered(
        &self,
        idxs: &[u64],
        dst: &SharedDst,
        place: Placement<'_>,
        head: &Head,
    ) -> Result<bool> {
        let stride = match place {
            Placement::Strided(stride) | Placement::Exact(stride) => stride,
            Placement::Offsets(_) | Placement::Bounded(..) | Placement::Slots(..) => {
                return Ok(false);
            }
        };
        let Some(runs) = runs_now(&self.raw_runs) else {
            return Ok(false);
        };
        let Some(len) = runs.usable(head) else {
            return Ok(false);
        };
        let len = len as usize;
        let fits = match place {
            Placement::Exact(item_len) => len == item_len,
            _ => len <= stride,
        };
        let end = (idxs.len() - 1)
            .checked_mul(stride)
            .and_then(|at| at.checked_add(len));
        let covered = runs.covered();
        if !fits
            || end.is_none_or(|end| end > dst.len())
            || len as u64 >= parallel::copy_reads_at()
            || runs.chunks().len() > MAX_CHUNKS
            || idxs.iter().any(|&i| i >= covered)
        {
            return Ok(false);
        }
        let Some(ranges) = self.indexed_chunks(&runs, None) else {
            return Ok(false);
        };
        let ranges = &ranges[..runs.chunks().len()];
        let bytes = (idxs.len() * len) as u64;
        let prefetch = bytes <= PREFETCH_RECORDS_UP_TO;
        let broken = AtomicBool::new(false);
        let finder = runs.finder();
        let copied = self.files.with_many_bytes(ranges, "read", |maps| {
            // Not `parallel::for_strided`: its extra closure layer costs
            // instructions per record on this path, where a scalar record
            // costs only a few.
            let shared = dst;
            parallel::for_ranges(idxs.len(), bytes, |range| {
                let span = (range.len() - 1) * stride + len;
                // SAFETY: the last record's slot ends inside `dst` (checked
                // above), so this range's slots do too; each index belongs
                // to one range handed to one worker, and a record is at
                // most `stride` bytes (`fits`), so a range's span ends at or
                // before the next range's first slot: spans do not overlap.
                let out = unsafe { shared.range_mut(range.start * stride, span) };
                let idxs = &idxs[range];
                let whole = match len {
                    8 => copy_found::<8>(finder, maps, idxs, out, stride, prefetch),
                    4 => copy_found::<4>(finder, maps, idxs, out, stride, prefetch),
                    2 => copy_found::<2>(finder, maps, idxs, out, stride, prefetch),
                    16 => copy_found::<16>(finder, maps, idxs, out, stride, prefetch),
                    _ => copy_found::<0>(finder, maps, idxs, out, stride, prefetch),
                };
                // Every record lies inside its chunk's indexed bytes
                // (indexed from its checked entry): `false` is a broken
                // index, left to the general path.
                if !whole {
                    broken.store(true, Ordering::Relaxed);
                }
                Ok(())
            })
        });
        // A chunk that could not be lent may be one the batch does not
        // touch: the general path borrows only those it does, and names
        // the error if one of them fails.
        let Ok(copied) = copied else {
            return Ok(false);
        };
        copied?;
        Ok(!broken.into_inner())
    }

    /// Copies raw records straight from the chunk maps into their places:
    /// one borrow of each chunk's map for all of the batch's records in it
    /// (a store written with several lanes spreads a batch over as many
    /// chunks). The same bytes as decoding each record with the raw codec,
    /// without its per-record dispatch; only for validated raw records that
    /// are neither read with pread nor checked.
    fn copy_raw_runs(
        &self,
        locs: &[(usize, RecordLoc)],
        dst: &SharedDst,
        prefetch: bool,
    ) -> Result<()> {
        // The chunks the records lie in, each with the span they cover, and
        // each record's chunk (its slot in `chunks`).
        let mut chunks: Vec<(u32, u64, u64)> = Vec::new();
        let mut slots: Vec<u32> = Vec::new();
        slots
            .try_reserve_exact(locs.len())
            .map_err(|_| Error::OutOfMemory {
                bytes: (locs.len() * std::mem::size_of::<u32>()) as u64,
            })?;
        for (_, l) in locs {
            let (lo, hi) = (u64::from(l.offset), l.end());
            let slot = if let Some(slot) = chunks.iter().position(|c| c.0 == l.chunk_id) {
                let c = &mut chunks[slot];
                (c.1, c.2) = (c.1.min(lo), c.2.max(hi));
                slot
            } else if chunks.len() < MAX_SPANS {
                chunks.push((l.chunk_id, lo, hi));
                chunks.len() - 1
            } else {
                // Records spread over many chunks: one borrow per record.
                return self.copy_raw_each(locs, dst);
            };
            slots.push(slot as u32);
        }
        let rec = |k: usize| {
            let (at, l) = &locs[k];
            SmallCopy {
                slot: slots[k],
                offset: u64::from(l.offset),
                at: *at,
                // Raw records are as long stored as decoded (validated).
                len: l.phys_length as usize,
            }
        };
        // SAFETY: as in `gather_placed`: `at + logic_length` lies inside the
        // destination, distinct records' ranges do not overlap, and each
        // record belongs to one range handed to one worker; each record lies
        // inside the span found for its chunk above.
        unsafe { self.copy_from_spans(&chunks, locs.len(), rec, dst, prefetch) }
    }

    /// Copies records `0 .. n`, record `k` being `rec(k)`, from the chunk
    /// maps into `dst`: grouped by chunk (a counting sort; batch order
    /// within each), so each chunk's map — span `chunks[slot]` as (id,
    /// start, end) — is borrowed once, and with each record's lines prefetched a fixed
    /// distance ahead of its copy when `prefetch`: enough misses in flight
    /// to overlap them, without asking for lines so early that they are gone
    /// again.
    ///
    /// # Safety
    /// Every record's destination `at .. at + len` lies inside `dst`, no two
    /// records' destinations overlap, and no other thread writes to them
    /// while this runs; every record lies inside its chunk's span, and
    /// `chunks` has at most [`MAX_SPANS`] entries.
    unsafe fn copy_from_spans(
        &self,
        chunks: &[(u32, u64, u64)],
        n: usize,
        rec: impl Fn(usize) -> SmallCopy,
        dst: &SharedDst,
        prefetch: bool,
    ) -> Result<()> {
        let mut starts = [0usize; MAX_SPANS + 1];
        for k in 0..n {
            starts[rec(k).slot as usize + 1] += 1;
        }
        for s in 1..starts.len() {
            starts[s] += starts[s - 1];
        }
        let mut order: Vec<u32> = Vec::new();
        order.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            bytes: (n * std::mem::size_of::<u32>()) as u64,
        })?;
        order.resize(n, 0);
        let mut next = starts;
        for k in 0..n {
            let slot = rec(k).slot as usize;
            order[next[slot]] = k as u32;
            next[slot] += 1;
        }
        let ahead = if prefetch { PREFETCH_DISTANCE } else { 0 };
        for (slot, &(chunk, start, end)) in chunks.iter().enumerate() {
            let group = &order[starts[slot]..starts[slot + 1]];
            if group.is_empty() {
                continue;
            }
            let file = crate::storage::FileId::Chunk(chunk);
            self.files
                .with_bytes(file, start, (end - start) as usize, "read", |span| {
                    let bytes = |r: &SmallCopy| {
                        let at = (r.offset - start) as usize;
                        &span[at..at + r.len]
                    };
                    crate::hints::prefetch(
                        group.iter().take(ahead).map(|&k| bytes(&rec(k as usize))),
                    );
                    for (j, &k) in group.iter().enumerate() {
                        if let Some(&later) = group.get(j + ahead).filter(|_| prefetch) {
                            crate::hints::prefetch(std::iter::once(bytes(&rec(later as usize))));
                        }
                        let r = rec(k as usize);
                        // SAFETY: in bounds, disjoint and this thread's alone
                        // (the function's contract).
                        let out = unsafe { dst.range_mut(r.at, r.len) };
                        copy_small(out, bytes(&r));
                    }
                })?;
        }
        Ok(())
    }

    /// [`copy_raw_runs`](Self::copy_raw_runs), one map borrow per record.
    fn copy_raw_each(&self, locs: &[(usize, RecordLoc)], dst: &SharedDst) -> Result<()> {
        for (at, loc) in locs {
            let file = crate::storage::FileId::Chunk(loc.chunk_id);
            let len = loc.phys_length as usize;
            self.files
                .with_bytes(file, u64::from(loc.offset), len, "read", |bytes| {
                    // SAFETY: as in `copy_raw_runs`.
                    let out = unsafe { dst.range_mut(*at, len) };
                    copy_small(out, bytes);
                })?;
        }
        Ok(())
    }

    /// Re-checks, against the chunk files' lengths as they are now, that every
    /// record's bytes are still there: a chunk file truncated behind our back
    /// must give an error, not a SIGBUS. One length check
    /// ([`Storage::current_len`]) per distinct chunk; with `drained`, a
    /// file it shows unchanged since its last check keeps that check's
    /// length ([`Storage::current_len_since`]).
    pub(crate) fn check_chunks_still_hold(
        &self,
        idxs: &[u64],
        locs: &[(usize, RecordLoc)],
        drained: Option<&crate::storage::Drained>,
    ) -> Result<()> {
        let mut seen: Vec<(u32, u64)> = Vec::new();
        for (i, (_, loc)) in locs.iter().enumerate() {
            let len = if let Some(&(_, len)) = seen.iter().find(|(c, _)| *c == loc.chunk_id) {
                len
            } else {
                let len = self.current_chunk_len(loc.chunk_id, drained)?;
                seen.push((loc.chunk_id, len));
                len
            };
            if loc.end() > len {
                return Err(Error::Corrupt {
                    path: self.file_path(crate::storage::FileId::Chunk(loc.chunk_id)),
                    entry: idxs[i],
                    reason: format!(
                        "bytes end at {}, past the end of chunk file {}.zr ({len} bytes)",
                        loc.end(),
                        loc.chunk_id
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Gathers a batch of `item_len`-byte records spread over several stores
/// (a collection's parts) straight into their slots of `dst`: group `k`,
/// `groups[k] = (slots, idxs)`, puts record `idxs[j]` of `stores.get(k)` at
/// `slots[j] · item_len`. The slots of all groups are checked to be
/// distinct and inside `dst` first: that is what lets the groups write
/// into one buffer at once. The groups are then shared out in runs, a
/// few per thread (a group is often a single record: handing each to the
/// pool on its own would cost more than its copy).
///
/// # Errors
/// [`Error::BufferTooSmall`] for a slot outside `dst`,
/// [`Error::OverlappingDestinations`] for a slot given twice (naming the
/// two positions, counted over the groups in order); else the error of
/// the first group that failed (groups after it may have written their
/// slots).
pub(crate) fn gather_exact_spread<C: Codec, S: Storage>(
    dst: &mut [u8],
    item_len: usize,
    groups: &[(&[usize], &[u64])],
    stores: &crate::collection::PartStores<'_, C, S>,
) -> Result<()> {
    // Zero-byte records have no slots to tell apart: the collection gathers
    // them part by part instead (`Column::gather_exact`).
    debug_assert!(item_len > 0, "a spread batch of zero-byte records");
    let slots = dst.len().checked_div(item_len).unwrap_or(0);
    let mut taken = vec![0u64; slots.div_ceil(64)];
    let every_slot = || groups.iter().flat_map(|(slots, _)| slots.iter().copied());
    for (position, slot) in every_slot().enumerate() {
        if slot >= slots {
            return Err(Error::BufferTooSmall {
                what: "destination",
                position,
                need: (slot as u64 + 1).saturating_mul(item_len as u64),
                have: dst.len() as u64,
            });
        }
        let (word, bit) = (slot / 64, 1u64 << (slot % 64));
        if taken[word] & bit != 0 {
            let first = every_slot().position(|s| s == slot).unwrap_or(position);
            return Err(Error::OverlappingDestinations {
                first,
                second: position,
            });
        }
        taken[word] |= bit;
    }
    // One drain of the file watches for all the parts' chunk checks.
    let drained = crate::storage::Drained::now();
    let shared = SharedDst::new(dst);
    let bytes = shared.len() as u64;
    parallel::for_ranges(groups.len(), bytes, |range| {
        for k in range {
            let (slots, idxs) = groups[k];
            // SAFETY: every group's slots lie inside `dst` and no slot is
            // any other's (checked above), so the groups' writes are
            // disjoint; `dst` is borrowed for this whole call.
            unsafe {
                stores
                    .get(k)?
                    .gather_exact_slots(idxs, &shared, slots, item_len, &drained)?;
            };
        }
        Ok(())
    })
}

/// Gathers a batch of ragged records spread over several stores (a
/// collection's parts) straight into their ranges of `dst`: group `k`,
/// `groups[k] = (positions, idxs)`, puts record `idxs[j]` of
/// `stores.get(k)` at `offsets[positions[j]]`, where `lens` holds every
/// record's length in batch order (read from the stores before). Every
/// range is checked to lie inside `dst` and to overlap no other first:
/// that is what lets the groups write into one buffer at once. The groups
/// are shared out in runs, as in [`gather_exact_spread`].
///
/// # Errors
/// [`Error::BufferTooSmall`] for a range outside `dst`,
/// [`Error::OverlappingDestinations`] for two that overlap (naming their
/// positions in the batch); else the error of the first group that failed
/// (groups after it may have written their ranges), including a record
/// whose length is no longer `lens`'s.
pub(crate) fn gather_ragged_spread<C: Codec, S: Storage>(
    dst: &mut [u8],
    offsets: &[u64],
    lens: &[u32],
    groups: &[(&[usize], &[u64])],
    stores: &crate::collection::PartStores<'_, C, S>,
    drained: &crate::storage::Drained,
) -> Result<()> {
    Error::check_len("lengths", offsets.len(), lens.len())?;
    // Every position of the batch given to exactly one record of one group
    // (what makes the checked ranges below the writers' ranges).
    let mut given = vec![0u64; offsets.len().div_ceil(64)];
    for (positions, idxs) in groups {
        Error::check_len("group positions", idxs.len(), positions.len())?;
        for &p in *positions {
            let (word, bit) = (p / 64, 1u64 << (p % 64));
            if given.get(word).is_none_or(|w| w & bit != 0) {
                return Err(Error::LengthMismatch {
                    what: "positions of a batch over stores (each given once)",
                    expected: offsets.len(),
                    found: p,
                });
            }
            given[word] |= bit;
        }
    }
    let mut by_start: Vec<usize> = (0..offsets.len()).collect();
    by_start.sort_by_key(|&i| offsets[i]);
    let mut end_before: Option<(usize, u64)> = None;
    for &i in &by_start {
        let end = offsets[i].saturating_add(u64::from(lens[i]));
        if end > dst.len() as u64 {
            return Err(Error::BufferTooSmall {
                what: "destination",
                position: i,
                need: end,
                have: dst.len() as u64,
            });
        }
        if lens[i] == 0 {
            continue;
        }
        if let Some((j, prev_end)) = end_before
            && offsets[i] < prev_end
        {
            return Err(Error::OverlappingDestinations {
                first: j.min(i),
                second: j.max(i),
            });
        }
        end_before = Some((i, end));
    }
    // Each group's ranges, and each record's bound: its length as checked
    // above (a record found longer when gathered is refused, never written
    // past its range).
    let placed: Vec<Vec<u64>> = groups
        .iter()
        .map(|(positions, _)| positions.iter().map(|&p| offsets[p]).collect())
        .collect();
    let bounds: Vec<Vec<u32>> = groups
        .iter()
        .map(|(positions, _)| positions.iter().map(|&p| lens[p]).collect())
        .collect();
    let total: u64 = lens.iter().map(|&l| u64::from(l)).sum();
    let shared = SharedDst::new(dst);
    parallel::for_ranges(groups.len(), total, |range| {
        for k in range {
            let (positions, idxs) = groups[k];
            let place = Placement::Bounded(&placed[k], &bounds[k]);
            let store = stores.get(k)?;
            // SAFETY: every record's range (`Bounded`: its offset and at
            // most its checked length) lies inside `dst` and overlaps no
            // other record's (checked above), and each group is handed to
            // one worker; `dst` is borrowed for this whole call.
            unsafe { store.gather_placed(idxs, &shared, place, Some(drained)) }.map_err(|e| {
                // A refused place names its position in the batch, not in
                // its group.
                match e {
                    Error::BufferTooSmall {
                        what,
                        position,
                        need,
                        have,
                    } => Error::BufferTooSmall {
                        what,
                        position: positions.get(position).copied().unwrap_or(position),
                        need,
                        have,
                    },
                    e => e,
                }
            })?;
        }
        Ok(())
    })
}

/// Refuses explicit destination ranges that overlap (a parallel decode into
/// overlapping ranges would be a data race).
fn check_disjoint(locs: &[(usize, RecordLoc)]) -> Result<()> {
    let end = |(at, loc): &(usize, RecordLoc)| at + loc.logic_length as usize;
    let sorted = locs.windows(2).all(|w| w[0].0 <= w[1].0);
    let overlap = |a: usize, b: usize| Error::OverlappingDestinations {
        first: a.min(b),
        second: a.max(b),
    };
    if sorted {
        for i in 1..locs.len() {
            if end(&locs[i - 1]) > locs[i].0 {
                return Err(overlap(i - 1, i));
            }
        }
        return Ok(());
    }
    let mut order: Vec<usize> = (0..locs.len()).collect();
    order.sort_unstable_by_key(|&i| locs[i].0);
    for w in order.windows(2) {
        if end(&locs[w[0]]) > locs[w[1]].0 {
            return Err(overlap(w[0], w[1]));
        }
    }
    Ok(())
}

/// The index of small raw records, unless a thread is writing it (see
/// `batch_entries`).
fn runs_now(
    runs: &std::sync::RwLock<crate::runs::RawRuns>,
) -> Option<std::sync::RwLockReadGuard<'_, crate::runs::RawRuns>> {
    match runs.try_read() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::{Deflate, Error, ErrorCode, Store};

    #[test]
    fn a_batch_spread_over_stores_lands_in_its_slots_and_refuses_shared_slots() {
        let dir = tempfile::tempdir().unwrap();
        let stores: Vec<std::sync::Arc<Store<Deflate>>> = (0..2u8)
            .map(|k| {
                let store: Store<Deflate> = Store::open(dir.path().join(format!("s{k}"))).unwrap();
                let src: Vec<u8> = (0..32).map(|b| b + 100 * k).collect();
                store.append_fixed(&src, 4, 8).unwrap();
                std::sync::Arc::new(store)
            })
            .collect();
        let record =
            |k: u8, i: u8| -> Vec<u8> { (i * 8..i * 8 + 8).map(|b| b + 100 * k).collect() };
        // Store 0's records 3 and 0 at slots 1 and 3; store 1's record 2
        // at slots 0 and 2 (a record asked for twice).
        let groups: Vec<(&[usize], &[u64])> = vec![(&[1, 3], &[3, 0]), (&[0, 2], &[2, 2])];
        let mut dst = vec![0u8; 32];
        let all = crate::collection::PartStores::given(stores.clone());
        super::gather_exact_spread(&mut dst, 8, &groups, &all).unwrap();
        let want: Vec<u8> = [record(1, 2), record(0, 3), record(1, 2), record(0, 0)].concat();
        assert_eq!(dst, want);
        // A slot given twice, or outside the buffer: refused before a write.
        for (groups, code) in [
            (
                vec![
                    (&[1usize, 3][..], &[3u64, 0][..]),
                    (&[3, 2][..], &[2, 2][..]),
                ],
                "overlap",
            ),
            (vec![(&[1usize, 4][..], &[3u64, 0][..])], "small"),
        ] {
            let mut dst = vec![0xAAu8; 32];
            let err = super::gather_exact_spread(&mut dst, 8, &groups, &all).unwrap_err();
            match (code, &err) {
                // Slot 3: positions 1 and 2 of the batch, over the groups.
                (
                    "overlap",
                    Error::OverlappingDestinations {
                        first: 1,
                        second: 2,
                    },
                )
                | ("small", Error::BufferTooSmall { .. }) => {}
                _ => panic!("{code}: {err:?}"),
            }
            assert!(dst.iter().all(|&b| b == 0xAA));
        }
    }

    #[test]
    fn a_spread_ragged_record_longer_than_its_length_is_refused_at_its_batch_position() {
        let dir = tempfile::tempdir().unwrap();
        let stores: Vec<std::sync::Arc<Store<Deflate>>> = (0..2u8)
            .map(|k| {
                let store: Store<Deflate> = Store::open(dir.path().join(format!("s{k}"))).unwrap();
                let src: Vec<u8> = (0..24).map(|b| b + 100 * k).collect();
                store.append_ragged(&src, &[0, 4, 12], &[4, 8, 12]).unwrap();
                std::sync::Arc::new(store)
            })
            .collect();
        let all = crate::collection::PartStores::given(stores);
        // Batch positions 0..4: store 1's record 0 at 0, store 0's records
        // 1 and 2 at 1 and 3, store 1's record 2 at 2. The lengths as read
        // before say store 0's record 2 (batch position 3) is 6 bytes: it
        // is 12 now.
        let groups: Vec<(&[usize], &[u64])> = vec![(&[1, 3], &[1, 2]), (&[0, 2], &[0, 2])];
        let lens = [4u32, 8, 12, 6];
        let offsets = [0u64, 4, 12, 24];
        let drained = crate::storage::Drained::now();
        let mut dst = vec![0u8; 40];
        let err = super::gather_ragged_spread(&mut dst, &offsets, &lens, &groups, &all, &drained)
            .unwrap_err();
        match err {
            Error::BufferTooSmall {
                position: 3,
                need: 12,
                have: 6,
                ..
            } => {}
            other => panic!("expected batch position 3 refused, got {other:?}"),
        }
        // With the lengths as they are, every record lands in its range.
        let lens = [4u32, 8, 12, 12];
        let mut dst = vec![0u8; 36];
        super::gather_ragged_spread(&mut dst, &offsets, &lens, &groups, &all, &drained).unwrap();
        let want: Vec<u8> = [
            &(100..104).collect::<Vec<u8>>()[..],
            &(4..12).collect::<Vec<u8>>(),
            &(112..124).collect::<Vec<u8>>(),
            &(12..24).collect::<Vec<u8>>(),
        ]
        .concat();
        assert_eq!(dst, want);
    }

    #[test]
    fn gather_exact_refuses_a_record_of_another_size_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store<Deflate> = Store::open(dir.path().join("s")).unwrap();
        // Records 0, 1 and 3 are 8 bytes; record 2 is 4 and record 4 is 16.
        let src: Vec<u8> = (0..40).collect();
        store
            .append_ragged(&src, &[0, 8, 16, 20, 28], &[8, 8, 4, 8, 12])
            .unwrap();

        let mut dst = [0u8; 16];
        store.gather_exact(&[3, 0], &mut dst, 8).unwrap();
        assert_eq!(&dst[..8], &src[20..28]);
        assert_eq!(&dst[8..], &src[..8]);

        for (idxs, index, position, found) in [([0, 2], 2, 1, 4), ([4, 1], 4, 0, 12)] {
            let mut dst = [0xAAu8; 32];
            let err = store.gather_exact(&idxs, &mut dst, 8).unwrap_err();
            assert_eq!(err.code(), ErrorCode::BufferTooSmall);
            match &err {
                Error::RecordLength {
                    index: i,
                    position: p,
                    expected: 8,
                    found: f,
                    ..
                } => assert_eq!((*i, *p, *f), (index, position, found), "{err}"),
                other => panic!("expected a record length error, got {other:?}"),
            }
            assert!(
                err.to_string()
                    .contains(&format!("record {index} is {found} bytes"))
            );
            assert!(dst.iter().all(|&b| b == 0xAA), "nothing is written");
        }
    }
}
