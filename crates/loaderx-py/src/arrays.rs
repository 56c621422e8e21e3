//! The memory of NumPy arrays handed over as a list (one array per record),
//! read in place: no packing copy and no Python call per array.
//!
//! A list of ragged records is the 2.x API's way to append (`Ragged.append`);
//! packing it in Python cost a few microseconds per record (checks, a
//! reshape and a `copyto` each), more than writing the bytes.

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
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
