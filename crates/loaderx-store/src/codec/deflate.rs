//! Raw DEFLATE (RFC 1951) through libdeflate.
//!
//! libdeflate decodes ~1.6× faster per core than flate2's default backend on
//! 12 KiB records (see `docs/BENCHMARKS.md`), and works on whole buffers,
//! which is exactly a record. Compressor and decompressor state is kept per
//! thread, so the hot path allocates nothing.

use std::cell::RefCell;

use libdeflater::{CompressionLvl, Compressor, DecompressionError, Decompressor};

use super::{Codec, CodecId, DecodeError};

/// libdeflate level used for writing; chosen by measurement (`docs/BENCHMARKS.md`).
pub const DEFLATE_LEVEL: i32 = 6;

thread_local! {
    static COMPRESSOR: RefCell<Option<Compressor>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
}

/// Raw DEFLATE, the default codec and the one loaderx 0.5.x reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deflate;

impl Codec for Deflate {
    fn id(&self) -> CodecId {
        CodecId::Deflate
    }

    fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        COMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            let c = slot.get_or_insert_with(|| {
                Compressor::new(CompressionLvl::new(DEFLATE_LEVEL).expect("valid level"))
            });
            match c.deflate_compress(src, dst) {
                Ok(n) if n > 0 && n <= dst.len() => Some(n),
                _ => None,
            }
        })
    }

    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        DECOMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            let d = slot.get_or_insert_with(Decompressor::new);
            match d.deflate_decompress(src, dst) {
                Ok(n) if n == dst.len() => Ok(()),
                Ok(n) => Err(DecodeError::wrong_size(n, dst.len())),
                Err(DecompressionError::InsufficientSpace) => Err(DecodeError::new(format!(
                    "deflate stream decodes to more than {} bytes",
                    dst.len()
                ))),
                Err(DecompressionError::BadData) => Err(DecodeError::new("invalid deflate stream")),
            }
        })
    }
}
