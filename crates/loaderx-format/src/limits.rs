//! Constants of format version 1. `docs/FORMAT.md` explains where each comes from.

/// The four bytes every `meta.zr` starts with.
pub const MAGIC: [u8; 4] = *b"ZREC";
/// The only format version this crate reads and writes.
pub const VERSION: u16 = 1;
/// Bytes of the header at the start of `meta.zr`.
pub const HEADER_LEN: usize = 16;
/// Bytes of one record-table entry.
pub const ENTRY_LEN: usize = 16;
/// Most chunk files a store may span.
pub const MAX_CHUNKS: u32 = 1 << 12;
/// Most write lanes a store may have (format v2; v1 has one).
pub const MAX_LANES: usize = 16;
/// Bytes a chunk file may hold.
pub const CHUNK_CAPACITY: u64 = 1 << 32;
/// Largest logical (and physical) size of one record.
pub const MAX_RECORD_LEN: u32 = 1 << 20;
/// Most records one store may hold.
pub const MAX_RECORDS: u32 = 1 << 24;
/// Exact size of `meta.zr`: the header and a table with a slot per possible record.
pub const META_LEN: u64 = entry_offset(MAX_RECORDS);
/// Name of the header-and-table file inside a store directory.
pub const META_FILE: &str = "meta.zr";
/// Name of the file the store's writer lock is taken on (its content, the
/// writer's process id, is informative only; loaderx 0.5.x ignores it).
pub const LOCK_FILE: &str = "meta.zr.lock";

/// Byte offset of table entry `index` inside `meta.zr`: the one place table
/// offsets are computed (`entry_offset(length)` is where the table ends).
#[must_use]
pub const fn entry_offset(index: u32) -> u64 {
    HEADER_LEN as u64 + index as u64 * ENTRY_LEN as u64
}

/// File name of chunk `id` (`"<id>.zr"`, decimal).
#[must_use]
pub fn chunk_file_name(id: u32) -> String {
    format!("{id}.zr")
}

// Chunks never run out before record slots do, so the table can be sized statically.
const _: () =
    assert!(MAX_RECORDS as u64 * MAX_RECORD_LEN as u64 <= MAX_CHUNKS as u64 * CHUNK_CAPACITY);
const _: () = assert!(MAX_CHUNKS <= u16::MAX as u32 + 1);
