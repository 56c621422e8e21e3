//! [`SamplerState`]: the few numbers a checkpoint needs to resume a stream,
//! and their fixed byte encoding.
//!
//! # Encoding (version 1)
//!
//! 56 bytes, every integer little-endian:
//!
//! | offset | type    | field          |
//! |-------:|---------|----------------|
//! | 0      | [u8; 4] | magic `LXSS`   |
//! | 4      | u8      | version, 1     |
//! | 5      | u8      | mode (0 sequential, 1 iid, 2 shuffle) |
//! | 6      | [u8; 2] | reserved, 0    |
//! | 8      | u64     | seed           |
//! | 16     | u64     | len            |
//! | 24     | u64     | `batch_size`   |
//! | 32     | u64     | step           |
//! | 40     | u64     | rank           |
//! | 48     | u64     | `world_size`   |
//!
//! Decoding checks the length, magic, version, mode and reserved bytes, and
//! that the sizes fit this platform's `usize`. Whether the values make a
//! valid sampler is checked when one is built from them.

use crate::{Error, Mode, Result};

/// Everything needed to resume a [`Sampler`](crate::Sampler) bit-identically.
///
/// The stream is a pure function of `(seed, mode, len, batch_size)` and the
/// step, so this small value is the whole checkpoint. `rank` and
/// `world_size` record where it was taken; a restore may change them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SamplerState {
    /// The seed the stream is derived from.
    pub seed: u64,
    /// How indices are drawn.
    pub mode: Mode,
    /// `N`: indices are drawn from `0..len`.
    pub len: u64,
    /// `B`: the global batch size, summed over all ranks.
    pub batch_size: usize,
    /// The next global batch to be produced.
    pub step: u64,
    /// This rank.
    pub rank: usize,
    /// The number of ranks.
    pub world_size: usize,
}

impl SamplerState {
    /// Length of [`SamplerState::to_bytes`].
    pub const ENCODED_LEN: usize = 56;
    /// First four bytes of the encoding.
    pub const MAGIC: [u8; 4] = *b"LXSS";
    /// The encoding version written, and the only one read.
    pub const VERSION: u8 = 1;

    /// The fixed little-endian encoding described in the module docs.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[0..4].copy_from_slice(&Self::MAGIC);
        out[4] = Self::VERSION;
        out[5] = self.mode.as_u8();
        let words = [
            self.seed,
            self.len,
            self.batch_size as u64,
            self.step,
            self.rank as u64,
            self.world_size as u64,
        ];
        for (dst, word) in out[8..].chunks_exact_mut(8).zip(words) {
            dst.copy_from_slice(&word.to_le_bytes());
        }
        out
    }

    /// Decodes [`SamplerState::to_bytes`].
    ///
    /// # Errors
    ///
    /// [`Error::BadStateBytes`] (saying what is wrong) if `bytes` is not 56
    /// bytes with the right magic, version and zero reserved bytes, or a size
    /// does not fit this platform's `usize`; [`Error::UnknownMode`] for an
    /// unknown mode byte.
    pub fn from_bytes(bytes: &[u8]) -> Result<SamplerState> {
        let bad = |reason| Err(Error::BadStateBytes { reason });
        let Ok(bytes) = <&[u8; Self::ENCODED_LEN]>::try_from(bytes) else {
            return bad("expected exactly 56 bytes");
        };
        if bytes[0..4] != Self::MAGIC {
            return bad("magic is not \"LXSS\"");
        }
        if bytes[4] != Self::VERSION {
            return bad("unsupported version (this build reads version 1)");
        }
        let mode = Mode::from_u8(bytes[5])?;
        if bytes[6..8] != [0, 0] {
            return bad("reserved bytes are not zero");
        }
        let (words, _) = bytes[8..].as_chunks::<8>();
        let word = |i: usize| u64::from_le_bytes(words[i]);
        let size = |i: usize| {
            usize::try_from(word(i)).map_err(|_| Error::BadStateBytes {
                reason: "a size does not fit this platform's usize",
            })
        };
        Ok(SamplerState {
            seed: word(0),
            mode,
            len: word(1),
            batch_size: size(2)?,
            step: word(3),
            rank: size(4)?,
            world_size: size(5)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SamplerState {
        SamplerState {
            seed: 0x0123_4567_89ab_cdef,
            mode: Mode::Shuffle,
            len: 1 << 40,
            batch_size: 8192,
            step: 77,
            rank: 3,
            world_size: 8,
        }
    }

    #[test]
    fn bytes_round_trip_with_a_fixed_layout() {
        let state = sample();
        let bytes = state.to_bytes();
        assert_eq!(&bytes[..8], b"LXSS\x01\x02\0\0");
        assert_eq!(bytes[8..16], 0x0123_4567_89ab_cdef_u64.to_le_bytes());
        assert_eq!(bytes[32..40], 77u64.to_le_bytes());
        assert_eq!(SamplerState::from_bytes(&bytes), Ok(state));
    }

    #[test]
    fn malformed_bytes_are_refused() {
        let good = sample().to_bytes();
        let bad_reason = |bytes: &[u8]| match SamplerState::from_bytes(bytes) {
            Err(Error::BadStateBytes { reason }) => reason,
            other => panic!("expected BadStateBytes, got {other:?}"),
        };
        assert!(bad_reason(&good[..55]).contains("56"));
        assert!(bad_reason(&[good.as_slice(), &[0]].concat()).contains("56"));
        let mut b = good;
        b[0] = b'X';
        assert!(bad_reason(&b).contains("magic"));
        let mut b = good;
        b[4] = 2;
        assert!(bad_reason(&b).contains("version"));
        let mut b = good;
        b[7] = 1;
        assert!(bad_reason(&b).contains("reserved"));
        let mut b = good;
        b[5] = 9;
        assert_eq!(SamplerState::from_bytes(&b), Err(Error::UnknownMode(9)));
    }
}
