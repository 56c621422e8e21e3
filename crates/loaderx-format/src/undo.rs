//! The undo log a delete writes before it touches the table (`meta.zr.undo`).
//!
//! Format v1 has no journal, and a delete rewrites scattered table entries
//! before the header, so loaderx 0.6 keeps the old header and every entry a
//! delete will overwrite in a side file (loaderx 0.5.x ignores it).
//! `docs/FORMAT.md` ("Delete") gives the protocol; this module owns the bytes:
//!
//! ```text
//! 0          8               24          28
//! | ZRUNDO01 | old header (16) | count: u32 | count × (slot: u32, old entry: 16) | FNV-1a-64 of all before |
//! ```
//!
//! Every integer is little-endian. [`UndoLog::decode`] refuses anything that
//! is not a complete, self-consistent log — a torn write, a flipped bit, a
//! slot the old header does not cover — so rolling a log back can only ever
//! write inside the table the old header describes.

use crate::{ENTRY_LEN, HEADER_LEN, Header, MAX_RECORDS, RecordLoc};

/// Name of the undo log inside a store directory.
pub const UNDO_FILE: &str = "meta.zr.undo";

/// The eight bytes every undo log starts with.
pub const UNDO_MAGIC: [u8; 8] = *b"ZRUNDO01";

/// Bytes of one `(slot, old entry)` pair.
const PAIR_LEN: usize = 4 + ENTRY_LEN;

/// Bytes before the pairs: magic, old header, count.
const PREFIX_LEN: usize = UNDO_MAGIC.len() + HEADER_LEN + 4;

/// Bytes of the trailing checksum.
const SUM_LEN: usize = 8;

/// Largest possible undo log: one pair per record slot. A file longer than
/// this is not a log.
pub const UNDO_MAX_LEN: u64 = (PREFIX_LEN + SUM_LEN) as u64 + MAX_RECORDS as u64 * PAIR_LEN as u64;

/// What a delete is about to overwrite: the header before it, and the old
/// entry of every table slot it will rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoLog {
    /// The header as it was before the delete.
    pub header: Header,
    /// `(slot, entry)`: table slot `slot` held `entry` before the delete.
    pub entries: Vec<(u32, RecordLoc)>,
}

impl UndoLog {
    /// The log's bytes, checksum included.
    ///
    /// # Panics
    /// If the log holds more than [`MAX_RECORDS`] entries (a delete never
    /// rewrites more slots than a store has).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let count = u32::try_from(self.entries.len())
            .ok()
            .filter(|&n| n <= MAX_RECORDS)
            .expect("an undo log holds at most one entry per record slot");
        let mut out = Vec::with_capacity(PREFIX_LEN + self.entries.len() * PAIR_LEN + SUM_LEN);
        out.extend_from_slice(&UNDO_MAGIC);
        out.extend_from_slice(&self.header.encode());
        out.extend_from_slice(&count.to_le_bytes());
        for (slot, loc) in &self.entries {
            out.extend_from_slice(&slot.to_le_bytes());
            out.extend_from_slice(&loc.encode());
        }
        let sum = fnv1a(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// The log in `bytes`, or `None` when they are not a complete, valid log
    /// (torn, damaged, or describing slots outside the old header's table).
    ///
    /// Never panics, and allocates at most in proportion to `bytes.len()`.
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<UndoLog> {
        if bytes.len() as u64 > UNDO_MAX_LEN {
            return None;
        }
        let (body, sum) = bytes.split_last_chunk::<SUM_LEN>()?;
        if fnv1a(body) != u64::from_le_bytes(*sum) {
            return None;
        }
        let rest = body.strip_prefix(UNDO_MAGIC.as_slice())?;
        let (header, rest) = rest.split_first_chunk::<HEADER_LEN>()?;
        let header = Header::decode(header).ok()?;
        header.check_limits().ok()?;
        let (count, pairs) = rest.split_first_chunk::<4>()?;
        let count = u32::from_le_bytes(*count);
        if count > header.length || pairs.len() as u64 != u64::from(count) * PAIR_LEN as u64 {
            return None;
        }
        let (pairs, _) = pairs.as_chunks::<PAIR_LEN>();
        let entries = pairs
            .iter()
            .map(|pair| {
                let (slot, entry) = pair.split_first_chunk::<4>()?;
                let slot = u32::from_le_bytes(*slot);
                // Rolling back may only write inside the old table.
                if slot >= header.length {
                    return None;
                }
                Some((slot, RecordLoc::decode(entry.first_chunk::<ENTRY_LEN>()?)))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(UndoLog { header, entries })
    }
}

/// FNV-1a, 64-bit: catches a torn or damaged log, which is all it is for.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CodecTag;
    use proptest::prelude::*;

    fn log(length: u32, slots: &[u32]) -> UndoLog {
        UndoLog {
            header: Header {
                tail_chunk: 1,
                tail_offset: 99,
                length,
            },
            entries: slots
                .iter()
                .map(|&slot| {
                    (
                        slot,
                        RecordLoc {
                            offset: 1,
                            phys_length: 2,
                            logic_length: 3,
                            chunk_id: 0,
                            codec: CodecTag::FLATE,
                            crc: 0,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn round_trips_and_refuses_torn_logs() {
        let log = log(7, &[3]);
        let bytes = log.encode();
        assert_eq!(&bytes[..8], b"ZRUNDO01");
        assert_eq!(&bytes[24..28], &1u32.to_le_bytes());
        assert_eq!(&bytes[28..32], &3u32.to_le_bytes());
        assert_eq!(UndoLog::decode(&bytes), Some(log));
        for cut in 0..bytes.len() {
            assert_eq!(UndoLog::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert_eq!(UndoLog::decode(&flipped), None);
    }

    #[test]
    fn refuses_slots_outside_the_old_table() {
        // Checksummed, but naming slot 7 of a 7-record table.
        assert_eq!(UndoLog::decode(&log(7, &[2, 7]).encode()), None);
        // More pairs than the old header has records.
        assert_eq!(UndoLog::decode(&log(1, &[0, 0]).encode()), None);
        // An old header over the record limit.
        assert_eq!(UndoLog::decode(&log(MAX_RECORDS + 1, &[]).encode()), None);
        assert!(UndoLog::decode(&log(MAX_RECORDS, &[MAX_RECORDS - 1]).encode()).is_some());
    }

    proptest! {
        #[test]
        fn decode_never_panics_and_round_trips_what_it_accepts(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            if let Some(log) = UndoLog::decode(&bytes) {
                prop_assert_eq!(log.encode(), bytes);
            }
        }

        #[test]
        fn every_valid_log_round_trips(
            length in 1u32..1000,
            slots in proptest::collection::vec(any::<u32>(), 0..20),
        ) {
            // A delete rewrites at most one slot per record, each inside the old table.
            let slots: Vec<u32> = slots.into_iter().take(length as usize).map(|s| s % length).collect();
            let log = log(length, &slots);
            prop_assert_eq!(UndoLog::decode(&log.encode()), Some(log));
        }
    }
}
