//! `loaderx._native.Sampler`: a [`loaderx_sampler::Sampler`] that fills
//! caller-owned uint64 arrays.

use std::sync::{Mutex, PoisonError};

use loaderx_sampler::{Mode, SamplerState};
use numpy::PyReadwriteArray1;
use pyo3::prelude::*;

use crate::errors::{not_contiguous, sampler_error};

/// `(seed, mode, length, batch_size, step, rank, world_size)`.
pub(crate) type StateTuple = (u64, u8, u64, usize, u64, usize, usize);

/// A sampler state as the tuple Python sees.
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

/// The state a `(seed, mode, length, batch_size, step, rank, world_size)`
/// tuple from Python describes (the inverse of [`state_tuple`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn state_from_parts(
    seed: u64,
    mode: u8,
    length: u64,
    batch_size: usize,
    step: u64,
    rank: usize,
    world_size: usize,
) -> PyResult<SamplerState> {
    Ok(SamplerState {
        seed,
        mode: Mode::from_u8(mode).map_err(sampler_error)?,
        len: length,
        batch_size,
        step,
        rank,
        world_size,
    })
}

pub(crate) fn state_tuple(s: &SamplerState) -> StateTuple {
    (
        s.seed,
        s.mode.as_u8(),
        s.len,
        s.batch_size,
        s.step,
        s.rank,
        s.world_size,
    )
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

    /// `(seed, mode, length, batch_size, step, rank, world_size)`.
    fn state(&self) -> StateTuple {
        state_tuple(&self.lock().state())
    }

    /// Resumes from a `state()`: takes its seed and step; its length, batch
    /// size and mode must match this sampler's.
    #[allow(clippy::too_many_arguments)]
    fn restore(
        &self,
        seed: u64,
        mode: u8,
        length: u64,
        batch_size: usize,
        step: u64,
        rank: usize,
        world_size: usize,
    ) -> PyResult<()> {
        let state = state_from_parts(seed, mode, length, batch_size, step, rank, world_size)?;
        self.lock().restore(&state).map_err(sampler_error)
    }
}
