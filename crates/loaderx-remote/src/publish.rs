//! Publishing a locally staged output (a store, or a directory of stores,
//! collections and plain files, as a converter writes) to a URL, and the
//! check that a URL is free to write to.
//!
//! Object storage has no rename, so an output is published object by
//! object in an order that keeps readers safe: every data object first
//! (chunk files, plain files), then every store's `meta.zr`, then every
//! collection part's [`PART_DONE`] mark, then every collection's manifest.
//! A reader that opens a store meanwhile finds none or the whole one.

use std::path::{Path, PathBuf};

use futures::TryStreamExt;
use loaderx_format::manifest::{MANIFEST_FILE, Manifest};
use loaderx_store::collection::read_manifest;
use loaderx_store::{Error, Result};
use object_store::{ObjectStoreExt, path::Path as ObjectPath};

use crate::collection::PART_DONE;
use crate::push::{Pushed, check_store, upload_file};
use crate::remote::{RemoteStorage, wait_for};

/// The first object found under `url`'s prefix (its name relative to the
/// prefix), or `None` when the prefix holds nothing: what a writer to a
/// URL checks before it writes anything, as a local create checks that
/// its directory is new or empty.
///
/// # Errors
/// [`Error::InvalidArgument`] for a URL or option not understood (and for
/// `http(s)://`, which cannot be listed or written); [`Error::Io`] naming
/// the URL when the listing fails.
pub fn first_object(url: &str, storage_options: &[(String, String)]) -> Result<Option<String>> {
    let root = RemoteStorage::connect(url, storage_options)?;
    writable_scheme(&root)?;
    let (client, prefix) = root.client();
    let at = prefix.clone();
    let found = root
        .run(root.url(), async move {
            let mut listing = client.list(Some(&at));
            listing.try_next().await
        })
        .map_err(|source| Error::Io {
            path: PathBuf::from(root.url()),
            op: "list",
            source,
        })?;
    Ok(found.map(|meta| relative(&prefix, &meta.location)))
}

/// Refuses a URL whose backend cannot be written (plain HTTP(S)).
fn writable_scheme(root: &RemoteStorage) -> Result<()> {
    let url = root.url();
    if url.starts_with("http://") || url.starts_with("https://") {
        return Err(Error::InvalidArgument {
            path: url.into(),
            argument: "url",
            reason:
                "an http(s):// URL is read-only; write to s3://, gs://, az://, abfs:// or file://"
                    .into(),
        });
    }
    Ok(())
}

/// `location`'s name relative to `prefix` (`/`-separated).
fn relative(prefix: &ObjectPath, location: &ObjectPath) -> String {
    match location.prefix_match(prefix) {
        Some(parts) => parts
            .map(|p| p.as_ref().to_owned())
            .collect::<Vec<_>>()
            .join("/"),
        None => location.to_string(),
    }
}

/// When an object goes up: data first, then what makes data visible.
fn rank(name: &str) -> u8 {
    match name.rsplit('/').next().unwrap_or(name) {
        "meta.zr" => 1,
        PART_DONE => 2,
        MANIFEST_FILE => 3,
        _ => 0,
    }
}

/// Every file under `dir`, as `(relative name, path)`, sorted by name.
fn files_under(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), dir.to_owned())];
    while let Some((rel, at)) = stack.pop() {
        let listing = std::fs::read_dir(&at).map_err(|source| Error::Io {
            path: at.clone(),
            op: "list",
            source,
        })?;
        for entry in listing {
            let entry = entry.map_err(|source| Error::Io {
                path: at.clone(),
                op: "list",
                source,
            })?;
            let name = entry
                .file_name()
                .into_string()
                .map_err(|name| Error::InvalidArgument {
                    path: entry.path(),
                    argument: "local",
                    reason: format!("{name:?} is not UTF-8, so it cannot name an object"),
                })?;
            let named = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry.file_type().map_err(|source| Error::Io {
                path: entry.path(),
                op: "stat",
                source,
            })?;
            if kind.is_dir() {
                stack.push((named, entry.path()));
            } else if kind.is_file() {
                out.push((named, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Uploads everything under the local directory `local` to `url`, keeping
/// its layout (`local/a/b` becomes `url/a/b`): data objects first, then
/// every store's `meta.zr`, then every part's [`PART_DONE`], then every
/// manifest, so each store (and collection) under `url` reads as absent
/// or whole while this runs. Every store under `local` (a directory with
/// `meta.zr`) must be a closed format v2 store. A URL that already holds a
/// `meta.zr` or manifest where one would be written is refused
/// ([`Error::Exists`]), before anything is written; other objects there
/// (those of an earlier publish that failed) are replaced.
///
/// # Errors
/// [`Error::NotAStore`] for a store that is not v2; [`Error::Exists`] as
/// above; [`Error::InvalidArgument`] for a URL or option not understood;
/// [`Error::Io`] naming `url` for a failed upload, saying which object
/// failed and which stores were published before it (none when no
/// `meta.zr` had gone up yet).
pub fn publish_tree(
    local: &Path,
    url: &str,
    storage_options: &[(String, String)],
) -> Result<Pushed> {
    let mut files = files_under(local)?;
    if files.is_empty() {
        return Err(Error::NotAStore {
            path: local.to_owned(),
            reason: "the directory holds no file to publish".into(),
        });
    }
    if files.iter().all(|(name, _)| rank(name) == 0) {
        return Err(Error::NotAStore {
            path: local.to_owned(),
            reason: "it holds no store (no meta.zr) and no collection (no manifest.zc)".into(),
        });
    }
    let mut marks = Vec::new();
    for (name, path) in &files {
        if rank(name) == 1 {
            check_store(path.parent().unwrap_or(local))?;
        }
        if rank(name) == 3 {
            // A collection: each part gets its mark, as `push` gives it.
            let dir = path.parent().unwrap_or(local);
            let bytes = read_manifest(dir)?;
            let manifest = Manifest::decode(&bytes).map_err(|e| Error::NotAStore {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            let at = name.strip_suffix(MANIFEST_FILE).unwrap_or("");
            for part in &manifest.parts {
                marks.push(format!("{at}{}/{PART_DONE}", part.name));
            }
        }
    }
    files.sort_by(|a, b| (rank(&a.0), &a.0).cmp(&(rank(&b.0), &b.0)));
    let root = RemoteStorage::connect(url, storage_options)?;
    writable_scheme(&root)?;
    let (client, prefix) = root.client();
    let url = root.url().to_owned();
    let held: Vec<String> = {
        let client = client.clone();
        let at = prefix.clone();
        root.run(&url, async move {
            client
                .list(Some(&at))
                .map_ok(|m| m.location)
                .try_collect::<Vec<_>>()
                .await
        })
        .map_err(|source| Error::Io {
            path: PathBuf::from(&url),
            op: "list",
            source,
        })?
        .iter()
        .map(|l| relative(&prefix, l))
        .collect()
    };
    if let Some(taken) = files
        .iter()
        .find(|(name, _)| rank(name) != 0 && held.contains(name))
    {
        return Err(Error::Exists {
            path: format!("{url}/{}", taken.0).into(),
        });
    }
    let mut pushed = Pushed {
        objects: Vec::new(),
        bytes: 0,
    };
    let total = files.len() + marks.len();
    let mut marks = marks.into_iter();
    let mut next = files.into_iter().map(|(n, p)| (n, Some(p))).peekable();
    while let Some((name, path)) = next
        .next_if(|(n, _)| rank(n) < 2)
        .or_else(|| marks.next().map(|n| (n, None)).or_else(|| next.next()))
    {
        let location = name
            .split('/')
            .fold(prefix.clone(), |at, part| at.join(part));
        let object_url = format!("{url}/{name}");
        let sent = match &path {
            Some(path) => upload_file(path, &client, &location, &object_url),
            None => put_empty(&client, &location, &object_url),
        };
        match sent {
            Ok(bytes) => {
                pushed.bytes += bytes;
                pushed.objects.push(name.clone());
            }
            Err(err) => return Err(failed(&url, &pushed.objects, total, err)),
        }
    }
    Ok(pushed)
}

/// Writes the empty object `location` (a part's mark).
fn put_empty(
    client: &std::sync::Arc<dyn object_store::ObjectStore>,
    location: &ObjectPath,
    object_url: &str,
) -> Result<u64> {
    let client = client.clone();
    let location = location.clone();
    wait_for(object_url, None, async move {
        client
            .put(&location, object_store::PutPayload::from(Vec::<u8>::new()))
            .await
    })
    .map(|_| 0)
    .map_err(|source| Error::Io {
        path: object_url.into(),
        op: "upload",
        source,
    })
}

/// The error of a publish to `url` that failed after `done` of `total`
/// objects went up.
fn failed(url: &str, done: &[String], total: usize, err: Error) -> Error {
    let stores: Vec<String> = done
        .iter()
        .filter(|name| rank(name) == 1)
        .map(|name| {
            let dir = name.strip_suffix("meta.zr").unwrap_or(name);
            format!("{url}/{}", dir.trim_end_matches('/'))
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    let published = if stores.is_empty() {
        "no store was published (no meta.zr went up)".to_owned()
    } else {
        format!("stores published before it: {}", stores.join(", "))
    };
    let kind = match &err {
        Error::Io { source, .. } => source.kind(),
        _ => std::io::ErrorKind::Other,
    };
    Error::Io {
        path: url.into(),
        op: "publish",
        source: std::io::Error::new(
            kind,
            format!(
                "{err}; {} of {total} objects were uploaded; {published}",
                done.len()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::rank;

    #[test]
    fn data_goes_before_metas_marks_and_manifests() {
        let mut names = vec![
            "manifest.zc",
            "part-00000/.complete",
            "part-00000/x/meta.zr",
            "part-00000/x/0000.zr",
            "classes.txt",
            "meta.zr",
            "0000.zr",
        ];
        names.sort_by_key(|n| (rank(n), *n));
        assert_eq!(
            names,
            [
                "0000.zr",
                "classes.txt",
                "part-00000/x/0000.zr",
                "meta.zr",
                "part-00000/x/meta.zr",
                "part-00000/.complete",
                "manifest.zc",
            ]
        );
    }
}
