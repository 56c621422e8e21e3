//! Format version 2: no record-count ceiling, records up to 2 GiB − 1,
//! write lanes, checksums on every record, entry, header and schema, and a
//! schema block that types the records (`docs/FORMAT.md`, part II).
//!
//! `meta.zr` in version 2:
//!
//! ```text
//! 0      4096     8192                 8192 + round_up(schema_len, 4096)
//! | slot 0 | slot 1 | schema block … pad | entry 0 | entry 1 | …   (grows on demand)
//! ```
//!
//! Two header slots alternate: a commit writes the slot its sequence number
//! picks and a reader takes the valid slot with the larger sequence, so a
//! header torn by power loss falls back to the previous commit.

mod checksum;
mod entry;
mod header;
pub mod runs;
mod schema;
mod undo;

pub use checksum::{crc32c, crc32c_append};
pub use entry::{ENTRY_BASE_LEN, decode_entry, dims_of, encode_entry, entry_len};
pub use header::{HEADER_V2_LEN, HeaderV2, SLOT_LEN, pick_header};
pub use schema::{
    CodecRef, Dtype, Kind, MAX_CODEC_NAME, MAX_DICT_LEN, MAX_DTYPE_NAME, MAX_NDIM, MAX_SCHEMA_LEN,
    Schema, SchemaError,
};
pub use undo::{UNDO_MAGIC_V2, UndoLogV2};

/// The version number in a v2 header.
pub const VERSION_V2: u16 = 2;

/// Where the schema block starts in `meta.zr`.
pub const SCHEMA_OFFSET: u64 = 2 * SLOT_LEN;

/// Largest logical (and stored) size of one record: 2 GiB − 1.
pub const MAX_RECORD_LEN_V2: u32 = i32::MAX as u32;

/// Where the record table starts, for a schema block of `schema_len` bytes.
#[must_use]
pub const fn table_offset(schema_len: u32) -> u64 {
    SCHEMA_OFFSET + (schema_len as u64).div_ceil(SLOT_LEN) * SLOT_LEN
}
