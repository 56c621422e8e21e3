//! The undo log that makes `delete` all-or-nothing.
//!
//! Format v1 has no journal, and a delete rewrites scattered table entries
//! before the header. So before touching the table, a delete writes
//! `meta.zr.undo`: the old header and every entry it will overwrite, with a
//! checksum, and makes it durable. Once the new header is written the log is
//! removed. A store opened for writing with a complete log present rolls the
//! table back to the old header and entries (the delete did not happen); a
//! torn log (the crash hit while writing it) is simply removed, since nothing
//! was changed before it was complete.
//!
//! ```text
//! "ZRUNDO01" | old header (16) | count: u32 | count × (slot: u32, entry: 16) | fnv1a-64 of all before
//! ```

use loaderx_format::{ENTRY_LEN, HEADER_LEN, Header, RecordLoc};

const MAGIC: &[u8; 8] = b"ZRUNDO01";

/// What a delete is about to overwrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UndoLog {
    pub(crate) header: Header,
    pub(crate) entries: Vec<(u32, RecordLoc)>,
}

impl UndoLog {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + HEADER_LEN + 4 + self.entries.len() * 20 + 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.header.encode());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (slot, loc) in &self.entries {
            out.extend_from_slice(&slot.to_le_bytes());
            out.extend_from_slice(&loc.encode());
        }
        let sum = fnv1a(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// The log in `bytes`, or `None` if it is torn or not a log.
    pub(crate) fn decode(bytes: &[u8]) -> Option<UndoLog> {
        let body_len = bytes.len().checked_sub(8)?;
        let (body, sum) = bytes.split_at(body_len);
        if fnv1a(body) != u64::from_le_bytes(sum.try_into().ok()?) {
            return None;
        }
        let rest = body.strip_prefix(MAGIC.as_slice())?;
        let header = Header::decode(rest.get(..HEADER_LEN)?).ok()?;
        let rest = &rest[HEADER_LEN..];
        let count = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let rest = &rest[4..];
        if rest.len() != count.checked_mul(4 + ENTRY_LEN)? {
            return None;
        }
        let entries = rest
            .chunks_exact(4 + ENTRY_LEN)
            .map(|c| {
                let slot = u32::from_le_bytes(c[..4].try_into().expect("4 bytes"));
                let loc = RecordLoc::decode(c[4..].try_into().expect("16 bytes"));
                (slot, loc)
            })
            .collect();
        Some(UndoLog { header, entries })
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loaderx_format::CodecTag;

    #[test]
    fn round_trips_and_refuses_torn_logs() {
        let log = UndoLog {
            header: Header {
                tail_chunk: 1,
                tail_offset: 99,
                length: 7,
            },
            entries: vec![(
                3,
                RecordLoc {
                    offset: 1,
                    phys_length: 2,
                    logic_length: 3,
                    chunk_id: 0,
                    codec: CodecTag::FLATE,
                },
            )],
        };
        let bytes = log.encode();
        assert_eq!(UndoLog::decode(&bytes), Some(log));
        for cut in 0..bytes.len() {
            assert_eq!(UndoLog::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert_eq!(UndoLog::decode(&flipped), None);
    }
}
