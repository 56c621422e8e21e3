//! Validation of a `meta.zr` image: the checks listed in `docs/FORMAT.md` §Validation.

use crate::{
    CHUNK_CAPACITY, CodecTag, ENTRY_LEN, Head, Header, MAX_RECORD_LEN, RecordLoc, entry_offset,
    error::{EntryFault, FormatError},
};

/// A validated view of a `meta.zr` image. Borrowing, never copying, the table.
#[derive(Debug, Clone, Copy)]
pub struct Index<'a> {
    /// The decoded header.
    pub header: Header,
    /// The image, at least [`Header::table_end`] bytes long.
    image: &'a [u8],
}

impl<'a> Index<'a> {
    /// Checks the header alone: magic, version, limits, that the image holds the
    /// table it claims, and that a length is known for every chunk `0..=tail_chunk`.
    /// O(1) in the number of records; entries are left to [`validate_entry`].
    ///
    /// # Errors
    /// The first of those checks that fails.
    pub fn parse_header(image: &'a [u8], chunk_lens: &[u64]) -> Result<Index<'a>, FormatError> {
        let header = Header::decode(image)?;
        header.check_limits()?;
        let need = header.table_end();
        if (image.len() as u64) < need {
            return Err(FormatError::Truncated {
                need,
                have: image.len() as u64,
            });
        }
        if chunk_lens.len() <= usize::from(header.tail_chunk) {
            return Err(FormatError::MissingChunk {
                chunk: u32::try_from(chunk_lens.len()).unwrap_or(u32::MAX),
            });
        }
        Ok(Index { header, image })
    }

    /// Entry `i`, if `i < length`. Not validated.
    #[must_use]
    pub fn entry(&self, i: u32) -> Option<RecordLoc> {
        if i >= self.header.length {
            return None;
        }
        let at = usize::try_from(entry_offset(i)).ok()?;
        let bytes = self.image.get(at..)?.first_chunk::<ENTRY_LEN>()?;
        Some(RecordLoc::decode(bytes))
    }
}

/// Validates a whole `meta.zr` image against the real lengths of chunk files
/// `0..=tail_chunk` (`chunk_lens[i]` is the length of `i.zr`).
///
/// Never panics, never allocates, and reads only inside `image`.
///
/// # Errors
/// The first problem found: a header problem, or [`FormatError::BadEntry`]
/// naming the first bad entry.
pub fn parse_index<'a>(image: &'a [u8], chunk_lens: &[u64]) -> Result<Index<'a>, FormatError> {
    let index = Index::parse_header(image, chunk_lens)?;
    for i in 0..index.header.length {
        // `parse_header` checked that the image holds the whole table.
        let Some(loc) = index.entry(i) else {
            return Err(FormatError::Truncated {
                need: index.header.table_end(),
                have: image.len() as u64,
            });
        };
        let file_len = chunk_lens.get(loc.chunk_id as usize).copied().unwrap_or(0);
        validate_entry(
            u64::from(i),
            &loc,
            &Head::from(index.header),
            file_len,
            Rules::V1,
        )?;
    }
    Ok(index)
}

/// Which version's rules an entry is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Largest logical and stored record size.
    pub max_record: u32,
    /// Whether `zstd_dict` is a known codec.
    pub v2: bool,
}

impl Rules {
    /// Format v1: records up to 1 MiB, codecs 0..=3.
    pub const V1: Rules = Rules {
        max_record: MAX_RECORD_LEN,
        v2: false,
    };
    /// Format v2: records up to 2 GiB − 1, codecs 0..=4.
    pub const V2: Rules = Rules {
        max_record: crate::v2::MAX_RECORD_LEN_V2,
        v2: true,
    };
}

/// Checks one entry against the rules of the format, the head, and the real
/// length of the chunk file it points into (`file_len`). This is what a gather
/// runs on every entry it touches.
///
/// # Errors
/// [`FormatError::BadEntry`] naming `entry` and the rule it breaks.
#[inline]
pub fn validate_entry(
    entry: u64,
    loc: &RecordLoc,
    head: &Head,
    file_len: u64,
    rules: Rules,
) -> Result<(), FormatError> {
    match entry_fault(loc, head, file_len, rules) {
        None => Ok(()),
        Some(reason) => Err(FormatError::BadEntry { entry, reason }),
    }
}

/// The first rule `loc` breaks, if any.
#[must_use]
#[inline]
pub fn entry_fault(
    loc: &RecordLoc,
    head: &Head,
    file_len: u64,
    rules: Rules,
) -> Option<EntryFault> {
    let known = if rules.v2 {
        loc.codec.is_allowed_v2()
    } else {
        loc.codec.is_known()
    };
    if !known {
        return Some(EntryFault::UnknownCodec(loc.codec));
    }
    let limit = rules.max_record;
    // Format v2 has empty records (an empty sequence in a ragged store);
    // they are always raw, so the check below makes their stored length 0.
    let empty_ok = rules.v2 && loc.codec == CodecTag::RAW;
    if (loc.logic_length == 0 && !empty_ok) || loc.logic_length > limit {
        return Some(EntryFault::LogicLength {
            len: loc.logic_length,
            limit,
        });
    }
    if loc.phys_length > limit {
        return Some(EntryFault::PhysLength {
            len: loc.phys_length,
            limit,
        });
    }
    if loc.codec == CodecTag::RAW && loc.phys_length != loc.logic_length {
        return Some(EntryFault::RawSizeMismatch {
            phys: loc.phys_length,
            logic: loc.logic_length,
        });
    }
    let tail = head.tails[head.lane_of(loc.chunk_id)];
    if loc.chunk_id > tail.chunk {
        return Some(EntryFault::ChunkPastTail {
            chunk: loc.chunk_id,
            tail_chunk: tail.chunk,
        });
    }
    let end = loc.end();
    if end > CHUNK_CAPACITY {
        return Some(EntryFault::PastCapacity { end });
    }
    if loc.chunk_id == tail.chunk && end > u64::from(tail.offset) {
        return Some(EntryFault::PastFrontier {
            end,
            tail_offset: tail.offset,
        });
    }
    if end > file_len {
        return Some(EntryFault::PastFileEnd {
            chunk: loc.chunk_id,
            end,
            file_len,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_RECORDS;

    fn image(header: Header, entries: &[RecordLoc]) -> Vec<u8> {
        let mut out = header.encode().to_vec();
        for e in entries {
            out.extend_from_slice(&e.encode());
        }
        out
    }

    fn raw(offset: u32, len: u32, chunk: u32) -> RecordLoc {
        RecordLoc {
            offset,
            phys_length: len,
            logic_length: len,
            chunk_id: chunk,
            codec: CodecTag::RAW,
            crc: 0,
        }
    }

    fn header(length: u32, tail_chunk: u16, tail_offset: u32) -> Header {
        Header {
            tail_chunk,
            tail_offset,
            length,
        }
    }

    fn fault(img: &[u8], lens: &[u64]) -> EntryFault {
        match parse_index(img, lens) {
            Err(FormatError::BadEntry { reason, .. }) => reason,
            other => panic!("expected an entry fault, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_valid_two_chunk_store() {
        let img = image(header(2, 1, 5), &[raw(0, 10, 0), raw(0, 5, 1)]);
        let index = parse_index(&img, &[10, 5]).unwrap();
        assert_eq!(index.entry(1), Some(raw(0, 5, 1)));
        assert_eq!(index.entry(2), None);
    }

    #[test]
    fn ignores_entries_past_length() {
        let img = image(header(1, 0, 10), &[raw(0, 10, 0), raw(99, 0, 7)]);
        assert!(parse_index(&img, &[10]).is_ok());
    }

    #[test]
    fn refuses_header_problems() {
        assert!(matches!(
            parse_index(&[], &[]),
            Err(FormatError::Truncated { need: 16, have: 0 })
        ));
        let img = image(header(MAX_RECORDS + 1, 0, 0), &[]);
        assert!(matches!(
            parse_index(&img, &[0]),
            Err(FormatError::TooManyRecords { .. })
        ));
        let img = image(header(0, 4096, 0), &[]);
        assert!(matches!(
            parse_index(&img, &[0]),
            Err(FormatError::TooManyChunks { .. })
        ));
        let img = image(header(3, 0, 30), &[raw(0, 10, 0)]);
        assert!(matches!(
            parse_index(&img, &[30]),
            Err(FormatError::Truncated { need: 64, have: 32 })
        ));
        let img = image(header(0, 2, 0), &[]);
        assert_eq!(
            parse_index(&img, &[1, 1]).unwrap_err(),
            FormatError::MissingChunk { chunk: 2 }
        );
    }

    #[test]
    fn refuses_each_entry_fault() {
        let h = header(1, 0, 100);
        let mut bad = raw(0, 10, 0);
        bad.codec = CodecTag(7);
        assert_eq!(
            fault(&image(h, &[bad]), &[100]),
            EntryFault::UnknownCodec(CodecTag(7))
        );
        assert_eq!(
            fault(&image(h, &[raw(0, 0, 0)]), &[100]),
            EntryFault::LogicLength {
                len: 0,
                limit: MAX_RECORD_LEN
            }
        );
        let mut big = raw(0, 10, 0);
        big.codec = CodecTag::FLATE;
        big.logic_length = MAX_RECORD_LEN + 1;
        assert_eq!(
            fault(&image(h, &[big]), &[100]),
            EntryFault::LogicLength {
                len: MAX_RECORD_LEN + 1,
                limit: MAX_RECORD_LEN
            }
        );
        big.logic_length = 10;
        big.phys_length = MAX_RECORD_LEN + 1;
        assert_eq!(
            fault(&image(h, &[big]), &[100]),
            EntryFault::PhysLength {
                len: MAX_RECORD_LEN + 1,
                limit: MAX_RECORD_LEN
            }
        );
        let mut mismatch = raw(0, 10, 0);
        mismatch.logic_length = 11;
        assert!(matches!(
            fault(&image(h, &[mismatch]), &[100]),
            EntryFault::RawSizeMismatch { .. }
        ));
        assert!(matches!(
            fault(&image(h, &[raw(0, 10, 1)]), &[100]),
            EntryFault::ChunkPastTail { .. }
        ));
        assert!(matches!(
            fault(&image(h, &[raw(95, 10, 0)]), &[200]),
            EntryFault::PastFrontier { end: 105, .. }
        ));
        assert!(matches!(
            fault(&image(h, &[raw(50, 10, 0)]), &[55]),
            EntryFault::PastFileEnd {
                end: 60,
                file_len: 55,
                ..
            }
        ));
        let h2 = header(1, 1, 0);
        assert!(matches!(
            fault(&image(h2, &[raw(u32::MAX, 10, 0)]), &[u64::MAX, 0]),
            EntryFault::PastCapacity { .. }
        ));
    }

    #[test]
    fn names_the_first_bad_entry() {
        let img = image(
            header(3, 0, 30),
            &[raw(0, 10, 0), raw(10, 0, 0), raw(0, 0, 0)],
        );
        match parse_index(&img, &[30]) {
            Err(FormatError::BadEntry { entry, .. }) => assert_eq!(entry, 1),
            other => panic!("{other:?}"),
        }
    }
}
