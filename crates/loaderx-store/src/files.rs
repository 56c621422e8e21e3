//! The store's files, reached through the storage seam, with the file's path
//! and the operation attached to every I/O error — so the engine says
//! `files.sync(FileId::Meta)?` and the error still names `…/meta.zr`.
//!
//! Also the `meta.zr` operations in the format's terms (read an entry, write
//! entries, write the header) for both format versions, asking the version
//! seam ([`Layout`], `layout.rs`) for what differs: where the table starts,
//! how long an entry is, how it is encoded.

use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};

use loaderx_format::{
    FormatError, HEADER_LEN, Head, RecordLoc,
    v2::{self, HeaderV2},
};

use crate::{
    Error, Result,
    layout::Layout,
    storage::{FileId, Storage},
};

/// A table entry with its dimensions (ragged v2 stores), for operations
/// that move entries between slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) loc: RecordLoc,
    pub(crate) dims: [u32; v2::MAX_NDIM],
}

/// A [`Storage`] and the directory it stands for.
#[derive(Debug)]
pub(crate) struct Files<S> {
    storage: S,
    dir: PathBuf,
    layout: Layout,
    /// Sequence number of the last v2 header written.
    sequence: AtomicU64,
    /// The index of a run table's pieces (`runtable.rs`; empty otherwise).
    run_table: std::sync::RwLock<crate::runtable::RunTable>,
    /// Whether gathers check run records' block CRCs (the handle's
    /// `check_raw`): set once at open.
    check_blocks: bool,
}

impl<S: Storage> Files<S> {
    pub(crate) fn new(storage: S) -> Files<S> {
        let dir = storage.location().to_owned();
        Files {
            storage,
            dir,
            layout: Layout::V1,
            sequence: AtomicU64::new(0),
            run_table: std::sync::RwLock::default(),
            check_blocks: false,
        }
    }

    /// The index of a run table's pieces.
    pub(crate) fn run_table(&self) -> &std::sync::RwLock<crate::runtable::RunTable> {
        &self.run_table
    }

    /// Sets whether gathers check run records' block CRCs.
    pub(crate) fn set_check_blocks(&mut self, check: bool) {
        self.check_blocks = check;
    }

    /// Sets the layout found at open (and the v2 header sequence read).
    pub(crate) fn set_layout(&mut self, layout: Layout, sequence: u64) {
        self.layout = layout;
        self.sequence = AtomicU64::new(sequence);
    }

    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// Dimensions each entry carries.
    pub(crate) fn entry_dims(&self) -> usize {
        self.layout.entry_dims()
    }

    /// Bytes of one table entry.
    pub(crate) fn entry_len(&self) -> usize {
        self.layout.entry_len()
    }

    /// Byte offset of table entry `index` in `meta.zr`.
    pub(crate) fn entry_at(&self, index: u64) -> u64 {
        self.layout.entry_at(index)
    }

    /// The store's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn storage(&self) -> &S {
        &self.storage
    }

    pub(crate) fn is_read_only(&self) -> bool {
        self.storage.is_read_only()
    }

    /// Where `file` lives, for error messages.
    pub(crate) fn path(&self, file: FileId) -> PathBuf {
        self.dir.join(file.file_name())
    }

    /// Turns an I/O error on `file` into one naming its path and `op`.
    fn fail(&self, file: FileId, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |e| Error::io(self.path(file), op, e)
    }

    /// Opens `file` if it exists: its length, or `None` when absent.
    pub(crate) fn open(&self, file: FileId) -> Result<Option<u64>> {
        self.storage
            .open_file(file, false, 0)
            .map_err(self.fail(file, "open"))
    }

    /// Opens `file`, creating it with length `len` when absent; its length.
    pub(crate) fn create(&self, file: FileId, len: u64) -> Result<u64> {
        self.storage
            .open_file(file, true, len)
            .map_err(self.fail(file, "create"))
            .map(|got| got.unwrap_or(0))
    }

    /// The length of open `file` as the file system reports it now; with
    /// `drained`, a file it shows unchanged since its last check keeps that
    /// check's length ([`Storage::current_len_since`]).
    pub(crate) fn current_len(
        &self,
        file: FileId,
        drained: Option<&crate::storage::Drained>,
    ) -> Result<u64> {
        match drained {
            Some(drained) => self.storage.current_len_since(file, drained),
            None => self.storage.current_len(file),
        }
        .map_err(self.fail(file, "stat"))
    }

    /// Calls `f` with `len` bytes of `file` at `offset` (a range the caller
    /// checked against the file's known length).
    #[inline]
    pub(crate) fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        op: &'static str,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        self.storage
            .with_bytes(file, offset, len, f)
            .map_err(self.fail(file, op))
    }

    /// Calls `f` with several ranges at once ([`Storage::with_many_bytes`];
    /// ranges the caller checked against their files' known lengths).
    pub(crate) fn with_many_bytes<R>(
        &self,
        ranges: &[(FileId, u64, usize)],
        op: &'static str,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R> {
        self.storage
            .with_many_bytes(ranges, f)
            .map_err(|(file, e)| self.fail(file, op)(e))
    }

    /// Calls `f` with groups of `ranges` as their bytes are at hand
    /// ([`Storage::with_bytes_as_fetched`]), holding the storage to its
    /// contract: `f` sees every range at most once, with as many bytes as
    /// asked, and the call fails unless every range was handed over (a
    /// storage is outside code: its mistakes must not reach the engine's
    /// writes as overlaps or as slots left unwritten).
    pub(crate) fn with_bytes_as_fetched(
        &self,
        ranges: &[(FileId, u64, usize)],
        op: &'static str,
        f: &mut crate::storage::OnFetched<'_>,
    ) -> Result<()> {
        let mut done = vec![false; ranges.len()];
        let mut wrong: Option<(FileId, String)> = None;
        self.storage
            .with_bytes_as_fetched(ranges, &mut |group, bytes| {
                if wrong.is_some() {
                    return;
                }
                if group.len() != bytes.len() {
                    wrong = Some((
                        FileId::Meta,
                        format!(
                            "{} ranges handed over with {} slices",
                            group.len(),
                            bytes.len()
                        ),
                    ));
                    return;
                }
                for (&g, b) in group.iter().zip(bytes) {
                    match ranges.get(g) {
                        Some(&(file, offset, len)) if done[g] || b.len() != len => {
                            wrong = Some((
                                file,
                                format!(
                                    "bytes {offset}..{} handed over twice or as {} bytes",
                                    offset + len as u64,
                                    b.len()
                                ),
                            ));
                            return;
                        }
                        Some(_) => done[g] = true,
                        None => {
                            wrong = Some((FileId::Meta, format!("range {g} was not asked for")));
                            return;
                        }
                    }
                }
                f(group, bytes);
            })
            .map_err(|(file, e)| self.fail(file, op)(e))?;
        let missing = done.iter().position(|&d| !d).map(|g| {
            let (file, offset, len) = ranges[g];
            (
                file,
                format!("bytes {offset}..{} never handed over", offset + len as u64),
            )
        });
        match wrong.or(missing) {
            Some((file, reason)) => Err(self.fail(file, op)(std::io::Error::other(format!(
                "the storage broke its contract: {reason}"
            )))),
            None => Ok(()),
        }
    }

    /// Whether the storage reads by requests ([`Storage::fetches`]).
    #[inline]
    pub(crate) fn fetches(&self) -> bool {
        self.storage.fetches()
    }

    /// Hints that `ranges` will be read soon ([`Storage::prefetch`]).
    pub(crate) fn prefetch(&self, ranges: &[(FileId, u64, usize)]) {
        self.storage.prefetch(ranges);
    }

    /// Drops what [`prefetch`](Self::prefetch) holds
    /// ([`Storage::forget_prefetched`]).
    pub(crate) fn forget_prefetched(&self) {
        self.storage.forget_prefetched();
    }

    /// Whether runs' blocks are checked when their records are read.
    pub(crate) fn checks_blocks(&self) -> bool {
        self.check_blocks
    }

    /// Reads each of `ranges` into a buffer of its own
    /// ([`Storage::fetch_many`]).
    pub(crate) fn fetch_many(
        &self,
        ranges: &[(FileId, u64, usize)],
        op: &'static str,
    ) -> Result<Vec<Vec<u8>>> {
        self.storage
            .fetch_many(ranges)
            .map_err(|(file, e)| self.fail(file, op)(e))
    }

    /// Copies bytes of `file` at `offset` into `buf` without mapping them
    /// ([`Storage::copy_at`]).
    pub(crate) fn copy(
        &self,
        file: FileId,
        offset: u64,
        buf: &mut [u8],
        op: &'static str,
    ) -> Result<()> {
        self.storage
            .copy_at(file, offset, buf)
            .map_err(self.fail(file, op))
    }

    /// Copies bytes of `file` at `offset` into `buf`.
    pub(crate) fn read(
        &self,
        file: FileId,
        offset: u64,
        buf: &mut [u8],
        op: &'static str,
    ) -> Result<()> {
        self.storage
            .read_at(file, offset, buf)
            .map_err(self.fail(file, op))
    }

    /// Writes `bytes` at `offset` of `file`.
    pub(crate) fn write(
        &self,
        file: FileId,
        offset: u64,
        bytes: &[u8],
        op: &'static str,
    ) -> Result<()> {
        self.storage
            .write_at(file, offset, bytes)
            .map_err(self.fail(file, op))
    }

    /// Makes `file` durable.
    pub(crate) fn sync(&self, file: FileId) -> Result<()> {
        self.storage.sync(file).map_err(self.fail(file, "sync"))
    }

    /// Whether `file` exists in the directory now.
    pub(crate) fn exists(&self, file: FileId) -> Result<bool> {
        self.storage.exists(file).map_err(self.fail(file, "stat"))
    }

    /// Makes the directory entries of files created or removed so far durable.
    pub(crate) fn sync_dir(&self) -> Result<()> {
        self.storage
            .sync_dir()
            .map_err(|e| Error::io(&self.dir, "sync directory", e))
    }

    /// Creates `meta.zr` atomically with `head` at its start; whether this
    /// call created it (`false`: another creator got there first).
    pub(crate) fn create_meta(&self, head: &[u8], len: u64) -> Result<bool> {
        self.storage
            .create_meta(head, len)
            .map_err(self.fail(FileId::Meta, "create"))
    }

    /// Replaces the whole content of `file` with `bytes` (creating it) and
    /// makes it and its name durable, as one operation that fails as one:
    /// the error names the file and `op`.
    pub(crate) fn write_durably(
        &mut self,
        file: FileId,
        bytes: &[u8],
        op: &'static str,
    ) -> Result<()> {
        let path = self.path(file);
        let storage = &mut self.storage;
        storage
            .open_file(file, true, 0)
            .and_then(|_| storage.truncate(file, 0))
            .and_then(|()| storage.write_at(file, 0, bytes))
            .and_then(|()| storage.sync(file))
            .and_then(|()| storage.sync_dir())
            .map_err(|e| Error::io(path, op, e))
    }

    /// Makes every file of `files` durable (possibly at once, see
    /// [`Storage::sync_many`]).
    pub(crate) fn sync_all(&self, files: impl IntoIterator<Item = FileId>) -> Result<()> {
        let files: Vec<FileId> = files.into_iter().collect();
        self.storage
            .sync_many(&files)
            .map_err(|(file, e)| Error::io(self.path(file), "sync", e))
    }

    /// Cuts `file` down to `len` bytes.
    pub(crate) fn truncate(&mut self, file: FileId, len: u64) -> Result<()> {
        let path = self.path(file);
        self.storage
            .truncate(file, len)
            .map_err(|e| Error::io(path, "truncate", e))
    }

    /// Deletes `file` (absent is fine).
    pub(crate) fn remove(&mut self, file: FileId) -> Result<()> {
        let path = self.path(file);
        self.storage
            .remove(file)
            .map_err(|e| Error::io(path, "remove", e))
    }

    /// Ids of every chunk file in the directory.
    pub(crate) fn chunk_ids(&self) -> Result<Vec<u32>> {
        self.storage
            .chunk_ids()
            .map_err(|e| Error::io(&self.dir, "list chunk files", e))
    }

    /// Reads `meta.zr`'s v1 header bytes (not judged).
    pub(crate) fn read_header_bytes(&self) -> Result<[u8; HEADER_LEN]> {
        let mut buf = [0u8; HEADER_LEN];
        self.read(FileId::Meta, 0, &mut buf, "read header")?;
        Ok(buf)
    }

    /// Writes `head` as the store's header: in place for v1, into the next
    /// slot for v2. Made durable by the caller's sync.
    pub(crate) fn write_head(&self, head: &Head, op: &'static str) -> Result<()> {
        match self.layout {
            Layout::V1 => {
                let header = head
                    .to_v1()
                    .expect("a v1 store's head fits format v1 (appends check the limits)");
                self.write(FileId::Meta, 0, &header.encode(), op)
            }
            Layout::V2 {
                entry_len,
                schema_len,
                schema_crc,
                ..
            } => {
                // The slot with the larger sequence wins: a sequence that
                // cannot grow (only a damaged header's can be that large)
                // would make this commit lose to the one before it.
                let last = self.sequence.load(Ordering::Acquire);
                let Some(sequence) = last.checked_add(1) else {
                    return Err(Error::format(
                        self.path(FileId::Meta),
                        FormatError::BadHeader(format!(
                            "header sequence {last} cannot advance: refusing to commit over it"
                        )),
                    ));
                };
                let header = HeaderV2 {
                    sequence,
                    head: *head,
                    schema_len,
                    schema_crc,
                    entry_len: entry_len as u16,
                    features: if self.layout.runs() {
                        v2::runs::FEATURE_RUNS
                    } else {
                        0
                    },
                };
                self.write(FileId::Meta, header.slot_offset(), &header.encode(), op)?;
                self.sequence.store(header.sequence, Ordering::Release);
                Ok(())
            }
        }
    }

    /// Decodes the table entries of `idxs` into `out`, one per index in
    /// order, each checked against its own checksum (not yet validated
    /// against the head: that is [`Store::entry`](crate::Store)'s job).
    /// Indices at or past `length` get a placeholder; the caller refuses
    /// them. Stops at the first entry that fails to decode and returns its
    /// position with the error, so the caller reports whichever fault comes
    /// first in `idxs`.
    ///
    /// A v2 table is borrowed once for the whole batch, and every entry's
    /// cache line is asked for before any is decoded: decoding (checksum,
    /// fields) is enough work per index that the CPU cannot run ahead to the
    /// next entry's load, so on a table bigger than the cache the entries
    /// would each cost a full miss in sequence.
    pub(crate) fn read_entries(
        &self,
        idxs: &[u64],
        length: u64,
        out: &mut Vec<RecordLoc>,
    ) -> Result<Option<(usize, Error)>> {
        self.read_entries_keeping(idxs, length, out, &mut Vec::new())
    }

    /// [`read_entries`](Self::read_entries), leaving in `kept` the blocks of
    /// runs it fetched to check (a run table's store read by requests), as
    /// [`fetch_runs_locs`](Self::fetch_runs_locs) does.
    pub(crate) fn read_entries_keeping(
        &self,
        idxs: &[u64],
        length: u64,
        out: &mut Vec<RecordLoc>,
        kept: &mut Vec<(FileId, u64, Vec<u8>)>,
    ) -> Result<Option<(usize, Error)>> {
        const PLACEHOLDER: RecordLoc = RecordLoc {
            offset: 0,
            phys_length: 0,
            logic_length: 0,
            chunk_id: 0,
            codec: loaderx_format::CodecTag::RAW,
            crc: 0,
        };
        if self.layout.runs() && self.fetches() {
            return self.fetch_runs_locs(idxs, length, self.check_blocks, out, kept);
        }
        if self.layout.runs() {
            let mut seen = None;
            for (i, &idx) in idxs.iter().enumerate() {
                if idx >= length {
                    out.push(PLACEHOLDER);
                    continue;
                }
                match self.runs_loc_seen(idx, self.check_blocks, &mut seen) {
                    Ok(loc) => out.push(loc),
                    Err(e) => return Ok(Some((i, e))),
                }
            }
            return Ok(None);
        }
        let in_range = idxs.iter().copied().filter(|&i| i < length);
        let (Layout::V2 { entry_len, .. }, Some(max)) = (self.layout, in_range.max()) else {
            for (i, &idx) in idxs.iter().enumerate() {
                if idx >= length {
                    out.push(PLACEHOLDER);
                    continue;
                }
                match self.read_entry(idx) {
                    Ok(loc) => out.push(loc),
                    Err(e) => return Ok(Some((i, e))),
                }
            }
            return Ok(None);
        };
        if self.fetches() {
            return self.fetch_entries(idxs, length, entry_len, out);
        }
        let start = self.entry_at(0);
        let len =
            usize::try_from(self.entry_at(max + 1) - start).map_err(|_| Error::OutOfMemory {
                bytes: self.entry_at(max + 1) - start,
            })?;
        let fault = self.with_bytes(FileId::Meta, start, len, "read table", |table| {
            // In range: `idx <= max`, so each entry lies inside `table`.
            let at = |idx: u64| (self.entry_at(idx) - start) as usize;
            crate::hints::prefetch(
                idxs.iter()
                    .filter(|&&i| i < length)
                    .map(|&idx| &table[at(idx)..at(idx) + entry_len]),
            );
            for (i, &idx) in idxs.iter().enumerate() {
                if idx >= length {
                    out.push(PLACEHOLDER);
                    continue;
                }
                match v2::decode_entry(idx, &table[at(idx)..at(idx) + entry_len]) {
                    Ok(loc) => out.push(loc),
                    Err(reason) => return Some((i, idx, reason)),
                }
            }
            None
        })?;
        Ok(fault.map(|(i, idx, reason)| {
            let error = Error::format(
                self.path(FileId::Meta),
                FormatError::BadEntry { entry: idx, reason },
            );
            (i, error)
        }))
    }

    /// [`read_entries`](Self::read_entries) from storage that
    /// [`fetches`](Storage::fetches): the batch's entries (only theirs, not
    /// the table span between them) handed over at once; an index past
    /// `length` (refused by the caller) reads entry 0 in its place.
    fn fetch_entries(
        &self,
        idxs: &[u64],
        length: u64,
        entry_len: usize,
        out: &mut Vec<RecordLoc>,
    ) -> Result<Option<(usize, Error)>> {
        let ranges: Vec<(FileId, u64, usize)> = idxs
            .iter()
            .map(|&i| {
                let at = if i < length { i } else { 0 };
                (FileId::Meta, self.entry_at(at), entry_len)
            })
            .collect();
        let fetched = self.fetch_many(&ranges, "read table")?;
        for (i, (&idx, bytes)) in idxs.iter().zip(&fetched).enumerate() {
            if idx >= length {
                out.push(RecordLoc {
                    offset: 0,
                    phys_length: 0,
                    logic_length: 0,
                    chunk_id: 0,
                    codec: loaderx_format::CodecTag::RAW,
                    crc: 0,
                });
                continue;
            }
            match v2::decode_entry(idx, bytes) {
                Ok(loc) => out.push(loc),
                Err(reason) => {
                    let error = Error::format(
                        self.path(FileId::Meta),
                        FormatError::BadEntry { entry: idx, reason },
                    );
                    return Ok(Some((i, error)));
                }
            }
        }
        Ok(None)
    }

    /// Decodes the table entries `range` (all below the length) into
    /// `out`, in order, each checked against its own checksum; stops at the
    /// first that fails and returns it (`out` then holds those before it).
    /// A v2 table is borrowed once for the whole range.
    pub(crate) fn read_entry_range(
        &self,
        range: std::ops::Range<u64>,
        out: &mut Vec<RecordLoc>,
    ) -> Result<Option<Error>> {
        if self.layout.runs() {
            for index in range {
                match self.runs_loc(index, false) {
                    Ok(loc) => out.push(loc),
                    Err(e) => return Ok(Some(e)),
                }
            }
            return Ok(None);
        }
        let Layout::V2 { entry_len, .. } = self.layout else {
            for index in range {
                match self.read_entry(index) {
                    Ok(loc) => out.push(loc),
                    Err(e) => return Ok(Some(e)),
                }
            }
            return Ok(None);
        };
        let n = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
        out.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            bytes: (n as u64).saturating_mul(std::mem::size_of::<RecordLoc>() as u64),
        })?;
        let start = self.entry_at(range.start);
        let len = n.saturating_mul(entry_len);
        let fault = self.with_bytes(FileId::Meta, start, len, "read table", |table| {
            for (index, bytes) in range.zip(table.chunks_exact(entry_len)) {
                match v2::decode_entry(index, bytes) {
                    Ok(loc) => out.push(loc),
                    Err(reason) => return Some((index, reason)),
                }
            }
            None
        })?;
        Ok(fault.map(|(entry, reason)| {
            Error::format(
                self.path(FileId::Meta),
                FormatError::BadEntry { entry, reason },
            )
        }))
    }

    /// Asks for the cache lines of every record in `locs` ahead of copying
    /// them, so that for small records their loads (and TLB walks) run in
    /// parallel before the records are copied one by one — the same reason
    /// as [`read_entries`](Self::read_entries) prefetches the batch's table
    /// entries: each copy sits behind enough per-record work that the CPU
    /// cannot run ahead to the next record's load. On x86-64 every line of
    /// each record is prefetched (no load waits on it); elsewhere each
    /// record's first byte is read. The caller has checked every record
    /// against its chunk file's length and keeps the total small (a few
    /// hundred KiB, so the lines are still cached when copied). Speed only:
    /// errors are ignored.
    pub(crate) fn prefetch_records<'a>(&self, locs: impl Iterator<Item = &'a RecordLoc>) {
        for loc in locs {
            let _ = self.with_bytes(
                FileId::Chunk(loc.chunk_id),
                u64::from(loc.offset),
                loc.phys_length as usize,
                "read",
                |bytes| crate::hints::prefetch(std::iter::once(bytes)),
            );
        }
    }

    /// Reads table entry `index`: v1 entries are not judged here; a v2
    /// entry whose own checksum fails is [`Error::Corrupt`] naming it.
    #[inline]
    pub(crate) fn read_entry(&self, index: u64) -> Result<RecordLoc> {
        match self.layout {
            Layout::V1 => {
                let mut buf = [0u8; loaderx_format::ENTRY_LEN];
                self.read(FileId::Meta, self.entry_at(index), &mut buf, "read table")?;
                Ok(RecordLoc::decode(&buf))
            }
            // Lengths and dimensions need no block read: a scan asks for the
            // CRC itself (`runs_loc_seen`).
            Layout::V2 { runs: true, .. } => self.runs_loc(index, false),
            Layout::V2 { entry_len, .. } => self
                .with_bytes(
                    FileId::Meta,
                    self.entry_at(index),
                    entry_len,
                    "read table",
                    |b| v2::decode_entry(index, b),
                )?
                .map_err(|reason| {
                    Error::format(
                        self.path(FileId::Meta),
                        FormatError::BadEntry {
                            entry: index,
                            reason,
                        },
                    )
                }),
        }
    }

    /// Reads entry `index` with its dimensions.
    pub(crate) fn read_full(&self, index: u64) -> Result<Entry> {
        let loc = self.read_entry(index)?;
        let mut dims = [0u32; v2::MAX_NDIM];
        let n = self.entry_dims();
        if n > 0 {
            self.with_bytes(
                FileId::Meta,
                self.entry_at(index),
                self.entry_len(),
                "read table",
                |b| v2::dims_of(b, &mut dims[..n]),
            )?;
        }
        Ok(Entry { loc, dims })
    }

    /// The dimensions entry `index` carries, into `out` (`entry_dims()` long).
    pub(crate) fn read_dims(&self, index: u64, out: &mut [u32]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        self.with_bytes(
            FileId::Meta,
            self.entry_at(index),
            self.entry_len(),
            "read table",
            |b| v2::dims_of(b, out),
        )
    }

    /// Appends the encoding of `loc` (with `dims`) as entry `index` to `out`.
    pub(crate) fn encode_entry(
        &self,
        index: u64,
        loc: &RecordLoc,
        dims: &[u32],
        out: &mut Vec<u8>,
    ) {
        self.layout.encode_entry(index, loc, dims, out);
    }

    /// Writes `entry` as table entry `index`.
    pub(crate) fn write_full(&self, index: u64, entry: &Entry, op: &'static str) -> Result<()> {
        if self.layout.runs() {
            return Err(self.no_runs(op));
        }
        let mut buf = Vec::with_capacity(self.entry_len());
        self.encode_entry(
            index,
            &entry.loc,
            &entry.dims[..self.entry_dims()],
            &mut buf,
        );
        self.write(FileId::Meta, self.entry_at(index), &buf, op)
    }

    /// Writes `loc` as table entry `index`, keeping the dimensions it has.
    pub(crate) fn write_entry(&self, index: u64, loc: &RecordLoc, op: &'static str) -> Result<()> {
        let mut entry = Entry {
            loc: *loc,
            dims: [0; v2::MAX_NDIM],
        };
        if self.entry_dims() > 0 {
            self.read_dims(index, &mut entry.dims[..self.entry_dims()])?;
        }
        self.write_full(index, &entry, op)
    }

    /// Writes already-encoded entries as table entries `first..`, in one write.
    pub(crate) fn write_entries(&self, first: u64, encoded: &[u8]) -> Result<()> {
        if self.layout.runs() {
            return Err(self.no_runs("write table"));
        }
        debug_assert_eq!(encoded.len() % self.entry_len(), 0);
        self.write(FileId::Meta, self.entry_at(first), encoded, "write table")
    }

    /// The header on disk now, checked (either version).
    pub(crate) fn read_head(&self) -> Result<Head> {
        match self.layout {
            Layout::V1 => {
                let fail = |e| Error::format(self.path(FileId::Meta), e);
                let header =
                    loaderx_format::Header::decode(&self.read_header_bytes()?).map_err(fail)?;
                header.check_limits().map_err(fail)?;
                Ok(Head::from(header))
            }
            Layout::V2 { .. } => self.read_header_v2().map(|h| {
                self.sequence.store(h.sequence, Ordering::Release);
                h.head
            }),
        }
    }

    /// The v2 header to trust now: the valid slot with the larger sequence.
    pub(crate) fn read_head_v2(&self) -> Result<Head> {
        self.read_header_v2().map(|h| h.head)
    }

    /// The v2 header slot to trust now.
    pub(crate) fn read_header_v2(&self) -> Result<HeaderV2> {
        let mut a = [0u8; v2::HEADER_V2_LEN];
        let mut b = [0u8; v2::HEADER_V2_LEN];
        let meta_len = self.current_len(FileId::Meta, None)?;
        let need = v2::SLOT_LEN + v2::HEADER_V2_LEN as u64;
        if meta_len < need {
            return Err(Error::format(
                self.path(FileId::Meta),
                FormatError::Truncated {
                    need,
                    have: meta_len,
                },
            ));
        }
        self.read(FileId::Meta, 0, &mut a, "read header")?;
        self.read(FileId::Meta, v2::SLOT_LEN, &mut b, "read header")?;
        v2::pick_header(&a, &b).map_err(|e| Error::format(self.path(FileId::Meta), e))
    }

    /// Bytes of `meta.zr` a table of `length` entries reaches (a run
    /// table: read as far as that, see `runtable.rs`).
    pub(crate) fn table_end(&self, length: u64) -> Result<u64> {
        if self.layout.runs() {
            return self.runs_table_end(length);
        }
        Ok(self.entry_at(length))
    }

    /// The refusal of a write of one record entry in place, which a run
    /// table has not (its rewrites go through `Store::rewrite_runs`): a
    /// guard, never reached by the engine's own operations.
    pub(crate) fn no_runs(&self, op: &'static str) -> Error {
        Error::InvalidArgument {
            path: self.dir.clone(),
            argument: "runs",
            reason: format!(
                "{op}: the store keeps a run table, whose record entries are not written one at a time"
            ),
        }
    }

    /// Calls `f` with the table entries `0..length`, decoded.
    pub(crate) fn for_each_entry(&self, length: u64, mut f: impl FnMut(RecordLoc)) -> Result<()> {
        // In pieces, so a table of billions of entries is never one borrow.
        const PIECE: u64 = 1 << 16;
        if self.layout.runs() {
            // Run records come with no CRC (see `runs_loc`).
            for index in 0..length {
                f(self.runs_loc(index, false)?);
            }
            return Ok(());
        }
        let mut first = 0;
        while first < length {
            let n = PIECE.min(length - first);
            let start = self.entry_at(first);
            let len = (self.entry_at(first + n) - start) as usize;
            let stride = self.entry_len();
            let bad = self.with_bytes(FileId::Meta, start, len, "read table", |table| {
                for (k, e) in table.chunks_exact(stride).enumerate() {
                    let index = first + k as u64;
                    match self.layout.decode_entry(index, e) {
                        Ok(loc) => f(loc),
                        Err(reason) => return Some((index, reason)),
                    }
                }
                None
            })?;
            if let Some((entry, reason)) = bad {
                return Err(Error::format(
                    self.path(FileId::Meta),
                    FormatError::BadEntry { entry, reason },
                ));
            }
            first += n;
        }
        Ok(())
    }
}
