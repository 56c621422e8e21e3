//! CRC32C (Castagnoli), the checksum format v2 puts on headers, tables and
//! records.
//!
//! Computed by the `crc-fast` crate (pure Rust): carry-less multiplication
//! (PCLMULQDQ, or VPCLMULQDQ with AVX-512, on `x86_64`; PMULL on `aarch64`),
//! chosen at run time, with a table-driven fallback elsewhere: folding
//! several lanes with carry-less multiplies outruns a loop of the CRC32
//! instruction (the `crc32c` crate's), which waits on each step's result,
//! on buffers from 64 B up.
//!
//! Windows on Arm with the GNU-style toolchain (`aarch64-pc-windows-gnullvm`)
//! is the exception: `crc-fast` builds a C-ABI library of its own alongside,
//! which the toolchain that cross-builds that wheel (maturin with zig)
//! cannot link, so there the table-driven `sliced` computes it (slicing by
//! 8 bytes; the same values, checked against the definition on every
//! platform the tests run on).

#[cfg(any(test, all(windows, target_arch = "aarch64", target_env = "gnu")))]
mod sliced;

#[cfg(all(windows, target_arch = "aarch64", target_env = "gnu"))]
use sliced as imp;

/// `crc-fast` behind the same two calls as `sliced`.
#[cfg(not(all(windows, target_arch = "aarch64", target_env = "gnu")))]
mod imp {
    /// CRC-32/ISCSI is CRC32C: reflected polynomial 0x1EDC6F41, initial
    /// value and final XOR 0xFFFFFFFF.
    const ALGORITHM: crc_fast::CrcAlgorithm = crc_fast::CrcAlgorithm::Crc32Iscsi;

    pub(super) fn checksum(bytes: &[u8]) -> u32 {
        // A 32-bit CRC in a u64: the high half is always zero.
        crc_fast::checksum(ALGORITHM, bytes) as u32
    }

    pub(super) fn append(crc: u32, bytes: &[u8]) -> u32 {
        // The running state is the finished CRC before its final XOR.
        let mut digest = crc_fast::Digest::new_with_init_state(ALGORITHM, u64::from(!crc));
        digest.update(bytes);
        digest.finalize() as u32
    }
}

/// The CRC32C of `bytes`.
#[must_use]
pub fn crc32c(bytes: &[u8]) -> u32 {
    imp::checksum(bytes)
}

/// The CRC32C of the bytes `crc` covers followed by `bytes`, so a checksum
/// can be computed piece by piece: `crc32c_append(crc32c(a), b) ==
/// crc32c(a ++ b)`, and `crc32c_append(0, b) == crc32c(b)`.
#[must_use]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    imp::append(crc, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bitwise CRC32C straight from the definition (reflected polynomial
    /// 0x82F63B78, initial and final XOR 0xFFFFFFFF), to check the fast one.
    fn by_definition(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn known_vectors() {
        // The check value of CRC-32C (e.g. RFC 3720's parameters).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        // RFC 3720 B.4: 32 bytes of zeros, and of 0xff.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
    }

    #[test]
    fn matches_the_definition_and_appends() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        // Lengths and alignments around the block sizes the SIMD paths use.
        for start in 0..9 {
            for len in [
                0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257,
                511, 512, 513, 1000, 2048, 4000,
            ] {
                let piece = &data[start..start + len];
                assert_eq!(crc32c(piece), by_definition(piece), "{start}+{len}");
            }
        }
        for split in [0, 1, 100, 2500, 4999, 5000] {
            let (a, b) = data.split_at(split);
            assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data), "{split}");
        }
        assert_eq!(crc32c_append(0, &data), crc32c(&data));
    }

    #[test]
    fn the_sliced_fallback_gives_the_same_values() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
            .collect();
        assert_eq!(sliced::checksum(b"123456789"), 0xE306_9283);
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4000] {
                let piece = &data[start..start + len];
                assert_eq!(
                    sliced::append(0, piece),
                    by_definition(piece),
                    "{start}+{len}"
                );
                assert_eq!(sliced::append(0, piece), crc32c(piece), "{start}+{len}");
            }
        }
        for split in [0, 1, 7, 100, 2501, 5000] {
            let (a, b) = data.split_at(split);
            assert_eq!(sliced::append(crc32c(a), b), crc32c(&data), "{split}");
        }
    }
}
