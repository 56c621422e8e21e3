//! The v2 undo log (`meta.zr.undo`) a delete writes before it touches the
//! table: the old record count and the old bytes of every entry it will
//! overwrite. A delete changes nothing else (frontiers stay), so rolling
//! back is writing those entries back and committing the old count.
//!
//! ```text
//! 0          8           10  12  16        24        32
//! | ZRUNDO02 | entry_len | 0 | 0 | length  | count   | count × (slot: u64, entry bytes) | crc32c |
//! ```

/// The eight bytes every v2 undo log starts with.
pub const UNDO_MAGIC_V2: [u8; 8] = *b"ZRUNDO02";

const PREFIX: usize = 32;

/// What a v2 delete is about to overwrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoLogV2 {
    /// Records before the delete.
    pub length: u64,
    /// Bytes of each entry.
    pub entry_len: u16,
    /// `(slot, bytes)`: table slot `slot` held `bytes` before the delete.
    pub entries: Vec<(u64, Vec<u8>)>,
}

impl UndoLogV2 {
    /// The log's bytes, checksum included.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(PREFIX + self.entries.len() * (8 + usize::from(self.entry_len)) + 4);
        out.extend_from_slice(&UNDO_MAGIC_V2);
        out.extend_from_slice(&self.entry_len.to_le_bytes());
        out.extend_from_slice(&[0u8; 6]);
        out.extend_from_slice(&self.length.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for (slot, bytes) in &self.entries {
            out.extend_from_slice(&slot.to_le_bytes());
            out.extend_from_slice(bytes);
        }
        let crc = super::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses a complete, self-consistent log whose entries are
    /// `entry_len` bytes; `None` for anything else (a torn write, a flipped
    /// bit, a slot outside the old table, another entry size).
    #[must_use]
    pub fn decode(bytes: &[u8], entry_len: u16) -> Option<UndoLogV2> {
        Self::decode_bounded(bytes, entry_len, None)
    }

    /// [`decode`](Self::decode) for a store with a run table (§9.5), whose
    /// log keeps table *units* (28 bytes each) by unit position: a unit's
    /// position is bounded by `units`, the units `meta.zr` holds, not by
    /// the record count.
    #[must_use]
    pub fn decode_units(bytes: &[u8], units: u64) -> Option<UndoLogV2> {
        Self::decode_bounded(bytes, super::runs::UNIT_LEN as u16, Some(units))
    }

    fn decode_bounded(bytes: &[u8], entry_len: u16, units: Option<u64>) -> Option<UndoLogV2> {
        let (body, crc) = bytes.split_last_chunk::<4>()?;
        if super::crc32c(body) != u32::from_le_bytes(*crc) {
            return None;
        }
        let rest = body.strip_prefix(UNDO_MAGIC_V2.as_slice())?;
        let (len_bytes, rest) = rest.split_first_chunk::<2>()?;
        if u16::from_le_bytes(*len_bytes) != entry_len {
            return None;
        }
        let (pad, rest) = rest.split_first_chunk::<6>()?;
        if pad != &[0u8; 6] {
            return None;
        }
        let (length, rest) = rest.split_first_chunk::<8>()?;
        let (count, pairs) = rest.split_first_chunk::<8>()?;
        let length = u64::from_le_bytes(*length);
        let count = u64::from_le_bytes(*count);
        let pair = 8 + u64::from(entry_len);
        let bound = units.unwrap_or(length);
        if count > bound || pairs.len() as u64 != count.checked_mul(pair)? {
            return None;
        }
        let entries = pairs
            .chunks_exact(pair as usize)
            .map(|p| {
                let (slot, entry) = p.split_first_chunk::<8>()?;
                let slot = u64::from_le_bytes(*slot);
                (slot < bound).then(|| (slot, entry.to_vec()))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(UndoLogV2 {
            length,
            entry_len,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let log = UndoLogV2 {
            length: 9,
            entry_len: 3,
            entries: vec![(2, vec![1, 2, 3]), (8, vec![4, 5, 6])],
        };
        let b = log.encode();
        assert_eq!(UndoLogV2::decode(&b, 3), Some(log.clone()));
        assert_eq!(UndoLogV2::decode(&b, 4), None);
        for cut in 0..b.len() {
            assert_eq!(UndoLogV2::decode(&b[..cut], 3), None);
        }
        let mut bad = log;
        bad.entries[1].0 = 9;
        assert_eq!(UndoLogV2::decode(&bad.encode(), 3), None);
        // A run table's log is bounded by units, not records.
        let units = UndoLogV2 {
            length: 1,
            entry_len: 28,
            entries: vec![(0, vec![7; 28]), (5, vec![8; 28])],
        };
        let b = units.encode();
        assert_eq!(UndoLogV2::decode(&b, 28), None);
        assert_eq!(UndoLogV2::decode_units(&b, 6), Some(units));
        assert_eq!(UndoLogV2::decode_units(&b, 5), None);
    }
}
