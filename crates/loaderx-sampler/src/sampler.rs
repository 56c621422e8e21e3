//! [`Sampler`]: one rank's view of a global index stream, with a step
//! counter, checkpointing and elastic restore.

use crate::iid::Iid;
use crate::sequential::Sequential;
use crate::shard::Shard;
use crate::shuffle::Shuffle;
use crate::{Error, Mode, Result, SamplerState};

/// The mode-specific generator, with its precomputed constants.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Sequential(Sequential),
    Iid(Iid),
    Shuffle(Shuffle),
    Cyclic(Shuffle),
}

impl Stream {
    fn new(mode: Mode, seed: u64, len: u64) -> Stream {
        match mode {
            Mode::Sequential => Stream::Sequential(Sequential::new(len)),
            Mode::Iid => Stream::Iid(Iid::new(seed, len)),
            Mode::Shuffle => Stream::Shuffle(Shuffle::new(seed, len)),
            Mode::Cyclic => Stream::Cyclic(Shuffle::new(seed, len)),
        }
    }
}

/// Produces this rank's share of each global batch of indices into `0..len`.
///
/// The global stream is a pure function of `(seed, mode, len, batch_size)`
/// and the step; see the crate docs. A sampler is a few words of
/// configuration plus the step counter: cloning is cheap, and
/// [`Sampler::fill`] never allocates.
#[derive(Debug, Clone)]
pub struct Sampler {
    len: u64,
    batch_size: usize,
    mode: Mode,
    seed: u64,
    step: u64,
    shard: Shard,
    local_batch: usize,
    stream: Stream,
}

impl Sampler {
    /// A sampler of global batches of `batch_size` indices drawn from
    /// `0..len`, on a single rank (see [`Sampler::sharded`]), at step 0.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyIndexSpace`] if `len == 0`, [`Error::ZeroBatch`] if
    /// `batch_size == 0`.
    pub fn new(len: u64, batch_size: usize, mode: Mode, seed: u64) -> Result<Sampler> {
        if len == 0 {
            return Err(Error::EmptyIndexSpace);
        }
        if batch_size == 0 {
            return Err(Error::ZeroBatch);
        }
        Ok(Sampler {
            len,
            batch_size,
            mode,
            seed,
            step: 0,
            shard: Shard::SOLE,
            local_batch: batch_size,
            stream: Stream::new(mode, seed, len),
        })
    }

    /// The same stream, producing only rank `rank`'s share of every global
    /// batch: positions `[rank·B/W, (rank+1)·B/W)` with `W = world_size`.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroWorldSize`], [`Error::RankOutOfRange`] if
    /// `rank >= world_size`, [`Error::BatchNotDivisible`] if the global batch
    /// size is not a multiple of `world_size`.
    pub fn sharded(mut self, rank: usize, world_size: usize) -> Result<Sampler> {
        let (shard, local_batch) = Shard::new(rank, world_size, self.batch_size)?;
        self.shard = shard;
        self.local_batch = local_batch;
        Ok(self)
    }

    /// Exactly the sampler a [`SamplerState`] was taken from: same stream,
    /// same step, same rank and world size.
    ///
    /// # Errors
    ///
    /// Every field is validated as [`Sampler::new`] and [`Sampler::sharded`]
    /// would, with the same errors.
    pub fn from_state(state: &SamplerState) -> Result<Sampler> {
        let mut sampler = Sampler::new(state.len, state.batch_size, state.mode, state.seed)?
            .sharded(state.rank, state.world_size)?;
        sampler.step = state.step;
        Ok(sampler)
    }

    /// Resumes the checkpointed stream in this sampler: takes the state's
    /// seed and step, keeps this sampler's rank and world size.
    ///
    /// Keeping the rank and world size is what makes resume elastic: a
    /// checkpoint taken with 4 ranks restores into samplers sharded for 2,
    /// and at the checkpointed step they continue the same global stream
    /// (the global batch size must stay the same).
    ///
    /// # Errors
    ///
    /// [`Error::StateMismatch`] if the state's `len`, `batch_size` or
    /// `mode` differs from this sampler's (a checkpoint of another dataset or
    /// configuration); nothing is changed then.
    pub fn restore(&mut self, state: &SamplerState) -> Result<()> {
        let checks = [
            ("len", self.len, state.len),
            (
                "batch_size",
                self.batch_size as u64,
                state.batch_size as u64,
            ),
            ("mode", self.mode.as_u8().into(), state.mode.as_u8().into()),
        ];
        for (field, expected, found) in checks {
            if expected != found {
                return Err(Error::StateMismatch {
                    field,
                    expected,
                    found,
                });
            }
        }
        self.seed = state.seed;
        self.step = state.step;
        self.stream = Stream::new(self.mode, self.seed, self.len);
        Ok(())
    }

    /// The checkpoint of this sampler as it stands (the step is the next one
    /// to be produced).
    pub fn state(&self) -> SamplerState {
        SamplerState {
            seed: self.seed,
            mode: self.mode,
            len: self.len,
            batch_size: self.batch_size,
            step: self.step,
            rank: self.shard.rank,
            world_size: self.shard.world_size,
        }
    }

    /// Writes this rank's share of the current global batch into `out` and
    /// advances the step.
    ///
    /// The step counter wraps after `u64::MAX` batches.
    ///
    /// # Errors
    ///
    /// [`Error::OutputLength`] unless `out.len()` is
    /// [`local_batch_size`](Sampler::local_batch_size); nothing is written or
    /// advanced then.
    pub fn fill(&mut self, out: &mut [u64]) -> Result<()> {
        self.indices_at(self.step, out)?;
        self.step = self.step.wrapping_add(1);
        Ok(())
    }

    /// Writes this rank's share of global batch `step` into `out`, without
    /// touching the sampler's own step.
    ///
    /// # Errors
    ///
    /// [`Error::OutputLength`] unless `out.len()` is
    /// [`local_batch_size`](Sampler::local_batch_size), as for
    /// [`Sampler::fill`].
    pub fn indices_at(&self, step: u64, out: &mut [u64]) -> Result<()> {
        if out.len() != self.local_batch {
            return Err(Error::OutputLength {
                expected: self.local_batch,
                found: out.len(),
            });
        }
        self.write_batch(step, out);
        Ok(())
    }

    /// [`Sampler::indices_at`] once `out` is known to have the local batch
    /// size.
    fn write_batch(&self, step: u64, out: &mut [u64]) {
        debug_assert_eq!(out.len(), self.local_batch);
        let offset = self.shard.offset(self.local_batch);
        match &self.stream {
            Stream::Iid(iid) => iid.fill(step, offset, out),
            Stream::Sequential(seq) => seq.fill(self.first_position(step, offset), out),
            Stream::Shuffle(shuffle) => shuffle.fill(self.first_position(step, offset), out),
            Stream::Cyclic(shuffle) => shuffle.fill(self.cyclic_position(step, offset), out),
        }
    }

    /// [`Mode::Cyclic`]'s position in the [`Mode::Shuffle`] stream of
    /// element `offset` of batch `step`: batches never straddle an epoch
    /// (see [`Mode::Cyclic`]). Cannot overflow: every factor is below
    /// `2^64` and the sum below `2^128`.
    fn cyclic_position(&self, step: u64, offset: usize) -> u128 {
        let (len, batch) = (u128::from(self.len), self.batch_size as u128);
        if batch <= len {
            let per_epoch = len / batch;
            let step = u128::from(step);
            (step / per_epoch) * len + (step % per_epoch) * batch + offset as u128
        } else {
            u128::from(step) * batch.div_ceil(len) * len + offset as u128
        }
    }

    /// A freshly allocated [`Sampler::fill`], for convenience where a
    /// `Vec` per batch does not matter. Cannot fail: the buffer it allocates
    /// has the local batch size.
    pub fn next_batch(&mut self) -> Vec<u64> {
        let mut out = vec![0; self.local_batch];
        self.write_batch(self.step, &mut out);
        self.step = self.step.wrapping_add(1);
        out
    }

    /// Global position of element `offset` of batch `step`. Cannot overflow:
    /// `(2^64 − 1)² + 2^64 < 2^128`.
    fn first_position(&self, step: u64, offset: usize) -> u128 {
        u128::from(step) * self.batch_size as u128 + offset as u128
    }

    /// The next global batch [`Sampler::fill`] will produce.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Moves to global batch `step` (forwards or backwards), in O(1).
    pub fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    /// `N`: indices are drawn from `0..len`. Never zero.
    #[expect(
        clippy::len_without_is_empty,
        reason = "construction rejects an empty index space"
    )]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// `B`: the global batch size, over all ranks.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// `B / W`: how many indices [`Sampler::fill`] writes on this rank.
    pub fn local_batch_size(&self) -> usize {
        self.local_batch
    }

    /// How indices are drawn.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The seed the stream is derived from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// This sampler's rank.
    pub fn rank(&self) -> usize {
        self.shard.rank
    }

    /// The number of ranks the global batch is split across.
    pub fn world_size(&self) -> usize {
        self.shard.world_size
    }
}
