//! Appending records: validate, encode in parallel, place serially, write
//! the bytes in parallel, then the table entries, and publish them to this
//! handle. The header on disk counts them at the next commit
//! ([`Store::sync`]), as `docs/FORMAT.md` ("Commit protocol") describes.

use loaderx_format::{
    CodecTag, ENTRY_LEN, Header, MAX_CHUNKS, MAX_RECORD_LEN, MAX_RECORDS, RecordLoc,
};

use crate::{
    Codec, CodecId, Error, Result, Store, parallel,
    storage::{FileId, Storage},
};

/// Bytes assembled into one positioned write.
const WRITE_PIECE: usize = 8 << 20;

/// Where the records of one append come from.
#[derive(Debug, Clone, Copy)]
enum Layout<'a> {
    /// `n` records of `item_len` bytes, record `i` at `i · item_len`.
    Fixed { n: usize, item_len: usize },
    /// Record `i` is `src[offsets[i]..][..lens[i]]`.
    Ragged { offsets: &'a [u64], lens: &'a [u32] },
}

impl Layout<'_> {
    fn count(&self) -> usize {
        match self {
            Layout::Fixed { n, .. } => *n,
            Layout::Ragged { lens, .. } => lens.len(),
        }
    }

    /// Start and length of record `i` in the source (unchecked arithmetic is
    /// fine after `validate`).
    fn range(&self, i: usize) -> (u64, u64) {
        match self {
            Layout::Fixed { item_len, .. } => ((i * item_len) as u64, *item_len as u64),
            Layout::Ragged { offsets, lens } => (offsets[i], u64::from(lens[i])),
        }
    }

    fn source<'s>(&self, src: &'s [u8], i: usize) -> &'s [u8] {
        let (at, len) = self.range(i);
        &src[at as usize..(at + len) as usize]
    }

    /// Checks every record's size and source range; returns the total bytes.
    fn validate(&self, src: &[u8]) -> Result<u64> {
        if let Layout::Ragged { offsets, lens } = self
            && offsets.len() != lens.len()
        {
            return Err(Error::LengthMismatch {
                what: "offsets",
                expected: lens.len(),
                found: offsets.len(),
            });
        }
        let mut total = 0u64;
        for i in 0..self.count() {
            let (at, len) = match self {
                Layout::Fixed { item_len, .. } => {
                    let at = (i as u64).checked_mul(*item_len as u64);
                    (at, *item_len as u64)
                }
                Layout::Ragged { offsets, lens } => (Some(offsets[i]), u64::from(lens[i])),
            };
            if len == 0 || len > u64::from(MAX_RECORD_LEN) {
                return Err(Error::RecordSize {
                    position: i,
                    len,
                    limit: MAX_RECORD_LEN,
                });
            }
            let end = at.and_then(|a| a.checked_add(len));
            if end.is_none_or(|end| end > src.len() as u64) {
                return Err(Error::BufferTooSmall {
                    what: "source",
                    position: i,
                    need: end.unwrap_or(u64::MAX),
                    have: src.len() as u64,
                });
            }
            total += len;
        }
        Ok(total)
    }
}

/// One record's encoded form: where its payload lives and how it is tagged.
#[derive(Debug, Clone, Copy)]
struct Encoded {
    phys: u32,
    codec: CodecTag,
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Appends `n` records of `item_len` bytes each, packed back to back in
    /// `src`, with the store's default codec. Returns the index of the first.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::RecordSize`] for an empty or oversized
    /// record, [`Error::BufferTooSmall`]/[`Error::LengthMismatch`] when the
    /// source does not hold the records, [`Error::Full`], or an I/O failure
    /// (nothing is committed then).
    pub fn append_fixed(&self, src: &[u8], n: usize, item_len: usize) -> Result<u64> {
        self.append_fixed_with(C::ID, src, n, item_len)
    }

    /// [`append_fixed`](Self::append_fixed) with an explicit codec.
    ///
    /// # Errors
    /// As [`append_fixed`](Self::append_fixed).
    pub fn append_fixed_with(
        &self,
        codec: CodecId,
        src: &[u8],
        n: usize,
        item_len: usize,
    ) -> Result<u64> {
        self.append_layout(codec, src, Layout::Fixed { n, item_len })
    }

    /// Appends ragged records, record `i` being `src[offsets[i]..][..lens[i]]`,
    /// with the store's default codec. Returns the index of the first.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::RecordSize`] for an empty or oversized
    /// record, [`Error::BufferTooSmall`]/[`Error::LengthMismatch`] when the
    /// source does not hold the records, [`Error::Full`], or an I/O failure
    /// (nothing is committed then).
    pub fn append_ragged(&self, src: &[u8], offsets: &[u64], lens: &[u32]) -> Result<u64> {
        self.append_ragged_with(C::ID, src, offsets, lens)
    }

    /// [`append_ragged`](Self::append_ragged) with an explicit codec.
    ///
    /// # Errors
    /// As [`append_ragged`](Self::append_ragged).
    pub fn append_ragged_with(
        &self,
        codec: CodecId,
        src: &[u8],
        offsets: &[u64],
        lens: &[u32],
    ) -> Result<u64> {
        self.append_layout(codec, src, Layout::Ragged { offsets, lens })
    }

    fn append_layout(&self, codec: CodecId, src: &[u8], layout: Layout<'_>) -> Result<u64> {
        self.check_usable()?;
        if self.is_read_only() {
            return Err(Error::ReadOnly {
                path: self.path().to_owned(),
                op: "append",
            });
        }
        let n = layout.count();
        let total = layout.validate(src)?;
        if n == 0 {
            return Ok(self.len());
        }
        if self.len() + n as u64 > u64::from(MAX_RECORDS) {
            return Err(self.full(n, "record", u64::from(MAX_RECORDS)));
        }

        // Encode outside the writer lock: it is the expensive part.
        let (arena, slots, encoded) = encode_all(codec, src, &layout, total)?;
        let payload = |i: usize| -> &[u8] {
            let e = encoded[i];
            if e.codec == CodecTag::RAW {
                layout.source(src, i)
            } else {
                &arena[slots[i]..slots[i] + e.phys as usize]
            }
        };

        let _writer = self
            .append_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lock) = &self.lock {
            lock.writer()?;
        }
        let before = self.header();
        let first = before.length;
        // Writing at a frontier past the tail chunk's real end would leave a
        // hole of zeros where records were lost: refuse instead.
        let tail_len = self.current_chunk_len(before.tail_chunk)?;
        if tail_len < u64::from(before.tail_offset) {
            let file = FileId::Chunk(u32::from(before.tail_chunk));
            return Err(Error::NotAStore {
                path: self.file_path(file),
                reason: format!(
                    "the chunk file holds {tail_len} bytes but the store's frontier is at {}: it was cut short; refusing to append",
                    before.tail_offset
                ),
            });
        }
        if u64::from(first) + n as u64 > u64::from(MAX_RECORDS) {
            return Err(self.full(n, "record", u64::from(MAX_RECORDS)));
        }

        // Place serially: a record never straddles chunks, and `>=` keeps the
        // frontier strictly below the capacity (FORMAT.md, "Limits").
        let mut locs = Vec::new();
        locs.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            bytes: (n * std::mem::size_of::<RecordLoc>()) as u64,
        })?;
        let (mut chunk, mut offset) = (u32::from(before.tail_chunk), u64::from(before.tail_offset));
        for e in &encoded {
            if offset + u64::from(e.phys) >= self.capacity {
                chunk += 1;
                offset = 0;
                if chunk >= MAX_CHUNKS {
                    return Err(self.full(n, "chunk", u64::from(MAX_CHUNKS)));
                }
            }
            locs.push(RecordLoc {
                offset: offset as u32,
                phys_length: e.phys,
                logic_length: layout.range(locs.len()).1 as u32,
                chunk_id: chunk as u16,
                codec: e.codec,
            });
            offset += u64::from(e.phys);
        }
        let after = Header {
            tail_chunk: chunk as u16,
            tail_offset: offset as u32,
            length: first + n as u32,
        };

        // New chunk files, then the bytes.
        self.create_chunks(u32::from(before.tail_chunk) + 1..=chunk)?;
        self.write_payloads(&locs, &payload)?;

        // Entries next; the header that counts them is written by the next
        // commit (`sync`), after the bytes and entries are durable.
        let mut table = Vec::new();
        table
            .try_reserve_exact(n * ENTRY_LEN)
            .map_err(|_| Error::OutOfMemory {
                bytes: (n * ENTRY_LEN) as u64,
            })?;
        for loc in &locs {
            table.extend_from_slice(&loc.encode());
        }
        self.files.write_entries(first, &table)?;
        self.frontier.publish(&after);
        Ok(u64::from(first))
    }

    /// Writes every record's payload at its placed location, in pieces of up
    /// to [`WRITE_PIECE`] contiguous bytes, in parallel.
    fn write_payloads<'p>(
        &self,
        locs: &[RecordLoc],
        payload: &(dyn Fn(usize) -> &'p [u8] + Sync),
    ) -> Result<()> {
        // Pieces: maximal runs of consecutive records in one chunk, capped in size.
        let mut pieces: Vec<(usize, usize)> = Vec::new();
        let mut start = 0;
        let mut bytes = 0usize;
        for (i, loc) in locs.iter().enumerate() {
            let new_chunk = i > start && loc.chunk_id != locs[start].chunk_id;
            if new_chunk || (i > start && bytes + loc.phys_length as usize > WRITE_PIECE) {
                pieces.push((start, i));
                start = i;
                bytes = 0;
            }
            bytes += loc.phys_length as usize;
        }
        pieces.push((start, locs.len()));
        let total: u64 = locs.iter().map(|l| u64::from(l.phys_length)).sum();
        parallel::for_ranges(pieces.len(), total, |range| {
            let mut buf = Vec::new();
            for &(a, b) in &pieces[range] {
                buf.clear();
                for i in a..b {
                    buf.extend_from_slice(payload(i));
                }
                let loc = &locs[a];
                self.write_chunk(loc.chunk_id, loc.offset, &buf)?;
            }
            Ok(())
        })
    }

    fn full(&self, extra: usize, what: &'static str, limit: u64) -> Error {
        Error::Full {
            len: self.len(),
            extra: extra as u64,
            limit,
            what,
        }
    }
}

/// Encodes every record in parallel into one arena laid out like the source
/// (record `i` gets `len_i - 1` bytes, so only a shrinking encoding fits).
/// Returns the arena, each record's slot in it, and what was stored.
fn encode_all(
    codec: CodecId,
    src: &[u8],
    layout: &Layout<'_>,
    total: u64,
) -> Result<(Vec<u8>, Vec<usize>, Vec<Encoded>)> {
    let n = layout.count();
    let mut encoded: Vec<Encoded> = (0..n)
        .map(|i| Encoded {
            phys: layout.range(i).1 as u32,
            codec: CodecTag::RAW,
        })
        .collect();
    if codec == CodecId::Raw {
        return Ok((Vec::new(), Vec::new(), encoded));
    }
    let mut arena = Vec::new();
    arena
        .try_reserve_exact(total as usize)
        .map_err(|_| Error::OutOfMemory { bytes: total })?;
    arena.resize(total as usize, 0);
    let mut slots = Vec::with_capacity(n);
    let mut at = 0usize;
    for i in 0..n {
        slots.push(at);
        at += layout.range(i).1 as usize;
    }
    // Each worker gets a disjoint run of records, hence a disjoint part of the
    // arena and of `encoded`: split both up front, safely.
    let parts = (parallel::threads() * 4).clamp(1, n);
    let mut arena_parts = Vec::with_capacity(parts);
    let mut enc_parts = Vec::with_capacity(parts);
    let (mut arena_rest, mut enc_rest) = (arena.as_mut_slice(), encoded.as_mut_slice());
    let mut prev = 0;
    for p in 1..=parts {
        let end = p * n / parts;
        let arena_end = if end == n { at } else { slots[end] } - slots[prev];
        let (a, ar) = arena_rest.split_at_mut(arena_end);
        let (e, er) = enc_rest.split_at_mut(end - prev);
        arena_parts.push((prev, a));
        enc_parts.push(e);
        arena_rest = ar;
        enc_rest = er;
        prev = end;
    }
    let work: Vec<_> = arena_parts.into_iter().zip(enc_parts).collect();
    parallel::for_each_part(work, total, |((first, arena_part), enc_part)| {
        let mut at = 0usize;
        for (k, e) in enc_part.iter_mut().enumerate() {
            let data = layout.source(src, first + k);
            let slot = &mut arena_part[at..at + data.len() - 1];
            if let Some(len) = codec.encode(data, slot) {
                e.phys = len as u32;
                e.codec = codec.tag();
            }
            at += data.len();
        }
    });
    Ok((arena, slots, encoded))
}
