//! A storage that forwards every call to an inner one except those a test
//! overrides: a test wrapping a real storage (a fault in the way bytes are
//! handed over, a `stat` held at a chosen moment) states only the methods
//! it changes.
//!
//! Every method of [`Storage`] is forwarded, those with a default body
//! included, so the inner storage's own versions (a watched
//! `current_len_since`, `with_many_bytes` under a lock) keep working. The
//! other side of that: a default body that calls another method reaches the
//! inner storage's, not an override (`current_len_since` calls
//! `current_len`): override both when both must change. A method added to
//! [`Storage`] belongs in [`Overrides`] and in the impl below, or wrappers
//! silently fall back to its default.

use std::{fmt, io, path::Path};

use loaderx_store::storage::{Drained, FileId, OnFetched, Storage};

/// `inner` with the methods `overrides` changes.
#[derive(Debug)]
pub struct Overridden<S, O> {
    pub inner: S,
    pub overrides: O,
}

/// The methods of [`Storage`], each handed the inner storage; each forwards
/// to it unless overridden.
pub trait Overrides<S: Storage>: Send + Sync + fmt::Debug {
    fn location<'a>(&self, inner: &'a S) -> &'a Path {
        inner.location()
    }

    fn is_read_only(&self, inner: &S) -> bool {
        inner.is_read_only()
    }

    fn open_file(
        &self,
        inner: &S,
        file: FileId,
        create: bool,
        create_len: u64,
    ) -> io::Result<Option<u64>> {
        inner.open_file(file, create, create_len)
    }

    fn current_len(&self, inner: &S, file: FileId) -> io::Result<u64> {
        inner.current_len(file)
    }

    fn current_len_since(&self, inner: &S, file: FileId, drained: &Drained) -> io::Result<u64> {
        inner.current_len_since(file, drained)
    }

    fn with_bytes<R>(
        &self,
        inner: &S,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        inner.with_bytes(file, offset, len, f)
    }

    fn with_many_bytes<R>(
        &self,
        inner: &S,
        ranges: &[(FileId, u64, usize)],
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, (FileId, io::Error)> {
        inner.with_many_bytes(ranges, f)
    }

    fn with_bytes_as_fetched(
        &self,
        inner: &S,
        ranges: &[(FileId, u64, usize)],
        f: &mut OnFetched<'_>,
    ) -> Result<(), (FileId, io::Error)> {
        inner.with_bytes_as_fetched(ranges, f)
    }

    fn fetches(&self, inner: &S) -> bool {
        inner.fetches()
    }

    fn fetch_many(
        &self,
        inner: &S,
        ranges: &[(FileId, u64, usize)],
    ) -> Result<Vec<Vec<u8>>, (FileId, io::Error)> {
        inner.fetch_many(ranges)
    }

    fn prefetch(&self, inner: &S, ranges: &[(FileId, u64, usize)]) {
        inner.prefetch(ranges);
    }

    fn forget_prefetched(&self, inner: &S) {
        inner.forget_prefetched();
    }

    fn read_at(&self, inner: &S, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        inner.read_at(file, offset, buf)
    }

    fn copy_at(&self, inner: &S, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        inner.copy_at(file, offset, buf)
    }

    fn write_at(&self, inner: &S, file: FileId, offset: u64, bytes: &[u8]) -> io::Result<()> {
        inner.write_at(file, offset, bytes)
    }

    fn sync(&self, inner: &S, file: FileId) -> io::Result<()> {
        inner.sync(file)
    }

    fn sync_many(&self, inner: &S, files: &[FileId]) -> Result<(), (FileId, io::Error)> {
        inner.sync_many(files)
    }

    fn sync_dir(&self, inner: &S) -> io::Result<()> {
        inner.sync_dir()
    }

    fn create_meta(&self, inner: &S, head: &[u8], len: u64) -> io::Result<bool> {
        inner.create_meta(head, len)
    }

    fn truncate(&mut self, inner: &mut S, file: FileId, len: u64) -> io::Result<()> {
        inner.truncate(file, len)
    }

    fn remove(&mut self, inner: &mut S, file: FileId) -> io::Result<()> {
        inner.remove(file)
    }

    fn exists(&self, inner: &S, file: FileId) -> io::Result<bool> {
        inner.exists(file)
    }

    fn chunk_ids(&self, inner: &S) -> io::Result<Vec<u32>> {
        inner.chunk_ids()
    }
}

impl<S: Storage, O: Overrides<S>> Storage for Overridden<S, O> {
    fn location(&self) -> &Path {
        self.overrides.location(&self.inner)
    }

    fn is_read_only(&self) -> bool {
        self.overrides.is_read_only(&self.inner)
    }

    fn open_file(&self, file: FileId, create: bool, create_len: u64) -> io::Result<Option<u64>> {
        self.overrides
            .open_file(&self.inner, file, create, create_len)
    }

    fn current_len(&self, file: FileId) -> io::Result<u64> {
        self.overrides.current_len(&self.inner, file)
    }

    fn current_len_since(&self, file: FileId, drained: &Drained) -> io::Result<u64> {
        self.overrides.current_len_since(&self.inner, file, drained)
    }

    fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        self.overrides.with_bytes(&self.inner, file, offset, len, f)
    }

    fn with_many_bytes<R>(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, (FileId, io::Error)> {
        self.overrides.with_many_bytes(&self.inner, ranges, f)
    }

    fn with_bytes_as_fetched(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: &mut OnFetched<'_>,
    ) -> Result<(), (FileId, io::Error)> {
        self.overrides.with_bytes_as_fetched(&self.inner, ranges, f)
    }

    fn fetches(&self) -> bool {
        self.overrides.fetches(&self.inner)
    }

    fn fetch_many(
        &self,
        ranges: &[(FileId, u64, usize)],
    ) -> Result<Vec<Vec<u8>>, (FileId, io::Error)> {
        self.overrides.fetch_many(&self.inner, ranges)
    }

    fn prefetch(&self, ranges: &[(FileId, u64, usize)]) {
        self.overrides.prefetch(&self.inner, ranges);
    }

    fn forget_prefetched(&self) {
        self.overrides.forget_prefetched(&self.inner);
    }

    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.overrides.read_at(&self.inner, file, offset, buf)
    }

    fn copy_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.overrides.copy_at(&self.inner, file, offset, buf)
    }

    fn write_at(&self, file: FileId, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.overrides.write_at(&self.inner, file, offset, bytes)
    }

    fn sync(&self, file: FileId) -> io::Result<()> {
        self.overrides.sync(&self.inner, file)
    }

    fn sync_many(&self, files: &[FileId]) -> Result<(), (FileId, io::Error)> {
        self.overrides.sync_many(&self.inner, files)
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.overrides.sync_dir(&self.inner)
    }

    fn create_meta(&self, head: &[u8], len: u64) -> io::Result<bool> {
        self.overrides.create_meta(&self.inner, head, len)
    }

    fn truncate(&mut self, file: FileId, len: u64) -> io::Result<()> {
        self.overrides.truncate(&mut self.inner, file, len)
    }

    fn remove(&mut self, file: FileId) -> io::Result<()> {
        self.overrides.remove(&mut self.inner, file)
    }

    fn exists(&self, file: FileId) -> io::Result<bool> {
        self.overrides.exists(&self.inner, file)
    }

    fn chunk_ids(&self) -> io::Result<Vec<u32>> {
        self.overrides.chunk_ids(&self.inner)
    }
}
