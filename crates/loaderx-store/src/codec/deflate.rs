//! Raw DEFLATE (RFC 1951), through libdeflate (feature
//! `deflate-libdeflate`, the default) or pure-Rust `flate2` (feature
//! `deflate-flate2`). Both write plain raw DEFLATE streams, so each build
//! reads what the other writes; with both features on, libdeflate is used.
//!
//! libdeflate is the faster decoder per core (`docs/bench/rust.md`,
//! "Store", DEFLATE builds), and works on whole buffers, which is exactly a
//! record. Compressor and decompressor state is kept per
//! thread, so the hot path allocates nothing.

use super::{Codec, CodecId, DecodeError};

/// DEFLATE level used for writing; chosen by measurement (`docs/bench/rust.md`).
#[cfg_attr(
    not(any(feature = "deflate-libdeflate", feature = "deflate-flate2")),
    allow(dead_code)
)]
pub const DEFLATE_LEVEL: i32 = 6;

/// Raw DEFLATE, the default codec and the one loaderx 0.5.x reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deflate;

impl Codec for Deflate {
    fn id(&self) -> CodecId {
        CodecId::Deflate
    }

    fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        imp::encode(src, dst)
    }

    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        imp::decode(src, dst)
    }
}

#[cfg(feature = "deflate-libdeflate")]
mod imp {
    use std::cell::RefCell;

    use libdeflater::{CompressionLvl, Compressor, DecompressionError, Decompressor};

    use super::{DEFLATE_LEVEL, DecodeError};

    thread_local! {
        static COMPRESSOR: RefCell<Option<Compressor>> = const { RefCell::new(None) };
        static DECOMPRESSOR: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
    }

    pub(super) fn encode(src: &[u8], dst: &mut [u8]) -> Option<usize> {
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

    pub(super) fn decode(src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
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

#[cfg(all(feature = "deflate-flate2", not(feature = "deflate-libdeflate")))]
mod imp {
    use std::cell::RefCell;

    use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

    use super::{DEFLATE_LEVEL, DecodeError};

    thread_local! {
        static COMPRESSOR: RefCell<Option<(Compress, Vec<u8>)>> = const { RefCell::new(None) };
        static DECOMPRESSOR: RefCell<Option<Decompress>> = const { RefCell::new(None) };
    }

    /// zlib's `compressBound`, plus slack: room for any stream of `n` bytes.
    fn bound(n: usize) -> usize {
        n + (n >> 12) + (n >> 14) + (n >> 25) + 64
    }

    pub(super) fn encode(src: &[u8], dst: &mut [u8]) -> Option<usize> {
        COMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            // `false`: raw DEFLATE, no zlib header.
            let (c, scratch) = slot.get_or_insert_with(|| {
                (
                    Compress::new(Compression::new(DEFLATE_LEVEL.unsigned_abs()), false),
                    Vec::new(),
                )
            });
            // Into a buffer with room for the worst case, then copied: the
            // backend must never run out of output space mid-stream (zlib-rs
            // 0.6 panics on some such calls).
            let need = bound(src.len());
            if scratch.len() < need {
                scratch.resize(need, 0);
            }
            c.reset();
            match c.compress(src, scratch, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => {
                    let n = usize::try_from(c.total_out()).ok()?;
                    if n == 0 || n > dst.len() {
                        return None;
                    }
                    dst[..n].copy_from_slice(&scratch[..n]);
                    Some(n)
                }
                _ => None,
            }
        })
    }

    pub(super) fn decode(src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        DECOMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            let d = slot.get_or_insert_with(|| Decompress::new(false));
            d.reset(false);
            let status = d
                .decompress(src, dst, FlushDecompress::Finish)
                .map_err(|_| DecodeError::new("invalid deflate stream"))?;
            let out = usize::try_from(d.total_out()).unwrap_or(usize::MAX);
            match status {
                Status::StreamEnd if out == dst.len() => Ok(()),
                Status::StreamEnd => Err(DecodeError::wrong_size(out, dst.len())),
                // Output full before the end: one more byte tells "the end
                // block is next" from "there is more data".
                _ if out == dst.len() => {
                    let read = usize::try_from(d.total_in()).unwrap_or(src.len());
                    let mut probe = [0u8; 1];
                    match d.decompress(
                        &src[read.min(src.len())..],
                        &mut probe,
                        FlushDecompress::Finish,
                    ) {
                        Ok(Status::StreamEnd) if d.total_out() == out as u64 => Ok(()),
                        Ok(_) if d.total_out() > out as u64 => Err(DecodeError::new(format!(
                            "deflate stream decodes to more than {} bytes",
                            dst.len()
                        ))),
                        _ => Err(DecodeError::new("invalid deflate stream")),
                    }
                }
                _ => Err(DecodeError::new(format!(
                    "invalid deflate stream: it ends after {out} of {} bytes",
                    dst.len()
                ))),
            }
        })
    }
}

#[cfg(not(any(feature = "deflate-libdeflate", feature = "deflate-flate2")))]
mod imp {
    use super::DecodeError;

    pub(super) fn encode(_src: &[u8], _dst: &mut [u8]) -> Option<usize> {
        None
    }

    pub(super) fn decode(_src: &[u8], _dst: &mut [u8]) -> Result<(), DecodeError> {
        Err(DecodeError::new(
            "this build of loaderx-store has no DEFLATE: enable cargo feature `deflate-libdeflate` or `deflate-flate2`",
        ))
    }
}
