//! The typed containers' arguments, checked once for every caller: the
//! rules and messages of `Dense.create`, `Ragged.create` and `open`
//! (`loaderx.containers.args` names them), against the facts of module
//! `typed`. Each returns the argument as the engine takes it, or raises
//! what loaderx 2.x code expects (`ArgumentTypeError` where 2.x raises
//! `ValueError` for a wrong type).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyString, PyTuple, PyType};

use loaderx_store::format::MAX_LANES;
use loaderx_store::format::v2::{Dtype, MAX_NDIM};

use crate::errors::argument_type_error;

static NP_INTEGER: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static NP_BOOL: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `isinstance(obj, (int, np.integer)) and not isinstance(obj, bool)`.
fn is_integer(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.is_instance_of::<PyBool>() {
        return Ok(false);
    }
    Ok(obj.is_instance_of::<PyInt>()
        || obj.is_instance(NP_INTEGER.import(obj.py(), "numpy", "integer")?)?)
}

/// `isinstance(obj, (bool, np.bool_))`.
fn is_bool(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(obj.is_instance_of::<PyBool>()
        || obj.is_instance(NP_BOOL.import(obj.py(), "numpy", "bool_")?)?)
}

/// `operator.index(obj)`.
fn index<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    obj.py().import("operator")?.call_method1("index", (obj,))
}

/// `obj` as `i64`, or `None` past it (a Python int of any size).
fn small(obj: &Bound<'_, PyAny>) -> Option<i64> {
    obj.extract::<i64>().ok()
}

fn repr(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(obj.repr()?.to_string())
}

/// `dtype` (anything `np.dtype` takes) as a stored element type.
#[pyfunction]
pub(crate) fn check_dtype<'py>(dtype: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = dtype.py();
    let found = match py.import("numpy")?.call_method1("dtype", (dtype,)) {
        Ok(found) => found,
        Err(err) if err.is_instance_of::<PyTypeError>(py) => {
            return Err(PyTypeError::new_err(format!(
                "dtype {} is not a NumPy dtype: {}",
                repr(dtype)?,
                err.value(py)
            )));
        }
        Err(err) => return Err(err),
    };
    if let Ok(descr) = found.cast::<numpy::PyArrayDescr>()
        && crate::arrays::is_ml_float(descr)
    {
        return Ok(found);
    }
    let shown = found.str()?.to_string();
    let refuse = |why: String| Err(PyValueError::new_err(why));
    if found.getattr("hasobject")?.is_truthy()? {
        return refuse(format!(
            "object dtypes cannot be stored (dtype {shown} holds Python objects; a container \
             stores plain numbers)"
        ));
    }
    if !found.getattr("fields")?.is_none() {
        return refuse(format!(
            "structured dtypes are not supported (dtype {shown}); store each field separately"
        ));
    }
    if !found.getattr("subdtype")?.is_none() {
        return refuse(format!(
            "subarray dtypes are not supported (dtype {shown}); put its dimensions in the shape"
        ));
    }
    let metadata = found.getattr("metadata")?;
    if metadata.is_truthy()? {
        return refuse(format!(
            "dtype metadata is not supported (dtype {shown} carries {})",
            metadata.str()?
        ));
    }
    let name: String = found.getattr("str")?.extract()?;
    if found.getattr("itemsize")?.extract::<usize>()? == 0 {
        return refuse(format!(
            "zero-itemsize dtypes cannot be stored (dtype {name})"
        ));
    }
    if Dtype::from_name(&name).is_none() {
        let kind: String = found.getattr("kind")?.extract()?;
        let why = if kind == "m" || kind == "M" {
            "a datetime64/timedelta64 needs a unit, e.g. datetime64[ns]".to_owned()
        } else {
            let numbers: Vec<&str> = Dtype::NUMBERS.iter().map(Dtype::name).collect();
            format!(
                "a store holds numbers (one of {}), fixed-width bytes or text (S, V, U) and \
                 datetime64/timedelta64 with a unit",
                PyList::new(py, numbers)?.repr()?
            )
        };
        return refuse(format!("dtype {name} ({shown}) cannot be stored: {why}"));
    }
    Ok(found)
}

/// `item_shape` (an integer or a sequence of them) as a tuple of
/// non-negative dimensions, at most `MAX_NDIM` of them.
#[pyfunction]
pub(crate) fn check_shape<'py>(item_shape: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let py = item_shape.py();
    let given = if is_integer(item_shape)? {
        PyTuple::new(py, [item_shape])?
    } else {
        match py
            .import("builtins")?
            .getattr("tuple")?
            .call1((item_shape,))
        {
            Ok(given) => given.cast_into::<PyTuple>()?,
            Err(err) if err.is_instance_of::<PyTypeError>(py) => {
                return Err(argument_type_error(
                    py,
                    format!(
                        "item_shape must be a tuple of integers, got {}",
                        repr(item_shape)?
                    ),
                ));
            }
            Err(err) => return Err(err),
        }
    };
    let not_integers = || {
        argument_type_error(
            py,
            format!(
                "item_shape dimensions must be integers, got {}",
                given.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
        )
    };
    let mut dims = Vec::with_capacity(given.len());
    for d in given.iter() {
        if is_bool(&d)? {
            return Err(not_integers());
        }
    }
    for d in given.iter() {
        match index(&d) {
            Ok(d) => dims.push(d),
            Err(err) if err.is_instance_of::<PyTypeError>(py) => return Err(not_integers()),
            Err(err) => return Err(err),
        }
    }
    let dims = PyTuple::new(py, dims)?;
    for d in dims.iter() {
        if d.lt(0)? {
            return Err(PyValueError::new_err(format!(
                "item_shape dimensions must be non-negative, got {}",
                dims.repr()?
            )));
        }
    }
    if dims.len() > MAX_NDIM {
        return Err(PyValueError::new_err(format!(
            "item_shape rank {} is more than the {MAX_NDIM} dimensions a record may have",
            dims.len()
        )));
    }
    Ok(dims)
}

/// `codec`, one of the typed codec names.
#[pyfunction]
pub(crate) fn check_codec<'py>(codec: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    let names: Vec<&str> = crate::typed::codec_names();
    if let Ok(name) = codec.cast::<PyString>()
        && names.contains(&name.to_cow()?.as_ref())
    {
        return Ok(name.clone());
    }
    Err(PyValueError::new_err(format!(
        "unknown codec {}, expected one of {}",
        repr(codec)?,
        PyList::new(codec.py(), names)?.repr()?
    )))
}

/// `dict_bytes` (anything with the buffer protocol, or `None`) as bytes;
/// a `zstd_dict` store needs non-empty ones.
#[pyfunction]
pub(crate) fn check_dictionary<'py>(
    codec: &str,
    dict_bytes: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let py = dict_bytes.py();
    let needed = "creating a zstd_dict store requires non-empty dict_bytes: train them with \
                  loaderx.utils.train_dict(sample_records)";
    if dict_bytes.is_none() {
        if codec == "zstd_dict" {
            return Err(PyValueError::new_err(needed));
        }
        return Ok(None);
    }
    let builtins = py.import("builtins")?;
    let found = match builtins.getattr("memoryview")?.call1((dict_bytes,)) {
        Ok(view) => builtins
            .getattr("bytes")?
            .call1((view,))?
            .cast_into::<PyBytes>()?,
        Err(err) if err.is_instance_of::<PyTypeError>(py) => {
            return Err(PyTypeError::new_err(format!(
                "dict_bytes must be bytes, got {}",
                dict_bytes.get_type().name()?
            )));
        }
        Err(err) => return Err(err),
    };
    if found.as_bytes().is_empty() && codec == "zstd_dict" {
        return Err(PyValueError::new_err(format!("{needed} (got 0 bytes)")));
    }
    Ok(Some(found))
}

/// An integer argument `what` within `lo..=hi` (a bool is no integer).
fn bounded(value: &Bound<'_, PyAny>, what: &str, lo: i64, hi: i64) -> PyResult<i64> {
    let py = value.py();
    let wrong = || {
        argument_type_error(
            py,
            format!(
                "{what} must be an integer, got {}",
                repr(value).unwrap_or_default()
            ),
        )
    };
    if is_bool(value)? {
        return Err(wrong());
    }
    let found = match index(value) {
        Ok(found) => found,
        Err(err) if err.is_instance_of::<PyTypeError>(py) => return Err(wrong()),
        Err(err) => return Err(err),
    };
    match small(&found) {
        Some(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be between {lo} and {hi}, got {}",
            found.str()?
        ))),
    }
}

/// `data_shards`, the write lanes: `1..=MAX_LANES`.
#[pyfunction]
pub(crate) fn check_shards(data_shards: &Bound<'_, PyAny>) -> PyResult<i64> {
    bounded(data_shards, "data_shards", 1, MAX_LANES as i64)
}

/// `ndim` of a ragged store: `1..=MAX_NDIM`.
#[pyfunction]
pub(crate) fn check_ndim(ndim: &Bound<'_, PyAny>) -> PyResult<i64> {
    bounded(ndim, "ndim", 1, MAX_NDIM as i64)
}

/// A JPEG `quality`, `1..=100`.
#[pyfunction]
pub(crate) fn check_quality(quality: &Bound<'_, PyAny>) -> PyResult<i64> {
    if !is_integer(quality)? {
        return Err(PyTypeError::new_err(format!(
            "quality must be an integer between 1 and 100, got {}",
            repr(quality)?
        )));
    }
    let value = quality.call_method0("__int__")?;
    match small(&value) {
        Some(v) if (1..=100).contains(&v) => Ok(v),
        _ => Err(PyValueError::new_err(format!(
            "quality must be between 1 and 100, got {}",
            value.str()?
        ))),
    }
}

/// `resize`, `(height, width)`, each side `1..=65535`.
#[pyfunction]
pub(crate) fn check_size<'py>(resize: &Bound<'py, PyAny>) -> PyResult<(i64, i64)> {
    let py = resize.py();
    let wrong = || {
        PyTypeError::new_err(format!(
            "resize must be (height, width), got {}",
            repr(resize).unwrap_or_default()
        ))
    };
    let mut sides = Vec::with_capacity(2);
    let items = match resize.try_iter() {
        Ok(items) => items,
        Err(err) if err.is_instance_of::<PyTypeError>(py) => return Err(wrong()),
        Err(err) => return Err(err),
    };
    for item in items {
        let item = item?;
        if sides.len() == 2 {
            return Err(wrong()); // too many values
        }
        match index(&item) {
            Ok(side) => sides.push(side),
            Err(err) if err.is_instance_of::<PyTypeError>(py) => return Err(wrong()),
            Err(err) => return Err(err),
        }
    }
    let [height, width] = sides.as_slice() else {
        return Err(wrong()); // not enough values
    };
    match (small(height), small(width)) {
        (Some(h), Some(w)) if (1..=65535).contains(&h) && (1..=65535).contains(&w) => Ok((h, w)),
        _ => Err(PyValueError::new_err(format!(
            "resize sides must be between 1 and 65535, got {}",
            PyTuple::new(py, [height, width])?.repr()?
        ))),
    }
}

/// Adds the checks to `loaderx._native`.
pub(crate) fn add_functions(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_dtype, m)?)?;
    m.add_function(wrap_pyfunction!(check_shape, m)?)?;
    m.add_function(wrap_pyfunction!(check_codec, m)?)?;
    m.add_function(wrap_pyfunction!(check_dictionary, m)?)?;
    m.add_function(wrap_pyfunction!(check_shards, m)?)?;
    m.add_function(wrap_pyfunction!(check_ndim, m)?)?;
    m.add_function(wrap_pyfunction!(check_quality, m)?)?;
    m.add_function(wrap_pyfunction!(check_size, m)?)?;
    Ok(())
}
