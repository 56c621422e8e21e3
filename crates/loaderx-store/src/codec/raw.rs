use super::{Codec, CodecId, DecodeError};

/// Stores records verbatim.
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl Codec for Raw {
    fn id(&self) -> CodecId {
        CodecId::Raw
    }

    fn encode(&self, _src: &[u8], _dst: &mut [u8]) -> Option<usize> {
        None
    }

    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        if src.len() != dst.len() {
            return Err(DecodeError::wrong_size(src.len(), dst.len()));
        }
        dst.copy_from_slice(src);
        Ok(())
    }
}
