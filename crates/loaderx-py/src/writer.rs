//! Writes behind the call: a writer of a compressing codec hands a large
//! append (records already copied into arrays of its own) to a helper
//! thread and returns, so the caller prepares the next records while these
//! are encoded and written (`Dense.append`, `Ragged.append`,
//! `Ragged.append_flat`).
//!
//! The rules, which every other call on the handle relies on:
//! * at most one write is in flight; the next call on the handle (an
//!   append, `len`, `sync`, `verify`, `stats`, `close`...) first waits for
//!   it ([`Behind::settle`]) and raises its error, once, with a note naming
//!   the append that failed (none of its records was stored; the ones
//!   before it were);
//! * `close` waits for the write in flight, under the same lock an append
//!   takes to submit one, so an append racing a close is either stored or
//!   raises `ClosedError`;
//! * a child forked from the process that created a writer has a copy of
//!   it whose helper thread does not exist there: its appends, `sync` and
//!   `len` raise `ZrecordError` -2 at once, and its `close` forgets the
//!   write in flight (the parent's) instead of waiting for it.
//!
//! The helper thread reads the arrays it was handed without the GIL. Their
//! memory is the writer's own: the Python layer passes only copies it made
//! for this write (never an array a caller holds), and keeps no reference
//! to them but through this module, which holds one ([`Flight::keep`]) until
//! the thread has been joined; the buffer of a finished dense write is
//! handed back for the next copy ([`Behind::take_spare`]) only then. A handle
//! dropped unclosed waits for its write first ([`Behind::finish`]). So the
//! memory stays allocated and unchanged for as long as the thread reads it.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;

use crate::errors::store_error;
use crate::store::Handle;

/// Part of the note added to the error of a write made behind an append,
/// by which Python recognises it (`loaderx._native.BEHIND_NOTE`).
pub(crate) const BEHIND_NOTE: &str = "written behind the call";

/// The write in flight of one writer, and the buffer of the last one.
#[derive(Default)]
pub(crate) struct Behind {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    flight: Option<Flight>,
    spare: Option<Py<PyAny>>,
}

struct Flight {
    thread: JoinHandle<loaderx_store::Result<u64>>,
    /// The arrays the thread reads (the first is the recyclable buffer of a
    /// dense write), kept alive until it is joined.
    keep: Vec<Py<PyAny>>,
    dense: bool,
    records: usize,
}

/// The bytes of a C-contiguous array as a `'static` slice the helper
/// thread reads.
///
/// # Safety
///
/// The caller keeps a reference to `array` until every use of the slice
/// is over, and nothing writes to its memory meanwhile (module doc).
#[allow(unsafe_code)]
unsafe fn bytes_of(array: &Bound<'_, PyAny>, what: &str) -> PyResult<&'static [u8]> {
    let array = array.cast::<PyUntypedArray>()?;
    if !array.is_c_contiguous() {
        return Err(crate::errors::not_contiguous(what));
    }
    let len = array.len() * array.dtype().itemsize();
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: a C-contiguous, non-empty array's data pointer starts `len`
    // readable bytes (its length times its itemsize); the caller keeps the
    // array, and so that memory, alive and unchanged while the slice is used.
    Ok(unsafe {
        std::slice::from_raw_parts(
            (*array.as_array_ptr())
                .fields
                .data
                .cast::<u8>()
                .cast_const(),
            len,
        )
    })
}

use numpy::PyArrayDescrMethods;

impl Behind {
    /// Waits for the write in flight, if any (a no-op in a forked child,
    /// where its thread does not exist); raises its error with the note.
    pub(crate) fn settle(&self, py: Python<'_>, handle: &Handle) -> PyResult<()> {
        if handle.forked() {
            return Ok(());
        }
        let mut state = self
            .state
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        settle_locked(py, &mut state, handle)
    }

    /// The buffer of the last finished dense write, for the next copy.
    pub(crate) fn take_spare(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let mut state = self
            .state
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        state.spare.take()
    }

    /// Runs `write` on the arrays `keep` (each C-contiguous) on a helper
    /// thread, once the write before it has finished (raising that one's
    /// error instead); `ClosedError` if the store was closed meanwhile.
    pub(crate) fn submit(
        &self,
        py: Python<'_>,
        handle: &Arc<Handle>,
        keep: Vec<Bound<'_, PyAny>>,
        dense: bool,
        records: usize,
        write: impl FnOnce(&crate::typed::Engine, &[&'static [u8]]) -> loaderx_store::Result<u64>
        + Send
        + 'static,
    ) -> PyResult<()> {
        let mut state = self
            .state
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        settle_locked(py, &mut state, handle)?;
        handle.check_open(py)?;
        let mut parts = Vec::with_capacity(keep.len());
        for (pos, array) in keep.iter().enumerate() {
            // SAFETY: `keep` goes into the flight, which holds it until the
            // thread is joined; the arrays are the writer's own copies
            // (module doc).
            #[allow(unsafe_code)]
            parts.push(unsafe { bytes_of(array, ["src", "offsets", "lens", "dims"][pos.min(3)])? });
        }
        let shared = Arc::clone(handle);
        let thread = std::thread::Builder::new()
            .name("loaderx-write-behind".to_owned())
            .spawn(move || shared.read(|engine| write(engine, &parts)))
            .map_err(|err| {
                PyRuntimeError::new_err(format!("cannot start a write-behind thread: {err}"))
            })?;
        state.flight = Some(Flight {
            thread,
            keep: keep.into_iter().map(Bound::unbind).collect(),
            dense,
            records,
        });
        Ok(())
    }

    /// Waits for the write in flight and runs `close` under the lock
    /// [`submit`](Self::submit) takes, so no write is submitted after it;
    /// in a forked child, forgets the parent's write in flight instead (its
    /// thread is not here to join; the lock is only tried, as a thread of
    /// the parent may have held it at the fork).
    pub(crate) fn close<R>(
        &self,
        py: Python<'_>,
        handle: &Handle,
        close: impl FnOnce() -> R,
    ) -> (PyResult<()>, R) {
        if handle.forked() {
            if let Ok(mut state) = self.state.try_lock()
                && let Some(flight) = state.flight.take()
            {
                std::mem::forget(flight.thread);
                std::mem::forget(flight.keep);
            }
            return (Ok(()), close());
        }
        let mut state = self
            .state
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        let settled = settle_locked(py, &mut state, handle);
        (settled, close())
    }
}

impl Behind {
    /// When the handle goes away with a write still in flight (it was
    /// never closed): waits for the write, so the arrays it reads outlive
    /// it (the helper thread needs no GIL, so waiting with it held cannot
    /// deadlock); its error has no call left to raise it and is dropped.
    /// In a forked child the parent's write is forgotten instead.
    pub(crate) fn finish(&mut self, forked: bool) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(flight) = state.flight.take() {
            if forked {
                std::mem::forget(flight.thread);
                std::mem::forget(flight.keep);
            } else {
                let _ = flight.thread.join();
            }
        }
    }
}

fn settle_locked(py: Python<'_>, state: &mut State, handle: &Handle) -> PyResult<()> {
    let Some(flight) = state.flight.take() else {
        return Ok(());
    };
    let outcome = py.detach(|| flight.thread.join());
    match outcome {
        Ok(Ok(_)) => {
            if flight.dense {
                state.spare = flight.keep.into_iter().next();
            }
            Ok(())
        }
        Ok(Err(err)) => {
            let err = store_error(py, err);
            let note = format!(
                "raised by an append of {} records to {} that was {BEHIND_NOTE} (none of them \
                 was stored; the records appended before them were)",
                flight.records,
                handle.path()
            );
            let value = err.value(py);
            if value.hasattr("add_note")? {
                value.call_method1("add_note", (note,))?;
            }
            Err(err)
        }
        Err(_) => Err(PyRuntimeError::new_err(format!(
            "a write behind an append to {} panicked",
            handle.path()
        ))),
    }
}
