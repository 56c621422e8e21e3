//! Two xoshiro256++ generators stepped in lock-step.
//!
//! One xoshiro256++ stream is a chain of dependent shifts, xors and adds, so
//! a single stream leaves part of a core idle. Two independent streams
//! stepped together give the core two chains to overlap. (Not four: their
//! sixteen state words no longer fit in the registers, which makes them
//! slower; the compiler keeps these scalar, since baseline x86-64 has no
//! vector rotate. `docs/bench/rust.md`, "Sampler".)
//! Each lane is bit-for-bit
//! `rand_xoshiro::Xoshiro256PlusPlus::from_seed` of its four state words in
//! little-endian (a unit test checks this against `rand_xoshiro`).

use crate::keys::expand;

/// Number of independent streams.
pub(crate) const LANES: usize = 2;

/// [`LANES`] xoshiro256++ states, stored lane-wise.
#[derive(Debug, Clone)]
pub(crate) struct Xoshiro256PlusPlusLanes {
    s0: [u64; LANES],
    s1: [u64; LANES],
    s2: [u64; LANES],
    s3: [u64; LANES],
}

impl Xoshiro256PlusPlusLanes {
    /// Seeds the lanes from `4·LANES` `SplitMix64` outputs of `key`: lane
    /// `l` gets outputs `4l .. 4l + 4` as its state words `s0..s3`. `SplitMix64`
    /// never repeats within a stream, so no lane state is all zero.
    #[inline]
    pub(crate) fn from_key(key: u64) -> Self {
        let w = expand::<{ 4 * LANES }>(key);
        Xoshiro256PlusPlusLanes {
            s0: std::array::from_fn(|l| w[4 * l]),
            s1: std::array::from_fn(|l| w[4 * l + 1]),
            s2: std::array::from_fn(|l| w[4 * l + 2]),
            s3: std::array::from_fn(|l| w[4 * l + 3]),
        }
    }

    /// The next output of every lane.
    #[inline(always)]
    pub(crate) fn next(&mut self) -> [u64; LANES] {
        std::array::from_fn(|l| {
            let out = self.s0[l]
                .wrapping_add(self.s3[l])
                .rotate_left(23)
                .wrapping_add(self.s0[l]);
            let t = self.s1[l] << 17;
            self.s2[l] ^= self.s0[l];
            self.s3[l] ^= self.s1[l];
            self.s1[l] ^= self.s2[l];
            self.s0[l] ^= self.s3[l];
            self.s2[l] ^= t;
            self.s3[l] = self.s3[l].rotate_left(45);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::{Rng, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    #[test]
    fn every_lane_is_rand_xoshiro_xoshiro256plusplus() {
        for key in [0, 1, 0xdead_beef, u64::MAX] {
            let words = expand::<{ 4 * LANES }>(key);
            let mut reference: Vec<Xoshiro256PlusPlus> = (0..LANES)
                .map(|l| {
                    let mut seed = [0u8; 32];
                    for (dst, w) in seed.chunks_exact_mut(8).zip(&words[4 * l..4 * l + 4]) {
                        dst.copy_from_slice(&w.to_le_bytes());
                    }
                    Xoshiro256PlusPlus::from_seed(seed)
                })
                .collect();
            let mut lanes = Xoshiro256PlusPlusLanes::from_key(key);
            for _ in 0..1000 {
                let got = lanes.next();
                for (l, rng) in reference.iter_mut().enumerate() {
                    assert_eq!(got[l], rng.next_u64(), "key {key:#x} lane {l}");
                }
            }
        }
    }
}
