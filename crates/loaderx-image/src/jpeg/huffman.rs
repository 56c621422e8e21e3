//! Huffman entropy coding of quantised blocks (T.81 F.1.2) into a byte
//! stream with 0xFF00 stuffing.

use super::tables::HuffSpec;

/// A Huffman table ready for coding: for every symbol, its code in the
/// high bits and its length in the low byte (`code << 8 | length`; length
/// 0 for a symbol the table lacks).
#[derive(Debug)]
pub(crate) struct HuffTable {
    codes: [u32; 256],
}

impl HuffTable {
    /// Assigns the canonical codes of T.81 Annex C: codes of each length
    /// in symbol order, counting up, one bit longer at each length.
    pub(crate) fn new(spec: &HuffSpec) -> HuffTable {
        let mut codes = [0u32; 256];
        let mut code = 0u32;
        let mut k = 0;
        for (len, &count) in (1u32..).zip(&spec.counts) {
            for _ in 0..count {
                codes[usize::from(spec.symbols[k])] = code << 8 | len;
                code += 1;
                k += 1;
            }
            code <<= 1;
        }
        HuffTable { codes }
    }
}

/// Packs bits most-significant first into a 64-bit accumulator and moves
/// them to the output eight bytes at a time, stuffing a zero after every
/// 0xFF byte.
#[derive(Debug)]
pub(crate) struct BitWriter {
    out: Vec<u8>,
    /// The pending bits, in the low `64 - free` bits (higher bits are
    /// stale and shifted out before use).
    acc: u64,
    /// Room left in `acc`, 1–64.
    free: u32,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

impl BitWriter {
    pub(crate) fn new(out: Vec<u8>) -> BitWriter {
        BitWriter {
            out,
            acc: 0,
            free: 64,
        }
    }

    /// Appends the low `n` bits of `bits` (`n` ≤ 32; no bits set above
    /// them).
    #[inline(always)]
    pub(crate) fn put(&mut self, bits: u64, n: u32) {
        debug_assert!(n <= 32 && bits >> n == 0);
        if n < self.free {
            self.acc = self.acc << n | bits;
            self.free -= n;
        } else {
            // `free` ≤ n ≤ 32: the word fills up; `rest` bits stay behind.
            let rest = n - self.free;
            let word = self.acc << self.free | bits >> rest;
            self.flush_word(word);
            self.acc = bits;
            self.free = 64 - rest;
        }
    }

    #[inline(always)]
    fn flush_word(&mut self, word: u64) {
        // A byte of `word` is 0xFF iff that byte of `!word` is zero.
        let inv = !word;
        if inv.wrapping_sub(ONES) & word & HIGHS == 0 {
            self.out.extend_from_slice(&word.to_be_bytes());
        } else {
            self.flush_stuffed(word);
        }
    }

    #[cold]
    fn flush_stuffed(&mut self, word: u64) {
        for b in word.to_be_bytes() {
            self.out.push(b);
            if b == 0xFF {
                self.out.push(0);
            }
        }
    }

    /// Pads the last byte with 1 bits (T.81 F.1.2.3) and returns the
    /// output.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let used = 64 - self.free;
        let pad = (8 - used % 8) % 8;
        if pad > 0 {
            self.put((1 << pad) - 1, pad);
        }
        let used = 64 - self.free;
        for i in (0..used / 8).rev() {
            let b = (self.acc >> (8 * i)) as u8;
            self.out.push(b);
            if b == 0xFF {
                self.out.push(0);
            }
        }
        self.out
    }
}

/// The magnitude category of `v` (its bit length, T.81 F.1.2.1) and its
/// extra bits: `v` itself if positive, `v - 1` in `size` bits if negative.
#[inline(always)]
fn category(v: i32) -> (u32, u32) {
    let size = 32 - v.unsigned_abs().leading_zeros();
    let bits = (v - i32::from(v < 0)) as u32 & ((1u32 << size) - 1);
    (size, bits)
}

/// A mask with bit `k` set where `zz[k]` is not zero.
#[inline(always)]
fn nonzero_mask(zz: &[i16; 64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi16, _mm_movemask_epi8, _mm_packs_epi16, _mm_setzero_si128,
        };
        // SAFETY: `[i16; 64]` and `[__m128i; 8]` have the same size, every
        // bit pattern is valid for both, and the read is unaligned.
        let v: [__m128i; 8] = unsafe { std::ptr::read_unaligned(zz.as_ptr().cast()) };
        let mut mask = 0u64;
        for (i, pair) in v.chunks_exact(2).enumerate() {
            // SAFETY: SSE2 is part of the x86_64 baseline, always present;
            // these intrinsics only compute on registers.
            let m = unsafe {
                let zero = _mm_setzero_si128();
                let a = _mm_cmpeq_epi16(pair[0], zero);
                let b = _mm_cmpeq_epi16(pair[1], zero);
                _mm_movemask_epi8(_mm_packs_epi16(a, b))
            } as u32 as u16;
            mask |= u64::from(!m) << (16 * i);
        }
        mask
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut mask = 0u64;
        for (k, &c) in zz.iter().enumerate() {
            mask |= u64::from(c != 0) << k;
        }
        mask
    }
}

/// Codes the AC coefficients marked in `mask` (their size and extra bits
/// from `coef`) as run/size symbols, with ZRL for runs of 16 zeros; returns
/// the index of the last one coded (0 if none).
#[inline(always)]
fn code_ac(
    w: &mut BitWriter,
    mut mask: u64,
    ac: &HuffTable,
    coef: impl Fn(usize) -> (u32, u32),
) -> u32 {
    let mut last = 0u32;
    while mask != 0 {
        let k = mask.trailing_zeros();
        mask &= mask - 1;
        let mut run = k - last - 1;
        while run >= 16 {
            let z = ac.codes[0xF0];
            w.put(u64::from(z >> 8), z & 0xff);
            run -= 16;
        }
        let (size, bits) = coef(k as usize);
        let e = ac.codes[(run << 4 | size) as usize];
        w.put(
            u64::from(e >> 8) << size | u64::from(bits),
            (e & 0xff) + size,
        );
        last = k;
    }
    last
}

/// Codes one block: `zz` in zig-zag order, its DC as a difference from
/// `*prev_dc` (updated), then the AC run/size symbols, with ZRL for runs of
/// 16 zeros and EOB unless the last coefficient is non-zero.
#[inline(always)]
pub(crate) fn encode_block(
    w: &mut BitWriter,
    zz: &[i16; 64],
    prev_dc: &mut i32,
    dc: &HuffTable,
    ac: &HuffTable,
) {
    // The accumulator in locals (registers) for the whole block; only the
    // output vector is touched through `w`.
    let mut local = BitWriter {
        out: std::mem::take(&mut w.out),
        acc: w.acc,
        free: w.free,
    };
    let lw = &mut local;
    let dc_val = i32::from(zz[0]);
    let (size, bits) = category(dc_val - *prev_dc);
    *prev_dc = dc_val;
    let e = dc.codes[size as usize];
    lw.put(
        u64::from(e >> 8) << size | u64::from(bits),
        (e & 0xff) + size,
    );

    let mask = nonzero_mask(zz) & !1;
    // Busy blocks: the sizes and extra bits of all coefficients at once,
    // branch-free so the loop vectorises (the size from the exponent of the
    // magnitude as `f32`, exact below 2^24: `size = exponent + 1`, 0 for
    // 0). Sparse blocks: each as it comes.
    let last = if mask.count_ones() > 8 {
        let mut sizes = [0u32; 64];
        let mut extra = [0u32; 64];
        for ((s, e), &c) in sizes.iter_mut().zip(&mut extra).zip(zz) {
            let v = i32::from(c);
            let mag = v.unsigned_abs() as f32;
            let size = (mag.to_bits() >> 23).max(126) - 126;
            *s = size;
            *e = (v + (v >> 31)) as u32 & ((1u32 << size) - 1);
        }
        code_ac(lw, mask, ac, |k| (sizes[k], extra[k]))
    } else {
        code_ac(lw, mask, ac, |k| category(i32::from(zz[k])))
    };
    if last != 63 {
        let e = ac.codes[0x00];
        lw.put(u64::from(e >> 8), e & 0xff);
    }
    *w = local;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_follow_table_f1() {
        assert_eq!(category(0), (0, 0));
        assert_eq!(category(1), (1, 1));
        assert_eq!(category(-1), (1, 0));
        assert_eq!(category(-3), (2, 0));
        assert_eq!(category(3), (2, 3));
        assert_eq!(category(-1023), (10, 0));
        assert_eq!(category(1023), (10, 1023));
        assert_eq!(category(-2047), (11, 0));
    }

    #[test]
    fn the_mask_marks_nonzero_coefficients() {
        let mut zz = [0i16; 64];
        assert_eq!(nonzero_mask(&zz), 0);
        for k in [0, 1, 15, 16, 17, 31, 32, 47, 48, 63] {
            zz[k] = if k % 2 == 0 { -3 } else { 1000 };
        }
        let mask = nonzero_mask(&zz);
        for k in 0..64 {
            assert_eq!(mask >> k & 1 == 1, zz[k] != 0, "bit {k}");
        }
    }

    #[test]
    fn bits_are_stuffed_and_padded() {
        let mut w = BitWriter::new(Vec::new());
        // 0xFF twice across a word boundary, then 3 bits.
        for _ in 0..9 {
            w.put(0xFF, 8);
        }
        w.put(0b101, 3);
        let mut want = Vec::new();
        for _ in 0..9 {
            want.extend_from_slice(&[0xFF, 0x00]);
        }
        want.push(0b1011_1111);
        assert_eq!(w.finish(), want);

        let mut w = BitWriter::new(Vec::new());
        for i in 0..100u64 {
            w.put(i & 0x1F, 5);
            w.put(0x1234_5678 & ((1 << (i % 33)) - 1), (i % 33) as u32);
        }
        let got = w.finish();
        // The same bits one at a time.
        let mut bits = Vec::new();
        for i in 0..100u64 {
            for b in (0..5).rev() {
                bits.push((i & 0x1F) >> b & 1);
            }
            let n = i % 33;
            for b in (0..n).rev() {
                bits.push((0x1234_5678 & ((1 << n) - 1)) >> b & 1);
            }
        }
        while bits.len() % 8 != 0 {
            bits.push(1);
        }
        let mut want = Vec::new();
        for byte in bits.chunks(8) {
            let b = byte.iter().fold(0u8, |a, &x| a << 1 | x as u8);
            want.push(b);
            if b == 0xFF {
                want.push(0);
            }
        }
        assert_eq!(got, want);
    }
}
