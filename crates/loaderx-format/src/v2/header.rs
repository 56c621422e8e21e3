//! The v2 header: one of two alternating slots at the start of `meta.zr`.
//!
//! ```text
//! 0      4        6      7     8          16        24          28          32          34     40                     168     172
//! | ZREC | ver=2  | lanes| 0   | sequence | length  | schema_len| schema_crc| entry_len | 0…   | 16 × (chunk, offset) | crc32c |
//! ```

use crate::{
    FormatError, Head, MAGIC, MAX_LANES, Tail,
    v2::{MAX_SCHEMA_LEN, VERSION_V2},
};

/// Bytes of one header slot (a slot starts every [`SLOT_LEN`] bytes).
pub const HEADER_V2_LEN: usize = 172;

/// Distance between the two header slots: one page each, so one slot's
/// write never touches the other's page.
pub const SLOT_LEN: u64 = 4096;

const TAILS_AT: usize = 40;
const CRC_AT: usize = TAILS_AT + MAX_LANES * 8;
const _: () = assert!(CRC_AT + 4 == HEADER_V2_LEN);

/// A decoded v2 header slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderV2 {
    /// Commit counter; the slot written is `sequence % 2`.
    pub sequence: u64,
    /// Records and frontiers.
    pub head: Head,
    /// Bytes of the schema block.
    pub schema_len: u32,
    /// CRC32C of the schema block.
    pub schema_crc: u32,
    /// Bytes of one table entry (fixed by the schema).
    pub entry_len: u16,
    /// Feature bits (byte 7): [`FEATURE_RUNS`](super::runs::FEATURE_RUNS)
    /// when the table is a run table. A bit this version does not know
    /// refuses the slot, so a reader never misreads a later table.
    pub features: u8,
}

impl HeaderV2 {
    /// The slot's bytes, checksum included.
    #[must_use]
    pub fn encode(&self) -> [u8; HEADER_V2_LEN] {
        let mut b = [0u8; HEADER_V2_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION_V2.to_le_bytes());
        b[6] = self.head.lanes;
        b[7] = self.features;
        b[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        b[16..24].copy_from_slice(&self.head.length.to_le_bytes());
        b[24..28].copy_from_slice(&self.schema_len.to_le_bytes());
        b[28..32].copy_from_slice(&self.schema_crc.to_le_bytes());
        b[32..34].copy_from_slice(&self.entry_len.to_le_bytes());
        for (l, t) in self.head.lane_tails().iter().enumerate() {
            let at = TAILS_AT + 8 * l;
            b[at..at + 4].copy_from_slice(&t.chunk.to_le_bytes());
            b[at + 4..at + 8].copy_from_slice(&t.offset.to_le_bytes());
        }
        let crc = super::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks one slot: magic, version, checksum, reserved
    /// bytes, lane count and that every lane's tail chunk belongs to it.
    ///
    /// # Errors
    /// [`FormatError::Truncated`], [`FormatError::BadMagic`],
    /// [`FormatError::Version`] or [`FormatError::BadHeader`].
    pub fn decode(bytes: &[u8]) -> Result<HeaderV2, FormatError> {
        let Some(b) = bytes.first_chunk::<HEADER_V2_LEN>() else {
            return Err(FormatError::Truncated {
                need: HEADER_V2_LEN as u64,
                have: bytes.len() as u64,
            });
        };
        let magic = [b[0], b[1], b[2], b[3]];
        if magic != MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != VERSION_V2 {
            return Err(FormatError::Version {
                expected: VERSION_V2,
                found: version,
            });
        }
        let bad = |why: &str| Err(FormatError::BadHeader(why.to_owned()));
        let stored = u32::from_le_bytes([b[CRC_AT], b[CRC_AT + 1], b[CRC_AT + 2], b[CRC_AT + 3]]);
        let crc = super::crc32c(&b[..CRC_AT]);
        if stored != crc {
            return bad(&format!(
                "header checksum mismatch (stored {stored:#010x}, computed {crc:#010x})"
            ));
        }
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let lanes = b[6];
        if lanes == 0 || usize::from(lanes) > MAX_LANES {
            return bad(&format!("lane count {lanes} is outside 1..={MAX_LANES}"));
        }
        if b[7] & !super::runs::KNOWN_FEATURES != 0 {
            return bad(&format!(
                "feature bits {:#04x} are unknown to this reader (a newer loaderx wrote the store)",
                b[7]
            ));
        }
        if b[34..40].iter().any(|&x| x != 0) {
            return bad("reserved header bytes are not zero");
        }
        let mut head = Head::empty(lanes);
        head.length = u64_at(16);
        for l in 0..MAX_LANES {
            let at = TAILS_AT + 8 * l;
            let tail = Tail {
                chunk: u32_at(at),
                offset: u32_at(at + 4),
            };
            if l >= usize::from(lanes) {
                if tail != Tail::default() {
                    return bad(&format!("unused lane {l} has a frontier"));
                }
                continue;
            }
            if tail.chunk % u32::from(lanes) != l as u32 {
                return bad(&format!(
                    "lane {l}'s tail chunk {} belongs to another lane",
                    tail.chunk
                ));
            }
            head.tails[l] = tail;
        }
        let entry_len = u16::from_le_bytes([b[32], b[33]]);
        let schema_len = u32_at(24);
        if schema_len > MAX_SCHEMA_LEN {
            return bad(&format!(
                "schema_len {schema_len} is over the {MAX_SCHEMA_LEN} bytes a schema block can have"
            ));
        }
        Ok(HeaderV2 {
            sequence: u64_at(8),
            head,
            schema_len,
            schema_crc: u32_at(28),
            entry_len,
            features: b[7],
        })
    }

    /// Byte offset of the slot this header is written to.
    #[must_use]
    pub fn slot_offset(&self) -> u64 {
        (self.sequence % 2) * SLOT_LEN
    }
}

/// Picks the header to trust from the two slots' bytes: the valid one with
/// the larger sequence. A slot that fails its checks is ignored when the
/// other is valid (power loss tore it mid-write).
///
/// # Errors
/// The error of slot 0 when neither slot is valid.
pub fn pick_header(slot0: &[u8], slot1: &[u8]) -> Result<HeaderV2, FormatError> {
    match (HeaderV2::decode(slot0), HeaderV2::decode(slot1)) {
        (Ok(a), Ok(b)) => Ok(if b.sequence > a.sequence { b } else { a }),
        (Ok(a), Err(_)) => Ok(a),
        (Err(_), Ok(b)) => Ok(b),
        (Err(e), Err(_)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HeaderV2 {
        let mut head = Head::empty(4);
        head.length = (1 << 40) + 3;
        head.tails[2] = Tail {
            chunk: 4 * 70_000 + 2,
            offset: 12,
        };
        HeaderV2 {
            sequence: 9,
            head,
            schema_len: 40,
            schema_crc: 0xdead_beef,
            entry_len: 36,
            features: 0,
        }
    }

    #[test]
    fn round_trips_and_is_little_endian() {
        let h = sample();
        let b = h.encode();
        assert_eq!(&b[0..6], b"ZREC\x02\x00");
        assert_eq!(b[6], 4);
        assert_eq!(HeaderV2::decode(&b), Ok(h));
        assert_eq!(h.slot_offset(), SLOT_LEN);
    }

    #[test]
    fn a_schema_len_past_any_schema_block_is_refused() {
        let mut h = sample();
        h.schema_len = MAX_SCHEMA_LEN;
        assert_eq!(HeaderV2::decode(&h.encode()), Ok(h));
        h.schema_len = MAX_SCHEMA_LEN + 1;
        let err = HeaderV2::decode(&h.encode()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("schema_len {}", MAX_SCHEMA_LEN + 1)),
            "{err}"
        );
    }

    /// A run table's feature bit round-trips; a bit this version does not
    /// know refuses the slot, naming it, as a reader that predates run
    /// tables refuses bit 0.
    #[test]
    fn unknown_feature_bits_refuse_the_slot() {
        let h = HeaderV2 {
            features: super::super::runs::FEATURE_RUNS,
            ..sample()
        };
        assert_eq!(HeaderV2::decode(&h.encode()), Ok(h));
        let later = HeaderV2 {
            features: 0b10,
            ..sample()
        };
        let err = HeaderV2::decode(&later.encode()).unwrap_err().to_string();
        assert!(err.contains("feature bits 0x02"), "{err}");
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        let b = sample().encode();
        for i in 0..HEADER_V2_LEN * 8 {
            let mut c = b;
            c[i / 8] ^= 1 << (i % 8);
            assert!(HeaderV2::decode(&c).is_err(), "bit {i}");
        }
    }

    #[test]
    fn the_newer_valid_slot_wins() {
        let old = sample();
        let new = HeaderV2 {
            sequence: 10,
            ..old
        };
        assert_eq!(pick_header(&new.encode(), &old.encode()), Ok(new));
        let mut torn = new.encode();
        torn[20] ^= 1;
        assert_eq!(pick_header(&torn, &old.encode()), Ok(old));
        assert!(pick_header(&torn, &[0u8; 4]).is_err());
    }
}
