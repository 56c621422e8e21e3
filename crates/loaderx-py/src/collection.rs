//! `loaderx._native.Collection` and `CollectionColumn`: a collection of
//! parts read as one store (`loaderx_store::collection`), and
//! `collection_commit`, which publishes one.
//!
//! A `CollectionColumn` answers the reading calls of the native `Store`
//! that the typed readers (`Dense`, `Ragged`, `Images`) make, over global
//! indices, so `Collection["image"]` is a `Dense` or `Ragged` reader with
//! the whole index API; and it is a loader stream source. Every call that
//! touches the parts runs with the GIL released.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use loaderx_loader::Source;
use loaderx_remote::AnyStorage;
use loaderx_store::collection::{self, Column};
use loaderx_store::format::v2::Kind;
use loaderx_store::{Deflate, OpenOptions};
use numpy::{PyArray1, PyArrayDescr, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::arrays;
use crate::errors::{closed, store_error};
use crate::indices::{self, Resolved, Selection};
use crate::pool::{Output, OutputKind, SharedPool, output_pool};
use crate::typed;

type Coll = collection::Collection<Deflate, AnyStorage>;
type Col = Column<Deflate, AnyStorage>;

/// An engine error as Python's: a URL or option not understood is a
/// `ValueError` (as for `Dense.open`), the rest as `store_error` maps them.
fn coll_error(py: Python<'_>, err: loaderx_store::Error) -> PyErr {
    match err {
        loaderx_store::Error::InvalidArgument {
            path,
            argument,
            reason,
        } => PyValueError::new_err(format!("{}: {argument}: {reason}", path.display())),
        err => store_error(py, err),
    }
}

/// A zeroed buffer of `len` elements, or the engine's out-of-memory error.
fn buffer<T: Clone + Default>(len: usize) -> loaderx_store::Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| loaderx_store::Error::OutOfMemory {
            bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        })?;
    out.resize(len, T::default());
    Ok(out)
}

/// An open collection.
#[pyclass(module = "loaderx._native", name = "Collection", frozen)]
pub(crate) struct Collection {
    inner: Arc<Coll>,
}

#[pymethods]
impl Collection {
    /// Opens the collection at `path` (a directory or a URL): reads its
    /// manifest, no part; at most `max_open_parts` part stores held open.
    #[staticmethod]
    #[pyo3(signature = (path, storage_options = None, max_open_parts = None))]
    fn open(
        py: Python<'_>,
        path: String,
        storage_options: Option<Vec<(String, String)>>,
        max_open_parts: Option<usize>,
    ) -> PyResult<Self> {
        let options = storage_options.unwrap_or_default();
        let max = max_open_parts.unwrap_or_else(collection::default_max_open_parts);
        if max == 0 {
            return Err(PyValueError::new_err("max_open_parts must be >= 1, got 0"));
        }
        let inner = py
            .detach(|| {
                loaderx_remote::open_collection(&path, &options, OpenOptions::read_only(), max)
            })
            .map_err(|e| coll_error(py, e))?;
        Ok(Collection {
            inner: Arc::new(inner),
        })
    }

    /// The most part stores held open at once.
    fn max_open_parts(&self) -> usize {
        self.inner.max_open_parts()
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.inner.len()).unwrap_or(usize::MAX)
    }

    /// The column names, in manifest order.
    fn columns(&self) -> Vec<String> {
        self.inner
            .manifest()
            .columns
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    /// `{column: schema dict}` (as `Store.schema()` gives for one store).
    fn schemas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for c in &self.inner.manifest().columns {
            out.set_item(&c.name, typed::schema_dict(py, &c.schema)?)?;
        }
        Ok(out)
    }

    /// `[(part name, records)]`, in index order.
    fn parts(&self) -> Vec<(String, u64)> {
        self.inner
            .manifest()
            .parts
            .iter()
            .map(|p| (p.name.clone(), p.records))
            .collect()
    }

    /// Part stores opened so far (over every column).
    fn opened_parts(&self) -> usize {
        self.inner.opened_parts()
    }

    /// The column `name`; `KeyError` naming the columns there are.
    fn column(&self, name: &str) -> PyResult<CollectionColumn> {
        let column = self
            .inner
            .column(name)
            .map_err(|e| PyKeyError::new_err(e.to_string()))?;
        Ok(CollectionColumn {
            label: format!("{}[{name:?}]", self.inner.root().display()),
            column: Arc::new(ColumnSource(column)),
            closed: AtomicBool::new(false),
            outputs: output_pool(),
        })
    }
}

/// Checks the parts under `path` (a directory or a URL) and publishes the
/// collection; returns `(parts committed, records, entries ignored)`.
#[pyfunction]
#[pyo3(signature = (path, parts = None, storage_options = None))]
pub(crate) fn collection_commit(
    py: Python<'_>,
    path: String,
    parts: Option<Vec<String>>,
    storage_options: Option<Vec<(String, String)>>,
) -> PyResult<(Vec<String>, u64, Vec<String>)> {
    let options = storage_options.unwrap_or_default();
    let done = py
        .detach(|| loaderx_remote::commit_collection(&path, parts.as_deref(), &options))
        .map_err(|e| coll_error(py, e))?;
    let names = done.manifest.parts.iter().map(|p| p.name.clone()).collect();
    Ok((names, done.manifest.records().unwrap_or(0), done.ignored))
}

/// Uploads the finished local part directory `local` as part `part` of
/// the collection at `url`; returns the objects written.
#[pyfunction]
#[pyo3(signature = (local, url, part, storage_options = None))]
pub(crate) fn collection_upload_part(
    py: Python<'_>,
    local: PathBuf,
    url: String,
    part: String,
    storage_options: Option<Vec<(String, String)>>,
) -> PyResult<Vec<String>> {
    let options = storage_options.unwrap_or_default();
    py.detach(|| loaderx_remote::upload_part(&local, &url, &part, &options))
        .map(|pushed| pushed.objects)
        .map_err(|e| coll_error(py, e))
}

/// Whether `url` holds a committed collection (a manifest object).
#[pyfunction]
#[pyo3(signature = (url, storage_options = None))]
pub(crate) fn collection_at_url(
    py: Python<'_>,
    url: String,
    storage_options: Option<Vec<(String, String)>>,
) -> PyResult<bool> {
    let options = storage_options.unwrap_or_default();
    py.detach(|| loaderx_remote::is_collection_url(&url, &options))
        .map_err(|e| coll_error(py, e))
}

/// A column as a loader source: nothing changes a committed collection
/// behind the loader, so it is its own view.
#[derive(Debug)]
pub(crate) struct ColumnSource(Col);

impl Source for ColumnSource {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> loaderx_store::Result<()> {
        self.0.gather(idxs, dst, stride)
    }
    fn gather_exact(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        item_len: usize,
    ) -> loaderx_store::Result<()> {
        self.0.gather_exact(idxs, dst, item_len)
    }
    fn gather_ragged(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        offsets: &[u64],
    ) -> loaderx_store::Result<()> {
        self.0.gather_ragged(idxs, dst, offsets)
    }
    fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> loaderx_store::Result<()> {
        self.0.lengths(idxs, out)
    }
    fn with_view(
        &self,
        f: &mut dyn FnMut(&dyn Source) -> loaderx_store::Result<()>,
    ) -> loaderx_store::Result<()> {
        f(self)
    }
}

/// One column of a collection, with the reading calls of the native
/// `Store` over global indices.
#[pyclass(module = "loaderx._native", name = "CollectionColumn", frozen)]
pub(crate) struct CollectionColumn {
    label: String,
    column: Arc<ColumnSource>,
    closed: AtomicBool,
    /// Recycled buffers for large direct reads, as a store handle's.
    outputs: SharedPool,
}

impl CollectionColumn {
    /// The loader's source for this column.
    pub(crate) fn source(&self) -> Arc<dyn Source> {
        Arc::clone(&self.column) as Arc<dyn Source>
    }

    fn col(&self) -> &Col {
        &self.column.0
    }

    /// Resolves `selection` and runs `f` with the GIL released.
    fn selected<T, F>(&self, py: Python<'_>, selection: Selection, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&Col, Resolved) -> loaderx_store::Result<T> + Send,
    {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed(py, &self.label));
        }
        let col = self.col();
        let label = self.label.as_str();
        py.detach(|| match selection.resolve(col.len(), label) {
            Ok(resolved) => Ok(f(col, resolved)),
            Err(refusal) => Err(refusal),
        })
        .map_err(|refusal| refusal.into_err(py))?
        .map_err(|e| store_error(py, e))
    }

    fn kind(&self, want: Kind) -> PyResult<()> {
        if self.col().schema().kind == want {
            Ok(())
        } else {
            Err(PyValueError::new_err(format!(
                "{} is not a {want:?} column",
                self.label
            )))
        }
    }
}

#[pymethods]
impl CollectionColumn {
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        typed::schema_dict(py, self.col().schema()).map(Some)
    }

    /// Write lanes (a column's parts are separate stores: reported as 1).
    fn lanes(&self) -> u8 {
        1
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.col().len()).unwrap_or(usize::MAX)
    }

    fn __repr__(&self) -> String {
        format!("<CollectionColumn {}>", self.label)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Stops this handle; loaders already reading keep their own.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.outputs.0.close();
    }

    /// Dense records `idx` selects, as `Store.get_dense`.
    #[pyo3(signature = (idx, proto, batch = false))]
    fn get_dense<'py>(
        &self,
        py: Python<'py>,
        idx: &Bound<'py, PyAny>,
        proto: &Bound<'py, PyUntypedArray>,
        batch: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.kind(Kind::Dense)?;
        let selection = indices::parse(idx, batch)?;
        let item_len = arrays::row_len(proto)
            .filter(|_| proto.shape().first() == Some(&0))
            .ok_or_else(|| {
                PyValueError::new_err("proto must be an empty (0, *item_shape) array of plain data")
            })?;
        // A large batch into a recycled buffer (warm pages), as a store's
        // `get_dense` does; a small one into a heap allocation.
        let outputs = &self.outputs;
        let (data, rows, one) = self.selected(py, selection, |col, resolved| {
            let len = item_len
                .checked_mul(resolved.idxs.len())
                .ok_or(loaderx_store::Error::OutOfMemory { bytes: u64::MAX })?;
            let mut out = Output::allocate_or_oom(outputs, OutputKind::Dense, len)?;
            col.gather_exact(&resolved.idxs, out.as_mut(), item_len)?;
            Ok((out, resolved.idxs.len(), resolved.one))
        })?;
        let mut shape = vec![rows];
        shape.extend_from_slice(&proto.shape()[1..]);
        let out = data
            .into_array(py, outputs, OutputKind::Dense)?
            .call_method1("view", (proto.dtype(),))?
            .call_method1("reshape", (PyTuple::new(py, shape)?,))?;
        if one { out.get_item(0) } else { Ok(out) }
    }

    /// Ragged records `idx` selects, as `Store.get_ragged`:
    /// `(flat, offsets, shapes, one)`.
    #[pyo3(signature = (idx, dtype, batch = false))]
    #[allow(clippy::type_complexity)]
    fn get_ragged<'py>(
        &self,
        py: Python<'py>,
        idx: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyArrayDescr>,
        batch: bool,
    ) -> PyResult<(
        Bound<'py, PyAny>,
        Bound<'py, PyArray1<i64>>,
        Bound<'py, PyAny>,
        bool,
    )> {
        self.kind(Kind::Ragged)?;
        let selection = indices::parse(idx, batch)?;
        let ndim = usize::from(self.col().schema().ndim);
        let (data, offsets, dims, one) = self.selected(py, selection, |col, resolved| {
            let idxs = &resolved.idxs;
            let mut dims = buffer::<u32>(idxs.len() * ndim)?;
            col.dims(idxs, &mut dims)?;
            // Each record's length is its shape's product times the item
            // size (`dims` checks every entry against it).
            let itemsize = u64::from(col.schema().dtype.itemsize());
            let mut offsets = buffer::<u64>(idxs.len() + 1)?;
            let mut total = 0u64;
            for (slot, shape) in offsets[1..].iter_mut().zip(dims.chunks_exact(ndim.max(1))) {
                let len = shape
                    .iter()
                    .fold(itemsize, |a, &d| a.saturating_mul(u64::from(d)));
                total = total.saturating_add(len);
                *slot = total;
            }
            let total = usize::try_from(total)
                .map_err(|_| loaderx_store::Error::OutOfMemory { bytes: total })?;
            let mut data = buffer::<u8>(total)?;
            col.gather_ragged(idxs, &mut data, &offsets[..idxs.len()])?;
            Ok((data, offsets, dims, resolved.one))
        })?;
        let flat = PyArray1::from_vec(py, data).into_any();
        let (values, offsets, shapes) =
            crate::store::ragged_output(py, flat, dtype, &offsets, dims, ndim)?;
        Ok((values, offsets, shapes, one))
    }

    /// The shapes of the ragged records `idx` selects, `(n, ndim)` int64.
    fn shapes<'py>(&self, py: Python<'py>, idx: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.kind(Kind::Ragged)?;
        let selection = indices::parse(idx, true)?;
        let ndim = usize::from(self.col().schema().ndim);
        let (dims, rows) = self.selected(py, selection, |col, resolved| {
            let mut dims = buffer::<u32>(resolved.idxs.len() * ndim)?;
            col.dims(&resolved.idxs, &mut dims)?;
            Ok((dims, resolved.idxs.len()))
        })?;
        crate::store::shapes_array(py, dims, rows, ndim)
    }

    /// Images `idx` selects, decoded and fitted, as `Store.get_images`.
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
        let layout = crate::store::image_layout(layout)?;
        let selection = indices::parse(idx, batch)?;
        let (data, rows, one) = self.selected(py, selection, |col, resolved| {
            let len = crate::store::images_len(height, width, resolved.idxs.len())?;
            let mut out = buffer::<u8>(len)?;
            col.gather_images(&resolved.idxs, &mut out, height, width, layout)?;
            Ok((out, resolved.idxs.len(), resolved.one))
        })?;
        let shape = crate::store::images_shape(layout, rows, height, width);
        let out = PyArray1::from_vec(py, data).reshape(shape)?.into_any();
        if one { out.get_item(0) } else { Ok(out) }
    }

    /// Checks every part's store of the column; raises the first problem.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        let col = self.col();
        py.detach(|| col.verify()).map_err(|e| store_error(py, e))
    }

    /// Every damaged record as `(global index, reason)`.
    fn damaged(&self, py: Python<'_>) -> PyResult<Vec<(u64, String)>> {
        let col = self.col();
        py.detach(|| col.damaged()).map_err(|e| store_error(py, e))
    }
}
