//! The constant tables of ITU-T T.81: Annex K quantisation tables, the
//! standard Huffman tables (K.3) and the zig-zag order (figure A.6).

/// Annex K table K.1: luminance quantisation, natural (row-major) order.
pub(crate) const LUMA_QUANT: [u8; 64] = [
    16, 11, 10, 16, 24, 40, 51, 61, //
    12, 12, 14, 19, 26, 58, 60, 55, //
    14, 13, 16, 24, 40, 57, 69, 56, //
    14, 17, 22, 29, 51, 87, 80, 62, //
    18, 22, 37, 56, 68, 109, 103, 77, //
    24, 35, 55, 64, 81, 104, 113, 92, //
    49, 64, 78, 87, 103, 121, 120, 101, //
    72, 92, 95, 98, 112, 100, 103, 99,
];

/// Annex K table K.2: chrominance quantisation, natural order.
pub(crate) const CHROMA_QUANT: [u8; 64] = [
    17, 18, 24, 47, 99, 99, 99, 99, //
    18, 21, 26, 66, 99, 99, 99, 99, //
    24, 26, 56, 99, 99, 99, 99, 99, //
    47, 66, 99, 99, 99, 99, 99, 99, //
    99, 99, 99, 99, 99, 99, 99, 99, //
    99, 99, 99, 99, 99, 99, 99, 99, //
    99, 99, 99, 99, 99, 99, 99, 99, //
    99, 99, 99, 99, 99, 99, 99, 99,
];

/// `ZIGZAG[k]` is the natural index of the `k`-th coefficient in zig-zag
/// order: the anti-diagonals `row + col = s` walked alternately upwards
/// (even `s`) and downwards (odd `s`).
pub(crate) const ZIGZAG: [u8; 64] = zigzag();

const fn zigzag() -> [u8; 64] {
    let mut out = [0u8; 64];
    let mut k = 0;
    let mut s = 0i32;
    while s < 15 {
        let mut i = 0i32;
        while i < 8 {
            // Even diagonals go up (row decreasing), odd ones down.
            let row = if s % 2 == 0 { s - i } else { i };
            let col = s - row;
            if row >= 0 && row < 8 && col >= 0 && col < 8 {
                out[k] = (row * 8 + col) as u8;
                k += 1;
            }
            i += 1;
        }
        s += 1;
    }
    out
}

/// A Huffman table as DHT carries it: how many codes of each length 1–16,
/// then the symbols in code order.
#[derive(Debug)]
pub(crate) struct HuffSpec {
    pub(crate) counts: [u8; 16],
    pub(crate) symbols: &'static [u8],
}

/// Table K.3: luminance DC differences.
pub(crate) const DC_LUMA: HuffSpec = HuffSpec {
    counts: [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0],
    symbols: &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
};

/// Table K.4: chrominance DC differences.
pub(crate) const DC_CHROMA: HuffSpec = HuffSpec {
    counts: [0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0],
    symbols: &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
};

/// Table K.5: luminance AC coefficients.
pub(crate) const AC_LUMA: HuffSpec = HuffSpec {
    counts: [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7d],
    symbols: &[
        0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61,
        0x07, 0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52,
        0xd1, 0xf0, 0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25,
        0x26, 0x27, 0x28, 0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45,
        0x46, 0x47, 0x48, 0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64,
        0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83,
        0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99,
        0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6,
        0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3,
        0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8,
        0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa,
    ],
};

/// Table K.6: chrominance AC coefficients.
pub(crate) const AC_CHROMA: HuffSpec = HuffSpec {
    counts: [0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77],
    symbols: &[
        0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61,
        0x71, 0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33,
        0x52, 0xf0, 0x15, 0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18,
        0x19, 0x1a, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44,
        0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63,
        0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a,
        0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97,
        0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4,
        0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca,
        0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7,
        0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa,
    ],
};

/// A quantisation table scaled by libjpeg's quality rule
/// (`jpeg_quality_scaling`: below 50 the percentage is `5000 / q`, from 50
/// on `200 - 2q`), each entry `(base × percent + 50) / 100` clamped to
/// 1–255 (baseline). Natural order.
pub(crate) fn scaled_quant(base: &[u8; 64], quality: u8) -> [u8; 64] {
    let q = u32::from(quality.clamp(1, 100));
    let percent = if q < 50 { 5000 / q } else { 200 - 2 * q };
    let mut out = [0u8; 64];
    for (o, &b) in out.iter_mut().zip(base) {
        *o = ((u32::from(b) * percent + 50) / 100).clamp(1, 255) as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_is_the_standard_permutation() {
        assert_eq!(&ZIGZAG[..10], &[0, 1, 8, 16, 9, 2, 3, 10, 17, 24]);
        assert_eq!(&ZIGZAG[54..], &[39, 46, 53, 60, 61, 54, 47, 55, 62, 63]);
        let mut seen = [false; 64];
        for &z in &ZIGZAG {
            assert!(!seen[usize::from(z)]);
            seen[usize::from(z)] = true;
        }
    }

    #[test]
    fn huffman_specs_cover_every_baseline_symbol_once() {
        for (spec, ac) in [
            (&DC_LUMA, false),
            (&DC_CHROMA, false),
            (&AC_LUMA, true),
            (&AC_CHROMA, true),
        ] {
            let total: usize = spec.counts.iter().map(|&c| usize::from(c)).sum();
            assert_eq!(total, spec.symbols.len());
            let mut seen = [false; 256];
            for &s in spec.symbols {
                assert!(!seen[usize::from(s)], "symbol {s:#x} twice");
                seen[usize::from(s)] = true;
            }
            if ac {
                assert_eq!(total, 162);
                for run in 0..16 {
                    for size in 1..=10 {
                        assert!(seen[run << 4 | size]);
                    }
                }
                assert!(seen[0x00] && seen[0xf0]);
            } else {
                assert_eq!(total, 12);
            }
        }
    }

    #[test]
    fn quality_scaling_follows_libjpeg() {
        assert_eq!(scaled_quant(&LUMA_QUANT, 50), LUMA_QUANT);
        assert_eq!(scaled_quant(&LUMA_QUANT, 100), [1; 64]);
        assert_eq!(scaled_quant(&LUMA_QUANT, 1)[0], 255);
        // q 90: 20 %.
        assert_eq!(scaled_quant(&LUMA_QUANT, 90)[0], 3);
        assert_eq!(scaled_quant(&CHROMA_QUANT, 90)[63], 20);
    }
}
