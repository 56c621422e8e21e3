//! Shared fixtures for the loaderx Rust benchmarks (`benches/benches/`): the
//! criterion suites `store`, `sampler` and `loader` that `cargo xtask bench`
//! runs, and the stand-alone `deflate_gather` (libdeflate against flate2)
//! and `codec_dispatch` (built-in against registered codecs).
//!
//! The workload everywhere is the one of the original's published figures:
//! 12 KiB records of smooth, image-like `uint8(3, 64, 64)` content, gathered
//! in batches of 256 random indices.

use std::time::{Duration, Instant};

use loaderx_store::Store;

/// Bytes of one record: a `uint8(3, 64, 64)` image.
pub const RECORD: usize = 3 * 64 * 64;
/// Records per gather.
pub const BATCH: usize = 256;

/// The next value of a xorshift64 generator (`x` must not be 0): the
/// deterministic noise of every fixture here.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The best of `rounds` timings of `f`, each round calling it back to back
/// for about `budget`: time per call.
pub fn best_of(rounds: usize, budget: Duration, mut f: impl FnMut()) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        let (mut n, start) = (0u32, Instant::now());
        while start.elapsed() < budget {
            f();
            n += 1;
        }
        best = best.min(start.elapsed() / n);
    }
    best
}

/// [`best_of`] for gathers of `RECORD`-byte records from `store` into
/// `out`: one batch per call, taking `batches` in turn.
pub fn best_gather(
    store: &Store,
    batches: &[Vec<u64>],
    out: &mut [u8],
    rounds: usize,
    budget: Duration,
) -> Duration {
    let mut k = 0;
    best_of(rounds, budget, || {
        store
            .gather(&batches[k % batches.len()], out, RECORD)
            .expect("gather");
        k += 1;
    })
}

/// One smooth image-like record: per-channel gradients plus a little noise,
/// so general-purpose codecs shrink it modestly (as real photos do).
pub fn image_record(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(RECORD);
    for c in 0..3u64 {
        for y in 0..64u64 {
            for col in 0..64u64 {
                let noise = xorshift(&mut x) % 10;
                let base = (y * 2 + col + c * 40 + seed * 13) % 200;
                out.push((base + noise) as u8);
            }
        }
    }
    out
}

/// One record of token-like data: little-endian `u16` token ids drawn from a
/// skewed vocabulary (what a tokenised text corpus looks like on disk).
pub fn token_record(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    let mut out = Vec::with_capacity(RECORD);
    while out.len() < RECORD {
        xorshift(&mut x);
        // Skewed: most tokens come from a small set of frequent ids.
        let id = if x.is_multiple_of(4) {
            x >> 20 & 0x7fff
        } else {
            (x >> 40) % 300
        };
        out.extend_from_slice(&(id as u16).to_le_bytes());
    }
    out
}

/// One record of text-like bytes: words from a small vocabulary with
/// punctuation, the kind of content LZ-only codecs (lz4) shrink well.
pub fn text_record(seed: u64) -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "the", "loader", "gathers", "records", "into", "memory", "while", "training", "runs", "a",
        "batch", "of", "indices", "is", "drawn", "from", "seed", "and", "step", "every", "epoch",
        "never", "ends", "store",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(RECORD);
    while out.len() < RECORD {
        xorshift(&mut x);
        out.extend_from_slice(WORDS[(x % 24) as usize].as_bytes());
        out.push(if x.is_multiple_of(11) { b'.' } else { b' ' });
    }
    out.truncate(RECORD);
    out
}

/// `n` image records back to back.
pub fn image_records(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64).flat_map(|i| image_record(seed + i)).collect()
}

/// Deterministic batches of random indices below `len`.
pub fn random_batches(len: u64, batches: usize, seed: u64) -> Vec<Vec<u64>> {
    let mut x = seed | 1;
    (0..batches)
        .map(|_| (0..BATCH).map(|_| xorshift(&mut x) % len).collect())
        .collect()
}
