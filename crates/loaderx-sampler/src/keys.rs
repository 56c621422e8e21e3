//! Key derivation: how `(seed, mode, step, block, epoch)` become the keys the
//! generators run on.
//!
//! Everything a sampler produces is a pure function of a key derived here, so
//! these functions *are* the stream's definition: changing a constant changes
//! every index of every stream. The golden-value tests pin them.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::SplitMix64;

/// Domain tags keep the streams of different modes unrelated under one seed.
pub(crate) const IID_DOMAIN: u64 = 0x6c78_7369_6964_0001; // "lxsiid", 1
pub(crate) const SHUFFLE_DOMAIN: u64 = 0x6c78_7373_6866_0002; // "lxsshf", 2

/// The golden-ratio increment of `SplitMix64`.
const PHI: u64 = 0x9e37_79b9_7f4a_7c15;

/// The `SplitMix64` output function (Stafford's Mix13): a bijection on `u64`
/// with full avalanche.
#[inline]
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The root key of a mode's stream under `seed`.
#[inline]
pub(crate) const fn root_key(seed: u64, domain: u64) -> u64 {
    mix64(mix64(seed) ^ domain)
}

/// The key of child `index` under `parent`. For a fixed parent, distinct
/// indices give distinct children (both mixes are bijections).
#[inline]
pub(crate) const fn child_key(parent: u64, index: u64) -> u64 {
    mix64(parent ^ mix64(index.wrapping_mul(PHI).wrapping_add(PHI)))
}

/// `N` words from a `SplitMix64` stream started at `key`: the recommended way
/// to turn one 64-bit key into generator state (no all-zero state, no
/// correlation between neighbouring keys).
#[inline]
pub(crate) fn expand<const N: usize>(key: u64) -> [u64; N] {
    let mut rng = SplitMix64::seed_from_u64(key);
    std::array::from_fn(|_| rng.next_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_of_one_parent_are_distinct() {
        let parent = root_key(42, IID_DOMAIN);
        let mut seen: Vec<u64> = (0..10_000).map(|i| child_key(parent, i)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 10_000);
        assert_ne!(root_key(42, IID_DOMAIN), root_key(42, SHUFFLE_DOMAIN));
    }

    #[test]
    fn expand_matches_splitmix_reference() {
        // First outputs of splitmix64.c seeded with 0.
        let words = expand::<2>(0);
        assert_eq!(words, [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4]);
    }
}
