//! A baseline JPEG encoder written from ITU-T T.81: sequential DCT,
//! Huffman coding with the standard tables, three components in 4:2:0
//! (JFIF YCbCr, chroma the mean of each 2×2 block), no restart markers.
//!
//! The image is processed one MCU row (16 pixel rows) at a time: the rows
//! are converted to level-shifted `f32` Y, Cb and Cr strips (edges padded by
//! replicating the last column and row, as libjpeg does; samples rounded to
//! integers as libjpeg's are), then each MCU's four Y blocks and two chroma
//! blocks are transformed (AAN float DCT), quantised (by reciprocals,
//! rounding halves away from zero as libjpeg) and Huffman coded.
//!
//! The colour conversion and DCT run as AVX2 + FMA kernels when the CPU
//! has them (checked once per image), else as portable code written for
//! the compiler to vectorise; the whole scan is compiled once per kernel
//! set, inlined into one function, so the entropy coder gets AVX2 codegen
//! too.

// `inline(always)` is deliberate: the generic scan body and everything it
// calls must be inlined into the AVX2-enabled entry point to be compiled
// with AVX2. Index loops over the 8 lanes are what vectorises; casts are
// of values whose range is known.
#![allow(
    clippy::inline_always,
    clippy::needless_range_loop,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    clippy::many_single_char_names,
    clippy::similar_names
)]

#[cfg(target_arch = "x86_64")]
mod avx2;
mod dct;
mod huffman;
mod tables;

use dct::V8;
use huffman::{BitWriter, HuffTable};
use tables::HuffSpec;

/// Encodes `pixels` (`height × width × 3` bytes of RGB, row-major, both
/// sides 1–65,535, checked by the caller) at `quality` 1–100.
pub(crate) fn encode(pixels: &[u8], height: usize, width: usize, quality: u8) -> Vec<u8> {
    encode_with(pixels, height, width, quality, encode_scan)
}

type Scan = fn(&mut BitWriter, &[u8], usize, usize, &dct::Quant, &dct::Quant);

/// [`encode`] with the scan coded by `scan`.
fn encode_with(pixels: &[u8], height: usize, width: usize, quality: u8, scan: Scan) -> Vec<u8> {
    debug_assert_eq!(pixels.len(), height * width * 3);
    debug_assert!((1..=65_535).contains(&height) && (1..=65_535).contains(&width));
    let luma_q = tables::scaled_quant(&tables::LUMA_QUANT, quality);
    let chroma_q = tables::scaled_quant(&tables::CHROMA_QUANT, quality);

    // A guess at the size that avoids most regrowth: about 1.2 bits a pixel
    // at q 75 on photographs, up to several at q 95+ on noise.
    let mut out = Vec::with_capacity(pixels.len() / 4 + 1024);
    write_headers(&mut out, height, width, &luma_q, &chroma_q);
    let mut bits = BitWriter::new(out);
    scan(
        &mut bits,
        pixels,
        height,
        width,
        &dct::reciprocals(&luma_q),
        &dct::reciprocals(&chroma_q),
    );
    let mut out = bits.finish();
    out.extend_from_slice(&[0xFF, 0xD9]);
    out
}

fn marker(out: &mut Vec<u8>, code: u8, payload: &[u8]) {
    out.extend_from_slice(&[0xFF, code]);
    out.extend_from_slice(&((payload.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(payload);
}

fn write_headers(out: &mut Vec<u8>, height: usize, width: usize, lq: &[u8; 64], cq: &[u8; 64]) {
    out.extend_from_slice(&[0xFF, 0xD8]); // SOI
    // APP0 JFIF 1.01, no units, 1:1 aspect, no thumbnail.
    marker(out, 0xE0, b"JFIF\0\x01\x01\x00\x00\x01\x00\x01\x00\x00");
    for (id, q) in [(0u8, lq), (1, cq)] {
        let mut p = [0u8; 65];
        p[0] = id; // 8-bit precision, table `id`
        for (k, &z) in tables::ZIGZAG.iter().enumerate() {
            p[1 + k] = q[usize::from(z)];
        }
        marker(out, 0xDB, &p); // DQT
    }
    let (h, w) = ((height as u16).to_be_bytes(), (width as u16).to_be_bytes());
    #[rustfmt::skip]
    let sof = [
        8, h[0], h[1], w[0], w[1], 3,
        1, 0x22, 0, // Y: 2×2 sampling, table 0
        2, 0x11, 1, // Cb: 1×1, table 1
        3, 0x11, 1, // Cr
    ];
    marker(out, 0xC0, &sof); // SOF0, baseline
    for (class_id, spec) in [
        (0x00u8, &tables::DC_LUMA),
        (0x10, &tables::AC_LUMA),
        (0x01, &tables::DC_CHROMA),
        (0x11, &tables::AC_CHROMA),
    ] {
        dht(out, class_id, spec);
    }
    // SOS: 3 components (DC/AC tables 0/0, 1/1, 1/1), Ss 0, Se 63, Ah/Al 0.
    marker(out, 0xDA, &[3, 1, 0x00, 2, 0x11, 3, 0x11, 0, 63, 0]);
}

fn dht(out: &mut Vec<u8>, class_id: u8, spec: &HuffSpec) {
    let mut p = Vec::with_capacity(17 + spec.symbols.len());
    p.push(class_id);
    p.extend_from_slice(&spec.counts);
    p.extend_from_slice(spec.symbols);
    marker(out, 0xC4, &p);
}

/// Level-shifted Y, Cb, Cr of one MCU row: Y `16 × stride`, chroma
/// `8 × stride / 2`, `stride` the width rounded up to 16.
#[derive(Debug)]
struct Strips {
    y: Vec<f32>,
    cb: Vec<f32>,
    cr: Vec<f32>,
    stride: usize,
}

// JFIF (CCIR 601 full range) conversion.
const YR: f32 = 0.299;
const YG: f32 = 0.587;
const YB: f32 = 0.114;
// Chroma weights divided by 4: applied to the sum of a 2×2 block.
const CBR: f32 = -0.168_735_89 / 4.0;
const CBG: f32 = -0.331_264_1 / 4.0;
const CBB: f32 = 0.5 / 4.0;
const CRR: f32 = 0.5 / 4.0;
const CRG: f32 = -0.418_687_6 / 4.0;
const CRB: f32 = -0.081_312_4 / 4.0;

/// `x` rounded to the nearest integer, ties to even, for |x| < 2^22:
/// adding and removing 1.5 · 2^23 leaves no fraction bits. Plain
/// arithmetic, so it vectorises even where `round_ties_even` is a call
/// (`x86_64` without SSE4.1).
#[inline(always)]
fn round_small(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23
    (x + MAGIC) - MAGIC
}

/// Converts two pixel rows (`a` and `b`, `stride × 3` bytes each, already
/// padded) into two Y rows and one row of averaged Cb and Cr, each rounded
/// to an integer as libjpeg's are.
#[inline(always)]
fn convert_pair(
    a: &[u8],
    b: &[u8],
    y0: &mut [f32],
    y1: &mut [f32],
    cb: &mut [f32],
    cr: &mut [f32],
) {
    let luma = |p: &[u8]| {
        round_small(YR * f32::from(p[0]) + YG * f32::from(p[1]) + YB * f32::from(p[2])) - 128.0
    };
    for (((((pa, pb), ya), yb), cb), cr) in a
        .chunks_exact(6)
        .zip(b.chunks_exact(6))
        .zip(y0.chunks_exact_mut(2))
        .zip(y1.chunks_exact_mut(2))
        .zip(cb.iter_mut())
        .zip(cr.iter_mut())
    {
        ya[0] = luma(&pa[0..3]);
        ya[1] = luma(&pa[3..6]);
        yb[0] = luma(&pb[0..3]);
        yb[1] = luma(&pb[3..6]);
        let r =
            f32::from(u16::from(pa[0]) + u16::from(pa[3]) + u16::from(pb[0]) + u16::from(pb[3]));
        let g =
            f32::from(u16::from(pa[1]) + u16::from(pa[4]) + u16::from(pb[1]) + u16::from(pb[4]));
        let bl =
            f32::from(u16::from(pa[2]) + u16::from(pa[5]) + u16::from(pb[2]) + u16::from(pb[5]));
        *cb = round_small(CBR * r + CBG * g + CBB * bl);
        *cr = round_small(CRR * r + CRG * g + CRB * bl);
    }
}

/// Fills `strips` from MCU row `my`, replicating the last row and column
/// into the padding. `pads` are scratch rows of `stride × 3 + 32` bytes.
#[inline(always)]
fn fill_strips<K: Kernels>(
    k: K,
    strips: &mut Strips,
    pixels: &[u8],
    height: usize,
    width: usize,
    my: usize,
    pads: &mut [Vec<u8>; 2],
) {
    let stride = strips.stride;
    let row_bytes = width * 3;
    let half = stride / 2;
    for p in 0..8 {
        let [pad_a, pad_b] = pads;
        for (dy, pad) in [(0, &mut *pad_a), (1, &mut *pad_b)] {
            let y = (my * 16 + 2 * p + dy).min(height - 1);
            let src = &pixels[y * row_bytes..(y + 1) * row_bytes];
            pad[..row_bytes].copy_from_slice(src);
            let last = [src[row_bytes - 3], src[row_bytes - 2], src[row_bytes - 1]];
            for px in pad[row_bytes..stride * 3].chunks_exact_mut(3) {
                px.copy_from_slice(&last);
            }
        }
        let (y0, y1) = strips.y[2 * p * stride..(2 * p + 2) * stride].split_at_mut(stride);
        k.convert_pair(
            pad_a,
            pad_b,
            y0,
            y1,
            &mut strips.cb[p * half..(p + 1) * half],
            &mut strips.cr[p * half..(p + 1) * half],
        );
    }
}

/// The per-block and per-row kernels, portable or SIMD.
trait Kernels: Copy {
    /// Converts two padded pixel rows (`y0.len()` pixels, plus at least 4
    /// spare bytes) into two Y rows and a row of averaged Cb and Cr.
    fn convert_pair(
        self,
        a: &[u8],
        b: &[u8],
        y0: &mut [f32],
        y1: &mut [f32],
        cb: &mut [f32],
        cr: &mut [f32],
    );
    /// Transforms and quantises the block of `plane` at `start`, rows
    /// `stride` apart (see `dct::fdct_quantise`).
    fn fdct_quantise(
        self,
        plane: &[f32],
        start: usize,
        stride: usize,
        recip: &dct::Quant,
        out: &mut [i16; 64],
    );
}

#[derive(Clone, Copy, Debug)]
struct Portable;

impl Kernels for Portable {
    #[inline(always)]
    fn convert_pair(
        self,
        a: &[u8],
        b: &[u8],
        y0: &mut [f32],
        y1: &mut [f32],
        cb: &mut [f32],
        cr: &mut [f32],
    ) {
        let n = y0.len() * 3;
        convert_pair(&a[..n], &b[..n], y0, y1, cb, cr);
    }

    #[inline(always)]
    fn fdct_quantise(
        self,
        plane: &[f32],
        start: usize,
        stride: usize,
        recip: &dct::Quant,
        out: &mut [i16; 64],
    ) {
        dct::fdct_quantise(load_block(plane, start, stride), recip, out);
    }
}

/// Proof that the CPU has AVX2 and FMA: only made after checking.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Kernels for Avx2 {
    #[inline(always)]
    fn convert_pair(
        self,
        a: &[u8],
        b: &[u8],
        y0: &mut [f32],
        y1: &mut [f32],
        cb: &mut [f32],
        cr: &mut [f32],
    ) {
        // SAFETY: an `Avx2` exists only once the CPU was found to have
        // AVX2 and FMA.
        unsafe { avx2::convert_pair(a, b, y0, y1, cb, cr) }
    }

    #[inline(always)]
    fn fdct_quantise(
        self,
        plane: &[f32],
        start: usize,
        stride: usize,
        recip: &dct::Quant,
        out: &mut [i16; 64],
    ) {
        // SAFETY: as above.
        unsafe { avx2::fdct_quantise(plane, start, stride, recip, out) }
    }
}

/// The 8×8 block of `plane` whose top-left sample is at `start`, rows
/// `stride` apart.
#[inline(always)]
fn load_block(plane: &[f32], start: usize, stride: usize) -> [V8; 8] {
    let mut rows = [V8::default(); 8];
    for (i, r) in rows.iter_mut().enumerate() {
        let s = start + i * stride;
        r.0.copy_from_slice(&plane[s..s + 8]);
    }
    rows
}

/// Natural-order-to-zig-zag gather for the transposed quantiser output:
/// `TRANSPOSED_ZIGZAG[k]` is where zig-zag coefficient `k` sits.
const TRANSPOSED_ZIGZAG: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut k = 0;
    while k < 64 {
        let n = tables::ZIGZAG[k];
        t[k] = (n % 8) * 8 + n / 8;
        k += 1;
    }
    t
};

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn code_block<K: Kernels>(
    k: K,
    bits: &mut BitWriter,
    plane: &[f32],
    start: usize,
    stride: usize,
    recip: &dct::Quant,
    prev_dc: &mut i32,
    (dc, ac): (&HuffTable, &HuffTable),
) {
    let mut q = [0i16; 64];
    k.fdct_quantise(plane, start, stride, recip, &mut q);
    let mut zz = [0i16; 64];
    for (z, &t) in zz.iter_mut().zip(&TRANSPOSED_ZIGZAG) {
        *z = q[usize::from(t)];
    }
    huffman::encode_block(bits, &zz, prev_dc, dc, ac);
}

#[inline(always)]
fn encode_scan_body<K: Kernels>(
    k: K,
    bits: &mut BitWriter,
    pixels: &[u8],
    height: usize,
    width: usize,
    luma_recip: &dct::Quant,
    chroma_recip: &dct::Quant,
) {
    let tables = [
        HuffTable::new(&tables::DC_LUMA),
        HuffTable::new(&tables::AC_LUMA),
        HuffTable::new(&tables::DC_CHROMA),
        HuffTable::new(&tables::AC_CHROMA),
    ];
    let [dc_l, ac_l, dc_c, ac_c] = &tables;
    let stride = width.div_ceil(16) * 16;
    let mut strips = Strips {
        y: vec![0.0; 16 * stride],
        cb: vec![0.0; 8 * stride / 2],
        cr: vec![0.0; 8 * stride / 2],
        stride,
    };
    let mut pads = [vec![0u8; stride * 3 + 32], vec![0u8; stride * 3 + 32]];
    let (mut dc_y, mut dc_cb, mut dc_cr) = (0i32, 0i32, 0i32);
    let half = stride / 2;
    for my in 0..height.div_ceil(16) {
        fill_strips(k, &mut strips, pixels, height, width, my, &mut pads);
        for mx in 0..stride / 16 {
            for by in 0..2 {
                for bx in 0..2 {
                    let start = by * 8 * stride + mx * 16 + bx * 8;
                    let t = (dc_l, ac_l);
                    code_block(k, bits, &strips.y, start, stride, luma_recip, &mut dc_y, t);
                }
            }
            let t = (dc_c, ac_c);
            code_block(
                k,
                bits,
                &strips.cb,
                mx * 8,
                half,
                chroma_recip,
                &mut dc_cb,
                t,
            );
            code_block(
                k,
                bits,
                &strips.cr,
                mx * 8,
                half,
                chroma_recip,
                &mut dc_cr,
                t,
            );
        }
    }
}

/// The scan with AVX2 and FMA enabled for the whole pipeline (the
/// eight-lane block rows become single registers).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn encode_scan_avx2(
    bits: &mut BitWriter,
    pixels: &[u8],
    height: usize,
    width: usize,
    luma_recip: &dct::Quant,
    chroma_recip: &dct::Quant,
) {
    encode_scan_body(
        Avx2(()),
        bits,
        pixels,
        height,
        width,
        luma_recip,
        chroma_recip,
    );
}

fn encode_scan(
    bits: &mut BitWriter,
    pixels: &[u8],
    height: usize,
    width: usize,
    luma_recip: &dct::Quant,
    chroma_recip: &dct::Quant,
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU was just checked to support AVX2 and FMA.
        unsafe { encode_scan_avx2(bits, pixels, height, width, luma_recip, chroma_recip) };
        return;
    }
    encode_scan_body(
        Portable,
        bits,
        pixels,
        height,
        width,
        luma_recip,
        chroma_recip,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_round_to_nearest_even() {
        for (x, want) in [
            (0.5f32, 0.0f32),
            (1.5, 2.0),
            (2.4999, 2.0),
            (-0.5, 0.0),
            (-1.5, -2.0),
            (254.6, 255.0),
            (-127.51, -128.0),
        ] {
            assert_eq!((round_small(x) + 0.0).to_bits(), want.to_bits(), "{x}");
        }
        for i in -3000..3000 {
            let x = i as f32 * 0.173;
            // (+ 0.0 makes −0 and +0 the same.)
            let (got, want) = (round_small(x) + 0.0, x.round_ties_even() + 0.0);
            assert_eq!(got.to_bits(), want.to_bits(), "{x}");
        }
    }

    fn portable_scan(
        bits: &mut BitWriter,
        pixels: &[u8],
        height: usize,
        width: usize,
        luma: &dct::Quant,
        chroma: &dct::Quant,
    ) {
        encode_scan_body(Portable, bits, pixels, height, width, luma, chroma);
    }

    /// The portable path (what runs without AVX2) makes the same images
    /// as the dispatching one, to rounding.
    #[test]
    fn the_portable_path_encodes_the_same_image() {
        let mut seed = 5u32;
        for (h, w) in [(1, 1), (9, 17), (16, 16), (33, 50), (96, 128)] {
            let px: Vec<u8> = (0..h * w * 3)
                .map(|i| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    ((i % (w * 3)) as u32 * 2 + (seed >> 28)) as u8
                })
                .collect();
            let mut images = Vec::new();
            for scan in [portable_scan as Scan, encode_scan] {
                let jpeg = encode_with(&px, h, w, 85, scan);
                let mut out = vec![0u8; px.len()];
                crate::decode_into(
                    &jpeg,
                    crate::Format::Jpeg,
                    crate::Layout::Hwc,
                    None,
                    &mut out,
                )
                .unwrap();
                images.push(out);
            }
            // A coefficient on a rounding boundary may land one step
            // apart: compare the mean difference and the error.
            let mean_diff = images[0]
                .iter()
                .zip(&images[1])
                .map(|(&a, &b)| f64::from(a.abs_diff(b)))
                .sum::<f64>()
                / px.len() as f64;
            assert!(mean_diff < 0.5, "{h}x{w}: mean difference {mean_diff}");
            let se = |img: &[u8]| {
                img.iter()
                    .zip(&px)
                    .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                    .sum::<f64>()
            };
            let (p, s) = (se(&images[0]), se(&images[1]));
            assert!(
                (p / s.max(1.0)).log10().abs() < 0.01 || (p - s).abs() < 8.0,
                "{h}x{w}: squared error {p} portable, {s} dispatched"
            );
        }
    }

    /// The SIMD kernels compute what the portable ones do, up to `f32`
    /// rounding (FMA, evaluation order): a quantised value may differ by one
    /// where it lies on a rounding boundary.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_kernels_match_the_portable_ones() {
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            return;
        }
        let simd = Avx2(());
        let mut seed = 99u32;
        let mut rand = || {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as u8
        };
        let n = 48;
        let a: Vec<u8> = (0..n * 3 + 32).map(|_| rand()).collect();
        let b: Vec<u8> = (0..n * 3 + 32).map(|_| rand()).collect();
        let mut outs = [
            [
                vec![0f32; n],
                vec![0f32; n],
                vec![0f32; n / 2],
                vec![0f32; n / 2],
            ],
            [
                vec![0f32; n],
                vec![0f32; n],
                vec![0f32; n / 2],
                vec![0f32; n / 2],
            ],
        ];
        for (o, simd_path) in outs.iter_mut().zip([false, true]) {
            let [y0, y1, cb, cr] = o;
            if simd_path {
                simd.convert_pair(&a, &b, y0, y1, cb, cr);
            } else {
                Portable.convert_pair(&a, &b, y0, y1, cb, cr);
            }
        }
        for (p, s) in outs[0].iter().zip(&outs[1]) {
            for (x, y) in p.iter().zip(s) {
                assert!((x - y).abs() <= 1.0, "{x} vs {y}");
            }
        }
        // Luma at least is exact for all but boundary cases.
        let same = outs[0][0]
            .iter()
            .zip(&outs[1][0])
            .filter(|(x, y)| x.to_bits() == y.to_bits())
            .count();
        assert!(same >= n - 2);

        let quant = dct::reciprocals(&tables::scaled_quant(&tables::LUMA_QUANT, 90));
        let plane: Vec<f32> = (0..16 * 24).map(|_| f32::from(rand()) - 128.0).collect();
        for start in [0, 8, 16, 24 * 8 + 3] {
            let (mut p, mut s) = ([0i16; 64], [0i16; 64]);
            Portable.fdct_quantise(&plane, start, 24, &quant, &mut p);
            simd.fdct_quantise(&plane, start, 24, &quant, &mut s);
            for (x, y) in p.iter().zip(&s) {
                assert!((x - y).abs() <= 1, "{p:?}\n{s:?}");
            }
            assert!(p.iter().zip(&s).filter(|(x, y)| x == y).count() >= 62);
        }
    }
}
