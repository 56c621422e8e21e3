//! Opening a store: creating an empty one, recovering from an interrupted
//! delete, reading and checking the header, and measuring the chunk files.

use std::{
    fs,
    marker::PhantomData,
    path::Path,
    sync::{Mutex, atomic::AtomicBool},
};

use loaderx_format::{CHUNK_CAPACITY, FormatError, HEADER_LEN, Header, META_LEN};

use crate::{
    Codec, Error, Result, Store,
    files::Files,
    frontier::{ChunkLens, Frontier},
    lock::StoreLock,
    storage::{FileId, FileStorage, Storage},
    undo,
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
    #[must_use]
    pub fn read_only() -> OpenOptions {
        OpenOptions {
            read_only: true,
            create: false,
            ..OpenOptions::default()
        }
    }
}

impl<C: Codec> Store<C, FileStorage> {
    /// Opens the store at `path`, creating the directory and an empty store
    /// when absent.
    ///
    /// # The memory-map rule
    /// Records are read through shared memory maps of the store's files
    /// ([`FileStorage`]). A store file changed by another program while it is
    /// open here — rewritten, truncated, replaced — is undefined behaviour
    /// for the readers of those maps: do not modify a store's files from
    /// outside loaderx while it is open. What loaderx does to contain the
    /// damage when someone does anyway:
    ///
    /// * every read stays inside the file lengths the handle knows (measured
    ///   at open, grown only by its own writes), and each gather, `lengths`
    ///   call and append re-checks the lengths of `meta.zr` and of the chunk
    ///   files it touches against the file system first, so a file cut short
    ///   behind its back gives an error ([`Error::Corrupt`] or
    ///   [`Error::NotAStore`]) instead of a `SIGBUS`;
    /// * its own writes never touch bytes a reader can reach: appends write
    ///   past the committed frontier, and `delete`/`compact` need `&mut self`;
    /// * across processes, every handle holds a shared advisory lock on
    ///   `meta.zr`, and `compact`, which moves bytes others may have mapped,
    ///   runs only once it gets the lock exclusively ([`Error::Locked`]
    ///   otherwise).
    ///
    /// A concurrent rewrite in place (same length, different bytes) cannot
    /// be detected; it may surface as a decode error or as wrong bytes.
    ///
    /// # Errors
    /// [`Error::NotAStore`] when `path` is a file, holds chunk files but no
    /// `meta.zr`, or holds a damaged header; [`Error::Io`] when a file cannot
    /// be created, opened or read; [`Error::Locked`] while another handle
    /// compacts the store.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens an existing store for reading only: nothing on disk is created
    /// or modified, so this works on read-only media. The memory-map rule of
    /// [`open`](Self::open) applies.
    ///
    /// # Errors
    /// As [`open`](Self::open); a missing store is [`Error::NotAStore`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::read_only())
    }

    /// Opens the store at `path` with `options`. The memory-map rule of
    /// [`open`](Self::open) applies.
    ///
    /// # Errors
    /// As [`open`](Self::open).
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
        Self::open_locked(
            FileStorage::new(path, options.read_only),
            options,
            Some(path),
        )
    }
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Opens the store held by `storage`. O(1) in the number of records:
    /// only the header is read; table entries are checked when touched.
    ///
    /// A complete undo log left by an interrupted delete is rolled back here
    /// when the open is writable, and refuses a read-only open.
    ///
    /// # Errors
    /// [`Error::NotAStore`] for a bad chunk capacity, a missing or damaged
    /// `meta.zr`, a missing chunk file or a pending undo log on a read-only
    /// open; [`Error::Io`] when the storage fails.
    pub fn open_in(storage: S, options: OpenOptions) -> Result<Self> {
        Self::open_locked(storage, options, None)
    }

    /// Opens (or creates) the store, taking the locks between handles on
    /// the files in `lock_dir` when given.
    fn open_locked(storage: S, options: OpenOptions, lock_dir: Option<&Path>) -> Result<Self> {
        let mut files = Files::new(storage);
        let read_only = options.read_only || files.is_read_only();
        if options.chunk_capacity == 0 || options.chunk_capacity > CHUNK_CAPACITY {
            return Err(Error::NotAStore {
                path: files.dir().to_owned(),
                reason: format!(
                    "chunk capacity {} is outside 1..=2^32",
                    options.chunk_capacity
                ),
            });
        }
        if !files.exists(FileId::Meta)? {
            if !options.create || read_only {
                return Err(Error::NotAStore {
                    path: files.dir().to_owned(),
                    reason: "meta.zr is missing".into(),
                });
            }
            // Atomic on its own: no lock needed (and none can be taken on a
            // file that does not exist yet).
            create(&files)?;
        }
        let lock = match lock_dir {
            Some(dir) => StoreLock::acquire(dir)?,
            None => None,
        };
        if files.open(FileId::Meta)?.is_none() {
            return Err(Error::NotAStore {
                path: files.dir().to_owned(),
                reason: "meta.zr is missing".into(),
            });
        }
        undo::recover(&mut files, read_only, lock.as_ref())?;
        let meta_len = files.current_len(FileId::Meta)?;
        let header = read_header(&files, meta_len)?;
        let chunk_lens = ChunkLens::new();
        for id in 0..=u32::from(header.tail_chunk) {
            let file = FileId::Chunk(id);
            let Some(len) = files.open(file)? else {
                return Err(Error::NotAStore {
                    path: files.path(file),
                    reason: format!(
                        "chunk file is missing (the header says chunks 0..={} exist)",
                        header.tail_chunk
                    ),
                });
            };
            chunk_lens.set(id, len);
        }
        Ok(Store {
            files,
            capacity: options.chunk_capacity,
            frontier: Frontier::new(&header),
            committed: Mutex::new(header),
            owner: std::process::id(),
            chunk_lens,
            append_lock: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            lock,
            _codec: PhantomData,
        })
    }
}

/// Creates an empty store: chunk 0, then `meta.zr` at its full (sparse)
/// size with an empty header, published atomically (`Storage::create_meta`).
/// A crash at any point leaves either no store — at worst an empty `0.zr`,
/// which the next creation reuses — or a complete empty one; two processes
/// creating the same store at once both end up opening the one that won.
fn create<S: Storage>(files: &Files<S>) -> Result<()> {
    // Chunk files holding bytes without a meta.zr are a damaged store, not an
    // empty directory: creating over them would lose their bytes. Empty ones
    // are what an interrupted creation leaves.
    for id in files.chunk_ids()? {
        let file = FileId::Chunk(id);
        if files.open(file)?.unwrap_or(0) > 0 {
            return Err(Error::NotAStore {
                path: files.dir().to_owned(),
                reason: format!(
                    "meta.zr is missing but chunk file {id}.zr holds bytes; refusing to create a new store over it"
                ),
            });
        }
    }
    files.create(FileId::Chunk(0), 0)?;
    files.sync(FileId::Chunk(0))?;
    // Chunk 0's name is made durable with meta.zr's (create_meta syncs the
    // directory after linking).
    files.create_meta(&Header::default().encode(), META_LEN)?;
    Ok(())
}

/// Reads the header of an existing `meta.zr` of `meta_len` bytes and checks
/// it: magic, version, limits, and that the file holds the table it claims.
fn read_header<S: Storage>(files: &Files<S>, meta_len: u64) -> Result<Header> {
    let refuse = |e| Error::format(files.path(FileId::Meta), e);
    if meta_len < HEADER_LEN as u64 {
        return Err(refuse(FormatError::Truncated {
            need: HEADER_LEN as u64,
            have: meta_len,
        }));
    }
    let header = Header::decode(&files.read_header_bytes()?).map_err(refuse)?;
    header.check_limits().map_err(refuse)?;
    let need = header.table_end();
    if meta_len < need {
        return Err(refuse(FormatError::Truncated {
            need,
            have: meta_len,
        }));
    }
    Ok(header)
}
