//! Scaling to cover a fixed size and cropping the centre, and HWC → CHW.
//!
//! The filter is a triangle (tent) of radius `max(1, 1 / scale)` source
//! pixels: plain bilinear interpolation when enlarging, and an
//! antialiasing average over every source pixel an output pixel covers when
//! shrinking (what PIL's `Image.resize(..., BILINEAR)` does). It is
//! separable: a horizontal pass over only the source rows the crop needs,
//! then a vertical pass. Arithmetic is `f32`; results are rounded to the
//! nearest integer and clamped.

// Sides are at most 65,535 pixels, so every coordinate is exact in f64 and
// every non-negative float cast back to an index is in range.
#![allow(clippy::cast_precision_loss, clippy::cast_sign_loss)]

use crate::{CHANNELS, Layout};

/// One output coordinate's source taps: `weights[k]` applies to source
/// index `first + k`.
struct Taps {
    first: Vec<usize>,
    len: Vec<usize>,
    weights: Vec<f32>,
    stride: usize,
}

impl Taps {
    /// Taps for `out` outputs starting at `offset` (in scaled pixels) on a
    /// source axis of `src` pixels scaled by `scale`.
    fn new(src: usize, out: usize, scale: f64, offset: f64) -> Taps {
        let support = (1.0 / scale).max(1.0);
        let stride = (support.ceil() as usize) * 2 + 1;
        let mut taps = Taps {
            first: Vec::with_capacity(out),
            len: Vec::with_capacity(out),
            weights: vec![0.0; out * stride],
            stride,
        };
        for o in 0..out {
            // Centre of output pixel `o` in source coordinates.
            let centre = (offset + o as f64 + 0.5) / scale;
            let lo = ((centre - support).floor().max(0.0)) as usize;
            let hi = ((centre + support).ceil() as usize).min(src);
            let w = &mut taps.weights[o * stride..(o + 1) * stride];
            let mut total = 0.0f64;
            let mut n = 0;
            let mut first = lo;
            for j in lo..hi {
                let x = (j as f64 + 0.5 - centre).abs() / support;
                let weight = (1.0 - x).max(0.0);
                if weight <= 0.0 && n == 0 {
                    first = j + 1;
                    continue;
                }
                if n < stride {
                    w[n] = weight as f32;
                    total += weight;
                    n += 1;
                }
            }
            if n == 0 || total <= 0.0 {
                // Degenerate (cannot happen for in-range centres): nearest.
                first = (centre.floor().max(0.0) as usize).min(src - 1);
                w[0] = 1.0;
                n = 1;
                total = 1.0;
            }
            for x in &mut w[..n] {
                *x = (f64::from(*x) / total) as f32;
            }
            taps.first.push(first);
            taps.len.push(n);
        }
        taps
    }

    fn of(&self, o: usize) -> (usize, &[f32]) {
        let w = &self.weights[o * self.stride..o * self.stride + self.len[o]];
        (self.first[o], w)
    }
}

/// Scales `src`, an `h × w` RGB image in HWC order, keeping its aspect
/// ratio, so that it just covers `out_h × out_w`, then writes the centre
/// `out_h × out_w` crop into `dst` in `layout`. With `out_h == out_w == S`
/// this is the common "resize the shorter side to S, centre-crop S × S".
/// An image already of the output size is copied as is.
///
/// # Panics
/// When `src` is not `h × w × 3` bytes or `dst` not `out_h × out_w × 3`,
/// or a size is zero.
pub fn fit_into(
    src: &[u8],
    h: usize,
    w: usize,
    dst: &mut [u8],
    out_h: usize,
    out_w: usize,
    layout: Layout,
) {
    assert!(h > 0 && w > 0 && out_h > 0 && out_w > 0, "empty image");
    assert_eq!(src.len(), h * w * CHANNELS, "source size");
    assert_eq!(dst.len(), out_h * out_w * CHANNELS, "destination size");
    if (h, w) == (out_h, out_w) {
        match layout {
            Layout::Hwc => dst.copy_from_slice(src),
            Layout::Chw => hwc_to_chw(src, h, w, dst),
        }
        return;
    }
    let scale = (out_h as f64 / h as f64).max(out_w as f64 / w as f64);
    let off_y = (h as f64 * scale - out_h as f64) / 2.0;
    let off_x = (w as f64 * scale - out_w as f64) / 2.0;
    let rows = Taps::new(h, out_h, scale, off_y);
    let cols = Taps::new(w, out_w, scale, off_x);
    // Source rows the crop reads.
    let row_lo = rows.first.iter().copied().min().unwrap_or(0);
    let row_hi = (0..out_h)
        .map(|o| rows.first[o] + rows.len[o])
        .max()
        .unwrap_or(0);

    // Horizontal pass: rows row_lo..row_hi, out_w columns, f32.
    let mut mid = vec![0f32; (row_hi - row_lo) * out_w * CHANNELS];
    for (r, line) in mid.chunks_exact_mut(out_w * CHANNELS).enumerate() {
        let srow = &src[(row_lo + r) * w * CHANNELS..(row_lo + r + 1) * w * CHANNELS];
        for (o, px) in line.chunks_exact_mut(CHANNELS).enumerate() {
            let (first, weights) = cols.of(o);
            let taps = &srow[first * CHANNELS..(first + weights.len()) * CHANNELS];
            let (mut red, mut green, mut blue) = (0f32, 0f32, 0f32);
            for (s, &wt) in taps.chunks_exact(CHANNELS).zip(weights) {
                red += wt * f32::from(s[0]);
                green += wt * f32::from(s[1]);
                blue += wt * f32::from(s[2]);
            }
            px[0] = red;
            px[1] = green;
            px[2] = blue;
        }
    }

    // Vertical pass, rounding into the destination layout.
    let line_len = out_w * CHANNELS;
    let mut acc = vec![0f32; line_len];
    let plane = out_h * out_w;
    for o in 0..out_h {
        let (first, weights) = rows.of(o);
        acc.fill(0.0);
        for (k, &wt) in weights.iter().enumerate() {
            let r = first + k - row_lo;
            let line = &mid[r * line_len..(r + 1) * line_len];
            for (a, &v) in acc.iter_mut().zip(line) {
                *a += wt * v;
            }
        }
        match layout {
            Layout::Hwc => {
                for (d, &a) in dst[o * line_len..(o + 1) * line_len].iter_mut().zip(&acc) {
                    *d = to_u8(a);
                }
            }
            Layout::Chw => {
                for (x, px) in acc.chunks_exact(CHANNELS).enumerate() {
                    for (c, &a) in px.iter().enumerate() {
                        dst[c * plane + o * out_w + x] = to_u8(a);
                    }
                }
            }
        }
    }
}

#[allow(clippy::cast_sign_loss)]
fn to_u8(v: f32) -> u8 {
    (v + 0.5).clamp(0.0, 255.0) as u8
}

/// `src` (`h × w × 3`, HWC) rearranged into `dst` as CHW.
#[allow(clippy::many_single_char_names)]
pub(crate) fn hwc_to_chw(src: &[u8], h: usize, w: usize, dst: &mut [u8]) {
    let plane = h * w;
    let (r, rest) = dst.split_at_mut(plane);
    let (g, b) = rest.split_at_mut(plane);
    for (i, px) in src.chunks_exact(CHANNELS).enumerate() {
        r[i] = px[0];
        g[i] = px[1];
        b[i] = px[2];
    }
}

/// `src` (CHW) rearranged into `dst` as HWC.
pub(crate) fn chw_to_hwc(src: &[u8], h: usize, w: usize, dst: &mut [u8]) {
    let plane = h * w;
    for (i, px) in dst.chunks_exact_mut(CHANNELS).enumerate() {
        px[0] = src[i];
        px[1] = src[plane + i];
        px[2] = src[2 * plane + i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_image_stays_flat_at_any_scale() {
        let src = [10u8, 200, 30].repeat(37 * 23);
        for (oh, ow) in [(8, 8), (50, 60), (23, 37), (5, 90)] {
            let mut dst = vec![0u8; oh * ow * 3];
            fit_into(&src, 37, 23, &mut dst, oh, ow, Layout::Hwc);
            assert!(dst.chunks_exact(3).all(|p| p == [10, 200, 30]), "{oh}x{ow}");
        }
    }

    #[test]
    fn halving_averages_neighbours() {
        // A 2x4 image whose left half is 0 and right half 100, halved to
        // 1x2: each output averages the source pixels under its tent
        // (radius 2 source pixels), so the two sides meet symmetrically
        // (0·¾ + 0·¾ + 100·¼) / 1¾ ≈ 14 and 86.
        let src: Vec<u8> = [0u8, 0, 100, 100]
            .repeat(2)
            .iter()
            .flat_map(|&v| [v; 3])
            .collect();
        let mut dst = vec![0u8; 2 * 3];
        fit_into(&src, 2, 4, &mut dst, 1, 2, Layout::Hwc);
        assert_eq!((dst[0], dst[3]), (14, 86), "{dst:?}");
    }

    #[test]
    fn the_crop_is_centred() {
        // 4 rows x 8 columns, each column its own value; covering 4x4 keeps
        // the middle four columns.
        let src: Vec<u8> = (0..4)
            .flat_map(|_| (0..8u8).flat_map(|x| [x * 10; 3]))
            .collect();
        let mut dst = vec![0u8; 4 * 4 * 3];
        fit_into(&src, 4, 8, &mut dst, 4, 4, Layout::Hwc);
        let row: Vec<u8> = dst[..12].chunks(3).map(|p| p[0]).collect();
        assert_eq!(row, [20, 30, 40, 50]);
    }

    #[test]
    fn layouts_agree() {
        let src: Vec<u8> = (0..9 * 7 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let mut hwc = vec![0u8; 5 * 4 * 3];
        let mut chw = vec![0u8; 5 * 4 * 3];
        fit_into(&src, 9, 7, &mut hwc, 5, 4, Layout::Hwc);
        fit_into(&src, 9, 7, &mut chw, 5, 4, Layout::Chw);
        let mut back = vec![0u8; hwc.len()];
        chw_to_hwc(&chw, 5, 4, &mut back);
        assert_eq!(back, hwc);
    }
}
