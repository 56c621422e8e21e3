//! Shuffle mode: every epoch a permutation, a fresh one each time, with
//! uniform statistics.

mod common;

use common::{assert_fits, is_permutation, positions};
use loaderx_sampler::{Mode, Sampler};
use proptest::prelude::*;

/// The index at global position `p` (batch size 1 makes step == position).
fn at(sampler: &Sampler, p: u64) -> u64 {
    let mut out = [0];
    sampler.indices_at(p, &mut out).unwrap();
    out[0]
}

#[test]
fn every_epoch_is_a_permutation_for_many_lens() {
    let lens = [
        1, 2, 3, 5, 7, 13, 64, 97, 256, 1023, 1024, 1025, 4096, 65_537, 1_000_000,
    ];
    for len in lens {
        // 1000 divides none of the small lens, so batches straddle epochs.
        let stream = positions(len, 1000, Mode::Shuffle, 17, 3 * len as usize);
        let epochs: Vec<&[u64]> = stream.chunks(len as usize).collect();
        for (e, epoch) in epochs.iter().enumerate() {
            assert!(is_permutation(epoch), "len {len} epoch {e}");
        }
        if len >= 13 {
            assert_ne!(epochs[0], epochs[1], "len {len}");
            assert_ne!(epochs[1], epochs[2], "len {len}");
        }
    }
}

#[test]
fn consecutive_epochs_are_different_permutations() {
    for len in [20u64, 1000, 2000, 100_000] {
        let stream = positions(len, 512, Mode::Shuffle, 3, 30 * len as usize);
        let mut epochs: Vec<&[u64]> = stream.chunks(len as usize).collect();
        epochs.sort_unstable();
        epochs.dedup();
        assert_eq!(epochs.len(), 30, "len {len}: an epoch repeated");
    }
}

/// Over many epochs, the value at a fixed position is uniform, and so is
/// the pair at two neighbouring positions: the permutations behave like
/// uniformly random ones. Covers both the table shuffle (N ≤ 1024) and the
/// Feistel network (N > 1024), where the cells are value buckets.
#[test]
fn epoch_statistics_are_uniform() {
    // Small N: exact cells.
    let len = 10u64;
    let s = Sampler::new(len, 1, Mode::Shuffle, 5).unwrap();
    let epochs = 90_000u64;
    let mut first = vec![0u64; 10];
    let mut pairs = vec![0u64; 100];
    for e in 0..epochs {
        let a = at(&s, e * len + 3);
        let b = at(&s, e * len + 4);
        assert_ne!(a, b);
        first[a as usize] += 1;
        pairs[(a * len + b) as usize] += 1;
    }
    assert_fits("N=10 position 3", &first, &[epochs as f64 / 10.0; 10]);
    let (cells, expected): (Vec<u64>, Vec<f64>) = (0..100)
        .filter(|c| c / 10 != c % 10)
        .map(|c| (pairs[c as usize], epochs as f64 / 90.0))
        .unzip();
    assert_fits("N=10 positions 3,4", &cells, &expected);

    // Large N: 16 value buckets per position.
    for len in [2000u64, 1_000_000] {
        let s = Sampler::new(len, 1, Mode::Shuffle, 6).unwrap();
        let epochs = 100_000u64;
        let bucket = |v: u64| (v * 16 / len) as usize;
        let mut first = vec![0u64; 16];
        let mut pairs = vec![0u64; 256];
        for e in 0..epochs {
            let (a, b) = (at(&s, e * len), at(&s, e * len + 1));
            first[bucket(a)] += 1;
            pairs[bucket(a) * 16 + bucket(b)] += 1;
        }
        // len is a multiple of 16, so buckets are equal and a pair of
        // distinct values lands in (i, j) with probability n_i (n_j − [i = j])
        // / (N (N − 1)).
        let n = (len / 16) as f64;
        let pair_p =
            |i: usize, j: usize| n * (n - f64::from(u8::from(i == j))) / (len * (len - 1)) as f64;
        let expected: Vec<f64> = (0..256)
            .map(|c| epochs as f64 * pair_p(c / 16, c % 16))
            .collect();
        assert_fits(
            &format!("N={len} position 0"),
            &first,
            &[epochs as f64 / 16.0; 16],
        );
        assert_fits(&format!("N={len} positions 0,1"), &pairs, &expected);
    }
}

/// Neighbouring positions within one epoch are unrelated: the low bits of
/// `perm(x) xor perm(x+1)` are uniform, and so is the distance
/// `perm(x+1) − perm(x) mod N` (a Feistel network with a plain multiply-shift
/// round function fails this: its permutations have lattice structure).
#[test]
fn neighbours_within_an_epoch_are_unrelated() {
    for len in [5000u64, 1_000_000, 1 << 20] {
        let epoch = positions(len, 4096, Mode::Shuffle, 8, len as usize);
        let buckets = 1000.min(len / 5);
        let mut low = vec![0u64; 64];
        let mut distance = vec![0u64; buckets as usize];
        for w in epoch.windows(2) {
            low[((w[0] ^ w[1]) & 63) as usize] += 1;
            let d = (w[1] + len - w[0]) % len;
            distance[(d * buckets / len) as usize] += 1;
        }
        // Distances are uniform over 1..N (never 0).
        let per = |b: u64| ((b + 1) * len).div_ceil(buckets) - (b * len).div_ceil(buckets).max(1);
        let total = (len - 1) as f64;
        let expected: Vec<f64> = (0..buckets)
            .map(|b| total * per(b) as f64 / (len - 1) as f64)
            .collect();
        assert_fits(&format!("N={len} neighbour xor"), &low, &[total / 64.0; 64]);
        assert_fits(&format!("N={len} neighbour distance"), &distance, &expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every epoch of N consecutive draws is a permutation of 0..N, for any
    /// N, batch size, seed and starting epoch, and the ranks' shares of each
    /// batch put together give the global batch.
    #[test]
    fn epochs_are_permutations(
        len in 1u64..3000,
        batch_factor in 1usize..200,
        world in prop::sample::select(vec![1usize, 2, 3, 4]),
        seed in any::<u64>(),
        start_epoch in 0u64..1_000_000,
    ) {
        let batch = batch_factor * world;
        let global = Sampler::new(len, 1, Mode::Shuffle, seed).unwrap();
        let first = start_epoch * len;
        let epoch: Vec<u64> = (first..first + len).map(|p| at(&global, p)).collect();
        prop_assert!(is_permutation(&epoch));

        let ranks: Vec<Sampler> = (0..world)
            .map(|r| Sampler::new(len, batch, Mode::Shuffle, seed).unwrap().sharded(r, world).unwrap())
            .collect();
        let mut whole = Vec::new();
        let mut share = vec![0; batch / world];
        for step in 0..(2 * len).div_ceil(batch as u64) {
            for rank in &ranks {
                rank.indices_at(step, &mut share).unwrap();
                whole.extend_from_slice(&share);
            }
        }
        for e in whole.chunks_exact(len as usize) {
            prop_assert!(is_permutation(e));
        }
        // With batch size B, positions are the same as with batch size 1.
        prop_assert_eq!(&whole[..len as usize], &positions(len, 1, Mode::Shuffle, seed, len as usize)[..]);
    }
}
