//! The on-disk layout of a loaderx store, format version 1.
//!
//! A store is a directory holding `meta.zr` (a 16-byte [`Header`] followed by
//! a table of 16-byte [`RecordLoc`] entries) and chunk files `0.zr`, `1.zr`, …
//! holding the record bytes. This crate knows the bytes and nothing else: it
//! encodes and decodes the header and table entries in explicit little-endian,
//! states the limits, and validates a `meta.zr` image with [`parse_index`].
//!
//! It never does I/O, never allocates by a size read from disk, and has no
//! dependencies; the engine (`loaderx-store`) builds on it. The byte-level
//! specification is `docs/FORMAT.md`.
//!
//! ```
//! use loaderx_format::{Header, RecordLoc, CodecTag, parse_index, HEADER_LEN, ENTRY_LEN};
//!
//! let header = Header { tail_chunk: 0, tail_offset: 10, length: 1 };
//! let entry = RecordLoc { offset: 0, phys_length: 10, logic_length: 10, chunk_id: 0, codec: CodecTag::RAW };
//! let mut image = vec![0u8; HEADER_LEN + ENTRY_LEN];
//! image[..HEADER_LEN].copy_from_slice(&header.encode());
//! image[HEADER_LEN..].copy_from_slice(&entry.encode());
//!
//! let index = parse_index(&image, &[10]).unwrap();
//! assert_eq!(index.header.length, 1);
//! assert_eq!(index.entry(0), Some(entry));
//! ```
#![forbid(unsafe_code)]

mod error;
mod header;
mod limits;
mod loc;
mod validate;

pub use error::{EntryFault, FormatError};
pub use header::Header;
pub use limits::*;
pub use loc::{CodecTag, RecordLoc};
pub use validate::{Index, entry_fault, parse_index, validate_entry};
