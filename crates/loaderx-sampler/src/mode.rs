use std::fmt;

use crate::{Error, Result};

/// How a [`Sampler`](crate::Sampler) draws indices from `0..len`.
///
/// The discriminants are stable: they are what [`SamplerState::to_bytes`]
/// stores and what bindings pass across language boundaries.
///
/// [`SamplerState::to_bytes`]: crate::SamplerState::to_bytes
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// A sliding window over a circular index space: global batch `k` is
    /// `(k·B + j) mod N` for `j in 0..B`. The tail never truncates.
    Sequential = 0,
    /// Uniform with replacement, without modulo bias.
    Iid = 1,
    /// Without replacement: every run of `N` draws starting at a multiple of
    /// `N` is a permutation of `0..N`, a fresh one for every epoch.
    Shuffle = 2,
    /// Without replacement, whole batches per epoch (loaderx 2.8's
    /// `CYCLIC`): with `B ≤ N`, epoch `e` is `⌊N/B⌋` batches, the first
    /// `⌊N/B⌋·B` entries of a fresh permutation of `0..N` (the `N mod B`
    /// left over are skipped that epoch, so no batch straddles two); with
    /// `B > N`, a batch is `⌈B/N⌉` fresh permutations back to back, cut at
    /// `B`. The permutations are [`Mode::Shuffle`]'s.
    Cyclic = 3,
}

impl Mode {
    /// Every mode, in discriminant order.
    pub const ALL: [Mode; 4] = [Mode::Sequential, Mode::Iid, Mode::Shuffle, Mode::Cyclic];

    /// The mode with discriminant `value`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownMode`] if `value` is not 0, 1, 2 or 3.
    pub const fn from_u8(value: u8) -> Result<Mode> {
        match value {
            0 => Ok(Mode::Sequential),
            1 => Ok(Mode::Iid),
            2 => Ok(Mode::Shuffle),
            3 => Ok(Mode::Cyclic),
            other => Err(Error::UnknownMode(other)),
        }
    }

    /// The stable discriminant.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The lower-case name: `"sequential"`, `"iid"`, `"shuffle"` or `"cyclic"`.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Sequential => "sequential",
            Mode::Iid => "iid",
            Mode::Shuffle => "shuffle",
            Mode::Cyclic => "cyclic",
        }
    }
}

impl TryFrom<u8> for Mode {
    type Error = Error;

    fn try_from(value: u8) -> Result<Mode> {
        Mode::from_u8(value)
    }
}

impl From<Mode> for u8 {
    fn from(mode: Mode) -> u8 {
        mode.as_u8()
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminants_round_trip_and_unknown_is_an_error() {
        for mode in Mode::ALL {
            assert_eq!(Mode::from_u8(mode.as_u8()), Ok(mode));
            assert_eq!(Mode::try_from(u8::from(mode)), Ok(mode));
        }
        assert_eq!(Mode::Sequential as u8, 0);
        assert_eq!(Mode::Iid as u8, 1);
        assert_eq!(Mode::Shuffle as u8, 2);
        assert_eq!(Mode::Cyclic as u8, 3);
        for bad in 4..=u8::MAX {
            assert_eq!(Mode::try_from(bad), Err(Error::UnknownMode(bad)));
        }
        let msg = Error::UnknownMode(7).to_string();
        assert!(msg.contains('7') && msg.contains("shuffle"), "{msg}");
    }
}
