//! Engine errors as Python exceptions.
//!
//! Store errors become `loaderx.errors.ZrecordError(code, message)`: the
//! class lives in Python (so it pickles and documents like any other), and is
//! looked up once, lazily, the first time an error is raised. Sampler errors
//! are bad arguments, so they are `ValueError`s.

use loaderx_store::ErrorCode;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

static ZRECORD_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CLOSED_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static ARGUMENT_TYPE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `{code: (name, meaning)}` for every [`ErrorCode`]: the table
/// `ZrecordError` is built from (`loaderx._native.ERROR_CODES`).
pub(crate) fn error_codes(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let table = PyDict::new(py);
    for code in ErrorCode::ALL {
        table.set_item(code.value(), (code.name(), code.meaning()))?;
    }
    Ok(table)
}

/// `ZrecordError(code, message)`.
pub(crate) fn zrecord_error(py: Python<'_>, code: ErrorCode, message: String) -> PyErr {
    python_error(py, &ZRECORD_ERROR, "ZrecordError", (code.value(), message))
}

/// An instance of the exception class `name` of `loaderx.errors`, made
/// from `args` (the class is imported once, into `class`); if the import or
/// the call fails, that failure.
fn python_error<'py, A: pyo3::call::PyCallArgs<'py>>(
    py: Python<'py>,
    class: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    args: A,
) -> PyErr {
    match class
        .import(py, "loaderx.errors", name)
        .and_then(|class| class.call1(args))
    {
        Ok(instance) => PyErr::from_value(instance),
        Err(failed) => failed,
    }
}

/// A store error, with its stable code and its what-and-where message.
/// A read interrupted by Ctrl-C (a store in object storage waits on the
/// network) is `KeyboardInterrupt`.
pub(crate) fn store_error(py: Python<'_>, err: loaderx_store::Error) -> PyErr {
    if let loaderx_store::Error::Io { source, .. } = &err
        && source.kind() == std::io::ErrorKind::Interrupted
    {
        return pyo3::exceptions::PyKeyboardInterrupt::new_err(err.to_string());
    }
    zrecord_error(py, err.code(), err.to_string())
}

/// Whether Ctrl-C (or another signal whose handler raises) arrived: the
/// check a read from object storage makes while it waits
/// (`loaderx_remote::set_interrupt_check`). Only the main thread sees
/// signals; elsewhere this is false.
pub(crate) fn interrupted() -> bool {
    Python::attach(|py| py.check_signals().is_err())
}

/// A sampler that cannot be built or restored from what it was given.
pub(crate) fn sampler_error(err: loaderx_sampler::Error) -> PyErr {
    PyValueError::new_err(err.to_string())
}

/// An operation on a store that was closed: `loaderx.errors.ClosedError`,
/// a `ValueError` (as for a closed file) that is also a `RuntimeError`
/// (what loaderx 2.x raises).
pub(crate) fn closed(py: Python<'_>, path: &str) -> PyErr {
    let message = format!("operation on a closed store ({path})");
    python_error(py, &CLOSED_ERROR, "ClosedError", (message,))
}

/// An argument of the wrong type where loaderx 2.x raises `ValueError`:
/// `loaderx.errors.ArgumentTypeError`, a `TypeError` and a `ValueError`.
pub(crate) fn argument_type_error(py: Python<'_>, message: String) -> PyErr {
    python_error(py, &ARGUMENT_TYPE_ERROR, "ArgumentTypeError", (message,))
}

/// An array argument that is not contiguous (the Python layer normally
/// guarantees it; this covers direct callers of `loaderx._native`).
pub(crate) fn not_contiguous(what: &str) -> PyErr {
    PyValueError::new_err(format!("{what} must be a C-contiguous 1-D array"))
}
