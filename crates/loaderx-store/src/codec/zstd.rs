//! zstd, one frame per record, with per-thread contexts.

use super::{Codec, CodecId, DecodeError};

/// zstd level used for writing; chosen by measurement (`docs/bench/rust.md`).
#[cfg_attr(not(feature = "zstd"), allow(dead_code))]
pub const ZSTD_LEVEL: i32 = 3;

/// zstd: decodes several times faster than DEFLATE for a similar ratio
/// (`docs/bench/rust.md`, "Store"); not readable by loaderx 0.5.x.
#[derive(Debug, Clone, Copy, Default)]
pub struct Zstd;

impl Codec for Zstd {
    fn id(&self) -> CodecId {
        CodecId::Zstd
    }

    fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        imp::encode(src, dst)
    }

    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        imp::decode(src, dst)
    }
}

#[cfg(feature = "zstd")]
mod imp {
    use std::cell::RefCell;

    use zstd::bulk::{Compressor, Decompressor};

    use super::{DecodeError, ZSTD_LEVEL};

    thread_local! {
        static COMPRESSOR: RefCell<Option<Compressor<'static>>> = const { RefCell::new(None) };
        static DECOMPRESSOR: RefCell<Option<Decompressor<'static>>> = const { RefCell::new(None) };
    }

    pub(super) fn encode(src: &[u8], dst: &mut [u8]) -> Option<usize> {
        COMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Compressor::new(ZSTD_LEVEL).ok();
            }
            let c = slot.as_mut()?;
            c.compress_to_buffer(src, dst)
                .ok()
                .filter(|&n| n > 0 && n <= dst.len())
        })
    }

    pub(super) fn decode(src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        // A frame header that declares a content size other than ours is
        // refused before any work; frames without one are checked after.
        if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(src)
            && size != dst.len() as u64
        {
            return Err(DecodeError::new(format!(
                "zstd frame declares {size} bytes, expected {}",
                dst.len()
            )));
        }
        DECOMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(
                    Decompressor::new()
                        .map_err(|e| DecodeError::new(format!("zstd context: {e}")))?,
                );
            }
            let d = slot.as_mut().expect("just set");
            match d.decompress_to_buffer(src, dst) {
                Ok(n) if n == dst.len() => Ok(()),
                Ok(n) => Err(DecodeError::wrong_size(n, dst.len())),
                Err(e) => Err(DecodeError::new(format!("invalid zstd frame: {e}"))),
            }
        })
    }
}

#[cfg(not(feature = "zstd"))]
mod imp {
    use super::DecodeError;

    pub(super) fn encode(_src: &[u8], _dst: &mut [u8]) -> Option<usize> {
        None
    }

    pub(super) fn decode(_src: &[u8], _dst: &mut [u8]) -> Result<(), DecodeError> {
        Err(DecodeError::new(
            "this build of loaderx-store has no zstd: enable cargo feature `zstd`",
        ))
    }
}
