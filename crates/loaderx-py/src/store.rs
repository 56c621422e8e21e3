//! `loaderx._native.Store`: one open store, shared by any number of Python
//! threads.
//!
//! `Store(path)` opens (or creates) a byte store for `Zrecord`/`Dataset`;
//! `Store.create_typed` and `Store.open_existing` make the handles of the
//! typed containers (`Dense`/`Ragged`, format v2), whose schema, reads and
//! appends live in module `typed`; the methods here only borrow the NumPy
//! arguments, take the lock and release the GIL.
//!
//! The engine sits in an `RwLock`: gathers, appends, lengths, stats and sync
//! take it shared (the engine itself lets them run concurrently), while
//! `delete`, `compact` and `close` take it exclusively, so they wait for the
//! gathers in flight instead of moving records under them. Every lock is
//! taken with the GIL released, and every call that touches the store runs
//! entirely with the GIL released. The engine and its lock live in a
//! [`Handle`] that native loaders share, so their workers gather through the
//! same lock (and see a closed store as an I/O error).
//!
//! After `fork()` the child inherits the lock word but not the threads that
//! held it: a gather in flight in the parent at that moment would look like a
//! reader that never leaves. So in a forked child the exclusive operations
//! only try the lock: `close` then just stops using the store (the process
//! keeps the mapping until it exits), and `delete`/`compact` fail with an
//! I/O error ([`ErrorCode::Io`]) instead of hanging.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, TryLockError};

use loaderx_loader::Source;
use loaderx_store::{CodecId, ErrorCode, OpenOptions};
use numpy::{
    PyArray1, PyArrayDescr, PyArrayDescrMethods, PyArrayMethods, PyReadonlyArray1,
    PyReadwriteArray1, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyFileExistsError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::arrays;
use crate::errors::{closed, not_contiguous, store_error, zrecord_error};
use crate::indices::{self, Resolved, Selection};
use crate::pool::{Output, OutputKind, OutputPool, SharedPool, output_pool};
use crate::typed::{self, Engine};
use crate::writer::Behind;

/// The largest gather (in output bytes) of a local raw store run with the
/// GIL held ([`Handle::selected_inline`]): a serial copy of this size costs
/// about what releasing and retaking the GIL does (docs/ARCHITECTURE.md,
/// "The GIL").
const INLINE_GATHER_BYTES: usize = 64 << 10;

#[pyclass(module = "loaderx._native", name = "Store", frozen)]
pub(crate) struct Store {
    handle: Arc<Handle>,
    /// Recycled buffers for this handle's large direct reads (`pool::Output`).
    outputs: SharedPool,
    /// The write behind the last append, if any (module `writer`).
    behind: Behind,
    /// `"Dense"` or `"Ragged"` for a writer made by `create_typed`: a child
    /// forked from its process may not write through it.
    writer: Option<&'static str>,
}

/// The open engine and its lock; shared with the loaders reading it.
pub(crate) struct Handle {
    path: String,
    opened_by: u32,
    closed: AtomicBool,
    engine: RwLock<Option<Engine>>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("path", &self.path)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// Runs `f` under the shared lock (the caller has released the GIL), or
    /// reports a closed store as an I/O error: loader workers see that.
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&Engine) -> loaderx_store::Result<T>,
    ) -> loaderx_store::Result<T> {
        let guard = self.read_guard()?;
        match guard.as_ref() {
            Some(engine) => f(engine),
            None => Err(loaderx_store::Error::Io {
                path: PathBuf::from(&self.path),
                op: "read from",
                source: io::Error::other("the store was closed"),
            }),
        }
    }
}

/// Loader workers gather through the same lock as Python callers, so a
/// `delete` or `close` waits for their gathers too.
impl Source for Handle {
    fn len(&self) -> u64 {
        self.read(|engine| Ok(engine.len())).unwrap_or(0)
    }

    fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> loaderx_store::Result<()> {
        self.read(|engine| engine.gather(idxs, dst, stride))
    }

    fn gather_exact(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        item_len: usize,
    ) -> loaderx_store::Result<()> {
        self.read(|engine| engine.gather_exact(idxs, dst, item_len))
    }

    fn gather_ragged(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        offsets: &[u64],
    ) -> loaderx_store::Result<()> {
        self.read(|engine| engine.gather_ragged(idxs, dst, offsets))
    }

    fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> loaderx_store::Result<()> {
        self.read(|engine| engine.lengths(idxs, out))
    }

    fn prefetch(&self, idxs: &[u64]) {
        // A hint: a closed store or a failed read is the gather's to report.
        let _ = self.read(|engine| engine.prefetch(idxs));
    }

    fn forget_prefetched(&self) {
        let _ = self.read(|engine| {
            engine.forget_prefetched();
            Ok(())
        });
    }

    /// One shared lock for the sizes and the bytes of a ragged batch.
    fn with_view(
        &self,
        f: &mut dyn FnMut(&dyn Source) -> loaderx_store::Result<()>,
    ) -> loaderx_store::Result<()> {
        self.read(|engine| f(engine))
    }
}

fn codec_id(name: &str) -> PyResult<CodecId> {
    CodecId::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = CodecId::ALL.iter().map(|c| c.name()).collect();
        PyValueError::new_err(format!("unknown codec {name:?}, expected one of {known:?}"))
    })
}

/// Record lengths as the engine takes them; a length past `u32` is over the
/// record limit whatever it is.
fn record_lens(lens: &[u64]) -> loaderx_store::Result<Vec<u32>> {
    let mut out: Vec<u32> = Vec::new();
    out.try_reserve_exact(lens.len())
        .map_err(|_| loaderx_store::Error::OutOfMemory {
            bytes: (lens.len() * std::mem::size_of::<u32>()) as u64,
        })?;
    for (position, &len) in lens.iter().enumerate() {
        out.push(
            u32::try_from(len).map_err(|_| loaderx_store::Error::RecordSize {
                position,
                len,
                limit: loaderx_store::MAX_RECORD_LEN,
            })?,
        );
    }
    Ok(out)
}

impl Store {
    /// The shared handle, for building loaders over this store.
    pub(crate) fn handle(&self) -> Arc<Handle> {
        Arc::clone(&self.handle)
    }
}

impl Handle {
    pub(crate) fn forked(&self) -> bool {
        std::process::id() != self.opened_by
    }

    /// Runs `f` on the engine under the shared lock, with the GIL released.
    fn shared<T, F>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&Engine) -> loaderx_store::Result<T> + Send,
    {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, &self.path));
        }
        let outcome = py.detach(|| {
            let guard = self.read_guard()?;
            Ok(guard.as_ref().map(f))
        });
        match outcome {
            Err(err) => Err(store_error(py, err)),
            Ok(None) => Err(closed(py, &self.path)),
            Ok(Some(result)) => result.map_err(|err| store_error(py, err)),
        }
    }

    /// The engine under the shared lock. In a forked child the lock's state
    /// is the parent's at the fork: a thread that stayed there may have held
    /// it or been waiting for it, and would never let go, so the child
    /// only tries (briefly, for a thread of its own closing the store), and
    /// then reports the handle unusable rather than wait forever.
    fn read_guard(&self) -> loaderx_store::Result<RwLockReadGuard<'_, Option<Engine>>> {
        // Uncontended, which is the rule, without asking for the process id.
        match self.engine.try_read() {
            Ok(guard) => return Ok(guard),
            Err(TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => {}
        }
        if !self.forked() {
            return Ok(self.engine.read().unwrap_or_else(PoisonError::into_inner));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(200);
        loop {
            match self.engine.try_read() {
                Ok(guard) => return Ok(guard),
                Err(TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
                Err(TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(loaderx_store::Error::Locked {
                        path: PathBuf::from(&self.path),
                        holder: "another thread of the process this one was forked from was \
                                 closing, deleting from or compacting the store at the fork, \
                                 so the handle inherited here cannot be used (open the store \
                                 again in this process)"
                            .to_owned(),
                    });
                }
            }
        }
    }

    /// Runs `f` on the engine and the records `selection` picks (resolved
    /// against the store's length under the same shared lock), with the GIL
    /// released; a selection that picks nothing raises its refusal.
    fn selected<T, F>(&self, py: Python<'_>, selection: Selection, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&Engine, Resolved) -> loaderx_store::Result<T> + Send,
    {
        let path = self.path.as_str();
        self.shared(py, |engine| match selection.resolve(engine.len(), path) {
            Ok(resolved) => f(engine, resolved).map(Ok),
            Err(refusal) => Ok(Err(refusal)),
        })?
        .map_err(|refusal| refusal.into_err(py))
    }

    /// [`selected`](Self::selected) for a gather of at most
    /// [`INLINE_GATHER_BYTES`]: run on the calling thread with the GIL held
    /// when the store is local and raw (a copy, no decode) and its shared
    /// lock is free now. Releasing and retaking the GIL costs about as much
    /// as such a copy, and with another Python thread waiting it can hand
    /// the GIL over for a whole switch interval. Anything else (a writer
    /// holding the lock, a compressed store, a remote one, whose reads wait
    /// on the network) goes through `selected`.
    fn selected_inline<T, F>(&self, py: Python<'_>, selection: Selection, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&Engine, Resolved) -> loaderx_store::Result<T> + Send,
    {
        if !self.closed.load(Ordering::Acquire)
            && let Ok(guard) = self.engine.try_read()
            && let Some(engine) = guard.as_ref()
            && engine.storage().remote().is_none()
            && engine
                .schema()
                .is_some_and(|schema| schema.codec == loaderx_store::format::CodecTag::RAW)
        {
            let outcome = match selection.resolve(engine.len(), &self.path) {
                Ok(resolved) => f(engine, resolved).map(Ok),
                Err(refusal) => Ok(Err(refusal)),
            };
            drop(guard);
            return outcome
                .map_err(|err| store_error(py, err))?
                .map_err(|refusal| refusal.into_err(py));
        }
        self.selected(py, selection, f)
    }

    /// Runs `f` on the engine under the exclusive lock, with the GIL released.
    fn exclusive<T, F>(&self, py: Python<'_>, op: &str, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&mut Engine) -> loaderx_store::Result<T> + Send,
    {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, &self.path));
        }
        let forked = self.forked();
        let outcome = py.detach(|| {
            let mut guard = if forked {
                match self.engine.try_write() {
                    Ok(guard) => guard,
                    Err(TryLockError::Poisoned(p)) => p.into_inner(),
                    Err(TryLockError::WouldBlock) => return Err(()),
                }
            } else {
                self.engine.write().unwrap_or_else(PoisonError::into_inner)
            };
            Ok(guard.as_mut().map(f))
        });
        match outcome {
            Err(()) => Err(zrecord_error(
                py,
                ErrorCode::Io,
                format!(
                    "cannot {op} {}: the store is in use by another thread of this forked \
                     process, or was in use in the parent when it forked",
                    self.path
                ),
            )),
            Ok(None) => Err(closed(py, &self.path)),
            Ok(Some(result)) => result.map_err(|err| store_error(py, err)),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let forked = self.handle.forked();
        self.behind.finish(forked);
    }
}

impl Handle {
    /// The path the store was opened at, as given.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// `ClosedError` once `close` was called.
    pub(crate) fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, &self.path));
        }
        Ok(())
    }
}

impl Store {
    /// Waits for the write behind the last append (raising its error), after
    /// refusing `op` in a child forked from the process that created this
    /// writer.
    fn settled(&self, py: Python<'_>, op: Option<&str>) -> PyResult<()> {
        if let (Some(op), Some(kind)) = (op, self.writer)
            && self.handle.forked()
        {
            return Err(zrecord_error(
                py,
                ErrorCode::Io,
                format!(
                    "cannot {op} {} in process {}: this {kind} writer was created in \
                         process {}, and a child forked from there cannot write behind its \
                         parent's back (the parent's appends, some perhaps still being \
                         written at the fork, are the parent's); append through the parent's \
                         writer",
                    self.handle.path,
                    std::process::id(),
                    self.handle.opened_by
                ),
            ));
        }
        self.behind.settle(py, &self.handle)
    }

    fn wrap(path: &std::path::Path, engine: Engine) -> Store {
        Store {
            handle: Arc::new(Handle {
                path: path.display().to_string(),
                opened_by: std::process::id(),
                closed: AtomicBool::new(false),
                engine: RwLock::new(Some(engine)),
            }),
            outputs: output_pool(),
            behind: Behind::default(),
            writer: None,
        }
    }

    /// Creates a format v2 store of `schema` at `path` (GIL released);
    /// `FileExistsError` when `path` already holds a store, `ValueError`
    /// naming the argument that breaks a rule.
    ///
    /// Bytes and dense stores get a run table (`docs/FORMAT.md` §9.5), so
    /// small fixed-size records cost little more than their bytes; ragged
    /// stores (which a run table cannot describe) and image stores (whose
    /// records are compressed files, never runs) keep one entry per record.
    fn create_v2(
        py: Python<'_>,
        path: &std::path::Path,
        schema: &loaderx_store::format::v2::Schema,
        options: OpenOptions,
    ) -> PyResult<Store> {
        use loaderx_store::format::v2::Kind;
        let runs = schema.kind != Kind::Ragged && !schema.codec.is_image();
        let engine = py
            .detach(|| {
                let local = loaderx_remote::AnyStorage::Local;
                if runs {
                    Engine::create_v2_runs_path_in(path, schema, options, local)
                } else {
                    Engine::create_v2_path_in(path, schema, options, local)
                }
            })
            .map_err(|err| match err {
                loaderx_store::Error::Exists { .. } => PyFileExistsError::new_err(err.to_string()),
                // A bad argument, named: what Python raises for one.
                loaderx_store::Error::InvalidArgument { .. } => {
                    PyValueError::new_err(err.to_string())
                }
                err => store_error(py, err),
            })?;
        Ok(Store::wrap(path, engine))
    }
}

/// Bytes of `n` decoded `height x width` RGB images, or the error for a
/// size that cannot be had.
pub(crate) fn images_len(height: u32, width: u32, n: usize) -> loaderx_store::Result<usize> {
    (height as usize)
        .checked_mul(width as usize)
        .and_then(|px| px.checked_mul(3 * n))
        .ok_or(loaderx_store::Error::OutOfMemory { bytes: u64::MAX })
}

/// The array shape of `rows` images in `layout`.
pub(crate) fn images_shape(
    layout: loaderx_store::ImageLayout,
    rows: usize,
    height: u32,
    width: u32,
) -> [usize; 4] {
    let (h, w) = (height as usize, width as usize);
    match layout {
        loaderx_store::ImageLayout::Hwc => [rows, h, w, 3],
        _ => [rows, 3, h, w],
    }
}

/// Ragged records' dimensions `dims` as the `(rows, ndim)` int64 array
/// `shapes()` returns.
pub(crate) fn shapes_array<'py>(
    py: Python<'py>,
    dims: Vec<u32>,
    rows: usize,
    ndim: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let dims: Vec<i64> = dims.into_iter().map(i64::from).collect();
    Ok(PyArray1::from_vec(py, dims)
        .reshape([rows, ndim])?
        .into_any())
}

/// A ragged gather as Python receives it: values, offsets, shapes.
pub(crate) type RaggedParts<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyAny>,
);

/// What a ragged gather returns to Python: the values (`flat`, bytes)
/// viewed as `dtype`, the offsets in items of `dtype` (int64), and the
/// records' shapes `(rows, ndim)` (int64).
pub(crate) fn ragged_output<'py>(
    py: Python<'py>,
    flat: Bound<'py, PyAny>,
    dtype: &Bound<'py, PyArrayDescr>,
    offsets: &[u64],
    dims: Vec<u32>,
    ndim: usize,
) -> PyResult<RaggedParts<'py>> {
    let itemsize = dtype.itemsize().max(1) as u64;
    let items: Vec<i64> = offsets.iter().map(|&o| (o / itemsize) as i64).collect();
    let values = flat.call_method1("view", (dtype,))?;
    let shapes = shapes_array(py, dims, offsets.len() - 1, ndim)?;
    Ok((values, PyArray1::from_vec(py, items), shapes))
}

/// Opens the engine for `location`, a local store directory or a store
/// URL (read-only; `writable` refused), with the GIL released: the one
/// entry point by which the binding opens an existing store, for the
/// containers and for anything else that opens stores by name.
pub(crate) fn open_engine(
    py: Python<'_>,
    location: &str,
    storage_options: &[(String, String)],
    options: OpenOptions,
) -> PyResult<Engine> {
    if loaderx_remote::is_url(location) && !options.read_only {
        return Err(PyValueError::new_err(format!(
            "{location}: stores opened by URL are read-only (writable=True is refused)"
        )));
    }
    py.detach(|| loaderx_remote::open_store(location, storage_options, options))
        .map_err(|err| match err {
            // A URL or storage option not understood: a bad argument, named.
            loaderx_store::Error::InvalidArgument {
                path,
                argument,
                reason,
            } => PyValueError::new_err(format!(
                "cannot open {}: {argument}: {reason}",
                path.display()
            )),
            err => store_error(py, err),
        })
}

/// The engine would take "" for the current directory.
fn non_empty(path: &std::path::Path) -> PyResult<()> {
    if path.as_os_str().is_empty() {
        return Err(PyValueError::new_err("the store path is empty"));
    }
    Ok(())
}

#[pymethods]
impl Store {
    /// Opens the store at `path`, creating the directory and an empty store
    /// when absent.
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        non_empty(&path)?;
        let engine = py
            .detach(|| {
                Engine::open_path_in(
                    &path,
                    OpenOptions::default(),
                    loaderx_remote::AnyStorage::Local,
                )
            })
            .map_err(|err| store_error(py, err))?;
        Ok(Store::wrap(&path, engine))
    }

    /// Creates a typed (format v2) store in `path`: `kind` is `"dense"`
    /// (items of `dtype` and `shape`) or `"ragged"` (arrays of `dtype` and
    /// rank `ndim`); `dictionary` is the zstd dictionary of a `zstd_dict`
    /// store; `lanes` its write lanes. `FileExistsError` when `path` already
    /// holds a store.
    #[staticmethod]
    #[pyo3(signature = (path, kind, dtype, shape, ndim, codec, dictionary = None, lanes = 1))]
    #[allow(clippy::too_many_arguments)]
    fn create_typed(
        py: Python<'_>,
        path: PathBuf,
        kind: &str,
        dtype: &str,
        shape: Vec<u64>,
        ndim: usize,
        codec: &str,
        dictionary: Option<&Bound<'_, PyBytes>>,
        lanes: usize,
    ) -> PyResult<Self> {
        non_empty(&path)?;
        let dictionary = dictionary.map(|d| d.as_bytes().to_vec());
        if let Some(bytes) = &dictionary {
            // A bad argument, refused before anything is created.
            loaderx_store::ZstdDictionary::new(bytes).map_err(|err| {
                PyValueError::new_err(format!(
                    "cannot create {}: dict_bytes is not a usable zstd dictionary ({err}); \
                     train one with loaderx.utils.train_dict",
                    path.display()
                ))
            })?;
        }
        let schema = typed::build_schema(&path, kind, dtype, shape, ndim, codec, dictionary)?;
        let options = OpenOptions {
            lanes: typed::lanes(lanes)?,
            ..OpenOptions::default()
        };
        let mut store = Store::create_v2(py, &path, &schema, options)?;
        store.writer = Some(if kind == "dense" { "Dense" } else { "Ragged" });
        Ok(store)
    }

    /// Creates an untyped byte-record store in format v2 (the 0.5.x API's
    /// `format=2`), with `codec` as its codec. `FileExistsError` when `path`
    /// already holds a store.
    #[staticmethod]
    fn create_v2_bytes(py: Python<'_>, path: PathBuf, codec: &str) -> PyResult<Self> {
        non_empty(&path)?;
        let tag = loaderx_store::CodecId::from_name(codec)
            .filter(|c| *c != loaderx_store::CodecId::ZstdDict)
            .ok_or_else(|| PyValueError::new_err(format!("unknown codec {codec:?}")))?
            .tag();
        let schema = loaderx_store::format::v2::Schema::bytes(tag);
        Store::create_v2(py, &path, &schema, OpenOptions::default())
    }

    /// Opens an existing store (any version) without creating anything:
    /// read-only unless `writable`; with `check_raw`, gathers check the
    /// CRC32C of raw records too (compressed ones are always checked).
    ///
    /// A `path` that is a URL (`s3://`, `gs://`, `az://`, `abfs://`,
    /// `http(s)://`, `file://`) opens a store in object storage, read-only
    /// (`writable` must be false) with every record checked, configured by
    /// `storage_options` (`docs/REMOTE.md`).
    #[staticmethod]
    #[pyo3(signature = (path, writable, check_raw = false, storage_options = None))]
    fn open_existing(
        py: Python<'_>,
        path: PathBuf,
        writable: bool,
        check_raw: bool,
        storage_options: Option<Vec<(String, String)>>,
    ) -> PyResult<Self> {
        non_empty(&path)?;
        let options = OpenOptions {
            read_only: !writable,
            create: false,
            check_raw,
            ..OpenOptions::default()
        };
        let location = path.to_string_lossy().into_owned();
        let engine = open_engine(py, &location, &storage_options.unwrap_or_default(), options)?;
        Ok(Store::wrap(&path, engine))
    }

    /// The on-disk format version (1 or 2).
    fn format_version(&self, py: Python<'_>) -> PyResult<u16> {
        self.handle.shared(py, |engine| Ok(engine.format_version()))
    }

    /// The write lanes (`data_shards` at creation; 1 for format v1).
    fn lanes(&self, py: Python<'_>) -> PyResult<u8> {
        self.handle.shared(py, |engine| Ok(engine.lanes()))
    }

    /// The schema of a typed store (`kind`, `dtype`, `shape`, `ndim`,
    /// `codec`, `item_len`), or `None` for a format v1 store.
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let schema = self
            .handle
            .shared(py, |engine| Ok(engine.schema().cloned()))?;
        schema.map(|s| typed::schema_dict(py, &s)).transpose()
    }

    /// Appends `n` dense records packed in `src` (borrowed, not copied);
    /// returns the index of the first.
    fn append_dense(
        &self,
        py: Python<'_>,
        src: PyReadonlyArray1<'_, u8>,
        n: usize,
    ) -> PyResult<u64> {
        self.settled(py, Some("append to"))?;
        let src = src.as_slice().map_err(|_| not_contiguous("src"))?;
        self.handle
            .shared(py, |engine| typed::append_dense(engine, src, n))
    }

    /// Appends ragged records `src[offsets[i] ..][.. lens[i]]` whose
    /// dimensions are `dims[i * ndim ..][.. ndim]`; returns the index of the
    /// first.
    fn append_shaped(
        &self,
        py: Python<'_>,
        src: PyReadonlyArray1<'_, u8>,
        offsets: PyReadonlyArray1<'_, u64>,
        lens: PyReadonlyArray1<'_, u64>,
        dims: PyReadonlyArray1<'_, u32>,
    ) -> PyResult<u64> {
        self.settled(py, Some("append to"))?;
        let src = src.as_slice().map_err(|_| not_contiguous("src"))?;
        let offsets = offsets.as_slice().map_err(|_| not_contiguous("offsets"))?;
        let lens = lens.as_slice().map_err(|_| not_contiguous("lens"))?;
        let dims = dims.as_slice().map_err(|_| not_contiguous("dims"))?;
        self.handle.shared(py, |engine| {
            typed::append_ragged(engine, src, offsets, lens, dims)
        })
    }

    /// Appends the NumPy arrays `records` to a ragged store, each written
    /// from its own memory, when every one is a C-contiguous array of
    /// `dtype` with `ndim` axes and at most `MAX_ITEM_LEN` bytes, and none is
    /// empty unless `empty`; returns the index of the first, or `None` with
    /// nothing written when one is not (the caller then checks them one by
    /// one and names the culprit).
    fn append_arrays(
        &self,
        py: Python<'_>,
        records: Vec<Bound<'_, PyAny>>,
        dtype: &Bound<'_, numpy::PyArrayDescr>,
        ndim: usize,
        empty: bool,
    ) -> PyResult<Option<u64>> {
        self.settled(py, Some("append to"))?;
        let limit = u64::from(loaderx_store::format::v2::MAX_RECORD_LEN_V2);
        let Some(arrays) = crate::arrays::records(&records, dtype, ndim, limit, empty) else {
            return Ok(None);
        };
        let (parts, dims) = (&arrays.parts, &arrays.dims);
        self.handle
            .shared(py, |engine| engine.append_shaped_parts(parts, dims))
            .map(Some)
    }

    /// `records`, when they are what [`append_arrays`](Self::append_arrays)
    /// takes, copied back to back into new arrays: `(data, offsets, lens,
    /// dims)` as [`append_shaped`](Self::append_shaped) takes them; `None`,
    /// with nothing copied, when one is not. The copy is the caller's own:
    /// the arrays may change as soon as this returns (a writer that writes
    /// behind its caller packs with it).
    #[staticmethod]
    #[allow(clippy::type_complexity)]
    fn pack_arrays<'py>(
        py: Python<'py>,
        records: Vec<Bound<'py, PyAny>>,
        dtype: &Bound<'py, numpy::PyArrayDescr>,
        ndim: usize,
        empty: bool,
    ) -> PyResult<
        Option<(
            Bound<'py, PyArray1<u8>>,
            Bound<'py, PyArray1<u64>>,
            Bound<'py, PyArray1<u64>>,
            Bound<'py, PyArray1<u32>>,
        )>,
    > {
        let limit = u64::from(loaderx_store::format::v2::MAX_RECORD_LEN_V2);
        let Some(arrays) = crate::arrays::records(&records, dtype, ndim, limit, empty) else {
            return Ok(None);
        };
        let total: usize = arrays.parts.iter().map(|p| p.len()).sum();
        let mut data = Vec::new();
        data.try_reserve_exact(total).map_err(|_| {
            pyo3::exceptions::PyMemoryError::new_err(format!(
                "cannot allocate {total} bytes to pack {} records",
                arrays.parts.len()
            ))
        })?;
        let mut offsets = Vec::with_capacity(arrays.parts.len());
        let mut lens = Vec::with_capacity(arrays.parts.len());
        for part in &arrays.parts {
            offsets.push(data.len() as u64);
            lens.push(part.len() as u64);
            data.extend_from_slice(part);
        }
        Ok(Some((
            PyArray1::from_vec(py, data),
            PyArray1::from_vec(py, offsets),
            PyArray1::from_vec(py, lens),
            PyArray1::from_vec(py, arrays.dims),
        )))
    }

    /// Appends `uint8` images `src[offsets[i] ..][.. lens[i]]` (dense: one
    /// item each, `dims` empty; ragged: `(h, w, 3)` each, in `dims`),
    /// encoded with the schema's codec (JPEG at `quality`) on the store's
    /// threads; returns the index of the first.
    fn append_images(
        &self,
        py: Python<'_>,
        src: PyReadonlyArray1<'_, u8>,
        offsets: PyReadonlyArray1<'_, u64>,
        lens: PyReadonlyArray1<'_, u64>,
        dims: PyReadonlyArray1<'_, u32>,
        quality: u8,
    ) -> PyResult<u64> {
        self.settled(py, Some("append to"))?;
        let src = src.as_slice().map_err(|_| not_contiguous("src"))?;
        let offsets = offsets.as_slice().map_err(|_| not_contiguous("offsets"))?;
        let lens = lens.as_slice().map_err(|_| not_contiguous("lens"))?;
        let dims = dims.as_slice().map_err(|_| not_contiguous("dims"))?;
        self.handle.shared(py, |engine| {
            engine.append_images(src, offsets, lens, dims, quality)
        })
    }

    /// Appends JPEG/PNG files `src[offsets[i] ..][.. lens[i]]` as they are,
    /// their headers checked against the schema; returns the index of the
    /// first.
    fn append_encoded(
        &self,
        py: Python<'_>,
        src: PyReadonlyArray1<'_, u8>,
        offsets: PyReadonlyArray1<'_, u64>,
        lens: PyReadonlyArray1<'_, u64>,
    ) -> PyResult<u64> {
        self.settled(py, Some("append to"))?;
        let src = src.as_slice().map_err(|_| not_contiguous("src"))?;
        let offsets = offsets.as_slice().map_err(|_| not_contiguous("offsets"))?;
        let lens = lens.as_slice().map_err(|_| not_contiguous("lens"))?;
        self.handle.shared(py, |engine| {
            engine.append_encoded_images(src, offsets, lens)
        })
    }

    /// The records `idx` selects from a dense store, in a new array of
    /// `proto`'s dtype shaped `(n, *proto.shape[1:])` (`proto`: an empty
    /// `(0, *item_shape)` array of the container's dtype), each record
    /// checked to be exactly one item; for an index of one record (and not
    /// `batch`), that record. `idx` is any index form module `indices`
    /// reads, resolved and gathered under one lock: `Dense.__getitem__` in
    /// one call. A batch of at least `POOLED_OUTPUT_BYTES` comes from this
    /// handle's output pool.
    /// `pool`: an `OutputPool` to take that batch's buffer from instead.
    #[pyo3(signature = (idx, proto, batch = false, pool = None))]
    #[allow(unsafe_code)]
    fn get_dense<'py>(
        &self,
        py: Python<'py>,
        idx: &Bound<'py, PyAny>,
        proto: &Bound<'py, PyUntypedArray>,
        batch: bool,
        pool: Option<PyRef<'py, OutputPool>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let selection = indices::parse(idx, batch)?;
        let item_len = arrays::row_len(proto)
            .filter(|_| proto.shape().first() == Some(&0))
            .ok_or_else(|| {
                PyValueError::new_err("proto must be an empty (0, *item_shape) array of plain data")
            })?;
        let small = selection
            .count()
            .filter(|&rows| rows.saturating_mul(item_len) < crate::pool::POOLED_OUTPUT_BYTES);
        let inline = small.is_some_and(|rows| rows.saturating_mul(item_len) <= INLINE_GATHER_BYTES);
        let (out, one) = if let Some(rows) = small {
            let mut one = false;
            // SAFETY: `item_len` is `row_len(proto)`, asked above; and
            // `gather_exact` writes all `rows * item_len` bytes of `dst`
            // when it succeeds (the resolved indices are checked to be
            // `rows`, and every record to be exactly `item_len` bytes,
            // before any is copied) and reads none.
            let out = unsafe {
                arrays::new_rows_like(py, proto, item_len, rows, |dst| {
                    let gather = |engine: &Engine, resolved: Resolved| {
                        if resolved.idxs.len() != rows {
                            return Err(loaderx_store::Error::OutOfMemory { bytes: u64::MAX });
                        }
                        engine.gather_exact(&resolved.idxs, dst, item_len)?;
                        Ok(resolved.one)
                    };
                    one = if inline {
                        self.handle.selected_inline(py, selection, gather)?
                    } else {
                        self.handle.selected(py, selection, gather)?
                    };
                    Ok(())
                })?
            };
            (out.into_any(), one)
        } else {
            let outputs = pool.as_ref().map_or(&self.outputs, |p| &p.0);
            let (data, rows, one) = self.handle.selected(py, selection, |engine, resolved| {
                let len = item_len
                    .checked_mul(resolved.idxs.len())
                    .ok_or(loaderx_store::Error::OutOfMemory { bytes: u64::MAX })?;
                let mut out = Output::allocate_or_oom(outputs, OutputKind::Dense, len)?;
                engine.gather_exact(&resolved.idxs, out.as_mut(), item_len)?;
                Ok((out, resolved.idxs.len(), resolved.one))
            })?;
            let mut shape = vec![rows];
            shape.extend_from_slice(&proto.shape()[1..]);
            let out = data
                .into_array(py, outputs, OutputKind::Dense)?
                .call_method1("view", (proto.dtype(),))?
                .call_method1("reshape", (PyTuple::new(py, shape)?,))?;
            (out, one)
        };
        if one { out.get_item(0) } else { Ok(out) }
    }

    /// The records `idx` selects from a ragged store of `dtype`: `(flat,
    /// offsets, shapes, one)`, the records back to back in `flat` (a 1-D
    /// `dtype` array over one allocation), record `i` being
    /// `flat[offsets[i]:offsets[i + 1]]` (int64 element offsets) of shape
    /// `shapes[i]` (int64, `(n, ndim)`); `one` when `idx` names one record
    /// (and not `batch`). Resolved and gathered under one lock.
    /// A batch of at least `POOLED_OUTPUT_BYTES` comes from this handle's
    /// output pool, or from `pool` (an `OutputPool`) when given.
    #[pyo3(signature = (idx, dtype, batch = false, pool = None))]
    #[allow(clippy::type_complexity)]
    fn get_ragged<'py>(
        &self,
        py: Python<'py>,
        idx: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyArrayDescr>,
        batch: bool,
        pool: Option<PyRef<'py, OutputPool>>,
    ) -> PyResult<(
        Bound<'py, PyAny>,
        Bound<'py, PyArray1<i64>>,
        Bound<'py, PyAny>,
        bool,
    )> {
        let selection = indices::parse(idx, batch)?;
        let outputs = pool.as_ref().map_or(&self.outputs, |p| &p.0);
        let (gathered, ndim, one) = self.handle.selected(py, selection, |engine, resolved| {
            let ndim = typed::ragged_ndim(engine)?;
            let gathered = typed::gather_ragged(engine, &resolved.idxs, |len| {
                Output::allocate_or_oom(outputs, OutputKind::Ragged, len)
            })?;
            Ok((gathered, ndim, resolved.one))
        })?;
        let flat = gathered
            .data
            .into_array(py, outputs, OutputKind::Ragged)?
            .into_any();
        let (values, offsets, shapes) =
            ragged_output(py, flat, dtype, &gathered.offsets, gathered.dims, ndim)?;
        Ok((values, offsets, shapes, one))
    }

    /// The shapes of the ragged records `idx` selects, `(n, ndim)` int64,
    /// without reading the records.
    fn shapes<'py>(&self, py: Python<'py>, idx: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let selection = indices::parse(idx, true)?;
        let (dims, rows, ndim) = self.handle.selected(py, selection, |engine, resolved| {
            let dims = typed::ragged_dims(engine, &resolved.idxs)?;
            Ok((dims, resolved.idxs.len(), typed::ragged_ndim(engine)?))
        })?;
        shapes_array(py, dims, rows, ndim)
    }

    /// The images `idx` selects, decoded, resized to cover `height x width`
    /// and centre-cropped, in a new `uint8` array `(n, height, width, 3)`
    /// (`layout` `"hwc"`) or `(n, 3, height, width)` (`"chw"`); for an
    /// index of one record (and not `batch`), that image. GIL released.
    #[pyo3(signature = (idx, height, width, layout, batch = false))]
    fn get_images<'py>(
        &self,
        py: Python<'py>,
        idx: &Bound<'py, PyAny>,
        height: u32,
        width: u32,
        layout: &str,
        batch: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let layout = image_layout(layout)?;
        let selection = indices::parse(idx, batch)?;
        let outputs = &self.outputs;
        let (data, rows, one) = self.handle.selected(py, selection, |engine, resolved| {
            let len = images_len(height, width, resolved.idxs.len())?;
            let mut out = Output::allocate_or_oom(outputs, OutputKind::Images, len)?;
            engine.gather_images(&resolved.idxs, out.as_mut(), height, width, layout)?;
            Ok((out, resolved.idxs.len(), resolved.one))
        })?;
        let shape = images_shape(layout, rows, height, width);
        let out = data
            .into_array(py, outputs, OutputKind::Images)?
            .reshape(shape)?
            .into_any();
        if one { out.get_item(0) } else { Ok(out) }
    }

    /// Checks every record and entry; raises the first problem.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        self.settled(py, None)?;
        self.handle.shared(py, |engine| engine.verify())
    }

    /// Every damaged record: `(index, reason)`, empty when healthy.
    fn damaged(&self, py: Python<'_>) -> PyResult<Vec<(u64, String)>> {
        self.settled(py, None)?;
        self.handle.shared(py, |engine| engine.damaged())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.settled(py, Some("count the records of"))?;
        self.handle.shared(py, |engine| Ok(engine.len() as usize))
    }

    fn __repr__(&self) -> String {
        let state = if self.handle.closed.load(Ordering::Acquire) {
            "closed"
        } else {
            "open"
        };
        format!("<loaderx._native.Store {:?} ({state})>", self.handle.path)
    }

    /// Whether `close` has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.handle.closed.load(Ordering::Acquire)
    }

    /// Makes everything appended so far durable.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.settled(py, Some("sync"))?;
        self.handle.shared(py, |engine| engine.sync())
    }

    /// Writes the logical size of record `idxs[i]` to `out[i]`.
    fn lengths(
        &self,
        py: Python<'_>,
        idxs: PyReadonlyArray1<'_, u64>,
        mut out: PyReadwriteArray1<'_, u32>,
    ) -> PyResult<()> {
        let idxs = idxs.as_slice().map_err(|_| not_contiguous("idxs"))?;
        let out = out.as_slice_mut().map_err(|_| not_contiguous("out"))?;
        self.handle.shared(py, |engine| engine.lengths(idxs, out))
    }

    /// Decodes record `idxs[i]` into `dst[i * stride ..]`.
    fn gather(
        &self,
        py: Python<'_>,
        idxs: PyReadonlyArray1<'_, u64>,
        mut dst: PyReadwriteArray1<'_, u8>,
        stride: usize,
    ) -> PyResult<()> {
        let idxs = idxs.as_slice().map_err(|_| not_contiguous("idxs"))?;
        let dst = dst.as_slice_mut().map_err(|_| not_contiguous("dst"))?;
        self.handle
            .shared(py, |engine| engine.gather(idxs, dst, stride))
    }

    /// Decodes record `idxs[i]` into `dst[i * item_len ..]`, refusing
    /// ([`ErrorCode::BufferTooSmall`], before writing anything) a batch holding any record that is not
    /// exactly `item_len` bytes: a typed view must never see a half-filled
    /// sample. Sizes are checked in the same locked gather, so a concurrent
    /// `delete` cannot slip between the check and the copy.
    fn gather_exact(
        &self,
        py: Python<'_>,
        idxs: PyReadonlyArray1<'_, u64>,
        mut dst: PyReadwriteArray1<'_, u8>,
        item_len: usize,
    ) -> PyResult<()> {
        let idxs = idxs.as_slice().map_err(|_| not_contiguous("idxs"))?;
        let dst = dst.as_slice_mut().map_err(|_| not_contiguous("dst"))?;
        self.handle
            .shared(py, |engine| engine.gather_exact(idxs, dst, item_len))
    }

    /// Records `idxs` in a new array of `proto`'s dtype shaped
    /// `(len(idxs), *proto.shape[1:])`, each record checked to be exactly
    /// one item of it (as `gather_exact`): `Dense`'s batch read in one call,
    /// for the small batches where the fixed cost of a call is most of the
    /// work. `proto` is an empty `(0, *item_shape)` array of the
    /// container's dtype. `None`, before the indices are copied or anything
    /// is gathered, where this does not apply and the caller takes its
    /// general path: an index array that is not a C-contiguous 1-D array of
    /// native 64-bit integers, a batch of at least `POOLED_OUTPUT_BYTES`
    /// (the output pool's), or a `proto` that is not an empty array of
    /// non-empty rows of a built-in dtype without Python objects. A
    /// negative index reads as one past the end, refused as such. The
    /// indices are copied before the GIL is released.
    #[allow(unsafe_code)]
    fn gather_like<'py>(
        &self,
        py: Python<'py>,
        idxs: &Bound<'py, PyAny>,
        proto: &Bound<'py, PyUntypedArray>,
    ) -> PyResult<Option<Bound<'py, PyUntypedArray>>> {
        let Some(item_len) = arrays::row_len(proto).filter(|&len| len > 0) else {
            return Ok(None);
        };
        if proto.shape().first() != Some(&0) {
            return Ok(None);
        }
        let most = (crate::pool::POOLED_OUTPUT_BYTES - 1) / item_len;
        let Some(indices) = arrays::word_indices(idxs, most) else {
            return Ok(None);
        };
        // SAFETY: `item_len` is `row_len(proto)`, asked above; and
        // `gather_exact` writes all `indices.len() * item_len` bytes of
        // `dst` when it succeeds (every record checked to be exactly
        // `item_len` bytes before any is copied) and reads none.
        let out = unsafe {
            arrays::new_rows_like(py, proto, item_len, indices.len(), |dst| {
                self.handle
                    .shared(py, |engine| engine.gather_exact(&indices, dst, item_len))
            })?
        };
        Ok(Some(out))
    }

    /// Decodes record `idxs[i]` into `dst[offsets[i] ..]`.
    fn gather_var(
        &self,
        py: Python<'_>,
        idxs: PyReadonlyArray1<'_, u64>,
        mut dst: PyReadwriteArray1<'_, u8>,
        offsets: PyReadonlyArray1<'_, u64>,
    ) -> PyResult<()> {
        let idxs = idxs.as_slice().map_err(|_| not_contiguous("idxs"))?;
        let offsets = offsets.as_slice().map_err(|_| not_contiguous("offsets"))?;
        let dst = dst.as_slice_mut().map_err(|_| not_contiguous("dst"))?;
        self.handle
            .shared(py, |engine| engine.gather_ragged(idxs, dst, offsets))
    }

    /// Appends `n` records of `item_len` bytes from `src`, encoded with
    /// `codec`; returns the index of the first.
    fn append(
        &self,
        py: Python<'_>,
        src: PyReadonlyArray1<'_, u8>,
        n: usize,
        item_len: usize,
        codec: &str,
    ) -> PyResult<u64> {
        let codec = codec_id(codec)?;
        let src = src.as_slice().map_err(|_| not_contiguous("src"))?;
        self.handle.shared(py, |engine| {
            engine.append_fixed_with(codec, src, n, item_len)
        })
    }

    /// Appends ragged records `src[offsets[i] ..][.. lens[i]]`; returns the
    /// index of the first. `lens` are taken as u64 so that a length no record
    /// can have is the record-size error it is, not an overflow.
    fn append_var(
        &self,
        py: Python<'_>,
        src: PyReadonlyArray1<'_, u8>,
        offsets: PyReadonlyArray1<'_, u64>,
        lens: PyReadonlyArray1<'_, u64>,
        codec: &str,
    ) -> PyResult<u64> {
        let codec = codec_id(codec)?;
        let src = src.as_slice().map_err(|_| not_contiguous("src"))?;
        let offsets = offsets.as_slice().map_err(|_| not_contiguous("offsets"))?;
        let lens = lens.as_slice().map_err(|_| not_contiguous("lens"))?;
        self.handle.shared(py, |engine| {
            let lens = record_lens(lens)?;
            engine.append_ragged_with(codec, src, offsets, &lens)
        })
    }

    /// Deletes records (tail swapped into each hole); waits for gathers in
    /// flight.
    /// `idxs` is any index form module `indices` reads (negative ones
    /// counting from the end), resolved under the same lock.
    fn delete(&self, py: Python<'_>, idxs: &Bound<'_, PyAny>) -> PyResult<()> {
        self.settled(py, None)?;
        let selection = indices::parse(idxs, true)?;
        let path = self.handle.path.as_str();
        self.handle
            .exclusive(py, "delete from", |engine| {
                match selection.resolve(engine.len(), path) {
                    Ok(resolved) => engine.delete(&resolved.idxs).map(Ok),
                    Err(refusal) => Ok(Err(refusal)),
                }
            })?
            .map_err(|refusal| refusal.into_err(py))
    }

    /// Reclaims the space deleted records left behind; waits for gathers in
    /// flight.
    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        self.settled(py, None)?;
        self.handle
            .exclusive(py, "compact", |engine| engine.compact())
    }

    /// `(records, live_bytes, chunk_bytes, reclaimable)`.
    fn stats(&self, py: Python<'_>) -> PyResult<(u64, u64, u64, u64)> {
        self.settled(py, None)?;
        self.handle.shared(py, |engine| {
            let s = engine.stats()?;
            Ok((s.records, s.live_bytes, s.chunk_bytes, s.reclaimable))
        })
    }

    /// Commits and releases the store once the calls in flight have
    /// finished; raises what the commit raised. Idempotent (a second call
    /// does nothing).
    /// The write behind the last append is waited for first, under the lock
    /// an append takes to submit one (so an append racing this is either
    /// stored or raises `ClosedError`); its error is raised once the store
    /// is closed. In a forked child the parent's write in flight is
    /// forgotten.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let (settled, committed) = self
            .behind
            .close(py, &self.handle, || self.handle.close(py));
        self.outputs.0.close();
        settled?;
        committed.map_err(|err| store_error(py, err))
    }

    /// Appends `n` dense records from `src` (the writer's own copy, any
    /// dtype, C-contiguous) on a helper thread (module `writer`).
    fn append_dense_behind(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        n: usize,
    ) -> PyResult<()> {
        self.settled(py, Some("append to"))?;
        self.behind.submit(
            py,
            &self.handle,
            vec![src.clone()],
            true,
            n,
            move |engine, parts| typed::append_dense(engine, parts[0], n),
        )
    }

    /// Appends ragged records as `append_shaped` does, on a helper thread,
    /// from arrays that are the writer's own (module `writer`).
    fn append_shaped_behind(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        offsets: PyReadonlyArray1<'_, u64>,
        lens: PyReadonlyArray1<'_, u64>,
        dims: PyReadonlyArray1<'_, u32>,
    ) -> PyResult<()> {
        self.settled(py, Some("append to"))?;
        let records = offsets.len();
        let keep = vec![
            src.clone(),
            offsets.as_any().clone(),
            lens.as_any().clone(),
            dims.as_any().clone(),
        ];
        drop((offsets, lens, dims));
        self.behind
            .submit(py, &self.handle, keep, false, records, |engine, parts| {
                let words = |bytes: &[u8]| -> Vec<u64> {
                    bytes
                        .chunks_exact(8)
                        .map(|w| w.try_into().map_or(0, u64::from_ne_bytes))
                        .collect()
                };
                let dims: Vec<u32> = parts[3]
                    .chunks_exact(4)
                    .map(|w| w.try_into().map_or(0, u32::from_ne_bytes))
                    .collect();
                typed::append_ragged(engine, parts[0], &words(parts[1]), &words(parts[2]), &dims)
            })
    }

    /// The buffer of the last finished dense write behind an append, for the
    /// next copy (`None` if there is none).
    fn take_spare(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.behind.take_spare(py)
    }
}

/// An image layout by its Python name.
pub(crate) fn image_layout(layout: &str) -> PyResult<loaderx_store::ImageLayout> {
    match layout {
        "hwc" => Ok(loaderx_store::ImageLayout::Hwc),
        "chw" => Ok(loaderx_store::ImageLayout::Chw),
        other => Err(PyValueError::new_err(format!(
            "layout must be \"hwc\" or \"chw\", got {other:?}"
        ))),
    }
}

impl Handle {
    /// Takes the engine out and closes it, reporting its commit.
    fn close(&self, py: Python<'_>) -> loaderx_store::Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let forked = self.forked();
        py.detach(|| {
            let taken = if forked {
                match self.engine.try_write() {
                    Ok(mut guard) => guard.take(),
                    Err(TryLockError::Poisoned(p)) => p.into_inner().take(),
                    // Held by a thread that did not survive the fork: leave
                    // the engine to the process exit.
                    Err(TryLockError::WouldBlock) => None,
                }
            } else {
                self.engine
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
            };
            taken.map_or(Ok(()), Engine::close)
        })
    }
}

/// Uploads the closed local store `local` to `url` (chunks first by
/// multipart upload, `meta.zr` last), with the GIL released: the objects
/// written and the bytes. `FileExistsError` when `url` holds a store,
/// `ValueError` for a URL or option not understood.
#[pyfunction]
#[pyo3(signature = (local, url, storage_options = None))]
pub(crate) fn push(
    py: Python<'_>,
    local: PathBuf,
    url: String,
    storage_options: Option<Vec<(String, String)>>,
) -> PyResult<(Vec<String>, u64)> {
    non_empty(&local)?;
    if !loaderx_remote::is_url(&url) {
        return Err(PyValueError::new_err(format!(
            "push: {url:?} is not a store URL (s3://, gs://, az://, abfs://, file://)"
        )));
    }
    let options = storage_options.unwrap_or_default();
    py.detach(|| loaderx_remote::push(&local, &url, &options))
        .map(|pushed| (pushed.objects, pushed.bytes))
        .map_err(|err| remote_error(py, &url, "push to", err))
}

/// The first object under `url`'s prefix (its name relative to it), or
/// `None` when the prefix holds nothing: what `Dense.create(url)` and the
/// converters check before writing. `ValueError` for a URL or option not
/// understood (an `http(s)://` URL is read-only).
#[pyfunction]
#[pyo3(signature = (url, storage_options = None))]
pub(crate) fn first_object(
    py: Python<'_>,
    url: String,
    storage_options: Option<Vec<(String, String)>>,
) -> PyResult<Option<String>> {
    let options = storage_options.unwrap_or_default();
    py.detach(|| loaderx_remote::first_object(&url, &options))
        .map_err(|err| remote_error(py, &url, "write to", err))
}

/// Uploads everything under the local directory `local` to `url` (data
/// objects, then every `meta.zr`, then every part's `.complete`, then
/// every manifest), with the GIL released: the objects written and the
/// bytes. `FileExistsError` when a store or collection is already where
/// one would go; `ValueError` for a URL or option not understood;
/// `ZrecordError` naming the URL (and what was published) for a failed
/// upload.
#[pyfunction]
#[pyo3(signature = (local, url, storage_options = None))]
pub(crate) fn publish(
    py: Python<'_>,
    local: PathBuf,
    url: String,
    storage_options: Option<Vec<(String, String)>>,
) -> PyResult<(Vec<String>, u64)> {
    non_empty(&local)?;
    let options = storage_options.unwrap_or_default();
    py.detach(|| loaderx_remote::publish_tree(&local, &url, &options))
        .map(|pushed| (pushed.objects, pushed.bytes))
        .map_err(|err| remote_error(py, &url, "publish to", err))
}

/// A remote write's error as Python raises it: `FileExistsError` for
/// something already there, `ValueError` for a bad URL or option, the
/// store's error otherwise.
fn remote_error(py: Python<'_>, url: &str, what: &str, err: loaderx_store::Error) -> PyErr {
    match err {
        loaderx_store::Error::Exists { path } => PyFileExistsError::new_err(format!(
            "{} already exists under {url}: refusing to replace what readers may be reading",
            path.display()
        )),
        loaderx_store::Error::InvalidArgument {
            path,
            argument,
            reason,
        } => PyValueError::new_err(format!(
            "cannot {what} {}: {argument}: {reason}",
            path.display()
        )),
        err => store_error(py, err),
    }
}
