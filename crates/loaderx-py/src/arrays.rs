//! The memory of NumPy arrays handed over as a list (one array per record),
//! read in place: no packing copy and no Python call per array; and the
//! index arrays and new output arrays of `Dense`'s one-call batch read.
//!
//! A list of ragged records is the 2.x API's way to append (`Ragged.append`);
//! packing it in Python cost a few microseconds per record (checks, a
//! reshape and a `copyto` each), more than writing the bytes.

use std::ffi::c_int;

use numpy::npyffi::{NpyTypes, get_type_object, npy_intp};
use numpy::{
    PY_ARRAY_API, PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Records read in place: each one's bytes and, record after record, its
/// dimensions.
pub(crate) struct Records<'a> {
    pub(crate) parts: Vec<&'a [u8]>,
    pub(crate) dims: Vec<u32>,
}

/// Every item of `items` as bytes in place, when each is a C-contiguous
/// NumPy array of exactly `dtype` (byte order included) with `ndim` axes,
/// each axis and its bytes at most `max_len`, and not empty unless `empty`;
/// `None` as soon as one is not (the caller then checks them one by one and
/// names the culprit).
///
/// The slices borrow `items`: each `Bound` holds a reference to its array,
/// so neither the array nor the memory it views can be freed, and NumPy
/// refuses to resize an array that has other references. As with every
/// read the binding makes with the GIL released, another Python thread
/// writing into the same arrays meanwhile gets no guarantee of which bytes
/// are stored; and unlike the binding's typed array arguments these are not
/// registered with rust-numpy's borrow tracking, so an array that is at the
/// same time the destination of a gather on another thread is not refused
/// (its bytes are then whatever the gather had written when they were read).
pub(crate) fn records<'a>(
    items: &'a [Bound<'_, PyAny>],
    dtype: &Bound<'_, PyArrayDescr>,
    ndim: usize,
    max_len: u64,
    empty: bool,
) -> Option<Records<'a>> {
    let mut parts = Vec::with_capacity(items.len());
    let mut dims = Vec::with_capacity(items.len().checked_mul(ndim)?);
    let itemsize = dtype.itemsize() as u64;
    for item in items {
        let array = item.cast::<PyUntypedArray>().ok()?;
        if array.ndim() != ndim || !array.is_c_contiguous() {
            return None;
        }
        let own = array.dtype();
        // Equivalent dtypes have equal item sizes in NumPy; checked anyway,
        // since the length below (and so the slice) rests on it.
        if (!own.is(dtype) && !own.is_equiv_to(dtype)) || own.itemsize() as u64 != itemsize {
            return None;
        }
        let mut len = itemsize;
        for &d in array.shape() {
            dims.push(u32::try_from(d).ok()?);
            len = len.checked_mul(d as u64)?;
        }
        if len > max_len || (len == 0 && !empty) {
            return None;
        }
        parts.push(bytes_of(array, len as usize));
    }
    Some(Records { parts, dims })
}

/// The `len` bytes a C-contiguous array views.
fn bytes_of<'a>(array: &'a Bound<'_, PyUntypedArray>, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the array is C-contiguous and `len` is its itemsize times the
    // product of its shape, so its data pointer (non-null for a non-empty
    // array) starts `len` readable bytes; `array` keeps the array alive,
    // and with it the memory it views, for the slice's lifetime 'a.
    unsafe {
        let data = (*array.as_array_ptr())
            .fields
            .data
            .cast::<u8>()
            .cast_const();
        std::slice::from_raw_parts(data, len)
    }
}

/// The indices `array` holds, copied out, when it is a C-contiguous 1-D
/// array of native-order 64-bit integers (signed ones read as unsigned: a
/// negative index is then past any end) of at most `most` of them; `None`
/// for anything else, before copying. Read with the GIL held, so no other
/// Python code runs meanwhile (a native gather on another thread that
/// writes into this very array, with the GIL released, is not ruled out:
/// the array is not registered with rust-numpy's borrow tracking); the
/// copy is what a gather then uses with the GIL released.
pub(crate) fn word_indices(array: &Bound<'_, PyAny>, most: usize) -> Option<Vec<u64>> {
    let array = array.cast::<PyUntypedArray>().ok()?;
    if array.len() > most {
        return None;
    }
    words(array)
}

/// [`word_indices`] of an array already known to be one, with no bound on
/// its length.
pub(crate) fn words(array: &Bound<'_, PyUntypedArray>) -> Option<Vec<u64>> {
    let word = array.dtype();
    if array.ndim() != 1
        || !array.is_c_contiguous()
        || word.itemsize() != 8
        || !matches!(word.kind(), b'i' | b'u')
        || word.is_native_byteorder() != Some(true)
    {
        return None;
    }
    let bytes = bytes_of(array, array.len().checked_mul(8)?);
    Some(
        bytes
            .chunks_exact(8)
            .map(|word| word.try_into().map_or(0, u64::from_ne_bytes))
            .collect(),
    )
}

/// NumPy's built-in type numbers end below this (`NPY_NTYPES_LEGACY`);
/// other dtypes (user-defined, `StringDType`) may keep pointers in their
/// items, except the `ml_dtypes` floats ([`is_ml_float`]).
const BUILTIN_TYPES: c_int = 24;

/// Whether `dtype` is one of the plain-bytes floats of `ml_dtypes`
/// (`bfloat16`, the float8 types): a user-defined NumPy type defined in the
/// `ml_dtypes` package, whose name and item size are those of an entry of
/// the store's dtype table ([`Dtype::ML_FLOATS`]).
///
/// [`Dtype::ML_FLOATS`]: loaderx_store::format::v2::Dtype::ML_FLOATS
pub(crate) fn is_ml_float(dtype: &Bound<'_, PyArrayDescr>) -> bool {
    ml_float_name(dtype).is_some()
}

/// The store spelling of `dtype` when it is an `ml_dtypes` float.
pub(crate) fn ml_float_name(dtype: &Bound<'_, PyArrayDescr>) -> Option<String> {
    if dtype.num() < BUILTIN_TYPES || dtype.has_object() {
        return None;
    }
    let module = dtype.typeobj().getattr("__module__").ok()?;
    let module: String = module.extract().ok()?;
    if module != "ml_dtypes" && !module.starts_with("ml_dtypes.") {
        return None;
    }
    let name: String = dtype.getattr("name").ok()?.extract().ok()?;
    let known = crate::typed::ml_float(&name)?;
    (known.itemsize() as usize == dtype.itemsize()).then_some(name)
}

/// The bytes of one item shaped like `proto`'s rows: its dtype's size times
/// every axis but the first. `None` on overflow, and for a dtype whose
/// items stored bytes cannot be: one that holds Python objects or is not
/// one of NumPy's built-in types.
pub(crate) fn row_len(proto: &Bound<'_, PyUntypedArray>) -> Option<usize> {
    let dtype = proto.dtype();
    if dtype.has_object() || !((0..BUILTIN_TYPES).contains(&dtype.num()) || is_ml_float(&dtype)) {
        return None;
    }
    let shape = proto.shape();
    shape
        .get(1..)?
        .iter()
        .try_fold(dtype.itemsize(), |len, &d| len.checked_mul(d))
}

/// A new C-contiguous array of `proto`'s dtype shaped
/// `(rows, *proto.shape[1:])`, its bytes first written by `fill`. Nothing
/// else can reach the array before this returns it.
///
/// # Safety
///
/// `row` must be what [`row_len`] returns for `proto` (the caller has just
/// asked it, and this does not ask again: it is the hot path of small
/// batches). The bytes `fill` gets start uninitialised (NumPy's
/// allocation, as for `np.empty`): when it returns `Ok` it must have
/// written every one of them, and it must not read one it has not written.
pub(crate) unsafe fn new_rows_like<'py>(
    py: Python<'py>,
    proto: &Bound<'py, PyUntypedArray>,
    row: usize,
    rows: usize,
    fill: impl FnOnce(&mut [u8]) -> PyResult<()>,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let too_large = || PyValueError::new_err(format!("a batch of {rows} rows is too large"));
    let len = row
        .checked_mul(rows)
        .filter(|&len| isize::try_from(len).is_ok())
        .ok_or_else(too_large)?;
    // NumPy's own limit on dimensions (NPY_MAXDIMS, 64 since NumPy 2.0).
    let mut dims = [0 as npy_intp; 64];
    let shape = proto.shape();
    if shape.is_empty() || shape.len() > dims.len() {
        return Err(PyValueError::new_err(format!(
            "a prototype of {} dimensions cannot shape a batch: it needs 1 to {}",
            shape.len(),
            dims.len()
        )));
    }
    for (d, &s) in dims.iter_mut().zip(shape) {
        *d = s as npy_intp;
    }
    dims[0] = rows as npy_intp;
    let dims = &mut dims[..shape.len()];
    // SAFETY: `PyArray_NewFromDescr` takes the descriptor's reference
    // (`into_dtype_ptr` makes a new one) and, with no data or strides,
    // allocates a C-contiguous array of `dims`; a null result is the error
    // NumPy set.
    let out = unsafe {
        let made = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            get_type_object(py, NpyTypes::PyArray_Type),
            proto.dtype().into_dtype_ptr(),
            dims.len() as c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, made)?.cast_into_unchecked::<PyUntypedArray>()
    };
    if len > 0 {
        // SAFETY: the new array holds `len` bytes (its dtype's size times
        // its shape) from its data pointer, and only this function holds
        // a reference to it; they are uninitialised, which the caller's
        // `fill` is bound (above) to write before anything reads them.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut((*out.as_array_ptr()).fields.data.cast::<u8>(), len)
        };
        fill(bytes)?;
    } else {
        fill(&mut [])?;
    }
    Ok(out)
}
