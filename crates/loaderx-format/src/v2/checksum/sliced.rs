//! CRC32C by table lookups, eight bytes a step ("slicing by 8"): portable
//! safe Rust, for the targets `crc-fast` cannot be built for.
//!
//! `TABLES[0][b]` is the CRC register after byte `b` (the classic
//! byte-at-a-time table, reflected polynomial 0x82F63B78); `TABLES[k][b]`
//! is the register after byte `b` followed by `k` zero bytes. A step folds
//! the register into the next eight bytes and looks each byte up in the
//! table for the number of bytes that follow it in the step.

const POLY: u32 = 0x82F6_3B78;

static TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut crc = b as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        t[0][b] = crc;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

/// The CRC32C of `bytes`.
pub(super) fn checksum(bytes: &[u8]) -> u32 {
    append(0, bytes)
}

/// The CRC32C of the bytes `crc` covers followed by `bytes` (`crc` 0 for
/// none).
pub(super) fn append(crc: u32, bytes: &[u8]) -> u32 {
    let t = &TABLES;
    let byte = |word: u32, at: u32| ((word >> at) & 0xff) as usize;
    let mut reg = !crc;
    let mut steps = bytes.chunks_exact(8);
    for s in &mut steps {
        let lo = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) ^ reg;
        let hi = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
        reg = t[7][byte(lo, 0)]
            ^ t[6][byte(lo, 8)]
            ^ t[5][byte(lo, 16)]
            ^ t[4][byte(lo, 24)]
            ^ t[3][byte(hi, 0)]
            ^ t[2][byte(hi, 8)]
            ^ t[1][byte(hi, 16)]
            ^ t[0][byte(hi, 24)];
    }
    for &b in steps.remainder() {
        reg = (reg >> 8) ^ t[0][byte(reg ^ u32::from(b), 0)];
    }
    !reg
}
