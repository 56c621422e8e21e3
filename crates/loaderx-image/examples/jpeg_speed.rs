//! Encode speed, size and PSNR of `encode_jpeg` against the `jpeg-encoder`
//! crate (4:2:0, chroma averaged) on 64 noisy 128×96 images (a gradient
//! ±48 uniform noise), 64 smooth 224×224 ones and 64 128×96 images of
//! uniform random samples, quality 90. `JPEG_SPEED_ONLY=noisy` (or `smooth`,
//! `random`) runs one set.
//!
//! `cargo run -p loaderx-image --release --example jpeg_speed -- [rounds] [dump_dir]`
//!
//! With `dump_dir`, writes the raw pixels (`noisy.rgb`, `smooth.rgb`,
//! `random.rgb`: images back to back) and our encodings (`noisy.ours` and
//! so on at q 90, `noisy.q50.ours` and so on at q 50, 75 and 95: each image
//! a 4-byte little-endian length then the bytes) so a Python script can
//! time Pillow on the same pixels and decode ours with libjpeg.
#![allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]

#[path = "../tests/support/synthetic.rs"]
mod synthetic;

use std::time::Instant;

use loaderx_image::{Format, Layout, decode_into, encode_jpeg};
use synthetic::{noisy, random, smooth};

const QUALITY: u8 = 90;

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let se: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    let mse = se / a.len() as f64;
    10.0 * (255.0f64 * 255.0 / mse.max(1e-12)).log10()
}

fn theirs(px: &[u8], h: usize, w: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(px.len() / 4);
    let mut e = jpeg_encoder::Encoder::new(&mut out, QUALITY);
    e.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    e.set_chroma_subsampling_method(jpeg_encoder::ChromaSubsamplingMethod::Average);
    e.encode(px, w as u16, h as u16, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    out
}

fn ours(px: &[u8], h: usize, w: usize) -> Vec<u8> {
    encode_jpeg(px, h as u32, w as u32, Layout::Hwc, QUALITY).unwrap()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(9, |a| a.parse().unwrap());
    let dump = args.next();
    let only = std::env::var("JPEG_SPEED_ONLY").ok();
    let sets: Vec<(&str, usize, usize, Vec<Vec<u8>>)> = vec![
        (
            "noisy",
            96,
            128,
            (0..64).map(|i| noisy(96, 128, i, 48)).collect(),
        ),
        (
            "smooth",
            224,
            224,
            (0..64).map(|i| smooth(224, 224, i)).collect(),
        ),
        (
            "random",
            96,
            128,
            (0..64).map(|i| random(96, 128, i)).collect(),
        ),
    ];
    let sets: Vec<_> = sets
        .into_iter()
        .filter(|s| only.as_deref().is_none_or(|o| o == s.0))
        .collect();
    for (name, h, w, images) in &sets {
        let (h, w) = (*h, *w);
        let mut p_ours = Vec::new();
        let mut p_theirs = Vec::new();
        let (mut size_ours, mut size_theirs) = (0usize, 0usize);
        let mut dumped = Vec::new();
        for px in images {
            let a = ours(px, h, w);
            let b = theirs(px, h, w);
            size_ours += a.len();
            size_theirs += b.len();
            let mut out = vec![0u8; px.len()];
            decode_into(&a, Format::Jpeg, Layout::Hwc, None, &mut out).unwrap();
            p_ours.push(psnr(px, &out));
            decode_into(&b, Format::Jpeg, Layout::Hwc, None, &mut out).unwrap();
            p_theirs.push(psnr(px, &out));
            dumped.extend_from_slice(&(a.len() as u32).to_le_bytes());
            dumped.extend_from_slice(&a);
        }
        if let Some(dir) = &dump {
            std::fs::write(format!("{dir}/{name}.rgb"), images.concat()).unwrap();
            std::fs::write(format!("{dir}/{name}.ours"), dumped).unwrap();
            // Ours at other qualities too, for a PSNR/size check against
            // Pillow at each.
            for q in [50u8, 75, 95] {
                let mut d = Vec::new();
                for px in images {
                    let j = encode_jpeg(px, h as u32, w as u32, Layout::Hwc, q).unwrap();
                    d.extend_from_slice(&(j.len() as u32).to_le_bytes());
                    d.extend_from_slice(&j);
                }
                std::fs::write(format!("{dir}/{name}.q{q}.ours"), d).unwrap();
            }
        }
        let worst = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "{name} {h}x{w} q{QUALITY}: PSNR (zune decode) median/worst ours {:.3}/{:.3} dB, \
             jpeg-encoder {:.3}/{:.3} dB; bytes ours {} jpeg-encoder {} ({:.4}x)",
            median(&mut p_ours.clone()),
            worst(&p_ours),
            median(&mut p_theirs.clone()),
            worst(&p_theirs),
            size_ours,
            size_theirs,
            size_ours as f64 / size_theirs as f64,
        );
        let (mut t_ours, mut t_theirs) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (times, f) in [
                (&mut t_ours, ours as fn(&[u8], usize, usize) -> Vec<u8>),
                (&mut t_theirs, theirs),
            ] {
                let start = Instant::now();
                for px in images {
                    std::hint::black_box(f(std::hint::black_box(px), h, w));
                }
                times.push(start.elapsed().as_secs_f64() * 1e6 / images.len() as f64);
            }
        }
        println!(
            "{name} {h}x{w}: µs/image median of {rounds} alternating rounds: ours {:.1}, \
             jpeg-encoder {:.1}",
            median(&mut t_ours),
            median(&mut t_theirs)
        );
    }
}
