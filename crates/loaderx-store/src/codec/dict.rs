//! What the zstd dictionary codec shares with builds without zstd: its
//! limits, and the training error.

use std::fmt;

/// The four bytes every trained zstd dictionary starts with (`0xEC30A437`,
/// little-endian). zstd takes bytes without them as a "raw content"
/// dictionary, which carries no id; this codec does too.
pub const DICT_MAGIC: [u8; 4] = 0xEC30_A437_u32.to_le_bytes();

/// Default dictionary size, 32 KiB: what loaderx 2.x's `train_dict` makes,
/// so a dictionary trained by default is the same size with either (zstd's
/// own command line trains 110 KiB; ask for more with `dict_size`, up to
/// [`MAX_DICT_SIZE`]).
pub const DEFAULT_DICT_SIZE: usize = 32 * 1024;

/// Smallest dictionary [`train_dictionary`](super::train_dictionary) accepts (`ZDICT_DICTSIZE_MIN`):
/// zstd's trainer refuses to build anything smaller.
pub const MIN_DICT_SIZE: usize = 256;

/// Largest dictionary, 1 MiB, both to train and to load. zstd has no hard
/// limit, but every decode reads from the dictionary, so past a few hundred
/// KiB it stops fitting in cache and gains flatten out; a store holds its
/// dictionary twice more in prepared form (plus ~0.8 MiB of level-3 match
/// tables), so the cap also bounds what opening a store costs. Readers refuse
/// larger dictionaries as corrupt, so raising this is a format change.
pub const MAX_DICT_SIZE: usize = 1024 * 1024;

/// Most sample bytes [`train_dictionary`](super::train_dictionary) accepts, 100 MiB. zstd's guidance is
/// samples of about 100× the dictionary size (so ~3.2 MiB for
/// [`DEFAULT_DICT_SIZE`]) and "a few thousand samples"; 100 MiB is 100× the
/// largest dictionary. Training time grows with the sample size (roughly
/// linearly), and the trainer holds the samples plus a few MiB of tables in
/// memory, so callers should pick a bounded sample rather than a whole store.
pub const MAX_SAMPLE_BYTES: usize = 100 * 1024 * 1024;

/// Fewest samples [`train_dictionary`](super::train_dictionary) accepts. zstd's trainer keeps a quarter
/// of the samples back to score candidate dictionaries and needs at least
/// five to train on, so seven is the least it can work with; a useful
/// dictionary needs hundreds to thousands.
pub const MIN_SAMPLES: usize = 7;

/// Why [`train_dictionary`](super::train_dictionary) made no dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainError {
    /// What was wrong with the request, or what zstd's trainer reported.
    pub reason: String,
}

impl TrainError {
    pub(crate) fn new(reason: impl Into<String>) -> TrainError {
        TrainError {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for TrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for TrainError {}
