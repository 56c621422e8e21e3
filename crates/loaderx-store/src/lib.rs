//! The loaderx record store: a directory of byte records that a training
//! loop gathers from in parallel, straight into memory it owns. Two on-disk
//! formats: v1, the layout of loaderx 0.5.x (byte-compatible), and v2
//! ([`Store::create_v2`]: a schema, write lanes, a CRC32C on every entry
//! and record). What the two do differently is asked of one internal value
//! found at open (the version seam, `layout.rs`), never by testing for a
//! schema.
//!
//! * [`Store`] is the engine: `open`, `append_fixed`/`append_ragged`,
//!   `gather`/`gather_exact`/`gather_ragged`, `lengths`, `delete`, `compact`, `stats`,
//!   `sync`, `verify`. Errors are one [`Error`] enum that names what went
//!   wrong and where, each mapped to a stable [`ErrorCode`].
//! * [`Codec`] is a per-record compression scheme ([`Raw`], [`Deflate`] — the
//!   default —, [`Zstd`], [`Lz4`]); [`CodecId`] picks one at run time. Reads
//!   dispatch on each record's own tag, and every record decodes through one
//!   call, [`Codec::decode_in`], given a [`DecodeContext`] (the store's
//!   schema and dictionary). `Codec` is also the extension point: codecs
//!   defined elsewhere (tags `128 ..= 255`), and the image codecs in a build
//!   without the `image` feature, are registered in a [`CodecRegistry`]
//!   passed in [`OpenOptions::codecs`].
//!   Cargo features pick the built-ins: `deflate-libdeflate` (default) or
//!   `deflate-flate2` (pure Rust), `zstd` (default), `lz4` (default);
//!   `--no-default-features --features deflate-flate2,lz4` compiles no C.
//! * [`Storage`](storage::Storage) is where the bytes live: memory-mapped
//!   files ([`FileStorage`](storage::FileStorage)), or, with the test-only
//!   cargo feature `testing`, memory (`storage::MemStorage`, which can fail
//!   an operation on purpose and show what a crash or power loss leaves).
//!
//! Data flow: an append encodes records in parallel, places them serially,
//! writes them in parallel, then commits (table entries, then the header,
//! laid out by [`loaderx_format`], re-exported as `format`), so a killed
//! process leaves a store holding a prefix of what was appended. A gather
//! validates every index and destination range, then decodes in parallel
//! into the caller's buffer with no intermediate copy.
//!
//! The crate never interprets record bytes (codecs do), knows nothing of
//! Python, and writes `unsafe` only in the modules it allows by name, each
//! stating its invariant. Files are read through memory maps: see the rule
//! in [`Store::open`].
//!
//! ```
//! use loaderx_store::{Store, Deflate};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store: Store<Deflate> = Store::open(dir.path().join("images")).unwrap();
//! let records = vec![7u8; 4 * 1024]; // four records of 1 KiB
//! let first = store.append_fixed(&records, 4, 1024).unwrap();
//! assert_eq!(first, 0);
//!
//! let mut batch = vec![0u8; 2 * 1024];
//! store.gather(&[3, 1], &mut batch, 1024).unwrap();
//! assert!(batch.iter().all(|&b| b == 7));
//! ```
// Unsafe only in the modules allowed by name: `fork`, `gather`, `hints`,
// `parallel` below, `storage::{file, lend}` in `storage/mod.rs` and
// `lock::platform` (Windows) in `lock.rs`; each states at its top the
// invariant that makes it sound (docs/ARCHITECTURE.md, "Where `unsafe`
// lives, and why it is sound").
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::pedantic)]
// Narrowing casts only ever apply to values the format's limits bound (2^24
// records, 2^12 chunks, 2^32-byte chunks, 1 MiB records), checked before the
// cast; the crate maps 4 GiB chunk extents, so it targets 64-bit platforms.
#![allow(clippy::cast_possible_truncation)]

// Chunk files are mapped whole (4 GiB) and record offsets are used as
// `usize`: a 32-bit address space cannot hold that.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("loaderx-store needs a 64-bit target (it maps 4 GiB chunk files whole)");

mod append;
#[cfg(feature = "image")]
mod append_encoded;
mod codec;
pub mod collection;
mod compact;
mod delete;
mod error;
mod files;
#[cfg(unix)]
#[allow(unsafe_code)] // fork handlers: see the module's invariant
mod fork;
#[cfg(unix)]
use fork::generation as process_generation;
/// Where no process forks, every value recorded is this process's.
#[cfg(not(unix))]
fn process_generation() -> u64 {
    0
}
mod frontier;
#[allow(unsafe_code)] // disjoint writes into the caller's buffer: see the module's invariant
mod gather;
#[allow(unsafe_code)] // prefetch and madvise hints, a zeroed allocation: see the module's invariant
mod hints;
mod layout;
mod lock;
mod lookahead;
mod open;
#[allow(unsafe_code)] // the pool and `SharedDst`: see the module's invariant
mod parallel;
mod runs;
mod runtable;
mod scan_fetched;
mod slots;
pub mod storage;
mod store;
mod undo;

#[cfg(feature = "image")]
pub use codec::image::{ImageLayout, list_codecs as list_image_codecs};
pub use codec::{
    Codec, CodecId, CodecRegistry, DEFAULT_DICT_SIZE, DICT_MAGIC, DecodeContext, DecodeError,
    Deflate, ExternalId, Lz4, MAX_DICT_SIZE, MAX_SAMPLE_BYTES, MIN_DICT_SIZE, MIN_SAMPLES, Raw,
    RegisterError, TrainError, Zstd, ZstdDictionary, train_dictionary,
};
pub use error::{Error, ErrorCode, Result};
pub use loaderx_format as format;
pub use loaderx_format::{MAX_CHUNKS, MAX_RECORD_LEN, MAX_RECORDS};
/// The image codecs (`loaderx-image`), with the `image` feature.
#[cfg(feature = "image")]
pub use loaderx_image as image;
pub use open::{LANE_BYTES, OpenOptions};
pub use store::{Stats, Store};
