//! The forward DCT (the Arai–Agui–Nakajima factorisation in `f32`) and
//! quantisation.
//!
//! A block is eight [`V8`] rows; every step works on whole rows, eight
//! lanes at once, so the compiler turns each into SIMD operations (two SSE
//! or one AVX register). The 1-D transform runs down the columns, the block
//! is transposed, and it runs again: the result is the 2-D transform,
//! transposed (row = horizontal frequency), which the quantiser's tables
//! are laid out for.

use std::ops::{Add, Mul, Sub};

/// Eight `f32` lanes.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(32))]
pub(crate) struct V8(pub(crate) [f32; 8]);

impl Add for V8 {
    type Output = V8;
    #[inline(always)]
    fn add(self, o: V8) -> V8 {
        let mut r = [0.0; 8];
        for i in 0..8 {
            r[i] = self.0[i] + o.0[i];
        }
        V8(r)
    }
}

impl Sub for V8 {
    type Output = V8;
    #[inline(always)]
    fn sub(self, o: V8) -> V8 {
        let mut r = [0.0; 8];
        for i in 0..8 {
            r[i] = self.0[i] - o.0[i];
        }
        V8(r)
    }
}

impl Mul<f32> for V8 {
    type Output = V8;
    #[inline(always)]
    fn mul(self, k: f32) -> V8 {
        let mut r = [0.0; 8];
        for i in 0..8 {
            r[i] = self.0[i] * k;
        }
        V8(r)
    }
}

/// One 8-point AAN forward DCT on every lane: `d[i]` holds sample `i` of
/// eight independent signals. Output `k` is the true DCT coefficient
/// (unnormalised sum `Σ d cos`) times `aan_scale(k)` (see [`aan_scale`]).
#[inline(always)]
fn fdct8(d: [V8; 8]) -> [V8; 8] {
    let s07 = d[0] + d[7];
    let d07 = d[0] - d[7];
    let s16 = d[1] + d[6];
    let d16 = d[1] - d[6];
    let s25 = d[2] + d[5];
    let d25 = d[2] - d[5];
    let s34 = d[3] + d[4];
    let d34 = d[3] - d[4];

    // Even part.
    let e0 = s07 + s34;
    let e3 = s07 - s34;
    let e1 = s16 + s25;
    let e2 = s16 - s25;
    let out0 = e0 + e1;
    let out4 = e0 - e1;
    let z1 = (e2 + e3) * std::f32::consts::FRAC_1_SQRT_2;
    let out2 = e3 + z1;
    let out6 = e3 - z1;

    // Odd part.
    let o0 = d34 + d25;
    let o1 = d25 + d16;
    let o2 = d16 + d07;
    let z5 = (o0 - o2) * 0.382_683_43; // cos(6π/16)
    let z2 = o0 * 0.541_196_1 + z5; // cos(2π/16) - cos(6π/16)
    let z4 = o2 * 1.306_563 + z5; // cos(2π/16) + cos(6π/16)
    let z3 = o1 * std::f32::consts::FRAC_1_SQRT_2;
    let z11 = d07 + z3;
    let z13 = d07 - z3;
    let out5 = z13 + z2;
    let out3 = z13 - z2;
    let out1 = z11 + z4;
    let out7 = z11 - z4;
    [out0, out1, out2, out3, out4, out5, out6, out7]
}

/// The scale [`fdct8`] leaves on output `k`: 1 for `k = 0`, else
/// `√2 · cos(kπ/16)`.
pub(crate) fn aan_scale(k: usize) -> f64 {
    if k == 0 {
        1.0
    } else {
        std::f64::consts::SQRT_2 * (k as f64 * std::f64::consts::PI / 16.0).cos()
    }
}

#[inline(always)]
fn transpose(m: [V8; 8]) -> [V8; 8] {
    let mut t = [V8::default(); 8];
    for (i, row) in t.iter_mut().enumerate() {
        for (j, v) in row.0.iter_mut().enumerate() {
            *v = m[j].0[i];
        }
    }
    t
}

/// One quantisation table prepared for [`fdct_quantise`].
#[derive(Debug)]
pub(crate) struct Quant {
    /// Reciprocal divisors for the transposed DCT output: entry `u·8 + v`
    /// (horizontal frequency `u`, vertical `v`) is
    /// `1 / (8 · q[v·8 + u] · aan(u) · aan(v))`, folding the DCT's
    /// normalisation and the AAN scales into the division.
    pub(crate) recip: [f32; 64],
    /// The DC divisor itself, `8 · q[0]`: the DC is divided exactly, so a
    /// flat block whose value lies halfway between two steps rounds as
    /// libjpeg rounds it (away from zero), not by the luck of an inexact
    /// reciprocal.
    pub(crate) dc_div: f32,
}

/// Prepares `quant` (natural order) for [`fdct_quantise`].
pub(crate) fn reciprocals(quant: &[u8; 64]) -> Quant {
    let mut recip = [0.0f32; 64];
    for u in 0..8 {
        for v in 0..8 {
            let q = f64::from(quant[v * 8 + u]);
            recip[u * 8 + v] = (1.0 / (8.0 * q * aan_scale(u) * aan_scale(v))) as f32;
        }
    }
    Quant {
        recip,
        dc_div: 8.0 * f32::from(quant[0]),
    }
}

/// Rounds to the nearest integer, halves away from zero (libjpeg's
/// quantiser), as `i32` (saturating).
#[inline(always)]
pub(crate) fn round_away(x: f32) -> i32 {
    (x + 0.5f32.copysign(x)) as i32
}

/// The quantised DC of a block from its DCT output `f0` (64 × the mean
/// sample), clamped to −1024…1023 so a difference of two fits 11 bits.
#[inline(always)]
pub(crate) fn quantise_dc(f0: f32, quant: &Quant) -> i16 {
    round_away(f0 / quant.dc_div).clamp(-1024, 1023) as i16
}

/// Transforms a level-shifted 8×8 block (`rows[y].0[x]`, samples −128…127)
/// and quantises it with `quant`, rounding to the nearest integer (halves
/// away from zero, as libjpeg). Output is transposed: index `u·8 + v`. AC
/// values are clamped to ±1023, the baseline range (never reached by 8-bit
/// input).
#[inline(always)]
pub(crate) fn fdct_quantise(rows: [V8; 8], quant: &Quant, out: &mut [i16; 64]) {
    let cols = fdct8(rows);
    let freq = fdct8(transpose(cols));
    for (u, f) in freq.iter().enumerate() {
        for v in 0..8 {
            let x = round_away(f.0[v] * quant.recip[u * 8 + v]);
            out[u * 8 + v] = x.clamp(-1023, 1023) as i16;
        }
    }
    out[0] = quantise_dc(freq[0].0[0], quant);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JPEG-normalised DCT of T.81 A.3.3, in f64, natural order.
    fn reference(block: &[[f32; 8]; 8]) -> [f64; 64] {
        let c = |k: usize| if k == 0 { 1.0 / 2f64.sqrt() } else { 1.0 };
        let mut out = [0.0; 64];
        for v in 0..8 {
            for u in 0..8 {
                let mut s = 0.0;
                for y in 0..8 {
                    for x in 0..8 {
                        s += f64::from(block[y][x])
                            * (((2 * x + 1) * u) as f64 * std::f64::consts::PI / 16.0).cos()
                            * (((2 * y + 1) * v) as f64 * std::f64::consts::PI / 16.0).cos();
                    }
                }
                out[v * 8 + u] = 0.25 * c(u) * c(v) * s;
            }
        }
        out
    }

    #[test]
    fn matches_the_defining_formula() {
        let mut seed = 12_345u32;
        let unit = reciprocals(&[1; 64]);
        for _ in 0..50 {
            let mut block = [[0f32; 8]; 8];
            for row in &mut block {
                for v in row.iter_mut() {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    *v = f32::from((seed >> 16) as u8) - 128.0;
                }
            }
            let want = reference(&block);
            let rows = block.map(V8);
            let mut got = [0i16; 64];
            fdct_quantise(rows, &unit, &mut got);
            for v in 0..8 {
                for u in 0..8 {
                    let w = want[v * 8 + u].clamp(-1024.0, 1023.0);
                    let g = f64::from(got[u * 8 + v]);
                    assert!((g - w).abs() <= 0.51, "({u},{v}): {g} vs {w}");
                }
            }
        }
    }
}
