use crate::{
    CHUNK_CAPACITY, HEADER_LEN, MAGIC, MAX_CHUNKS, MAX_RECORDS, VERSION, entry_offset,
    error::FormatError,
};

/// The 16-byte header at offset 0 of `meta.zr`.
///
/// ```text
/// 0      4        6           8            12       16
/// | ZREC | version | tail_chunk | tail_offset | length |
/// ```
///
/// Magic and version are implied: [`Header::encode`] writes them and
/// [`Header::decode`] checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Chunk holding the write frontier; chunks `0..=tail_chunk` exist.
    pub tail_chunk: u16,
    /// Byte offset of the write frontier inside `tail_chunk`.
    pub tail_offset: u32,
    /// Live records; the index space is exactly `0..length`.
    pub length: u32,
}

impl Header {
    /// Little-endian bytes of this header, magic and version included.
    #[must_use]
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[6..8].copy_from_slice(&self.tail_chunk.to_le_bytes());
        out[8..12].copy_from_slice(&self.tail_offset.to_le_bytes());
        out[12..16].copy_from_slice(&self.length.to_le_bytes());
        out
    }

    /// The last 8 bytes of the header (`tail_offset`, `length`): the part an
    /// append commits with one aligned write.
    #[must_use]
    pub fn commit_bytes(&self) -> [u8; 8] {
        let mut out = [0u8; 8];
        out[0..4].copy_from_slice(&self.tail_offset.to_le_bytes());
        out[4..8].copy_from_slice(&self.length.to_le_bytes());
        out
    }

    /// Decodes a header, checking magic and version (nothing else: limits are
    /// [`check_limits`](Self::check_limits)' job).
    ///
    /// # Errors
    /// [`FormatError::Truncated`] for fewer than 16 bytes,
    /// [`FormatError::BadMagic`], [`FormatError::Version`].
    pub fn decode(bytes: &[u8]) -> Result<Header, FormatError> {
        let Some(b) = bytes.first_chunk::<HEADER_LEN>() else {
            return Err(FormatError::Truncated {
                need: HEADER_LEN as u64,
                have: bytes.len() as u64,
            });
        };
        let magic = [b[0], b[1], b[2], b[3]];
        if magic != MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(FormatError::Version {
                expected: VERSION,
                found: version,
            });
        }
        Ok(Header {
            tail_chunk: u16::from_le_bytes([b[6], b[7]]),
            tail_offset: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            length: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        })
    }

    /// Checks the header against the format's limits: `length` at most
    /// [`MAX_RECORDS`], `tail_chunk` below [`MAX_CHUNKS`].
    ///
    /// # Errors
    /// [`FormatError::TooManyRecords`] or [`FormatError::TooManyChunks`].
    pub fn check_limits(&self) -> Result<(), FormatError> {
        if self.length > MAX_RECORDS {
            return Err(FormatError::TooManyRecords {
                length: self.length,
                limit: MAX_RECORDS,
            });
        }
        if u32::from(self.tail_chunk) >= MAX_CHUNKS {
            return Err(FormatError::TooManyChunks {
                tail_chunk: self.tail_chunk,
                limit: MAX_CHUNKS,
            });
        }
        Ok(())
    }

    /// Bytes of `meta.zr` this header's table reaches: the end of entry
    /// `length - 1`, or of the header when the store is empty.
    #[must_use]
    pub fn table_end(&self) -> u64 {
        entry_offset(self.length)
    }

    /// Bytes of chunk space up to the write frontier (`tail_chunk · capacity + tail_offset`).
    #[must_use]
    pub fn chunk_bytes(&self) -> u64 {
        u64::from(self.tail_chunk) * CHUNK_CAPACITY + u64::from(self.tail_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_is_little_endian() {
        let h = Header {
            tail_chunk: 0x0102,
            tail_offset: 0x0304_0506,
            length: 0x0708_090a,
        };
        let bytes = h.encode();
        assert_eq!(
            bytes,
            [
                b'Z', b'R', b'E', b'C', 1, 0, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0a, 0x09, 0x08,
                0x07
            ]
        );
        assert_eq!(Header::decode(&bytes).unwrap(), h);
        assert_eq!(&bytes[8..], &h.commit_bytes());
    }

    #[test]
    fn refuses_bad_magic_version_and_short_input() {
        let mut bytes = Header::default().encode();
        bytes[4] = 2;
        assert_eq!(
            Header::decode(&bytes),
            Err(FormatError::Version {
                expected: 1,
                found: 2
            })
        );
        bytes[0] = b'X';
        assert!(matches!(
            Header::decode(&bytes),
            Err(FormatError::BadMagic { .. })
        ));
        assert!(matches!(
            Header::decode(&bytes[..7]),
            Err(FormatError::Truncated { need: 16, have: 7 })
        ));
    }
}
