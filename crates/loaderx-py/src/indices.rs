//! Index objects as record indices: the one place the typed containers'
//! index rules live (`Dense`, `Ragged`, `Images`: `__getitem__`,
//! `__getitems__`, `gather_flat`, `shapes`, `delete`).
//!
//! An index is read in two steps, so that a read is one native call under
//! one lock: [`parse`] turns the Python object into a [`Selection`] with the
//! GIL held (nothing in it depends on the store's length), and
//! [`Selection::resolve`] turns that into record indices once the length is
//! known, under the store's lock with the GIL released. An index past the
//! end is left to the engine, which refuses it before gathering anything.
//!
//! The forms, and what they select:
//! * a Python or NumPy integer, or a 0-d integer array: one record (the
//!   result is that record, not a batch of one), negative counting from the
//!   end;
//! * a slice, `...` (every record), a tuple of integers (several records,
//!   not axes), a list or an integer array of any dtype, byte order, shape
//!   or layout (flattened): a batch, negative indices counting from the end;
//! * a boolean array of one entry per record: a mask.
//!
//! Anything else is a `TypeError` naming what is wrong (a float, a string,
//! a boolean scalar); a mask of another length an `IndexError`; an index
//! before the start a `ZrecordError` -3 (an `IndexError` too).

use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyEllipsis, PyInt, PySlice, PyTuple, PyType};

use loaderx_store::ErrorCode;

use crate::errors::zrecord_error;

static NP_INTEGER: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static NP_ASARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static OBJECT_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// What an index object selects, before the store's length is known.
#[derive(Debug)]
pub(crate) enum Selection {
    /// One record (not a batch).
    One(Wide),
    /// `start`, `stop`, `step` of a slice, as `PySlice_Unpack` leaves them.
    Range(isize, isize, isize),
    /// Every record.
    All,
    /// Indices as 64-bit words: unsigned, or (`signed`) two's complement,
    /// negative ones counting from the end.
    Words(Vec<u64>, bool),
    /// Indices of any size (from Python integers), up to the first item
    /// that is no integer, whose error is raised if nothing before it is.
    Wide(Vec<Wide>, Option<PyErr>),
    /// A boolean mask (its length is checked against the store's).
    Mask(Vec<bool>),
    /// A boolean array that cannot be a mask: its shape, as Python shows it.
    BadMask(String),
    /// A boolean scalar: its `repr`.
    BoolScalar(String),
}

/// An integer from Python: as `i128` when it fits, else as written.
#[derive(Debug)]
pub(crate) enum Wide {
    Int(i128),
    Huge { shown: String, negative: bool },
}

impl Wide {
    fn shown(&self) -> String {
        match self {
            Wide::Int(v) => v.to_string(),
            Wide::Huge { shown, .. } => shown.clone(),
        }
    }
}

/// Why an index selects nothing, raised once the GIL is back.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// `ZrecordError` -3.
    OutOfRange(String),
    TypeError(String),
    IndexError(String),
    Raised(PyErr),
}

impl Refusal {
    pub(crate) fn into_err(self, py: Python<'_>) -> PyErr {
        match self {
            Refusal::OutOfRange(message) => zrecord_error(py, ErrorCode::IndexOutOfRange, message),
            Refusal::TypeError(message) => PyTypeError::new_err(message),
            Refusal::IndexError(message) => PyIndexError::new_err(message),
            Refusal::Raised(err) => err,
        }
    }
}

/// The resolved selection: one record, or a batch.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) idxs: Vec<u64>,
    pub(crate) one: bool,
}

/// `isinstance(obj, (int, np.integer)) and not isinstance(obj, bool)`, or a
/// 0-d integer array: what selects one record.
fn is_record_index(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.is_instance_of::<PyBool>() {
        return Ok(false);
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(true);
    }
    if let Ok(array) = obj.cast::<PyUntypedArray>() {
        return Ok(array.ndim() == 0 && matches!(array.dtype().kind(), b'i' | b'u'));
    }
    let integer = NP_INTEGER.import(obj.py(), "numpy", "integer")?;
    obj.is_instance(integer)
}

/// `operator.index(obj)` as a [`Wide`].
fn wide(obj: &Bound<'_, PyAny>) -> PyResult<Wide> {
    let value = obj.py().import("operator")?.call_method1("index", (obj,))?;
    Ok(match value.extract::<i128>() {
        Ok(v) => Wide::Int(v),
        Err(_) => Wide::Huge {
            shown: value.str()?.to_string(),
            negative: value.lt(0)?,
        },
    })
}

/// What `idx` selects. With `batch`, an integer is a batch of one (as
/// `__getitems__` takes it).
pub(crate) fn parse(idx: &Bound<'_, PyAny>, batch: bool) -> PyResult<Selection> {
    if let Ok(array) = idx.cast::<PyUntypedArray>() {
        if !batch && array.ndim() == 0 && matches!(array.dtype().kind(), b'i' | b'u') {
            return Ok(Selection::One(wide(idx)?));
        }
        return from_array(idx, array, None);
    }
    if !batch && is_record_index(idx)? {
        if let Ok(v) = idx.extract::<i64>() {
            return Ok(Selection::One(Wide::Int(i128::from(v))));
        }
        return Ok(Selection::One(wide(idx)?));
    }
    if let Ok(slice) = idx.cast::<PySlice>() {
        return range(slice);
    }
    if idx.is_instance_of::<PyEllipsis>() {
        return Ok(Selection::All);
    }
    if let Ok(tuple) = idx.cast::<PyTuple>() {
        let mut values = Vec::with_capacity(tuple.len());
        for (pos, item) in tuple.iter().enumerate() {
            if !is_record_index(&item)? {
                return Err(PyTypeError::new_err(format!(
                    "a tuple selects records and must hold integers, got {} at position {pos}",
                    item.get_type().name()?
                )));
            }
            values.push(wide(&item)?);
        }
        return Ok(Selection::Wide(values, None));
    }
    let py = idx.py();
    let asarray = NP_ASARRAY.import(py, "numpy", "asarray")?;
    if is_record_index(idx)? {
        // A batch of one.
        let array = asarray.call1(([idx],))?;
        return from_array(&array, array.cast::<PyUntypedArray>()?, None);
    }
    let array = asarray.call1((idx,))?;
    let untyped = array.cast::<PyUntypedArray>()?;
    if untyped.dtype().kind() == b'f' && untyped.len() > 0 {
        // NumPy makes floats of a list mixing negative and >= 2**63
        // integers: look at the items themselves.
        let object = OBJECT_TYPE.import(py, "builtins", "object")?;
        let objects = match asarray.call1((idx, object)) {
            Ok(objects) => objects,
            Err(err)
                if err.is_instance_of::<PyValueError>(py)
                    || err.is_instance_of::<pyo3::exceptions::PyOverflowError>(py) =>
            {
                return Err(PyTypeError::new_err(format!(
                    "idxs must be an integer array-like: {}",
                    err.value(py)
                )));
            }
            Err(err) => return Err(err),
        };
        return from_array(&objects, objects.cast::<PyUntypedArray>()?, Some(idx));
    }
    from_array(&array, untyped, Some(idx))
}

/// The selection of an array (`given`: the object it was made from, if
/// any, for a boolean scalar's `repr`).
fn from_array(
    obj: &Bound<'_, PyAny>,
    array: &Bound<'_, PyUntypedArray>,
    given: Option<&Bound<'_, PyAny>>,
) -> PyResult<Selection> {
    let dtype = array.dtype();
    match dtype.kind() {
        b'b' => {
            if array.ndim() == 0 {
                return Ok(Selection::BoolScalar(
                    given.unwrap_or(obj).repr()?.to_string(),
                ));
            }
            if array.ndim() != 1 {
                return Ok(Selection::BadMask(shape_shown(array.shape())));
            }
            let bits = obj.cast::<PyArrayDyn<bool>>()?.to_owned_array();
            Ok(Selection::Mask(bits.iter().copied().collect()))
        }
        b'u' | b'i' => {
            let signed = dtype.kind() == b'i';
            if let Some(words) = crate::arrays::words(array) {
                return Ok(Selection::Words(words, signed));
            }
            Ok(Selection::Words(
                if signed {
                    signed_ints(obj)?
                } else {
                    unsigned_ints(obj)?
                },
                signed,
            ))
        }
        b'O' => objects(obj),
        b'f' if array.len() == 0 => Ok(Selection::Words(Vec::new(), false)),
        _ => Err(PyTypeError::new_err(format!(
            "idxs must be integers, got an array of dtype {dtype}"
        ))),
    }
}

/// An integer array's values, flattened in C order, as `u64` (an unsigned
/// dtype) or `i64` (a signed one): `$want` is the target, `$own` the
/// dtypes of that sign to try in place.
macro_rules! read_ints {
    ($obj:expr, $want:ty, $wide:literal, $($own:ty),*) => {{
        $(
            if let Ok(typed) = $obj.cast::<PyArrayDyn<$own>>() {
                if let Ok(read) = typed.try_readonly() {
                    return Ok(match read.as_slice() {
                        Ok(slice) => slice.iter().map(|&v| v as $want).collect(),
                        Err(_) => read.as_array().iter().map(|&v| v as $want).collect(),
                    });
                }
            }
        )*
        // Another byte order, or an array borrowed mutably elsewhere: a
        // copy as the widest integers of its sign.
        let copy = $obj.call_method1("astype", ($wide,))?;
        let read = copy.cast::<PyArrayDyn<$want>>()?.to_owned_array();
        Ok(read.iter().copied().collect())
    }};
}

fn unsigned_ints(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    read_ints!(obj, u64, "=u8", u64, u32, u16, u8)
}

/// Signed values as two's complement words.
fn signed_ints(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let values: PyResult<Vec<i64>> = (|| read_ints!(obj, i64, "=i8", i64, i32, i16, i8))();
    Ok(values?.into_iter().map(|v| v as u64).collect())
}

/// The items of an object array, each one an integer (not a bool), up to
/// the first that is not.
fn objects(obj: &Bound<'_, PyAny>) -> PyResult<Selection> {
    let items = obj.call_method1("reshape", (-1,))?.call_method0("tolist")?;
    let mut values = Vec::new();
    for (pos, item) in items.try_iter()?.enumerate() {
        let item = item?;
        let wrong = if item.is_instance_of::<PyBool>() {
            Some("a bool".to_owned())
        } else {
            match wide(&item) {
                Ok(value) => {
                    values.push(value);
                    None
                }
                Err(err) if err.is_instance_of::<PyTypeError>(obj.py()) => {
                    Some(item.get_type().name()?.to_string())
                }
                Err(err) => return Err(err),
            }
        };
        if let Some(what) = wrong {
            let err = PyTypeError::new_err(format!(
                "idxs must hold integers, got {what} at position {pos}"
            ));
            return Ok(Selection::Wide(values, Some(err)));
        }
    }
    Ok(Selection::Wide(values, None))
}

/// Python's `repr` of a shape tuple.
fn shape_shown(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => {
            let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
            format!("({})", dims.join(", "))
        }
    }
}

/// A slice bound as `PySlice_Unpack` reads it: an integer clamped to
/// `isize`, or `None`.
fn bound(value: Bound<'_, PyAny>) -> PyResult<Option<isize>> {
    if value.is_none() {
        return Ok(None);
    }
    let refused = || {
        PyTypeError::new_err("slice indices must be integers or None or have an __index__ method")
    };
    let index = value
        .py()
        .import("operator")?
        .call_method1("index", (&value,))
        .map_err(|_| refused())?;
    Ok(Some(match index.extract::<isize>() {
        Ok(v) => v,
        Err(_) if index.lt(0)? => isize::MIN,
        Err(_) => isize::MAX,
    }))
}

fn range(slice: &Bound<'_, PySlice>) -> PyResult<Selection> {
    let step = bound(slice.getattr("step")?)?.unwrap_or(1);
    if step == 0 {
        return Err(PyValueError::new_err("slice step cannot be zero"));
    }
    let step = step.max(-isize::MAX);
    let start = bound(slice.getattr("start")?)?.unwrap_or(if step < 0 { isize::MAX } else { 0 });
    let stop =
        bound(slice.getattr("stop")?)?.unwrap_or(if step < 0 { isize::MIN } else { isize::MAX });
    Ok(Selection::Range(start, stop, step))
}

impl Selection {
    /// How many records this selects, when that does not depend on the
    /// store's length (a batch; `None` for a slice, `...` and refusals).
    pub(crate) fn count(&self) -> Option<usize> {
        match self {
            Selection::One(_) => Some(1),
            Selection::Words(v, _) => Some(v.len()),
            Selection::Wide(v, None) => Some(v.len()),
            Selection::Mask(bits) => Some(bits.iter().filter(|&&b| b).count()),
            _ => None,
        }
    }

    /// The record indices of a store of `len` records at `path`: negatives
    /// counted from the end; indices past the end are left to the engine.
    pub(crate) fn resolve(self, len: u64, path: &str) -> Result<Resolved, Refusal> {
        let many = |idxs| Ok(Resolved { idxs, one: false });
        let before_start = |value: &dyn std::fmt::Display, pos: usize| {
            Refusal::OutOfRange(format!(
                "index {value} at position {pos} of idxs is out of range for {len} records"
            ))
        };
        let n = i128::from(len);
        match self {
            Selection::One(value) => {
                let found = match &value {
                    Wide::Int(i) if (-n..n).contains(i) => Some(if *i < 0 { i + n } else { *i }),
                    _ => None,
                };
                match found {
                    Some(i) => Ok(Resolved {
                        idxs: vec![i as u64],
                        one: true,
                    }),
                    None => Err(Refusal::OutOfRange(format!(
                        "index {} is out of range for {path} ({len} records)",
                        value.shown()
                    ))),
                }
            }
            Selection::All => many((0..len).collect()),
            Selection::Range(start, stop, step) => many(slice_indices(len, start, stop, step)),
            Selection::Words(idxs, false) => many(idxs),
            Selection::Words(mut idxs, true) => {
                if idxs.iter().any(|&w| (w as i64) < 0) {
                    for (pos, slot) in idxs.iter_mut().enumerate() {
                        let v = *slot as i64;
                        if v < 0 {
                            let wrapped = i128::from(v) + n;
                            if wrapped < 0 {
                                return Err(before_start(&v, pos));
                            }
                            *slot = wrapped as u64;
                        }
                    }
                }
                many(idxs)
            }
            Selection::Wide(values, wrong) => {
                let mut idxs = Vec::with_capacity(values.len());
                for (pos, value) in values.iter().enumerate() {
                    let v = match value {
                        Wide::Int(v) if *v < 0 => *v + n,
                        Wide::Int(v) => *v,
                        Wide::Huge { negative: true, .. } => -1,
                        Wide::Huge { .. } => i128::MAX,
                    };
                    if v < 0 {
                        return Err(before_start(&value.shown(), pos));
                    }
                    let Ok(v) = u64::try_from(v) else {
                        return Err(Refusal::OutOfRange(format!(
                            "index {} at position {pos} of idxs is out of range",
                            value.shown()
                        )));
                    };
                    idxs.push(v);
                }
                match wrong {
                    Some(err) => Err(Refusal::Raised(err)),
                    None => many(idxs),
                }
            }
            Selection::Mask(bits) => {
                if bits.len() as u64 != len {
                    return Err(mask_mismatch(&shape_shown(&[bits.len()]), len));
                }
                many((0..len).filter(|&i| bits[i as usize]).collect())
            }
            Selection::BadMask(shape) => Err(mask_mismatch(&shape, len)),
            Selection::BoolScalar(shown) => Err(Refusal::TypeError(format!(
                "a boolean scalar ({shown}) is not a record index or mask; a mask is a \
                 boolean array of {len} entries"
            ))),
        }
    }
}

fn mask_mismatch(shape: &str, len: u64) -> Refusal {
    Refusal::IndexError(format!(
        "boolean mask of shape {shape} does not match {len} records"
    ))
}

/// `range(*slice(start, stop, step).indices(len))`, as
/// `PySlice_AdjustIndices` computes it.
fn slice_indices(len: u64, start: isize, stop: isize, step: isize) -> Vec<u64> {
    let len = isize::try_from(len).unwrap_or(isize::MAX);
    let adjust = |at: isize| {
        if at < 0 {
            let at = at.saturating_add(len);
            if at < 0 {
                if step < 0 { -1 } else { 0 }
            } else {
                at
            }
        } else if at >= len {
            if step < 0 { len - 1 } else { len }
        } else {
            at
        }
    };
    let (start, stop) = (adjust(start), adjust(stop));
    let count = if step < 0 {
        if stop < start {
            (start - stop - 1) / -step + 1
        } else {
            0
        }
    } else if start < stop {
        (stop - start - 1) / step + 1
    } else {
        0
    };
    (0..count).map(|k| (start + k * step) as u64).collect()
}

/// `idxs`, any integer array-like, as a flat C-contiguous `uint64` array:
/// the 0.5.x API's index rule (`Zrecord`, `Dataset`; `_as_indices` there).
///
/// Negative entries raise `ZrecordError` -3 naming the first one, unless
/// `wrap` is given: then they count from the end of `wrap` records (and only
/// those still negative are refused). Anything that is not integral raises
/// `TypeError`; `what` and `noun` name the argument and its items in the
/// messages.
#[pyfunction]
#[pyo3(signature = (idxs, what = "idxs", noun = "index", wrap = None))]
pub(crate) fn as_indices<'py>(
    py: Python<'py>,
    idxs: &Bound<'py, PyAny>,
    what: &str,
    noun: &str,
    wrap: Option<u64>,
) -> PyResult<Bound<'py, numpy::PyArray1<u64>>> {
    let asarray = NP_ASARRAY.import(py, "numpy", "asarray")?;
    let array = if idxs.cast::<PyUntypedArray>().is_ok() {
        idxs.clone()
    } else if is_record_index(idxs)? {
        asarray.call1(([idxs],))?
    } else {
        let not_integers = |err: PyErr| {
            if err.is_instance_of::<PyValueError>(py)
                || err.is_instance_of::<pyo3::exceptions::PyOverflowError>(py)
            {
                PyTypeError::new_err(format!(
                    "{what} must be an integer array-like: {}",
                    err.value(py)
                ))
            } else {
                err
            }
        };
        let array = asarray.call1((idxs,)).map_err(not_integers)?;
        let untyped = array.cast::<PyUntypedArray>()?;
        if untyped.dtype().kind() == b'f' && untyped.len() > 0 {
            // NumPy makes floats of a list mixing negative and >= 2**63
            // integers: look at the items themselves.
            let object = OBJECT_TYPE.import(py, "builtins", "object")?;
            asarray.call1((idxs, object)).map_err(not_integers)?
        } else {
            array
        }
    };
    let flat = array.call_method1("reshape", (-1,))?;
    let untyped = flat.cast::<PyUntypedArray>()?;
    let dtype = untyped.dtype();
    let negative = |value: &dyn std::fmt::Display, pos: usize| {
        let message = match wrap {
            None => format!("{noun} {value} at position {pos} of {what} is negative"),
            Some(n) => format!(
                "{noun} {value} at position {pos} of {what} is out of range for {n} records"
            ),
        };
        zrecord_error(py, ErrorCode::IndexOutOfRange, message)
    };
    let words = match dtype.kind() {
        b'u' => unsigned_ints(&flat)?,
        b'i' => {
            let mut words = signed_ints(&flat)?;
            for (pos, word) in words.iter_mut().enumerate() {
                let v = *word as i64;
                if v < 0 {
                    let wrapped = wrap.map_or(-1, |n| i128::from(v) + i128::from(n));
                    if wrapped < 0 {
                        return Err(negative(&v, pos));
                    }
                    *word = wrapped as u64;
                }
            }
            words
        }
        b'f' | b'O' if untyped.len() == 0 => Vec::new(),
        b'O' => {
            let items = flat.call_method0("tolist")?;
            let mut words = Vec::new();
            for (pos, item) in items.try_iter()?.enumerate() {
                let item = item?;
                if item.is_instance_of::<PyBool>() {
                    return Err(PyTypeError::new_err(format!(
                        "{what} must hold integers, got a bool at position {pos}"
                    )));
                }
                let value = match wide(&item) {
                    Ok(value) => value,
                    Err(err) if err.is_instance_of::<PyTypeError>(py) => {
                        return Err(PyTypeError::new_err(format!(
                            "{what} must hold integers, got {} at position {pos}",
                            item.get_type().name()?
                        )));
                    }
                    Err(err) => return Err(err),
                };
                let v = match &value {
                    Wide::Int(v) if *v < 0 => wrap.map_or(-1, |n| *v + i128::from(n)),
                    Wide::Int(v) => *v,
                    Wide::Huge { negative: true, .. } => -1,
                    Wide::Huge { .. } => i128::MAX,
                };
                if v < 0 {
                    return Err(negative(&value.shown(), pos));
                }
                let Ok(v) = u64::try_from(v) else {
                    return Err(zrecord_error(
                        py,
                        ErrorCode::IndexOutOfRange,
                        format!(
                            "{noun} {} at position {pos} of {what} is out of range",
                            value.shown()
                        ),
                    ));
                };
                words.push(v);
            }
            words
        }
        _ => {
            return Err(PyTypeError::new_err(format!(
                "{what} must be integers, got an array of dtype {dtype}"
            )));
        }
    };
    Ok(numpy::PyArray1::from_vec(py, words))
}
