use std::fmt;

use crate::CodecTag;

/// Why a `meta.zr` image or one of its entries was refused.
///
/// Entry errors name the entry; the caller (which knows the path) adds the file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// The image is shorter than what it must hold.
    Truncated {
        /// Bytes the image must hold.
        need: u64,
        /// Bytes it holds.
        have: u64,
    },
    /// The first four bytes are not `ZREC`.
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A version this crate does not read.
    Version {
        /// The version this crate reads.
        expected: u16,
        /// The version the header names.
        found: u16,
    },
    /// The header's `length` is over the record limit.
    TooManyRecords {
        /// The header's `length`.
        length: u32,
        /// [`MAX_RECORDS`](crate::MAX_RECORDS).
        limit: u32,
    },
    /// The header's `tail_chunk` is over the chunk limit.
    TooManyChunks {
        /// The header's `tail_chunk`.
        tail_chunk: u16,
        /// [`MAX_CHUNKS`](crate::MAX_CHUNKS).
        limit: u32,
    },
    /// Fewer chunk files than `tail_chunk + 1` were supplied.
    MissingChunk {
        /// The first chunk without a length.
        chunk: u32,
    },
    /// A v2 header slot fails its checks (checksum, reserved bytes, lanes).
    BadHeader(String),
    /// The v2 schema block is damaged or breaks a rule.
    BadSchema(String),
    /// The v2 schema block's zstd dictionary is damaged.
    BadDictionary(String),
    /// A table entry below `length` breaks a rule of the format.
    BadEntry {
        /// Index of the entry in the table.
        entry: u64,
        /// The rule it breaks.
        reason: EntryFault,
    },
}

/// Which rule a table entry breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryFault {
    /// The codec byte is not one format v1 defines.
    UnknownCodec(CodecTag),
    /// `logic_length` is zero or over the record limit.
    LogicLength {
        /// `logic_length`.
        len: u32,
        /// The format's largest record.
        limit: u32,
    },
    /// `phys_length` is over the record limit.
    PhysLength {
        /// `phys_length`.
        len: u32,
        /// The format's largest record.
        limit: u32,
    },
    /// A v2 entry's own checksum does not match (damaged, torn, or moved).
    EntryChecksum,
    /// A v2 entry's reserved bytes are not zero.
    Reserved,
    /// A v2 ragged entry's dimensions do not multiply out to its length.
    Dims {
        /// Bytes the dimensions and dtype give.
        expected: u64,
        /// `logic_length`.
        found: u32,
    },
    /// A raw entry whose stored and logical sizes differ.
    RawSizeMismatch {
        /// `phys_length`.
        phys: u32,
        /// `logic_length`.
        logic: u32,
    },
    /// `chunk_id` is past the header's `tail_chunk`.
    ChunkPastTail {
        /// The entry's `chunk_id`.
        chunk: u32,
        /// The tail chunk of the entry's lane.
        tail_chunk: u32,
    },
    /// The bytes end past the chunk's capacity.
    PastCapacity {
        /// `offset + phys_length`.
        end: u64,
    },
    /// The bytes end past the write frontier of the tail chunk.
    PastFrontier {
        /// `offset + phys_length`.
        end: u64,
        /// The header's `tail_offset`.
        tail_offset: u32,
    },
    /// A run-table piece (format v2, §9.5) breaks a rule: what it breaks.
    BadRun(&'static str),
    /// The bytes end past the chunk file's real end.
    PastFileEnd {
        /// The entry's `chunk_id`.
        chunk: u32,
        /// `offset + phys_length`.
        end: u64,
        /// The chunk file's length.
        file_len: u64,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Truncated { need, have } => {
                write!(f, "meta.zr is truncated: need {need} bytes, have {have}")
            }
            FormatError::BadMagic { found } => {
                write!(
                    f,
                    "not a loaderx store: magic is {found:?}, expected \"ZREC\""
                )
            }
            FormatError::Version { expected, found } => write!(
                f,
                "unsupported format version {found} (this build reads version {expected})"
            ),
            FormatError::TooManyRecords { length, limit } => {
                write!(
                    f,
                    "header length {length} exceeds the limit of {limit} records"
                )
            }
            FormatError::TooManyChunks { tail_chunk, limit } => {
                write!(
                    f,
                    "header tail_chunk {tail_chunk} exceeds the limit of {limit} chunks"
                )
            }
            FormatError::MissingChunk { chunk } => write!(f, "chunk file {chunk}.zr is missing"),
            FormatError::BadEntry { entry, reason } => write!(f, "table entry {entry}: {reason}"),
            FormatError::BadHeader(why) => write!(f, "damaged header: {why}"),
            FormatError::BadSchema(why) => write!(f, "damaged or invalid schema block: {why}"),
            FormatError::BadDictionary(why) => write!(f, "damaged zstd dictionary: {why}"),
        }
    }
}

impl fmt::Display for EntryFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryFault::UnknownCodec(tag) => write!(f, "unknown codec tag {}", tag.0),
            EntryFault::LogicLength { len, limit } => {
                write!(f, "logical length {len} is outside 1..={limit}")
            }
            EntryFault::PhysLength { len, limit } => {
                write!(f, "stored length {len} exceeds {limit}")
            }
            EntryFault::EntryChecksum => f.write_str(
                "entry checksum mismatch (the table entry is damaged or was never written)",
            ),
            EntryFault::Reserved => f.write_str("reserved entry bytes are not zero"),
            EntryFault::BadRun(why) => write!(f, "run table: {why}"),
            EntryFault::Dims { expected, found } => write!(
                f,
                "dimensions give {expected} bytes but the record is {found} bytes"
            ),
            EntryFault::RawSizeMismatch { phys, logic } => write!(
                f,
                "raw record stores {phys} bytes but claims {logic} logical bytes"
            ),
            EntryFault::ChunkPastTail { chunk, tail_chunk } => {
                write!(
                    f,
                    "chunk {chunk} is past the tail chunk {tail_chunk} (of its lane)"
                )
            }
            EntryFault::PastCapacity { end } => {
                write!(f, "bytes end at {end}, past the 4 GiB chunk capacity")
            }
            EntryFault::PastFrontier { end, tail_offset } => write!(
                f,
                "bytes end at {end}, past the tail chunk's frontier {tail_offset}"
            ),
            EntryFault::PastFileEnd {
                chunk,
                end,
                file_len,
            } => write!(
                f,
                "bytes end at {end}, past the end of chunk file {chunk}.zr ({file_len} bytes)"
            ),
        }
    }
}

impl std::error::Error for FormatError {}
