//! A keyed bijection on `0..len` in O(1) memory: a Feistel network over the
//! smallest power-of-two domain that holds `len`, restricted to `0..len` by
//! cycle-walking.
//!
//! # Construction
//!
//! * **Domain.** `k = max(4, ceil(log2 len))` bits, split into a high half of
//!   `k − ⌊k/2⌋` bits and a low half of `⌊k/2⌋` bits (unbalanced when `k` is
//!   odd). A power-of-two domain (rather than a power of four) keeps the
//!   domain below `2·len`, so cycle-walking costs fewer than two network
//!   evaluations per index on average. The 16-element minimum gives tiny
//!   index spaces round functions with more than one bit to work on.
//! * **Rounds.** [`ROUNDS`] = 4 alternating rounds, with no swap:
//!   `hi ^= F₀(lo)`, `lo ^= F₁(hi)`, `hi ^= F₂(lo)`, `lo ^= F₃(hi)`. Each
//!   round xors one half with a function of the other, so each is its own
//!   inverse and the network is a bijection whatever `F` is. Four is the
//!   Luby–Rackoff count for a strong pseudo-random permutation; in our
//!   measurements three rounds left a visible dependence between the outputs
//!   of neighbouring positions (the low bits of `perm(x) ⊕ perm(x+1)` were
//!   far from uniform at `N = 10^6`), four showed none, and every extra round
//!   costs about a quarter of the throughput.
//! * **Round function.** `F(v) = top_w(h ⊕ rotl(h, 32))` with
//!   `h = (v ⊕ kᵢ)·mᵢ mod 2^64`, keeping the top `w` bits (the width of the
//!   half it is xored into); `kᵢ` and `mᵢ` (odd) come from the epoch key. One
//!   multiply per round. The top bits of a product alone are nearly affine in
//!   a small input (neighbouring inputs give outputs a near-constant distance
//!   apart) and leave lattice structure in the permutation; folding in bits
//!   32 places lower, which move with the input at a different scale, breaks
//!   it. This mixes as well as a two-multiply (murmur-style) function at
//!   half the multiplies, so it is the one kept (the shuffle rows of
//!   `docs/bench/rust.md`, "Sampler", measure it).
//! * **Small index spaces.** A Feistel network over a tiny domain is far
//!   from a uniform permutation (with 2-bit halves there are only 256
//!   possible round functions, and such networks only ever produce even
//!   permutations of the domain); position/value frequencies over many
//!   epochs were visibly skewed for `N` in the hundreds. So the shuffle
//!   stream uses this module only for `N > 1024`
//!   ([`SMALL_LEN`](crate::small::SMALL_LEN)), where the domain has at least
//!   2^11 points and no skew was measurable.
//! * **Cycle-walking.** For `x < len`, apply the network until the result is
//!   below `len`. Every cycle of a permutation of the domain through `x`
//!   returns to `x`, so the walk ends, and the map it induces on `0..len` is
//!   a bijection.

/// Rounds of the network (see the module docs for why four).
pub(crate) const ROUNDS: usize = 4;

/// The smallest domain, in bits.
const MIN_BITS: u32 = 4;

/// The per-epoch keys of the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoundKeys {
    xor: [u64; ROUNDS],
    mul: [u64; ROUNDS],
}

impl RoundKeys {
    /// Keys from eight random words; multipliers are forced odd.
    pub(crate) fn from_words(words: [u64; 2 * ROUNDS]) -> RoundKeys {
        RoundKeys {
            xor: std::array::from_fn(|i| words[i]),
            mul: std::array::from_fn(|i| words[ROUNDS + i] | 1),
        }
    }
}

/// The shape of the network for one `len`: the half widths and the shifts
/// that cut round-function outputs to them. No division anywhere.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Feistel {
    len: u64,
    low_bits: u32,
    low_mask: u64,
    /// `64 − width`: keeps the top `width` bits of a round output.
    high_shift: u32,
    low_shift: u32,
}

impl Feistel {
    pub(crate) fn new(len: u64) -> Feistel {
        debug_assert!(len > 0);
        let bits = (u64::BITS - (len - 1).leading_zeros()).max(MIN_BITS);
        let low_bits = bits / 2;
        let high_bits = bits - low_bits;
        Feistel {
            len,
            low_bits,
            low_mask: (1u64 << low_bits) - 1,
            high_shift: u64::BITS - high_bits,
            low_shift: u64::BITS - low_bits,
        }
    }

    #[inline(always)]
    fn round(v: u64, xor: u64, mul: u64, shift: u32) -> u64 {
        let h = (v ^ xor).wrapping_mul(mul);
        (h ^ h.rotate_left(32)) >> shift
    }

    /// One pass of the network over the power-of-two domain.
    #[inline(always)]
    fn network(&self, keys: &RoundKeys, x: u64) -> u64 {
        let mut hi = x >> self.low_bits;
        let mut lo = x & self.low_mask;
        hi ^= Self::round(lo, keys.xor[0], keys.mul[0], self.high_shift);
        lo ^= Self::round(hi, keys.xor[1], keys.mul[1], self.low_shift);
        hi ^= Self::round(lo, keys.xor[2], keys.mul[2], self.high_shift);
        lo ^= Self::round(hi, keys.xor[3], keys.mul[3], self.low_shift);
        (hi << self.low_bits) | lo
    }

    /// The image of `x` (which must be below `len`) under the keyed
    /// permutation of `0..len`.
    #[inline(always)]
    pub(crate) fn permute(&self, keys: &RoundKeys, x: u64) -> u64 {
        debug_assert!(x < self.len);
        let mut y = self.network(keys, x);
        while y >= self.len {
            y = self.network(keys, y);
        }
        y
    }

    /// [`Feistel::permute`] of `first..first + out.len()` into `out`.
    ///
    /// Runs the network on four positions at a time without branches, then
    /// walks the (few) results that fell outside `0..len`: independent work
    /// the core can overlap, and mispredictions only where a walk happens.
    #[inline]
    pub(crate) fn permute_run(&self, keys: &RoundKeys, first: u64, out: &mut [u64]) {
        let (f, k) = (*self, *keys);
        let walk = |mut y: u64| {
            while y >= f.len {
                y = f.network(&k, y);
            }
            y
        };
        let (chunks, tail) = out.as_chunks_mut::<4>();
        let mut x = first;
        for chunk in chunks {
            let y: [u64; 4] = std::array::from_fn(|i| f.network(&k, x + i as u64));
            for (slot, y) in chunk.iter_mut().zip(y) {
                *slot = walk(y);
            }
            x += 4;
        }
        for (slot, x) in tail.iter_mut().zip(x..) {
            *slot = f.permute(&k, x);
        }
    }

    /// The inverse of [`Feistel::permute`]; tests use it to prove the map is
    /// a bijection on index spaces too large to enumerate.
    #[cfg(test)]
    pub(crate) fn invert(&self, keys: &RoundKeys, y: u64) -> u64 {
        let inverse = |y: u64| {
            let mut hi = y >> self.low_bits;
            let mut lo = y & self.low_mask;
            lo ^= Self::round(hi, keys.xor[3], keys.mul[3], self.low_shift);
            hi ^= Self::round(lo, keys.xor[2], keys.mul[2], self.high_shift);
            lo ^= Self::round(hi, keys.xor[1], keys.mul[1], self.low_shift);
            hi ^= Self::round(lo, keys.xor[0], keys.mul[0], self.high_shift);
            (hi << self.low_bits) | lo
        };
        let mut x = inverse(y);
        while x >= self.len {
            x = inverse(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::expand;

    fn keys(key: u64) -> RoundKeys {
        RoundKeys::from_words(expand(key))
    }

    #[test]
    fn permutes_every_small_len_exactly() {
        for len in (1..=300).chain([1023, 1024, 1025, 4096, 65_537]) {
            let f = Feistel::new(len);
            for key in 0..3 {
                let k = keys(key);
                let mut seen = vec![false; len as usize];
                for x in 0..len {
                    let y = f.permute(&k, x);
                    assert!(y < len, "len {len}: {x} -> {y}");
                    assert!(!seen[y as usize], "len {len}: {y} hit twice");
                    seen[y as usize] = true;
                    assert_eq!(f.invert(&k, y), x);
                }
            }
        }
    }

    #[test]
    fn inverts_on_huge_lens() {
        for len in [1u64 << 40, (1 << 40) + 7, (1 << 63) + 1, u64::MAX] {
            let f = Feistel::new(len);
            let k = keys(len);
            for i in 0..10_000u64 {
                let x = crate::keys::mix64(i) % len;
                let y = f.permute(&k, x);
                assert!(y < len);
                assert_eq!(f.invert(&k, y), x, "len {len}");
            }
        }
    }
}
