//! Exact shuffles of small index spaces: a Fisher–Yates pass over a
//! fixed-size stack table.
//!
//! For `N ≤` [`SMALL_LEN`] the permutation of an epoch is drawn exactly
//! uniformly (up to the generator) instead of by the Feistel network, whose
//! permutations of tiny domains are measurably skewed (see
//! [`feistel`](crate::feistel)). The table is a fixed 2 KiB on the stack, not
//! a per-`N` allocation, and it is rebuilt for every epoch a call touches, so
//! nothing is cached and any position is still a pure function of its epoch.
//!
//! Definition: the table starts as the identity `0..N`; for `i` from `N − 1`
//! down to 1, swap entries `i` and `j`, with `j` uniform in `0..=i` drawn by
//! Lemire's multiply-shift with rejection from `xoshiro256++` (its state is
//! four `SplitMix64` words of the epoch key, as `rand_xoshiro`'s `from_seed`
//! takes them). Position `p` of the epoch is entry `p`. Entries at and above
//! `i` are final once step `i` is done, so a call that needs only positions
//! `start..` stops at `start`.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::keys::expand;

/// The largest `N` shuffled with a table (a power of two, so the domain of
/// the Feistel network for any larger `N` has at least 2^11 points).
pub(crate) const SMALL_LEN: usize = 1024;

/// An integer uniform in `0..n` (`n ≥ 1`), without bias.
#[inline]
fn below(rng: &mut Xoshiro256PlusPlus, n: u64) -> u64 {
    let mut m = u128::from(rng.next_u64()) * u128::from(n);
    if (m as u64) < n {
        // 2^64 mod n: the words below it in the low half are rejected.
        let threshold = n.wrapping_neg() % n;
        while (m as u64) < threshold {
            m = u128::from(rng.next_u64()) * u128::from(n);
        }
    }
    (m >> 64) as u64
}

/// Writes positions `start..start + out.len()` of the permutation of
/// `0..len` keyed by `key`. Needs `len ≤ SMALL_LEN` and
/// `start + out.len() ≤ len`.
pub(crate) fn shuffle_small(key: u64, len: usize, start: usize, out: &mut [u64]) {
    debug_assert!(len <= SMALL_LEN && start + out.len() <= len);
    let mut table = [0u16; SMALL_LEN];
    let table = &mut table[..len];
    for (i, entry) in table.iter_mut().enumerate() {
        // Below SMALL_LEN = 2^10, so it fits.
        *entry = i as u16;
    }
    let mut seed = [0u8; 32];
    for (dst, word) in seed.chunks_exact_mut(8).zip(expand::<4>(key)) {
        dst.copy_from_slice(&word.to_le_bytes());
    }
    let mut rng = Xoshiro256PlusPlus::from_seed(seed);
    for i in (start.max(1)..len).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        table.swap(i, j);
    }
    for (slot, &entry) in out.iter_mut().zip(&table[start..]) {
        *slot = u64::from(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_equals_the_same_positions_of_the_whole_table() {
        for len in [1, 2, 3, 10, 1000, SMALL_LEN] {
            let mut whole = vec![0; len];
            shuffle_small(99, len, 0, &mut whole);
            let mut sorted = whole.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..len as u64).collect::<Vec<_>>());
            for start in [0, len / 2, len - 1] {
                let mut part = vec![0; len - start];
                shuffle_small(99, len, start, &mut part);
                assert_eq!(part, whole[start..], "len {len} start {start}");
            }
        }
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = Xoshiro256PlusPlus::from_seed([7; 32]);
        for n in [1, 2, 3, 1000, u64::MAX] {
            for _ in 0..1000 {
                assert!(below(&mut rng, n) < n);
            }
        }
    }
}
