//! `loaderx._native.Sampler`: a [`loaderx_sampler::Sampler`] that fills
//! caller-owned uint64 arrays.

use std::sync::{Mutex, PoisonError};

use loaderx_sampler::{Mode, SamplerState};
use numpy::PyReadwriteArray1;
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt};

use crate::errors::{not_contiguous, sampler_error};

/// The keys of a sampler state as Python sees it (`Sampler.state_dict()`,
/// `DataLoader.state_dict()`), in the order they are written.
const STATE_KEYS: [&str; 7] = [
    "seed",
    "mode",
    "length",
    "batch_size",
    "step",
    "rank",
    "world_size",
];

/// A sampler from the arguments Python passes (mode as its number), with
/// every error mapped to the Python exception it becomes.
pub(crate) fn build_sampler(
    length: u64,
    batch_size: usize,
    mode: u8,
    seed: u64,
    rank: usize,
    world_size: usize,
) -> PyResult<loaderx_sampler::Sampler> {
    let mode = Mode::from_u8(mode).map_err(sampler_error)?;
    loaderx_sampler::Sampler::new(length, batch_size, mode, seed)
        .and_then(|s| s.sharded(rank, world_size))
        .map_err(sampler_error)
}

/// A sampler state as the dict Python sees: `{key: int}` for every key of
/// [`STATE_KEYS`].
pub(crate) fn state_dict<'py>(py: Python<'py>, s: &SamplerState) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let [seed, mode, length, batch_size, step, rank, world_size] = STATE_KEYS;
    dict.set_item(seed, s.seed)?;
    dict.set_item(mode, s.mode.as_u8())?;
    dict.set_item(length, s.len)?;
    dict.set_item(batch_size, s.batch_size)?;
    dict.set_item(step, s.step)?;
    dict.set_item(rank, s.rank)?;
    dict.set_item(world_size, s.world_size)?;
    Ok(dict)
}

/// The state a mapping from Python describes (the inverse of
/// [`state_dict`]). Each value is taken as `int(value)` would; a missing
/// key is a `ValueError` naming it; extra keys are ignored.
pub(crate) fn state_from(state: &Bound<'_, PyAny>) -> PyResult<SamplerState> {
    let int = state.py().get_type::<PyInt>();
    let entry = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        match state.get_item(key) {
            Ok(value) => int.call1((value,)),
            Err(err) if err.is_instance_of::<PyKeyError>(state.py()) => Err(PyValueError::new_err(
                format!("sampler state has no '{key}' entry"),
            )),
            Err(err) => Err(err),
        }
    };
    let [seed, mode, length, batch_size, step, rank, world_size] = STATE_KEYS;
    Ok(SamplerState {
        seed: entry(seed)?.extract()?,
        mode: Mode::from_u8(entry(mode)?.extract()?).map_err(sampler_error)?,
        len: entry(length)?.extract()?,
        batch_size: entry(batch_size)?.extract()?,
        step: entry(step)?.extract()?,
        rank: entry(rank)?.extract()?,
        world_size: entry(world_size)?.extract()?,
    })
}

#[pyclass(module = "loaderx._native", name = "Sampler", frozen)]
pub(crate) struct Sampler {
    inner: Mutex<loaderx_sampler::Sampler>,
}

impl Sampler {
    fn lock(&self) -> std::sync::MutexGuard<'_, loaderx_sampler::Sampler> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl Sampler {
    /// A sampler of global batches of `batch_size` indices into
    /// `0..length`; this rank draws `batch_size / world_size` of each.
    #[new]
    #[pyo3(signature = (length, batch_size, mode, seed, rank = 0, world_size = 1))]
    fn new(
        length: u64,
        batch_size: usize,
        mode: u8,
        seed: u64,
        rank: usize,
        world_size: usize,
    ) -> PyResult<Self> {
        let inner = build_sampler(length, batch_size, mode, seed, rank, world_size)?;
        Ok(Sampler {
            inner: Mutex::new(inner),
        })
    }

    /// Writes this rank's share of the next batch into `out` and advances.
    fn fill(&self, py: Python<'_>, mut out: PyReadwriteArray1<'_, u64>) -> PyResult<()> {
        let out = out.as_slice_mut().map_err(|_| not_contiguous("out"))?;
        py.detach(|| self.lock().fill(out)).map_err(sampler_error)
    }

    /// Indices this rank draws per batch.
    #[getter]
    fn local_batch_size(&self) -> usize {
        self.lock().local_batch_size()
    }

    /// The next global batch to be drawn.
    #[getter]
    fn step(&self) -> u64 {
        self.lock().step()
    }

    /// `{"seed", "mode", "length", "batch_size", "step", "rank",
    /// "world_size"}`, all ints.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        state_dict(py, &self.lock().state())
    }

    /// Resumes from a `state()` (any mapping with its keys): takes its seed
    /// and step; its length, batch size and mode must match this sampler's.
    fn restore(&self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let state = state_from(state)?;
        self.lock().restore(&state).map_err(sampler_error)
    }
}
