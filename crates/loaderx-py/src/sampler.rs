//! `loaderx._native.Sampler`: a [`loaderx_sampler::Sampler`] that fills
//! caller-owned uint64 arrays.

use std::sync::{Mutex, PoisonError};

use loaderx_sampler::{Mode, SamplerState};
use numpy::PyReadwriteArray1;
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList};

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

/// The key of the state layout's version; its value is
/// [`SamplerState::VERSION`]. A state without it is read as version 1 (the
/// layout before the key existed).
const VERSION_KEY: &str = "version";

/// The key of a loader state's stream names (a sampler state has none).
const STREAMS_KEY: &str = "streams";

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
    dict.set_item(VERSION_KEY, SamplerState::VERSION)?;
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
/// key is a `ValueError` naming it, and so is a version this build does not
/// read; extra keys are ignored.
pub(crate) fn state_from(state: &Bound<'_, PyAny>) -> PyResult<SamplerState> {
    let int = state.py().get_type::<PyInt>();
    // Every entry as an unsigned integer up to `max` (the field's width),
    // or an error naming the entry.
    let entry = |key: &str, max: u64| -> PyResult<u64> {
        let value = match state.get_item(key) {
            Ok(value) => value,
            Err(err) if err.is_instance_of::<PyKeyError>(state.py()) => {
                return Err(PyValueError::new_err(format!(
                    "sampler state has no '{key}' entry"
                )));
            }
            Err(err) => return Err(err),
        };
        let shown = value
            .repr()
            .map_or_else(|_| "an object".to_owned(), |r| r.to_string());
        let number = int.call1((&value,)).map_err(|err| {
            let message = format!("sampler state entry '{key}' must be an integer, got {shown}");
            if err.is_instance_of::<PyTypeError>(state.py()) {
                PyTypeError::new_err(message)
            } else {
                PyValueError::new_err(message)
            }
        })?;
        number
            .extract::<u64>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "sampler state entry '{key}' is {shown}, outside 0..={max}"
                ))
            })
    };
    match state.get_item(VERSION_KEY) {
        Ok(_) => {
            let version = entry(VERSION_KEY, u64::MAX)?;
            if version != u64::from(SamplerState::VERSION) {
                return Err(PyValueError::new_err(format!(
                    "state has version {version}, but this build reads version {}",
                    SamplerState::VERSION
                )));
            }
        }
        Err(err) if err.is_instance_of::<PyKeyError>(state.py()) => {}
        Err(err) => return Err(err),
    }
    let word = |key: &str| entry(key, u64::MAX);
    let size = |key: &str| entry(key, usize::MAX as u64).map(|n| n as usize);
    let [seed, mode, length, batch_size, step, rank, world_size] = STATE_KEYS;
    Ok(SamplerState {
        seed: word(seed)?,
        mode: Mode::from_u8(entry(mode, u64::from(u8::MAX))? as u8).map_err(sampler_error)?,
        len: word(length)?,
        batch_size: size(batch_size)?,
        step: word(step)?,
        rank: size(rank)?,
        world_size: size(world_size)?,
    })
}

/// A loader state: the sampler state of the batch `next()` returns next,
/// plus the names of the loader's streams (`"streams"`, in stream order).
pub(crate) fn loader_state_dict<'py>(
    py: Python<'py>,
    s: &SamplerState,
    streams: &[String],
) -> PyResult<Bound<'py, PyDict>> {
    let dict = state_dict(py, s)?;
    dict.set_item(STREAMS_KEY, PyList::new(py, streams)?)?;
    Ok(dict)
}

/// The sampler state inside a loader state, once its stream names are
/// checked against `streams` (the same names in any order; a missing entry
/// or another set is a `ValueError` naming both sets).
pub(crate) fn loader_state_from(
    state: &Bound<'_, PyAny>,
    streams: &[String],
) -> PyResult<SamplerState> {
    let saved: Vec<String> = match state.get_item(STREAMS_KEY) {
        Ok(value) => value.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "loader state entry '{STREAMS_KEY}' must be a list of stream names"
            ))
        })?,
        Err(err) if err.is_instance_of::<PyKeyError>(state.py()) => {
            return Err(PyValueError::new_err(format!(
                "loader state has no '{STREAMS_KEY}' entry (a sampler's state is not a \
                 loader's)"
            )));
        }
        Err(err) => return Err(err),
    };
    let mut sorted_saved = saved.clone();
    sorted_saved.sort();
    let mut sorted_ours = streams.to_vec();
    sorted_ours.sort();
    if sorted_saved != sorted_ours {
        return Err(PyValueError::new_err(format!(
            "loader state was saved for streams {saved:?}, but this loader has streams \
             {streams:?}"
        )));
    }
    state_from(state)
}

/// `loader_state(sampler_state, streams)`: the loader state of a loader over
/// `streams` whose sampler stands at `sampler_state` (for the engines that
/// draw indices in Python).
#[pyfunction]
pub(crate) fn loader_state<'py>(
    py: Python<'py>,
    sampler_state: &Bound<'py, PyAny>,
    streams: Vec<String>,
) -> PyResult<Bound<'py, PyDict>> {
    loader_state_dict(py, &state_from(sampler_state)?, &streams)
}

/// `sampler_state_of(loader_state, streams)`: the sampler state inside a
/// loader state taken over the same `streams` (`ValueError` if not).
#[pyfunction]
pub(crate) fn sampler_state_of<'py>(
    py: Python<'py>,
    loader_state: &Bound<'py, PyAny>,
    streams: Vec<String>,
) -> PyResult<Bound<'py, PyDict>> {
    state_dict(py, &loader_state_from(loader_state, &streams)?)
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

    /// Moves to global batch `step` (forwards or backwards).
    fn seek(&self, step: u64) {
        self.lock().set_step(step);
    }

    /// `{"version", "seed", "mode", "length", "batch_size", "step", "rank",
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
