//! DLPack export: `DLTensor`, the read result of the loaderx 2.8 API.
//!
//! A `DLTensor` holds a C-contiguous CPU NumPy array (the batch buffer a
//! gather filled) and hands its memory out through `__dlpack__`: a
//! versioned DLPack 1.x capsule (`dltensor_versioned`) when the consumer
//! says it reads one (`max_version=(1, m)`), the legacy `dltensor` capsule
//! otherwise. Rules:
//!
//! * Every capsule keeps the array alive: its manager context holds a
//!   strong reference, released by the deleter (the consumer's, once it is
//!   done with the memory, or the capsule's destructor when nobody
//!   consumed it). The memory therefore outlives the `DLTensor`, the store
//!   and the loader that produced it for as long as any consumer holds it;
//!   nothing a consumer receives can dangle.
//! * The memory is shared, never copied, unless `copy=True` (then a fresh
//!   array, flagged `IS_COPIED`); `copy=False` is honoured (never a copy).
//! * A read-only array is exported with the `READ_ONLY` flag (versioned
//!   capsules; a legacy consumer cannot be told, so a read-only array is
//!   refused there unless `copy=True`).
//! * The device is the CPU, `(1, 0)`; asking for another device is a
//!   `BufferError`, as the protocol says.

use std::ffi::{CStr, c_void};
use std::ptr;

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// `kDLCPU`.
const CPU: i32 = 1;
/// The newest DLPack version this module produces.
const VERSION: (u32, u32) = (1, 1);
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const FLAG_READ_ONLY: u64 = 1;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`.
const FLAG_IS_COPIED: u64 = 1 << 1;

const LEGACY_NAME: &CStr = c"dltensor";
const VERSIONED_NAME: &CStr = c"dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

#[repr(C)]
struct DlPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DlManagedTensorVersioned {
    version: DlPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DlTensor,
}

/// What a capsule owns besides its managed tensor: the shape the tensor
/// points into and a strong reference to the array whose memory it views.
struct Context {
    shape: Vec<i64>,
    /// Held, never read: dropping it releases the array.
    #[allow(dead_code)]
    owner: Py<PyAny>,
}

/// The DLPack type code and bits of a NumPy dtype, by its kind and size, or
/// by its `ml_dtypes` name.
fn dl_dtype(descr: &Bound<'_, numpy::PyArrayDescr>) -> PyResult<DlDataType> {
    let bits = u8::try_from(descr.itemsize() * 8).ok();
    let plain = match descr.kind() {
        b'b' => Some(6),
        b'i' => Some(0),
        b'u' => Some(1),
        b'f' if descr.num() < 256 => Some(2),
        b'c' => Some(5),
        _ => None,
    };
    let code = match plain {
        Some(code) if descr.is_native_byteorder() != Some(false) => Some(code),
        Some(_) => None,
        None => crate::arrays::ml_float_name(descr).and_then(|name| {
            Some(match name.as_str() {
                "bfloat16" => 4,
                "float8_e3m4" => 7,
                "float8_e4m3" => 8,
                "float8_e4m3b11fnuz" => 9,
                "float8_e4m3fn" => 10,
                "float8_e4m3fnuz" => 11,
                "float8_e5m2" => 12,
                "float8_e5m2fnuz" => 13,
                "float8_e8m0fnu" => 14,
                _ => return None,
            })
        }),
    };
    match (code, bits) {
        (Some(code), Some(bits)) => Ok(DlDataType {
            code,
            bits,
            lanes: 1,
        }),
        _ => Err(PyTypeError::new_err(format!(
            "dtype {} has no DLPack type code",
            descr.str()?
        ))),
    }
}

/// A read result of the loaderx 2.8 API: one CPU array, exported through
/// DLPack only (`__dlpack__`, `__dlpack_device__`).
#[pyclass(module = "loaderx.zrecord", name = "DLTensor", frozen)]
pub(crate) struct DlPackTensor {
    array: Py<PyUntypedArray>,
    dtype: DlDataType,
}

impl DlPackTensor {
    /// A `DLTensor` viewing `array` (C-contiguous, CPU memory).
    pub(crate) fn wrap(array: &Bound<'_, PyAny>) -> PyResult<Self> {
        let array = array.cast::<PyUntypedArray>().map_err(|_| {
            PyTypeError::new_err(format!(
                "a DLTensor views a NumPy array, got {}",
                array
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?;
        if !array.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "a DLTensor views a C-contiguous array",
            ));
        }
        let dtype = dl_dtype(&array.dtype())?;
        Ok(Self {
            array: array.clone().unbind(),
            dtype,
        })
    }

    /// The managed tensor of `array`, its context leaked into the returned
    /// pointers until the deleter runs.
    fn tensor(&self, array: &Bound<'_, PyUntypedArray>) -> (DlTensor, *mut Context) {
        let shape: Vec<i64> = array.shape().iter().map(|&d| d as i64).collect();
        let mut ctx = Box::new(Context {
            shape,
            owner: array.clone().into_any().unbind(),
        });
        // SAFETY: `array` is a live NumPy array; its data pointer is valid
        // for as long as the array lives, which the context's reference
        // guarantees.
        let data = unsafe { (*array.as_array_ptr()).fields.data.cast::<c_void>() };
        let tensor = DlTensor {
            data,
            device: DlDevice {
                device_type: CPU,
                device_id: 0,
            },
            ndim: i32::try_from(ctx.shape.len()).unwrap_or(i32::MAX),
            dtype: self.dtype,
            shape: ctx.shape.as_mut_ptr(),
            // Compact row-major: DLPack's null strides.
            strides: ptr::null_mut(),
            byte_offset: 0,
        };
        (tensor, Box::into_raw(ctx))
    }
}

/// Frees a context (and with it the array reference) with the GIL held.
///
/// # Safety
/// `ctx` comes from `Box::into_raw` in [`DlPackTensor::tensor`] and is
/// freed once.
unsafe fn free_context(ctx: *mut Context) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: as the function's contract says.
    let ctx = unsafe { Box::from_raw(ctx) };
    Python::attach(move |_| drop(ctx));
}

unsafe extern "C" fn delete_legacy(managed: *mut DlManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the box `export_legacy` leaked, deleted once
    // (by its consumer or by the capsule destructor, never both).
    let managed = unsafe { Box::from_raw(managed) };
    // SAFETY: its context, leaked with it.
    unsafe { free_context(managed.manager_ctx.cast()) };
}

unsafe extern "C" fn delete_versioned(managed: *mut DlManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: as in `delete_legacy`.
    let managed = unsafe { Box::from_raw(managed) };
    // SAFETY: its context, leaked with it.
    unsafe { free_context(managed.manager_ctx.cast()) };
}

/// The destructor of a capsule nobody consumed (a consumer renames it to
/// `used_dltensor[_versioned]` and owns the tensor from then on). It may
/// run while an exception is pending (a consumer that refused the tensor,
/// say for its dtype, drops the capsule before returning its error): that
/// exception is kept, whatever the freeing does.
// `PyErr_Fetch`/`PyErr_Restore` are the limited API's pair on every Python
// the abi3 wheel supports.
#[allow(deprecated)]
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    let mut pending = [ptr::null_mut(); 3];
    // SAFETY: called by Python with the GIL held; the three out-pointers
    // are valid, and what they receive is restored below.
    unsafe {
        pyo3::ffi::PyErr_Fetch(
            &raw mut pending[0],
            &raw mut pending[1],
            &raw mut pending[2],
        )
    };
    // SAFETY: called by Python with a live capsule; the checks below read
    // its name and pointer only through the capsule API.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, VERSIONED_NAME.as_ptr()) == 1 {
            let managed = pyo3::ffi::PyCapsule_GetPointer(capsule, VERSIONED_NAME.as_ptr())
                .cast::<DlManagedTensorVersioned>();
            if let Some(deleter) = managed.as_ref().and_then(|m| m.deleter) {
                deleter(managed);
            }
        } else if pyo3::ffi::PyCapsule_IsValid(capsule, LEGACY_NAME.as_ptr()) == 1 {
            let managed = pyo3::ffi::PyCapsule_GetPointer(capsule, LEGACY_NAME.as_ptr())
                .cast::<DlManagedTensor>();
            if let Some(deleter) = managed.as_ref().and_then(|m| m.deleter) {
                deleter(managed);
            }
        }
        // A consumed capsule: nothing of ours left to free. Whatever was
        // pending before is pending again (and nothing raised here is).
        pyo3::ffi::PyErr_Restore(pending[0], pending[1], pending[2]);
    }
}

/// `(major, minor)` of a `max_version` argument.
fn version_of(max_version: &Bound<'_, PyAny>) -> PyResult<(u32, u32)> {
    let pair = max_version
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err("max_version must be a tuple (major, minor) or None"))?;
    if pair.len() != 2 {
        return Err(PyTypeError::new_err(
            "max_version must be a tuple (major, minor) or None",
        ));
    }
    Ok((pair.get_item(0)?.extract()?, pair.get_item(1)?.extract()?))
}

#[pymethods]
impl DlPackTensor {
    /// A DLPack capsule of the tensor (see the module rules).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(stream) = stream
            && !stream.is_none()
        {
            // The CPU has no streams: None or -1 only (as the protocol says).
            let value: Option<i64> = stream.extract().ok();
            if value != Some(-1) {
                return Err(PyBufferError::new_err(format!(
                    "stream {} for a CPU tensor: only None or -1",
                    stream.repr()?
                )));
            }
        }
        if let Some(device) = dl_device
            && !device.is_none()
        {
            let (kind, id): (i32, i32) = device.extract()?;
            if (kind, id) != (CPU, 0) {
                return Err(PyBufferError::new_err(format!(
                    "this DLTensor is on the CPU (1, 0), not on device ({kind}, {id}); \
                     copy it with the framework"
                )));
            }
        }
        let version = match max_version {
            Some(v) if !v.is_none() => Some(version_of(v)?),
            _ => None,
        };
        let source = self.array.bind(py);
        let copied = copy == Some(true);
        let array = if copied {
            py.import("numpy")?
                .call_method1("array", (source,))?
                .cast_into::<PyUntypedArray>()?
        } else {
            source.clone()
        };
        // SAFETY: reads the flags of a live array.
        let writeable = unsafe { (*array.as_array_ptr()).fields.flags }
            & numpy::npyffi::NPY_ARRAY_WRITEABLE
            != 0;
        let (tensor, ctx) = self.tensor(&array);
        let capsule = match version {
            Some((major, minor)) if major >= 1 => {
                let minor = if major == VERSION.0 {
                    minor.min(VERSION.1)
                } else {
                    VERSION.1
                };
                let mut flags = 0;
                if !writeable {
                    flags |= FLAG_READ_ONLY;
                }
                if copied {
                    flags |= FLAG_IS_COPIED;
                }
                let managed = Box::into_raw(Box::new(DlManagedTensorVersioned {
                    version: DlPackVersion {
                        major: VERSION.0,
                        minor,
                    },
                    manager_ctx: ctx.cast(),
                    deleter: Some(delete_versioned),
                    flags,
                    dl_tensor: tensor,
                }));
                // SAFETY: a new capsule owning `managed` (freed by its
                // destructor unless a consumer takes it over).
                unsafe {
                    pyo3::ffi::PyCapsule_New(
                        managed.cast(),
                        VERSIONED_NAME.as_ptr(),
                        Some(capsule_destructor),
                    )
                }
            }
            _ => {
                if !writeable {
                    // SAFETY: `ctx` was just leaked by `tensor` and is freed once.
                    unsafe { free_context(ctx) };
                    return Err(PyBufferError::new_err(
                        "a read-only DLTensor cannot be exported to a DLPack 0.x consumer \
                         (it has no read-only flag): pass max_version=(1, 0) or copy=True",
                    ));
                }
                let managed = Box::into_raw(Box::new(DlManagedTensor {
                    dl_tensor: tensor,
                    manager_ctx: ctx.cast(),
                    deleter: Some(delete_legacy),
                }));
                // SAFETY: as above.
                unsafe {
                    pyo3::ffi::PyCapsule_New(
                        managed.cast(),
                        LEGACY_NAME.as_ptr(),
                        Some(capsule_destructor),
                    )
                }
            }
        };
        // SAFETY: a new reference or null with an exception set.
        unsafe { Bound::from_owned_ptr_or_err(py, capsule) }
    }

    /// `(kDLCPU, 0)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (CPU, 0)
    }

    /// The shape, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.array.bind(py).shape())
    }

    /// The NumPy dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, numpy::PyArrayDescr> {
        self.array.bind(py).dtype()
    }

    /// Number of axes.
    #[getter]
    fn ndim(&self, py: Python<'_>) -> usize {
        self.array.bind(py).ndim()
    }

    /// `(kDLCPU, 0)`, as `__dlpack_device__`.
    #[getter]
    fn device(&self) -> (i32, i32) {
        (CPU, 0)
    }

    /// Records along the first axis (a 0-d tensor has no length).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.array
            .bind(py)
            .shape()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d DLTensor"))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let array = self.array.bind(py);
        Ok(format!(
            "DLTensor(shape={:?}, dtype={}, device=cpu)",
            array.shape(),
            array.dtype().str()?
        ))
    }

    /// `tensor[i]`: a zero-copy `DLTensor` of one row (or of what the index
    /// selects, when that is C-contiguous); out of range is `IndexError`.
    fn __getitem__(&self, py: Python<'_>, idx: &Bound<'_, PyAny>) -> PyResult<Self> {
        let part = self.array.bind(py).get_item(idx)?;
        let part = if part.cast::<PyUntypedArray>().is_ok() {
            part
        } else {
            // A scalar: its 0-d array (a copy of one element).
            py.import("numpy")?.call_method1("asarray", (part,))?
        };
        Self::wrap(&part)
    }

    /// A `DLTensor` viewing `array` without a copy (C-contiguous, CPU).
    #[staticmethod]
    fn _wrap(array: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::wrap(array)
    }
}

/// Owns an imported DLPack tensor until NumPy drops the array viewing it:
/// the base object of the arrays [`import`] makes; dropping it calls the
/// producer's deleter.
#[pyclass(module = "loaderx._native", frozen)]
pub(crate) struct DlPackImport {
    legacy: *mut DlManagedTensor,
    versioned: *mut DlManagedTensorVersioned,
}

// SAFETY: the pointers are only dereferenced to call the producer's
// deleter, once, on drop; DLPack deleters may be called from any thread.
unsafe impl Send for DlPackImport {}
// SAFETY: as above; nothing reads through `&self`.
unsafe impl Sync for DlPackImport {}

impl Drop for DlPackImport {
    fn drop(&mut self) {
        // SAFETY: each pointer is a consumed managed tensor this object
        // took over from its capsule; its deleter runs exactly once here.
        unsafe {
            if let Some(m) = self.versioned.as_ref()
                && let Some(deleter) = m.deleter
            {
                deleter(self.versioned);
            }
            if let Some(m) = self.legacy.as_ref()
                && let Some(deleter) = m.deleter
            {
                deleter(self.legacy);
            }
        }
    }
}

/// A NumPy array of `dtype` over the memory of the CPU DLPack producer
/// `producer` (no copy): its `__dlpack__` capsule is consumed, checked
/// (CPU, the element type of `dtype`, compact row-major) and kept alive by
/// the array. For the element types NumPy cannot import itself
/// (`bfloat16`, float8 from PyTorch or JAX); `TypeError`/`ValueError`
/// naming what does not match otherwise.
#[pyfunction]
pub(crate) fn import_dlpack<'py>(
    producer: &Bound<'py, PyAny>,
    dtype: &Bound<'py, numpy::PyArrayDescr>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = producer.py();
    let want = dl_dtype(dtype)?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("max_version", (VERSION.0, VERSION.1))?;
    let capsule = match producer.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => producer.call_method0("__dlpack__")?,
        Err(e) => return Err(e),
    };
    let raw = capsule.as_ptr();
    let mut holder = DlPackImport {
        legacy: ptr::null_mut(),
        versioned: ptr::null_mut(),
    };
    // SAFETY: `raw` is a live object; the capsule API checks its type and
    // name, and a pointer taken from a valid capsule is the producer's
    // managed tensor, which renaming the capsule hands over to us.
    let (tensor, read_only) = unsafe {
        if pyo3::ffi::PyCapsule_IsValid(raw, VERSIONED_NAME.as_ptr()) == 1 {
            let m = pyo3::ffi::PyCapsule_GetPointer(raw, VERSIONED_NAME.as_ptr())
                .cast::<DlManagedTensorVersioned>();
            if pyo3::ffi::PyCapsule_SetName(raw, c"used_dltensor_versioned".as_ptr()) != 0 {
                return Err(PyErr::fetch(py));
            }
            holder.versioned = m;
            let m = &*m;
            if m.version.major != 1 {
                return Err(PyBufferError::new_err(format!(
                    "DLPack version {}.{} is not 1.x",
                    m.version.major, m.version.minor
                )));
            }
            (
                &m.dl_tensor as *const DlTensor,
                m.flags & FLAG_READ_ONLY != 0,
            )
        } else if pyo3::ffi::PyCapsule_IsValid(raw, LEGACY_NAME.as_ptr()) == 1 {
            let m = pyo3::ffi::PyCapsule_GetPointer(raw, LEGACY_NAME.as_ptr())
                .cast::<DlManagedTensor>();
            if pyo3::ffi::PyCapsule_SetName(raw, c"used_dltensor".as_ptr()) != 0 {
                return Err(PyErr::fetch(py));
            }
            holder.legacy = m;
            (&(*m).dl_tensor as *const DlTensor, false)
        } else {
            pyo3::ffi::PyErr_Clear();
            return Err(PyTypeError::new_err(
                "__dlpack__ returned no unconsumed DLPack capsule",
            ));
        }
    };
    // SAFETY: the producer keeps the tensor valid until its deleter runs,
    // which `holder` does only when dropped.
    let tensor = unsafe { &*tensor };
    if tensor.device.device_type != CPU && tensor.device.device_type != 3 {
        return Err(PyBufferError::new_err(format!(
            "a DLPack tensor on device type {} cannot be appended: only CPU memory",
            tensor.device.device_type
        )));
    }
    let (code, bits, lanes) = (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes);
    if (code, bits, lanes) != (want.code, want.bits, want.lanes) {
        return Err(PyValueError::new_err(format!(
            "DLPack element type (code {code}, {bits} bits, {lanes} lanes) is not the store \
             dtype {} (code {}, {} bits)",
            dtype.str()?,
            want.code,
            want.bits
        )));
    }
    let ndim = usize::try_from(tensor.ndim).unwrap_or(0);
    let shape: Vec<i64> = if ndim == 0 {
        Vec::new()
    } else {
        // SAFETY: DLPack's shape holds `ndim` dimensions.
        unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }.to_vec()
    };
    if !tensor.strides.is_null() && ndim > 0 {
        // SAFETY: as for the shape.
        let strides = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
        let mut expect = 1i64;
        for (&d, &s) in shape.iter().zip(strides).rev() {
            if d > 1 && s != expect {
                return Err(PyValueError::new_err(
                    "append requires a C-contiguous tensor",
                ));
            }
            expect = expect.saturating_mul(d);
        }
    }
    let mut dims: Vec<numpy::npyffi::npy_intp> = shape
        .iter()
        .map(|&d| d as numpy::npyffi::npy_intp)
        .collect();
    // SAFETY: the data pointer plus offset starts the tensor's compact
    // elements (checked above), kept alive by `holder`, which becomes the
    // array's base; `into_dtype_ptr` hands NumPy a new descriptor reference.
    unsafe {
        let data = tensor
            .data
            .cast::<u8>()
            .add(usize::try_from(tensor.byte_offset).unwrap_or(0));
        let flags = if read_only {
            numpy::npyffi::NPY_ARRAY_C_CONTIGUOUS
        } else {
            numpy::npyffi::NPY_ARRAY_C_CONTIGUOUS | numpy::npyffi::NPY_ARRAY_WRITEABLE
        };
        let made = numpy::PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            numpy::npyffi::get_type_object(py, numpy::npyffi::NpyTypes::PyArray_Type),
            dtype.clone().into_dtype_ptr(),
            dims.len() as std::ffi::c_int,
            dims.as_mut_ptr(),
            ptr::null_mut(),
            data.cast(),
            flags,
            ptr::null_mut(),
        );
        let array = Bound::from_owned_ptr_or_err(py, made)?;
        let base = Bound::new(py, holder)?;
        if numpy::PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr().cast(), base.into_ptr())
            != 0
        {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}
