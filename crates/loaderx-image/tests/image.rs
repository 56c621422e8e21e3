//! Round trips, conversions, headers and damaged inputs.

use loaderx_image::{
    Format, Layout, decode_fit_into, decode_into, encode_jpeg, encode_png, read_header,
};
use proptest::prelude::*;

/// A smooth RGB test image with some texture, `h × w × 3` HWC.
fn picture(h: u32, w: u32, seed: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity((h * w * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let n = (x.wrapping_mul(7919) ^ y.wrapping_mul(104_729) ^ seed)
                .wrapping_mul(2_654_435_761)
                >> 29;
            out.push(((x * 255 / w.max(1)) as u8).wrapping_add(n as u8));
            out.push((y * 255 / h.max(1)) as u8);
            out.push((((x + y + seed) * 3) % 256) as u8);
        }
    }
    out
}

fn to_chw(hwc: &[u8], h: usize, w: usize) -> Vec<u8> {
    let mut out = vec![0u8; hwc.len()];
    for i in 0..h * w {
        for c in 0..3 {
            out[c * h * w + i] = hwc[i * 3 + c];
        }
    }
    out
}

#[test]
fn png_round_trips_exactly_in_both_layouts() {
    for (h, w) in [(1, 1), (3, 17), (64, 48), (224, 224)] {
        let hwc = picture(h, w, 5);
        let png = encode_png(&hwc, h, w, Layout::Hwc).unwrap();
        let header = read_header(&png, Format::Png).unwrap();
        assert_eq!((header.height, header.width, header.channels), (h, w, 3));
        let mut out = vec![0u8; hwc.len()];
        decode_into(&png, Format::Png, Layout::Hwc, Some((h, w)), &mut out).unwrap();
        assert_eq!(out, hwc);
        let chw = to_chw(&hwc, h as usize, w as usize);
        decode_into(&png, Format::Png, Layout::Chw, None, &mut out).unwrap();
        assert_eq!(out, chw);
        // Encoding from CHW gives the same image.
        let png2 = encode_png(&chw, h, w, Layout::Chw).unwrap();
        decode_into(&png2, Format::Png, Layout::Hwc, None, &mut out).unwrap();
        assert_eq!(out, hwc);
    }
}

#[test]
fn jpeg_round_trips_within_the_codec_error() {
    let (h, w) = (96, 128);
    let hwc = picture(h, w, 1);
    for quality in [50u8, 90, 100] {
        let jpeg = encode_jpeg(&hwc, h, w, Layout::Hwc, quality).unwrap();
        assert!(jpeg.len() < hwc.len());
        let header = read_header(&jpeg, Format::Jpeg).unwrap();
        assert_eq!((header.height, header.width, header.channels), (h, w, 3));
        let mut out = vec![0u8; hwc.len()];
        decode_into(&jpeg, Format::Jpeg, Layout::Hwc, Some((h, w)), &mut out).unwrap();
        let mean_err: f64 = out
            .iter()
            .zip(&hwc)
            .map(|(&a, &b)| f64::from(a.abs_diff(b)))
            .sum::<f64>()
            / out.len() as f64;
        let bound = if quality >= 90 { 6.0 } else { 12.0 };
        assert!(mean_err < bound, "q{quality}: mean abs error {mean_err}");
        let mut chw = vec![0u8; hwc.len()];
        decode_into(&jpeg, Format::Jpeg, Layout::Chw, None, &mut chw).unwrap();
        assert_eq!(chw, to_chw(&out, h as usize, w as usize));
    }
}

fn png_of(color: png::ColorType, depth: png::BitDepth, w: u32, h: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = png::Encoder::new(&mut out, w, h);
    e.set_color(color);
    e.set_depth(depth);
    let mut wr = e.write_header().unwrap();
    wr.write_image_data(data).unwrap();
    wr.finish().unwrap();
    out
}

#[test]
fn grey_and_alpha_pngs_become_rgb() {
    let (w, h) = (5u32, 3u32);
    let grey: Vec<u8> = (0..15).map(|i| i * 17).collect();
    let png = png_of(png::ColorType::Grayscale, png::BitDepth::Eight, w, h, &grey);
    assert_eq!(read_header(&png, Format::Png).unwrap().channels, 1);
    let mut out = vec![0u8; 45];
    decode_into(&png, Format::Png, Layout::Hwc, None, &mut out).unwrap();
    for (px, &g) in out.chunks(3).zip(&grey) {
        assert_eq!(px, [g, g, g]);
    }

    let rgba: Vec<u8> = (0..60).map(|i| (i * 4) as u8).collect();
    let png = png_of(png::ColorType::Rgba, png::BitDepth::Eight, w, h, &rgba);
    assert_eq!(read_header(&png, Format::Png).unwrap().channels, 4);
    decode_into(&png, Format::Png, Layout::Hwc, None, &mut out).unwrap();
    for (px, src) in out.chunks(3).zip(rgba.chunks(4)) {
        assert_eq!(px, &src[..3], "alpha is dropped");
    }

    // 16-bit RGB keeps the high byte of each sample.
    let wide: Vec<u8> = (0..90).map(|i| (i * 3) as u8).collect();
    let png = png_of(png::ColorType::Rgb, png::BitDepth::Sixteen, w, h, &wide);
    decode_into(&png, Format::Png, Layout::Hwc, None, &mut out).unwrap();
    let high: Vec<u8> = wide.chunks(2).map(|s| s[0]).collect();
    assert_eq!(out, high);
}

#[test]
fn a_grey_jpeg_becomes_rgb() {
    let (w, h) = (16u16, 8u16);
    let grey: Vec<u8> = (0..128).map(|i| (i * 2) as u8).collect();
    let mut jpeg = Vec::new();
    jpeg_encoder::Encoder::new(&mut jpeg, 95)
        .encode(&grey, w, h, jpeg_encoder::ColorType::Luma)
        .unwrap();
    assert_eq!(read_header(&jpeg, Format::Jpeg).unwrap().channels, 1);
    let mut out = vec![0u8; 128 * 3];
    decode_into(&jpeg, Format::Jpeg, Layout::Hwc, None, &mut out).unwrap();
    for (px, &g) in out.chunks(3).zip(&grey) {
        assert_eq!(px[0], px[1]);
        assert_eq!(px[1], px[2]);
        assert!(px[0].abs_diff(g) <= 8, "{} vs {g}", px[0]);
    }
}

#[test]
fn sizes_that_do_not_match_are_errors() {
    let hwc = picture(10, 20, 2);
    let png = encode_png(&hwc, 10, 20, Layout::Hwc).unwrap();
    let mut out = vec![0u8; hwc.len()];
    let err = decode_into(&png, Format::Png, Layout::Hwc, Some((20, 10)), &mut out).unwrap_err();
    assert!(err.to_string().contains("10x20"), "{err}");
    let mut short = vec![0u8; hwc.len() - 1];
    let err = decode_into(&png, Format::Png, Layout::Hwc, None, &mut short).unwrap_err();
    assert!(err.to_string().contains("destination holds 599"), "{err}");
    let err = decode_into(&png, Format::Jpeg, Layout::Hwc, None, &mut out).unwrap_err();
    assert_eq!(err.to_string(), "JPEG: the bytes are a PNG image, not JPEG");
    let err = read_header(b"GIF89a....", Format::Png).unwrap_err();
    assert!(err.to_string().starts_with("PNG: not a PNG image"), "{err}");
    let err = read_header(b"", Format::Jpeg).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    assert!(encode_jpeg(&hwc, 10, 20, Layout::Hwc, 0).is_err());
    assert!(encode_jpeg(&hwc, 10, 21, Layout::Hwc, 90).is_err());
    assert!(encode_png(&hwc, 0, 20, Layout::Hwc).is_err());
}

#[test]
fn truncated_images_are_errors_naming_the_cause() {
    let hwc = picture(64, 64, 3);
    let jpeg = encode_jpeg(&hwc, 64, 64, Layout::Hwc, 90).unwrap();
    let png = encode_png(&hwc, 64, 64, Layout::Hwc).unwrap();
    let mut out = vec![0u8; hwc.len()];
    for (bytes, format) in [(&jpeg, Format::Jpeg), (&png, Format::Png)] {
        for keep in [bytes.len() / 2, bytes.len() - 10, 20, 3] {
            let err = decode_into(&bytes[..keep], format, Layout::Hwc, None, &mut out)
                .expect_err(&format!("{format} cut to {keep} bytes"));
            assert_eq!(err.format, format);
            assert!(!err.reason.is_empty());
        }
    }
    let err = decode_into(
        &jpeg[..jpeg.len() / 2],
        Format::Jpeg,
        Layout::Hwc,
        None,
        &mut out,
    )
    .unwrap_err();
    assert!(err.reason.contains("truncated"), "{err}");
}

#[test]
fn a_marker_inside_the_scan_is_an_error_not_a_half_image() {
    // A second scan header spliced into a baseline image's entropy data:
    // the decoder would stop there and leave the rest unwritten.
    let hwc = picture(48, 48, 6);
    let jpeg = encode_jpeg(&hwc, 48, 48, Layout::Hwc, 90).unwrap();
    let sos = jpeg.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
    let sos_len = usize::from(u16::from_be_bytes([jpeg[sos + 2], jpeg[sos + 3]]));
    let mid = sos + 2 + sos_len + (jpeg.len() - sos) / 2;
    let mut spliced = jpeg[..mid].to_vec();
    spliced.extend_from_slice(&jpeg[sos..sos + 2 + sos_len]);
    spliced.extend_from_slice(&jpeg[mid..]);
    let mut out = vec![0u8; hwc.len()];
    let err = decode_into(&spliced, Format::Jpeg, Layout::Hwc, None, &mut out).unwrap_err();
    assert!(
        err.reason.contains("marker FF DA inside the image data"),
        "{err}"
    );
    // Restart markers are part of the scan, and the untouched file decodes.
    decode_into(&jpeg, Format::Jpeg, Layout::Hwc, None, &mut out).unwrap();
}

#[test]
fn fit_decodes_resize_and_crop_from_any_size() {
    let hwc = picture(60, 90, 4);
    let png = encode_png(&hwc, 60, 90, Layout::Hwc).unwrap();
    let mut out = vec![0u8; 32 * 32 * 3];
    let header = decode_fit_into(&png, Format::Png, Layout::Hwc, 32, 32, &mut out).unwrap();
    assert_eq!((header.height, header.width), (60, 90));
    let mut by_hand = vec![0u8; out.len()];
    loaderx_image::fit_into(&hwc, 60, 90, &mut by_hand, 32, 32, Layout::Hwc);
    assert_eq!(out, by_hand);
    // The same size is the plain decode.
    let mut same = vec![0u8; hwc.len()];
    decode_fit_into(&png, Format::Png, Layout::Hwc, 60, 90, &mut same).unwrap();
    assert_eq!(same, hwc);
    let mut wrong = vec![0u8; 10];
    assert!(decode_fit_into(&png, Format::Png, Layout::Hwc, 32, 32, &mut wrong).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Damaged bytes give an error or (for a flip the format cannot see,
    /// such as one inside JPEG entropy data) some image, never a panic.
    /// For PNG every flip after the signature is caught by a checksum.
    #[test]
    fn damaged_images_never_panic(
        cut in 0usize..4000,
        flips in proptest::collection::vec((0usize..4000, 0u8..8), 0..4),
        seed in 0u32..4,
    ) {
        let hwc = picture(24, 40, seed);
        let jpeg = encode_jpeg(&hwc, 24, 40, Layout::Hwc, 85).unwrap();
        let png = encode_png(&hwc, 24, 40, Layout::Hwc).unwrap();
        for (good, format) in [(jpeg, Format::Jpeg), (png, Format::Png)] {
            let mut bad = good.clone();
            for &(at, bit) in &flips {
                let at = at % bad.len();
                bad[at] ^= 1 << bit;
            }
            bad.truncate(cut.min(bad.len()));
            let mut out = vec![0u8; hwc.len()];
            let got = decode_into(&bad, format, Layout::Hwc, None, &mut out);
            if bad.len() < good.len() {
                prop_assert!(got.is_err(), "{} cut to {} of {} decoded", format, bad.len(), good.len());
            }
            let flipped_after_sig = flips.iter().any(|&(at, _)| at % good.len() >= 8 && at % good.len() < bad.len());
            if format == Format::Png && flipped_after_sig && bad != good {
                prop_assert!(got.is_err(), "a flipped PNG decoded");
            }
            let _ = read_header(&bad, format);
            let mut small = vec![0u8; 8 * 8 * 3];
            let _ = decode_fit_into(&bad, format, Layout::Chw, 8, 8, &mut small);
        }
    }
}

#[test]
fn jpeg_chroma_is_the_mean_of_each_2x2_block() {
    // Columns alternate pure red and pure blue: every 2×2 block's chroma
    // mean is purple. Taking one pixel of each block instead would make the
    // whole image's chroma red.
    let (h, w) = (32u32, 32u32);
    let mut hwc = vec![0u8; (h * w * 3) as usize];
    for (i, px) in hwc.chunks_exact_mut(3).enumerate() {
        let channel = if i % 2 == 0 { 0 } else { 2 };
        px[channel] = 255;
    }
    let jpeg = encode_jpeg(&hwc, h, w, Layout::Hwc, 90).unwrap();
    let mut out = vec![0u8; hwc.len()];
    decode_into(&jpeg, Format::Jpeg, Layout::Hwc, None, &mut out).unwrap();
    let mean = |c: usize| {
        let sum: u64 = out.chunks_exact(3).map(|px| u64::from(px[c])).sum();
        sum as f64 / f64::from(h * w)
    };
    let (red, blue) = (mean(0), mean(2));
    assert!(
        (red - 127.5).abs() < 20.0 && (blue - 127.5).abs() < 20.0,
        "mean red {red:.1}, mean blue {blue:.1}: the original's are 127.5 each"
    );
}
