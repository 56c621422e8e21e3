//! Collections in object storage (`docs/FORMAT.md` part III,
//! `docs/REMOTE.md`): opening one by URL, its parts read lazily through
//! [`RemoteStorage`]; uploading a finished part; committing the parts
//! found under a URL; pushing a local collection.
//!
//! Object storage has no rename, so a part is marked finished by an object
//! of its own, [`PART_DONE`], written after every one of its stores; the
//! manifest, one object, is written last of all.

use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt, stream};
use loaderx_format::manifest::{MANIFEST_FILE, Manifest};
use loaderx_store::collection::{
    Collection, CommitTarget, Committed, PartOpener, commit_to, no_manifest, read_manifest,
};
use loaderx_store::format::v2::Schema;
use loaderx_store::{Codec, Deflate, Error, OpenOptions, Result, Store};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, path::Path as ObjectPath};

use crate::push::{Pushed, check_store, upload_store};
use crate::{AnyStorage, RemoteStorage, is_url, open_remote};

/// The object, inside a part's prefix, written after all of the part's
/// stores: a part without it is unfinished (being written, or abandoned)
/// and is not committed. Its name starts with `.`, which no column's can.
pub const PART_DONE: &str = ".complete";

/// Where a collection's parts are: a local directory or a URL.
#[derive(Debug)]
pub enum Parts {
    /// `<root>/<part>/<column>/` on a local file system.
    Local {
        /// The collection's directory.
        root: PathBuf,
        /// How each part store is opened (read-only).
        options: OpenOptions,
    },
    /// `<url>/<part>/<column>/` in object storage.
    Remote {
        /// The collection's prefix (its client is shared by every part).
        root: Box<RemoteStorage>,
        /// How each part store is opened (read-only, checked).
        options: OpenOptions,
    },
}

impl<C: Codec + Default> PartOpener<C, AnyStorage> for Parts {
    fn open(&self, part: &str, column: &str) -> Result<Store<C, AnyStorage>> {
        match self {
            Parts::Local { root, options } => Store::open_path_in(
                root.join(part).join(column),
                options.clone(),
                AnyStorage::Local,
            ),
            Parts::Remote { root, options } => {
                open_remote(root.sub(&format!("{part}/{column}"))?, options.clone())
            }
        }
    }

    fn location(&self, part: &str, column: &str) -> PathBuf {
        match self {
            Parts::Local { root, .. } => root.join(part).join(column),
            Parts::Remote { root, .. } => PathBuf::from(format!("{}/{part}/{column}", root.url())),
        }
    }
}

fn io_error(url: &str, op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    let path = PathBuf::from(url);
    move |source| Error::Io { path, op, source }
}

/// Opens the collection at `location`, a local directory or a URL: reads
/// and checks its manifest, and opens no part (each part store is opened,
/// read-only, when a read first touches it; at most `max_open_parts` are
/// held open at once).
///
/// # Errors
/// [`Error::NotAStore`] when there is no manifest or it is damaged;
/// [`Error::InvalidArgument`] for a URL or option not understood, or
/// storage options given with a local path; [`Error::Io`] naming the URL
/// when the manifest cannot be fetched.
pub fn open_collection<C: Codec + Default>(
    location: &str,
    storage_options: &[(String, String)],
    options: OpenOptions,
    max_open_parts: usize,
) -> Result<Collection<C, AnyStorage>> {
    let options = OpenOptions {
        read_only: true,
        create: false,
        ..options
    };
    if !is_url(location) {
        if let Some((key, _)) = storage_options.first() {
            return Err(Error::InvalidArgument {
                path: location.into(),
                argument: "storage_options",
                reason: format!(
                    "{location} is a local path; storage options (here {key:?}) apply only to collections opened by URL"
                ),
            });
        }
        let root = PathBuf::from(location);
        let bytes = read_manifest(&root)?;
        let parts = Parts::Local {
            root: root.clone(),
            options,
        };
        return Ok(Collection::from_manifest(root, &bytes, Box::new(parts))?
            .with_max_open_parts(max_open_parts));
    }
    let root = RemoteStorage::connect(location, storage_options)?;
    let url = root.url().to_owned();
    let bytes = get_object(&root, MANIFEST_FILE)?.ok_or_else(|| no_manifest(Path::new(&url)))?;
    let parts = Parts::Remote {
        root: Box::new(root),
        options,
    };
    Ok(
        Collection::from_manifest(url, &bytes, Box::new(parts))?
            .with_max_open_parts(max_open_parts),
    )
}

/// The object `name` (`/`-separated) under `root`'s prefix, whole, or
/// `None` when there is none.
fn get_object(root: &RemoteStorage, name: &str) -> Result<Option<bytes::Bytes>> {
    let (client, prefix) = root.client();
    let location = join(&prefix, name);
    let url = format!("{}/{name}", root.url());
    root.run(&url, async move {
        match client.get(&location).await {
            Ok(got) => got.bytes().await.map(Some),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .map_err(io_error(&url, "read"))
}

/// Writes `bytes` as the object `name` under `root`'s prefix.
fn put_object(root: &RemoteStorage, name: &str, bytes: Vec<u8>) -> Result<()> {
    let (client, prefix) = root.client();
    let location = join(&prefix, name);
    let url = format!("{}/{name}", root.url());
    root.run(&url, async move {
        client.put(&location, PutPayload::from(bytes)).await
    })
    .map(|_| ())
    .map_err(io_error(&url, "upload"))
}

/// `prefix` joined with the `/`-separated `name`.
fn join(prefix: &ObjectPath, name: &str) -> ObjectPath {
    name.split('/')
        .fold(prefix.clone(), |at, part| at.join(part))
}

/// The names of the common prefixes (the "directories") and of the
/// objects directly under `sub` (`/`-separated, or `""` for the root).
fn list_dir(root: &RemoteStorage, sub: &str) -> Result<(Vec<String>, Vec<String>)> {
    let (client, prefix) = root.client();
    let at = if sub.is_empty() {
        prefix
    } else {
        join(&prefix, sub)
    };
    let url = if sub.is_empty() {
        root.url().to_owned()
    } else {
        format!("{}/{sub}", root.url())
    };
    let listing = root
        .run(
            &url,
            async move { client.list_with_delimiter(Some(&at)).await },
        )
        .map_err(io_error(&url, "list"))?;
    let name = |p: &ObjectPath| p.filename().map(str::to_owned);
    Ok((
        listing.common_prefixes.iter().filter_map(name).collect(),
        listing
            .objects
            .iter()
            .filter_map(|m| name(&m.location))
            .collect(),
    ))
}

/// Deletes every object under `sub` of `root` (its [`PART_DONE`] first,
/// so the part reads as unfinished from the first deletion on).
fn delete_under(root: &RemoteStorage, sub: &str) -> Result<()> {
    let (client, prefix) = root.client();
    let at = join(&prefix, sub);
    let url = format!("{}/{sub}", root.url());
    let done = at.clone().join(PART_DONE);
    root.run(&url, async move {
        match client.delete(&done).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let objects: Vec<ObjectPath> = client
            .list(Some(&at))
            .map_ok(|m| m.location)
            .try_collect()
            .await?;
        stream::iter(objects)
            .map(|location| {
                let client = client.clone();
                async move {
                    match client.delete(&location).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
            })
            .buffer_unordered(8)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
    })
    .map_err(io_error(&url, "delete"))
}

/// Uploads the finished local part directory `local` (one closed v2 store
/// per column) as part `part` of the collection at `url`: whatever the
/// URL holds under the part's name (an earlier attempt of the same task)
/// is deleted first, then every column store is uploaded (chunks, then
/// `meta.zr`), then [`PART_DONE`]. A retried task thus replaces its part
/// and never adds a second; a failed upload leaves an unfinished part
/// that [`commit_url`] ignores.
///
/// # Errors
/// [`Error::Collection`] for a bad part or column name or a part with no
/// column; errors of [`push`](crate::push()) for a column store.
pub fn upload_part(
    local: &Path,
    url: &str,
    part: &str,
    storage_options: &[(String, String)],
) -> Result<Pushed> {
    let root = RemoteStorage::connect(url, storage_options)?;
    upload_part_to(&root, local, part)
}

fn upload_part_to(root: &RemoteStorage, local: &Path, part: &str) -> Result<Pushed> {
    let invalid = |reason: String| Error::Collection {
        path: PathBuf::from(root.url()),
        reason,
    };
    loaderx_format::manifest::check_name(part).map_err(|why| invalid(format!("part {why}")))?;
    let mut columns = Vec::new();
    for entry in std::fs::read_dir(local).map_err(|source| Error::Io {
        path: local.to_owned(),
        op: "list",
        source,
    })? {
        let entry = entry.map_err(|source| Error::Io {
            path: local.to_owned(),
            op: "list",
            source,
        })?;
        if entry.path().is_dir() {
            columns.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    columns.sort();
    if columns.is_empty() {
        return Err(invalid(format!(
            "part {part:?} ({}) holds no column",
            local.display()
        )));
    }
    for column in &columns {
        loaderx_format::manifest::check_name(column)
            .map_err(|why| invalid(format!("part {part:?}: column {why}")))?;
        check_store(&local.join(column))?;
    }
    delete_under(root, part)?;
    let (client, prefix) = root.client();
    let mut pushed = Pushed {
        objects: Vec::new(),
        bytes: 0,
    };
    for column in &columns {
        let name = format!("{part}/{column}");
        let at = join(&prefix, &name);
        let done = upload_store(
            &local.join(column),
            &client,
            &at,
            &format!("{}/{name}", root.url()),
        )?;
        pushed.bytes += done.bytes;
        pushed
            .objects
            .extend(done.objects.into_iter().map(|o| format!("{name}/{o}")));
    }
    put_object(root, &format!("{part}/{PART_DONE}"), Vec::new())?;
    pushed.objects.push(format!("{part}/{PART_DONE}"));
    Ok(pushed)
}

/// The parts under a URL, for [`commit_to`].
struct RemoteTarget {
    root: RemoteStorage,
    path: PathBuf,
}

impl CommitTarget for RemoteTarget {
    fn root(&self) -> &Path {
        &self.path
    }

    fn entries(&self) -> Result<Vec<String>> {
        Ok(list_dir(&self.root, "")?.0)
    }

    fn finished(&self, name: &str) -> Result<bool> {
        let (client, prefix) = self.root.client();
        let location = join(&prefix, name).join(PART_DONE);
        let url = format!("{}/{name}/{PART_DONE}", self.root.url());
        self.root
            .run(&url, async move {
                match client.head(&location).await {
                    Ok(_) => Ok(true),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(e),
                }
            })
            .map_err(io_error(&url, "check"))
    }

    fn columns(&self, part: &str) -> Result<Vec<String>> {
        Ok(list_dir(&self.root, part)?.0)
    }

    fn column(&self, part: &str, column: &str) -> Result<(Option<Schema>, u64)> {
        let store: Store<Deflate, AnyStorage> = open_remote(
            self.root.sub(&format!("{part}/{column}"))?,
            OpenOptions::read_only(),
        )?;
        Ok((store.schema().cloned(), store.len()))
    }

    fn publish(&self, manifest: &[u8]) -> Result<()> {
        // One object, written whole: readers get the old one or this one.
        put_object(&self.root, MANIFEST_FILE, manifest.to_vec())
    }
}

/// Checks the finished parts under `url` (those with [`PART_DONE`]) and
/// publishes them: the manifest, one object, written last. `parts` as for
/// [`commit_to`]; unfinished parts are among the entries ignored.
///
/// # Errors
/// As [`commit_to`]; [`Error::Io`] naming the URL for a request that fails.
pub fn commit_url(
    url: &str,
    parts: Option<&[String]>,
    storage_options: &[(String, String)],
) -> Result<Committed> {
    let root = RemoteStorage::connect(url, storage_options)?;
    let path = PathBuf::from(root.url());
    commit_to(&RemoteTarget { root, path }, parts)
}

/// Commits the collection at `location`: a local directory
/// ([`loaderx_store::collection::commit`]) or a URL ([`commit_url`]).
///
/// # Errors
/// As those.
pub fn commit_collection(
    location: &str,
    parts: Option<&[String]>,
    storage_options: &[(String, String)],
) -> Result<Committed> {
    if is_url(location) {
        return commit_url(location, parts, storage_options);
    }
    if let Some((key, _)) = storage_options.first() {
        return Err(Error::InvalidArgument {
            path: location.into(),
            argument: "storage_options",
            reason: format!(
                "{location} is a local path; storage options (here {key:?}) apply only to collections at a URL"
            ),
        });
    }
    loaderx_store::collection::commit(Path::new(location), parts, &OpenOptions::default())
}

/// Uploads the committed local collection at `local` to `url`: each part
/// of its manifest as [`upload_part`] does, then the manifest (the same
/// bytes), last, so a reader that opens the URL meanwhile finds no
/// collection or the whole one. A URL that already holds a manifest is
/// refused.
///
/// # Errors
/// [`Error::NotAStore`] when `local` has no valid manifest;
/// [`Error::Exists`] when `url` holds a collection; the errors of
/// [`upload_part`].
pub fn push_collection(
    local: &Path,
    url: &str,
    storage_options: &[(String, String)],
) -> Result<Pushed> {
    let bytes = read_manifest(local)?;
    let manifest = Manifest::decode(&bytes).map_err(|e| Error::NotAStore {
        path: local.join(MANIFEST_FILE),
        reason: e.to_string(),
    })?;
    let root = RemoteStorage::connect(url, storage_options)?;
    if get_object(&root, MANIFEST_FILE)?.is_some() {
        return Err(Error::Exists { path: url.into() });
    }
    let mut pushed = Pushed {
        objects: Vec::new(),
        bytes: 0,
    };
    for part in &manifest.parts {
        let done = upload_part_to(&root, &local.join(&part.name), &part.name)?;
        pushed.bytes += done.bytes;
        pushed.objects.extend(done.objects);
    }
    pushed.bytes += bytes.len() as u64;
    put_object(&root, MANIFEST_FILE, bytes)?;
    pushed.objects.push(MANIFEST_FILE.into());
    Ok(pushed)
}

/// Whether `url` holds a committed collection (a manifest object).
///
/// # Errors
/// [`Error::InvalidArgument`] for a URL or option not understood;
/// [`Error::Io`] naming the URL when the check fails.
pub fn is_collection_url(url: &str, storage_options: &[(String, String)]) -> Result<bool> {
    let root = RemoteStorage::connect(url, storage_options)?;
    let (client, prefix) = root.client();
    let location = prefix.join(MANIFEST_FILE);
    let what = format!("{}/{MANIFEST_FILE}", root.url());
    root.run(&what, async move {
        match client.head(&location).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    })
    .map_err(io_error(url, "check"))
}
