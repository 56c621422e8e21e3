//! The zstd dictionary codec in a build without the `zstd` feature: the
//! same API, and every use is an error naming the feature.

use std::{convert::Infallible, fmt};

use super::DecodeError;
use super::dict::TrainError;

const NEEDS: &str = "this build of loaderx-store has no zstd: enable cargo feature `zstd`";

/// A zstd dictionary. This build has no zstd, so none can be made:
/// [`ZstdDictionary::new`] always fails, naming the feature to enable.
pub struct ZstdDictionary {
    never: Infallible,
}

impl fmt::Debug for ZstdDictionary {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.never {}
    }
}

impl ZstdDictionary {
    /// Always fails: this build has no zstd.
    ///
    /// # Errors
    /// Always, naming the `zstd` feature.
    pub fn new(_bytes: &[u8]) -> Result<ZstdDictionary, DecodeError> {
        Err(DecodeError::new(NEEDS))
    }

    /// The dictionary's bytes (never called: none exists).
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        match self.never {}
    }

    /// The dictionary id (never called: none exists).
    #[must_use]
    pub fn id(&self) -> u32 {
        match self.never {}
    }

    /// Never called: none exists.
    pub fn encode(&self, _src: &[u8], _dst: &mut [u8]) -> Option<usize> {
        match self.never {}
    }

    /// Never called: none exists.
    ///
    /// # Errors
    /// Never returns.
    pub fn decode(&self, _src: &[u8], _dst: &mut [u8]) -> Result<(), DecodeError> {
        match self.never {}
    }
}

/// Always fails: this build has no zstd.
///
/// # Errors
/// Always, naming the `zstd` feature.
pub fn train_dictionary(
    _samples: &[u8],
    _sample_sizes: &[usize],
    _max_size: usize,
) -> Result<Vec<u8>, TrainError> {
    Err(TrainError::new(NEEDS))
}
