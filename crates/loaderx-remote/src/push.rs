//! Uploading a closed local store to object storage.

use std::{io::Read, path::Path, sync::Arc};

use loaderx_format::manifest::MANIFEST_FILE;
use loaderx_store::{Deflate, Error, OpenOptions, Result, Store};
use object_store::{
    ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart, path::Path as ObjectPath,
};

use crate::remote::{RemoteStorage, wait_for};

/// Bytes of each part of a multipart upload (S3 wants at least 5 MiB).
const PART_BYTES: usize = 16 << 20;

/// Parts of one object in flight at once.
const PARTS_IN_FLIGHT: usize = 4;

/// What [`push`] uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// Objects written, `meta.zr` last.
    pub objects: Vec<String>,
    /// Bytes written.
    pub bytes: u64,
}

/// Uploads the closed store at `local` to `url` (a local collection, one
/// with a manifest, goes as [`push_collection`](crate::push_collection)
/// does; a directory of stores, such as a converter's output, as
/// [`publish_tree`](crate::publish_tree) does): every chunk file by
/// multipart upload first, then `meta.zr`, so a reader that opens the
/// URL meanwhile finds either no store or a whole one. The store must be
/// format v2 (what remote readers accept) with no delete left unfinished,
/// and must not be written while it is pushed. A URL that already holds a
/// store (`meta.zr`) is refused: readers of it would fail on every object
/// replaced under them.
///
/// # Errors
/// [`Error::NotAStore`] for a local path that is not a v2 store;
/// [`Error::NeedsRecovery`] for a store with an unfinished delete;
/// [`Error::Exists`] when `url` holds a store; [`Error::InvalidArgument`]
/// for a URL or option not understood; [`Error::Io`] naming the file or
/// object when reading or uploading fails (nothing is published then:
/// `meta.zr` goes last).
pub fn push(local: &Path, url: &str, storage_options: &[(String, String)]) -> Result<Pushed> {
    if local.join(MANIFEST_FILE).is_file() {
        return crate::collection::push_collection(local, url, storage_options);
    }
    if local.is_dir() && !local.join("meta.zr").exists() {
        return crate::publish::publish_tree(local, url, storage_options);
    }
    check_store(local)?;
    let remote = RemoteStorage::open(url, storage_options)?;
    if remote.listed("meta.zr") {
        return Err(Error::Exists { path: url.into() });
    }
    let (client, prefix) = remote.client();
    upload_store(local, &client, &prefix, url.trim_end_matches('/'))
}

/// Checks that `local` is a closed v2 store that can be pushed.
pub(crate) fn check_store(local: &Path) -> Result<()> {
    // Opening it checks it is a store, with no delete to recover.
    let store: Store<Deflate> = Store::open_with(
        local,
        OpenOptions {
            create: false,
            ..OpenOptions::read_only()
        },
    )?;
    if store.format_version() < 2 {
        return Err(Error::NotAStore {
            path: local.to_owned(),
            reason: "only format v2 stores can be read by URL, so only they are pushed".into(),
        });
    }
    Ok(())
}

/// Uploads the closed v2 store at `local` (checked by [`check_store`]) as
/// the objects under `prefix` of `client` (`url` naming them): the chunk
/// files by multipart upload, then `meta.zr`.
pub(crate) fn upload_store(
    local: &Path,
    client: &Arc<dyn ObjectStore>,
    prefix: &ObjectPath,
    url: &str,
) -> Result<Pushed> {
    let client = client.clone();
    // The table as it is now, read before the chunks: records it names lie
    // in chunk bytes that exist by the time those are read.
    let meta_path = local.join("meta.zr");
    let meta = std::fs::read(&meta_path).map_err(|e| Error::Io {
        path: meta_path.clone(),
        op: "read",
        source: e,
    })?;
    let mut chunks: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(local)
        .map_err(|e| Error::Io {
            path: local.to_owned(),
            op: "list",
            source: e,
        })?
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let id: u32 = name.strip_suffix(".zr")?.parse().ok()?;
            Some((id, e.path()))
        })
        .collect();
    chunks.sort();
    let mut pushed = Pushed {
        objects: Vec::new(),
        bytes: 0,
    };
    for (id, path) in chunks {
        let name = loaderx_format::chunk_file_name(id);
        let object_url = format!("{}/{name}", url.trim_end_matches('/'));
        let location = prefix.clone().join(name.as_str());
        pushed.bytes += upload_file(&path, &client, &location, &object_url)?;
        pushed.objects.push(name);
    }
    let meta_url = format!("{}/meta.zr", url.trim_end_matches('/'));
    pushed.bytes += meta.len() as u64;
    let location = prefix.clone().join("meta.zr");
    wait_for(&meta_url, None, async move {
        client.put(&location, PutPayload::from(meta)).await
    })
    .map_err(|e| Error::Io {
        path: meta_url.into(),
        op: "upload",
        source: e,
    })?;
    pushed.objects.push("meta.zr".into());
    Ok(pushed)
}

/// Uploads the local file `path` as the object `location` (`object_url`
/// names it in errors): by multipart upload (parts of [`PART_BYTES`], at
/// most [`PARTS_IN_FLIGHT`] in flight) when it is larger than one part,
/// else by one request. Returns the bytes uploaded.
pub(crate) fn upload_file(
    path: &Path,
    client: &Arc<dyn ObjectStore>,
    location: &ObjectPath,
    object_url: &str,
) -> Result<u64> {
    let io = |e: std::io::Error| Error::Io {
        path: object_url.into(),
        op: "upload",
        source: e,
    };
    let read_error = |e: std::io::Error| Error::Io {
        path: path.to_owned(),
        op: "read",
        source: e,
    };
    let mut file = std::fs::File::open(path).map_err(|e| Error::Io {
        path: path.to_owned(),
        op: "open",
        source: e,
    })?;
    let len = file.metadata().map_err(read_error)?.len();
    if len <= PART_BYTES as u64 {
        let mut bytes = Vec::with_capacity(len as usize);
        file.read_to_end(&mut bytes).map_err(read_error)?;
        let n = bytes.len() as u64;
        let client = client.clone();
        let location = location.clone();
        wait_for(object_url, None, async move {
            client.put(&location, PutPayload::from(bytes)).await
        })
        .map_err(io)?;
        return Ok(n);
    }
    let upload = {
        let client = client.clone();
        let location = location.clone();
        wait_for(object_url, None, async move {
            client.put_multipart(&location).await
        })
        .map_err(io)?
    };
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let mut buf = vec![0u8; PART_BYTES];
    let mut sent = 0u64;
    loop {
        let n = read_full(&mut file, &mut buf).map_err(read_error)?;
        if n == 0 {
            break;
        }
        {
            // `write` starts a part's upload as a task of the runtime it is
            // called in: ours, whose threads carry it on from here.
            let _in_runtime = crate::remote::runtime().enter();
            writer.write(&buf[..n]);
        }
        sent += n as u64;
        // Bounded: at most PARTS_IN_FLIGHT parts held in memory.
        let mut w = writer;
        writer = wait_for(object_url, None, async move {
            let r = w.wait_for_capacity(PARTS_IN_FLIGHT).await;
            r.map(|()| w)
        })
        .map_err(io)?;
    }
    wait_for(object_url, None, async move { writer.finish().await }).map_err(io)?;
    Ok(sent)
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
