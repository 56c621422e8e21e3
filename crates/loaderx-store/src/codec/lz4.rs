//! LZ4, one block per record (no frame), through `lz4_flex`'s safe codec.

use super::{Codec, CodecId, DecodeError};

/// LZ4 block: the fastest decoder; not readable by loaderx 0.5.x.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lz4;

impl Codec for Lz4 {
    fn id(&self) -> CodecId {
        CodecId::Lz4
    }

    fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        imp::encode(src, dst)
    }

    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        imp::decode(src, dst)
    }
}

#[cfg(feature = "lz4")]
mod imp {
    use std::cell::RefCell;

    use super::DecodeError;

    thread_local! {
        /// lz4_flex wants room for the worst case before it starts, so encoding
        /// goes through a per-thread scratch buffer of that size.
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn encode(src: &[u8], dst: &mut [u8]) -> Option<usize> {
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            let bound = lz4_flex::block::get_maximum_output_size(src.len());
            if scratch.len() < bound {
                scratch.resize(bound, 0);
            }
            let n = lz4_flex::block::compress_into(src, &mut scratch).ok()?;
            if n == 0 || n > dst.len() {
                return None;
            }
            dst[..n].copy_from_slice(&scratch[..n]);
            Some(n)
        })
    }

    pub(super) fn decode(src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        match lz4_flex::block::decompress_into(src, dst) {
            Ok(n) if n == dst.len() => Ok(()),
            Ok(n) => Err(DecodeError::wrong_size(n, dst.len())),
            Err(e) => Err(DecodeError::new(format!("invalid lz4 block: {e}"))),
        }
    }
}

#[cfg(not(feature = "lz4"))]
mod imp {
    use super::DecodeError;

    pub(super) fn encode(_src: &[u8], _dst: &mut [u8]) -> Option<usize> {
        None
    }

    pub(super) fn decode(_src: &[u8], _dst: &mut [u8]) -> Result<(), DecodeError> {
        Err(DecodeError::new(
            "this build of loaderx-store has no lz4: enable cargo feature `lz4`",
        ))
    }
}
