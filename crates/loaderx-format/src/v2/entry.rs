//! A v2 table entry: where a record's bytes are, how they are encoded, their
//! checksum, the record's dimensions (ragged stores only) and a checksum of
//! the entry itself, salted with its index.
//!
//! ```text
//! 0        4        8             12             16      17  18  20         24              24 + 4·ndim
//! | chunk  | offset | phys_length | logic_length | codec | 0 | 0 | data_crc | ndim × u32 dim | entry_crc |
//! ```

use crate::{CodecTag, EntryFault, RecordLoc};

/// Bytes of an entry without dimensions (bytes and dense stores).
pub const ENTRY_BASE_LEN: usize = 28;

const DIMS_AT: usize = 24;

/// Bytes of an entry carrying `ndim` dimensions.
#[must_use]
pub const fn entry_len(ndim: usize) -> usize {
    ENTRY_BASE_LEN + 4 * ndim
}

/// Encodes `loc` and `dims` as entry `index` into `out` (exactly
/// [`entry_len`]`(dims.len())` bytes).
///
/// # Panics
/// If `out` has another length.
pub fn encode_entry(index: u64, loc: &RecordLoc, dims: &[u32], out: &mut [u8]) {
    assert_eq!(out.len(), entry_len(dims.len()), "entry buffer length");
    out[0..4].copy_from_slice(&loc.chunk_id.to_le_bytes());
    out[4..8].copy_from_slice(&loc.offset.to_le_bytes());
    out[8..12].copy_from_slice(&loc.phys_length.to_le_bytes());
    out[12..16].copy_from_slice(&loc.logic_length.to_le_bytes());
    out[16] = loc.codec.0;
    out[17..20].fill(0);
    out[20..24].copy_from_slice(&loc.crc.to_le_bytes());
    for (k, d) in dims.iter().enumerate() {
        out[DIMS_AT + 4 * k..DIMS_AT + 4 * k + 4].copy_from_slice(&d.to_le_bytes());
    }
    let end = out.len() - 4;
    let crc = entry_crc(index, &out[..end]);
    out[end..].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes entry `index` from `bytes` (an entry of `entry_len` bytes, whose
/// dimensions are left in place: see [`dims_of`]). Checks the entry's own
/// checksum and reserved bytes; the rest is the validator's job.
///
/// # Errors
/// [`EntryFault::EntryChecksum`] or [`EntryFault::Reserved`].
pub fn decode_entry(index: u64, bytes: &[u8]) -> Result<RecordLoc, EntryFault> {
    if bytes.len() < ENTRY_BASE_LEN {
        return Err(EntryFault::EntryChecksum);
    }
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let end = bytes.len() - 4;
    if u32_at(end) != entry_crc(index, &bytes[..end]) {
        return Err(EntryFault::EntryChecksum);
    }
    if bytes[17..20].iter().any(|&b| b != 0) {
        return Err(EntryFault::Reserved);
    }
    Ok(RecordLoc {
        chunk_id: u32_at(0),
        offset: u32_at(4),
        phys_length: u32_at(8),
        logic_length: u32_at(12),
        codec: CodecTag(bytes[16]),
        crc: u32_at(20),
    })
}

/// The dimensions an entry of `bytes` carries, into `out` (one per slot).
pub fn dims_of(bytes: &[u8], out: &mut [u32]) {
    for (k, d) in out.iter_mut().enumerate() {
        let at = DIMS_AT + 4 * k;
        *d = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    }
}

/// CRC32C of the index (u64, little-endian) followed by the entry's bytes
/// before the checksum: one pass over a stack copy, as this runs on every
/// entry a gather reads.
fn entry_crc(index: u64, body: &[u8]) -> u32 {
    let mut buf = [0u8; 8 + entry_len(super::MAX_NDIM)];
    buf[..8].copy_from_slice(&index.to_le_bytes());
    let n = 8 + body.len().min(buf.len() - 8);
    buf[8..n].copy_from_slice(&body[..n - 8]);
    if n - 8 == body.len() {
        super::crc32c(&buf[..n])
    } else {
        super::crc32c_append(super::crc32c(&index.to_le_bytes()), body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> RecordLoc {
        RecordLoc {
            offset: 0x0102_0304,
            phys_length: 10,
            logic_length: 20,
            chunk_id: 70_000,
            codec: CodecTag::ZSTD,
            crc: 0xabcd_ef01,
        }
    }

    #[test]
    fn round_trips_with_dims() {
        let mut buf = [0u8; entry_len(2)];
        encode_entry(5, &loc(), &[3, 7], &mut buf);
        assert_eq!(&buf[0..4], &70_000u32.to_le_bytes());
        assert_eq!(decode_entry(5, &buf), Ok(loc()));
        let mut dims = [0u32; 2];
        dims_of(&buf, &mut dims);
        assert_eq!(dims, [3, 7]);
    }

    #[test]
    fn a_moved_zeroed_or_flipped_entry_is_caught() {
        let mut buf = [0u8; ENTRY_BASE_LEN];
        encode_entry(5, &loc(), &[], &mut buf);
        assert_eq!(decode_entry(6, &buf), Err(EntryFault::EntryChecksum));
        assert_eq!(
            decode_entry(0, &[0u8; ENTRY_BASE_LEN]),
            Err(EntryFault::EntryChecksum)
        );
        for bit in 0..ENTRY_BASE_LEN * 8 {
            let mut c = buf;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_entry(5, &c).is_err(), "bit {bit}");
        }
    }
}
