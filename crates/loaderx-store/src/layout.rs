//! The version seam: everything formats v1 and v2 do differently, asked of
//! one `Copy` value, [`Layout`], found when the store is opened.
//!
//! The engine never tests for a schema to learn which format it is writing
//! or reading; it asks the layout (`layout.checksums()`,
//! `layout.max_record_len()`, …), and each question is one `match` here.
//! The questions are asked once per operation or per batch, or (the table
//! geometry) on a value the compiler keeps in a register: no call through a
//! pointer, nothing per record that was not there before. `docs/FORMAT.md`
//! gives the byte layouts; `files.rs` does the I/O.

use loaderx_format::{
    CodecTag, ENTRY_LEN, EntryFault, MAX_CHUNKS, MAX_RECORD_LEN, MAX_RECORDS, RecordLoc, Rules,
    entry_offset,
    v2::{self, MAX_RECORD_LEN_V2},
};

/// Where `meta.zr`'s parts are and which rules its records follow, by
/// format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Format v1 (loaderx 0.5.x): a 16-byte header, then 16-byte entries;
    /// no schema, no checksums, at most [`MAX_RECORDS`] records in
    /// [`MAX_CHUNKS`] chunks.
    V1,
    /// Format v2: two header slots, the schema block, then entries of
    /// `entry_len` bytes from `table` on, each carrying `ndim` dimensions
    /// and its record's CRC32C.
    V2 {
        /// The table is a run table (`docs/FORMAT.md`, §9.5): pieces of
        /// 28-byte units, found through `Files`' index of them, not an
        /// array indexed by record.
        runs: bool,
        table: u64,
        entry_len: usize,
        ndim: usize,
        schema_len: u32,
        schema_crc: u32,
    },
}

impl Layout {
    /// The format version number: 1 or 2.
    pub(crate) fn version(self) -> u16 {
        match self {
            Layout::V1 => 1,
            Layout::V2 { .. } => 2,
        }
    }

    /// The rules table entries are judged by.
    pub(crate) fn rules(self) -> Rules {
        match self {
            Layout::V1 => Rules::V1,
            Layout::V2 { .. } => Rules::V2,
        }
    }

    /// Whether every record's table entry holds the CRC32C of its stored
    /// bytes (format v2): appends compute it, reads may check it.
    #[inline]
    pub(crate) fn checksums(self) -> bool {
        match self {
            Layout::V1 => false,
            Layout::V2 { .. } => true,
        }
    }

    /// The largest record an append accepts, stored or decoded.
    pub(crate) fn max_record_len(self) -> u32 {
        match self {
            Layout::V1 => MAX_RECORD_LEN,
            Layout::V2 { .. } => MAX_RECORD_LEN_V2,
        }
    }

    /// How many records the store may hold (v2: bounded only by the
    /// table's mapped extent, which appends check separately).
    pub(crate) fn max_records(self) -> u64 {
        match self {
            Layout::V1 => u64::from(MAX_RECORDS),
            Layout::V2 { .. } => u64::MAX,
        }
    }

    /// The chunk id limit errors name when a store runs out of chunks.
    pub(crate) fn max_chunks(self) -> u64 {
        match self {
            Layout::V1 => u64::from(MAX_CHUNKS),
            Layout::V2 { .. } => u64::from(u32::MAX),
        }
    }

    /// Whether an append may start chunk `id` (v2: any id a `u32` holds).
    pub(crate) fn chunk_fits(self, id: u32) -> bool {
        match self {
            Layout::V1 => id < MAX_CHUNKS,
            Layout::V2 { .. } => true,
        }
    }

    /// Whether records of codec `tag` may be written: v1 knows only its
    /// four codecs (raw, flate, zstd, lz4); v2 lists the rest in its schema.
    pub(crate) fn can_write(self, tag: CodecTag) -> bool {
        match self {
            Layout::V1 => tag.is_known(),
            Layout::V2 { .. } => true,
        }
    }

    /// Whether the table is a run table (format v2, §9.5).
    #[inline]
    pub(crate) fn runs(self) -> bool {
        matches!(self, Layout::V2 { runs: true, .. })
    }

    /// Dimensions each table entry carries (ragged v2 stores).
    #[inline]
    pub(crate) fn entry_dims(self) -> usize {
        match self {
            Layout::V1 => 0,
            Layout::V2 { ndim, .. } => ndim,
        }
    }

    /// Bytes of one table entry.
    #[inline]
    pub(crate) fn entry_len(self) -> usize {
        match self {
            Layout::V1 => ENTRY_LEN,
            Layout::V2 { entry_len, .. } => entry_len,
        }
    }

    /// Byte offset of table entry `index` in `meta.zr`.
    #[inline]
    pub(crate) fn entry_at(self, index: u64) -> u64 {
        match self {
            Layout::V1 => entry_offset(index as u32),
            // Saturating: a damaged header's length may be anything, and
            // the table end it gives must then exceed the file, not wrap.
            Layout::V2 {
                table, entry_len, ..
            } => table.saturating_add(index.saturating_mul(entry_len as u64)),
        }
    }

    /// Decodes table entry `index` from its `entry_len()` bytes: a v1 entry
    /// is not judged here; a v2 entry is checked against its own checksum.
    #[inline]
    pub(crate) fn decode_entry(self, index: u64, bytes: &[u8]) -> Result<RecordLoc, EntryFault> {
        match self {
            Layout::V1 => Ok(RecordLoc::decode(
                bytes.first_chunk::<ENTRY_LEN>().expect("16 bytes"),
            )),
            Layout::V2 { .. } => v2::decode_entry(index, bytes),
        }
    }

    /// Appends the encoding of `loc` (with `dims`, `entry_dims()` of them)
    /// as entry `index` to `out`.
    pub(crate) fn encode_entry(self, index: u64, loc: &RecordLoc, dims: &[u32], out: &mut Vec<u8>) {
        match self {
            Layout::V1 => out.extend_from_slice(&loc.encode()),
            Layout::V2 { entry_len, .. } => {
                let mut entry = [0u8; v2::entry_len(v2::MAX_NDIM)];
                v2::encode_entry(index, loc, dims, &mut entry[..entry_len]);
                out.extend_from_slice(&entry[..entry_len]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_version_answers_its_own_rules() {
        let v2 = Layout::V2 {
            runs: false,
            table: 8192,
            entry_len: v2::entry_len(1),
            ndim: 1,
            schema_len: 64,
            schema_crc: 0,
        };
        assert_eq!((Layout::V1.version(), v2.version()), (1, 2));
        assert!(!Layout::V1.checksums() && v2.checksums());
        assert_eq!(Layout::V1.max_record_len(), MAX_RECORD_LEN);
        assert!(Layout::V1.chunk_fits(MAX_CHUNKS - 1) && !Layout::V1.chunk_fits(MAX_CHUNKS));
        assert!(v2.chunk_fits(u32::MAX));
        assert!(!Layout::V1.can_write(CodecTag::ZSTD_DICT) && v2.can_write(CodecTag::ZSTD_DICT));
        assert_eq!(v2.entry_at(2), 8192 + 2 * v2.entry_len() as u64);
        let loc = RecordLoc {
            offset: 7,
            phys_length: 3,
            logic_length: 5,
            chunk_id: 1,
            codec: CodecTag::FLATE,
            crc: 0,
        };
        for layout in [Layout::V1, v2] {
            let mut bytes = Vec::new();
            layout.encode_entry(4, &loc, &[5][..layout.entry_dims()], &mut bytes);
            assert_eq!(bytes.len(), layout.entry_len());
            assert_eq!(layout.decode_entry(4, &bytes), Ok(loc));
        }
    }
}
