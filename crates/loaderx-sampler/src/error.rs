use std::fmt;

/// Why a sampler could not be built, restored, or asked for a batch.
///
/// Every variant carries the values that were wrong, so the message says what
/// to change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The index space is empty (`len == 0`): there is nothing to sample.
    EmptyIndexSpace,
    /// The global batch size is zero.
    ZeroBatch,
    /// The world size is zero.
    ZeroWorldSize,
    /// The global batch cannot be split evenly across the ranks.
    BatchNotDivisible {
        /// The global batch size.
        batch_size: usize,
        /// The number of ranks it should be split across.
        world_size: usize,
    },
    /// The rank is not below the world size.
    RankOutOfRange {
        /// The rank asked for.
        rank: usize,
        /// The number of ranks.
        world_size: usize,
    },
    /// The output slice does not hold exactly this rank's share of a batch.
    OutputLength {
        /// [`Sampler::local_batch_size`](crate::Sampler::local_batch_size).
        expected: usize,
        /// The length of the slice that was passed.
        found: usize,
    },
    /// A saved state does not belong to the sampler it is restored into.
    StateMismatch {
        /// Which setting differs: `"len"`, `"batch_size"` or `"mode"`.
        field: &'static str,
        /// The sampler's value.
        expected: u64,
        /// The saved state's value.
        found: u64,
    },
    /// A mode number that is not 0 (sequential), 1 (iid) or 2 (shuffle).
    UnknownMode(u8),
    /// A byte string that is not an encoded [`SamplerState`](crate::SamplerState).
    BadStateBytes {
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EmptyIndexSpace => {
                write!(f, "cannot sample from an empty index space (len is 0)")
            }
            Error::ZeroBatch => write!(f, "batch size must be at least 1"),
            Error::ZeroWorldSize => write!(f, "world size must be at least 1"),
            Error::BatchNotDivisible {
                batch_size,
                world_size,
            } => write!(
                f,
                "global batch size {batch_size} is not divisible by world size {world_size}; \
                 use a batch size that is a multiple of {world_size}"
            ),
            Error::RankOutOfRange { rank, world_size } => write!(
                f,
                "rank {rank} is out of range for world size {world_size} (ranks are 0..{world_size})"
            ),
            Error::OutputLength { expected, found } => write!(
                f,
                "output slice holds {found} indices, but this rank's share of a batch is {expected}"
            ),
            Error::StateMismatch {
                field,
                expected,
                found,
            } => write!(
                f,
                "saved sampler state has {field} = {found}, but this sampler has {field} = {expected}"
            ),
            Error::UnknownMode(mode) => write!(
                f,
                "unknown sampling mode {mode} (expected 0 = sequential, 1 = iid, 2 = shuffle, 3 = cyclic)"
            ),
            Error::BadStateBytes { reason } => {
                write!(f, "not an encoded sampler state: {reason}")
            }
        }
    }
}

impl std::error::Error for Error {}
