//! Appending records: validate, encode in parallel, place serially, write
//! the bytes in parallel, then the table entries, and publish them to this
//! handle. The header on disk counts them at the next commit
//! ([`Store::sync`]), as `docs/FORMAT.md` ("Commit protocol") describes.

use std::sync::atomic::{AtomicU32, Ordering};

use loaderx_format::{CodecTag, Head, RecordLoc, Tail, v2::Kind};

use crate::{
    Codec, CodecId, Error, Result, Store, parallel, runtable,
    storage::{FileId, Storage},
};

/// Bytes assembled into one positioned write.
const WRITE_PIECE: usize = 2 << 20;

/// Work of encoding one table entry (its checksum, mostly), in raw-copy
/// byte equivalents, for deciding whether to share it out
/// (`parallel::for_ranges`).
const ENTRY_COST: u64 = 64;

/// Source bytes an append encodes and writes at a time: what bounds its
/// memory (the encoding arena is at most this large).
const WINDOW: u64 = 64 << 20;

/// Source bytes per part of a window's encode: small enough that the
/// parts' unequal ends cost little, large enough that a part's hand-off to
/// the pool does not show.
const ENCODE_PART_BYTES: u64 = 1 << 20;

/// Where the records of one append come from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Layout<'a> {
    /// `n` records of `item_len` bytes, record `i` at `i · item_len`.
    Fixed { n: usize, item_len: usize },
    /// Record `i` is `src[offsets[i]..][..lens[i]]`.
    Ragged { offsets: &'a [u64], lens: &'a [u32] },
    /// Record `i` is `parts[i]`, wherever it lives (`src` is unused): the
    /// caller's own buffers, written without packing them first.
    Parts { parts: &'a [&'a [u8]] },
}

impl<'a> Layout<'a> {
    fn count(&self) -> usize {
        match self {
            Layout::Fixed { n, .. } => *n,
            Layout::Ragged { lens, .. } => lens.len(),
            Layout::Parts { parts } => parts.len(),
        }
    }

    /// Length of record `i`.
    fn len(&self, i: usize) -> u64 {
        match self {
            Layout::Fixed { item_len, .. } => *item_len as u64,
            Layout::Ragged { lens, .. } => u64::from(lens[i]),
            Layout::Parts { parts } => parts[i].len() as u64,
        }
    }

    /// The end of the window of records starting at `start`: as many as fit
    /// in `budget` source bytes, and at least one.
    fn window_end(&self, start: usize, budget: u64) -> usize {
        let n = self.count();
        match self {
            Layout::Fixed { item_len, .. } => {
                let per = (budget / (*item_len as u64).max(1)).max(1) as usize;
                (start + per).min(n)
            }
            Layout::Ragged { .. } | Layout::Parts { .. } => {
                let mut bytes = 0u64;
                let mut end = start;
                while end < n && (end == start || bytes + self.len(end) <= budget) {
                    bytes += self.len(end);
                    end += 1;
                }
                end
            }
        }
    }

    /// Records `start..end` as a layout of their own, with the source it
    /// indexes (a fixed layout's source is cut to the window; a ragged
    /// one's offsets index the whole source).
    fn window<'s>(&self, src: &'s [u8], start: usize, end: usize) -> (&'s [u8], Layout<'a>) {
        match *self {
            Layout::Fixed { item_len, .. } => (
                &src[start * item_len..end * item_len],
                Layout::Fixed {
                    n: end - start,
                    item_len,
                },
            ),
            Layout::Ragged { offsets, lens } => (
                src,
                Layout::Ragged {
                    offsets: &offsets[start..end],
                    lens: &lens[start..end],
                },
            ),
            Layout::Parts { parts } => (
                src,
                Layout::Parts {
                    parts: &parts[start..end],
                },
            ),
        }
    }

    /// Record `i`'s bytes (unchecked arithmetic is fine after `validate`).
    fn source<'s>(&'s self, src: &'s [u8], i: usize) -> &'s [u8] {
        match self {
            Layout::Fixed { item_len, .. } => &src[i * item_len..][..*item_len],
            Layout::Ragged { offsets, lens } => &src[offsets[i] as usize..][..lens[i] as usize],
            Layout::Parts { parts } => parts[i],
        }
    }

    /// Where record `i` lies in the buffer it is read from: its start
    /// (`None` past `u64`), its length, and the length of that buffer.
    fn extent(&self, i: usize, src: &[u8]) -> (Option<u64>, u64, u64) {
        match self {
            Layout::Fixed { item_len, .. } => {
                let len = *item_len as u64;
                ((i as u64).checked_mul(len), len, src.len() as u64)
            }
            Layout::Ragged { offsets, lens } => {
                (Some(offsets[i]), u64::from(lens[i]), src.len() as u64)
            }
            // A part is a buffer of its own, the whole of it the record.
            Layout::Parts { parts } => {
                let len = parts[i].len() as u64;
                (Some(0), len, len)
            }
        }
    }

    /// Checks every record's size and source range; returns the total bytes.
    /// Empty records pass only when `allow_empty` (ragged stores: an empty
    /// token list is a record).
    fn validate(&self, src: &[u8], limit: u32, allow_empty: bool) -> Result<u64> {
        if let Layout::Ragged { offsets, lens } = self {
            Error::check_len("offsets", lens.len(), offsets.len())?;
        }
        let mut total = 0u64;
        for i in 0..self.count() {
            let (at, len, have) = self.extent(i, src);
            if (len == 0 && !allow_empty) || len > u64::from(limit) {
                return Err(Error::RecordSize {
                    position: i,
                    len,
                    limit,
                });
            }
            let end = at.and_then(|a| a.checked_add(len));
            if end.is_none_or(|end| end > have) {
                return Err(Error::BufferTooSmall {
                    what: "source",
                    position: i,
                    need: end.unwrap_or(u64::MAX),
                    have,
                });
            }
            total += len;
        }
        Ok(total)
    }
}

/// Encodes one record into a slot one byte shorter (see [`Codec::encode`]).
type EncodeFn<'a> = dyn Fn(&[u8], &mut [u8]) -> Option<usize> + Sync + 'a;

/// One record's encoded form: where its payload lives, how it is tagged,
/// and (format v2) the CRC32C of what is stored.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Encoded {
    pub(crate) phys: u32,
    pub(crate) codec: CodecTag,
    pub(crate) crc: u32,
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
        self.append_fixed_with(self.append_codec(), src, n, item_len)
    }

    /// The codec appends use unless told otherwise: a v2 store's schema
    /// codec, else the handle's default `C`.
    pub fn append_codec(&self) -> CodecId {
        self.schema
            .as_ref()
            .and_then(|s| CodecId::from_tag(s.codec))
            .unwrap_or(self.default_codec)
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
        self.append_ragged_with(self.append_codec(), src, offsets, lens)
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

    /// Appends records of a ragged format v2 store: record `i` is
    /// `src[offsets[i]..][..lens[i]]` and has the dimensions
    /// `dims[i · ndim ..][.. ndim]`, which must multiply out (with the
    /// dtype's size) to `lens[i]`. Returns the index of the first.
    ///
    /// # Errors
    /// As [`append_ragged`](Self::append_ragged), plus
    /// [`Error::Schema`] when the store is not ragged or a record's
    /// dimensions do not match its size.
    pub fn append_shaped(
        &self,
        src: &[u8],
        offsets: &[u64],
        lens: &[u32],
        dims: &[u32],
    ) -> Result<u64> {
        self.append_shaped_layout(src, Layout::Ragged { offsets, lens }, dims)
    }

    /// [`append_shaped`](Self::append_shaped) with every record in a buffer
    /// of its own: record `i` is `records[i]`, written from there (no
    /// packing copy first), with the dimensions `dims[i · ndim ..][.. ndim]`.
    ///
    /// # Errors
    /// As [`append_shaped`](Self::append_shaped).
    pub fn append_shaped_parts(&self, records: &[&[u8]], dims: &[u32]) -> Result<u64> {
        self.append_shaped_layout(&[], Layout::Parts { parts: records }, dims)
    }

    fn append_shaped_layout(&self, src: &[u8], layout: Layout<'_>, dims: &[u32]) -> Result<u64> {
        let Some(schema) = self.schema.as_ref().filter(|s| s.kind == Kind::Ragged) else {
            return Err(self.schema_error("append_shaped needs a ragged store".into()));
        };
        let ndim = usize::from(schema.ndim);
        let n = layout.count();
        Error::check_len("dims (records × rank)", n * ndim, dims.len())?;
        let itemsize = u64::from(schema.dtype.itemsize());
        for (i, d) in dims.chunks_exact(ndim).enumerate() {
            let bytes = d
                .iter()
                .fold(itemsize, |a, &x| a.saturating_mul(u64::from(x)));
            let len = layout.len(i);
            if bytes != len {
                return Err(self.schema_error(format!(
                    "record {i} (of this append) has dimensions {d:?}, which give {bytes} bytes of {}, but it is {len} bytes",
                    schema.dtype.name(),
                )));
            }
        }
        let codec = CodecId::from_tag(schema.codec).unwrap_or(CodecId::Raw);
        self.append_with_dims(codec, src, layout, dims)
    }

    fn append_layout(&self, codec: CodecId, src: &[u8], layout: Layout<'_>) -> Result<u64> {
        if let Some(schema) = &self.schema {
            match schema.kind {
                Kind::Ragged => {
                    return Err(self.schema_error(
                        "a ragged store's records need their dimensions: use append_shaped".into(),
                    ));
                }
                Kind::Dense => {
                    let item = schema.item_len().unwrap_or(0);
                    let bad = match layout {
                        Layout::Fixed { item_len, .. } => {
                            (item_len as u64 != item).then_some(item_len as u64)
                        }
                        _ => (0..layout.count())
                            .map(|i| layout.len(i))
                            .find(|&len| len != item),
                    };
                    if let Some(found) = bad {
                        return Err(self.schema_error(format!(
                            "records of this dense store are {item} bytes ({} × {:?}), got {found}",
                            schema.dtype.name(),
                            schema.shape
                        )));
                    }
                }
                Kind::Bytes => {}
            }
        }
        self.append_with_dims(codec, src, layout, &[])
    }

    /// The codec for `codec`, one found through the registry: it must be
    /// listed in the store's codec table, at the version registered.
    fn plugged_codec(&self, codec: CodecId) -> Result<&dyn Codec> {
        let tag = codec.tag();
        let listed = self.schema.as_ref().and_then(|s| s.codec_ref(tag));
        let Some(listed) = listed else {
            return Err(self.schema_error(format!(
                "codec tag {} is not in the store's codec table (a store lists the codecs past the built-ins it may hold when it is created)",
                tag.0
            )));
        };
        // Listed means checked at open: registered, same name, same or later version.
        let c = self
            .codecs
            .registered(tag)
            .expect("a listed codec was registered when the store opened");
        if c.version() != listed.version {
            return Err(self.schema_error(format!(
                "codec {:?} is version {} here but the store was written by version {}: appending would mix versions",
                listed.name,
                c.version(),
                listed.version
            )));
        }
        Ok(c)
    }

    pub(crate) fn schema_error(&self, reason: String) -> Error {
        Error::Schema {
            path: self.path().to_owned(),
            reason,
        }
    }

    fn append_with_dims(
        &self,
        codec: CodecId,
        src: &[u8],
        layout: Layout<'_>,
        dims: &[u32],
    ) -> Result<u64> {
        self.check_writable("append")?;
        let format = self.layout();
        if let Some(s) = self.schema.as_ref().filter(|s| s.codec.is_image()) {
            return Err(self.schema_error(format!(
                "an image store (codec {}) holds encoded images: append them with append_images or append_encoded_images",
                s.codec.name().unwrap_or("image")
            )));
        }
        if codec == CodecId::ZstdDict && self.dictionary.is_none() {
            return Err(
                self.schema_error("codec zstd_dict needs a store created with a dictionary".into())
            );
        }
        if !format.can_write(codec.tag()) {
            return Err(self.schema_error(format!("codec {codec} needs a format v2 store")));
        }
        if cfg!(feature = "image") && codec.tag().is_image() {
            // Built in with the feature, never found through the registry:
            // image records need the image paths, which check the pixels.
            return Err(self.schema_error(format!(
                "{codec} records are written with append_images or append_encoded_images, into an image store"
            )));
        }
        let plugged = if codec.is_builtin() {
            if let Some(feature) = codec.missing_feature() {
                return Err(self.unavailable(codec, feature));
            }
            None
        } else {
            Some(self.plugged_codec(codec)?)
        };
        let n = layout.count();
        let ragged = self.schema.as_ref().is_some_and(|s| s.kind == Kind::Ragged);
        layout.validate(src, format.max_record_len(), ragged)?;
        if n == 0 {
            return Ok(self.len());
        }
        let max_records = format.max_records();
        if self.len().saturating_add(n as u64) > max_records {
            return Err(self.full(n, "record", max_records));
        }

        let dict = self.dictionary.as_ref();
        let encode = |data: &[u8], slot: &mut [u8]| match (codec, dict, plugged) {
            (_, _, Some(c)) => c.encode(data, slot),
            (CodecId::ZstdDict, Some(d), None) => d.encode(data, slot),
            _ => codec.encode(data, slot),
        };

        let (_writer, before) = self.begin_append(n, max_records)?;
        let first = before.length;

        // In windows of at most WINDOW source bytes, so memory stays bounded
        // whatever the append's size: encode in parallel, place, write the
        // bytes and the entries; publish once, at the end (a failure leaves
        // nothing visible: what was written lies past the frontier).
        let mut head = before;
        let mut start = 0;
        while start < n {
            let end = layout.window_end(start, WINDOW);
            head = self.append_window(&head, codec, &encode, src, &layout, start..end, dims)?;
            start = end;
        }
        self.frontier.publish(&head);
        Ok(first)
    }

    /// Takes the append lock and checks that `n` more records fit and that
    /// every lane's tail chunk is whole; returns the lock and the head to
    /// append after. Shared by every append path.
    pub(crate) fn begin_append(
        &self,
        n: usize,
        max_records: u64,
    ) -> Result<(std::sync::MutexGuard<'_, ()>, Head)> {
        let writer = self
            .append_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.become_writer()?;
        let before = self.head();
        let first = before.length;
        // Writing at a frontier past a tail chunk's real end would leave a
        // hole of zeros where records were lost: refuse instead.
        for tail in before.lane_tails() {
            self.touch_chunk(tail.chunk)?;
            let tail_len = self.current_chunk_len(tail.chunk, None)?;
            if tail_len < u64::from(tail.offset) {
                let file = FileId::Chunk(tail.chunk);
                return Err(Error::NotAStore {
                    path: self.file_path(file),
                    reason: format!(
                        "the chunk file holds {tail_len} bytes but the store's frontier is at {}: it was cut short; refusing to append",
                        tail.offset
                    ),
                });
            }
        }
        if first.saturating_add(n as u64) > max_records {
            return Err(self.full(n, "record", max_records));
        }
        // The table must stay inside the extent `meta.zr` is mapped over
        // (a v1 table, at most 256 MiB, always does).
        // A run table's appends take at most two units a record (a piece
        // head for each, in the worst case).
        let need = if self.layout().runs() {
            self.files.table_end(first)? + 2 * (n as u64 + 1) * self.files.entry_len() as u64
        } else {
            self.files.table_end(first + n as u64)?
        };
        if need > crate::storage::META_EXTENT {
            let fit = (crate::storage::META_EXTENT - self.files.table_end(0)?)
                / self.files.entry_len() as u64;
            return Err(self.full(n, "record (the table's mapped extent)", fit));
        }
        Ok((writer, before))
    }

    /// Encodes, places and writes records `range` of an append (one
    /// window), and their table entries after `head`; returns the head
    /// that counts them (not published).
    #[allow(clippy::too_many_arguments)]
    fn append_window(
        &self,
        head: &Head,
        codec: CodecId,
        encode: &EncodeFn<'_>,
        src: &[u8],
        layout: &Layout<'_>,
        range: std::ops::Range<usize>,
        dims: &[u32],
    ) -> Result<Head> {
        let (start, end) = (range.start, range.end);
        let checksums = self.layout().checksums();
        let ndim = self.files.entry_dims();
        let (sub_src, sub) = layout.window(src, start, end);
        let sub_total = (start..end).map(|i| layout.len(i)).sum();
        // Raw records of a v2 store get their checksums as they are written,
        // in the same pass over the source (a memory-mapped input read
        // from disk is read once, by the writing threads, overlapping I/O
        // with the copies), not in a pass of their own before. In a run
        // table every record does: which records become runs is known only
        // once they are placed, and each gets only the checksum the table
        // keeps (a block CRC for a run's records, its own for the others).
        let runs = self.layout().runs();
        let crc_on_write = checksums && (codec == CodecId::Raw || runs);
        // The handle's arena, reused from window to window, unless this
        // window is one record larger than a window: that one gets an arena
        // of its own, freed with it.
        let mut own = Vec::new();
        let mut kept = self
            .append_arena
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let arena = if sub_total <= WINDOW {
            &mut *kept
        } else {
            &mut own
        };
        let (slots, encoded) = encode_all(
            codec,
            encode,
            checksums && !crc_on_write,
            sub_src,
            &sub,
            sub_total,
            arena,
        )?;
        let arena = &*arena;
        let (mut locs, after, new_chunks) = self.place(head, &encoded, &sub, end - start)?;
        self.create_chunks(new_chunks)?;
        let payload = |i: usize| -> &[u8] {
            let e = encoded[i];
            if e.codec == CodecTag::RAW {
                sub.source(sub_src, i)
            } else {
                &arena[slots[i]..slots[i] + e.phys as usize]
            }
        };
        // Raw records of a dense append are contiguous in the source:
        // written from it directly, without a copy.
        let contiguous = match sub {
            Layout::Fixed { item_len, .. } if codec == CodecId::Raw => Some(item_len),
            _ => None,
        };
        let spans = if runs {
            runtable::plan_spans(&locs)
        } else {
            Vec::new()
        };
        // With `crc_on_write`, `crcs[b]` is the CRC of the checksum block
        // that starts at record `b` (a record of its own outside runs).
        let crcs: Vec<AtomicU32> = if crc_on_write {
            (0..locs.len()).map(|_| AtomicU32::new(0)).collect()
        } else {
            Vec::new()
        };
        self.write_payloads(
            &locs,
            &payload,
            contiguous.map(|item| (sub_src, item)),
            crc_on_write.then_some((&crcs[..], &spans[..])),
        )?;
        if crc_on_write {
            for (loc, crc) in locs.iter_mut().zip(&crcs) {
                loc.crc = crc.load(Ordering::Relaxed);
            }
        }

        // Entries next; the header that counts them is written by the next
        // commit (`sync`), after the bytes and entries are durable.
        // Encoded (a checksum each) and written in parallel parts: for small
        // records this is most of an append's work.
        if runs {
            // Checksums off: the block CRCs are not checked either.
            self.files.write_runs(head.length, &locs, &spans, &|b, _| {
                crcs.get(b).map_or(0, |c| c.load(Ordering::Relaxed))
            })?;
            return Ok(after);
        }
        let entry_len = self.files.entry_len();
        let count = end - start;
        parallel::for_ranges(count, count as u64 * ENTRY_COST, |range| {
            let mut table = Vec::new();
            let bytes = range.len() * entry_len;
            table
                .try_reserve_exact(bytes)
                .map_err(|_| Error::OutOfMemory {
                    bytes: bytes as u64,
                })?;
            for k in range.clone() {
                let d = if ndim > 0 {
                    &dims[(start + k) * ndim..(start + k + 1) * ndim]
                } else {
                    &[][..]
                };
                self.files
                    .encode_entry(head.length + k as u64, &locs[k], d, &mut table);
            }
            self.files
                .write_entries(head.length + range.start as u64, &table)
        })?;
        Ok(after)
    }

    /// Places the encoded records serially: they are cut into one
    /// contiguous run per lane, of about equal bytes, so the lanes' files
    /// are written at once (over as many lanes as the append fills with
    /// [`lane_bytes`](crate::OpenOptions::lane_bytes) each, from lane 0);
    /// a record never straddles chunks, and `>=` keeps a frontier strictly
    /// below the capacity (FORMAT.md, "Limits").
    /// Returns each record's place, the head after, and the new chunks.
    pub(crate) fn place(
        &self,
        before: &Head,
        encoded: &[Encoded],
        layout: &Layout<'_>,
        n: usize,
    ) -> Result<(Vec<RecordLoc>, Head, Vec<u32>)> {
        let format = self.layout();
        let mut locs = Vec::new();
        locs.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            bytes: (n * std::mem::size_of::<RecordLoc>()) as u64,
        })?;
        let lanes = usize::from(before.lanes);
        let stored: u64 = encoded.iter().map(|e| u64::from(e.phys)).sum();
        let spread = match self.lane_bytes {
            0 => lanes,
            per => usize::try_from(stored.div_ceil(per)).map_or(lanes, |n| n.clamp(1, lanes)),
        };
        let mut after = *before;
        let mut new_chunks = Vec::new();
        let mut lane = 0usize;
        let mut lane_bytes = 0u64;
        for e in encoded {
            // Move to the next lane once this one has its share.
            if lane + 1 < spread && lane_bytes * spread as u64 >= stored * (lane as u64 + 1) {
                lane += 1;
            }
            let tail = &mut after.tails[lane];
            if u64::from(tail.offset) + u64::from(e.phys) >= self.capacity {
                let next = tail.chunk.checked_add(lanes as u32);
                let Some(next) = next.filter(|&c| format.chunk_fits(c)) else {
                    return Err(self.full(n, "chunk", format.max_chunks()));
                };
                *tail = Tail {
                    chunk: next,
                    offset: 0,
                };
                new_chunks.push(next);
            }
            locs.push(RecordLoc {
                offset: tail.offset,
                phys_length: e.phys,
                logic_length: layout.len(locs.len()) as u32,
                chunk_id: tail.chunk,
                codec: e.codec,
                crc: e.crc,
            });
            tail.offset += e.phys;
            lane_bytes += u64::from(e.phys);
        }
        after.length = before.length + n as u64;

        Ok((locs, after, new_chunks))
    }

    /// Writes every record's payload at its placed location, in pieces of up
    /// to [`WRITE_PIECE`] contiguous bytes (or one checksum block), in
    /// parallel. With `checksums = (crcs, spans)`, stores the CRC32C of
    /// each checksum block's payload in `crcs[b]`, `b` its first record, on
    /// the way, while its bytes are at hand (each piece's records just
    /// before its write): the blocks of the runs in `spans`, and every
    /// other record a block of its own (every record when `spans` is
    /// empty). Pieces never split a block.
    pub(crate) fn write_payloads<'p>(
        &self,
        locs: &[RecordLoc],
        payload: &(dyn Fn(usize) -> &'p [u8] + Sync),
        contiguous: Option<(&[u8], usize)>,
        checksums: Option<(&[AtomicU32], &[runtable::Span])>,
    ) -> Result<()> {
        let spans = checksums.map_or(&[][..], |(_, spans)| spans);
        let checksum = |b: usize, bytes: &[u8]| {
            if let Some((crcs, _)) = checksums {
                crcs[b].store(loaderx_format::v2::crc32c(bytes), Ordering::Relaxed);
            }
        };
        // Pieces: maximal runs of consecutive records in one chunk, capped
        // in size, cut between checksum blocks (a block lies in one chunk).
        let mut pieces: Vec<(usize, usize)> = Vec::new();
        let mut start = 0;
        let mut bytes = 0usize;
        for (a, b) in runtable::blocks_from(spans, locs, 0) {
            let len: usize = locs[a..b].iter().map(|l| l.phys_length as usize).sum();
            let new_chunk = a > start && locs[a].chunk_id != locs[start].chunk_id;
            if new_chunk || (a > start && bytes + len > WRITE_PIECE) {
                pieces.push((start, a));
                start = a;
                bytes = 0;
            }
            bytes += len;
        }
        pieces.push((start, locs.len()));
        // Interleaved by file (each chunk's first piece, then each one's
        // second, ...): a buffered write holds its file's lock throughout,
        // so threads taking the pieces in turn write different files at once.
        let mut files: Vec<(u32, usize)> = Vec::new();
        let mut order: Vec<(usize, usize, (usize, usize))> = Vec::with_capacity(pieces.len());
        for &(a, b) in &pieces {
            let chunk = locs[a].chunk_id;
            let file = files
                .iter()
                .position(|&(c, _)| c == chunk)
                .unwrap_or_else(|| {
                    files.push((chunk, 0));
                    files.len() - 1
                });
            order.push((files[file].1, file, (a, b)));
            files[file].1 += 1;
        }
        order.sort_unstable_by_key(|&(nth, file, _)| (nth, file));
        let total: u64 = locs.iter().map(|l| u64::from(l.phys_length)).sum();
        parallel::for_io_items(order.len(), total, |buf: &mut Vec<u8>, k| {
            let (a, b) = order[k].2;
            let loc = &locs[a];
            let blocks = runtable::blocks_from(spans, locs, a).take_while(|&(s, _)| s < b);
            if let Some((src, item)) = contiguous {
                if checksums.is_some() {
                    for (s, e) in blocks {
                        checksum(s, &src[s * item..e * item]);
                    }
                }
                return self.write_chunk(loc.chunk_id, loc.offset, &src[a * item..b * item]);
            }
            buf.clear();
            for (s, e) in blocks {
                // Checksummed as copied, so the CRC is of the bytes written
                // even if the source changes meanwhile.
                let at = buf.len();
                for i in s..e {
                    buf.extend_from_slice(payload(i));
                }
                checksum(s, &buf[at..]);
            }
            self.write_chunk(loc.chunk_id, loc.offset, buf)
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
/// (record `i` gets `len_i - 1` bytes, so only a shrinking encoding fits):
/// `arena`, grown to `total` bytes if shorter and otherwise reused as it
/// is, pages and all (fresh memory costs a page fault per page, and an
/// append's windows are as large as glibc's allocator then maps afresh
/// each time). A fresh arena is not filled: its pages are first touched by
/// the workers that encode into them ([`crate::hints::zeroed_buffer`]). Returns each record's slot in the arena and what was stored.
fn encode_all(
    codec: CodecId,
    encode: &EncodeFn<'_>,
    with_crc: bool,
    src: &[u8],
    layout: &Layout<'_>,
    total: u64,
    arena: &mut Vec<u8>,
) -> Result<(Vec<usize>, Vec<Encoded>)> {
    let n = layout.count();
    let mut encoded: Vec<Encoded> = (0..n)
        .map(|i| Encoded {
            phys: layout.len(i) as u32,
            codec: CodecTag::RAW,
            crc: 0,
        })
        .collect();
    if codec == CodecId::Raw {
        if with_crc {
            parallel::for_each_part(split_mut(&mut encoded), total, |(first, part)| {
                for (k, e) in part.iter_mut().enumerate() {
                    e.crc = loaderx_format::v2::crc32c(layout.source(src, first + k));
                }
            });
        }
        return Ok((Vec::new(), encoded));
    }
    if arena.len() < total as usize {
        // The old arena goes first, so the two are never held at once.
        drop(std::mem::take(arena));
        *arena = crate::hints::zeroed_buffer(total as usize)
            .ok_or(Error::OutOfMemory { bytes: total })?;
    }
    let mut slots = Vec::with_capacity(n);
    let mut at = 0usize;
    for i in 0..n {
        slots.push(at);
        at += layout.len(i) as usize;
    }
    // Each worker gets a disjoint run of records, hence a disjoint part of the
    // arena and of `encoded`: split both up front, safely. At least 4 parts
    // per thread and at least one per ENCODE_PART_BYTES of the window, cut by
    // record count (so about that size on average), so the core that ends a
    // window first idles for a small part's encode, not a quarter of its own
    // share.
    let parts = (parallel::threads() * 4)
        .max(usize::try_from(total / ENCODE_PART_BYTES).unwrap_or(usize::MAX))
        .clamp(1, n);
    let mut arena_parts = Vec::with_capacity(parts);
    let mut enc_parts = Vec::with_capacity(parts);
    let (mut arena_rest, mut enc_rest) = (&mut arena[..total as usize], encoded.as_mut_slice());
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
            if data.is_empty() {
                // An empty record is stored raw: nothing to encode.
                if with_crc {
                    e.crc = loaderx_format::v2::crc32c(data);
                }
                continue;
            }
            let slot = &mut arena_part[at..at + data.len() - 1];
            if let Some(len) = encode(data, slot) {
                e.phys = len as u32;
                e.codec = codec.tag();
                if with_crc {
                    e.crc = loaderx_format::v2::crc32c(&slot[..len]);
                }
            } else if with_crc {
                e.crc = loaderx_format::v2::crc32c(data);
            }
            at += data.len();
        }
    });
    Ok((slots, encoded))
}

/// `items` cut into about `4 × threads` runs, each with the index of its first.
pub(crate) fn split_mut<T>(items: &mut [T]) -> Vec<(usize, &mut [T])> {
    let n = items.len();
    let parts = (parallel::threads() * 4).clamp(1, n.max(1));
    let mut out = Vec::with_capacity(parts);
    let mut rest = items;
    let mut prev = 0;
    for p in 1..=parts {
        let end = p * n / parts;
        let (a, r) = rest.split_at_mut(end - prev);
        out.push((prev, a));
        rest = r;
        prev = end;
    }
    out
}
