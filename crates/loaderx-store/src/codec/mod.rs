//! Per-record codecs, and the registry a store looks them up in.
//!
//! Every record carries its own codec tag, so reads dispatch on the tag
//! ([`CodecId`]) while writes use whichever codec the caller picks. A codec
//! encodes into a buffer one byte shorter than the input: if the output does not
//! fit, the record did not shrink and is stored raw.
//!
//! Every record decodes through one call, [`Codec::decode_in`], which is
//! given the record's bytes, its destination and a [`DecodeContext`]: what
//! the store knows that the bytes do not say (its schema, its zstd
//! dictionary). The built-in codecs (`raw`, `flate`, `zstd`, `lz4`,
//! `zstd_dict`) and, with the cargo feature `image`, the image codecs
//! (tags 5 and 6, which decode to the layout and size the schema gives:
//! [`image`]) are [`CodecId`]s, dispatched by a `match` on the tag with no
//! indirection. Codecs defined outside loaderx (tags `128 ..= 255`), and
//! the image codecs in a build without `image`, are found through the
//! [`CodecRegistry`] the store was opened with
//! ([`OpenOptions::codecs`](crate::OpenOptions)).

mod deflate;
mod dict;
pub(crate) mod image;
mod lz4;
mod raw;
mod registry;
mod zstd;
#[cfg(feature = "zstd")]
mod zstd_dict;
#[cfg(not(feature = "zstd"))]
#[path = "zstd_dict_off.rs"]
mod zstd_dict;

use std::fmt;

pub use self::dict::{
    DEFAULT_DICT_SIZE, DICT_MAGIC, MAX_DICT_SIZE, MAX_SAMPLE_BYTES, MIN_DICT_SIZE, MIN_SAMPLES,
    TrainError,
};
pub use self::zstd_dict::{ZstdDictionary, train_dictionary};

pub use self::registry::{CodecRegistry, RegisterError};
pub use self::{deflate::Deflate, lz4::Lz4, raw::Raw, zstd::Zstd};
use loaderx_format::{CodecTag, v2::Schema};

/// What decoding a record may need besides its bytes: what its store knows
/// that the bytes do not say. The store builds one per gather and passes it
/// to [`Codec::decode_in`]; a codec that needs none of it ignores it.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct DecodeContext<'a> {
    /// The store's schema (`None` for a format v1 store): the image codecs
    /// decode to the layout (HWC or CHW) and size it gives.
    pub schema: Option<&'a Schema>,
    /// The store's zstd dictionary, prepared (format v2 `zstd_dict` stores).
    pub dictionary: Option<&'a ZstdDictionary>,
}

impl<'a> DecodeContext<'a> {
    /// The context of a store with `schema` (`None`: format v1) and no
    /// dictionary.
    #[must_use]
    pub fn new(schema: Option<&'a Schema>) -> DecodeContext<'a> {
        DecodeContext {
            schema,
            dictionary: None,
        }
    }

    /// This context with `dictionary` as the store's zstd dictionary.
    #[must_use]
    pub fn with_dictionary(self, dictionary: Option<&'a ZstdDictionary>) -> DecodeContext<'a> {
        DecodeContext { dictionary, ..self }
    }
}

/// Why stored bytes did not decode to exactly the expected size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What the decoder reported.
    pub reason: String,
}

impl DecodeError {
    /// An error saying `reason` (what is wrong with the bytes; the store
    /// adds which record and file).
    pub fn new(reason: impl Into<String>) -> DecodeError {
        DecodeError {
            reason: reason.into(),
        }
    }

    /// The error for bytes that decode to `got` bytes where `expected` were
    /// due.
    #[must_use]
    pub fn wrong_size(got: usize, expected: usize) -> DecodeError {
        DecodeError::new(format!("decoded to {got} bytes, expected {expected}"))
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for DecodeError {}

/// A per-record encoding: **the extension point for codecs**.
///
/// loaderx's built-in codecs implement it, and so does any codec a
/// downstream crate brings: give it an id in the external range
/// ([`CodecId::external`], tags `128 ..= 255`), a name and a version,
/// register it in a [`CodecRegistry`], and open (or create) stores with
/// that registry in [`OpenOptions::codecs`](crate::OpenOptions). A store
/// created with such a codec records its id, name and version in its
/// schema block, and a reader that has not registered the same codec
/// refuses to open it, naming it ([`Error::CodecUnavailable`](crate::Error))
/// — never a wrong decode. See `examples/codec-plugin` for a complete one.
///
/// What an implementation must guarantee:
///
/// * **Round trip.** If `encode(src, dst)` returns `Some(n)`, then
///   `decode(&dst[..n], out)` with `out.len() == src.len()` succeeds and
///   leaves `out == src`, in this process and in any later one, on any
///   platform (the bytes are on disk: no host byte order, no pointer sizes).
/// * **Size.** `encode` writes only inside `dst` (which is always shorter
///   than `src`) and returns `None` when the encoding does not fit; the
///   store then keeps the record raw. It never panics on any input.
/// * **Exact decode, or an error.** `decode` fills all of `dst`, which is
///   exactly the record's logical size, or returns [`DecodeError`]. Bytes
///   that are damaged, truncated, or decode to any other size are an error,
///   never a partial or padded success, and never a panic, whatever `src`
///   holds (stored bytes may be damaged on disk). The store checks format
///   v2 records' CRC32C before decoding, but a codec must not rely on it.
///   On error `dst` may hold anything: the caller discards it.
/// * **Thread safety.** Both methods take `&self` and are called from many
///   threads at once (gathers and appends decode and encode in parallel on
///   rayon's pool): the codec is `Send + Sync`, and any per-call state
///   lives on the stack or in thread-locals, never behind a lock the hot
///   path contends on.
/// * **Determinism.** `decode` is a pure function of `src` and
///   `dst.len()` (`decode_in`: and of its [`DecodeContext`]). `encode` should be deterministic too (the same input gives
///   the same bytes), so stores written twice are identical; the format
///   does not depend on it.
/// * **Stable identity.** [`id`](Codec::id), [`name`](Codec::name) and
///   [`version`](Codec::version) identify the on-disk encoding. A change
///   that makes old bytes decode differently needs a new id or name; a
///   change that only adds to the encoding bumps `version`: a codec of
///   version `v` must decode everything versions `≤ v` wrote, and a reader
///   refuses a store written by a newer version than its own.
pub trait Codec: Send + Sync + fmt::Debug + 'static {
    /// Which codec this is, on disk.
    fn id(&self) -> CodecId;

    /// Its name, used in errors and recorded in the schema block of
    /// stores that use an external codec: printable ASCII, `1 ..= 64`
    /// bytes. Built-ins answer their Python API name (`flate`, `zstd`, …).
    fn name(&self) -> &str {
        self.id().name()
    }

    /// The version of its encoding (see "Stable identity" above). Built-ins
    /// answer 1.
    fn version(&self) -> u32 {
        1
    }

    /// Encodes `src` into `dst`, returning the encoded length, or `None` when
    /// the encoding does not fit in `dst`. Callers pass a `dst` shorter than
    /// `src`, so `None` means "did not shrink".
    fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize>;

    /// Decodes `src` into `dst`, which is exactly the record's logical size.
    /// Bytes that decode to any other size are an error.
    ///
    /// # Errors
    /// When `src` is not a valid encoding of exactly `dst.len()` bytes.
    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError>;

    /// Decodes `src`, a record of the store `ctx` describes, into `dst`:
    /// the one call a store makes for every record it decodes. The default
    /// is [`decode`](Codec::decode), for codecs whose bytes say all there is
    /// to know; a codec whose output depends on its store (an image codec
    /// decodes to the layout and size of the store's schema) overrides it.
    /// The contract is `decode`'s.
    ///
    /// # Errors
    /// As [`decode`](Codec::decode).
    fn decode_in(
        &self,
        src: &[u8],
        dst: &mut [u8],
        ctx: DecodeContext<'_>,
    ) -> Result<(), DecodeError> {
        let _ = ctx;
        self.decode(src, dst)
    }
}

/// A tag in the range format v2 leaves to codecs defined outside loaderx,
/// `128 ..= 255`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExternalId(u8);

impl ExternalId {
    /// The id for `tag`, if it is in `128 ..= 255`.
    #[must_use]
    pub const fn new(tag: u8) -> Option<ExternalId> {
        if tag >= CodecTag::EXTERNAL_MIN {
            Some(ExternalId(tag))
        } else {
            None
        }
    }

    /// The on-disk tag.
    #[must_use]
    pub const fn tag(self) -> u8 {
        self.0
    }
}

/// Which codec, for choosing one at run time: format v1's four, v2's
/// `zstd_dict`, the two reserved image codecs, and the external range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodecId {
    /// Stored verbatim (tag 0).
    Raw,
    /// Raw DEFLATE (tag 1); readable by loaderx 0.5.x.
    Deflate,
    /// A zstd frame (tag 2).
    Zstd,
    /// An LZ4 block (tag 3).
    Lz4,
    /// A zstd frame made with the store's dictionary (tag 4, format
    /// v2 only). It needs the store's [`ZstdDictionary`]: the store encodes
    /// and decodes it; [`CodecId::encode`] never does, and
    /// [`CodecId::decode`] refuses.
    ZstdDict,
    /// A JPEG image (tag 5, format v2 only): built into the store with the
    /// cargo feature `image` (decoded through the `loaderx-image` crate);
    /// without it, only a codec registered in a [`CodecRegistry`] reads it.
    Jpeg,
    /// A PNG image (tag 6, format v2 only); like [`CodecId::Jpeg`].
    Png,
    /// A codec defined outside loaderx (tags `128 ..= 255`, format v2
    /// only), found through the store's [`CodecRegistry`].
    External(ExternalId),
}

impl CodecId {
    /// The codecs of format v1, in tag order.
    pub const ALL: [CodecId; 4] = [CodecId::Raw, CodecId::Deflate, CodecId::Zstd, CodecId::Lz4];

    /// The external codec with tag `tag`, if it is in `128 ..= 255`.
    #[must_use]
    pub const fn external(tag: u8) -> Option<CodecId> {
        match ExternalId::new(tag) {
            Some(e) => Some(CodecId::External(e)),
            None => None,
        }
    }

    /// The on-disk tag.
    #[must_use]
    pub fn tag(self) -> CodecTag {
        match self {
            CodecId::Raw => CodecTag::RAW,
            CodecId::Deflate => CodecTag::FLATE,
            CodecId::Zstd => CodecTag::ZSTD,
            CodecId::Lz4 => CodecTag::LZ4,
            CodecId::ZstdDict => CodecTag::ZSTD_DICT,
            CodecId::Jpeg => CodecTag::JPEG,
            CodecId::Png => CodecTag::PNG,
            CodecId::External(e) => CodecTag(e.tag()),
        }
    }

    /// The codec a tag names, if the format gives the tag a meaning
    /// (`0 ..= 6`, `128 ..= 255`).
    #[must_use]
    pub fn from_tag(tag: CodecTag) -> Option<CodecId> {
        Some(match tag {
            CodecTag::RAW => CodecId::Raw,
            CodecTag::FLATE => CodecId::Deflate,
            CodecTag::ZSTD => CodecId::Zstd,
            CodecTag::LZ4 => CodecId::Lz4,
            CodecTag::ZSTD_DICT => CodecId::ZstdDict,
            CodecTag::JPEG => CodecId::Jpeg,
            CodecTag::PNG => CodecId::Png,
            CodecTag(t) => return CodecId::external(t),
        })
    }

    /// Whether loaderx itself implements this codec (tags `0 ..= 4`),
    /// as opposed to the image codecs and external ones, which come from a
    /// [`CodecRegistry`].
    #[must_use]
    pub fn is_builtin(self) -> bool {
        self.tag().is_known_v2()
    }

    /// The name the Python API uses (`raw`, `flate`, `zstd`, `lz4`,
    /// `zstd_dict`, `jpeg`, `png`); `external` for the external range,
    /// whose names come from the codecs themselves.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.tag().name().unwrap_or("external")
    }

    /// The built-in or reserved codec called `name` in the Python API.
    #[must_use]
    pub fn from_name(name: &str) -> Option<CodecId> {
        CodecId::ALL
            .into_iter()
            .chain([CodecId::ZstdDict, CodecId::Jpeg, CodecId::Png])
            .find(|c| c.name() == name)
    }

    /// The cargo feature that provides this codec, when this build of
    /// `loaderx-store` does not have it: `deflate-libdeflate` (or
    /// `deflate-flate2`), `zstd` or `lz4` for built-ins left out, and
    /// `image` for the image codecs in a build without that feature.
    /// `None` for raw, external codecs, and codecs this build has.
    #[must_use]
    pub const fn missing_feature(self) -> Option<&'static str> {
        match self {
            CodecId::Deflate
                if !cfg!(any(
                    feature = "deflate-libdeflate",
                    feature = "deflate-flate2"
                )) =>
            {
                Some("deflate-libdeflate")
            }
            CodecId::Zstd | CodecId::ZstdDict if !cfg!(feature = "zstd") => Some("zstd"),
            CodecId::Lz4 if !cfg!(feature = "lz4") => Some("lz4"),
            CodecId::Jpeg | CodecId::Png if !cfg!(feature = "image") => Some("image"),
            _ => None,
        }
    }

    /// The codecs of format v1 this build has, in tag order (all of
    /// [`CodecId::ALL`] with the default features).
    pub fn available() -> impl Iterator<Item = CodecId> {
        CodecId::ALL
            .into_iter()
            .filter(|c| c.missing_feature().is_none())
    }

    /// Encodes with this built-in codec; see [`Codec::encode`]. `Raw`
    /// never encodes, nor do codecs found through a registry (the store
    /// encodes those).
    pub fn encode(self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        match self {
            CodecId::Deflate => Deflate.encode(src, dst),
            CodecId::Zstd => Zstd.encode(src, dst),
            CodecId::Lz4 => Lz4.encode(src, dst),
            CodecId::Raw
            | CodecId::ZstdDict
            | CodecId::Jpeg
            | CodecId::Png
            | CodecId::External(_) => None,
        }
    }

    /// Decodes with this built-in codec; see [`Codec::decode`].
    ///
    /// # Errors
    /// As [`Codec::decode`]; always for `zstd_dict` (which needs its
    /// store's dictionary) and for codecs found through a registry.
    pub fn decode(self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        match self {
            CodecId::Raw => Raw.decode(src, dst),
            CodecId::Deflate => Deflate.decode(src, dst),
            CodecId::Zstd => Zstd.decode(src, dst),
            CodecId::Lz4 => Lz4.decode(src, dst),
            CodecId::ZstdDict => Err(DecodeError::new(
                "zstd_dict records decode with their store's dictionary",
            )),
            CodecId::Jpeg | CodecId::Png | CodecId::External(_) => Err(DecodeError::new(format!(
                "{self} records decode through the store's codec registry"
            ))),
        }
    }

    /// Decodes with this codec a record of the store `ctx` describes (see
    /// [`Codec::decode_in`]): as [`decode`](Self::decode), and besides
    /// `zstd_dict` with the context's dictionary and, with the cargo feature
    /// `image`, `jpeg` and `png` to the layout and size of its schema.
    ///
    /// # Errors
    /// As [`decode`](Self::decode); for `zstd_dict`, when the context has no
    /// dictionary.
    #[inline]
    pub fn decode_in(
        self,
        src: &[u8],
        dst: &mut [u8],
        ctx: DecodeContext<'_>,
    ) -> Result<(), DecodeError> {
        match self {
            CodecId::ZstdDict => match ctx.dictionary {
                Some(d) => d.decode(src, dst),
                None => Err(DecodeError::new("the store has no zstd dictionary")),
            },
            CodecId::Jpeg | CodecId::Png if cfg!(feature = "image") => {
                image::decode_record(ctx.schema, self.tag(), src, dst)
            }
            _ => self.decode(src, dst),
        }
    }
}

impl fmt::Display for CodecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecId::External(e) => write!(f, "external codec {}", e.tag()),
            _ => f.write_str(self.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(codec: CodecId, data: &[u8]) {
        let mut packed = vec![0u8; data.len().saturating_sub(1)];
        if let Some(n) = codec.encode(data, &mut packed) {
            assert!(
                n < data.len(),
                "{codec} claimed {n} bytes for {}",
                data.len()
            );
            let mut out = vec![0u8; data.len()];
            codec.decode(&packed[..n], &mut out).unwrap();
            assert_eq!(out, data, "{codec}");
            // One byte short or long is an error, never a partial success.
            if data.len() > 1 {
                let mut short = vec![0u8; data.len() - 1];
                assert!(
                    codec.decode(&packed[..n], &mut short).is_err(),
                    "{codec} short"
                );
            }
            let mut long = vec![0u8; data.len() + 1];
            assert!(
                codec.decode(&packed[..n], &mut long).is_err(),
                "{codec} long"
            );
        } else {
            let mut out = vec![0u8; data.len()];
            Raw.decode(data, &mut out).unwrap();
            assert_eq!(out, data);
        }
    }

    #[test]
    fn names_and_tags_round_trip() {
        for c in CodecId::ALL {
            assert_eq!(CodecId::from_name(c.name()), Some(c));
            assert_eq!(CodecId::from_tag(c.tag()), Some(c));
        }
        assert_eq!(CodecId::from_name("gzip"), None);
        assert_eq!(CodecId::from_tag(CodecTag(4)), Some(CodecId::ZstdDict));
        assert_eq!(CodecId::from_name("zstd_dict"), Some(CodecId::ZstdDict));
        assert_eq!(CodecId::from_tag(CodecTag(5)), Some(CodecId::Jpeg));
        assert_eq!(CodecId::from_tag(CodecTag(6)), Some(CodecId::Png));
        for t in 7..128 {
            assert_eq!(CodecId::from_tag(CodecTag(t)), None, "{t}");
        }
        for t in 128..=255 {
            let c = CodecId::from_tag(CodecTag(t)).unwrap();
            assert_eq!(c.tag(), CodecTag(t));
            assert!(!c.is_builtin());
        }
        assert_eq!(CodecId::external(127), None);
        assert_eq!(CodecId::from_name("jpeg"), Some(CodecId::Jpeg));
        assert_eq!(CodecId::Deflate.name(), "flate");
    }

    #[test]
    fn decode_in_hands_every_codec_its_store_context() {
        /// Decodes to the schema's rank, which only the context tells.
        #[derive(Debug)]
        struct Rank;
        impl Codec for Rank {
            fn id(&self) -> CodecId {
                CodecId::external(200).unwrap()
            }
            fn encode(&self, _: &[u8], _: &mut [u8]) -> Option<usize> {
                None
            }
            fn decode(&self, _: &[u8], _: &mut [u8]) -> Result<(), DecodeError> {
                Err(DecodeError::new("needs its store"))
            }
            fn decode_in(
                &self,
                _: &[u8],
                dst: &mut [u8],
                ctx: DecodeContext<'_>,
            ) -> Result<(), DecodeError> {
                dst.fill(ctx.schema.map_or(0, |s| s.ndim));
                Ok(())
            }
        }
        let schema = Schema {
            ndim: 3,
            ..Schema::bytes(CodecTag::RAW)
        };
        let mut out = [9u8; 2];
        Rank.decode_in(&[], &mut out, DecodeContext::new(Some(&schema)))
            .unwrap();
        assert_eq!(out, [3, 3]);
        // The default forwards to `decode`, context unused.
        Raw.decode_in(&[1, 2], &mut out, DecodeContext::default())
            .unwrap();
        assert_eq!(out, [1, 2]);
        let err = CodecId::ZstdDict
            .decode_in(&[0; 8], &mut out, DecodeContext::default())
            .unwrap_err();
        assert!(err.reason.contains("no zstd dictionary"), "{err}");
    }

    #[test]
    fn compressible_data_shrinks_with_every_codec() {
        let data: Vec<u8> = (0..12288u32).map(|i| (i / 64) as u8).collect();
        for c in CodecId::available().filter(|&c| c != CodecId::Raw) {
            let mut packed = vec![0u8; data.len() - 1];
            let n = c
                .encode(&data, &mut packed)
                .unwrap_or_else(|| panic!("{c}: smooth data must shrink"));
            assert!(n < data.len() / 4, "{c}: {n}");
            round_trip(c, &data);
        }
    }

    #[test]
    fn garbage_does_not_decode_to_the_wrong_size() {
        let garbage = [0xffu8; 64];
        for c in CodecId::available().filter(|&c| c != CodecId::Raw) {
            let mut out = vec![0u8; 100];
            assert!(c.decode(&garbage, &mut out).is_err(), "{c}");
            assert!(c.decode(&[], &mut out).is_err(), "{c} empty");
        }
        let mut out = [0u8; 3];
        assert!(Raw.decode(&[1, 2], &mut out).is_err());
    }

    #[test]
    fn codecs_left_out_of_the_build_are_errors_naming_their_feature() {
        let data = vec![3u8; 4096];
        for c in CodecId::ALL.into_iter().chain([CodecId::ZstdDict]) {
            let Some(feature) = c.missing_feature() else {
                continue;
            };
            let mut packed = vec![0u8; data.len() - 1];
            assert_eq!(c.encode(&data, &mut packed), None, "{c}");
            let err = c.decode(&packed, &mut vec![0u8; 4096]).unwrap_err();
            if c != CodecId::ZstdDict {
                assert!(err.reason.contains(&format!("`{feature}`")), "{c}: {err}");
            }
            assert!(CodecRegistry::new().get(c).is_none(), "{c}");
        }
        for c in [CodecId::Jpeg, CodecId::Png] {
            assert_eq!(
                c.missing_feature(),
                (!cfg!(feature = "image")).then_some("image")
            );
        }
        assert_eq!(CodecId::Raw.missing_feature(), None);
        assert_eq!(
            CodecId::Zstd.missing_feature().is_none(),
            cfg!(feature = "zstd")
        );
        assert_eq!(
            CodecId::Lz4.missing_feature().is_none(),
            cfg!(feature = "lz4")
        );
    }

    #[cfg(any(feature = "deflate-libdeflate", feature = "deflate-flate2"))]
    #[test]
    fn deflate_reads_streams_from_another_implementation() {
        // loaderx 0.5.x wrote raw DEFLATE with Zig's encoder; check we accept a
        // foreign encoder's output and that ours is plain RFC 1951.
        use std::io::{Read, Write};
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 97) as u8).collect();
        let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(2));
        enc.write_all(&data).unwrap();
        let foreign = enc.finish().unwrap();
        let mut out = vec![0u8; data.len()];
        Deflate.decode(&foreign, &mut out).unwrap();
        assert_eq!(out, data);

        let mut ours = vec![0u8; data.len() - 1];
        let n = Deflate.encode(&data, &mut ours).unwrap();
        let mut back = Vec::new();
        flate2::read::DeflateDecoder::new(&ours[..n])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn every_codec_round_trips_arbitrary_bytes(
            data in prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..4096),
                proptest::collection::vec(0u8..4, 1..4096),
            ]
        ) {
            for c in CodecId::available() {
                round_trip(c, &data);
            }
        }

        #[test]
        fn decoders_never_panic_on_arbitrary_input(
            src in proptest::collection::vec(any::<u8>(), 0..512),
            len in 1usize..2048,
        ) {
            let mut out = vec![0u8; len];
            for c in CodecId::ALL {
                let _ = c.decode(&src, &mut out);
            }
        }
    }
}
