//! The [`Store`] type: opening, the published state readers see, and the
//! small accessors (`len`, `lengths`, `stats`, `sync`, `verify`).

use std::{
    fs,
    marker::PhantomData,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
};

use loaderx_format::{
    CHUNK_CAPACITY, ENTRY_LEN, FormatError, HEADER_LEN, Header, MAX_CHUNKS, MAX_RECORDS, META_LEN,
    RecordLoc, entry_offset,
};

use crate::{
    Codec, CodecId, Deflate, Error, Result,
    lock::StoreLock,
    parallel,
    storage::{FileId, FileStorage, Storage},
    undo::UndoLog,
};

/// How to open a store.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Refuse every write, and never create or modify anything on disk.
    pub read_only: bool,
    /// Create the directory and an empty store when absent (ignored when read-only).
    pub create: bool,
    /// Bytes a chunk file holds before appends roll over to the next one.
    /// Always 4 GiB in real stores; smaller values exist so tests can exercise
    /// rollover without writing gigabytes.
    pub chunk_capacity: u64,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            create: true,
            chunk_capacity: CHUNK_CAPACITY,
        }
    }
}

impl OpenOptions {
    /// Options for a read-only open.
    pub fn read_only() -> OpenOptions {
        OpenOptions {
            read_only: true,
            create: false,
            ..OpenOptions::default()
        }
    }
}

/// Storage usage, as reported by [`Store::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Live records.
    pub records: u64,
    /// Bytes the live records occupy on disk (sum of stored lengths).
    pub live_bytes: u64,
    /// Chunk space up to the write frontier.
    pub chunk_bytes: u64,
    /// `chunk_bytes - live_bytes`: an upper bound on what `compact` frees.
    pub reclaimable: u64,
}

/// A persistent store of byte records (format v1, compatible with loaderx 0.5.x).
///
/// `C` is the codec appends use by default; reads dispatch on each record's
/// own tag, so a store may mix codecs. `S` is where the bytes live.
///
/// Concurrency: `Store` is `Send + Sync`. Gathers (`&self`) take no lock and
/// may run on many threads while one append (`&self`, serialised internally)
/// runs; a record becomes visible only once committed. `delete` and
/// `compact` take `&mut self`.
#[derive(Debug)]
pub struct Store<C: Codec = Deflate, S: Storage = FileStorage> {
    pub(crate) storage: S,
    pub(crate) path: PathBuf,
    pub(crate) capacity: u64,
    /// Published `length`: entries below it are committed.
    pub(crate) len: AtomicU32,
    /// Published frontier: `tail_chunk << 32 | tail_offset`.
    pub(crate) tail: AtomicU64,
    /// Bytes known to exist in each chunk file (measured at open, grown by
    /// our writes); reads never go past them, so a short file cannot SIGBUS.
    pub(crate) chunk_lens: Box<[AtomicU64]>,
    pub(crate) append_lock: Mutex<()>,
    /// Set when a write failed halfway and could not be undone in place: the
    /// bytes on disk are recovered by the next open, not by this handle.
    pub(crate) poisoned: AtomicBool,
    pub(crate) _lock: Option<StoreLock>,
    _codec: PhantomData<C>,
}

impl<C: Codec> Store<C, FileStorage> {
    /// Opens the store at `path`, creating the directory and an empty store
    /// when absent.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens an existing store for reading only: nothing on disk is created
    /// or modified, so this works on read-only media.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::read_only())
    }

    /// Opens the store at `path` with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: OpenOptions) -> Result<Self> {
        let path = path.as_ref();
        match fs::metadata(path) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(Error::NotAStore {
                    path: path.to_owned(),
                    reason: "the path is a file, not a store directory".into(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if options.read_only || !options.create {
                    return Err(Error::NotAStore {
                        path: path.to_owned(),
                        reason: "no such directory".into(),
                    });
                }
                fs::create_dir_all(path).map_err(|e| Error::io(path, "create directory", e))?;
            }
            Err(e) => return Err(Error::io(path, "stat", e)),
        }
        let mut store = Self::open_in(FileStorage::new(path, options.read_only), options)?;
        store._lock = StoreLock::acquire(path, options.read_only)?;
        Ok(store)
    }
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Opens the store held by `storage`. O(1) in the number of records:
    /// only the header is read; table entries are checked when touched.
    pub fn open_in(mut storage: S, options: OpenOptions) -> Result<Self> {
        let path = storage.location().to_owned();
        let meta_path = path.join(loaderx_format::META_FILE);
        let read_only = options.read_only || storage.is_read_only();
        if options.chunk_capacity == 0 || options.chunk_capacity > CHUNK_CAPACITY {
            return Err(Error::NotAStore {
                path,
                reason: format!(
                    "chunk capacity {} is outside 1..=2^32",
                    options.chunk_capacity
                ),
            });
        }
        let create = options.create && !read_only;
        let existing = storage
            .open_file(FileId::Meta, false, 0)
            .map_err(|e| Error::io(&meta_path, "open", e))?;
        if existing.is_some() {
            recover_undo(&mut storage, &path, read_only)?;
        }
        let (header, meta_len) = match existing {
            Some(meta_len) => (read_header(&storage, &meta_path, meta_len)?, meta_len),
            None if create => {
                // Chunk files without a meta.zr are a damaged store, not an
                // empty directory: creating over them would lose their bytes.
                let orphans = storage
                    .chunk_ids()
                    .map_err(|e| Error::io(&path, "list chunk files", e))?;
                if let Some(id) = orphans.first() {
                    return Err(Error::NotAStore {
                        path: path.clone(),
                        reason: format!(
                            "meta.zr is missing but chunk file {id}.zr exists; refusing to create a new store over it"
                        ),
                    });
                }
                storage
                    .open_file(FileId::Meta, true, META_LEN)
                    .map_err(|e| Error::io(&meta_path, "create", e))?;
                storage
                    .open_file(FileId::Chunk(0), true, 0)
                    .map_err(|e| Error::io(path.join("0.zr"), "create", e))?;
                let header = Header::default();
                storage
                    .write_at(FileId::Meta, 0, &header.encode())
                    .map_err(|e| Error::io(&meta_path, "write header", e))?;
                (header, META_LEN)
            }
            None => {
                return Err(Error::NotAStore {
                    path,
                    reason: "meta.zr is missing".into(),
                });
            }
        };
        let need = HEADER_LEN as u64 + u64::from(header.length) * ENTRY_LEN as u64;
        if meta_len < need {
            return Err(Error::format(
                &meta_path,
                FormatError::Truncated {
                    need,
                    have: meta_len,
                },
            ));
        }
        let chunk_lens: Box<[AtomicU64]> = (0..MAX_CHUNKS).map(|_| AtomicU64::new(0)).collect();
        for id in 0..=u32::from(header.tail_chunk) {
            let file = FileId::Chunk(id);
            let chunk_path = path.join(file.file_name());
            match storage.open_file(file, false, 0) {
                Ok(Some(len)) => chunk_lens[id as usize].store(len, Ordering::Relaxed),
                Ok(None) => {
                    return Err(Error::NotAStore {
                        path: chunk_path,
                        reason: format!(
                            "chunk file is missing (the header says chunks 0..={} exist)",
                            header.tail_chunk
                        ),
                    });
                }
                Err(e) => return Err(Error::io(chunk_path, "open", e)),
            }
        }
        Ok(Store {
            storage,
            path,
            capacity: options.chunk_capacity,
            len: AtomicU32::new(header.length),
            tail: AtomicU64::new(pack_tail(header.tail_chunk, header.tail_offset)),
            chunk_lens,
            append_lock: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            _lock: None,
            _codec: PhantomData,
        })
    }

    /// Refuses to work on a handle whose last write failed halfway.
    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The codec appends use unless told otherwise.
    pub fn default_codec(&self) -> CodecId {
        C::ID
    }

    /// Whether writes are refused.
    pub fn is_read_only(&self) -> bool {
        self.storage.is_read_only()
    }

    /// Number of live records; the index space is `0..len()`.
    pub fn len(&self) -> u64 {
        u64::from(self.len.load(Ordering::Acquire))
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage the store lives on.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The published header: what a reader that starts now sees.
    pub(crate) fn header(&self) -> Header {
        let length = self.len.load(Ordering::Acquire);
        let (tail_chunk, tail_offset) = unpack_tail(self.tail.load(Ordering::Acquire));
        Header {
            tail_chunk,
            tail_offset,
            length,
        }
    }

    pub(crate) fn meta_path(&self) -> PathBuf {
        self.path.join(loaderx_format::META_FILE)
    }

    pub(crate) fn file_path(&self, file: FileId) -> PathBuf {
        self.path.join(file.file_name())
    }

    /// Checks that `meta.zr` still holds the table `header` describes: a file
    /// truncated behind our back must give an error, not a SIGBUS.
    pub(crate) fn check_meta_len(&self, header: &Header) -> Result<()> {
        let need = HEADER_LEN as u64 + u64::from(header.length) * ENTRY_LEN as u64;
        let have = self
            .storage
            .current_len(FileId::Meta)
            .map_err(|e| Error::io(self.meta_path(), "stat", e))?;
        if have < need {
            return Err(Error::format(
                self.meta_path(),
                FormatError::Truncated { need, have },
            ));
        }
        Ok(())
    }

    /// The length of chunk `id` to trust for records committed before this
    /// call: what we know we wrote, capped by what the file system reports now
    /// (someone may have cut the file). Not stored back: a concurrent append
    /// may be growing the file between the `stat` and the store, and lowering
    /// the shared value then would hide its records from later readers.
    pub(crate) fn current_chunk_len(&self, id: u16) -> Result<u64> {
        let known = self.chunk_lens[usize::from(id)].load(Ordering::Acquire);
        let file = FileId::Chunk(u32::from(id));
        let now = self
            .storage
            .current_len(file)
            .map_err(|e| Error::io(self.file_path(file), "stat", e))?;
        Ok(known.min(now))
    }

    /// Reads table entry `index` without judging it.
    pub(crate) fn raw_entry(&self, index: u32) -> Result<RecordLoc> {
        let mut buf = [0u8; ENTRY_LEN];
        self.storage
            .read_at(FileId::Meta, entry_offset(index), &mut buf)
            .map_err(|e| Error::io(self.meta_path(), "read table", e))?;
        Ok(RecordLoc::decode(&buf))
    }

    /// Reads and validates the entry of live record `index` against `header`.
    pub(crate) fn entry(&self, index: u64, header: &Header) -> Result<RecordLoc> {
        if index >= u64::from(header.length) {
            return Err(Error::IndexOutOfRange {
                index,
                len: u64::from(header.length),
            });
        }
        let loc = self.raw_entry(index as u32)?;
        let file_len = self.chunk_lens[usize::from(loc.chunk_id) % MAX_CHUNKS as usize]
            .load(Ordering::Acquire);
        loaderx_format::validate_entry(index as u32, &loc, header, file_len)
            .map_err(|e| Error::format(self.meta_path(), e))?;
        Ok(loc)
    }

    /// Logical size of each record in `idxs`, written to `out`.
    pub fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        if out.len() != idxs.len() {
            return Err(Error::LengthMismatch {
                what: "lengths output",
                expected: idxs.len(),
                found: out.len(),
            });
        }
        self.check_usable()?;
        let header = self.header();
        self.check_meta_len(&header)?;
        for (&idx, slot) in idxs.iter().zip(out.iter_mut()) {
            *slot = self.entry(idx, &header)?.logic_length;
        }
        Ok(())
    }

    /// Storage usage. Scans the table, so it is a diagnostic, not a per-batch call.
    pub fn stats(&self) -> Result<Stats> {
        let _writer = self.append_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.check_usable()?;
        let header = self.header();
        self.check_meta_len(&header)?;
        let mut live_bytes = 0u64;
        let table_len = u64::from(header.length) * ENTRY_LEN as u64;
        self.storage
            .with_bytes(
                FileId::Meta,
                HEADER_LEN as u64,
                table_len as usize,
                |table| {
                    for e in table.chunks_exact(ENTRY_LEN) {
                        live_bytes += u64::from(u32::from_le_bytes([e[4], e[5], e[6], e[7]]));
                    }
                },
            )
            .map_err(|e| Error::io(self.meta_path(), "read table", e))?;
        let chunk_bytes =
            u64::from(header.tail_chunk) * self.capacity + u64::from(header.tail_offset);
        Ok(Stats {
            records: u64::from(header.length),
            live_bytes,
            chunk_bytes,
            reclaimable: chunk_bytes.saturating_sub(live_bytes),
        })
    }

    /// Makes everything appended so far durable: chunk files first, then `meta.zr`.
    pub fn sync(&self) -> Result<()> {
        if self.is_read_only() {
            return Ok(());
        }
        let _writer = self.append_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.sync_all()
    }

    pub(crate) fn sync_all(&self) -> Result<()> {
        let (tail_chunk, _) = unpack_tail(self.tail.load(Ordering::Acquire));
        for id in 0..=u32::from(tail_chunk) {
            let file = FileId::Chunk(id);
            self.storage
                .sync(file)
                .map_err(|e| Error::io(self.file_path(file), "sync", e))?;
        }
        self.storage
            .sync(FileId::Meta)
            .map_err(|e| Error::io(self.meta_path(), "sync", e))
    }

    /// Checks the whole store: every table entry against the format's rules
    /// and the chunk files' lengths, and that every record decodes.
    pub fn verify(&self) -> Result<()> {
        let header = self.header();
        let lens: Vec<u64> = (0..=usize::from(header.tail_chunk))
            .map(|c| self.chunk_lens[c].load(Ordering::Acquire))
            .collect();
        let need = HEADER_LEN + header.length as usize * ENTRY_LEN;
        self.storage
            .with_bytes(FileId::Meta, 0, need, |image| {
                loaderx_format::parse_index(image, &lens).map(|_| ())
            })
            .map_err(|e| Error::io(self.meta_path(), "read table", e))?
            .map_err(|e| Error::format(self.meta_path(), e))?;
        let n = header.length as usize;
        parallel::for_ranges(n, u64::MAX, |range| {
            let mut scratch = Vec::new();
            for i in range {
                let loc = self.entry(i as u64, &header)?;
                scratch.resize(loc.logic_length as usize, 0);
                self.decode_into(i as u64, &loc, &mut scratch)?;
            }
            Ok(())
        })
    }

    /// Decodes record `index` (whose validated entry is `loc`) into `out`,
    /// which is exactly `loc.logic_length` bytes.
    pub(crate) fn decode_into(&self, index: u64, loc: &RecordLoc, out: &mut [u8]) -> Result<()> {
        let codec = CodecId::from_tag(loc.codec).expect("validated entries have known codecs");
        let file = FileId::Chunk(u32::from(loc.chunk_id));
        self.storage
            .with_bytes(
                file,
                u64::from(loc.offset),
                loc.phys_length as usize,
                |src| codec.decode(src, out),
            )
            .map_err(|e| Error::io(self.file_path(file), "read", e))?
            .map_err(|e| Error::Corrupt {
                path: self.file_path(file),
                entry: index,
                reason: format!("{codec} record: {e}"),
            })
    }
}

pub(crate) fn pack_tail(chunk: u16, offset: u32) -> u64 {
    (u64::from(chunk) << 32) | u64::from(offset)
}

pub(crate) fn unpack_tail(packed: u64) -> (u16, u32) {
    ((packed >> 32) as u16, packed as u32)
}

/// Rolls back a delete that an undo log says did not finish (see `undo.rs`).
fn recover_undo<S: Storage>(storage: &mut S, path: &Path, read_only: bool) -> Result<()> {
    let undo_path = path.join(FileId::Undo.file_name());
    let Some(len) = storage
        .open_file(FileId::Undo, false, 0)
        .map_err(|e| Error::io(&undo_path, "open", e))?
    else {
        return Ok(());
    };
    let log = storage
        .with_bytes(FileId::Undo, 0, len as usize, UndoLog::decode)
        .map_err(|e| Error::io(&undo_path, "read", e))?;
    let meta_path = path.join(loaderx_format::META_FILE);
    match (log, read_only) {
        (None, true) => Ok(()),
        (Some(_), true) => Err(Error::NotAStore {
            path: path.to_owned(),
            reason:
                "an interrupted delete must be rolled back first: open the store for writing once"
                    .into(),
        }),
        (log, false) => {
            if let Some(log) = log {
                for (slot, loc) in &log.entries {
                    storage
                        .write_at(FileId::Meta, entry_offset(*slot), &loc.encode())
                        .map_err(|e| Error::io(&meta_path, "roll back table", e))?;
                }
                storage
                    .write_at(FileId::Meta, 0, &log.header.encode())
                    .map_err(|e| Error::io(&meta_path, "roll back header", e))?;
                storage
                    .sync(FileId::Meta)
                    .map_err(|e| Error::io(&meta_path, "sync", e))?;
            }
            storage
                .remove(FileId::Undo)
                .map_err(|e| Error::io(&undo_path, "remove", e))
        }
    }
}

fn read_header<S: Storage>(storage: &S, meta_path: &Path, meta_len: u64) -> Result<Header> {
    if meta_len < HEADER_LEN as u64 {
        return Err(Error::format(
            meta_path,
            FormatError::Truncated {
                need: HEADER_LEN as u64,
                have: meta_len,
            },
        ));
    }
    let mut buf = [0u8; HEADER_LEN];
    storage
        .read_at(FileId::Meta, 0, &mut buf)
        .map_err(|e| Error::io(meta_path, "read header", e))?;
    let header = Header::decode(&buf).map_err(|e| Error::format(meta_path, e))?;
    if header.length > MAX_RECORDS {
        return Err(Error::format(
            meta_path,
            FormatError::TooManyRecords {
                length: header.length,
                limit: MAX_RECORDS,
            },
        ));
    }
    if u32::from(header.tail_chunk) >= MAX_CHUNKS {
        return Err(Error::format(
            meta_path,
            FormatError::TooManyChunks {
                tail_chunk: header.tail_chunk,
                limit: MAX_CHUNKS,
            },
        ));
    }
    Ok(header)
}
