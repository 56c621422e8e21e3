//! Typed stores (format v2): the native half of `loaderx.zrecord.Dense` and
//! `loaderx.zrecord.Ragged`, and of `loaderx.utils.train_dict`.
//!
//! The facts the Python layer checks against come from here and nowhere
//! else: the dtypes a store holds ([`Dtype::NUMBERS`], and what
//! [`Dtype::from_name`] takes besides), the codec names a schema may
//! carry, the container kinds, the rank, lane and record limits, and the
//! dictionary trainer's bounds. A schema is built and checked here
//! ([`Schema::check`]) before the engine sees it.
//!
//! Reads fill output allocated with the GIL released (by the binding, from
//! the handle's output pool when large: see `pool::Output`), which NumPy
//! then views without a copy; a ragged gather reads every record's size and
//! dimensions, allocates one buffer for the whole batch and gathers into
//! it, all under one shared lock, so a concurrent `delete` cannot slip
//! between the sizes and the bytes.

use loaderx_store::format::v2::{Dtype, Kind, MAX_NDIM, MAX_RECORD_LEN_V2, Schema};
use loaderx_store::format::{CodecTag, MAX_LANES};
use loaderx_store::{CodecId, Error, Result};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// The engine every binding class wraps.
/// Local (`FileStorage`) or remote (object storage): one engine type for
/// both (`docs/ARCHITECTURE.md`, "Decisions").
pub(crate) type Engine = loaderx_store::Store<loaderx_store::Deflate, loaderx_remote::AnyStorage>;

/// Container kinds as Python names them (`schema()["kind"]`).
const KINDS: [(Kind, &str); 3] = [
    (Kind::Bytes, "bytes"),
    (Kind::Dense, "dense"),
    (Kind::Ragged, "ragged"),
];

/// Every codec tag a v2 schema may carry without a registered codec (the
/// built-ins and the image codecs of feature `image`), with its Python name.
fn typed_codecs() -> impl Iterator<Item = (CodecTag, &'static str)> {
    (0..=u8::MAX)
        .map(CodecTag)
        .take_while(|tag| tag.is_known_v2() || tag.is_image())
        .filter_map(|tag| tag.name().map(|name| (tag, name)))
}

/// The codec names a typed store takes, in tag order.
pub(crate) fn codec_names() -> Vec<&'static str> {
    typed_codecs().map(|(_, name)| name).collect()
}

fn kind_name(kind: Kind) -> &'static str {
    KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("unknown", |&(_, name)| name)
}

/// Whether a typed store holds elements of the NumPy dtype spelled `name`
/// (its canonical `dtype.str`).
#[pyfunction]
fn stores_dtype(name: &str) -> bool {
    Dtype::from_name(name).is_some()
}

/// The `ml_dtypes` float the store's dtype table names `name`, if any.
pub(crate) fn ml_float(name: &str) -> Option<Dtype> {
    Dtype::ML_FLOATS.iter().copied().find(|d| d.name() == name)
}

/// How a store's schema spells the NumPy dtype `dtype`: its `ml_dtypes`
/// name for an `ml_dtypes` float (`"bfloat16"`), else `dtype.str`.
#[pyfunction]
fn dtype_name(dtype: &Bound<'_, numpy::PyArrayDescr>) -> PyResult<String> {
    match crate::arrays::ml_float_name(dtype) {
        Some(name) => Ok(name),
        None => dtype.getattr("str")?.extract(),
    }
}

/// Adds the typed-store constants to `loaderx._native`.
pub(crate) fn add_constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let dtypes: Vec<&str> = Dtype::NUMBERS.iter().map(Dtype::name).collect();
    m.add("DTYPES", dtypes)?;
    let ml: Vec<&str> = Dtype::ML_FLOATS.iter().map(Dtype::name).collect();
    m.add("ML_DTYPES", ml)?;
    m.add_function(wrap_pyfunction!(dtype_name, m)?)?;
    m.add_function(wrap_pyfunction!(stores_dtype, m)?)?;
    let codecs = PyDict::new(py);
    for (tag, name) in typed_codecs() {
        codecs.set_item(name, tag.0)?;
    }
    m.add("TYPED_CODECS", codecs)?;
    m.add("MAX_NDIM", MAX_NDIM)?;
    m.add("MAX_LANES", MAX_LANES)?;
    m.add("MAX_ITEM_LEN", MAX_RECORD_LEN_V2)?;
    m.add("DEFAULT_DICT_SIZE", loaderx_store::DEFAULT_DICT_SIZE)?;
    m.add("MAX_DICT_SIZE", loaderx_store::MAX_DICT_SIZE)?;
    m.add_function(wrap_pyfunction!(train_dictionary, m)?)?;
    Ok(())
}

/// The schema of a new typed store at `path`, checked; `ValueError` naming
/// the argument at fault otherwise.
pub(crate) fn build_schema(
    path: &std::path::Path,
    kind: &str,
    dtype: &str,
    shape: Vec<u64>,
    ndim: usize,
    codec: &str,
    dictionary: Option<Vec<u8>>,
) -> PyResult<Schema> {
    let kind = KINDS
        .iter()
        .find(|(k, name)| *name == kind && *k != Kind::Bytes)
        .map(|(k, _)| *k)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown container kind {kind:?}, expected \"dense\" or \"ragged\""
            ))
        })?;
    let dtype = Dtype::from_name(dtype).ok_or_else(|| {
        PyValueError::new_err(format!(
            "dtype {dtype:?} cannot be stored: a store holds numbers (one of {:?}), \
             fixed-width bytes or text (|S<n>, |V<n>, <U<n>) and datetime64/timedelta64 \
             with a unit",
            Dtype::NUMBERS.iter().map(Dtype::name).collect::<Vec<_>>()
        ))
    })?;
    let codec = typed_codecs()
        .find(|(_, name)| *name == codec)
        .map(|(tag, _)| tag)
        .ok_or_else(|| {
            let known: Vec<&str> = typed_codecs().map(|(_, name)| name).collect();
            PyValueError::new_err(format!(
                "unknown codec {codec:?}, expected one of {known:?}"
            ))
        })?;
    let rank = if kind == Kind::Dense {
        shape.len()
    } else {
        ndim
    };
    let ndim = u8::try_from(rank)
        .ok()
        .filter(|&n| usize::from(n) <= MAX_NDIM)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "{rank} dimensions is more than the {MAX_NDIM} a record may have"
            ))
        })?;
    let mut schema = Schema {
        kind,
        dtype,
        shape,
        ndim,
        codec,
        dictionary,
        codecs: Vec::new(),
    };
    // Image stores list their codecs, as the store's create_v2 would.
    loaderx_store::list_image_codecs(&mut schema);
    schema.check().map_err(|err| {
        PyValueError::new_err(format!(
            "cannot create a store at {}: {err}",
            path.display()
        ))
    })?;
    Ok(schema)
}

/// `lanes` as the engine takes them, or `ValueError`.
pub(crate) fn lanes(lanes: usize) -> PyResult<u8> {
    u8::try_from(lanes)
        .ok()
        .filter(|&l| l >= 1 && usize::from(l) <= MAX_LANES)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "data_shards must be between 1 and {MAX_LANES}, got {lanes}"
            ))
        })
}

/// `{"kind", "dtype", "shape", "ndim", "codec", "item_len"}` of a schema
/// (`item_len` is `None` but for dense stores).
pub(crate) fn schema_dict<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("kind", kind_name(schema.kind))?;
    out.set_item("dtype", schema.dtype.name())?;
    out.set_item("shape", schema.shape.clone())?;
    out.set_item("ndim", schema.ndim)?;
    out.set_item("codec", schema.codec.name().unwrap_or("unknown"))?;
    out.set_item("item_len", schema.item_len())?;
    Ok(out)
}

/// The schema of a typed store, or `Error::NotAStore` naming what it is.
fn typed_schema(engine: &Engine, want: Kind) -> Result<&Schema> {
    match engine.schema() {
        Some(schema) if schema.kind == want => Ok(schema),
        found => Err(Error::NotAStore {
            path: engine.path().to_owned(),
            reason: format!(
                "it holds {}, not a {} container",
                found.map_or("a format v1 byte store", |s| match s.kind {
                    Kind::Dense => "a dense container",
                    Kind::Ragged => "a ragged container",
                    Kind::Bytes => "a byte store",
                }),
                kind_name(want)
            ),
        }),
    }
}

/// A zeroed buffer of `len` bytes, or `Error::OutOfMemory`.
fn buffer<T: Clone + Default>(len: usize) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })?;
    out.resize(len, T::default());
    Ok(out)
}

/// Bytes of one dense record, or `Error::NotAStore`.
pub(crate) fn dense_item_len(engine: &Engine) -> Result<usize> {
    let schema = typed_schema(engine, Kind::Dense)?;
    let len = schema.item_len().unwrap_or(0);
    // Bounded by MAX_RECORD_LEN_V2 (checked when the schema was read).
    Ok(usize::try_from(len).unwrap_or(usize::MAX))
}

/// A ragged batch: all records back to back, the `n + 1` byte offsets of
/// each in `data`, and the `n * ndim` dimensions.
pub(crate) struct RaggedBatch<B> {
    pub(crate) data: B,
    pub(crate) offsets: Vec<u64>,
    pub(crate) dims: Vec<u32>,
}

/// Records `idxs` of a ragged store in one buffer from `allocate` (sizes,
/// dimensions and bytes read under the caller's one lock).
pub(crate) fn gather_ragged<B: AsMut<[u8]>>(
    engine: &Engine,
    idxs: &[u64],
    allocate: impl FnOnce(usize) -> Result<B>,
) -> Result<RaggedBatch<B>> {
    let ndim = usize::from(typed_schema(engine, Kind::Ragged)?.ndim);
    let mut lens = buffer::<u32>(idxs.len())?;
    engine.lengths(idxs, &mut lens)?;
    let mut dims = buffer::<u32>(idxs.len() * ndim)?;
    engine.dims(idxs, &mut dims)?;
    let mut offsets = buffer::<u64>(idxs.len() + 1)?;
    let mut total = 0u64;
    for (slot, &len) in offsets[1..].iter_mut().zip(&lens) {
        total += u64::from(len);
        *slot = total;
    }
    let total = usize::try_from(total).map_err(|_| Error::OutOfMemory { bytes: total })?;
    let mut data = allocate(total)?;
    engine.gather_ragged(idxs, data.as_mut(), &offsets[..idxs.len()])?;
    Ok(RaggedBatch {
        data,
        offsets,
        dims,
    })
}

/// The rank of a ragged store's records.
pub(crate) fn ragged_ndim(engine: &Engine) -> Result<usize> {
    Ok(usize::from(typed_schema(engine, Kind::Ragged)?.ndim))
}

/// The dimensions of records `idxs` of a ragged store, `ndim` per record.
pub(crate) fn ragged_dims(engine: &Engine, idxs: &[u64]) -> Result<Vec<u32>> {
    let ndim = usize::from(typed_schema(engine, Kind::Ragged)?.ndim);
    let mut dims = buffer::<u32>(idxs.len() * ndim)?;
    engine.dims(idxs, &mut dims)?;
    Ok(dims)
}

/// Appends `n` dense records packed in `src`, with the schema's codec
/// (`append_fixed` would use the engine type's default codec).
pub(crate) fn append_dense(engine: &Engine, src: &[u8], n: usize) -> Result<u64> {
    let schema = typed_schema(engine, Kind::Dense)?;
    let codec = CodecId::from_tag(schema.codec).ok_or_else(|| Error::Schema {
        path: engine.path().to_owned(),
        reason: format!(
            "the schema names codec tag {}, which this build cannot write",
            schema.codec.0
        ),
    })?;
    let item_len = dense_item_len(engine)?;
    engine.append_fixed_with(codec, src, n, item_len)
}

/// Appends ragged records `src[offsets[i]..][..lens[i]]` of dimensions
/// `dims[i * ndim..][..ndim]`.
pub(crate) fn append_ragged(
    engine: &Engine,
    src: &[u8],
    offsets: &[u64],
    lens: &[u64],
    dims: &[u32],
) -> Result<u64> {
    typed_schema(engine, Kind::Ragged)?;
    let mut lens32 = buffer::<u32>(lens.len())?;
    for (position, (slot, &len)) in lens32.iter_mut().zip(lens).enumerate() {
        *slot = u32::try_from(len)
            .ok()
            .filter(|&l| l <= MAX_RECORD_LEN_V2)
            .ok_or(Error::RecordSize {
                position,
                len,
                limit: MAX_RECORD_LEN_V2,
            })?;
    }
    engine.append_shaped(src, offsets, &lens32, dims)
}

/// Trains a zstd dictionary of at most `max_size` bytes from the samples
/// laid end to end in `samples` (`sizes[i]` bytes each); GIL released.
#[pyfunction]
fn train_dictionary<'py>(
    py: Python<'py>,
    samples: numpy::PyReadonlyArray1<'_, u8>,
    sizes: numpy::PyReadonlyArray1<'_, u64>,
    max_size: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let samples = samples
        .as_slice()
        .map_err(|_| crate::errors::not_contiguous("samples"))?;
    let sizes = sizes
        .as_slice()
        .map_err(|_| crate::errors::not_contiguous("sizes"))?;
    let sizes: Vec<usize> = sizes
        .iter()
        .map(|&s| usize::try_from(s).unwrap_or(usize::MAX))
        .collect();
    let trained = py
        .detach(|| loaderx_store::train_dictionary(samples, &sizes, max_size))
        .map_err(|err| PyValueError::new_err(format!("cannot train a dictionary: {err}")))?;
    Ok(PyBytes::new(py, &trained))
}
