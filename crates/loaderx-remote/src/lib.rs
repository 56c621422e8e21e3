//! Read-only loaderx stores in object storage: S3, GCS, Azure, HTTP(S)
//! and `file://`, through the `object_store` crate.
//!
//! [`RemoteStorage`] implements the engine's storage seam
//! ([`loaderx_store::storage::Storage`]) with requests: the table (`meta.zr`)
//! is read in pages fetched on demand and kept for the handle's life; a
//! gather hands over its records' exact byte ranges at once
//! ([`Storage::fetch_many`]), which are sorted, merged when the gap between
//! neighbours is small, and fetched concurrently (bounded). Every request
//! is conditional on the object's ETag recorded when the handle first saw
//! it, so an object changed since is an error naming it, never a mix of
//! old and new bytes; every record is checked against its CRC32C.
//!
//! [`AnyStorage`] holds either a local store ([`FileStorage`]) or a remote
//! one, so one engine type serves both; [`open_store`] opens either from a
//! path or URL. This crate is what brings an async runtime and an HTTP
//! stack: `loaderx-store` alone has neither.

mod cache;
pub mod collection;
mod options;
mod publish;
mod push;
mod remote;

use std::path::Path;

use loaderx_store::{
    Codec, Error, OpenOptions, Result, Store,
    storage::{FileId, FileStorage, Storage},
};

pub use collection::{
    PART_DONE, commit_collection, commit_url, is_collection_url, open_collection, push_collection,
    upload_part,
};
pub use options::RemoteOptions;
pub use publish::{first_object, publish_tree};
pub use push::{Pushed, push};
pub use remote::{RemoteStorage, set_interrupt_check};

/// Whether `location` names a store by URL (`scheme://...`, a scheme of
/// two letters or more, so a Windows drive letter is a path) rather than
/// by a local path.
#[must_use]
pub fn is_url(location: &str) -> bool {
    match location.split_once("://") {
        Some((scheme, _)) => {
            scheme.len() >= 2
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.')
        }
        None => false,
    }
}

/// Opens the store at `location`: a local directory (as
/// [`Store::open_path_in`], with `options`), or a URL (read-only, as
/// [`open_url`], with `storage_options`, which a local path refuses unless
/// empty).
///
/// # Errors
/// As [`Store::open_with`] for a path, [`open_url`] for a URL.
pub fn open_store<C: Codec + Default>(
    location: &str,
    storage_options: &[(String, String)],
    options: OpenOptions,
) -> Result<Store<C, AnyStorage>> {
    if is_url(location) {
        return open_url(location, storage_options, options);
    }
    if let Some((key, _)) = storage_options.first() {
        return Err(Error::InvalidArgument {
            path: location.into(),
            argument: "storage_options",
            reason: format!(
                "{location} is a local path; storage options (here {key:?}) apply only to stores opened by URL"
            ),
        });
    }
    Store::open_path_in(Path::new(location), options, AnyStorage::Local)
}

/// Opens the store at `url` read-only, whatever `options` says about
/// writing, with every record checked against its CRC32C
/// (`check_raw` forced on). Format v1 stores are refused: their records
/// carry no checksums, so bytes from a network could not be trusted.
///
/// # Errors
/// [`Error::InvalidArgument`] for a URL or storage option that is not
/// understood (naming it); [`Error::NotAStore`] when nothing there is a
/// store, or for a v1 store; [`Error::Io`] naming the object for a network
/// failure, a timeout or an object that changed.
pub fn open_url<C: Codec + Default>(
    url: &str,
    storage_options: &[(String, String)],
    options: OpenOptions,
) -> Result<Store<C, AnyStorage>> {
    open_remote(RemoteStorage::open(url, storage_options)?, options)
}

/// The store over `storage` (already listed), read-only and checked, as
/// [`open_url`] opens it.
pub(crate) fn open_remote<C: Codec + Default>(
    storage: RemoteStorage,
    options: OpenOptions,
) -> Result<Store<C, AnyStorage>> {
    let options = OpenOptions {
        read_only: true,
        create: false,
        check_raw: true,
        ..options
    };
    let store = Store::open_in(AnyStorage::Remote(storage), options)?;
    if store.format_version() < 2 {
        return Err(Error::NotAStore {
            path: store.path().to_owned(),
            reason: "a format v1 store cannot be read by URL: its records carry no \
                     checksums, so bytes from a network could not be trusted. Rewrite it \
                     as format v2 locally (read its records and write them into a store \
                     made by Dense.create or Ragged.create, which write v2), then upload \
                     that one (`loaderx push LOCAL URL`)"
                .into(),
        });
    }
    Ok(store)
}

/// Storage for a store that is either local or remote: what an engine
/// type that must hold both uses. Each call forwards to the one it holds;
/// the branch is the only cost a local store pays.
#[derive(Debug)]
// Unboxed: boxing the local variant would add a pointer chase to every
// local read, and a handle holds one storage.
#[allow(clippy::large_enum_variant)]
pub enum AnyStorage {
    /// A store in a local directory.
    Local(FileStorage),
    /// A store in object storage (read-only).
    Remote(RemoteStorage),
}

impl AnyStorage {
    /// The remote storage held, if any.
    #[must_use]
    pub fn remote(&self) -> Option<&RemoteStorage> {
        match self {
            AnyStorage::Local(_) => None,
            AnyStorage::Remote(r) => Some(r),
        }
    }
}

/// Forwards a call to the storage held.
macro_rules! forward {
    ($self:expr, $s:ident => $call:expr) => {
        match $self {
            AnyStorage::Local($s) => $call,
            AnyStorage::Remote($s) => $call,
        }
    };
}

impl Storage for AnyStorage {
    fn location(&self) -> &Path {
        forward!(self, s => s.location())
    }
    fn is_read_only(&self) -> bool {
        forward!(self, s => s.is_read_only())
    }
    fn open_file(&self, file: FileId, create: bool, len: u64) -> std::io::Result<Option<u64>> {
        forward!(self, s => s.open_file(file, create, len))
    }
    fn current_len(&self, file: FileId) -> std::io::Result<u64> {
        forward!(self, s => s.current_len(file))
    }
    fn current_len_since(
        &self,
        file: FileId,
        drained: &loaderx_store::storage::Drained,
    ) -> std::io::Result<u64> {
        forward!(self, s => s.current_len_since(file, drained))
    }
    #[inline]
    fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> std::io::Result<R> {
        forward!(self, s => s.with_bytes(file, offset, len, f))
    }
    fn with_many_bytes<R>(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> std::result::Result<R, (FileId, std::io::Error)> {
        forward!(self, s => s.with_many_bytes(ranges, f))
    }
    fn with_bytes_as_fetched(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: &mut loaderx_store::storage::OnFetched<'_>,
    ) -> std::result::Result<(), (FileId, std::io::Error)> {
        forward!(self, s => s.with_bytes_as_fetched(ranges, f))
    }
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        forward!(self, s => s.read_at(file, offset, buf))
    }
    fn copy_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        forward!(self, s => s.copy_at(file, offset, buf))
    }
    #[inline]
    fn fetches(&self) -> bool {
        forward!(self, s => s.fetches())
    }
    fn fetch_many(
        &self,
        ranges: &[(FileId, u64, usize)],
    ) -> std::result::Result<Vec<Vec<u8>>, (FileId, std::io::Error)> {
        forward!(self, s => s.fetch_many(ranges))
    }
    fn prefetch(&self, ranges: &[(FileId, u64, usize)]) {
        forward!(self, s => s.prefetch(ranges))
    }
    fn forget_prefetched(&self) {
        forward!(self, s => s.forget_prefetched())
    }
    fn write_at(&self, file: FileId, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        forward!(self, s => s.write_at(file, offset, bytes))
    }
    fn sync(&self, file: FileId) -> std::io::Result<()> {
        forward!(self, s => s.sync(file))
    }
    fn sync_many(&self, files: &[FileId]) -> std::result::Result<(), (FileId, std::io::Error)> {
        forward!(self, s => s.sync_many(files))
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        forward!(self, s => s.sync_dir())
    }
    fn create_meta(&self, head: &[u8], len: u64) -> std::io::Result<bool> {
        forward!(self, s => s.create_meta(head, len))
    }
    fn truncate(&mut self, file: FileId, len: u64) -> std::io::Result<()> {
        forward!(self, s => s.truncate(file, len))
    }
    fn remove(&mut self, file: FileId) -> std::io::Result<()> {
        forward!(self, s => s.remove(file))
    }
    fn exists(&self, file: FileId) -> std::io::Result<bool> {
        forward!(self, s => s.exists(file))
    }
    fn chunk_ids(&self) -> std::io::Result<Vec<u32>> {
        forward!(self, s => s.chunk_ids())
    }
}
