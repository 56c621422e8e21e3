//! The modes: determinism, wrap-around, range, uniformity, bias.

mod common;

use common::{assert_fits, global, positions};
use loaderx_sampler::{Mode, Sampler};

#[test]
fn same_seed_gives_same_batches_and_another_seed_differs() {
    for mode in Mode::ALL {
        for len in [1000, 1_000_000, 1 << 40] {
            let a = positions(len, 300, mode, 7, 6000);
            let b = positions(len, 300, mode, 7, 6000);
            assert_eq!(a, b, "{mode} len {len}");
            assert!(a.iter().all(|&i| i < len), "{mode} len {len}");
            if mode != Mode::Sequential {
                assert_ne!(a, positions(len, 300, mode, 8, 6000), "{mode} len {len}");
            }
        }
    }
}

/// Pins the stream itself: the same seed must give these indices on every
/// machine, every run, every build. A change here breaks every checkpoint
/// and every reproduced experiment, so it must be deliberate.
#[test]
fn golden_values_pin_the_stream() {
    let cases: [(Mode, u64, [u64; 8]); 6] = [
        (Mode::Sequential, 10, [4, 5, 6, 7, 8, 9, 0, 1]),
        (Mode::Iid, 1_000_000, GOLDEN_IID_NARROW),
        (Mode::Iid, 1 << 40, GOLDEN_IID_WIDE),
        (Mode::Shuffle, 10, GOLDEN_SHUFFLE_SMALL),
        (Mode::Shuffle, 1_000_000, GOLDEN_SHUFFLE_FEISTEL),
        (Mode::Shuffle, 1 << 40, GOLDEN_SHUFFLE_HUGE),
    ];
    for (mode, len, expected) in cases {
        let got = global(len, 8, mode, 2024, 3);
        assert_eq!(got, expected, "{mode} len {len}: got {got:?}");
    }
}

const GOLDEN_IID_NARROW: [u64; 8] = [
    782245, 171024, 161554, 719769, 345281, 81131, 729491, 769567,
];
const GOLDEN_IID_WIDE: [u64; 8] = [
    177631400904,
    791394616107,
    802084680280,
    846148564244,
    883613701071,
    380298633573,
    24686370407,
    224806954243,
];
const GOLDEN_SHUFFLE_SMALL: [u64; 8] = [3, 6, 2, 0, 7, 9, 0, 7];
const GOLDEN_SHUFFLE_FEISTEL: [u64; 8] = [
    865398, 303745, 636921, 206324, 617031, 15832, 165329, 145967,
];
const GOLDEN_SHUFFLE_HUGE: [u64; 8] = [
    80686161076,
    188824579230,
    504873070945,
    104021151989,
    789534250698,
    1045066023894,
    433587548174,
    884422725822,
];

#[test]
fn sequential_slides_round_the_index_space() {
    let mut s = Sampler::new(10, 4, Mode::Sequential, 0).unwrap();
    let batches: Vec<Vec<u64>> = (0..4).map(|_| s.next_batch()).collect();
    assert_eq!(
        batches,
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5]]
    );
    // A batch larger than the index space wraps more than once.
    assert_eq!(
        global(3, 8, Mode::Sequential, 0, 1),
        [2, 0, 1, 2, 0, 1, 2, 0]
    );
    // (k·B + j) mod N holds at the far end of the step range, exactly.
    let (len, batch, step) = (1_000_003u64, 4096usize, u64::MAX);
    let first = (u128::from(step) * batch as u128 % u128::from(len)) as u64;
    let expected: Vec<u64> = (0..batch as u64).map(|j| (first + j) % len).collect();
    assert_eq!(global(len, batch, Mode::Sequential, 0, step), expected);
}

#[test]
fn iid_is_uniform_and_in_range() {
    let len = 1000;
    let draws = positions(len, 1000, Mode::Iid, 99, 1_000_000);
    let mut counts = vec![0u64; len as usize];
    for &i in &draws {
        counts[i as usize] += 1;
    }
    let expected = vec![draws.len() as f64 / len as f64; len as usize];
    assert_fits("iid N=1000", &counts, &expected);
    // Both word widths stay in range at the edges.
    for len in [
        (1 << 23) + 1,
        u32::MAX as u64,
        1 << 32,
        (1 << 40) + 1,
        u64::MAX,
    ] {
        let draws = positions(len, 256, Mode::Iid, 5, 20_000);
        assert!(draws.iter().all(|&i| i < len), "len {len}");
        // The top half of the range is hit about half the time.
        let high = draws.iter().filter(|&&i| i >= len / 2).count();
        assert!((9_000..11_000).contains(&high), "len {len}: {high}");
    }
}

/// With N = 3, `word mod 3` over 32-bit words would favour 0; here the
/// frequencies must fit 1/3 each. (The exact argument, counting every word,
/// is the unit test `lemire_rejection_leaves_every_index_equally_likely`.)
#[test]
fn iid_with_a_tiny_len_shows_no_bias() {
    let draws = positions(3, 1000, Mode::Iid, 1, 300_000);
    let mut counts = [0u64; 3];
    for &i in &draws {
        counts[i as usize] += 1;
    }
    assert_fits("iid N=3", &counts, &[100_000.0; 3]);
    // Consecutive pairs are independent too.
    let mut pairs = [0u64; 9];
    for w in draws.chunks_exact(2) {
        pairs[(w[0] * 3 + w[1]) as usize] += 1;
    }
    assert_fits("iid N=3 pairs", &pairs, &[150_000.0 / 9.0; 9]);
}

#[test]
fn len_one_always_yields_zero() {
    for mode in Mode::ALL {
        assert!(
            positions(1, 7, mode, 3, 100).iter().all(|&i| i == 0),
            "{mode}"
        );
    }
}

#[test]
fn huge_index_spaces_work() {
    for len in [1u64 << 40, (1 << 40) + 3, (1 << 63) + 5, u64::MAX] {
        for mode in Mode::ALL {
            let s = Sampler::new(len, 8192, mode, 11).unwrap();
            let mut out = vec![0; 8192];
            for step in [0, 1, 1 << 20, u64::MAX] {
                s.indices_at(step, &mut out).unwrap();
                assert!(out.iter().all(|&i| i < len), "{mode} len {len}");
                if mode == Mode::Shuffle {
                    let mut sorted = out.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    assert_eq!(
                        sorted.len(),
                        8192,
                        "shuffle len {len}: repeats within an epoch"
                    );
                }
            }
        }
    }
}

#[test]
fn set_step_and_indices_at_agree_with_fill() {
    for mode in Mode::ALL {
        let mut s = Sampler::new(5000, 96, mode, 21)
            .unwrap()
            .sharded(1, 3)
            .unwrap();
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(s.next_batch());
        }
        assert_eq!(s.step(), 10);
        let mut out = vec![0; s.local_batch_size()];
        for (step, batch) in seen.iter().enumerate() {
            s.indices_at(step as u64, &mut out).unwrap();
            assert_eq!(&out, batch, "{mode} step {step}");
        }
        s.set_step(4);
        s.fill(&mut out).unwrap();
        assert_eq!(out, seen[4], "{mode}");
        assert_eq!(s.step(), 5);
    }
}

/// `Cyclic` (loaderx 2.8's `CYCLIC`): an epoch is `⌊N/B⌋` whole batches of
/// one permutation, the `N mod B` left over skipped; a batch never repeats
/// an index when `B ≤ N`; `B > N` takes whole permutations cut at `B`.
#[test]
fn cyclic_epochs_hold_whole_batches_of_one_permutation() {
    for (len, batch) in [(10u64, 3usize), (10, 4), (10, 10), (1000, 64), (5000, 7)] {
        let mut s = Sampler::new(len, batch, Mode::Cyclic, 11).unwrap();
        let per_epoch = (len / batch as u64) as usize;
        for epoch in 0..3 {
            let mut seen: Vec<u64> = (0..per_epoch).flat_map(|_| s.next_batch()).collect();
            assert_eq!(seen.len(), per_epoch * batch);
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(
                seen.len(),
                per_epoch * batch,
                "len {len} batch {batch} epoch {epoch}"
            );
            assert!(seen.iter().all(|&i| i < len));
        }
    }
    // When B divides N, the stream is Shuffle's.
    assert_eq!(
        positions(1000, 100, Mode::Cyclic, 3, 5000),
        positions(1000, 100, Mode::Shuffle, 3, 5000)
    );
    // The skipped tail: batch 1 of epoch 0 is not the straddling batch.
    let shuffle = global(10, 4, Mode::Shuffle, 5, 0);
    assert_eq!(global(10, 4, Mode::Cyclic, 5, 0), shuffle);
    let first_epoch: Vec<u64> = (0..3)
        .flat_map(|k| global(10, 4, Mode::Shuffle, 5, k))
        .collect();
    assert_eq!(global(10, 4, Mode::Cyclic, 5, 1), first_epoch[4..8]);
    // B > N: each batch is ⌈B/N⌉ permutations, no index more than ⌈B/N⌉ times.
    let big = global(3, 7, Mode::Cyclic, 1, 4);
    assert_eq!(big.len(), 7);
    for i in 0..3 {
        let count = big.iter().filter(|&&x| x == i).count();
        assert!((2..=3).contains(&count), "{big:?}");
    }
    let mut first_three = big[..3].to_vec();
    first_three.sort_unstable();
    assert_eq!(first_three, [0, 1, 2]);
}
