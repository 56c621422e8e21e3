//! The on-disk layout of a loaderx store: format version 1 (byte-compatible
//! with loaderx 0.5.x) at the top level, format version 2 in [`v2`].
//!
//! A store is a directory holding `meta.zr` (a 16-byte [`Header`] followed by
//! a table of 16-byte [`RecordLoc`] entries, entry `i` at [`entry_offset`]`(i)`)
//! and chunk files `0.zr`, `1.zr`, … holding the record bytes; while a delete
//! runs, `meta.zr.undo` holds an [`UndoLog`] of what it overwrites.
//!
//! Data flows one way through this crate: the engine (`loaderx-store`) reads
//! bytes from disk and hands them here — [`Header::decode`] and
//! [`RecordLoc::decode`] turn them into values, [`parse_index`] (a whole
//! image) or [`validate_entry`] (one entry, on every gather) judge them
//! against the limits and the chunk files' real lengths — and it writes what
//! [`Header::encode`], [`RecordLoc::encode`] and [`UndoLog::encode`] produce.
//! Every integer is explicit little-endian.
//!
//! The crate never does I/O, never allocates by a size read from disk, never
//! panics on untrusted bytes, and depends only on a CRC32C implementation
//! (format v2's checksums). The byte-level
//! specification is `docs/FORMAT.md`.
//!
//! ```
//! use loaderx_format::{CodecTag, Header, RecordLoc, entry_offset, parse_index};
//!
//! // A one-record store image: the header, then entry 0.
//! let header = Header { tail_chunk: 0, tail_offset: 10, length: 1 };
//! let entry = RecordLoc { offset: 0, phys_length: 10, logic_length: 10, chunk_id: 0, codec: CodecTag::RAW, crc: 0 };
//! let mut image = header.encode().to_vec();
//! assert_eq!(image.len() as u64, entry_offset(0));
//! image.extend_from_slice(&entry.encode());
//!
//! // Chunk 0 holds 10 bytes: the entry is valid.
//! let index = parse_index(&image, &[10]).unwrap();
//! assert_eq!(index.header, header);
//! assert_eq!(index.entry(0), Some(entry));
//!
//! // Had the chunk file been cut to 5 bytes, the entry would be refused, by name.
//! let err = parse_index(&image, &[5]).unwrap_err();
//! assert!(err.to_string().starts_with("table entry 0"));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::pedantic)]
// Lengths and offsets are bounded by the format's limits (2^24 records, 2^32-byte
// chunks), which the code checks before it converts between u32, u64 and usize.
#![allow(clippy::cast_possible_truncation)]

mod error;
mod head;
mod header;
mod limits;
mod loc;
pub mod manifest;
mod undo;
pub mod v2;
mod validate;

pub use error::{EntryFault, FormatError};
pub use head::{Head, Tail};
pub use header::Header;
pub use limits::*;
pub use loc::{CodecTag, RecordLoc};
pub use undo::{UNDO_FILE, UNDO_MAGIC, UNDO_MAX_LEN, UndoLog};
pub use validate::{Index, Rules, entry_fault, parse_index, validate_entry};
