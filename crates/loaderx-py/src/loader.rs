//! `loaderx._native.Loader`: a [`loaderx_loader::Loader`] over stores opened
//! from Python, handing each batch to NumPy without a copy.
//!
//! Workers gather with no Python involvement (no GIL) into buffers from a
//! [`BatchPool`]; `next()` makes each buffer a NumPy array whose base owns
//! it and returns it to the pool once no array views it any more (module
//! `pool`), and the Python layer views it with the stream's dtype and shape. `next()` waits with the GIL
//! released, waking every 100 ms to let Ctrl-C through. Its state is a
//! loader state: the sampler's, plus the stream names, which a restore
//! checks.

use std::time::Duration;

use std::sync::Arc;

use loaderx_loader::{Error, Layout, Stream};
use numpy::PyArray1;
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::collection::CollectionColumn;
use crate::errors::{sampler_error, zrecord_error};
use crate::pool::{BatchBuffer, BatchPool, SharedPool};
use crate::store::Store;

/// How long `next()` waits with the GIL released before checking for signals.
const WAKE: Duration = Duration::from_millis(100);

/// One column of a batch: the bytes, and the `n + 1` offsets of a ragged
/// stream (`None` for fixed-size records).
type PyColumn<'py> = (Bound<'py, PyArray1<u8>>, Option<Bound<'py, PyArray1<u64>>>);

/// `(step, indices, columns in stream order)`.
type PyBatch<'py> = (u64, Bound<'py, PyArray1<u64>>, Vec<PyColumn<'py>>);

#[pyclass(module = "loaderx._native", name = "Loader", frozen)]
pub(crate) struct Loader {
    /// `None` only while being dropped.
    inner: Option<loaderx_loader::Loader<SharedPool>>,
    /// The stream names, in stream order: part of every state, checked on
    /// restore.
    names: Vec<String>,
    /// A child created by `fork()` inherits this object but not the worker
    /// threads: there it must neither wait for batches nor join workers.
    created_by: u32,
}

impl Loader {
    fn live(&self) -> PyResult<&loaderx_loader::Loader<SharedPool>> {
        if std::process::id() != self.created_by {
            return Err(PyRuntimeError::new_err(
                "this DataLoader was created in the parent of this forked process and its \
                 worker threads do not exist here; create a new DataLoader in this process",
            ));
        }
        self.inner
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("the loader is being dropped"))
    }
}

fn loader_error(py: Python<'_>, err: Error) -> PyErr {
    if let Some(store) = err.store_error() {
        return zrecord_error(py, store.code(), err.to_string());
    }
    match err {
        Error::Sampler(e) => sampler_error(e),
        Error::OutOfMemory { .. } | Error::SettingTooLarge { .. } => {
            PyMemoryError::new_err(err.to_string())
        }
        Error::NoStreams
        | Error::DuplicateStream { .. }
        | Error::ZeroItemLen { .. }
        | Error::StreamLength { .. }
        | Error::SamplerLength { .. }
        | Error::ZeroSetting { .. } => PyValueError::new_err(err.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

#[pymethods]
impl Loader {
    /// `streams` is a list of `(name, store, item_len)`; `item_len` 0 means
    /// ragged records.
    #[new]
    #[pyo3(signature = (streams, length, batch_size, mode, seed, num_workers, prefetch, rank = 0, world_size = 1, lookahead = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        streams: Vec<(String, Bound<'_, PyAny>, usize)>,
        length: u64,
        batch_size: usize,
        mode: u8,
        seed: u64,
        num_workers: usize,
        prefetch: usize,
        rank: usize,
        world_size: usize,
        lookahead: u64,
    ) -> PyResult<Self> {
        let sampler =
            crate::sampler::build_sampler(length, batch_size, mode, seed, rank, world_size)?;
        let names = streams.iter().map(|(name, _, _)| name.clone()).collect();
        let streams: Vec<Stream> = streams
            .iter()
            .map(|(name, store, item_len)| {
                let source: Arc<dyn loaderx_loader::Source> =
                    if let Ok(store) = store.cast::<Store>() {
                        store.get().handle()
                    } else if let Ok(column) = store.cast::<CollectionColumn>() {
                        column.get().source()
                    } else {
                        return Err(PyValueError::new_err(format!(
                            "stream {name:?}: expected a native Store or CollectionColumn"
                        )));
                    };
                Ok(match item_len {
                    0 => Stream::ragged(name.as_str(), source),
                    &n => Stream::fixed(name.as_str(), source, n),
                })
            })
            .collect::<PyResult<_>>()?;
        // Idle buffers kept per stream: enough for every batch the loader can
        // have in the making plus a few the consumer has just let go; buffers
        // a user keeps alive are not counted (they are not idle).
        let keep = prefetch
            .saturating_add(num_workers.min(prefetch))
            .saturating_add(2);
        let pool = SharedPool(Arc::new(BatchPool::new(keep)));
        let built = py.detach(move || {
            loaderx_loader::Loader::builder(sampler)
                .streams(streams)
                .num_workers(num_workers)
                .prefetch(prefetch)
                .lookahead(lookahead)
                .allocator(pool)
                .build()
        });
        let inner = built.map_err(|err| loader_error(py, err))?;
        Ok(Loader {
            inner: Some(inner),
            names,
            created_by: std::process::id(),
        })
    }

    /// The next batch in sampler order, or `None` once the loader is closed.
    /// A batch that failed raises its error; the loader goes on with the next.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<PyBatch<'py>>> {
        let inner = self.live()?;
        loop {
            match py.detach(|| inner.next_timeout(WAKE)) {
                Ok(Some(batch)) => {
                    let step = batch.step();
                    // Handed over, not copied (the batch size is the user's).
                    let (indices, columns) = batch.into_parts();
                    let indices = PyArray1::from_vec(py, indices);
                    let pool = inner.allocator();
                    let columns = columns
                        .into_iter()
                        .map(|column| {
                            let stream = column.stream();
                            let (data, layout) = column.into_parts();
                            let offsets = match layout {
                                Layout::Fixed { .. } => None,
                                Layout::Ragged { offsets } => Some(PyArray1::from_vec(py, offsets)),
                            };
                            let data = BatchBuffer::into_array(py, data, stream, pool.clone())?;
                            Ok((data, offsets))
                        })
                        .collect::<PyResult<_>>()?;
                    return Ok(Some((step, indices, columns)));
                }
                Ok(None) => py.check_signals()?,
                Err(Error::Closed) => return Ok(None),
                Err(err) => return Err(loader_error(py, err)),
            }
        }
    }

    /// The sampler state of the batch `next()` returns next, as the dict
    /// `Sampler.state()` returns, plus `"streams"`: the stream names.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::sampler::loader_state_dict(py, &self.live()?.state(), &self.names)
    }

    /// Continues from a `state()` of a loader over the same stream names:
    /// drops what was prefetched; the next batch is the state's step.
    fn restore(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let state = crate::sampler::loader_state_from(state, &self.names)?;
        let inner = self.live()?;
        py.detach(|| inner.restore(&state))
            .map_err(|err| loader_error(py, err))
    }

    /// Records per batch per stream.
    #[getter]
    fn local_batch_size(&self) -> PyResult<usize> {
        Ok(self.live()?.local_batch_size())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.as_ref().is_none_or(|inner| inner.is_closed())
    }

    /// Stops the workers (each finishes at most the gather it is in) and
    /// drops prefetched batches; wakes a consumer blocked in `next()`.
    /// Idempotent; never waits for a consumer. In a forked child it does
    /// nothing (there are no workers to stop).
    fn close(&self, py: Python<'_>) {
        if let Ok(inner) = self.live() {
            py.detach(|| {
                inner.close();
                // Batches still alive in Python keep their buffers; idle
                // ones go now, returned ones when they are returned.
                inner.allocator().0.close();
            });
        }
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            if std::process::id() == self.created_by {
                // Joining workers needs no GIL: they never touch Python.
                drop(inner);
            } else {
                // Forked child: the workers' handles name threads of the
                // parent; joining them would hang. Leave it to process exit.
                std::mem::forget(inner);
            }
        }
    }
}
