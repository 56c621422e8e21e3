//! The v2 schema block: what the records of a store are.
//!
//! ```text
//! 0      4     5      6     7          8            8 + dtype_len
//! | ZSCH | kind | codec | ndim | dtype_len | dtype (ASCII) | dense: ndim × u64 dim | dict_len: u32 | dict_crc: u32 | dictionary |
//! [ | ZCDC | count: u8 | count × (id: u8 | version: u32 | name_len: u8 | name (ASCII)) | ]
//! ```
//!
//! The header holds the block's length and CRC32C; the dictionary carries
//! its own CRC32C so damage to it is reported as such. The codec table
//! (`ZCDC`) is present only when the store may hold records of codecs past
//! format v2's own (tags 5, 6 and `128 ..= 255`); readers from before it
//! refuse such a block for its trailing bytes, so they never mis-decode.

use std::fmt;

use crate::{CodecTag, FormatError, v2::MAX_RECORD_LEN_V2};

/// Most dimensions of a dense item shape or a ragged record.
pub const MAX_NDIM: usize = 16;

/// Largest zstd dictionary a schema may carry.
pub const MAX_DICT_LEN: usize = 4 << 20;

/// Most bytes a schema block can have: every part at its largest (the
/// dtype name, a dense shape of [`MAX_NDIM`] dimensions, the largest
/// dictionary, a full codec table). A header that says more is damaged, and
/// is refused before a block that large is read.
pub const MAX_SCHEMA_LEN: u32 = (8
    + MAX_DTYPE_NAME
    + 8 * MAX_NDIM
    + 8
    + MAX_DICT_LEN
    + CODECS_MAGIC.len()
    + 1
    + 255 * (6 + MAX_CODEC_NAME)) as u32;

const MAGIC: [u8; 4] = *b"ZSCH";
const CODECS_MAGIC: [u8; 4] = *b"ZCDC";

/// Most bytes of a codec's name in the codec table.
pub const MAX_CODEC_NAME: usize = 64;

/// One codec of a schema's codec table: a codec past format v2's own that
/// the store's records may use, named so a reader that lacks it can say
/// which one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CodecRef {
    /// Its tag: 5 (`jpeg`), 6 (`png`) or `128 ..= 255`.
    pub tag: CodecTag,
    /// Its name: printable ASCII, `1 ..= 64` bytes; `jpeg` and `png` for
    /// tags 5 and 6.
    pub name: String,
    /// The version of its encoding that wrote the store.
    pub version: u32,
}

impl CodecRef {
    fn check(&self) -> Result<(), String> {
        if !(self.tag.0 > 4 && self.tag.is_allowed_v2()) {
            return Err(format!(
                "codec table entry {:?} has tag {}: only 5, 6 and 128..=255 are listed",
                self.name, self.tag.0
            ));
        }
        if self.name.is_empty()
            || self.name.len() > MAX_CODEC_NAME
            || !self.name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(format!(
                "codec table entry for tag {} has name {:?}: 1..={MAX_CODEC_NAME} printable ASCII bytes",
                self.tag.0, self.name
            ));
        }
        if let Some(fixed) = self.tag.name()
            && fixed != self.name
        {
            return Err(format!(
                "codec tag {} is {fixed:?} in format v2, not {:?}",
                self.tag.0, self.name
            ));
        }
        Ok(())
    }
}

/// A schema that breaks a rule of the format, refused by
/// [`Schema::check`] before anything is written: an invalid argument of
/// the store's creation, named. (A schema block read from disk that breaks
/// a rule is damaged instead: [`FormatError::BadSchema`].)
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaError {
    /// The field at fault, as creation spells it: `codec`, `codecs`,
    /// `dtype`, `shape`, `ndim` or `dictionary`.
    pub argument: &'static str,
    /// The rule it breaks, with the value given.
    pub reason: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.argument, self.reason)
    }
}

impl std::error::Error for SchemaError {}

/// A refusal of `argument`, for [`Schema::check`].
fn invalid(argument: &'static str, reason: String) -> Result<(), SchemaError> {
    Err(SchemaError { argument, reason })
}

/// What the records of a store are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Untyped byte records (the `Zrecord`/`Dataset` surface).
    Bytes,
    /// Every record is one item of a fixed dtype and shape.
    Dense,
    /// Every record is an array of a fixed dtype and rank, each with its own shape.
    Ragged,
}

/// Longest dtype spelling a schema may hold (`|S2147483647` is 12 bytes,
/// `>m8[2147483647as]` 18).
pub const MAX_DTYPE_NAME: usize = 24;

/// A NumPy dtype the typed containers store, by its canonical spelling
/// (`dtype.str`): a number (bool, integer, float, complex) of either byte
/// order ([`NUMBERS`](Dtype::NUMBERS)); an `ml_dtypes` float by its name
/// ([`ML_FLOATS`](Dtype::ML_FLOATS)); fixed-width bytes (`|S<n>`), raw
/// bytes (`|V<n>`) or Unicode (`<U<n>`, `>U<n>`, 4 bytes a character); or a
/// datetime or timedelta with a unit (`<M8[ns]`, `>m8[10s]`). Never objects,
/// fields, sub-arrays or zero-size items. The records hold the elements in
/// the dtype's own byte order (a `>i4` store keeps big-endian bytes, as
/// NumPy does in memory).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dtype {
    name: [u8; MAX_DTYPE_NAME],
    len: u8,
    itemsize: u32,
}

impl fmt::Debug for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dtype({:?}, {})", self.name(), self.itemsize)
    }
}

/// The units of NumPy's datetime64 and timedelta64, as `dtype.str` spells them.
const TIME_UNITS: [&str; 13] = [
    "Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as",
];

/// A decimal count as NumPy spells one: digits, no leading zero, 1 up to
/// `i32::MAX`.
fn count(digits: &str) -> Option<u32> {
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse::<u32>()
        .ok()
        .filter(|&n| i32::try_from(n).is_ok())
}

impl Dtype {
    /// Every number dtype, in its canonical NumPy spelling.
    pub const NUMBERS: [Dtype; 25] = [
        Dtype::known("|b1", 1),
        Dtype::known("|i1", 1),
        Dtype::known("|u1", 1),
        Dtype::known("<i2", 2),
        Dtype::known("<u2", 2),
        Dtype::known("<i4", 4),
        Dtype::known("<u4", 4),
        Dtype::known("<i8", 8),
        Dtype::known("<u8", 8),
        Dtype::known("<f2", 2),
        Dtype::known("<f4", 4),
        Dtype::known("<f8", 8),
        Dtype::known("<c8", 8),
        Dtype::known("<c16", 16),
        Dtype::known(">i2", 2),
        Dtype::known(">u2", 2),
        Dtype::known(">i4", 4),
        Dtype::known(">u4", 4),
        Dtype::known(">i8", 8),
        Dtype::known(">u8", 8),
        Dtype::known(">f2", 2),
        Dtype::known(">f4", 4),
        Dtype::known(">f8", 8),
        Dtype::known(">c8", 8),
        Dtype::known(">c16", 16),
    ];

    /// The machine-learning floats of `ml_dtypes` (`DLPack` 1.1 names most of them),
    /// spelled by their `ml_dtypes` name: `bfloat16` and every 8-bit float.
    /// NumPy's `dtype.str` cannot tell them apart (`<V2`, `<V1`, `<f1`), so
    /// the name is the spelling. Their elements are little-endian.
    pub const ML_FLOATS: [Dtype; 10] = [
        Dtype::known("bfloat16", 2),
        Dtype::known("float8_e3m4", 1),
        Dtype::known("float8_e4m3", 1),
        Dtype::known("float8_e4m3b11fnuz", 1),
        Dtype::known("float8_e4m3fn", 1),
        Dtype::known("float8_e4m3fnuz", 1),
        Dtype::known("float8_e5m2", 1),
        Dtype::known("float8_e5m2fnuz", 1),
        Dtype::known("float8_e5m3fnu", 1),
        Dtype::known("float8_e8m0fnu", 1),
    ];

    /// Unsigned bytes, the dtype of a bytes store.
    pub const U8: Dtype = Dtype::known("|u1", 1);

    /// A dtype from a spelling known to be canonical and short enough.
    const fn known(name: &str, itemsize: u32) -> Dtype {
        let bytes = name.as_bytes();
        assert!(bytes.len() <= MAX_DTYPE_NAME);
        let mut buf = [0u8; MAX_DTYPE_NAME];
        let mut i = 0;
        while i < bytes.len() {
            buf[i] = bytes[i];
            i += 1;
        }
        Dtype {
            name: buf,
            len: bytes.len() as u8,
            itemsize,
        }
    }

    /// The dtype spelled `name` (canonical NumPy `dtype.str`), if a store
    /// may hold it.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Dtype> {
        if let Some(d) = Dtype::NUMBERS
            .iter()
            .chain(&Dtype::ML_FLOATS)
            .find(|d| d.name() == name)
        {
            return Some(*d);
        }
        if name.len() < 3 || name.len() > MAX_DTYPE_NAME || !name.is_ascii() {
            return None;
        }
        let (head, rest) = name.split_at(2);
        let itemsize = match head {
            "|S" | "|V" => count(rest)?,
            "<U" | ">U" => count(rest)?
                .checked_mul(4)
                .filter(|&n| i32::try_from(n).is_ok())?,
            "<M" | ">M" | "<m" | ">m" => {
                let unit = rest.strip_prefix("8[")?.strip_suffix(']')?;
                let at = unit
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(unit.len());
                let (times, unit) = unit.split_at(at);
                // NumPy spells a multiple of one unit as the bare unit.
                if !times.is_empty() && count(times).is_none_or(|n| n == 1) {
                    return None;
                }
                if !TIME_UNITS.contains(&unit) {
                    return None;
                }
                8
            }
            _ => return None,
        };
        Some(Dtype::known(name, itemsize))
    }

    /// The canonical spelling (`"<f4"`).
    #[must_use]
    pub fn name(&self) -> &str {
        // The bytes are a prefix of an ASCII `&str` (`known`'s argument).
        std::str::from_utf8(&self.name[..usize::from(self.len)]).unwrap_or("")
    }

    /// Whether this is one of [`ML_FLOATS`](Dtype::ML_FLOATS).
    #[must_use]
    pub fn is_ml_float(&self) -> bool {
        Dtype::ML_FLOATS.contains(self)
    }

    /// Bytes per element.
    #[must_use]
    pub fn itemsize(self) -> u32 {
        self.itemsize
    }
}

/// A store's schema block, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// What the records are.
    pub kind: Kind,
    /// Element type (`|u1` for bytes stores).
    pub dtype: Dtype,
    /// Dense: the item shape (empty for scalar records). Ragged and bytes: empty.
    pub shape: Vec<u64>,
    /// Ragged: the rank of every record. Dense: `shape.len()`. Bytes: 0.
    pub ndim: u8,
    /// The codec appends use.
    pub codec: CodecTag,
    /// The zstd dictionary (`zstd_dict` stores only).
    pub dictionary: Option<Vec<u8>>,
    /// The codecs past format v2's own (tags 5, 6, `128 ..= 255`) the
    /// store's records may use, in tag order; empty for most stores.
    pub codecs: Vec<CodecRef>,
}

/// What a schema holds, as an error message shows it: `dense <f4 (2, 3),
/// zstd`, `ragged |u1 of rank 3, png`, `bytes, raw`.
impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Bytes => write!(f, "bytes")?,
            Kind::Dense => {
                let dims: Vec<String> = self.shape.iter().map(u64::to_string).collect();
                let trailing = if dims.len() == 1 { "," } else { "" };
                write!(
                    f,
                    "dense {} ({}{trailing})",
                    self.dtype.name(),
                    dims.join(", ")
                )?;
            }
            Kind::Ragged => write!(f, "ragged {} of rank {}", self.dtype.name(), self.ndim)?,
        }
        match self.codec.name() {
            Some(codec) => write!(f, ", {codec}"),
            None => write!(f, ", codec tag {}", self.codec.0),
        }
    }
}

impl Schema {
    /// Untyped byte records, compressed with `codec`.
    #[must_use]
    pub fn bytes(codec: CodecTag) -> Schema {
        Schema {
            kind: Kind::Bytes,
            dtype: Dtype::U8,
            shape: Vec::new(),
            ndim: 0,
            codec,
            dictionary: None,
            codecs: Vec::new(),
        }
    }

    /// Whether the store's codec encodes records (anything but `raw`):
    /// readers then check every record's CRC32C, the ones kept raw
    /// because they did not shrink included (`docs/FORMAT.md`, "Checksums").
    #[must_use]
    pub fn compresses(&self) -> bool {
        self.codec != CodecTag::RAW
    }

    /// The codec table's entry for `tag`, if the store lists it.
    #[must_use]
    pub fn codec_ref(&self, tag: CodecTag) -> Option<&CodecRef> {
        self.codecs.iter().find(|c| c.tag == tag)
    }

    /// Bytes of one dense item (`None` for other kinds).
    #[must_use]
    pub fn item_len(&self) -> Option<u64> {
        (self.kind == Kind::Dense).then(|| {
            self.shape
                .iter()
                .fold(u64::from(self.dtype.itemsize()), |a, &d| {
                    a.saturating_mul(d)
                })
        })
    }

    /// Dimensions stored in each table entry (the rank for ragged stores).
    #[must_use]
    pub fn entry_dims(&self) -> usize {
        if self.kind == Kind::Ragged {
            usize::from(self.ndim)
        } else {
            0
        }
    }

    /// Checks the schema's own rules (what [`decode`](Schema::decode) checks
    /// after parsing), so a bad one is refused before it is written.
    ///
    /// # Errors
    /// [`SchemaError`] naming the field that breaks a rule (`codec`,
    /// `codecs`, `dtype`, `shape`, `ndim` or `dictionary`) and why.
    pub fn check(&self) -> Result<(), SchemaError> {
        if !self.codec.is_allowed_v2() {
            return invalid("codec", format!("unknown codec tag {}", self.codec.0));
        }
        if self.codecs.len() > usize::from(u8::MAX) {
            return invalid(
                "codecs",
                format!(
                    "{} codecs in the codec table (at most 255)",
                    self.codecs.len()
                ),
            );
        }
        for (i, c) in self.codecs.iter().enumerate() {
            c.check().map_err(|reason| SchemaError {
                argument: "codecs",
                reason,
            })?;
            if i > 0 && self.codecs[i - 1].tag >= c.tag {
                return invalid(
                    "codecs",
                    "the codec table is not in strictly increasing tag order".into(),
                );
            }
        }
        if !self.codec.is_known_v2() && self.codec_ref(self.codec).is_none() {
            return invalid(
                "codec",
                format!(
                    "codec tag {} is not listed in the schema's codec table",
                    self.codec.0
                ),
            );
        }
        self.check_geometry()?;
        self.check_image()?;
        self.check_dictionary()
    }

    /// The dtype, item shape and rank of the schema's kind.
    fn check_geometry(&self) -> Result<(), SchemaError> {
        match self.kind {
            Kind::Bytes => {
                if self.dtype != Dtype::U8 {
                    return invalid(
                        "dtype",
                        format!("a bytes store has dtype |u1, not {}", self.dtype.name()),
                    );
                }
                if self.ndim != 0 || !self.shape.is_empty() {
                    return invalid("shape", "a bytes store has no shape".into());
                }
            }
            Kind::Dense => {
                if self.shape.len() > MAX_NDIM {
                    return invalid(
                        "shape",
                        format!(
                            "item shape has {} dimensions (at most {MAX_NDIM})",
                            self.shape.len()
                        ),
                    );
                }
                if usize::from(self.ndim) != self.shape.len() {
                    return invalid(
                        "ndim",
                        format!(
                            "ndim {} of a dense store is not its item shape's {} dimensions",
                            self.ndim,
                            self.shape.len()
                        ),
                    );
                }
                if let Some(k) = self.shape.iter().position(|&d| d == 0) {
                    return invalid(
                        "shape",
                        format!(
                            "item shape {:?} has dimension {k} = 0 (zero-size records are refused)",
                            self.shape
                        ),
                    );
                }
                let len = self.item_len().unwrap_or(u64::MAX);
                if len > u64::from(MAX_RECORD_LEN_V2) {
                    let len = if len == u64::MAX {
                        "over 2^64 - 1".to_owned()
                    } else {
                        len.to_string()
                    };
                    return invalid(
                        "shape",
                        format!(
                            "one item of shape {:?} and dtype {} is {len} bytes, over the \
                             {MAX_RECORD_LEN_V2}-byte record limit",
                            self.shape,
                            self.dtype.name()
                        ),
                    );
                }
            }
            Kind::Ragged => {
                if self.ndim == 0 || usize::from(self.ndim) > MAX_NDIM {
                    return invalid(
                        "ndim",
                        format!("ragged rank {} is outside 1..={MAX_NDIM}", self.ndim),
                    );
                }
                if !self.shape.is_empty() {
                    return invalid(
                        "shape",
                        "a ragged store has no item shape (each record has its own)".into(),
                    );
                }
            }
        }
        Ok(())
    }

    /// An image codec's uint8 RGB records.
    fn check_image(&self) -> Result<(), SchemaError> {
        if self.codec.is_image() {
            let name = self.codec.name().unwrap_or("image");
            let rule = "stores uint8 RGB images: dtype |u1 and item shape (H, W, 3) or \
                        (3, H, W) with sides up to 65535 (dense), or ndim 3 (ragged)";
            let side = |d: u64| d <= 65_535;
            let (argument, fits) = match self.kind {
                Kind::Dense => (
                    "shape",
                    match self.shape[..] {
                        [h, w, 3] | [3, h, w] => side(h) && side(w),
                        _ => false,
                    },
                ),
                Kind::Ragged => ("ndim", self.ndim == 3),
                Kind::Bytes => ("codec", false),
            };
            if self.dtype != Dtype::U8 {
                return invalid(
                    "dtype",
                    format!(
                        "codec {name} {rule}; dtype {} is not |u1",
                        self.dtype.name()
                    ),
                );
            }
            if !fits {
                return invalid(argument, format!("codec {name} {rule}"));
            }
        }
        Ok(())
    }

    /// A dictionary exactly for codec `zstd_dict`, of a size it may have.
    fn check_dictionary(&self) -> Result<(), SchemaError> {
        match (&self.dictionary, self.codec == CodecTag::ZSTD_DICT) {
            (None, true) => invalid("dictionary", "codec zstd_dict needs a dictionary".into()),
            (Some(_), false) => invalid(
                "dictionary",
                "a dictionary is only kept for codec zstd_dict".into(),
            ),
            (Some(d), true) if d.is_empty() || d.len() > MAX_DICT_LEN => invalid(
                "dictionary",
                format!("dictionary is {} bytes (1..={MAX_DICT_LEN})", d.len()),
            ),
            _ => Ok(()),
        }
    }

    /// The block's bytes.
    ///
    /// # Panics
    /// If the schema breaks its rules ([`check`](Schema::check) it first).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        self.check()
            .expect("a schema is checked before it is encoded");
        let dict = self.dictionary.as_deref().unwrap_or(&[]);
        let mut b = Vec::with_capacity(24 + self.shape.len() * 8 + dict.len());
        b.extend_from_slice(&MAGIC);
        b.push(match self.kind {
            Kind::Bytes => 0,
            Kind::Dense => 1,
            Kind::Ragged => 2,
        });
        b.push(self.codec.0);
        b.push(self.ndim);
        let name = self.dtype.name().as_bytes();
        b.push(name.len() as u8);
        b.extend_from_slice(name);
        for d in &self.shape {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        b.extend_from_slice(&super::crc32c(dict).to_le_bytes());
        b.extend_from_slice(dict);
        if !self.codecs.is_empty() {
            b.extend_from_slice(&CODECS_MAGIC);
            b.push(self.codecs.len() as u8);
            for c in &self.codecs {
                b.push(c.tag.0);
                b.extend_from_slice(&c.version.to_le_bytes());
                b.push(c.name.len() as u8);
                b.extend_from_slice(c.name.as_bytes());
            }
        }
        b
    }

    /// Parses and checks a schema block whose CRC32C the header gives as `crc`.
    ///
    /// # Errors
    /// [`FormatError::BadSchema`] or [`FormatError::BadDictionary`] saying
    /// what is wrong; nothing is trusted before its checksum matched.
    pub fn decode(bytes: &[u8], crc: u32) -> Result<Schema, FormatError> {
        let bad = |why: String| Err(FormatError::BadSchema(why));
        let computed = super::crc32c(bytes);
        if computed != crc {
            // Say which part is damaged when the dictionary's own checksum
            // fails too (parsing untrusted bytes is bounds-checked).
            if let Some(why) = damaged_dictionary(bytes) {
                return Err(FormatError::BadDictionary(why));
            }
            return bad(format!(
                "schema checksum mismatch (header says {crc:#010x}, block has {computed:#010x})"
            ));
        }
        let mut r = Reader { bytes, at: 0 };
        if r.take(4) != Some(&MAGIC[..]) {
            return bad("schema block does not start with \"ZSCH\"".into());
        }
        let (Some(kind), Some(codec), Some(ndim), Some(name_len)) =
            (r.u8(), r.u8(), r.u8(), r.u8())
        else {
            return bad("schema block is truncated".into());
        };
        let kind = match kind {
            0 => Kind::Bytes,
            1 => Kind::Dense,
            2 => Kind::Ragged,
            k => return bad(format!("unknown record kind {k}")),
        };
        let name = r.take(usize::from(name_len)).unwrap_or(&[]);
        let Some(dtype) = std::str::from_utf8(name).ok().and_then(Dtype::from_name) else {
            return bad(format!(
                "unsupported dtype {:?}",
                String::from_utf8_lossy(name)
            ));
        };
        let mut shape = Vec::new();
        if kind == Kind::Dense {
            if usize::from(ndim) > MAX_NDIM {
                return bad(format!(
                    "item shape has {ndim} dimensions (at most {MAX_NDIM})"
                ));
            }
            for _ in 0..ndim {
                let Some(d) = r.u64() else {
                    return bad("schema block is truncated".into());
                };
                shape.push(d);
            }
        }
        let (Some(dict_len), Some(dict_crc)) = (r.u32(), r.u32()) else {
            return bad("schema block is truncated".into());
        };
        let dictionary = if dict_len == 0 {
            None
        } else if dict_len as usize > MAX_DICT_LEN {
            return Err(FormatError::BadDictionary(format!(
                "dictionary is {dict_len} bytes, over the {MAX_DICT_LEN}-byte limit"
            )));
        } else {
            let Some(dict) = r.take(dict_len as usize) else {
                return Err(FormatError::BadDictionary(format!(
                    "dictionary of {dict_len} bytes runs past the schema block"
                )));
            };
            let got = super::crc32c(dict);
            if got != dict_crc {
                return Err(FormatError::BadDictionary(format!(
                    "dictionary checksum mismatch (stored {dict_crc:#010x}, computed {got:#010x})"
                )));
            }
            Some(dict.to_vec())
        };
        let codecs = if r.at != bytes.len() && r.bytes[r.at..].starts_with(&CODECS_MAGIC) {
            r.at += CODECS_MAGIC.len();
            read_codec_table(&mut r)?
        } else {
            Vec::new()
        };
        if r.at != bytes.len() {
            return bad(format!(
                "{} unexpected bytes after the schema",
                bytes.len() - r.at
            ));
        }
        let schema = Schema {
            kind,
            dtype,
            shape,
            ndim,
            codec: CodecTag(codec),
            dictionary,
            codecs,
        };
        // A block that passed its checksum but breaks a rule is damaged
        // (or written by a buggy writer): never "invalid argument".
        schema
            .check()
            .map_err(|e| FormatError::BadSchema(e.reason))?;
        Ok(schema)
    }
}

/// Reads the codec table after its magic.
fn read_codec_table(r: &mut Reader<'_>) -> Result<Vec<CodecRef>, FormatError> {
    let truncated = || FormatError::BadSchema("codec table is truncated".into());
    let count = r.u8().ok_or_else(truncated)?;
    if count == 0 {
        return Err(FormatError::BadSchema(
            "empty codec table (it is left out when empty)".into(),
        ));
    }
    let mut codecs = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let (Some(tag), Some(version), Some(name_len)) = (r.u8(), r.u32(), r.u8()) else {
            return Err(truncated());
        };
        let name = r.take(usize::from(name_len)).ok_or_else(truncated)?;
        codecs.push(CodecRef {
            tag: CodecTag(tag),
            name: String::from_utf8_lossy(name).into_owned(),
            version,
        });
    }
    Ok(codecs)
}

/// Why the dictionary in an (untrusted) schema block is damaged, if its own
/// checksum says it is.
fn damaged_dictionary(bytes: &[u8]) -> Option<String> {
    let mut r = Reader { bytes, at: 4 };
    let (kind, _, ndim, name_len) = (r.u8()?, r.u8()?, r.u8()?, r.u8()?);
    r.take(usize::from(name_len))?;
    if kind == 1 {
        r.take(8 * usize::from(ndim))?;
    }
    let (len, stored) = (r.u32()?, r.u32()?);
    let dict = r.bytes.get(r.at..)?;
    let dict = dict.get(..(len as usize).min(dict.len()))?;
    let got = super::crc32c(dict);
    (len > 0 && got != stored).then(|| {
        format!("dictionary checksum mismatch (stored {stored:#010x}, computed {got:#010x})")
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense() -> Schema {
        Schema {
            kind: Kind::Dense,
            dtype: Dtype::from_name("<f4").unwrap(),
            shape: vec![3, 64, 64],
            ndim: 3,
            codec: CodecTag::ZSTD,
            dictionary: None,
            codecs: Vec::new(),
        }
    }

    #[test]
    fn round_trips() {
        for s in [
            dense(),
            Schema::bytes(CodecTag::FLATE),
            Schema {
                kind: Kind::Ragged,
                dtype: Dtype::from_name("<i4").unwrap(),
                shape: vec![],
                ndim: 1,
                codec: CodecTag::ZSTD_DICT,
                dictionary: Some(vec![1, 2, 3]),
                codecs: Vec::new(),
            },
            Schema {
                codec: CodecTag(200),
                codecs: vec![
                    CodecRef {
                        tag: CodecTag::JPEG,
                        name: "jpeg".into(),
                        version: 1,
                    },
                    CodecRef {
                        tag: CodecTag(200),
                        name: "delta-rle".into(),
                        version: 7,
                    },
                ],
                ..Schema::bytes(CodecTag::RAW)
            },
        ] {
            let b = s.encode();
            assert_eq!(Schema::decode(&b, crate::v2::crc32c(&b)), Ok(s));
        }
        assert_eq!(dense().item_len(), Some(4 * 3 * 64 * 64));
    }

    #[test]
    fn refuses_bad_schemas() {
        let mut s = dense();
        s.shape[1] = 0;
        assert!(s.check().is_err());
        let mut s = dense();
        s.codec = CodecTag::ZSTD_DICT;
        assert!(s.check().unwrap_err().to_string().contains("dictionary"));
        let b = dense().encode();
        assert!(Schema::decode(&b, 0).is_err());
        let mut t = b.clone();
        t.push(0);
        assert!(Schema::decode(&t, crate::v2::crc32c(&t)).is_err());
        assert!(Schema::decode(&b[..10], crate::v2::crc32c(&b[..10])).is_err());
        assert!(Dtype::from_name("<f16").is_none() && Dtype::from_name("|O").is_none());
        assert!(Dtype::from_name(">u1").is_none() && Dtype::from_name("=i4").is_none());
    }

    #[test]
    fn check_names_the_argument_at_fault() {
        let f4 = Dtype::from_name("<f4").unwrap();
        let jpeg = vec![CodecRef {
            tag: CodecTag::JPEG,
            name: "jpeg".into(),
            version: 1,
        }];
        let cases = [
            (
                "shape",
                Schema {
                    shape: vec![3, 0, 64],
                    ..dense()
                },
                "dimension 1 = 0",
            ),
            (
                "shape",
                Schema {
                    shape: vec![1 << 40; 3],
                    ..dense()
                },
                "over 2^64 - 1 bytes",
            ),
            (
                "ndim",
                Schema { ndim: 2, ..dense() },
                "not its item shape's 3",
            ),
            (
                "dtype",
                Schema {
                    shape: vec![8, 8, 3],
                    codec: CodecTag::JPEG,
                    codecs: jpeg.clone(),
                    ..dense()
                },
                "dtype <f4 is not |u1",
            ),
            (
                "shape",
                Schema {
                    dtype: Dtype::U8,
                    shape: vec![8, 8, 4],
                    codec: CodecTag::JPEG,
                    codecs: jpeg,
                    ..dense()
                },
                "uint8 RGB",
            ),
            (
                "dtype",
                Schema {
                    dtype: f4,
                    ..Schema::bytes(CodecTag::RAW)
                },
                "|u1",
            ),
            (
                "ndim",
                Schema {
                    kind: Kind::Ragged,
                    shape: vec![],
                    ndim: 0,
                    ..dense()
                },
                "rank 0",
            ),
            (
                "codec",
                Schema {
                    codec: CodecTag(9),
                    ..dense()
                },
                "tag 9",
            ),
            (
                "dictionary",
                Schema {
                    dictionary: Some(vec![1]),
                    ..dense()
                },
                "only kept for codec zstd_dict",
            ),
        ];
        for (argument, schema, fragment) in cases {
            let err = schema.check().unwrap_err();
            assert_eq!(err.argument, argument, "{err}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("invalid {argument}: ")) && text.contains(fragment),
                "{text}"
            );
            assert!(!text.contains("damaged"), "{text}");
        }
    }

    #[test]
    fn a_block_read_back_that_breaks_a_rule_is_damaged() {
        // Not a bad argument: its checksum matches, but it breaks a rule.
        let mut block = dense().encode();
        let dims = 8 + "<f4".len();
        block[dims + 8..dims + 16].copy_from_slice(&0u64.to_le_bytes());
        let err = Schema::decode(&block, crate::v2::crc32c(&block)).unwrap_err();
        assert!(matches!(err, FormatError::BadSchema(_)), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with("damaged or invalid schema block: ") && text.contains("= 0"),
            "{text}"
        );
    }

    #[test]
    fn strings_bytes_and_times_parse_as_numpy_spells_them() {
        for (name, itemsize) in [
            ("|S1", 1),
            ("|S2147483647", 2_147_483_647),
            ("|V16", 16),
            ("<U5", 20),
            (">U1", 4),
            ("<M8[ns]", 8),
            (">M8[D]", 8),
            ("<m8[10s]", 8),
            (">m8[as]", 8),
            ("<M8[Y]", 8),
        ] {
            let d = Dtype::from_name(name).unwrap_or_else(|| panic!("{name} refused"));
            assert_eq!((d.name(), d.itemsize()), (name, itemsize));
            let mut schema = dense();
            schema.dtype = d;
            (schema.shape, schema.ndim) = (vec![1], 1);
            let block = schema.encode();
            assert_eq!(
                Schema::decode(&block, crate::v2::crc32c(&block)).unwrap(),
                schema
            );
        }
        for name in [
            "|S0",
            "|S01",
            "<S5",
            "|S",
            "|S2147483648",
            "|V0",
            "|U5",
            "<U536870912",
            "<M8",
            "<M8[]",
            "<M8[1s]",
            "<M8[0s]",
            "<M8[01s]",
            "<M8[sec]",
            "|M8[s]",
            "<M4[s]",
            "<M8[s",
            "|O",
            "<f16",
            "=i4",
            ">u1",
            "",
            "<U5\u{e9}",
        ] {
            assert!(Dtype::from_name(name).is_none(), "{name:?} accepted");
        }
        let long = format!("<m8[{}s]", "9".repeat(MAX_DTYPE_NAME));
        assert!(Dtype::from_name(&long).is_none());
    }

    #[test]
    fn ml_floats_are_named_and_round_trip() {
        for (name, itemsize) in [
            ("bfloat16", 2),
            ("float8_e3m4", 1),
            ("float8_e4m3", 1),
            ("float8_e4m3b11fnuz", 1),
            ("float8_e4m3fn", 1),
            ("float8_e4m3fnuz", 1),
            ("float8_e5m2", 1),
            ("float8_e5m2fnuz", 1),
            ("float8_e5m3fnu", 1),
            ("float8_e8m0fnu", 1),
        ] {
            let d = Dtype::from_name(name).unwrap_or_else(|| panic!("{name} refused"));
            assert_eq!(
                (d.name(), d.itemsize(), d.is_ml_float()),
                (name, itemsize, true)
            );
            for kind in [Kind::Dense, Kind::Ragged] {
                let mut schema = dense();
                (schema.kind, schema.dtype) = (kind, d);
                if kind == Kind::Ragged {
                    (schema.shape, schema.ndim) = (vec![], 2);
                }
                let block = schema.encode();
                assert_eq!(
                    Schema::decode(&block, crate::v2::crc32c(&block)).unwrap(),
                    schema
                );
            }
        }
        // Only the exact names: NumPy's `dtype.str` of these (`<V2`, `<f1`)
        // and near misses are not dtypes of the table.
        for name in [
            "<V2",
            "<f1",
            "Bfloat16",
            "float8",
            "float8_e4m3fn ",
            "bfloat16\0",
        ] {
            assert!(Dtype::from_name(name).is_none(), "{name:?} accepted");
        }
        assert!(!Dtype::from_name("<f4").unwrap().is_ml_float());
    }

    #[test]
    fn every_multi_byte_number_comes_in_both_byte_orders() {
        for d in Dtype::NUMBERS {
            let (order, rest) = d.name().split_at(1);
            let twin = match order {
                "<" => format!(">{rest}"),
                ">" => format!("<{rest}"),
                _ => {
                    // Byte-sized: one spelling, NumPy's `|`.
                    assert_eq!((order, d.itemsize()), ("|", 1), "{}", d.name());
                    continue;
                }
            };
            let twin = Dtype::from_name(&twin).unwrap_or_else(|| panic!("no twin of {}", d.name()));
            assert_eq!(twin.itemsize(), d.itemsize());
            let size: u32 = rest[1..].parse().unwrap();
            assert_eq!(size, d.itemsize(), "{}", d.name());
            // A schema naming it survives the round trip.
            let mut schema = dense();
            schema.dtype = d;
            let block = schema.encode();
            assert_eq!(
                Schema::decode(&block, crate::v2::crc32c(&block)).unwrap(),
                schema
            );
        }
    }

    #[test]
    fn image_codecs_take_uint8_rgb_only() {
        let image = |kind, shape: &[u64], ndim, dtype, codec| Schema {
            kind,
            dtype,
            shape: shape.to_vec(),
            ndim,
            codec,
            dictionary: None,
            codecs: vec![CodecRef {
                tag: codec,
                name: codec.name().unwrap().into(),
                version: 1,
            }],
        };
        for codec in [CodecTag::JPEG, CodecTag::PNG] {
            assert!(codec.is_image() && codec.is_allowed_v2());
            assert!(!codec.is_known_v2() && !codec.is_known());
            for shape in [[224, 224, 3], [3, 224, 224], [3, 8, 3]] {
                assert!(
                    image(Kind::Dense, &shape, 3, Dtype::U8, codec)
                        .check()
                        .is_ok()
                );
            }
            assert!(
                image(Kind::Ragged, &[], 3, Dtype::U8, codec)
                    .check()
                    .is_ok()
            );
            for bad in [
                image(Kind::Dense, &[8, 8, 4], 3, Dtype::U8, codec),
                image(Kind::Dense, &[8, 8], 2, Dtype::U8, codec),
                image(Kind::Dense, &[70_000, 8, 3], 3, Dtype::U8, codec),
                image(
                    Kind::Dense,
                    &[8, 8, 3],
                    3,
                    Dtype::from_name("<f4").unwrap(),
                    codec,
                ),
                image(Kind::Ragged, &[], 2, Dtype::U8, codec),
                Schema {
                    codecs: image(Kind::Dense, &[8, 8, 3], 3, Dtype::U8, codec).codecs,
                    ..Schema::bytes(codec)
                },
            ] {
                let err = bad.check().unwrap_err().to_string();
                assert!(err.contains("uint8 RGB"), "{err}");
            }
            // An image store lists its codec in the codec table.
            let unlisted = Schema {
                codecs: Vec::new(),
                ..image(Kind::Dense, &[8, 8, 3], 3, Dtype::U8, codec)
            };
            let err = unlisted.check().unwrap_err().to_string();
            assert!(err.contains("not listed"), "{err}");
        }
        assert_eq!(CodecTag::JPEG.name(), Some("jpeg"));
        assert_eq!(CodecTag::PNG.name(), Some("png"));
        assert!(!CodecTag(7).is_allowed_v2());
    }

    fn external(tag: u8, name: &str) -> CodecRef {
        CodecRef {
            tag: CodecTag(tag),
            name: name.into(),
            version: 1,
        }
    }

    #[test]
    fn the_largest_schema_block_fits_the_header_limit() {
        let mut codecs: Vec<CodecRef> = (128..=255)
            .map(|t| external(t, &"n".repeat(MAX_CODEC_NAME)))
            .collect();
        codecs.sort_by_key(|c| c.tag);
        let name = "<U".to_owned() + &"9".repeat(MAX_DTYPE_NAME - 2);
        let schema = Schema {
            kind: Kind::Dense,
            dtype: Dtype::from_name(&name).unwrap_or(Dtype::U8),
            shape: vec![1; MAX_NDIM],
            ndim: MAX_NDIM as u8,
            codec: CodecTag::ZSTD_DICT,
            dictionary: Some(vec![7; MAX_DICT_LEN]),
            codecs,
        };
        schema.check().unwrap();
        assert!(schema.encode().len() <= MAX_SCHEMA_LEN as usize);
    }

    #[test]
    fn refuses_bad_codec_tables() {
        let with = |codec: u8, codecs: Vec<CodecRef>| Schema {
            codec: CodecTag(codec),
            codecs,
            ..Schema::bytes(CodecTag::RAW)
        };
        let why = |s: Schema| s.check().unwrap_err().to_string();
        // An external default codec must be listed.
        assert!(why(with(130, vec![])).contains("not listed"));
        // Tags 7..=127 are nobody's.
        assert!(why(with(9, vec![external(9, "x")])).contains("unknown codec tag 9"));
        assert!(why(with(0, vec![external(9, "x")])).contains("only 5, 6 and 128..=255"));
        // Format v2's own tags are never listed.
        assert!(why(with(0, vec![external(2, "zstd")])).contains("only 5, 6"));
        // Reserved tags keep their names.
        assert!(why(with(5, vec![external(5, "webp")])).contains("\"jpeg\" in format v2"));
        assert!(why(with(0, vec![external(130, "")])).contains("printable ASCII"));
        assert!(why(with(0, vec![external(130, "a b")])).contains("printable ASCII"));
        let long = "n".repeat(MAX_CODEC_NAME + 1);
        assert!(why(with(0, vec![external(130, &long)])).contains("printable ASCII"));
        assert!(why(with(0, vec![external(140, "b"), external(130, "a")])).contains("increasing"));
        assert!(why(with(0, vec![external(130, "a"), external(130, "a")])).contains("increasing"));
        with(130, vec![external(6, "png"), external(130, "a")])
            .check()
            .unwrap();
    }

    #[test]
    fn codec_table_is_trailing_and_damage_is_refused() {
        // Without external codecs the block is exactly what earlier
        // versions wrote; with them, it grows by the table only.
        let plain = Schema::bytes(CodecTag::FLATE);
        let old = plain.encode();
        let mut ext = plain.clone();
        ext.codecs = vec![external(131, "tok")];
        let new = ext.encode();
        assert_eq!(&new[..old.len()], &old[..]);
        assert_eq!(&new[old.len()..old.len() + 4], b"ZCDC");
        // Every truncation of the table is refused, never read as less.
        for cut in old.len() + 1..new.len() {
            let b = &new[..cut];
            assert!(
                Schema::decode(b, crate::v2::crc32c(b)).is_err(),
                "cut at {cut}"
            );
        }
        // A table that is not `ZCDC` is trailing garbage.
        let mut other = new.clone();
        other[old.len()] = b'X';
        let err = Schema::decode(&other, crate::v2::crc32c(&other)).unwrap_err();
        assert!(err.to_string().contains("unexpected bytes"), "{err}");
        // An empty table is refused (it is never written).
        let mut empty = old.clone();
        empty.extend_from_slice(b"ZCDC\0");
        assert!(Schema::decode(&empty, crate::v2::crc32c(&empty)).is_err());
    }
}
