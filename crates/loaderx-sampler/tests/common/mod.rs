//! Helpers shared by the integration tests (included with `mod common;`).
#![allow(dead_code)]

use loaderx_sampler::{Mode, Sampler};

/// The global batch at `step`, from an unsharded sampler.
pub fn global(len: u64, batch: usize, mode: Mode, seed: u64, step: u64) -> Vec<u64> {
    let sampler = Sampler::new(len, batch, mode, seed).unwrap();
    let mut out = vec![0; batch];
    sampler.indices_at(step, &mut out).unwrap();
    out
}

/// The first `count` global positions of a stream, batch after batch.
pub fn positions(len: u64, batch: usize, mode: Mode, seed: u64, count: usize) -> Vec<u64> {
    let mut sampler = Sampler::new(len, batch, mode, seed).unwrap();
    let mut out = Vec::with_capacity(count + batch);
    let mut buf = vec![0; batch];
    while out.len() < count {
        sampler.fill(&mut buf).unwrap();
        out.extend_from_slice(&buf);
    }
    out.truncate(count);
    out
}

/// Whether `xs` is a permutation of `0..xs.len()`.
pub fn is_permutation(xs: &[u64]) -> bool {
    let mut seen = vec![false; xs.len()];
    xs.iter().all(|&x| {
        let fresh = (x as usize) < xs.len() && !seen[x as usize];
        if fresh {
            seen[x as usize] = true;
        }
        fresh
    })
}

/// Pearson's statistic of `observed` against `expected` counts.
pub fn chi_square(observed: &[u64], expected: &[f64]) -> f64 {
    observed
        .iter()
        .zip(expected)
        .map(|(&o, &e)| (o as f64 - e).powi(2) / e)
        .sum()
}

/// Lower and upper critical values of a chi-square with `df` degrees of
/// freedom at tail probability 1e-6 each (Wilson–Hilferty). A correct
/// generator fails this one time in half a million per test; a biased or
/// too-regular one fails by a wide margin.
pub fn chi_square_bounds(df: f64) -> (f64, f64) {
    const Z: f64 = 4.753_424; // standard normal quantile at 1 - 1e-6
    let c = 2.0 / (9.0 * df);
    let at = |z: f64| df * (1.0 - c + z * c.sqrt()).powi(3);
    (at(-Z).max(0.0), at(Z))
}

/// Asserts `observed` fits `expected` at the bounds above.
pub fn assert_fits(what: &str, observed: &[u64], expected: &[f64]) {
    let stat = chi_square(observed, expected);
    let (lo, hi) = chi_square_bounds((observed.len() - 1) as f64);
    assert!(
        (lo..=hi).contains(&stat),
        "{what}: chi-square {stat:.1} outside [{lo:.1}, {hi:.1}] with {} cells",
        observed.len()
    );
}
