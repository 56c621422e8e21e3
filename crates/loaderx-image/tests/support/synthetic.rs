//! Synthetic RGB images (HWC, 8 bits) for the JPEG encoder's test and its
//! speed example, which share them through `#[path]`: the same seed gives
//! the same pixels in both, and the test's thresholds and the example's
//! figures depend on those pixels.

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }
}

/// A gradient plus uniform noise of ±`amp` on every sample.
pub fn noisy(h: usize, w: usize, seed: u64, amp: i32) -> Vec<u8> {
    let mut rng = Lcg(seed);
    let mut out = Vec::with_capacity(h * w * 3);
    for y in 0..h {
        for x in 0..w {
            for c in 0..3 {
                let base = ((x * 255 / w + y * 128 / h + c * 60) % 256) as i32;
                let n = (rng.next() % (2 * amp as u32 + 1)) as i32 - amp;
                out.push((base + n).clamp(0, 255) as u8);
            }
        }
    }
    out
}

/// Low-frequency gradients and slow waves.
pub fn smooth(h: usize, w: usize, seed: u64) -> Vec<u8> {
    let s = seed as f32;
    let mut out = Vec::with_capacity(h * w * 3);
    for y in 0..h {
        for x in 0..w {
            let (fx, fy) = (x as f32 / w as f32, y as f32 / h as f32);
            let r = 128.0 + 100.0 * (fx * 3.0 + s).sin() * (fy * 2.0).cos();
            let g = 255.0 * fy * 0.8 + 20.0 * (fx * 7.0 + fy * 5.0 + s).sin();
            let b = 60.0 + 120.0 * fx * fy + 30.0 * (fy * 9.0 - s).cos();
            for v in [r, g, b] {
                out.push(v.clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}

/// Uniform random samples 0–255: the most bits per pixel, the entropy
/// coder's worst case.
#[allow(dead_code)] // the test does not use it
pub fn random(h: usize, w: usize, seed: u64) -> Vec<u8> {
    let mut rng = Lcg(seed);
    (0..h * w * 3).map(|_| (rng.next() >> 8) as u8).collect()
}
