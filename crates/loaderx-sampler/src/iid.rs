//! [`Mode::Iid`](crate::Mode::Iid): uniform draws from `0..N` with
//! replacement, exactly unbiased.
//!
//! # Stream definition
//!
//! A global batch of `B` positions is cut into *blocks* of [`BLOCK`] = 256
//! consecutive positions (the last one may be shorter). Block `b` of step `s`
//! owns a private generator, `Xoshiro256PlusPlusLanes` seeded from
//! `child_key(child_key(root, s), b)`, and nothing else: any block, and so any
//! contiguous share of a batch, is produced without producing the rest, and
//! the stream does not depend on how many ranks split the batch.
//!
//! Inside a block the generator is read as a stream of *words*. Position
//! `j` takes the next word `w` and maps it with Lemire's multiply-shift:
//! `m = w · N`; the index is the high half of `m`; the word is rejected (and
//! the next one taken) when the low half of `m` is below `2^W mod N`, with
//! `W` the word width. Of the `2^W` words, exactly `floor(2^W / N)` land on
//! each index after rejection, so every index has the same probability: no
//! modulo bias. Rejection is rare (probability `(2^W mod N) / 2^W`).
//!
//! The generator has two lanes (two xoshiro256++ streams, see
//! [`lanes`](crate::lanes)); one step gives one 64-bit output per lane. Two
//! word widths, fixed by `N` alone:
//! * *narrow* (`W = 32`) when `N < 2^32` and `2^32 mod N ≤ 2^22` (rejection
//!   probability at most 2^-10, always the case for `N ≤ 2^22`). Each 64-bit
//!   output gives two words, so one step gives four words: the low halves of
//!   lanes 0 and 1, then their high halves.
//! * *wide* (`W = 64`) otherwise: one word per output, lane 0 then lane 1.
//!
//! # Speed
//!
//! The fast path assumes no word is rejected and maps each generator step
//! straight into the caller's slice (narrow: one 32×32→64 multiply per
//! index; wide: one 64×64→128 multiply per index), checking a rejection flag
//! once per step. From the first step in which a word is rejected (rare), a
//! word-at-a-time loop that reads the definition literally takes over, with
//! the same generator state, so both give the same indices by construction;
//! a unit test checks them against a from-scratch reading for many `N`.

use crate::keys::{IID_DOMAIN, child_key, root_key};
use crate::lanes::{LANES, Xoshiro256PlusPlusLanes};

/// Positions per independently seeded block.
pub(crate) const BLOCK: usize = 256;

/// Narrow words are used while `2^32 mod N` is at most this.
const NARROW_MAX_THRESHOLD: u64 = 1 << 22;

/// The word width and the rejection threshold `2^W mod N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Words {
    Narrow { len: u32, threshold: u32 },
    Wide { len: u64, threshold: u64 },
}

/// The uniform-with-replacement stream over `0..len`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Iid {
    root: u64,
    words: Words,
}

impl Iid {
    pub(crate) fn new(seed: u64, len: u64) -> Iid {
        debug_assert!(len > 0);
        Iid {
            root: root_key(seed, IID_DOMAIN),
            words: Words::for_len(len),
        }
    }

    /// Writes the indices of positions `offset..offset + out.len()` of the
    /// global batch at `step`.
    pub(crate) fn fill(&self, step: u64, offset: usize, out: &mut [u64]) {
        let step_key = child_key(self.root, step);
        let mut position = offset;
        let mut rest = out;
        while !rest.is_empty() {
            let block = position / BLOCK;
            let skip = position % BLOCK;
            let take = (BLOCK - skip).min(rest.len());
            let key = child_key(step_key, block as u64);
            let (head, tail) = rest.split_at_mut(take);
            if skip == 0 {
                self.block(key, head);
            } else {
                // A share that starts inside a block: the words before it
                // decide which words it gets (rejection), so run the block
                // from its start and keep the tail.
                let mut scratch = [0u64; BLOCK];
                let whole = &mut scratch[..skip + take];
                self.block(key, whole);
                head.copy_from_slice(&whole[skip..]);
            }
            rest = tail;
            position += take;
        }
    }

    /// Writes the first `out.len()` (at most [`BLOCK`]) indices of the block
    /// keyed by `key`.
    #[inline]
    fn block(&self, key: u64, out: &mut [u64]) {
        debug_assert!(out.len() <= BLOCK);
        let mut rng = Xoshiro256PlusPlusLanes::from_key(key);
        match self.words {
            Words::Narrow { len, threshold } => narrow_block(&mut rng, len, threshold, out),
            Words::Wide { len, threshold } => wide_block(&mut rng, len, threshold, out),
        }
    }

    /// The definition read literally: one word at a time, rejecting as it
    /// goes. The reference the fast path is tested against.
    #[cfg(test)]
    fn block_exact(&self, key: u64, out: &mut [u64]) {
        let mut rng = Xoshiro256PlusPlusLanes::from_key(key);
        match self.words {
            Words::Narrow { len, threshold } => {
                narrow_exact(&mut rng, [0; 2 * LANES], 2 * LANES, len, threshold, out);
            }
            Words::Wide { len, threshold } => {
                wide_exact(&mut rng, [0; LANES], LANES, len, threshold, out);
            }
        }
    }
}

impl Words {
    fn for_len(len: u64) -> Words {
        if let Ok(narrow) = u32::try_from(len) {
            let threshold = (1u64 << 32) % len;
            if threshold <= NARROW_MAX_THRESHOLD {
                return Words::Narrow {
                    len: narrow,
                    threshold: threshold as u32,
                };
            }
        }
        Words::Wide {
            len,
            threshold: len.wrapping_neg() % len,
        }
    }
}

/// Maps one generator step to `2·LANES` narrow-word positions, assuming no
/// rejection; returns a value whose top bit is set if a word should have been
/// rejected.
#[inline(always)]
fn narrow_step(x: [u64; LANES], len: u64, threshold: u64, out: &mut [u64; 2 * LANES]) -> u64 {
    let mut flags = 0;
    for (l, x) in x.into_iter().enumerate() {
        let lo = (x & 0xffff_ffff) * len;
        let hi = (x >> 32) * len;
        out[l] = lo >> 32;
        out[LANES + l] = hi >> 32;
        // `low32 - threshold` wraps (sets bit 63) exactly when low32 < threshold.
        flags |=
            (lo & 0xffff_ffff).wrapping_sub(threshold) | (hi & 0xffff_ffff).wrapping_sub(threshold);
    }
    flags
}

/// The words of one narrow step, in definition order.
#[inline(always)]
fn narrow_words(x: [u64; LANES]) -> [u32; 2 * LANES] {
    // Lossless: each half is taken out before the cast.
    std::array::from_fn(|i| (x[i % LANES] >> (32 * (i / LANES))) as u32)
}

/// The narrow fast path: whole steps straight into `out` while no word is
/// rejected; from the first step with a rejection (rare), and for a partial
/// last step, [`narrow_exact`] takes over with the same generator, so the
/// result is the definition either way.
#[inline]
fn narrow_block(rng: &mut Xoshiro256PlusPlusLanes, len: u32, threshold: u32, out: &mut [u64]) {
    let (len64, threshold64) = (u64::from(len), u64::from(threshold));
    let (chunks, _) = out.as_chunks_mut::<{ 2 * LANES }>();
    let whole = chunks.len();
    let mut resume = None;
    for (c, chunk) in chunks.iter_mut().enumerate() {
        let x = rng.next();
        if narrow_step(x, len64, threshold64, chunk) >> 63 != 0 {
            resume = Some((c, x));
            break;
        }
    }
    let (start, pending, next) = match resume {
        Some((c, x)) => (c, narrow_words(x), 0),
        None => (whole, [0; 2 * LANES], 2 * LANES),
    };
    narrow_exact(
        rng,
        pending,
        next,
        len,
        threshold,
        &mut out[start * 2 * LANES..],
    );
}

/// The definition: each position takes words until one is accepted. Words
/// `pending[next..]` come first, then further steps of `rng`.
#[inline(never)]
fn narrow_exact(
    rng: &mut Xoshiro256PlusPlusLanes,
    mut pending: [u32; 2 * LANES],
    mut next: usize,
    len: u32,
    threshold: u32,
    out: &mut [u64],
) {
    for slot in out {
        *slot = loop {
            if next == pending.len() {
                pending = narrow_words(rng.next());
                next = 0;
            }
            let m = u64::from(pending[next]) * u64::from(len);
            next += 1;
            if (m as u32) >= threshold {
                break m >> 32;
            }
        };
    }
}

/// Maps one generator step to `LANES` wide-word positions, assuming no
/// rejection; returns whether a word should have been rejected.
#[inline(always)]
fn wide_step(x: [u64; LANES], len: u64, threshold: u64, out: &mut [u64; LANES]) -> bool {
    let mut rejected = false;
    for (slot, x) in out.iter_mut().zip(x) {
        let m = u128::from(x) * u128::from(len);
        *slot = (m >> 64) as u64;
        rejected |= (m as u64) < threshold;
    }
    rejected
}

/// The wide counterpart of [`narrow_block`].
#[inline]
fn wide_block(rng: &mut Xoshiro256PlusPlusLanes, len: u64, threshold: u64, out: &mut [u64]) {
    let (chunks, _) = out.as_chunks_mut::<LANES>();
    let whole = chunks.len();
    let mut resume = None;
    for (c, chunk) in chunks.iter_mut().enumerate() {
        let x = rng.next();
        if wide_step(x, len, threshold, chunk) {
            resume = Some((c, x));
            break;
        }
    }
    let (start, pending, next) = match resume {
        Some((c, x)) => (c, x, 0),
        None => (whole, [0; LANES], LANES),
    };
    wide_exact(
        rng,
        pending,
        next,
        len,
        threshold,
        &mut out[start * LANES..],
    );
}

/// The wide counterpart of [`narrow_exact`].
#[inline(never)]
fn wide_exact(
    rng: &mut Xoshiro256PlusPlusLanes,
    mut pending: [u64; LANES],
    mut next: usize,
    len: u64,
    threshold: u64,
    out: &mut [u64],
) {
    for slot in out {
        *slot = loop {
            if next == pending.len() {
                pending = rng.next();
                next = 0;
            }
            let m = u128::from(pending[next]) * u128::from(len);
            next += 1;
            if (m as u64) >= threshold {
                break (m >> 64) as u64;
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lengths that exercise both word widths, rare and frequent rejection,
    /// and the edges of the narrow range.
    const LENS: [u64; 14] = [
        1,
        2,
        3,
        7,
        1000,
        1_000_000,
        (1 << 22) + 1,
        (1 << 23) + 1,     // 2^32 mod N close to N: wide
        (1 << 24) - 1,     // 2^32 mod N = 256: narrow
        (1 << 31) + 1,     // rejection ~1/2 if it were narrow: wide
        u32::MAX as u64,   // 2^32 mod N = 1: narrow
        1 << 32,           // wide
        (1 << 40) + 12345, // wide
        u64::MAX,          // wide, 2^64 mod N = 1
    ];

    #[test]
    fn word_width_follows_the_documented_rule() {
        assert!(matches!(
            Words::for_len(1_000_000),
            Words::Narrow {
                threshold: 967_296,
                ..
            }
        ));
        assert!(matches!(Words::for_len((1 << 23) + 1), Words::Wide { .. }));
        assert!(matches!(
            Words::for_len((1 << 24) - 1),
            Words::Narrow { threshold: 256, .. }
        ));
        assert!(matches!(
            Words::for_len(u64::from(u32::MAX)),
            Words::Narrow { threshold: 1, .. }
        ));
        assert!(matches!(
            Words::for_len(1 << 32),
            Words::Wide { threshold: 0, .. }
        ));
        assert!(matches!(
            Words::for_len(u64::MAX),
            Words::Wide { threshold: 1, .. }
        ));
    }

    #[test]
    fn fast_path_equals_the_definition() {
        for len in LENS {
            let iid = Iid::new(7, len);
            for block in 0..200 {
                let key = child_key(0x5eed, block);
                for n in [BLOCK, 255, 13, 1] {
                    let mut fast = vec![0; n];
                    let mut exact = vec![0; n];
                    iid.block(key, &mut fast);
                    iid.block_exact(key, &mut exact);
                    assert_eq!(fast, exact, "len {len} block {block} n {n}");
                    assert!(fast.iter().all(|&i| i < len), "len {len}");
                }
            }
        }
    }

    #[test]
    fn a_share_starting_inside_a_block_matches_the_whole_batch() {
        for len in [3, 1_000_000, (1 << 23) + 1] {
            let iid = Iid::new(11, len);
            let mut whole = vec![0; 1000];
            iid.fill(5, 0, &mut whole);
            for (offset, n) in [
                (0, 1000),
                (1, 999),
                (100, 300),
                (255, 2),
                (256, 744),
                (999, 1),
            ] {
                let mut part = vec![0; n];
                iid.fill(5, offset, &mut part);
                assert_eq!(part, whole[offset..offset + n], "len {len} offset {offset}");
            }
        }
    }

    /// Exact argument for unbiasedness: count, over all `2^W` words, how many
    /// map to each index once rejected words are removed. Index `j` gets the
    /// words with `w·N` in `[j·2^W + t, (j+1)·2^W)`, i.e. the multiples of `N`
    /// in that range. Every index must get the same count. Without the
    /// rejection (`t = 0`) the counts differ for `N = 3` — the bias the
    /// threshold removes.
    #[test]
    fn lemire_rejection_leaves_every_index_equally_likely() {
        fn multiples_below(x: u128, n: u128) -> u128 {
            x.div_ceil(n)
        }
        fn counts(n: u64, width: u32, threshold: u128, sample: &[u64]) -> Vec<u128> {
            let (n, two_w) = (u128::from(n), 1u128 << width);
            sample
                .iter()
                .map(|&j| {
                    let lo = u128::from(j) * two_w + threshold;
                    let hi = (u128::from(j) + 1) * two_w;
                    multiples_below(hi, n) - multiples_below(lo, n)
                })
                .collect()
        }
        for len in LENS {
            let sample: Vec<u64> = [0, 1, len / 3, len / 2, len - 1]
                .into_iter()
                .filter(|&j| j < len)
                .collect();
            let (width, threshold) = match Words::for_len(len) {
                Words::Narrow { threshold, .. } => (32, u128::from(threshold)),
                Words::Wide { threshold, .. } => (64, u128::from(threshold)),
            };
            let c = counts(len, width, threshold, &sample);
            assert!(c.iter().all(|&x| x == c[0]), "len {len}: {c:?}");
            assert_eq!(c[0], (1u128 << width) / u128::from(len), "len {len}");
        }
        // The same count without rejection is biased for N = 3.
        let biased = counts(3, 32, 0, &[0, 1, 2]);
        assert_ne!(biased[0], biased[2], "{biased:?}");
    }
}
