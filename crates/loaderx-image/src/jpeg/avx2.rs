//! AVX2 + FMA versions of the colour conversion and of the DCT with
//! quantisation, used when the CPU has them (checked at run time). They
//! compute the same as the portable code up to `f32` rounding (FMA).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m128i, __m256, __m256i, _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT, _mm_loadu_si128,
    _mm256_add_epi32, _mm256_add_ps, _mm256_and_ps, _mm256_cvtepi32_ps, _mm256_cvtss_f32,
    _mm256_cvttps_epi32, _mm256_fmadd_ps, _mm256_hadd_epi32, _mm256_loadu_ps, _mm256_max_epi32,
    _mm256_min_epi32, _mm256_mul_ps, _mm256_or_ps, _mm256_packs_epi32, _mm256_permute2f128_ps,
    _mm256_permute4x64_epi64, _mm256_round_ps, _mm256_set_m128i, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setr_epi8, _mm256_shuffle_epi8, _mm256_shuffle_ps, _mm256_storeu_ps,
    _mm256_storeu_si256, _mm256_sub_ps, _mm256_unpackhi_ps, _mm256_unpacklo_ps,
};

use super::dct::{Quant, quantise_dc};
use super::{CBB, CBG, CBR, CRB, CRG, CRR, YB, YG, YR};

/// Unpacks 8 RGB pixels starting at byte `p` of `row` (28 bytes must be
/// readable) into three vectors of 8 `i32` samples.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn unpack8(row: &[u8], p: usize) -> [__m256i; 3] {
    let bytes = &row[p..p + 28];
    // SAFETY: `bytes` has 28 bytes: the loads read bytes 0–15 and 12–27.
    let (lo, hi): (__m128i, __m128i) = unsafe {
        (
            _mm_loadu_si128(bytes.as_ptr().cast()),
            _mm_loadu_si128(bytes.as_ptr().add(12).cast()),
        )
    };
    // Pixels 0–3 in the low lane, 4–7 in the high lane, each at bytes 0–11.
    let v = _mm256_set_m128i(hi, lo);
    let pick = |c: i8| {
        _mm256_setr_epi8(
            c,
            -1,
            -1,
            -1,
            c + 3,
            -1,
            -1,
            -1,
            c + 6,
            -1,
            -1,
            -1,
            c + 9,
            -1,
            -1,
            -1,
            c,
            -1,
            -1,
            -1,
            c + 3,
            -1,
            -1,
            -1,
            c + 6,
            -1,
            -1,
            -1,
            c + 9,
            -1,
            -1,
            -1,
        )
    };
    [
        _mm256_shuffle_epi8(v, pick(0)),
        _mm256_shuffle_epi8(v, pick(1)),
        _mm256_shuffle_epi8(v, pick(2)),
    ]
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn luma(rgb: [__m256i; 3]) -> __m256 {
    let t = _mm256_mul_ps(_mm256_cvtepi32_ps(rgb[0]), _mm256_set1_ps(YR));
    let t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rgb[1]), _mm256_set1_ps(YG), t);
    let t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rgb[2]), _mm256_set1_ps(YB), t);
    _mm256_sub_ps(round(t), _mm256_set1_ps(128.0))
}

/// Rounds to the nearest integer, ties to even.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn round(v: __m256) -> __m256 {
    _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn store(dst: &mut [f32], v: __m256) {
    let dst = &mut dst[..8];
    // SAFETY: `dst` has 8 floats.
    unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), v) };
}

/// As the portable `convert_pair`, 16 pixels at a time: `a` and `b` hold
/// `y0.len()` pixels (a multiple of 16) plus at least 4 readable bytes.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn convert_pair(
    a: &[u8],
    b: &[u8],
    y0: &mut [f32],
    y1: &mut [f32],
    cb: &mut [f32],
    cr: &mut [f32],
) {
    let n = y0.len();
    assert!(n.is_multiple_of(16) && y1.len() == n && cb.len() * 2 == n && cr.len() * 2 == n);
    assert!(a.len() >= n * 3 + 4 && b.len() >= n * 3 + 4);
    for x in (0..n).step_by(16) {
        let a0 = unpack8(a, x * 3);
        let a1 = unpack8(a, x * 3 + 24);
        let b0 = unpack8(b, x * 3);
        let b1 = unpack8(b, x * 3 + 24);
        store(&mut y0[x..], luma(a0));
        store(&mut y0[x + 8..], luma(a1));
        store(&mut y1[x..], luma(b0));
        store(&mut y1[x + 8..], luma(b1));
        // Sums of each 2×2 block: vertical pairs, then horizontal pairs
        // (hadd interleaves 128-bit lanes; the permute restores order).
        let sum = |c: usize| {
            let s = _mm256_hadd_epi32(
                _mm256_add_epi32(a0[c], b0[c]),
                _mm256_add_epi32(a1[c], b1[c]),
            );
            _mm256_cvtepi32_ps(_mm256_permute4x64_epi64::<0xD8>(s))
        };
        let (r, g, bl) = (sum(0), sum(1), sum(2));
        let c = _mm256_mul_ps(r, _mm256_set1_ps(CBR));
        let c = _mm256_fmadd_ps(g, _mm256_set1_ps(CBG), c);
        let c = _mm256_fmadd_ps(bl, _mm256_set1_ps(CBB), c);
        store(&mut cb[x / 2..], round(c));
        let c = _mm256_mul_ps(r, _mm256_set1_ps(CRR));
        let c = _mm256_fmadd_ps(g, _mm256_set1_ps(CRG), c);
        let c = _mm256_fmadd_ps(bl, _mm256_set1_ps(CRB), c);
        store(&mut cr[x / 2..], round(c));
    }
}

/// The AAN 8-point DCT of `dct::fdct8` on eight lanes.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn fdct8(d: [__m256; 8]) -> [__m256; 8] {
    let k = |x: f32| _mm256_set1_ps(x);
    let s07 = _mm256_add_ps(d[0], d[7]);
    let d07 = _mm256_sub_ps(d[0], d[7]);
    let s16 = _mm256_add_ps(d[1], d[6]);
    let d16 = _mm256_sub_ps(d[1], d[6]);
    let s25 = _mm256_add_ps(d[2], d[5]);
    let d25 = _mm256_sub_ps(d[2], d[5]);
    let s34 = _mm256_add_ps(d[3], d[4]);
    let d34 = _mm256_sub_ps(d[3], d[4]);

    let e0 = _mm256_add_ps(s07, s34);
    let e3 = _mm256_sub_ps(s07, s34);
    let e1 = _mm256_add_ps(s16, s25);
    let e2 = _mm256_sub_ps(s16, s25);
    let out0 = _mm256_add_ps(e0, e1);
    let out4 = _mm256_sub_ps(e0, e1);
    let z1 = _mm256_mul_ps(_mm256_add_ps(e2, e3), k(std::f32::consts::FRAC_1_SQRT_2));
    let out2 = _mm256_add_ps(e3, z1);
    let out6 = _mm256_sub_ps(e3, z1);

    let o0 = _mm256_add_ps(d34, d25);
    let o1 = _mm256_add_ps(d25, d16);
    let o2 = _mm256_add_ps(d16, d07);
    let z5 = _mm256_mul_ps(_mm256_sub_ps(o0, o2), k(0.382_683_43));
    let z2 = _mm256_fmadd_ps(o0, k(0.541_196_1), z5);
    let z4 = _mm256_fmadd_ps(o2, k(1.306_563), z5);
    let z3 = _mm256_mul_ps(o1, k(std::f32::consts::FRAC_1_SQRT_2));
    let z11 = _mm256_add_ps(d07, z3);
    let z13 = _mm256_sub_ps(d07, z3);
    [
        out0,
        _mm256_add_ps(z11, z4),
        out2,
        _mm256_sub_ps(z13, z2),
        out4,
        _mm256_add_ps(z13, z2),
        out6,
        _mm256_sub_ps(z11, z4),
    ]
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn transpose(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// As `dct::fdct_quantise` on the 8×8 block of `plane` whose top-left
/// sample is at `start` (rows `stride` apart).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn fdct_quantise(
    plane: &[f32],
    start: usize,
    stride: usize,
    quant: &Quant,
    out: &mut [i16; 64],
) {
    let mut rows = [_mm256_set1_ps(0.0); 8];
    for (i, r) in rows.iter_mut().enumerate() {
        let src = &plane[start + i * stride..start + i * stride + 8];
        // SAFETY: `src` has 8 floats.
        *r = unsafe { _mm256_loadu_ps(src.as_ptr()) };
    }
    let freq = fdct8(transpose(fdct8(rows)));
    let half = _mm256_set1_ps(0.5);
    let sign_bit = _mm256_set1_ps(-0.0);
    let (lo, hi) = (_mm256_set1_epi32(-1023), _mm256_set1_epi32(1023));
    let mut q = [_mm256_set1_epi32(0); 8];
    for (u, (f, qu)) in freq.iter().zip(&mut q).enumerate() {
        let r = &quant.recip[u * 8..u * 8 + 8];
        // SAFETY: `r` has 8 floats.
        let x = _mm256_mul_ps(*f, unsafe { _mm256_loadu_ps(r.as_ptr()) });
        // Halves away from zero: add ±½ with the sign of x, truncate.
        let x = _mm256_add_ps(x, _mm256_or_ps(_mm256_and_ps(x, sign_bit), half));
        *qu = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(x), lo), hi);
    }
    for (pair, dst) in q.chunks_exact(2).zip(out.chunks_exact_mut(16)) {
        let p = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(pair[0], pair[1]));
        // SAFETY: `dst` has 16 `i16`s, 32 bytes.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), p) };
    }
    out[0] = quantise_dc(_mm256_cvtss_f32(freq[0]), quant);
}
