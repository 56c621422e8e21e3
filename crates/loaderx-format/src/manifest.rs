//! The manifest of a collection: many stores read as one
//! (`docs/FORMAT.md`, part III).
//!
//! A collection is a directory of *parts*, each holding one format-v2
//! store per *column* (`part-00000/image/`, `part-00000/label/`, …), and
//! one manifest file, [`MANIFEST_FILE`], written last. The manifest names
//! the columns with their schemas and the parts in order with their record
//! counts; the records of the collection are the parts' records in that
//! order, one index space `0 .. records`.
//!
//! ```text
//! "ZCOL" | version u16 | 0 u16 | columns u32 | parts u64 | records u64
//! columns × ( name_len u8 | name | schema_len u32 | v2 schema block )
//! parts   × ( records u64 | name_len u8 | name )
//! crc32c u32 (of every byte before it)
//! ```
//!
//! [`Manifest::decode`] checks the checksum before it trusts any other
//! field, never allocates by a count it has not seen the bytes for, and
//! refuses every inconsistent manifest with a [`ManifestError`] that names
//! the field and where it is.

use std::collections::HashSet;
use std::fmt;

use crate::v2::{Schema, crc32c};
use crate::{CodecTag, FormatError};

/// The manifest's file name inside the collection's directory.
pub const MANIFEST_FILE: &str = "manifest.zc";

/// The first four bytes of a manifest.
pub const MANIFEST_MAGIC: [u8; 4] = *b"ZCOL";

/// The manifest version this crate reads and writes.
pub const MANIFEST_VERSION: u16 = 1;

/// Bytes of the fixed header (before the columns).
pub const MANIFEST_HEADER_LEN: usize = 28;

/// Most columns a collection may have.
pub const MAX_COLUMNS: u32 = 1024;

/// Most parts a collection may have (`2^32`).
pub const MAX_PARTS: u64 = 1 << 32;

/// Most bytes of a column or part name.
pub const MAX_NAME_LEN: usize = 64;

/// Fewest bytes one part takes in a manifest (a count and a one-byte name).
const MIN_PART_LEN: u64 = 8 + 1 + 1;

/// Fewest bytes one column takes (a one-byte name, `schema_len`, and the
/// fixed fields of a schema block).
const MIN_COLUMN_LEN: u64 = 1 + 1 + 4 + 16;

/// One column: its name (a directory name in every part) and the schema
/// every part's store of it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The column's name.
    pub name: String,
    /// The schema of the column's store in every part.
    pub schema: Schema,
}

/// One part: its directory name and how many records each of its column
/// stores holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The part's directory name.
    pub name: String,
    /// Records in each of the part's column stores.
    pub records: u64,
}

/// What a collection holds: its columns and its parts, in index order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The columns, in the order they are listed.
    pub columns: Vec<Column>,
    /// The parts, in index order: part `p` holds records `start(p) ..
    /// start(p) + records`.
    pub parts: Vec<Part>,
}

/// A manifest that breaks a rule: what is wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// Where: `"header"`, `"column 2 (\"image\")"`, `"part 17"`, `"checksum"`, …
    pub at: String,
    /// The rule broken, with the values found.
    pub reason: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "manifest {}: {}", self.at, self.reason)
    }
}

impl std::error::Error for ManifestError {}

fn fault<T>(at: impl Into<String>, reason: impl Into<String>) -> Result<T, ManifestError> {
    Err(ManifestError {
        at: at.into(),
        reason: reason.into(),
    })
}

/// Checks a column or part name: `1 ..= 64` bytes of ASCII letters,
/// digits, `_`, `-` and `.`, not starting with `.` (names starting with a
/// dot are the writers' temporary names) and not the manifest's own name.
///
/// # Errors
/// The rule broken, with the name.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!(
            "name {name:?} is {} bytes (1..={MAX_NAME_LEN})",
            name.len()
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(format!(
            "name {name:?} holds a character other than ASCII letters, digits, '_', '-' and '.'"
        ));
    }
    if name.starts_with('.') {
        return Err(format!(
            "name {name:?} starts with '.' (reserved for temporary names)"
        ));
    }
    if name == MANIFEST_FILE {
        return Err(format!("name {name:?} is the manifest's file name"));
    }
    Ok(())
}

fn column_at(i: usize, name: &str) -> String {
    format!("column {i} ({name:?})")
}

fn part_at(i: usize, name: &str) -> String {
    format!("part {i} ({name:?})")
}

impl Manifest {
    /// Records in the whole collection, or `None` if the parts' counts
    /// overflow a `u64`.
    #[must_use]
    pub fn records(&self) -> Option<u64> {
        self.parts
            .iter()
            .try_fold(0u64, |sum, p| sum.checked_add(p.records))
    }

    /// The global index of each part's first record, and the total after
    /// the last: `parts.len() + 1` values, non-decreasing. Saturates at
    /// `u64::MAX` (a manifest that passed [`check`](Manifest::check) never
    /// does).
    #[must_use]
    pub fn starts(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.parts.len() + 1);
        let mut at = 0u64;
        out.push(at);
        for p in &self.parts {
            at = at.saturating_add(p.records);
            out.push(at);
        }
        out
    }

    /// The column named `name`, with its position.
    #[must_use]
    pub fn column(&self, name: &str) -> Option<(usize, &Column)> {
        self.columns
            .iter()
            .enumerate()
            .find(|(_, c)| c.name == name)
    }

    /// Checks every rule a manifest must keep: `1 ..= MAX_COLUMNS` columns
    /// with valid, distinct names and valid typed schemas (dense or ragged,
    /// or bytes; never `zstd_dict`, whose dictionary is per store);
    /// `1 ..= MAX_PARTS` parts with valid, distinct names; a record total
    /// that fits a `u64`.
    ///
    /// # Errors
    /// The first rule broken, naming the column or part.
    pub fn check(&self) -> Result<(), ManifestError> {
        if self.columns.is_empty() || self.columns.len() > MAX_COLUMNS as usize {
            return fault(
                "header",
                format!("{} columns (1..={MAX_COLUMNS})", self.columns.len()),
            );
        }
        if self.parts.is_empty() || self.parts.len() as u64 > MAX_PARTS {
            return fault(
                "header",
                format!("{} parts (1..={MAX_PARTS})", self.parts.len()),
            );
        }
        let mut seen = HashSet::with_capacity(self.columns.len());
        for (i, c) in self.columns.iter().enumerate() {
            check_name(&c.name).or_else(|why| fault(column_at(i, &c.name), why))?;
            if !seen.insert(c.name.as_str()) {
                return fault(
                    column_at(i, &c.name),
                    "a column of that name is listed before",
                );
            }
            check_column_schema(&c.schema).or_else(|why| fault(column_at(i, &c.name), why))?;
        }
        let mut seen = HashSet::with_capacity(self.parts.len());
        for (i, p) in self.parts.iter().enumerate() {
            check_name(&p.name).or_else(|why| fault(part_at(i, &p.name), why))?;
            if !seen.insert(p.name.as_str()) {
                return fault(part_at(i, &p.name), "a part of that name is listed before");
            }
        }
        if self.records().is_none() {
            return fault("parts", "the record counts add up past 2^64 - 1");
        }
        Ok(())
    }

    /// The manifest's bytes.
    ///
    /// # Errors
    /// What [`check`](Manifest::check) finds; nothing is encoded then.
    pub fn encode(&self) -> Result<Vec<u8>, ManifestError> {
        self.check()?;
        let records = self.records().unwrap_or(0);
        let mut b = Vec::with_capacity(
            MANIFEST_HEADER_LEN + 4 + self.columns.len() * 64 + self.parts.len() * 24,
        );
        b.extend_from_slice(&MANIFEST_MAGIC);
        b.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&(self.columns.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.parts.len() as u64).to_le_bytes());
        b.extend_from_slice(&records.to_le_bytes());
        for c in &self.columns {
            b.push(c.name.len() as u8);
            b.extend_from_slice(c.name.as_bytes());
            let block = c.schema.encode();
            b.extend_from_slice(&(block.len() as u32).to_le_bytes());
            b.extend_from_slice(&block);
        }
        for p in &self.parts {
            b.extend_from_slice(&p.records.to_le_bytes());
            b.push(p.name.len() as u8);
            b.extend_from_slice(p.name.as_bytes());
        }
        let crc = crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        Ok(b)
    }

    /// Parses and checks a manifest.
    ///
    /// Checks, in order: the length covers the header and the checksum;
    /// the magic; the version; the CRC32C of everything before the last
    /// four bytes (nothing else is trusted before); the reserved field;
    /// the column and part counts against their limits and against the
    /// bytes there are; each column (name, schema block); each part
    /// (count, name); no trailing bytes; the header's record total equals
    /// the parts' sum; then [`check`](Manifest::check).
    ///
    /// # Errors
    /// A [`ManifestError`] naming the field and where it is.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let min = MANIFEST_HEADER_LEN + 4;
        if bytes.len() < min {
            return fault(
                "header",
                format!(
                    "{} bytes, shorter than the {min} of a header and checksum",
                    bytes.len()
                ),
            );
        }
        if bytes[..4] != MANIFEST_MAGIC {
            return fault(
                "header",
                format!("magic is {:?}, not \"ZCOL\"", &bytes[..4]),
            );
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != MANIFEST_VERSION {
            return fault(
                "header",
                format!("version {version}; this reader reads version {MANIFEST_VERSION}"),
            );
        }
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let computed = crc32c(body);
        if stored != computed {
            return fault(
                "checksum",
                format!(
                    "stored CRC32C {stored:#010x}, computed {computed:#010x}: the manifest is damaged"
                ),
            );
        }
        let mut r = Reader { bytes: body, at: 6 };
        let reserved = r.u16().unwrap_or(0);
        if reserved != 0 {
            return fault(
                "header",
                format!("reserved bytes 6..8 hold {reserved}, not 0"),
            );
        }
        let columns = r.u32().unwrap_or(0);
        let parts = r.u64().unwrap_or(0);
        let records = r.u64().unwrap_or(0);
        if columns == 0 || columns > MAX_COLUMNS {
            return fault("header", format!("{columns} columns (1..={MAX_COLUMNS})"));
        }
        if parts == 0 || parts > MAX_PARTS {
            return fault("header", format!("{parts} parts (1..={MAX_PARTS})"));
        }
        let left = r.left() as u64;
        let need = u64::from(columns) * MIN_COLUMN_LEN + parts * MIN_PART_LEN;
        if need > left {
            return fault(
                "header",
                format!(
                    "{columns} columns and {parts} parts need at least {need} bytes; {left} follow the header"
                ),
            );
        }
        let mut cols = Vec::with_capacity(columns as usize);
        for i in 0..columns as usize {
            cols.push(decode_column(&mut r, i)?);
        }
        let mut list = Vec::with_capacity(parts as usize);
        for i in 0..parts as usize {
            let Some(count) = r.u64() else {
                return fault(
                    format!("part {i}"),
                    "the manifest ends before its record count",
                );
            };
            let name = r.name().or_else(|why| fault(format!("part {i}"), why))?;
            list.push(Part {
                name,
                records: count,
            });
        }
        if r.left() != 0 {
            return fault("parts", format!("{} bytes follow the last part", r.left()));
        }
        let manifest = Manifest {
            columns: cols,
            parts: list,
        };
        match manifest.records() {
            Some(sum) if sum == records => {}
            Some(sum) => {
                return fault(
                    "header",
                    format!("records is {records}, but the parts hold {sum}"),
                );
            }
            None => return fault("parts", "the record counts add up past 2^64 - 1"),
        }
        manifest.check()?;
        Ok(manifest)
    }
}

/// Column `i`: `name_len u8 | name | schema_len u32 | schema block`.
fn decode_column(r: &mut Reader<'_>, i: usize) -> Result<Column, ManifestError> {
    let at = || format!("column {i}");
    let name = r.name().or_else(|why| fault(at(), why))?;
    let at = || column_at(i, &name);
    let Some(len) = r.u32() else {
        return fault(at(), "the manifest ends before its schema_len");
    };
    let Some(block) = r.take(len as usize) else {
        return fault(
            at(),
            format!("schema_len {len} runs past the end of the manifest"),
        );
    };
    let schema = Schema::decode(block, crc32c(block)).or_else(|e| {
        fault(
            at(),
            match e {
                FormatError::BadSchema(why) | FormatError::BadDictionary(why) => why,
                other => other.to_string(),
            },
        )
    })?;
    // One spelling per schema: bytes the decoder does not look at (a
    // dictionary checksum with no dictionary) must be what encode writes.
    if schema.encode() != block {
        return fault(
            at(),
            "the schema block is not in its canonical form (a field the schema does not use \
             is not zero)",
        );
    }
    Ok(Column { name, schema })
}

/// The rules of a column's schema beyond the v2 schema's own: a zstd
/// dictionary belongs to one store, so a column cannot name codec
/// `zstd_dict` (each part would need the same dictionary).
fn check_column_schema(schema: &Schema) -> Result<(), String> {
    schema.check().map_err(|e| e.to_string())?;
    if schema.codec == CodecTag::ZSTD_DICT || schema.dictionary.is_some() {
        return Err(
            "codec zstd_dict is per store (each part would have its own dictionary); a column \
             takes raw, deflate, zstd, lz4, jpeg, png or an external codec"
                .into(),
        );
    }
    Ok(())
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Some(u64::from_le_bytes(w))
    }
    /// A `name_len u8 | name` pair, checked by [`check_name`].
    fn name(&mut self) -> Result<String, String> {
        let len = self.take(1).ok_or("the manifest ends before its name")?[0];
        let raw = self
            .take(usize::from(len))
            .ok_or_else(|| format!("name of {len} bytes runs past the end of the manifest"))?;
        let name = std::str::from_utf8(raw)
            .map_err(|_| "name is not ASCII".to_string())?
            .to_owned();
        check_name(&name)?;
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v2::{CodecRef, Dtype, Kind};

    fn dense() -> Schema {
        Schema {
            kind: Kind::Dense,
            dtype: Dtype::from_name("<f4").unwrap(),
            shape: vec![2, 3],
            ndim: 2,
            codec: CodecTag::ZSTD,
            dictionary: None,
            codecs: Vec::new(),
        }
    }

    fn images() -> Schema {
        Schema {
            kind: Kind::Ragged,
            dtype: Dtype::U8,
            shape: Vec::new(),
            ndim: 3,
            codec: CodecTag::JPEG,
            dictionary: None,
            codecs: vec![
                CodecRef {
                    tag: CodecTag::JPEG,
                    name: "jpeg".into(),
                    version: 1,
                },
                CodecRef {
                    tag: CodecTag::PNG,
                    name: "png".into(),
                    version: 1,
                },
            ],
        }
    }

    fn sample() -> Manifest {
        Manifest {
            columns: vec![
                Column {
                    name: "x".into(),
                    schema: dense(),
                },
                Column {
                    name: "image".into(),
                    schema: images(),
                },
            ],
            parts: (0..5)
                .map(|i| Part {
                    name: format!("part-{i:05}"),
                    records: [3, 0, 7, 1, 2][i],
                })
                .collect(),
        }
    }

    /// Rewrites the trailing checksum so a mutation reaches the checks behind it.
    fn reseal(b: &mut [u8]) {
        let n = b.len() - 4;
        let crc = crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn round_trips() {
        let m = sample();
        let bytes = m.encode().unwrap();
        assert_eq!(Manifest::decode(&bytes).unwrap(), m);
        assert_eq!(m.records(), Some(13));
        assert_eq!(m.starts(), vec![0, 3, 3, 10, 11, 13]);
        assert_eq!(m.column("image").unwrap().0, 1);
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_refused() {
        let bytes = sample().encode().unwrap();
        for n in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            let err = Manifest::decode(&b).unwrap_err();
            assert!(!err.to_string().is_empty());
        }
    }

    #[test]
    fn refusals_name_what_and_where() {
        let good = sample().encode().unwrap();
        // Damage without a new checksum: the checksum says so.
        let mut b = good.clone();
        b[20] ^= 1;
        assert_eq!(Manifest::decode(&b).unwrap_err().at, "checksum");
        // The record total disagrees with the parts.
        let mut b = good.clone();
        b[20] ^= 1;
        reseal(&mut b);
        let err = Manifest::decode(&b).unwrap_err();
        assert_eq!(err.at, "header");
        assert!(err.reason.contains("the parts hold 13"), "{err}");
        // A part count far past the bytes: refused before any allocation.
        let mut b = good.clone();
        b[12..20].copy_from_slice(&(1u64 << 31).to_le_bytes());
        reseal(&mut b);
        assert!(
            Manifest::decode(&b)
                .unwrap_err()
                .reason
                .contains("need at least")
        );
        // A version from the future.
        let mut b = good.clone();
        b[4] = 9;
        assert!(
            Manifest::decode(&b)
                .unwrap_err()
                .reason
                .contains("version 9")
        );
        // Trailing bytes.
        let mut b = good[..good.len() - 4].to_vec();
        b.extend_from_slice(&[0, 0, 0, 0, 0]);
        reseal(&mut b);
        assert!(
            Manifest::decode(&b)
                .unwrap_err()
                .reason
                .contains("follow the last part")
        );
    }

    #[test]
    fn a_schema_block_in_another_spelling_is_refused() {
        // Column 0's block: a dictionary checksum with no dictionary (the
        // v2 decoder ignores it, so only the manifest's rule catches it).
        let mut b = sample().encode().unwrap();
        let block_at = MANIFEST_HEADER_LEN + 1 + 1 + 4;
        // ZSCH kind codec ndim dtype_len "<f4" shape(2 x u64) dict_len dict_crc
        let crc_at = block_at + 4 + 4 + 3 + 16 + 4;
        b[crc_at + 2] = 6;
        reseal(&mut b);
        let err = Manifest::decode(&b).unwrap_err();
        assert_eq!(err.at, "column 0 (\"x\")");
        assert!(err.reason.contains("canonical"), "{err}");
    }

    #[test]
    fn check_refuses_inconsistent_manifests() {
        let mut m = sample();
        m.parts[3].name = "part-00000".into();
        let err = m.encode().unwrap_err();
        assert_eq!(err.at, "part 3 (\"part-00000\")");
        let mut m = sample();
        m.columns[1].name = "x".into();
        assert!(m.check().unwrap_err().reason.contains("listed before"));
        let mut m = sample();
        m.parts[0].name = ".tmp".into();
        assert!(m.check().unwrap_err().reason.contains("temporary"));
        let mut m = sample();
        m.parts[0].name = "a/b".into();
        assert!(m.check().is_err());
        let mut m = sample();
        m.parts[0].records = u64::MAX;
        assert!(m.check().unwrap_err().reason.contains("2^64"));
        let mut m = sample();
        m.columns[0].schema.codec = CodecTag::ZSTD_DICT;
        m.columns[0].schema.dictionary = Some(vec![1; 16]);
        assert!(m.check().unwrap_err().reason.contains("zstd_dict"));
        let mut m = sample();
        m.parts.clear();
        assert!(m.check().is_err());
        let mut m = sample();
        m.columns.clear();
        assert!(m.check().is_err());
        assert!(check_name(MANIFEST_FILE).is_err());
        assert!(check_name(&"a".repeat(65)).is_err());
        assert!(check_name("part-00001").is_ok());
    }

    #[test]
    fn a_hundred_thousand_parts_stay_compact() {
        let m = Manifest {
            columns: sample().columns,
            parts: (0..100_000)
                .map(|i| Part {
                    name: format!("part-{i:05}"),
                    records: 10,
                })
                .collect(),
        };
        let bytes = m.encode().unwrap();
        // 8 + 1 + 10 bytes a part.
        assert!(bytes.len() < 100_000 * 19 + 200, "{}", bytes.len());
        assert_eq!(Manifest::decode(&bytes).unwrap().records(), Some(1_000_000));
    }
}
