//! The store's files, reached through the storage seam, with the file's path
//! and the operation attached to every I/O error — so the engine says
//! `files.sync(FileId::Meta)?` and the error still names `…/meta.zr`.
//!
//! Also the `meta.zr` operations in the format's terms (read an entry, write
//! entries, write the header), so table offsets are computed in one place
//! ([`entry_offset`]) and entries decoded by one function
//! ([`RecordLoc::decode`]).

use std::path::{Path, PathBuf};

use loaderx_format::{ENTRY_LEN, Header, RecordLoc, entry_offset};

use crate::{
    Error, Result,
    storage::{FileId, Storage},
};

/// A [`Storage`] and the directory it stands for.
#[derive(Debug)]
pub(crate) struct Files<S> {
    storage: S,
    dir: PathBuf,
}

impl<S: Storage> Files<S> {
    pub(crate) fn new(storage: S) -> Files<S> {
        let dir = storage.location().to_owned();
        Files { storage, dir }
    }

    /// The store's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn storage(&self) -> &S {
        &self.storage
    }

    /// The storage itself, for a sequence of operations that fails as one
    /// (the undo log's write).
    pub(crate) fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
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

    /// The length of open `file` as the file system reports it now.
    pub(crate) fn current_len(&self, file: FileId) -> Result<u64> {
        self.storage
            .current_len(file)
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

    /// Makes each of `files` durable, in order.
    pub(crate) fn sync_all(&self, files: impl IntoIterator<Item = FileId>) -> Result<()> {
        files.into_iter().try_for_each(|file| self.sync(file))
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

    /// Reads `meta.zr`'s header bytes (not judged).
    pub(crate) fn read_header_bytes(&self) -> Result<[u8; loaderx_format::HEADER_LEN]> {
        let mut buf = [0u8; loaderx_format::HEADER_LEN];
        self.read(FileId::Meta, 0, &mut buf, "read header")?;
        Ok(buf)
    }

    /// Writes `header` at the start of `meta.zr`.
    pub(crate) fn write_header(&self, header: &Header, op: &'static str) -> Result<()> {
        self.write(FileId::Meta, 0, &header.encode(), op)
    }

    /// Reads table entry `index` without judging it.
    pub(crate) fn read_entry(&self, index: u32) -> Result<RecordLoc> {
        let mut buf = [0u8; ENTRY_LEN];
        self.read(FileId::Meta, entry_offset(index), &mut buf, "read table")?;
        Ok(RecordLoc::decode(&buf))
    }

    /// Writes `loc` as table entry `index`.
    pub(crate) fn write_entry(&self, index: u32, loc: &RecordLoc, op: &'static str) -> Result<()> {
        self.write(FileId::Meta, entry_offset(index), &loc.encode(), op)
    }

    /// Writes already-encoded entries as table entries `first..`, in one write.
    pub(crate) fn write_entries(&self, first: u32, encoded: &[u8]) -> Result<()> {
        debug_assert_eq!(encoded.len() % ENTRY_LEN, 0);
        self.write(FileId::Meta, entry_offset(first), encoded, "write table")
    }

    /// Calls `f` with the table entries `0..length`, decoded.
    pub(crate) fn for_each_entry(&self, length: u32, mut f: impl FnMut(RecordLoc)) -> Result<()> {
        let start = entry_offset(0);
        let len = (entry_offset(length) - start) as usize;
        self.with_bytes(FileId::Meta, start, len, "read table", |table| {
            let (entries, _) = table.as_chunks::<ENTRY_LEN>();
            for e in entries {
                f(RecordLoc::decode(e));
            }
        })
    }
}
