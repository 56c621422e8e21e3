//! What the fuzz targets and the seed-corpus generator share: the zstd
//! dictionary the `decode` target decodes `zstd_dict` records with, and the
//! checksum fix-up of squeezed v2 `meta.zr` images (`parse_index`,
//! `open_store`).
//!
//! The dictionary is trained, not stored: [`fuzz_dictionary`] trains it from
//! samples made by a fixed generator, and zstd's trainer is deterministic,
//! so the target and `gen_corpus` (which writes frames made with it as
//! seeds) get the same bytes and the same dictionary id.

use loaderx_format::v2::{self, HEADER_V2_LEN};
use loaderx_store::train_dictionary;

/// Where a slot's schema checksum and its own checksum sit.
const SCHEMA_CRC_AT: usize = 28;
const SLOT_CRC_AT: usize = HEADER_V2_LEN - 4;

/// Bytes of the dictionary [`fuzz_dictionary`] trains (small, so the
/// target's start-up stays quick).
pub const FUZZ_DICT_SIZE: usize = 4096;

/// splitmix64: a small deterministic generator.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `count` token-like records (little-endian u32 ids, small ids common,
/// recurring phrases), 16 to 271 ids each, from `seed`.
#[must_use]
pub fn token_records(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = SplitMix(seed);
    let phrases: Vec<Vec<u32>> = (0..64)
        .map(|_| {
            (0..3 + rng.next() % 6)
                .map(|_| (rng.next() % 3000) as u32)
                .collect()
        })
        .collect();
    (0..count)
        .map(|_| {
            let n = 16 + (rng.next() % 256) as usize;
            let mut ids: Vec<u32> = Vec::with_capacity(n + 8);
            while ids.len() < n {
                if rng.next().is_multiple_of(2) {
                    ids.extend_from_slice(&phrases[(rng.next() % 64) as usize]);
                } else {
                    let r = rng.next() % 1000;
                    ids.push((r * r / 100) as u32);
                }
            }
            ids.truncate(n);
            ids.iter().flat_map(|t| t.to_le_bytes()).collect()
        })
        .collect()
}

/// The dictionary the `decode` target uses for `zstd_dict`, trained on
/// [`token_records`]`(1, 600)`.
///
/// # Panics
/// If zstd's trainer refuses the samples (it does not: they are fixed).
#[must_use]
pub fn fuzz_dictionary() -> Vec<u8> {
    let records = token_records(1, 600);
    let sizes: Vec<usize> = records.iter().map(Vec::len).collect();
    train_dictionary(&records.concat(), &sizes, FUZZ_DICT_SIZE)
        .expect("the fixed samples train a dictionary")
}

/// Recomputes every checksum of a squeezed v2 image in place, with the
/// rules `docs/FORMAT.md` gives (written out here, not borrowed from the
/// encoders, so the two are checked against each other).
pub fn fix_v2_checksums(image: &mut [u8]) {
    let schema_len = |slot: &[u8]| u32::from_le_bytes(slot[24..28].try_into().unwrap()) as usize;
    let after_slots = (2 * HEADER_V2_LEN).min(image.len());
    let (slot_bytes, rest) = image.split_at_mut(after_slots);
    for slot in slot_bytes.chunks_exact_mut(HEADER_V2_LEN) {
        if let Some(block) = rest.get(..schema_len(slot)) {
            slot[SCHEMA_CRC_AT..SCHEMA_CRC_AT + 4]
                .copy_from_slice(&v2::crc32c(block).to_le_bytes());
        }
        let crc = v2::crc32c(&slot[..SLOT_CRC_AT]);
        slot[SLOT_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    }
    let Some(slot0) = slot_bytes.get(..HEADER_V2_LEN) else {
        return;
    };
    let entry_len = usize::from(u16::from_le_bytes([slot0[32], slot0[33]]));
    let Some(table) = rest.get_mut(schema_len(slot0)..) else {
        return;
    };
    if entry_len < v2::ENTRY_BASE_LEN {
        return;
    }
    for (i, entry) in table.chunks_exact_mut(entry_len).enumerate() {
        let body = entry.len() - 4;
        let crc = v2::crc32c_append(v2::crc32c(&(i as u64).to_le_bytes()), &entry[..body]);
        entry[body..].copy_from_slice(&crc.to_le_bytes());
    }
}
