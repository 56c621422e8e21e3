//! [`RemoteStorage`]: a store's objects read by (conditional, ranged)
//! requests on a process-wide async runtime.

use std::{
    collections::{BTreeMap, HashMap},
    io,
    ops::Range,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use bytes::Bytes;
use futures::{
    FutureExt, StreamExt,
    future::{BoxFuture, Shared},
    stream,
};
use loaderx_store::{
    Error,
    storage::{FileId, Storage, read_only_error},
};
use object_store::{
    ClientConfigKey, GetOptions, GetRange, ObjectStore, ObjectStoreExt, ObjectStoreScheme,
    RetryConfig, path::Path as ObjectPath,
};

use crate::{
    cache::{BlockCache, object_key},
    options::RemoteOptions,
};

/// The table's bytes and the records' bytes of one request for both.
type Split = (Vec<Vec<u8>>, Vec<Bytes>);

/// What a handle recorded of one object when it first saw it.
#[derive(Debug, Clone)]
struct Seen {
    size: u64,
    e_tag: Option<String>,
    version: Option<String>,
}

/// Storage for a store in object storage, read-only.
///
/// Every object's size and ETag (or version) are recorded when the handle
/// first sees it: all of them at open where the backend lists objects
/// (S3, GCS, Azure, files), each on first use over plain HTTP. Every read
/// after that is a request conditional on that ETag, so an object changed
/// (rewritten, truncated, deleted) since is an error naming it.
pub struct RemoteStorage {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
    location: PathBuf,
    options: RemoteOptions,
    /// Whether the backend lists objects (all but plain HTTP).
    lists: bool,
    /// Objects listed at open (`None` where the backend cannot list).
    listed: Option<HashMap<String, Seen>>,
    /// Objects the engine opened, as recorded.
    seen: Mutex<HashMap<FileId, Seen>>,
    /// Table pages fetched so far, by page number.
    pages: Mutex<HashMap<u64, Bytes>>,
    /// The local block cache, when enabled.
    cache: Option<BlockCache>,
    /// Requests started ahead of their reads ([`Storage::prefetch`]).
    staged: Mutex<Staging>,
    /// Bounds the requests in flight for reading ahead.
    ahead: Arc<tokio::sync::Semaphore>,
}

/// A request started ahead of its read: its bytes once they arrive (or the
/// error, as text: the read that wants the bytes asks again and reports
/// its own).
struct Staged {
    end: u64,
    body: Shared<BoxFuture<'static, Result<Bytes, String>>>,
    abort: tokio::task::AbortHandle,
}

/// The requests started ahead, by object and first byte, with the bytes
/// they hold or will hold, in the process that started them.
#[derive(Default)]
struct Staging {
    spans: BTreeMap<(FileId, u64), Staged>,
    bytes: u64,
    pid: u32,
}

impl Staging {
    /// The staged span that holds all of `r` of `file`, by its key.
    fn covering(&self, file: FileId, r: &Range<u64>) -> Option<(FileId, u64)> {
        let (&key, staged) = self.spans.range(..=(file, r.start)).next_back()?;
        (key.0 == file && staged.end >= r.end).then_some(key)
    }

    /// Forgets everything when the process is not the one that staged it:
    /// a forked child has none of its parent's runtime threads, so those
    /// requests would never finish (they are leaked, not aborted: aborting
    /// would touch the parent's runtime).
    fn in_this_process(&mut self) -> &mut Self {
        let pid = std::process::id();
        if self.pid != pid {
            std::mem::forget(std::mem::take(&mut self.spans));
            self.bytes = 0;
            self.pid = pid;
        }
        self
    }
}

impl Drop for RemoteStorage {
    fn drop(&mut self) {
        self.forget_prefetched();
    }
}

impl std::fmt::Debug for RemoteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStorage")
            .field("url", &self.url)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The process's runtime for requests: two worker threads (requests wait
/// on the network, not on the processor), started on first use, and again
/// in a forked child (the parent's threads do not exist there; the old
/// runtime is left alone, never dropped, since its threads cannot be
/// joined).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let mut held = RT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let pid = std::process::id();
    match *held {
        Some((owner, rt)) if owner == pid => rt,
        _ => {
            let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("loaderx-remote")
                    .enable_all()
                    .build()
                    .expect("the request runtime starts"),
            ));
            *held = Some((pid, rt));
            rt
        }
    }
}

static INTERRUPT: OnceLock<fn() -> bool> = OnceLock::new();

/// Sets the check a waiting read calls every 50 ms: when it returns true
/// the read stops with an error of kind [`io::ErrorKind::Interrupted`]
/// (the Python binding checks for Ctrl-C). Only the first call counts.
pub fn set_interrupt_check(check: fn() -> bool) {
    let _ = INTERRUPT.set(check);
}

/// The block cache `options` ask for, if any.
fn cache_of(_url: &str, options: &RemoteOptions) -> loaderx_store::Result<Option<BlockCache>> {
    let Some(dir) = &options.cache_dir else {
        return Ok(None);
    };
    BlockCache::new(dir, options.cache_bytes, options.cache_block_bytes)
        .map(Some)
        .map_err(|e| Error::Io {
            path: dir.clone(),
            op: "create the block cache directory",
            source: e,
        })
}

fn invalid(url: &str, argument: &'static str, reason: String) -> Error {
    Error::InvalidArgument {
        path: url.into(),
        argument,
        reason,
    }
}

impl RemoteStorage {
    /// Connects to the store at `url` with `storage_options` (loaderx's
    /// keys, see [`RemoteOptions`], and `object_store`'s for the scheme),
    /// credentials and endpoint otherwise from the standard environment
    /// variables, and lists its objects where the backend can.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a URL or key not understood;
    /// [`Error::Io`] naming the URL when the listing fails.
    pub fn open(url: &str, storage_options: &[(String, String)]) -> loaderx_store::Result<Self> {
        let mut remote = Self::connect(url, storage_options)?;
        remote.list_at_open()?;
        Ok(remote)
    }

    /// Lists the objects under the prefix where the backend can.
    fn list_at_open(&mut self) -> loaderx_store::Result<()> {
        if self.lists {
            self.listed = Some(self.list().map_err(|e| Error::Io {
                path: self.location.clone(),
                op: "list",
                source: e,
            })?);
        }
        Ok(())
    }

    /// [`open`](Self::open) without the listing: a client for `url` and
    /// the objects under it, none of them looked at yet.
    pub(crate) fn connect(
        url: &str,
        storage_options: &[(String, String)],
    ) -> loaderx_store::Result<Self> {
        let mut rest = storage_options.to_vec();
        let options =
            RemoteOptions::take(&mut rest).map_err(|r| invalid(url, "storage_options", r))?;
        let parsed =
            url::Url::parse(url).map_err(|e| invalid(url, "url", format!("not a URL ({e})")))?;
        let (scheme, path) = ObjectStoreScheme::parse(&parsed).map_err(|e| {
            invalid(
                url,
                "url",
                format!(
                    "not a store URL this build reads ({e}); use s3://, gs://, az://, abfs://, http(s):// or file://"
                ),
            )
        })?;
        let prefix = ObjectPath::parse(path)
            .map_err(|e| invalid(url, "url", format!("bad object path ({e})")))?;
        let lists = !matches!(scheme, ObjectStoreScheme::Http);
        let store = build(url, scheme, &rest, &options)?;
        let ahead = Arc::new(tokio::sync::Semaphore::new(options.concurrency));
        Ok(RemoteStorage {
            store,
            prefix,
            url: url.trim_end_matches('/').to_owned(),
            location: PathBuf::from(url.trim_end_matches('/')),
            cache: cache_of(url, &options)?,
            options,
            lists,
            listed: None,
            seen: Mutex::new(HashMap::new()),
            pages: Mutex::new(HashMap::new()),
            staged: Mutex::new(Staging::default()),
            ahead,
        })
    }

    /// The store under `self`'s prefix at `path` (`/`-separated names),
    /// over the same client and options, listed at open as `open` does.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name that is not a path segment;
    /// [`Error::Io`] when the listing fails.
    pub(crate) fn sub(&self, path: &str) -> loaderx_store::Result<Self> {
        let mut prefix = self.prefix.clone();
        for part in path.split('/') {
            let part = object_store::path::PathPart::parse(part)
                .map_err(|e| invalid(&self.url, "path", format!("{path:?}: {e}")))?;
            prefix = prefix.join(part);
        }
        let url = format!("{}/{path}", self.url);
        let mut remote = RemoteStorage {
            store: self.store.clone(),
            prefix,
            location: PathBuf::from(&url),
            cache: cache_of(&url, &self.options)?,
            url,
            options: self.options.clone(),
            lists: self.lists,
            listed: None,
            seen: Mutex::new(HashMap::new()),
            pages: Mutex::new(HashMap::new()),
            staged: Mutex::new(Staging::default()),
            // One bound on requests ahead per client.
            ahead: self.ahead.clone(),
        };
        remote.list_at_open()?;
        Ok(remote)
    }

    /// Over an `object_store` already built (tests use the in-memory one):
    /// the store's objects are those under `prefix`, named `url` in errors.
    ///
    /// # Errors
    /// [`Error::Io`] when the listing fails.
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        url: &str,
        options: RemoteOptions,
    ) -> loaderx_store::Result<Self> {
        let ahead = Arc::new(tokio::sync::Semaphore::new(options.concurrency));
        let mut remote = RemoteStorage {
            store,
            prefix: ObjectPath::from(prefix),
            url: url.to_owned(),
            location: PathBuf::from(url),
            cache: cache_of(url, &options)?,
            staged: Mutex::new(Staging::default()),
            ahead,
            options,
            lists: true,
            listed: None,
            seen: Mutex::new(HashMap::new()),
            pages: Mutex::new(HashMap::new()),
        };
        remote.list_at_open()?;
        Ok(remote)
    }

    /// The URL of the store.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Requests started ahead of their reads and not read yet, and the
    /// bytes they hold or will hold ([`Storage::prefetch`]).
    #[must_use]
    pub fn prefetched(&self) -> (usize, u64) {
        let mut held = self
            .staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let staging = held.in_this_process();
        (staging.spans.len(), staging.bytes)
    }

    /// Waits until every request started ahead has its answer (its bytes or
    /// its error), e.g. before timing reads that should find them.
    ///
    /// # Errors
    /// Interrupted (see [`set_interrupt_check`]).
    pub fn wait_prefetched(&self) -> io::Result<()> {
        let bodies: Vec<_> = {
            let mut held = self
                .staged
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let staging = held.in_this_process();
            staging.spans.values().map(|s| s.body.clone()).collect()
        };
        wait_for(&self.url, None, async move {
            futures::future::join_all(bodies).await;
            Ok(())
        })
    }

    /// The options in force.
    #[must_use]
    pub fn options(&self) -> &RemoteOptions {
        &self.options
    }

    /// The sizes and ETags of the objects directly under the prefix.
    fn list(&self) -> io::Result<HashMap<String, Seen>> {
        let store = self.store.clone();
        let prefix = self.prefix.clone();
        let listing = self.wait(&self.url, async move {
            store.list_with_delimiter(Some(&prefix)).await
        })?;
        Ok(listing
            .objects
            .into_iter()
            .filter_map(|m| {
                let name = m.location.filename()?.to_owned();
                Some((
                    name,
                    Seen {
                        size: m.size,
                        e_tag: m.e_tag.map(quoted),
                        version: m.version,
                    },
                ))
            })
            .collect())
    }

    fn object(&self, file: FileId) -> ObjectPath {
        self.prefix.clone().join(file.file_name())
    }

    fn object_url(&self, file: FileId) -> String {
        format!("{}/{}", self.url, file.file_name())
    }

    /// Runs `fut` on the runtime from this (non-runtime) thread, within
    /// the timeout and checking for interruption while it waits.
    fn wait<T: Send + 'static>(
        &self,
        what: &str,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> io::Result<T> {
        wait_for(what, Some(self.options.timeout), fut)
    }

    /// The `object_store` client and the store's prefix in it.
    pub(crate) fn client(&self) -> (Arc<dyn ObjectStore>, ObjectPath) {
        (self.store.clone(), self.prefix.clone())
    }

    /// Runs `fut` within the handle's timeout (`what` names it in errors).
    pub(crate) fn run<T: Send + 'static>(
        &self,
        what: &str,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> io::Result<T> {
        self.wait(what, fut)
    }

    /// Whether the listing at open found an object named `name`.
    pub(crate) fn listed(&self, name: &str) -> bool {
        self.listed.as_ref().is_some_and(|l| l.contains_key(name))
    }
}

/// Runs `fut` on the runtime from this (non-runtime) thread, within
/// `timeout` when given, checking for interruption while it waits.
pub(crate) fn wait_for<T: Send + 'static>(
    what: &str,
    timeout: Option<Duration>,
    fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
) -> io::Result<T> {
    {
        let timeout = timeout.unwrap_or(Duration::from_secs(u64::from(u32::MAX)));
        let what = what.to_owned();
        runtime().block_on(async move {
            let fut = tokio::time::timeout(timeout, fut);
            tokio::pin!(fut);
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    out = &mut fut => {
                        return match out {
                            Ok(Ok(v)) => Ok(v),
                            Ok(Err(e)) => Err(to_io(&what, e)),
                            Err(_) => Err(timed_out(&what, timeout)),
                        };
                    }
                    _ = tick.tick() => {
                        if INTERRUPT.get().is_some_and(|check| check()) {
                            return Err(io::Error::new(
                                io::ErrorKind::Interrupted,
                                format!("interrupted while waiting on {what}"),
                            ));
                        }
                    }
                }
            }
        })
    }
}

impl RemoteStorage {
    /// What was recorded of `file`, which the engine opened.
    fn seen(&self, file: FileId) -> io::Result<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&file)
            .cloned()
            .ok_or_else(|| io::Error::other(format!("{} is not open", self.object_url(file))))
    }

    /// Fetches `ranges` of objects, each `(file, byte range)`, merged and
    /// concurrently, every request conditional on the recorded ETag;
    /// returns one buffer per range, in order.
    fn fetch(&self, ranges: &[(FileId, Range<u64>)]) -> Result<Vec<Bytes>, (FileId, io::Error)> {
        if ranges.iter().any(|(_, r)| r.end <= r.start) {
            // Empty records need no request (and S3 refuses an empty range).
            let wanted: Vec<usize> = (0..ranges.len())
                .filter(|&i| ranges[i].1.end > ranges[i].1.start)
                .collect();
            let mut out = vec![Bytes::new(); ranges.len()];
            if !wanted.is_empty() {
                let sub: Vec<(FileId, Range<u64>)> =
                    wanted.iter().map(|&i| ranges[i].clone()).collect();
                for (i, bytes) in wanted.into_iter().zip(self.fetch(&sub)?) {
                    out[i] = bytes;
                }
            }
            return Ok(out);
        }
        let Some(cache) = &self.cache else {
            return self.fetch_network(ranges);
        };
        let b = cache.block;
        let mut keys: HashMap<FileId, (u64, u64)> = HashMap::new();
        for (file, r) in ranges {
            let seen = self.seen(*file).map_err(|e| (*file, e))?;
            if r.end > seen.size {
                // Past the end: the network path names the error.
                return self.fetch_network(ranges);
            }
            let tag = seen.e_tag.or(seen.version).unwrap_or_default();
            keys.insert(
                *file,
                (
                    object_key(&self.object_url(*file), &tag, seen.size),
                    seen.size,
                ),
            );
        }
        let mut need: Vec<(FileId, u64)> = ranges
            .iter()
            .filter(|(_, r)| r.end > r.start)
            .flat_map(|(f, r)| (r.start / b..=(r.end - 1) / b).map(move |i| (*f, i)))
            .collect();
        need.sort_unstable();
        need.dedup();
        let mut held: HashMap<(FileId, u64), Bytes> = HashMap::new();
        let mut missing: Vec<(FileId, Range<u64>)> = Vec::new();
        for (file, i) in need {
            let (key, size) = keys[&file];
            let len = b.min(size - i * b);
            match cache.get(key, i, len) {
                Some(bytes) => {
                    held.insert((file, i), Bytes::from(bytes));
                }
                None => missing.push((file, i * b..i * b + len)),
            }
        }
        if !missing.is_empty() {
            let got = self.fetch_network(&missing)?;
            for ((file, r), bytes) in missing.iter().zip(got) {
                cache.put(keys[file].0, r.start / b, &bytes);
                held.insert((*file, r.start / b), bytes);
            }
        }
        Ok(ranges
            .iter()
            .map(|(file, r)| {
                if r.end <= r.start {
                    return Bytes::new();
                }
                let (first, last) = (r.start / b, (r.end - 1) / b);
                if first == last {
                    let at = (r.start - first * b) as usize;
                    return held[&(*file, first)].slice(at..at + (r.end - r.start) as usize);
                }
                let mut out = Vec::with_capacity((r.end - r.start) as usize);
                for i in first..=last {
                    let block = &held[&(*file, i)];
                    let from = r.start.max(i * b) - i * b;
                    let to = r.end.min(i * b + block.len() as u64) - i * b;
                    out.extend_from_slice(&block[from as usize..to as usize]);
                }
                Bytes::from(out)
            })
            .collect())
    }

    /// The requests that fetch `ranges` ([`plan_requests`] with this
    /// store's options).
    fn plan(&self, ranges: &[(FileId, Range<u64>)]) -> Vec<(FileId, Range<u64>, Vec<usize>)> {
        plan_requests(
            ranges,
            self.options.coalesce_bytes,
            self.options.max_request_bytes,
        )
    }

    /// [`fetch`](Self::fetch) from the network only: the ranges a request
    /// started ahead holds come from it
    /// ([`hand_over_staged`](Self::hand_over_staged)), the rest are
    /// requested now, as are those whose request ahead failed.
    fn fetch_network(
        &self,
        ranges: &[(FileId, Range<u64>)],
    ) -> Result<Vec<Bytes>, (FileId, io::Error)> {
        let mut out = vec![Bytes::new(); ranges.len()];
        let rest = self.hand_over_staged(ranges, |start, members, body| {
            for &i in members {
                let r = &ranges[i].1;
                let at = (r.start - start) as usize;
                out[i] = body.slice(at..at + (r.end - r.start) as usize);
            }
        })?;
        if !rest.is_empty() {
            let wanted: Vec<(FileId, Range<u64>)> =
                rest.iter().map(|&i| ranges[i].clone()).collect();
            for (i, bytes) in rest.into_iter().zip(self.request(&wanted)?) {
                out[i] = bytes;
            }
        }
        Ok(out)
    }

    /// Hands over what the requests started ahead hold of `ranges`: waits
    /// for those that hold some of them (if still under way), and calls
    /// `on(its first byte, the positions in ranges it serves, its body)`
    /// for each that arrived, letting the body go after. Returns the
    /// positions left to request now: those no request ahead holds, and
    /// those whose request ahead failed (so the error reported is the
    /// read's own).
    fn hand_over_staged(
        &self,
        ranges: &[(FileId, Range<u64>)],
        mut on: impl FnMut(u64, &[usize], &Bytes),
    ) -> Result<Vec<usize>, (FileId, io::Error)> {
        let mut rest = Vec::new();
        let taken = self.take_staged(ranges, &mut rest);
        if taken.is_empty() {
            // Nothing staged: `take_staged` sorted nothing out.
            return Ok((0..ranges.len()).collect());
        }
        let bodies = futures::future::join_all(taken.iter().map(|(_, s, _)| s.body.clone()));
        let got = wait_for(&self.url, None, async move { Ok(bodies.await) })
            .map_err(|e| (ranges[0].0, e))?;
        for ((start, _, members), body) in taken.into_iter().zip(got) {
            match body {
                Ok(body) => on(start, &members, &body),
                Err(_) => rest.extend_from_slice(&members),
            }
        }
        Ok(rest)
    }

    /// Takes out of the staging the requests ahead that hold some of
    /// `ranges`, each with its first byte and the positions it serves; the
    /// positions of the others go to `rest`.
    fn take_staged(
        &self,
        ranges: &[(FileId, Range<u64>)],
        rest: &mut Vec<usize>,
    ) -> Vec<(u64, Staged, Vec<usize>)> {
        let mut held = self
            .staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let staging = held.in_this_process();
        if staging.spans.is_empty() {
            return Vec::new();
        }
        let mut used: BTreeMap<(FileId, u64), Vec<usize>> = BTreeMap::new();
        for (i, (file, r)) in ranges.iter().enumerate() {
            match staging.covering(*file, r) {
                Some(key) => used.entry(key).or_default().push(i),
                None => rest.push(i),
            }
        }
        used.into_iter()
            .filter_map(|(key, members)| {
                let staged = staging.spans.remove(&key)?;
                staging.bytes = staging.bytes.saturating_sub(staged.end - key.1);
                Some((key.1, staged, members))
            })
            .collect()
    }

    /// The blocks of `ranges` the block cache does not hold, as ranges
    /// (what [`fetch`](Self::fetch) asks the network for).
    fn uncached_blocks(
        &self,
        cache: &BlockCache,
        ranges: &[(FileId, Range<u64>)],
    ) -> Vec<(FileId, Range<u64>)> {
        let b = cache.block;
        let mut blocks: Vec<(FileId, u64, u64, u64)> = Vec::new();
        for (file, r) in ranges {
            let Ok(seen) = self.seen(*file) else { continue };
            if r.end > seen.size || r.end <= r.start {
                continue;
            }
            let tag = seen.e_tag.or(seen.version).unwrap_or_default();
            let key = object_key(&self.object_url(*file), &tag, seen.size);
            for i in r.start / b..=(r.end - 1) / b {
                blocks.push((*file, i, key, b.min(seen.size - i * b)));
            }
        }
        blocks.sort_unstable_by_key(|&(file, i, ..)| (file, i));
        blocks.dedup_by_key(|&mut (file, i, ..)| (file, i));
        blocks
            .into_iter()
            .filter(|&(_, i, key, len)| !cache.contains(key, i, len))
            .map(|(file, i, _, len)| (file, i * b..i * b + len))
            .collect()
    }

    /// Requests `ranges` now, merged and concurrently (see [`plan`](Self::plan)).
    fn request(&self, ranges: &[(FileId, Range<u64>)]) -> Result<Vec<Bytes>, (FileId, io::Error)> {
        let requests = self.plan(ranges);
        let mut tasks = Vec::with_capacity(requests.len());
        for (file, span, _) in &requests {
            let seen = self.seen(*file).map_err(|e| (*file, e))?;
            if span.end > seen.size {
                return Err((*file, past_end(&self.object_url(*file), span, seen.size)));
            }
            tasks.push((
                *file,
                self.object(*file),
                self.object_url(*file),
                span.clone(),
                seen,
            ));
        }
        let store = self.store.clone();
        let concurrency = self.options.concurrency;
        let timeout = self.options.timeout;
        let bodies: Vec<(FileId, Result<Bytes, io::Error>)> = {
            let work = stream::iter(tasks.into_iter().map(move |(file, path, url, span, seen)| {
                let store = store.clone();
                async move {
                    let got = tokio::time::timeout(timeout, get(&*store, &path, &url, span, &seen))
                        .await
                        .unwrap_or_else(|_| Err(timed_out(&url, timeout)));
                    (file, got)
                }
            }))
            .buffered(concurrency)
            .collect::<Vec<_>>();
            let what = self.url.clone();
            self.wait(&what, async move { Ok(work.await) })
                .map_err(|e| (requests.first().map_or(FileId::Meta, |r| r.0), e))?
        };
        let mut out = vec![Bytes::new(); ranges.len()];
        for ((file, span, members), (_, body)) in requests.iter().zip(bodies) {
            let body = body.map_err(|e| (*file, e))?;
            for &i in members {
                let r = &ranges[i].1;
                let at = (r.start - span.start) as usize;
                out[i] = body.slice(at..at + (r.end - r.start) as usize);
            }
        }
        Ok(out)
    }

    /// [`request`](Self::request), handing each request's ranges to `on`
    /// as its body arrives (`on(positions in ranges, their bytes)`, on this
    /// thread and outside the runtime), then letting the body go: at most
    /// `concurrency` bodies are held at a time (in flight or waiting to be
    /// handed over), never a whole batch's. Every request is checked
    /// before any goes out; each has the handle's timeout, and so has the
    /// wait for the next body. The first failure to arrive ends the wait
    /// (and aborts the requests still running).
    fn request_each(
        &self,
        ranges: &[(FileId, Range<u64>)],
        on: &mut loaderx_store::storage::OnFetched<'_>,
    ) -> Result<(), (FileId, io::Error)> {
        let requests = self.plan(ranges);
        let mut seen = Vec::with_capacity(requests.len());
        for (file, span, _) in &requests {
            let object = self.seen(*file).map_err(|e| (*file, e))?;
            if span.end > object.size {
                return Err((*file, past_end(&self.object_url(*file), span, object.size)));
            }
            seen.push(object);
        }
        let permits = Arc::new(tokio::sync::Semaphore::new(self.options.concurrency.max(1)));
        let timeout = self.options.timeout;
        let mut started = AbortOnDrop(Vec::with_capacity(requests.len()));
        let mut running = stream::FuturesUnordered::new();
        for (k, ((file, span, _), seen)) in requests.iter().zip(seen).enumerate() {
            let (store, path, url) = (
                self.store.clone(),
                self.object(*file),
                self.object_url(*file),
            );
            let (permits, span) = (permits.clone(), span.clone());
            // The permit goes back once the body is handed over, not when
            // it arrives: at most `concurrency` bodies are held at a time.
            let task = runtime().spawn(async move {
                let permit = permits
                    .acquire_owned()
                    .await
                    .map_err(|e| io::Error::other(e.to_string()))?;
                tokio::time::timeout(timeout, get(&*store, &path, &url, span, &seen))
                    .await
                    .unwrap_or_else(|_| Err(timed_out(&url, timeout)))
                    .map(|body| (body, permit))
            });
            started.0.push(task.abort_handle());
            running.push(task.map(move |joined| (k, joined)));
        }
        let first = requests.first().map_or(FileId::Meta, |r| r.0);
        let url = &self.url;
        loop {
            // The runtime only waits; the caller's work runs out of it.
            let next = runtime().block_on(async {
                let idle = tokio::time::sleep(timeout);
                tokio::pin!(idle);
                let mut tick = tokio::time::interval(Duration::from_millis(50));
                loop {
                    tokio::select! {
                        biased;
                        next = running.next() => return Ok(next),
                        () = &mut idle => return Err((first, timed_out(url, timeout))),
                        _ = tick.tick() => {
                            if INTERRUPT.get().is_some_and(|check| check()) {
                                return Err((
                                    first,
                                    io::Error::new(
                                        io::ErrorKind::Interrupted,
                                        format!("interrupted while waiting on {url}"),
                                    ),
                                ));
                            }
                        }
                    }
                }
            })?;
            let Some((k, joined)) = next else {
                return Ok(());
            };
            let (file, span, members) = &requests[k];
            let (body, _permit) = joined
                .map_err(|e| io::Error::other(e.to_string()))
                .and_then(|got| got)
                .map_err(|e| (*file, e))?;
            on(
                members,
                &member_slices(&body, span.start, members, |i| &ranges[i].1),
            );
        }
    }

    /// The bytes `range` of the table, from its pages (fetching those not
    /// held yet, all at once).
    fn table(&self, ranges: &[Range<u64>]) -> Result<Vec<Vec<u8>>, (FileId, io::Error)> {
        let page = self.options.table_page_bytes;
        let size = self.seen(FileId::Meta).map_err(|e| (FileId::Meta, e))?.size;
        let mut missing: Vec<u64> = {
            let pages = self
                .pages
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ranges
                .iter()
                .filter(|r| r.end > r.start)
                .flat_map(|r| r.start / page..=(r.end - 1) / page)
                .filter(|p| !pages.contains_key(p))
                .collect()
        };
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let wanted: Vec<(FileId, Range<u64>)> = missing
                .iter()
                .map(|&p| (FileId::Meta, p * page..((p + 1) * page).min(size)))
                .collect();
            let got = self.fetch(&wanted)?;
            let mut pages = self
                .pages
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (p, bytes) in missing.into_iter().zip(got) {
                pages.insert(p, bytes);
            }
        }
        let pages = self
            .pages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ranges
            .iter()
            .map(|r| {
                let mut buf = Vec::with_capacity((r.end - r.start) as usize);
                let mut at = r.start;
                while at < r.end {
                    let p = at / page;
                    let bytes = pages.get(&p).ok_or_else(|| {
                        (
                            FileId::Meta,
                            io::Error::other("a table page was not fetched"),
                        )
                    })?;
                    let from = (at - p * page) as usize;
                    let to = (r.end.min((p + 1) * page) - p * page) as usize;
                    let chunk = bytes.get(from..to).ok_or_else(|| {
                        (
                            FileId::Meta,
                            io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                format!("{}: short table page", self.object_url(FileId::Meta)),
                            ),
                        )
                    })?;
                    buf.extend_from_slice(chunk);
                    at += chunk.len() as u64;
                }
                Ok(buf)
            })
            .collect()
    }

    /// The table's ranges of `ranges` (from its pages) and the records'
    /// (as they arrived), each in the order given.
    fn fetch_split(&self, ranges: &[(FileId, u64, usize)]) -> Result<Split, (FileId, io::Error)> {
        let span = |&(_, offset, len): &(FileId, u64, usize)| offset..offset + len as u64;
        let table: Vec<Range<u64>> = ranges
            .iter()
            .filter(|r| r.0 == FileId::Meta)
            .map(span)
            .collect();
        let records: Vec<(FileId, Range<u64>)> = ranges
            .iter()
            .filter(|r| r.0 != FileId::Meta)
            .map(|r| (r.0, span(r)))
            .collect();
        Ok((self.table(&table)?, self.fetch(&records)?))
    }

    fn head(&self, file: FileId) -> io::Result<Option<Seen>> {
        if let Some(listed) = &self.listed {
            return Ok(listed.get(&file.file_name()).cloned());
        }
        let store = self.store.clone();
        let path = self.object(file);
        let url = self.object_url(file);
        match runtime_head(self, &url, store, path) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn runtime_head(
    remote: &RemoteStorage,
    url: &str,
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
) -> io::Result<Seen> {
    let meta = remote.wait(url, async move { store.head(&path).await })?;
    Ok(Seen {
        size: meta.size,
        e_tag: meta.e_tag.map(quoted),
        version: meta.version,
    })
}

/// The slices of `body` (the bytes from `start` on) that `members` asked
/// for, `range(m)` being member `m`'s byte range.
fn member_slices<'b, 'r>(
    body: &'b [u8],
    start: u64,
    members: &[usize],
    range: impl Fn(usize) -> &'r Range<u64>,
) -> Vec<&'b [u8]> {
    members
        .iter()
        .map(|&m| {
            let r = range(m);
            let at = (r.start - start) as usize;
            &body[at..at + (r.end - r.start) as usize]
        })
        .collect()
}

/// The error of a request for bytes past the end an object had when
/// opened.
fn past_end(url: &str, span: &Range<u64>, size: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "{url}: bytes {}..{} are past its end ({size} bytes when opened)",
            span.start, span.end
        ),
    )
}

/// Aborts the tasks it holds when dropped: requests a failed or
/// interrupted wait no longer wants.
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// One conditional ranged GET: the bytes `span` of the object at `path`,
/// refused (an error naming `url`) when its ETag or version is no longer
/// the one recorded or it comes back short.
async fn get(
    store: &dyn ObjectStore,
    path: &ObjectPath,
    url: &str,
    span: Range<u64>,
    seen: &Seen,
) -> io::Result<Bytes> {
    let options = GetOptions {
        if_match: seen.e_tag.clone(),
        version: if seen.e_tag.is_none() {
            seen.version.clone()
        } else {
            None
        },
        range: Some(GetRange::Bounded(span.clone())),
        ..GetOptions::default()
    };
    let result = store
        .get_opts(path, options)
        .await
        .map_err(|e| to_io(url, e))?;
    if let (Some(want), Some(got)) = (&seen.e_tag, result.meta.e_tag.clone().map(quoted))
        && *want != got
    {
        return Err(changed(url, &format!("its ETag is now {got}, was {want}")));
    }
    if result.meta.size != seen.size {
        return Err(changed(
            url,
            &format!("it is now {} bytes, was {}", result.meta.size, seen.size),
        ));
    }
    let bytes = result.bytes().await.map_err(|e| to_io(url, e))?;
    let want = span.end - span.start;
    if bytes.len() as u64 != want {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{url}: got {} bytes of the {want} asked for (bytes {}..{})",
                bytes.len(),
                span.start,
                span.end
            ),
        ));
    }
    Ok(bytes)
}

/// An ETag in its quoted HTTP form: listings of some backends (Azure) give
/// it bare where responses' headers quote it; `If-Match` wants it quoted.
fn quoted(tag: String) -> String {
    if tag.starts_with('"') || tag.starts_with("W/") {
        tag
    } else {
        format!("\"{tag}\"")
    }
}

fn changed(url: &str, how: &str) -> io::Error {
    io::Error::other(format!(
        "{url} changed since the store was opened ({how}); reopen the store to read the new version"
    ))
}

fn timed_out(what: &str, timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "{what}: no complete answer within the timeout of {:.3} s (storage option `timeout`)",
            timeout.as_secs_f64()
        ),
    )
}

/// An `object_store` error as an I/O error naming `url`.
fn to_io(url: &str, e: object_store::Error) -> io::Error {
    match e {
        object_store::Error::NotFound { .. } => io::Error::new(
            io::ErrorKind::NotFound,
            format!("{url}: no such object (deleted since the store was opened?)"),
        ),
        object_store::Error::Precondition { .. } => changed(url, "its ETag no longer matches"),
        object_store::Error::PermissionDenied { source, .. }
        | object_store::Error::Unauthenticated { source, .. } => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{url}: access refused: {source}"),
        ),
        other => {
            let text = chain(&other);
            if text.contains("timed out") {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{url}: no complete answer within the timeout (storage option `timeout`): {text}"
                    ),
                )
            } else {
                io::Error::other(format!("{url}: {text}"))
            }
        }
    }
}

/// An error with its sources, the way a user needs them to see the cause
/// (a refused connection, a DNS or TLS failure).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

/// Builds the `object_store` client for `scheme`, environment first, then
/// `options` (keys of that backend; an unknown one is an error naming it).
fn build(
    url: &str,
    scheme: ObjectStoreScheme,
    options: &[(String, String)],
    ours: &RemoteOptions,
) -> loaderx_store::Result<Arc<dyn ObjectStore>> {
    let unknown = |key: &str, backend: &str| {
        invalid(
            url,
            "storage_options",
            format!(
                "unknown key {key:?}: not one of loaderx's ({}) nor a {backend} configuration key of object_store",
                crate::options::OWN_KEYS.join(", ")
            ),
        )
    };
    let failed = |e: object_store::Error| invalid(url, "url", chain(&e));
    let retry = RetryConfig {
        max_retries: ours.max_retries,
        retry_timeout: ours.timeout,
        backoff: object_store::BackoffConfig {
            init_backoff: ours.retry_backoff,
            max_backoff: Duration::from_secs(15),
            base: 2.,
        },
    };
    let ms = |d: Duration| format!("{}ms", d.as_millis().max(1));
    let timeouts = [
        (ClientConfigKey::Timeout, ms(ours.timeout)),
        (ClientConfigKey::ConnectTimeout, ms(ours.connect_timeout)),
    ];
    // Every backend's builder takes the same steps: retry policy, our two
    // timeouts as client keys, then the caller's keys parsed as that
    // backend's configuration keys.
    macro_rules! configured {
        ($builder:expr, $key:ty, $client:expr, $backend:literal) => {{
            let mut b = $builder.with_retry(retry);
            for (k, v) in timeouts {
                b = b.with_config($client(k), v);
            }
            for (k, v) in options {
                let key: $key = k
                    .to_ascii_lowercase()
                    .parse()
                    .map_err(|_| unknown(k, $backend))?;
                b = b.with_config(key, v.clone());
            }
            Arc::new(b.build().map_err(failed)?)
        }};
    }
    let store: Arc<dyn ObjectStore> = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
            configured!(
                AmazonS3Builder::from_env().with_url(url),
                AmazonS3ConfigKey,
                AmazonS3ConfigKey::Client,
                "S3"
            )
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
            configured!(
                GoogleCloudStorageBuilder::from_env().with_url(url),
                GoogleConfigKey,
                GoogleConfigKey::Client,
                "GCS"
            )
        }
        ObjectStoreScheme::MicrosoftAzure => {
            use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
            configured!(
                MicrosoftAzureBuilder::from_env().with_url(url),
                AzureConfigKey,
                AzureConfigKey::Client,
                "Azure"
            )
        }
        ObjectStoreScheme::Http => {
            let parsed = url::Url::parse(url).map_err(|e| invalid(url, "url", e.to_string()))?;
            let base = format!("{}://{}", parsed.scheme(), parsed.authority());
            configured!(
                object_store::http::HttpBuilder::new().with_url(base),
                ClientConfigKey,
                std::convert::identity,
                "HTTP client"
            )
        }
        ObjectStoreScheme::Local => {
            if let Some((k, _)) = options.first() {
                return Err(unknown(k, "file://"));
            }
            Arc::new(object_store::local::LocalFileSystem::new())
        }
        other => {
            return Err(invalid(
                url,
                "url",
                format!("{other:?} stores are not read by URL"),
            ));
        }
    };
    Ok(store)
}

impl Storage for RemoteStorage {
    fn location(&self) -> &Path {
        &self.location
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn open_file(&self, file: FileId, create: bool, _create_len: u64) -> io::Result<Option<u64>> {
        if let Some(seen) = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&file)
        {
            return Ok(Some(seen.size));
        }
        match self.head(file)? {
            Some(seen) => {
                let size = seen.size;
                self.seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(file, seen);
                Ok(Some(size))
            }
            None if create => Err(read_only_error()),
            None => Ok(None),
        }
    }

    /// The size recorded when the object was first seen: every read is
    /// conditional on it not having changed since.
    fn current_len(&self, file: FileId) -> io::Result<u64> {
        Ok(self.seen(file)?.size)
    }

    fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let mut got = self
            .fetch_many(&[(file, offset, len)])
            .map_err(|(_, e)| e)?;
        Ok(f(&got.pop().unwrap_or_default()))
    }

    /// The bytes as they arrived (records) or as the table's pages hold
    /// them: no copy of a record's bytes.
    fn with_many_bytes<R>(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, (FileId, io::Error)> {
        let (table, records) = self.fetch_split(ranges)?;
        let (mut table, mut records) = (table.iter(), records.iter());
        let slices: Vec<&[u8]> = ranges
            .iter()
            .map(|r| {
                if r.0 == FileId::Meta {
                    table.next().map_or(&[][..], Vec::as_slice)
                } else {
                    records.next().map_or(&[][..], |b| &b[..])
                }
            })
            .collect();
        Ok(f(&slices))
    }

    /// Records straight from the network are handed over request by
    /// request as they arrive (those a loader's lookahead holds first);
    /// anything else (table ranges, a block cache) all at once.
    fn with_bytes_as_fetched(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: &mut loaderx_store::storage::OnFetched<'_>,
    ) -> Result<(), (FileId, io::Error)> {
        if self.cache.is_some() || ranges.iter().any(|r| r.0 == FileId::Meta) {
            return self.with_many_bytes(ranges, |all| {
                let positions: Vec<usize> = (0..all.len()).collect();
                f(&positions, all);
            });
        }
        // Empty records need no request (and S3 refuses an empty range).
        let (empty, wanted): (Vec<usize>, Vec<usize>) =
            (0..ranges.len()).partition(|&i| ranges[i].2 == 0);
        if !empty.is_empty() {
            f(&empty, &vec![&[][..]; empty.len()]);
        }
        let wanted_ranges: Vec<(FileId, Range<u64>)> = wanted
            .iter()
            .map(|&i| {
                let (file, offset, len) = ranges[i];
                (file, offset..offset + len as u64)
            })
            .collect();
        // What the lookahead holds, then the rest from the network.
        let rest = self.hand_over_staged(&wanted_ranges, |start, members, body| {
            let slices = member_slices(body, start, members, |m| &wanted_ranges[m].1);
            let positions: Vec<usize> = members.iter().map(|&m| wanted[m]).collect();
            f(&positions, &slices);
        })?;
        if rest.is_empty() {
            return Ok(());
        }
        let asked: Vec<(FileId, Range<u64>)> =
            rest.iter().map(|&m| wanted_ranges[m].clone()).collect();
        self.request_each(&asked, &mut |members, bytes| {
            let positions: Vec<usize> = members.iter().map(|&k| wanted[rest[k]]).collect();
            f(&positions, bytes);
        })
    }

    fn fetches(&self) -> bool {
        true
    }

    fn prefetch(&self, ranges: &[(FileId, u64, usize)]) {
        let bound = self.options.lookahead_bytes;
        if bound == 0 {
            return;
        }
        let mut wanted: Vec<(FileId, Range<u64>)> = ranges
            .iter()
            .filter(|r| r.0 != FileId::Meta && r.2 > 0)
            .map(|&(file, offset, len)| (file, offset..offset + len as u64))
            .collect();
        if let Some(cache) = &self.cache {
            wanted = self.uncached_blocks(cache, &wanted);
        }
        let mut held = self
            .staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let staging = held.in_this_process();
        wanted.retain(|(file, r)| staging.covering(*file, r).is_none());
        for (file, span, _) in self.plan(&wanted) {
            let len = span.end - span.start;
            if staging.bytes + len > bound {
                break;
            }
            let Ok(seen) = self.seen(file) else { continue };
            if span.end > seen.size || staging.spans.contains_key(&(file, span.start)) {
                continue;
            }
            let (store, path, url) = (self.store.clone(), self.object(file), self.object_url(file));
            let (timeout, permits, start, end) = (
                self.options.timeout,
                self.ahead.clone(),
                span.start,
                span.end,
            );
            let task = runtime().spawn(async move {
                let _permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
                tokio::time::timeout(timeout, get(&*store, &path, &url, start..end, &seen))
                    .await
                    .unwrap_or_else(|_| Err(timed_out(&url, timeout)))
                    .map_err(|e| e.to_string())
            });
            let abort = task.abort_handle();
            let body = task
                .map(|joined| joined.unwrap_or_else(|e| Err(e.to_string())))
                .boxed()
                .shared();
            staging.bytes += len;
            staging
                .spans
                .insert((file, start), Staged { end, body, abort });
        }
    }

    fn forget_prefetched(&self) {
        let mut held = self
            .staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let staging = held.in_this_process();
        for staged in std::mem::take(&mut staging.spans).into_values() {
            staged.abort.abort();
        }
        staging.bytes = 0;
    }

    fn fetch_many(
        &self,
        ranges: &[(FileId, u64, usize)],
    ) -> Result<Vec<Vec<u8>>, (FileId, io::Error)> {
        let (table, records) = self.fetch_split(ranges)?;
        let (mut table, mut records) = (table.into_iter(), records.into_iter());
        Ok(ranges
            .iter()
            .map(|r| {
                if r.0 == FileId::Meta {
                    table.next().unwrap_or_default()
                } else {
                    records.next().map(|b| b.to_vec()).unwrap_or_default()
                }
            })
            .collect())
    }

    fn write_at(&self, _file: FileId, _offset: u64, _bytes: &[u8]) -> io::Result<()> {
        Err(read_only_error())
    }

    fn sync(&self, _file: FileId) -> io::Result<()> {
        Err(read_only_error())
    }

    fn sync_dir(&self) -> io::Result<()> {
        Err(read_only_error())
    }

    fn create_meta(&self, _head: &[u8], _len: u64) -> io::Result<bool> {
        Err(read_only_error())
    }

    fn truncate(&mut self, _file: FileId, _len: u64) -> io::Result<()> {
        Err(read_only_error())
    }

    fn remove(&mut self, _file: FileId) -> io::Result<()> {
        Err(read_only_error())
    }

    fn exists(&self, file: FileId) -> io::Result<bool> {
        if self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(&file)
        {
            return Ok(true);
        }
        Ok(self.head(file)?.is_some())
    }

    fn chunk_ids(&self) -> io::Result<Vec<u32>> {
        let names: Vec<String> = match &self.listed {
            Some(listed) => listed.keys().cloned().collect(),
            None => self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .keys()
                .map(|f| f.file_name())
                .collect(),
        };
        let mut ids: Vec<u32> = names
            .iter()
            .filter_map(|n| n.strip_suffix(".zr")?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }
}

/// The requests that fetch `ranges`: sorted by object and offset,
/// neighbours merged; each with the positions of the ranges it serves.
///
/// A range joins the request before it when both are of one object, the
/// gap between them is at most `coalesce` bytes, the request stays within
/// `max_request` bytes, and the bytes it fetches that nobody asked for
/// (its gaps) stay at most the bytes asked for. The last rule keeps a
/// request of large sparse records from fetching several times what it
/// needs (147 KiB records 1 MiB apart merged by the gap rule alone fetch
/// about 8 bytes per byte wanted); fetched bytes cost bandwidth, and
/// memory until the gather that wanted them has decoded them.
pub(crate) fn plan_requests(
    ranges: &[(FileId, Range<u64>)],
    coalesce: u64,
    max_request: u64,
) -> Vec<(FileId, Range<u64>, Vec<usize>)> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_unstable_by_key(|&i| (ranges[i].0, ranges[i].1.start));
    // Each request with the bytes of it asked for and of its gaps.
    let mut requests: Vec<(FileId, Range<u64>, Vec<usize>)> = Vec::new();
    let (mut wanted, mut gaps) = (0u64, 0u64);
    for i in order {
        let (file, r) = &ranges[i];
        if let Some((f, span, members)) = requests.last_mut()
            && f == file
        {
            let gap = r.start.saturating_sub(span.end);
            let added = r.end.saturating_sub(r.start.max(span.end));
            if gap <= coalesce
                && r.end.max(span.end) - span.start <= max_request
                && gaps + gap <= wanted + added
            {
                span.end = span.end.max(r.end);
                members.push(i);
                wanted += added;
                gaps += gap;
                continue;
            }
        }
        requests.push((*file, r.clone(), vec![i]));
        (wanted, gaps) = (r.end - r.start, 0);
    }
    requests
}

#[cfg(test)]
mod tests {
    use super::plan_requests;
    use loaderx_store::storage::FileId;

    fn spans(ranges: &[(FileId, std::ops::Range<u64>)]) -> Vec<(u64, u64, usize)> {
        plan_requests(ranges, 1 << 20, 16 << 20)
            .into_iter()
            .map(|(_, r, members)| (r.start, r.end, members.len()))
            .collect()
    }

    #[test]
    fn neighbours_merge_and_sparse_large_records_do_not() {
        let c = FileId::Chunk(0);
        const R: u64 = 150_000;
        // Adjacent records and a small gap: one request.
        assert_eq!(
            spans(&[(c, 0..R), (c, R..2 * R), (c, 2 * R + 100..3 * R)]),
            vec![(0, 3 * R, 3)]
        );
        // Records 1 MiB apart: within the gap rule, but each request would
        // fetch about 8 bytes per byte wanted: one request each.
        let far: Vec<_> = (0..4u64)
            .map(|k| (c, k * (R + (1 << 20))..k * (R + (1 << 20)) + R))
            .collect();
        assert_eq!(spans(&far).len(), 4);
        // Small records with gaps as large as themselves do merge; gaps past
        // the records' own bytes start a new request.
        assert_eq!(
            spans(&[(c, 0..100), (c, 200..300), (c, 400..500)]),
            vec![(0, 500, 3)]
        );
        assert_eq!(spans(&[(c, 0..100), (c, 350..450)]).len(), 2);
        // Duplicates and overlaps count once, in order of the object.
        assert_eq!(
            spans(&[(c, R..2 * R), (c, 0..R), (c, 0..R), (FileId::Meta, 0..8)]),
            vec![(0, 8, 1), (0, 2 * R, 3)]
        );
    }
}
