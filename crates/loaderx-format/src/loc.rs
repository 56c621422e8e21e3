use crate::ENTRY_LEN;

/// The codec byte of a table entry.
///
/// A newtype rather than an enum: a table may hold any byte here, and the
/// validator must be able to name the unknown value it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodecTag(pub u8);

impl CodecTag {
    /// Stored verbatim: `phys_length == logic_length`.
    pub const RAW: CodecTag = CodecTag(0);
    /// Raw DEFLATE (RFC 1951), no zlib or gzip wrapper.
    pub const FLATE: CodecTag = CodecTag(1);
    /// One zstd frame (not readable by loaderx 0.5.x).
    pub const ZSTD: CodecTag = CodecTag(2);
    /// One LZ4 block, no frame (not readable by loaderx 0.5.x).
    pub const LZ4: CodecTag = CodecTag(3);
    /// zstd with the store's dictionary, trained or raw content (format v2
    /// only).
    pub const ZSTD_DICT: CodecTag = CodecTag(4);
    /// A JPEG file, decoding to 8-bit RGB (format v2 only; `uint8` images;
    /// listed in the store's codec table).
    pub const JPEG: CodecTag = CodecTag(5);
    /// A PNG file, decoding to 8-bit RGB (format v2 only; like
    /// [`CodecTag::JPEG`]).
    pub const PNG: CodecTag = CodecTag(6);
    /// The first tag of the range format v2 leaves to codecs defined
    /// outside loaderx (`128 ..= 255`); a store using one lists it, by name
    /// and version, in its schema block.
    pub const EXTERNAL_MIN: u8 = 128;

    /// Whether format v1 defines this tag.
    #[must_use]
    pub fn is_known(self) -> bool {
        self.0 <= 3
    }

    /// Whether format v2 defines this tag (v1's and `zstd_dict`).
    #[must_use]
    pub fn is_known_v2(self) -> bool {
        self.0 <= 4
    }

    /// Whether records of this tag are encoded images (`jpeg`, `png`).
    #[must_use]
    pub fn is_image(self) -> bool {
        self == CodecTag::JPEG || self == CodecTag::PNG
    }

    /// Whether this tag is in the range left to codecs defined outside
    /// loaderx (`128 ..= 255`).
    #[must_use]
    pub fn is_external(self) -> bool {
        self.0 >= Self::EXTERNAL_MIN
    }

    /// Whether a format v2 table entry may carry this tag: v2's own
    /// (`0 ..= 4`), the image codecs' (5, 6) and the external range. Tags
    /// past 4 must also be listed in the store's schema block, which the
    /// store checks when it decodes.
    #[must_use]
    pub fn is_allowed_v2(self) -> bool {
        self.0 <= 6 || self.is_external()
    }

    /// The tag's name as the Python API spells it, if known.
    #[must_use]
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "raw",
            1 => "flate",
            2 => "zstd",
            3 => "lz4",
            4 => "zstd_dict",
            5 => "jpeg",
            6 => "png",
            _ => return None,
        })
    }
}

/// One 16-byte entry of the record table: where a record lives and how to read it.
///
/// ```text
/// 0        4             8              12         14      15         16
/// | offset | phys_length | logic_length | chunk_id | codec | reserved |
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLoc {
    /// Byte offset within the chunk.
    pub offset: u32,
    /// Bytes stored (after compression).
    pub phys_length: u32,
    /// Bytes the record decodes to.
    pub logic_length: u32,
    /// Chunk file holding the record.
    pub chunk_id: u32,
    /// How the stored bytes are encoded.
    pub codec: CodecTag,
    /// CRC32C of the stored bytes (format v2; 0 and unchecked in v1).
    pub crc: u32,
}

impl RecordLoc {
    /// Little-endian bytes of this entry in format v1; the reserved byte is
    /// written as 0. The caller keeps `chunk_id` below
    /// [`MAX_CHUNKS`](crate::MAX_CHUNKS) (v1 stores it in 16 bits).
    #[must_use]
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut out = [0u8; ENTRY_LEN];
        out[0..4].copy_from_slice(&self.offset.to_le_bytes());
        out[4..8].copy_from_slice(&self.phys_length.to_le_bytes());
        out[8..12].copy_from_slice(&self.logic_length.to_le_bytes());
        out[12..14].copy_from_slice(&(self.chunk_id as u16).to_le_bytes());
        out[14] = self.codec.0;
        out
    }

    /// Decodes an entry without judging it (see [`validate_entry`](crate::validate_entry)).
    /// The reserved byte is ignored.
    #[must_use]
    pub fn decode(bytes: &[u8; ENTRY_LEN]) -> RecordLoc {
        RecordLoc {
            offset: u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            phys_length: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            logic_length: u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
            chunk_id: u32::from(u16::from_le_bytes([bytes[12], bytes[13]])),
            codec: CodecTag(bytes[14]),
            crc: 0,
        }
    }

    /// End of the record's bytes within its chunk, without overflow.
    #[must_use]
    pub fn end(&self) -> u64 {
        u64::from(self.offset) + u64::from(self.phys_length)
    }

    /// Position in the store's single address space (`chunk · capacity + offset`);
    /// compaction visits records in this order.
    #[must_use]
    pub fn position(&self) -> u64 {
        u64::from(self.chunk_id) * crate::CHUNK_CAPACITY + u64::from(self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trip_is_little_endian() {
        let loc = RecordLoc {
            offset: 0x0102_0304,
            phys_length: 0x10,
            logic_length: 0x20,
            chunk_id: 0x0a0b,
            codec: CodecTag::FLATE,
            crc: 0,
        };
        let bytes = loc.encode();
        assert_eq!(
            bytes,
            [4, 3, 2, 1, 0x10, 0, 0, 0, 0x20, 0, 0, 0, 0x0b, 0x0a, 1, 0]
        );
        assert_eq!(RecordLoc::decode(&bytes), loc);
    }

    #[test]
    fn codec_names() {
        assert_eq!(CodecTag::RAW.name(), Some("raw"));
        assert_eq!(CodecTag::LZ4.name(), Some("lz4"));
        assert_eq!(CodecTag(9).name(), None);
        assert!(!CodecTag(4).is_known());
    }
}
