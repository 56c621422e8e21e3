//! The run table of format v2 (`docs/FORMAT.md`, §9.5): a table of 28-byte
//! *units* that describes a run of raw records of one size once, instead
//! of one entry per record.
//!
//! A store whose header carries [`FEATURE_RUNS`] keeps its table as a
//! sequence of *pieces*, each covering the next records in index order:
//!
//! ```text
//! group: | count: u64 | 0 × 8 | 125 | 0 × 7 | unit_crc |   then `count` record entries (§9.4)
//! run:   | chunk | offset | stride | count | 126 | 0 × 7 | unit_crc |   then the block CRC units
//! crcs:  | four u32 block CRCs | 127 | 0 × 3 | a fifth block CRC | unit_crc |
//! ```
//!
//! Every unit ends with the CRC32C of its position in the table (a `u64`)
//! followed by its first 24 bytes, exactly as an entry's `entry_crc` is
//! salted with its index; the entries of a group are entries of §9.4 whose
//! salt is their unit position. Every unit, whatever its kind, has zero
//! bytes 17..20 and its unit CRC where an entry has them, so an undo log
//! can keep and check units as it keeps entries.

use crate::{EntryFault, RecordLoc};

/// Bytes of one unit: the entry size of bytes and dense stores.
pub const UNIT_LEN: usize = super::ENTRY_BASE_LEN;

/// Header `features` bit: the table is a run table.
pub const FEATURE_RUNS: u8 = 1;

/// Every `features` bit this version knows.
pub const KNOWN_FEATURES: u8 = FEATURE_RUNS;

/// The tag (byte 16) of a group unit.
pub const TAG_GROUP: u8 = 125;

/// The tag (byte 16) of a run unit.
pub const TAG_RUN: u8 = 126;

/// Bytes a block CRC covers at most: a block is the largest whole number
/// of records (at least one) that fits.
pub const BLOCK_BYTES: u32 = 4096;

/// The tag (byte 16) of a unit of block CRCs.
pub const TAG_CRCS: u8 = 127;

/// Block CRCs one unit holds.
pub const CRCS_PER_UNIT: usize = 5;

/// Where a CRC unit keeps its block CRCs.
const CRC_SLOTS: [usize; CRCS_PER_UNIT] = [0, 4, 8, 12, 20];

const TAG_AT: usize = 16;
const CRC_AT: usize = UNIT_LEN - 4;

/// A run: `count` raw records of `stride` bytes each, record `k` at
/// `offset + k · stride` of `chunk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Chunk file holding the records.
    pub chunk: u32,
    /// Byte offset of the first record in the chunk.
    pub offset: u32,
    /// Bytes of each record (stored and logical: runs are raw).
    pub stride: u32,
    /// Records in the run, at least one.
    pub count: u32,
}

impl Run {
    /// Records per block CRC: `max(1, BLOCK_BYTES / stride)`.
    #[must_use]
    pub fn block_records(&self) -> u32 {
        (BLOCK_BYTES / self.stride.max(1)).max(1)
    }

    /// Block CRCs the run has.
    #[must_use]
    pub fn blocks(&self) -> u64 {
        u64::from(self.count).div_ceil(u64::from(self.block_records()))
    }

    /// Units of the whole piece: the run unit and its CRC units.
    #[must_use]
    pub fn units(&self) -> u64 {
        1 + self.blocks().div_ceil(CRCS_PER_UNIT as u64)
    }

    /// End of the run's bytes in its chunk (may pass `2^32` in a damaged
    /// run; the validator refuses that).
    #[must_use]
    pub fn end(&self) -> u64 {
        u64::from(self.offset) + u64::from(self.stride) * u64::from(self.count)
    }

    /// Where record `k` of the run lies, as an entry would say it, with
    /// `crc` as its checksum (runs keep none per record). For `k < count`
    /// of a run [`decode_piece`] accepted, the offset fits a `u32` (the run
    /// ends by `2^32`); past that it saturates, never wraps.
    #[must_use]
    pub fn loc(&self, k: u32, crc: u32) -> RecordLoc {
        let offset = u64::from(self.offset) + u64::from(k) * u64::from(self.stride);
        RecordLoc {
            offset: u32::try_from(offset).unwrap_or(u32::MAX),
            phys_length: self.stride,
            logic_length: self.stride,
            chunk_id: self.chunk,
            codec: crate::CodecTag::RAW,
            crc,
        }
    }

    /// Records `first .. end` (of the run) that block `b` covers.
    #[must_use]
    pub fn block_range(&self, b: u64) -> (u32, u32) {
        let per = u64::from(self.block_records());
        let first = b * per;
        let end = (first + per).min(u64::from(self.count));
        (first as u32, end as u32)
    }
}

/// The head of a piece, as its first unit says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// The next `count` units are record entries, one per record.
    Group {
        /// Entries in the group, at least one.
        count: u64,
    },
    /// A run, followed by [`Run::units`]` − 1` CRC units.
    Run(Run),
}

impl Piece {
    /// Records the piece covers.
    #[must_use]
    pub fn records(&self) -> u64 {
        match self {
            Piece::Group { count } => *count,
            Piece::Run(run) => u64::from(run.count),
        }
    }

    /// Units the piece takes, its head included (saturating).
    #[must_use]
    pub fn units(&self) -> u64 {
        match self {
            Piece::Group { count } => count.saturating_add(1),
            Piece::Run(run) => run.units(),
        }
    }
}

fn unit_crc(unit: u64, body: &[u8]) -> u32 {
    super::crc32c_append(super::crc32c(&unit.to_le_bytes()), body)
}

fn seal(unit: u64, out: &mut [u8; UNIT_LEN]) {
    let crc = unit_crc(unit, &out[..CRC_AT]);
    out[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
}

fn check(unit: u64, bytes: &[u8]) -> Result<&[u8; UNIT_LEN], EntryFault> {
    let b = bytes
        .first_chunk::<UNIT_LEN>()
        .ok_or(EntryFault::EntryChecksum)?;
    let stored = u32::from_le_bytes([b[CRC_AT], b[CRC_AT + 1], b[CRC_AT + 2], b[CRC_AT + 3]]);
    if stored != unit_crc(unit, &b[..CRC_AT]) {
        return Err(EntryFault::EntryChecksum);
    }
    Ok(b)
}

fn u32_at(b: &[u8; UNIT_LEN], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Encodes the head of a group of `count` entries as unit `unit`.
#[must_use]
pub fn encode_group(unit: u64, count: u64) -> [u8; UNIT_LEN] {
    let mut b = [0u8; UNIT_LEN];
    b[0..8].copy_from_slice(&count.to_le_bytes());
    b[TAG_AT] = TAG_GROUP;
    seal(unit, &mut b);
    b
}

/// Encodes `run` as unit `unit`.
#[must_use]
pub fn encode_run(unit: u64, run: &Run) -> [u8; UNIT_LEN] {
    let mut b = [0u8; UNIT_LEN];
    b[0..4].copy_from_slice(&run.chunk.to_le_bytes());
    b[4..8].copy_from_slice(&run.offset.to_le_bytes());
    b[8..12].copy_from_slice(&run.stride.to_le_bytes());
    b[12..16].copy_from_slice(&run.count.to_le_bytes());
    b[TAG_AT] = TAG_RUN;
    seal(unit, &mut b);
    b
}

/// Encodes up to [`CRCS_PER_UNIT`] block CRCs as unit `unit` (the slots
/// past `crcs.len()` are zero).
#[must_use]
pub fn encode_crcs(unit: u64, crcs: &[u32]) -> [u8; UNIT_LEN] {
    let mut b = [0u8; UNIT_LEN];
    for (&at, c) in CRC_SLOTS.iter().zip(crcs) {
        b[at..at + 4].copy_from_slice(&c.to_le_bytes());
    }
    b[TAG_AT] = TAG_CRCS;
    seal(unit, &mut b);
    b
}

/// Appends the units of `run` (its head and its CRC units, the CRCs of
/// `block_crcs`, one per block) as units `unit ..` to `out`.
///
/// # Panics
/// If `block_crcs` does not hold exactly [`Run::blocks`] CRCs.
pub fn encode_run_piece(unit: u64, run: &Run, block_crcs: &[u32], out: &mut Vec<u8>) {
    assert_eq!(block_crcs.len() as u64, run.blocks(), "one CRC per block");
    out.extend_from_slice(&encode_run(unit, run));
    for (k, crcs) in block_crcs.chunks(CRCS_PER_UNIT).enumerate() {
        out.extend_from_slice(&encode_crcs(unit + 1 + k as u64, crcs));
    }
}

/// Decodes the head of the piece at unit `unit`: checks its unit CRC, its
/// tag and zero bytes, and the counts and sizes it gives (a group of at
/// least one entry; a run of at least one record of `1 ..= 2^31 − 1`
/// bytes). Where the run lies is [`run_fault`]'s to judge.
///
/// # Errors
/// [`EntryFault::EntryChecksum`], [`EntryFault::Reserved`] (a zero byte is
/// not) or [`EntryFault::BadRun`].
pub fn decode_piece(unit: u64, bytes: &[u8]) -> Result<Piece, EntryFault> {
    let b = check(unit, bytes)?;
    match b[TAG_AT] {
        TAG_GROUP => {
            if b[8..16].iter().chain(&b[17..CRC_AT]).any(|&x| x != 0) {
                return Err(EntryFault::Reserved);
            }
            let mut c = [0u8; 8];
            c.copy_from_slice(&b[0..8]);
            let count = u64::from_le_bytes(c);
            if count == 0 {
                return Err(EntryFault::BadRun("a group of no entries"));
            }
            Ok(Piece::Group { count })
        }
        TAG_RUN => {
            if b[17..CRC_AT].iter().any(|&x| x != 0) {
                return Err(EntryFault::Reserved);
            }
            let run = Run {
                chunk: u32_at(b, 0),
                offset: u32_at(b, 4),
                stride: u32_at(b, 8),
                count: u32_at(b, 12),
            };
            if run.count == 0 {
                return Err(EntryFault::BadRun("a run of no records"));
            }
            if run.stride == 0 || run.stride > super::MAX_RECORD_LEN_V2 {
                return Err(EntryFault::BadRun("stride outside 1 ..= 2^31 - 1"));
            }
            if run.end() > crate::CHUNK_CAPACITY {
                return Err(EntryFault::BadRun("the run passes the end of a chunk"));
            }
            Ok(Piece::Run(run))
        }
        _ => Err(EntryFault::BadRun(
            "a piece starts with neither a group nor a run",
        )),
    }
}

/// Decodes CRC unit `unit` (checking its unit CRC, tag and zero bytes):
/// its five block CRCs.
///
/// # Errors
/// [`EntryFault::EntryChecksum`], [`EntryFault::Reserved`] or
/// [`EntryFault::BadRun`] (not a CRC unit).
pub fn decode_crcs(unit: u64, bytes: &[u8]) -> Result<[u32; CRCS_PER_UNIT], EntryFault> {
    let b = check(unit, bytes)?;
    if b[TAG_AT] != TAG_CRCS {
        return Err(EntryFault::BadRun("a run's block CRC unit has another tag"));
    }
    if b[17..20].iter().any(|&x| x != 0) {
        return Err(EntryFault::Reserved);
    }
    Ok(CRC_SLOTS.map(|at| u32_at(b, at)))
}

/// Whether `run` breaks a rule of §12 for the records it holds, judged as
/// [`entry_fault`](crate::entry_fault) judges an entry (`Rules::V2`): the
/// whole run must lie in an existing chunk, below `2^32`, below its lane's
/// frontier in the lane's tail chunk, and inside the chunk file's length.
#[must_use]
pub fn run_fault(run: &Run, head: &crate::Head, file_len: u64) -> Option<EntryFault> {
    let end = run.end();
    let span = RecordLoc {
        offset: run.offset,
        // The span's length need not fit a record: the checks below use
        // `end`, and this `loc` only names the chunk.
        phys_length: 0,
        logic_length: 0,
        chunk_id: run.chunk,
        codec: crate::CodecTag::RAW,
        crc: 0,
    };
    if !head.has_chunk(span.chunk_id) {
        return crate::entry_fault(
            &RecordLoc {
                phys_length: run.stride,
                logic_length: run.stride,
                ..span
            },
            head,
            file_len,
            crate::Rules::V2,
        );
    }
    if end > crate::CHUNK_CAPACITY {
        return Some(EntryFault::BadRun("the run passes the end of a chunk"));
    }
    let tail = head.tails[head.lane_of(run.chunk)];
    if run.chunk == tail.chunk && end > u64::from(tail.offset) {
        return Some(EntryFault::BadRun("the run passes its lane's frontier"));
    }
    if end > file_len {
        return Some(EntryFault::BadRun(
            "the run passes the end of its chunk file",
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_round_trip_and_are_salted_with_their_unit() {
        let run = Run {
            chunk: 3,
            offset: 64,
            stride: 8,
            count: 1_000,
        };
        assert_eq!(run.block_records(), 512);
        assert_eq!(run.blocks(), 2);
        assert_eq!(run.units(), 2);
        let mut out = Vec::new();
        encode_run_piece(7, &run, &[11, 22], &mut out);
        // Every unit passes an entry's own checks at its position.
        for (k, u) in out.chunks(UNIT_LEN).enumerate() {
            assert!(crate::v2::decode_entry(7 + k as u64, u).is_ok());
        }
        assert_eq!(out.len(), 2 * UNIT_LEN);
        assert_eq!(decode_piece(7, &out[..UNIT_LEN]), Ok(Piece::Run(run)));
        assert_eq!(
            decode_piece(8, &out[..UNIT_LEN]),
            Err(EntryFault::EntryChecksum)
        );
        assert_eq!(decode_crcs(8, &out[UNIT_LEN..]).unwrap()[..3], [11, 22, 0]);
        let g = encode_group(0, 5);
        assert_eq!(decode_piece(0, &g), Ok(Piece::Group { count: 5 }));
        assert_eq!(Piece::Group { count: 5 }.units(), 6);
        for bit in 0..UNIT_LEN * 8 {
            let mut c = g;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_piece(0, &c).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn empty_or_oversized_pieces_are_refused() {
        let run = |stride, count| Run {
            chunk: 0,
            offset: 0,
            stride,
            count,
        };
        assert!(decode_piece(0, &encode_run(0, &run(8, 0))).is_err());
        assert!(decode_piece(0, &encode_run(0, &run(0, 3))).is_err());
        assert!(decode_piece(0, &encode_run(0, &run(1 << 31, 3))).is_err());
        assert!(decode_piece(0, &encode_group(0, 0)).is_err());
        // Past 2^32: refused, so `loc` of every record fits a u32.
        assert!(decode_piece(0, &encode_run(0, &run(1 << 20, (1 << 12) + 1))).is_err());
        assert!(decode_piece(0, &encode_run(0, &run(1 << 20, 1 << 12))).is_ok());
        // A record entry is not a piece head.
        assert!(decode_piece(0, &encode_crcs(0, &[1, 2])).is_err());
        assert_eq!(run(5000, 3).block_records(), 1);
        assert_eq!(run(5000, 3).units(), 2);
        assert_eq!(run(8, 7 * 512 * 5 + 1).units(), 1 + 8);
    }

    #[test]
    fn a_run_must_lie_below_the_frontier_and_in_its_file() {
        let mut head = crate::Head::empty(1);
        head.tails[0].offset = 800;
        let run = Run {
            chunk: 0,
            offset: 0,
            stride: 8,
            count: 100,
        };
        assert_eq!(run_fault(&run, &head, 800), None);
        assert!(run_fault(&run, &head, 799).is_some());
        head.tails[0].offset = 799;
        assert!(run_fault(&run, &head, 800).is_some());
        assert!(run_fault(&Run { chunk: 1, ..run }, &head, 800).is_some());
    }
}
