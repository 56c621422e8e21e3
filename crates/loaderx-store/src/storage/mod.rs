//! The storage seam: where `meta.zr` and the chunk files live.
//!
//! The engine talks to its files only through [`Storage`]. [`FileStorage`]
//! is the real thing (files in a directory, read through memory maps, written
//! with positioned writes). With the test-only cargo feature `testing`,
//! `MemStorage` keeps the bytes in memory and can simulate a crash (keep only
//! what `sync` made durable) or fail an I/O operation on purpose, which is
//! what the crash and fault tests need.

#[allow(unsafe_code)] // memory maps; the invariants are at the top of the file
mod file;
#[allow(unsafe_code)] // slices rebuilt from lent addresses; see the file
mod lend;
#[cfg(feature = "testing")]
mod memory;
#[cfg(target_os = "linux")]
mod watch;

use std::{fmt, io, path::Path};

pub use self::file::{FileStorage, META_EXTENT};
#[cfg(target_os = "linux")]
pub use self::watch::Drained;

/// A drain of the process's watches of mapped files (Linux only; here
/// nothing is watched, and a length is always asked again).
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Default)]
pub struct Drained;

#[cfg(not(target_os = "linux"))]
impl Drained {
    /// Nothing to read where nothing is watched.
    #[must_use]
    pub fn now() -> Drained {
        Drained
    }
}
#[cfg(feature = "testing")]
pub use self::memory::MemStorage;

/// One file of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileId {
    /// `meta.zr`: header and record table.
    Meta,
    /// `<id>.zr`: record bytes.
    Chunk(u32),
    /// `meta.zr.undo`: what an unfinished delete overwrote
    /// ([`UndoLog`](loaderx_format::UndoLog)).
    Undo,
}

impl FileId {
    /// The file's name inside the store directory.
    #[must_use]
    pub fn file_name(self) -> String {
        match self {
            FileId::Meta => loaderx_format::META_FILE.to_owned(),
            FileId::Chunk(id) => loaderx_format::chunk_file_name(id),
            FileId::Undo => loaderx_format::UNDO_FILE.to_owned(),
        }
    }
}

/// What [`Storage::with_bytes_as_fetched`] calls with each group of ranges:
/// their positions in the ranges asked for, and their bytes.
pub type OnFetched<'a> = dyn FnMut(&[usize], &[&[u8]]) + 'a;

/// Byte storage for one store's files.
///
/// Contract the engine relies on: bytes written with [`write_at`](Storage::write_at)
/// are visible to later reads from any thread once the writer has published
/// them (the engine publishes with release/acquire atomics); a write is atomic
/// with respect to a process crash (it happens entirely or not at all when the
/// process dies), and [`sync`](Storage::sync) makes a file's bytes durable
/// across power loss.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Where the store lives, for error messages.
    fn location(&self) -> &Path;

    /// Whether writes are refused.
    fn is_read_only(&self) -> bool;

    /// Opens `file` for reading and writing (or reading only), creating it
    /// with length `create_len` when it is absent and `create` is set.
    /// Returns its length, or `None` when it is absent and not created.
    ///
    /// # Errors
    /// The underlying I/O error.
    fn open_file(&self, file: FileId, create: bool, create_len: u64) -> io::Result<Option<u64>>;

    /// The current length of an open `file`, as the file system reports it
    /// now (someone else may have truncated it since it was opened).
    ///
    /// # Errors
    /// The underlying I/O error.
    fn current_len(&self, file: FileId) -> io::Result<u64>;

    /// [`current_len`](Storage::current_len), which may answer with the
    /// length it checked before when `drained` (a [`Drained::now`] taken
    /// for this batch) shows that the file had no event since: a storage
    /// that watches its files (Linux, local file systems). The default
    /// asks again.
    ///
    /// # Errors
    /// The underlying I/O error.
    fn current_len_since(&self, file: FileId, drained: &Drained) -> io::Result<u64> {
        let _ = drained;
        self.current_len(file)
    }

    /// Calls `f` with `len` bytes of an open `file` starting at `offset`.
    /// The caller guarantees the range lies inside the file's real length.
    ///
    /// # Errors
    /// The underlying I/O error, or a range outside what the file can hold.
    fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R>;

    /// Calls `f` with several ranges at once: `ranges[i]`, `(file, offset,
    /// len)`, lent as `f`'s `i`-th slice, each under the contract of
    /// [`with_bytes`](Storage::with_bytes). The default nests one
    /// `with_bytes` call per range; a storage whose `with_bytes` cannot be
    /// called while it is lending (the in-memory one holds a lock) overrides
    /// this, and so must a storage that wraps such a one (forward it).
    ///
    /// # Errors
    /// The first range that cannot be lent, with its I/O error.
    fn with_many_bytes<R>(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, (FileId, io::Error)> {
        lend::nested(self, ranges, f)
    }

    /// Calls `f` with every range of `ranges`, `(file, offset, len)`, once,
    /// in groups as their bytes are at hand: `f(positions, bytes)`, the
    /// positions in `ranges` of a group and their bytes. A storage that
    /// [`fetches`](Storage::fetches) hands over each request's ranges as it
    /// arrives and lets its buffer go once `f` returns, so a large batch is
    /// never held whole; the default lends every range at once, in one
    /// group ([`with_many_bytes`](Storage::with_many_bytes)).
    ///
    /// # Errors
    /// A range that could not be read (the first failure met), with its
    /// I/O error; groups handed over before it stay handed over.
    fn with_bytes_as_fetched(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: &mut OnFetched<'_>,
    ) -> Result<(), (FileId, io::Error)> {
        self.with_many_bytes(ranges, |all| {
            let positions: Vec<usize> = (0..all.len()).collect();
            f(&positions, all);
        })
    }

    /// Whether every read is a request to a server (a store in object
    /// storage): each costs a round trip, so the engine plans a gather's
    /// reads itself and hands them over at once through
    /// [`fetch_many`](Storage::fetch_many), exact record ranges only,
    /// instead of borrowing spans of files. False for local storage.
    fn fetches(&self) -> bool {
        false
    }

    /// Reads every range of `ranges`, `(file, offset, len)`, into a buffer
    /// of its own, in order (same contract as
    /// [`with_bytes`](Storage::with_bytes) for each). A storage that
    /// [`fetches`](Storage::fetches) issues them together; the default reads
    /// them one by one.
    ///
    /// # Errors
    /// The first range that cannot be read, with its I/O error.
    fn fetch_many(
        &self,
        ranges: &[(FileId, u64, usize)],
    ) -> Result<Vec<Vec<u8>>, (FileId, io::Error)> {
        ranges
            .iter()
            .map(|&(file, offset, len)| {
                let mut buf = vec![0; len];
                self.read_at(file, offset, &mut buf)
                    .map_err(|e| (file, e))?;
                Ok(buf)
            })
            .collect()
    }

    /// A hint that `ranges`, `(file, offset, len)` of open files, will be
    /// read soon (a loader's next batches). A storage that
    /// [`fetches`](Storage::fetches) starts their requests now and keeps
    /// the bytes, within a bound of its own, for the
    /// [`fetch_many`](Storage::fetch_many) that asks for them; others
    /// ignore it (the default). Never fails: a range that cannot be read is
    /// left for the read that wants it, which reports the error.
    fn prefetch(&self, ranges: &[(FileId, u64, usize)]) {
        let _ = ranges;
    }

    /// Drops whatever [`prefetch`](Storage::prefetch) started or holds and
    /// nobody read (a loader restored to another step, or closed).
    fn forget_prefetched(&self) {}

    /// Copies bytes of an open `file` into `buf` (same contract as `with_bytes`).
    ///
    /// # Errors
    /// The underlying I/O error.
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with_bytes(file, offset, buf.len(), |b| buf.copy_from_slice(b))
    }

    /// Copies bytes of an open `file` into `buf` without mapping them into
    /// this process where the storage can (a positioned read from the page
    /// cache), so the bytes read do not count in the process's resident
    /// memory; otherwise as [`read_at`](Storage::read_at). Same contract.
    ///
    /// # Errors
    /// The underlying I/O error.
    fn copy_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_at(file, offset, buf)
    }

    /// Writes `bytes` at `offset` of an open `file`, growing it as needed.
    ///
    /// # Errors
    /// The underlying I/O error.
    fn write_at(&self, file: FileId, offset: u64, bytes: &[u8]) -> io::Result<()>;

    /// Makes everything written to `file` durable (its bytes and its
    /// length; not its directory entry: see [`sync_dir`](Storage::sync_dir)).
    ///
    /// # Errors
    /// The underlying I/O error.
    fn sync(&self, file: FileId) -> io::Result<()>;

    /// Makes every file of `files` durable, as [`sync`](Storage::sync)
    /// does, before returning; the order among them is not specified. The
    /// default syncs them one by one, in order.
    ///
    /// # Errors
    /// The first failure, with the file it concerns.
    fn sync_many(&self, files: &[FileId]) -> Result<(), (FileId, io::Error)> {
        files
            .iter()
            .try_for_each(|&file| self.sync(file).map_err(|e| (file, e)))
    }

    /// Makes the directory entries of every file created or removed so far
    /// durable: until then, power loss may undo a creation or a removal.
    ///
    /// # Errors
    /// The underlying I/O error.
    fn sync_dir(&self) -> io::Result<()>;

    /// Creates `meta.zr` atomically: a file of `len` bytes starting with
    /// `head`, made durable under a temporary name and only then given its
    /// name, unless a `meta.zr` exists by then (another creator won). The
    /// new name is durable when this returns. Returns whether this call
    /// created it. A crash at any point leaves either no `meta.zr` or a
    /// complete one (plus, at worst, a stray temporary file).
    ///
    /// # Errors
    /// The underlying I/O error.
    fn create_meta(&self, head: &[u8], len: u64) -> io::Result<bool>;

    /// Cuts an open `file` down to `len` bytes.
    ///
    /// # Errors
    /// The underlying I/O error.
    fn truncate(&mut self, file: FileId, len: u64) -> io::Result<()>;

    /// Closes and deletes `file`; absent files are not an error.
    ///
    /// # Errors
    /// The underlying I/O error.
    fn remove(&mut self, file: FileId) -> io::Result<()>;

    /// Whether `file` exists in the directory now (open or not; a file this
    /// storage has open but someone removed does not).
    ///
    /// # Errors
    /// The underlying I/O error.
    fn exists(&self, file: FileId) -> io::Result<bool>;

    /// Ids of every chunk file present, open or not (to find files an
    /// interrupted compaction left past the frontier).
    ///
    /// # Errors
    /// The underlying I/O error.
    fn chunk_ids(&self) -> io::Result<Vec<u32>>;
}

/// The error a read-only storage gives for a write: kind
/// `PermissionDenied`, which the engine reports as a read-only store.
#[must_use]
pub fn read_only_error() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "store is open read-only")
}
