//! A handle's index of a run table's pieces (format v2, `docs/FORMAT.md`
//! §9.5): where each piece starts, by record and by unit, so a record is
//! found with a binary search over the pieces and arithmetic inside one.
//!
//! The index is read from `meta.zr` as far as a head's `length` needs, the
//! first time it is needed (opening reads the pieces below the committed
//! length; a reader that catches up with a later commit reads on), and
//! appends add their own pieces as they write them. `delete` and `compact`
//! rewrite the table in place (`Store::rewrite_runs`, through the undo
//! log) and forget the index, which is then read again. Every piece head
//! read is checked (its unit CRC, its fields), never trusted for more than
//! the bytes `meta.zr` holds: the index takes one slot per piece read, each
//! backed by at least one unit of the file.

use loaderx_format::{
    FormatError, RecordLoc,
    v2::{
        self,
        runs::{self, Piece, Run, UNIT_LEN},
    },
};

use crate::{
    Error, Result,
    files::Files,
    layout::Layout,
    storage::{FileId, Storage},
};

/// A run of nothing: its `loc` is the placeholder of an index past the
/// length (which the caller refuses).
const NO_RUN: Run = Run {
    chunk: 0,
    offset: 0,
    stride: 0,
    count: 0,
};

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct RunTable {
    /// The first record of each piece, ascending.
    firsts: Vec<u64>,
    /// Each piece: its first unit and its head.
    pieces: Vec<(u64, Piece)>,
    /// Records the pieces cover.
    records: u64,
    /// Units the pieces take.
    units: u64,
}

/// Where a record is, by the run table.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place {
    /// The record entry in unit `unit`.
    Entry(u64),
    /// Record `k` of `run`, whose CRC units start at unit `crcs`.
    Run { run: Run, crcs: u64, k: u32 },
}

impl RunTable {
    /// Units before the end of the piece holding record `length − 1`: what
    /// a table of `length` records takes (the index covers them).
    pub(crate) fn units_for(&self, length: u64) -> u64 {
        if length == 0 {
            return 0;
        }
        let p = self.firsts.partition_point(|&f| f < length) - 1;
        let (unit, piece) = self.pieces[p];
        unit + piece.units()
    }

    fn place(&self, index: u64) -> Place {
        let p = self.firsts.partition_point(|&f| f <= index) - 1;
        let (unit, piece) = self.pieces[p];
        let k = index - self.firsts[p];
        match piece {
            Piece::Group { .. } => Place::Entry(unit + 1 + k),
            Piece::Run(run) => Place::Run {
                run,
                crcs: unit + 1,
                k: k as u32,
            },
        }
    }
}

/// Whether record `b` lies right after record `a` in the same chunk, both
/// raw, non-empty and of one size: `b` extends a run `a` ends.
fn follows(a: &RecordLoc, b: &RecordLoc) -> bool {
    a.codec == loaderx_format::CodecTag::RAW
        && b.codec == loaderx_format::CodecTag::RAW
        && a.logic_length > 0
        && a.logic_length == b.logic_length
        && a.chunk_id == b.chunk_id
        && u64::from(a.offset) + u64::from(a.logic_length) == u64::from(b.offset)
}

/// A record of a run whose block a fetching gather checks: the block's
/// place among the fetched ranges (`at`), its stored CRC, where the record
/// starts in it (`within`, bytes), its number in the run and the store
/// indices of its first and last records (for the error).
#[derive(Debug, Clone, Copy)]
struct PendingBlock {
    at: usize,
    stored: u32,
    within: u64,
    block: u64,
    records: (u64, u64),
}

impl PendingBlock {
    /// Record `k` (store index `idx`) of `run`, whose block is fetched
    /// range `at`, with stored CRC `stored`.
    fn of(at: usize, stored: u32, run: &Run, k: u32, idx: u64) -> Self {
        let block = u64::from(k / run.block_records());
        let (lo, hi) = run.block_range(block);
        Self {
            at,
            stored,
            within: u64::from(k - lo) * u64::from(run.stride),
            block,
            records: (idx - u64::from(k - lo), idx + u64::from(hi - 1 - k)),
        }
    }
}

/// Records `start .. end` of an append (indices into its records), which
/// become one piece of the run table: a run when `run`, else a group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) run: bool,
}

/// The pieces the placed records `locs` of an append become (§9.5,
/// "Writing"): each maximal stretch of two or more raw records of one
/// size lying one after the other in one chunk is a run (cut at `u32::MAX`
/// records); the records between runs, groups.
pub(crate) fn plan_spans(locs: &[RecordLoc]) -> Vec<Span> {
    let n = locs.len();
    let starts_run = |i: usize| i + 1 < n && follows(&locs[i], &locs[i + 1]);
    let mut spans = Vec::new();
    let mut i = 0;
    while i < n {
        if starts_run(i) {
            let mut j = i + 1;
            while j < n && follows(&locs[j - 1], &locs[j]) && j - i < u32::MAX as usize {
                j += 1;
            }
            spans.push(Span {
                start: i,
                end: j,
                run: true,
            });
            i = j;
        } else {
            let mut e = i + 1;
            while e < n && !starts_run(e) {
                e += 1;
            }
            spans.push(Span {
                start: i,
                end: e,
                run: false,
            });
            i = e;
        }
    }
    spans
}

/// The checksum blocks of an append's records, in order, as `(start, end)`
/// record ranges from record `from` (a block's first record) on: the
/// blocks of each run in `spans` (§9.5, "Blocks"), and every other record
/// a block of its own (all of them when `spans` is empty: a store without
/// a run table keeps a CRC per record).
pub(crate) fn blocks_from<'a>(
    spans: &'a [Span],
    locs: &'a [RecordLoc],
    from: usize,
) -> impl Iterator<Item = (usize, usize)> + 'a {
    let mut s = spans.partition_point(|sp| sp.end <= from);
    let mut i = from;
    std::iter::from_fn(move || {
        if i >= locs.len() {
            return None;
        }
        while s < spans.len() && spans[s].end <= i {
            s += 1;
        }
        let end = match spans.get(s) {
            Some(sp) if sp.run => {
                let per = (runs::BLOCK_BYTES / locs[sp.start].logic_length.max(1)).max(1);
                (i + per as usize).min(sp.end)
            }
            _ => i + 1,
        };
        let block = (i, end);
        i = end;
        Some(block)
    })
}

impl<S: Storage> Files<S> {
    fn table_start(&self) -> u64 {
        match self.layout() {
            Layout::V2 { table, .. } => table,
            Layout::V1 => 0,
        }
    }

    fn bad_entry(&self, entry: u64, reason: loaderx_format::EntryFault) -> Error {
        Error::format(
            self.path(FileId::Meta),
            FormatError::BadEntry { entry, reason },
        )
    }

    /// Reads piece heads until the index covers `length` records.
    pub(crate) fn ensure_runs(&self, length: u64) -> Result<()> {
        if self.run_table().read().is_ok_and(|t| t.records >= length) {
            return Ok(());
        }
        let mut t = self
            .run_table()
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = self.table_start();
        let meta_len = self.current_len(FileId::Meta, None)?;
        while t.records < length {
            let at = start + t.units * UNIT_LEN as u64;
            if at + UNIT_LEN as u64 > meta_len {
                return Err(Error::format(
                    self.path(FileId::Meta),
                    FormatError::Truncated {
                        need: at + UNIT_LEN as u64,
                        have: meta_len,
                    },
                ));
            }
            let unit = t.units;
            let piece = self
                .with_bytes(FileId::Meta, at, UNIT_LEN, "read table", |b| {
                    runs::decode_piece(unit, b)
                })?
                .map_err(|reason| self.bad_entry(t.records, reason))?;
            let need = piece
                .units()
                .checked_mul(UNIT_LEN as u64)
                .and_then(|n| n.checked_add(at))
                .unwrap_or(u64::MAX);
            if need > meta_len {
                return Err(Error::format(
                    self.path(FileId::Meta),
                    FormatError::Truncated {
                        need,
                        have: meta_len,
                    },
                ));
            }
            if piece.records() > length - t.records {
                return Err(self.bad_entry(
                    t.records,
                    loaderx_format::EntryFault::BadRun(
                        "a piece passes the record count of the header",
                    ),
                ));
            }
            let first = t.records;
            t.firsts.push(first);
            t.pieces.push((unit, piece));
            t.records += piece.records();
            t.units += piece.units();
        }
        Ok(())
    }

    /// Bytes of `meta.zr` a run table of `length` records reaches.
    pub(crate) fn runs_table_end(&self, length: u64) -> Result<u64> {
        self.ensure_runs(length)?;
        let t = self
            .run_table()
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(self.table_start() + t.units_for(length) * UNIT_LEN as u64)
    }

    /// Units `meta.zr` has room for after the table's start.
    pub(crate) fn runs_units_in_file(&self) -> Result<u64> {
        let len = self.current_len(FileId::Meta, None)?;
        Ok(len.saturating_sub(self.table_start()) / UNIT_LEN as u64)
    }

    /// Writes `bytes` (one unit) as unit `unit`.
    pub(crate) fn write_unit(&self, unit: u64, bytes: &[u8], op: &'static str) -> Result<()> {
        let at = self.table_start() + unit * UNIT_LEN as u64;
        self.write(FileId::Meta, at, bytes, op)
    }

    /// Forgets the index: the table was rewritten in place (a delete, its
    /// roll-back, a compaction); it is read again as far as needed.
    pub(crate) fn reset_runs(&self) {
        *self
            .run_table()
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = RunTable::default();
    }

    /// Units the index holds now (appends write theirs after them).
    pub(crate) fn runs_units(&self) -> u64 {
        self.run_table()
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .units
    }

    fn runs_place(&self, index: u64) -> Result<Place> {
        self.ensure_runs(index + 1)?;
        let t = self
            .run_table()
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(t.place(index))
    }

    /// The records `first .. end` of the checksum block holding record
    /// `index` when it is a record of a run, else `None`.
    pub(crate) fn run_block_of(&self, index: u64) -> Result<Option<(u64, u64)>> {
        Ok(match self.runs_place(index)? {
            Place::Run { run, k, .. } => {
                let (lo, hi) = run.block_range(u64::from(k / run.block_records()));
                Some((index - u64::from(k - lo), index + u64::from(hi - k)))
            }
            Place::Entry(_) => None,
        })
    }

    /// Record `index` by the run table. A run record's `crc` is its own
    /// CRC32C when `check` is set, computed once its block's CRC matched
    /// (so the caller's check of the record passes exactly when the block
    /// is intact), else 0.
    pub(crate) fn runs_loc(&self, index: u64, check: bool) -> Result<RecordLoc> {
        self.runs_loc_seen(index, check, &mut None)
    }

    /// [`runs_loc`](Self::runs_loc) for a loop over records: `seen` is the
    /// last block this loop checked (CRC unit position, block), so the
    /// records after the first of a block take only their own CRC, and a
    /// scan checks each block once, not once per record.
    pub(crate) fn runs_loc_seen(
        &self,
        index: u64,
        check: bool,
        seen: &mut Option<(u64, u64)>,
    ) -> Result<RecordLoc> {
        match self.runs_place(index)? {
            Place::Entry(unit) => {
                let at = self.table_start() + unit * UNIT_LEN as u64;
                self.with_bytes(FileId::Meta, at, UNIT_LEN, "read table", |b| {
                    v2::decode_entry(unit, b)
                })?
                .map_err(|reason| self.bad_entry(index, reason))
            }
            Place::Run { run, crcs, k } => {
                let block = (crcs, u64::from(k / run.block_records()));
                let crc = if !check {
                    0
                } else if *seen == Some(block) {
                    self.run_record_own_crc(index, &run, k)?
                } else {
                    let crc = self.run_record_crc(index, &run, crcs, k)?;
                    *seen = Some(block);
                    crc
                };
                Ok(run.loc(k, crc))
            }
        }
    }

    /// The CRC32C of record `k` of `run` alone (its block was checked).
    fn run_record_own_crc(&self, index: u64, run: &Run, k: u32) -> Result<u32> {
        let loc = run.loc(k, 0);
        let file = FileId::Chunk(run.chunk);
        let file_len = self.open(file)?.unwrap_or(0);
        if loc.end() > file_len {
            return Err(self.bad_entry(
                index,
                loaderx_format::EntryFault::PastFileEnd {
                    chunk: run.chunk,
                    end: loc.end(),
                    file_len,
                },
            ));
        }
        self.with_bytes(
            file,
            u64::from(loc.offset),
            loc.phys_length as usize,
            "read",
            v2::crc32c,
        )
    }

    /// [`runs_loc`](Self::runs_loc) of each of `idxs` below `length` (a
    /// placeholder for the others, which the caller refuses), from storage
    /// that [`fetches`](Storage::fetches): the entry and CRC units the batch
    /// needs in one request, then (when `check`) every block it needs in
    /// one more, each block checked before its records' CRCs are taken.
    /// The first record that fails, by position, with its error. The
    /// blocks fetched and found intact are left in `kept` as `(file,
    /// offset, bytes)`, so a gather takes its records' bytes from them
    /// instead of asking for them again.
    pub(crate) fn fetch_runs_locs(
        &self,
        idxs: &[u64],
        length: u64,
        check: bool,
        out: &mut Vec<RecordLoc>,
        kept: &mut Vec<(FileId, u64, Vec<u8>)>,
    ) -> Result<Option<(usize, Error)>> {
        let placeholder = NO_RUN.loc(0, 0);
        let live = idxs.iter().copied().filter(|&i| i < length).max();
        if let Some(max) = live {
            self.ensure_runs(max + 1)?;
        }
        let places: Vec<Option<Place>> = {
            let t = self
                .run_table()
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            idxs.iter()
                .map(|&i| (i < length).then(|| t.place(i)))
                .collect()
        };
        let unit_of = |place: &Place| match *place {
            Place::Entry(u) => Some(u),
            Place::Run { run, crcs, k } if check => {
                let b = u64::from(k / run.block_records());
                Some(crcs + b / runs::CRCS_PER_UNIT as u64)
            }
            Place::Run { .. } => None,
        };
        let start = self.table_start();
        let units: Vec<(FileId, u64, usize)> = places
            .iter()
            .flatten()
            .filter_map(unit_of)
            .map(|u| (FileId::Meta, start + u * UNIT_LEN as u64, UNIT_LEN))
            .collect();
        let unit_bytes = self.fetch_many(&units, "read table")?;
        let mut unit_bytes = unit_bytes.iter();
        // Each record's loc, or where its block lies and its stored CRC.
        let mut blocks: Vec<(FileId, u64, usize)> = Vec::new();
        let mut block_at: std::collections::HashMap<(u32, u64), usize> =
            std::collections::HashMap::new();
        // The first record that fails here: the blocks of those before it
        // are still checked, so the first failure by position is reported.
        let mut failed: Option<(usize, Error)> = None;
        let mut pending: Vec<Option<PendingBlock>> = Vec::with_capacity(idxs.len());
        for (i, place) in places.iter().enumerate() {
            let idx = idxs[i];
            let Some(place) = place else {
                out.push(placeholder);
                pending.push(None);
                continue;
            };
            let bytes = unit_of(place).and_then(|_| unit_bytes.next());
            match *place {
                Place::Entry(u) => {
                    match v2::decode_entry(u, bytes.map_or(&[][..], Vec::as_slice)) {
                        Ok(loc) => out.push(loc),
                        Err(reason) => {
                            failed = Some((i, self.bad_entry(idx, reason)));
                            break;
                        }
                    }
                    pending.push(None);
                }
                Place::Run { run, k, .. } if check => {
                    let b = u64::from(k / run.block_records());
                    let unit = unit_of(place).unwrap_or(0);
                    let stored = match runs::decode_crcs(unit, bytes.map_or(&[][..], Vec::as_slice))
                    {
                        Ok(c) => c[(b % runs::CRCS_PER_UNIT as u64) as usize],
                        Err(reason) => {
                            failed = Some((i, self.bad_entry(idx, reason)));
                            break;
                        }
                    };
                    let (lo, hi) = run.block_range(b);
                    let stride = u64::from(run.stride);
                    let from = u64::from(run.offset) + u64::from(lo) * stride;
                    let end = u64::from(run.offset) + u64::from(hi) * stride;
                    let file = FileId::Chunk(run.chunk);
                    let file_len = self.open(file)?.unwrap_or(0);
                    if end > file_len {
                        let fault = loaderx_format::EntryFault::PastFileEnd {
                            chunk: run.chunk,
                            end,
                            file_len,
                        };
                        failed = Some((i, self.bad_entry(idx, fault)));
                        break;
                    }
                    if hi - lo == 1 {
                        // The block is the record: its CRC is the record's
                        // own, checked as the record is read.
                        out.push(run.loc(k, stored));
                        pending.push(None);
                        continue;
                    }
                    let at = *block_at.entry((run.chunk, from)).or_insert_with(|| {
                        blocks.push((file, from, (end - from) as usize));
                        blocks.len() - 1
                    });
                    out.push(run.loc(k, 0));
                    pending.push(Some(PendingBlock::of(at, stored, &run, k, idx)));
                }
                Place::Run { run, k, .. } => {
                    out.push(run.loc(k, 0));
                    pending.push(None);
                }
            }
        }
        self.check_fetched_blocks(idxs, &pending, &blocks, out, failed, kept)
    }

    /// The ranges to read ahead for a gather of `idxs` (below `length`) in
    /// a store with a run table, from storage that
    /// [`fetches`](Storage::fetches): each record's stored range, or, for a
    /// record of a run when blocks are checked, its block's (which the
    /// gather fetches to check, and takes the record from). Reads only the
    /// table units of records with entries of their own; an entry that
    /// fails to decode ends the list (the gather reports it).
    pub(crate) fn runs_ahead_ranges(
        &self,
        idxs: &[u64],
        length: u64,
        check: bool,
    ) -> Result<Vec<(FileId, u64, usize)>> {
        let mut locs = Vec::with_capacity(idxs.len());
        let fault = self.fetch_runs_locs(idxs, length, false, &mut locs, &mut Vec::new())?;
        let good = fault.map_or(locs.len(), |(at, _)| at);
        let t = self
            .run_table()
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ranges: Vec<(FileId, u64, usize)> = Vec::with_capacity(good);
        for (&idx, loc) in idxs.iter().zip(&locs[..good]) {
            if idx >= length || loc.phys_length == 0 {
                continue;
            }
            let file = FileId::Chunk(loc.chunk_id);
            match t.place(idx) {
                Place::Run { run, k, .. } if check => {
                    let (lo, hi) = run.block_range(u64::from(k / run.block_records()));
                    let stride = u64::from(run.stride);
                    let from = u64::from(run.offset) + u64::from(lo) * stride;
                    let range = (file, from, (u64::from(hi - lo) * stride) as usize);
                    if ranges.last() != Some(&range) {
                        ranges.push(range);
                    }
                }
                _ => ranges.push((file, u64::from(loc.offset), loc.phys_length as usize)),
            }
        }
        Ok(ranges)
    }

    /// The second half of [`fetch_runs_locs`](Self::fetch_runs_locs): the
    /// blocks fetched at once, each checked, and the CRC of each record
    /// that `pending` places in one set in `out`.
    fn check_fetched_blocks(
        &self,
        idxs: &[u64],
        pending: &[Option<PendingBlock>],
        blocks: &[(FileId, u64, usize)],
        out: &mut [RecordLoc],
        failed: Option<(usize, Error)>,
        kept: &mut Vec<(FileId, u64, Vec<u8>)>,
    ) -> Result<Option<(usize, Error)>> {
        if blocks.is_empty() {
            return Ok(failed);
        }
        let fetched = self.fetch_many(blocks, "read")?;
        let base = out.len() - pending.len();
        for (i, p) in pending.iter().enumerate() {
            let Some(PendingBlock {
                at,
                stored,
                within,
                block: b,
                records: (first, last),
            }) = *p
            else {
                continue;
            };
            let bytes = &fetched[at];
            let found = v2::crc32c(bytes);
            if found != stored {
                return Ok(Some((
                    i,
                    Error::Corrupt {
                        path: self.path(blocks[at].0),
                        entry: idxs[i],
                        reason: format!(
                            "block {b} of its run (records {first} ..= {last}): checksum mismatch (stored {stored:#010x}, computed {found:#010x})"
                        ),
                    },
                )));
            }
            let loc = &mut out[base + i];
            let within = within as usize;
            loc.crc = v2::crc32c(&bytes[within..within + loc.phys_length as usize]);
        }
        kept.extend(
            blocks
                .iter()
                .zip(fetched)
                .map(|(&(file, offset, _), bytes)| (file, offset, bytes)),
        );
        Ok(failed)
    }

    /// Checks the block of record `k` of `run` against its CRC, then gives
    /// the record's own CRC32C.
    fn run_record_crc(&self, index: u64, run: &Run, crcs: u64, k: u32) -> Result<u32> {
        let per = u64::from(run.block_records());
        let b = u64::from(k) / per;
        let unit = crcs + b / runs::CRCS_PER_UNIT as u64;
        let at = self.table_start() + unit * UNIT_LEN as u64;
        let stored = self
            .with_bytes(FileId::Meta, at, UNIT_LEN, "read table", |bytes| {
                runs::decode_crcs(unit, bytes)
            })?
            .map_err(|reason| self.bad_entry(index, reason))?
            [(b % runs::CRCS_PER_UNIT as u64) as usize];
        let (lo, hi) = run.block_range(b);
        let file = FileId::Chunk(run.chunk);
        let file_len = self.open(file)?.unwrap_or(0);
        let stride = u64::from(run.stride);
        let start = u64::from(run.offset) + u64::from(lo) * stride;
        let end = u64::from(run.offset) + u64::from(hi) * stride;
        if end > file_len {
            return Err(self.bad_entry(
                index,
                loaderx_format::EntryFault::PastFileEnd {
                    chunk: run.chunk,
                    end,
                    file_len,
                },
            ));
        }
        if hi - lo == 1 {
            // A block of one record (records of 4 KiB or more): its CRC is
            // the record's own, which the caller checks as it reads the
            // record (a large one with a positioned read, never through
            // the map), so the block is not read twice.
            return Ok(stored);
        }
        let within = ((u64::from(k - lo)) * stride) as usize;
        let (found, own) =
            self.with_bytes(file, start, (end - start) as usize, "read", |bytes| {
                (
                    v2::crc32c(bytes),
                    v2::crc32c(&bytes[within..within + run.stride as usize]),
                )
            })?;
        if found != stored {
            return Err(Error::Corrupt {
                path: self.path(file),
                entry: index,
                reason: format!(
                    "block {b} of its run (records {} ..= {}): checksum mismatch (stored {stored:#010x}, computed {found:#010x})",
                    index - u64::from(k - lo),
                    index + u64::from(hi - 1 - k),
                ),
            });
        }
        Ok(own)
    }

    /// Writes the table pieces of appended records `first ..` (`locs`,
    /// placed, cut into `spans` by [`plan_spans`]) after the pieces the
    /// index holds, and adds them to it: a run span becomes a run piece,
    /// `block_crc(start, end)` giving the CRC of its block of records
    /// `start .. end`; a group span, a group of entries carrying each
    /// record's own `loc.crc`. The caller holds the append lock.
    pub(crate) fn write_runs(
        &self,
        first: u64,
        locs: &[RecordLoc],
        spans: &[Span],
        block_crc: &(dyn Fn(usize, usize) -> u32 + Sync),
    ) -> Result<()> {
        let start_unit = self.runs_units();
        let mut unit = start_unit;
        let mut out: Vec<u8> = Vec::new();
        let mut pieces: Vec<(u64, u64, Piece)> = Vec::new();
        for span in spans {
            let (i, j) = (span.start, span.end);
            if span.run {
                let run = Run {
                    chunk: locs[i].chunk_id,
                    offset: locs[i].offset,
                    stride: locs[i].logic_length,
                    count: (j - i) as u32,
                };
                let per = run.block_records() as usize;
                let crcs: Vec<u32> = (i..j)
                    .step_by(per)
                    .map(|b| block_crc(b, (b + per).min(j)))
                    .collect();
                runs::encode_run_piece(unit, &run, &crcs, &mut out);
                pieces.push((first + i as u64, unit, Piece::Run(run)));
                unit += run.units();
            } else {
                let count = (j - i) as u64;
                out.extend_from_slice(&runs::encode_group(unit, count));
                let mut entry = [0u8; UNIT_LEN];
                for (m, loc) in locs[i..j].iter().enumerate() {
                    v2::encode_entry(unit + 1 + m as u64, loc, &[], &mut entry);
                    out.extend_from_slice(&entry);
                }
                pieces.push((first + i as u64, unit, Piece::Group { count }));
                unit += count + 1;
            }
        }
        let at = self.table_start() + start_unit * UNIT_LEN as u64;
        self.write(FileId::Meta, at, &out, "write table")?;
        let mut t = self
            .run_table()
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        debug_assert_eq!(t.records, first);
        for (f, u, piece) in pieces {
            t.firsts.push(f);
            t.pieces.push((u, piece));
            t.records += piece.records();
            t.units += piece.units();
        }
        Ok(())
    }
}

/// Where a record of a rewritten table comes from, and where it goes.
#[derive(Debug, Clone, Copy)]
enum Item {
    /// A record with its own entry (its CRC known).
    Entry(RecordLoc),
    /// Records `k0 .. k0 + count` of the old run `old` (CRC units from
    /// `crcs`), now lying one after another from `chunk`, `offset` on.
    Seg {
        old: Run,
        crcs: u64,
        k0: u32,
        count: u32,
        chunk: u32,
        offset: u32,
    },
}

/// A planned rewrite of a run table: units `first ..` become `bytes`; `old`
/// holds the units it overwrites, as they are, for the undo log.
pub(crate) struct Rewrite {
    pub(crate) first: u64,
    pub(crate) bytes: Vec<u8>,
    pub(crate) old: Vec<(u64, Vec<u8>)>,
}

impl<S: Storage> Files<S> {
    /// Plans the run table that holds records `0 .. length` after a delete
    /// or a compaction step, the table now holding `old_length`: record `i`
    /// becomes `filled[i]` where given (a delete's moved record, its CRC
    /// known), else stays what it is, at the place `moved[i]` gives where
    /// given (a compaction's copy of it). Pieces before the first record
    /// that changes are kept; from the piece that holds it on, the table
    /// is encoded again: what is left of a run stays a run, its block CRCs
    /// computed from its bytes once the old blocks they lie in passed
    /// their own CRCs (so damage is never given a fresh checksum). `None`
    /// when nothing changes.
    pub(crate) fn plan_runs(
        &self,
        old_length: u64,
        length: u64,
        filled: &std::collections::BTreeMap<u64, RecordLoc>,
        moved: &std::collections::HashMap<u64, RecordLoc>,
    ) -> Result<Option<Rewrite>> {
        let from = filled
            .keys()
            .next()
            .copied()
            .into_iter()
            .chain(moved.keys().copied())
            .min()
            .unwrap_or(length)
            .min(length);
        if from == length && length == old_length {
            return Ok(None);
        }
        self.ensure_runs(old_length)?;
        let (firsts, pieces, old_end) = {
            let t = self
                .run_table()
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (t.firsts.clone(), t.pieces.clone(), t.units_for(old_length))
        };
        let p = firsts.partition_point(|&f| f <= from) - 1;
        let (first_unit, start) = (pieces[p].0, firsts[p]);
        let start_at = self.table_start() + first_unit * UNIT_LEN as u64;

        let items = self.plan_items(&firsts, &pieces, p, start..length, filled, moved)?;

        let mut bytes = Vec::new();
        let mut unit = first_unit;
        let mut group: Vec<RecordLoc> = Vec::new();
        let flush = |group: &mut Vec<RecordLoc>, unit: &mut u64, bytes: &mut Vec<u8>| {
            if group.is_empty() {
                return;
            }
            bytes.extend_from_slice(&runs::encode_group(*unit, group.len() as u64));
            let mut entry = [0u8; UNIT_LEN];
            for (m, loc) in group.iter().enumerate() {
                v2::encode_entry(*unit + 1 + m as u64, loc, &[], &mut entry);
                bytes.extend_from_slice(&entry);
            }
            *unit += group.len() as u64 + 1;
            group.clear();
        };
        for item in items {
            match item {
                Item::Entry(loc) => group.push(loc),
                Item::Seg {
                    old,
                    crcs,
                    k0,
                    count,
                    chunk,
                    offset,
                } => {
                    let new = Run {
                        chunk,
                        offset,
                        stride: old.stride,
                        count,
                    };
                    let block_crcs = self.seg_crcs(start, &old, crcs, k0, count)?;
                    if count == 1 {
                        group.push(new.loc(0, block_crcs[0]));
                        continue;
                    }
                    flush(&mut group, &mut unit, &mut bytes);
                    runs::encode_run_piece(unit, &new, &block_crcs, &mut bytes);
                    unit += new.units();
                }
            }
        }
        flush(&mut group, &mut unit, &mut bytes);

        let n = usize::try_from(old_end - first_unit).unwrap_or(usize::MAX);
        let mut old = Vec::with_capacity(n);
        self.with_bytes(FileId::Meta, start_at, n * UNIT_LEN, "read table", |b| {
            for (k, u) in b.chunks_exact(UNIT_LEN).enumerate() {
                old.push((first_unit + k as u64, u.to_vec()));
            }
        })?;
        Ok(Some(Rewrite {
            first: first_unit,
            bytes,
            old,
        }))
    }

    /// Where each record of `records` (from the start of piece `p` on)
    /// comes from and goes to, runs kept together as long as their records
    /// stay consecutive: see [`plan_runs`](Self::plan_runs).
    fn plan_items(
        &self,
        firsts: &[u64],
        pieces: &[(u64, Piece)],
        p: usize,
        records: std::ops::Range<u64>,
        filled: &std::collections::BTreeMap<u64, RecordLoc>,
        moved: &std::collections::HashMap<u64, RecordLoc>,
    ) -> Result<Vec<Item>> {
        let mut items: Vec<Item> = Vec::new();
        let mut q = p;
        for i in records {
            while q + 1 < firsts.len() && firsts[q + 1] <= i {
                q += 1;
            }
            let place = moved.get(&i);
            if let Some(loc) = filled.get(&i) {
                items.push(Item::Entry(*loc));
                continue;
            }
            let (unit, piece) = pieces[q];
            let k = i - firsts[q];
            match piece {
                Piece::Group { .. } => {
                    let u = unit + 1 + k;
                    let at = self.table_start() + u * UNIT_LEN as u64;
                    let mut loc = self
                        .with_bytes(FileId::Meta, at, UNIT_LEN, "read table", |b| {
                            v2::decode_entry(u, b)
                        })?
                        .map_err(|reason| self.bad_entry(i, reason))?;
                    if let Some(to) = place {
                        (loc.chunk_id, loc.offset) = (to.chunk_id, to.offset);
                    }
                    items.push(Item::Entry(loc));
                }
                Piece::Run(run) => {
                    let k = k as u32;
                    let (chunk, offset) = match place {
                        Some(to) => (to.chunk_id, to.offset),
                        None => (run.chunk, run.loc(k, 0).offset),
                    };
                    if let Some(Item::Seg {
                        old,
                        crcs,
                        k0,
                        count,
                        chunk: c,
                        offset: o,
                    }) = items.last_mut()
                        && *crcs == unit + 1
                        && *k0 + *count == k
                        && *c == chunk
                        && u64::from(*o) + u64::from(*count) * u64::from(old.stride)
                            == u64::from(offset)
                    {
                        *count += 1;
                        continue;
                    }
                    items.push(Item::Seg {
                        old: run,
                        crcs: unit + 1,
                        k0: k,
                        count: 1,
                        chunk,
                        offset,
                    });
                }
            }
        }
        Ok(items)
    }

    /// The block CRCs of records `k0 .. k0 + count` of `run` taken as a run
    /// of their own (one CRC for a single record: its own), computed from
    /// their bytes once every block of `run` they lie in passed its CRC.
    /// `entry` names the records in errors (the first record of the piece).
    fn seg_crcs(&self, entry: u64, run: &Run, crcs: u64, k0: u32, count: u32) -> Result<Vec<u32>> {
        let per = run.block_records();
        let (b0, b1) = (k0 / per, (k0 + count - 1) / per);
        let (lo, _) = run.block_range(u64::from(b0));
        let (_, hi) = run.block_range(u64::from(b1));
        let stride = u64::from(run.stride);
        let file = FileId::Chunk(run.chunk);
        let file_len = self.open(file)?.unwrap_or(0);
        let start = u64::from(run.offset) + u64::from(lo) * stride;
        let end = u64::from(run.offset) + u64::from(hi) * stride;
        if end > file_len {
            return Err(self.bad_entry(
                entry,
                loaderx_format::EntryFault::PastFileEnd {
                    chunk: run.chunk,
                    end,
                    file_len,
                },
            ));
        }
        let mut stored = Vec::with_capacity((b1 - b0 + 1) as usize);
        for b in b0..=b1 {
            let unit = crcs + u64::from(b) / runs::CRCS_PER_UNIT as u64;
            let at = self.table_start() + unit * UNIT_LEN as u64;
            let c = self
                .with_bytes(FileId::Meta, at, UNIT_LEN, "read table", |bytes| {
                    runs::decode_crcs(unit, bytes)
                })?
                .map_err(|reason| self.bad_entry(entry, reason))?;
            stored.push(c[b as usize % runs::CRCS_PER_UNIT]);
        }
        let new_per = if count == 1 { 1 } else { per as usize };
        self.with_bytes(file, start, (end - start) as usize, "read", |bytes| {
            for (j, b) in (b0..=b1).enumerate() {
                let (l, h) = run.block_range(u64::from(b));
                let s = &bytes[((l - lo) as usize) * stride as usize..((h - lo) as usize) * stride as usize];
                let found = v2::crc32c(s);
                if found != stored[j] {
                    return Err(Error::Corrupt {
                        path: self.path(file),
                        entry,
                        reason: format!(
                            "block {b} of a run: checksum mismatch (stored {:#010x}, computed {found:#010x})",
                            stored[j]
                        ),
                    });
                }
            }
            let from = ((k0 - lo) as usize) * stride as usize;
            let mine = &bytes[from..from + count as usize * stride as usize];
            Ok(mine
                .chunks(new_per * stride as usize)
                .map(v2::crc32c)
                .collect())
        })?
    }
}

impl<C: crate::Codec, S: Storage> crate::Store<C, S> {
    /// Rewrites the run table for records `0 .. length` as
    /// [`Files::plan_runs`] plans it, all or nothing: the units it
    /// overwrites go to the undo log first (durable, as a delete's entries
    /// do), then the new units, then (when the count changes) the header;
    /// `meta.zr` is synced and the log removed. A failed write is rolled
    /// back in place; a crash, at the next writable open.
    pub(crate) fn rewrite_runs(
        &mut self,
        head: &loaderx_format::Head,
        length: u64,
        filled: &std::collections::BTreeMap<u64, RecordLoc>,
        moved: &std::collections::HashMap<u64, RecordLoc>,
    ) -> Result<()> {
        let Some(plan) = self.files.plan_runs(head.length, length, filled, moved)? else {
            return Ok(());
        };
        let log = crate::undo::Log {
            head: *head,
            entries: Vec::new(),
            units: plan.old,
        };
        self.write_undo(&log)?;
        let new = loaderx_format::Head { length, ..*head };
        let applied = self
            .files
            .write_unit(plan.first, &plan.bytes, "write table")
            .and_then(|()| {
                if length == head.length {
                    Ok(())
                } else {
                    self.files.write_head(&new, "write header")
                }
            })
            .and_then(|()| self.files.sync(FileId::Meta));
        self.files.reset_runs();
        if let Err(e) = applied {
            let undone = crate::undo::roll_back(&self.files, &log)
                .and_then(|()| self.files.sync(FileId::Meta))
                .and_then(|()| self.remove_undo());
            if undone.is_err() {
                self.poison(&e);
            }
            return Err(e);
        }
        if let Err(e) = self.remove_undo() {
            // The log would undo this rewrite at the next open: say it failed.
            self.poison(&e);
            return Err(e);
        }
        Ok(())
    }

    /// [`delete`](crate::Store::delete) of a store with a run table, with
    /// the store to ourselves and nothing pending: the same records end up
    /// under the same indices as in a store with one entry per record
    /// (each hole filled with the last record, in descending order), and a
    /// run the delete cuts becomes the runs on either side of the cut.
    pub(crate) fn delete_runs(&mut self, idxs: &[u64]) -> Result<()> {
        let head = self.head();
        self.check_meta_len(&head, None)?;
        let len = head.length;
        if let Some(&bad) = idxs.iter().find(|&&i| i >= len) {
            return Err(Error::IndexOutOfRange { index: bad, len });
        }
        let mut targets = idxs.to_vec();
        targets.sort_unstable_by(|a, b| b.cmp(a));
        targets.dedup();
        let mut filled: std::collections::BTreeMap<u64, RecordLoc> =
            std::collections::BTreeMap::new();
        let mut length = head.length;
        for &idx in &targets {
            length -= 1;
            if idx != length {
                let moved = if let Some(loc) = filled.get(&length) {
                    *loc
                } else {
                    // Checked as a read checks it, CRC (its block's) included.
                    let loc = self.files.runs_loc(length, true)?;
                    self.check_entry(length, &loc, &head)?;
                    loc
                };
                filled.insert(idx, moved);
            }
        }
        filled.retain(|&slot, _| slot < length);
        self.rewrite_runs(&head, length, &filled, &std::collections::HashMap::new())?;
        *self
            .committed
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            loaderx_format::Head { length, ..head };
        self.frontier.publish_len(length);
        Ok(())
    }
}
