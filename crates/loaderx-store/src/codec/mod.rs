//! Per-record codecs.
//!
//! Every record carries its own codec tag, so reads dispatch on the tag
//! ([`CodecId`]) while writes use whichever codec the caller picks. A codec
//! encodes into a buffer one byte shorter than the input: if the output does not
//! fit, the record did not shrink and is stored raw.

mod deflate;
pub(crate) mod image;
mod lz4;
mod raw;
mod zstd;
mod zstd_dict;

use std::fmt;

pub use self::zstd_dict::{
    DEFAULT_DICT_SIZE, DICT_MAGIC, MAX_DICT_SIZE, MAX_SAMPLE_BYTES, MIN_DICT_SIZE, MIN_SAMPLES,
    TrainError, ZstdDictionary, train_dictionary,
};

pub use self::{deflate::Deflate, lz4::Lz4, raw::Raw, zstd::Zstd};
use loaderx_format::CodecTag;

/// Why stored bytes did not decode to exactly the expected size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What the decoder reported.
    pub reason: String,
}

impl DecodeError {
    pub(crate) fn new(reason: impl Into<String>) -> DecodeError {
        DecodeError {
            reason: reason.into(),
        }
    }

    pub(crate) fn wrong_size(got: usize, expected: usize) -> DecodeError {
        DecodeError::new(format!("decoded to {got} bytes, expected {expected}"))
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for DecodeError {}

/// A per-record compression scheme.
pub trait Codec: Send + Sync + Default + fmt::Debug + 'static {
    /// Which codec this is, on disk.
    const ID: CodecId;

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
}

/// The codecs format v1 defines, for choosing one at run time.
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
    /// A zstd frame made with the store's trained dictionary (tag 4, format
    /// v2 only). It needs the store's [`ZstdDictionary`]: the store encodes
    /// and decodes it; [`CodecId::encode`] never does, and
    /// [`CodecId::decode`] refuses.
    ZstdDict,
}

impl CodecId {
    /// Every codec, in tag order.
    pub const ALL: [CodecId; 4] = [CodecId::Raw, CodecId::Deflate, CodecId::Zstd, CodecId::Lz4];

    /// The on-disk tag.
    #[must_use]
    pub fn tag(self) -> CodecTag {
        match self {
            CodecId::Raw => CodecTag::RAW,
            CodecId::Deflate => CodecTag::FLATE,
            CodecId::Zstd => CodecTag::ZSTD,
            CodecId::Lz4 => CodecTag::LZ4,
            CodecId::ZstdDict => CodecTag::ZSTD_DICT,
        }
    }

    /// The codec a tag names, if format v1 defines it.
    #[must_use]
    pub fn from_tag(tag: CodecTag) -> Option<CodecId> {
        if tag == CodecTag::ZSTD_DICT {
            return Some(CodecId::ZstdDict);
        }
        CodecId::ALL.into_iter().find(|c| c.tag() == tag)
    }

    /// The name the Python API uses (`raw`, `flate`, `zstd`, `lz4`).
    ///
    /// # Panics
    /// Never: format v1 names every tag a `CodecId` has.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.tag().name().expect("every CodecId has a name")
    }

    /// The codec called `name` in the Python API.
    #[must_use]
    pub fn from_name(name: &str) -> Option<CodecId> {
        CodecId::ALL
            .into_iter()
            .chain([CodecId::ZstdDict])
            .find(|c| c.name() == name)
    }

    /// Encodes with this codec; see [`Codec::encode`]. `Raw` never encodes.
    pub fn encode(self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        match self {
            CodecId::Raw | CodecId::ZstdDict => None,
            CodecId::Deflate => Deflate.encode(src, dst),
            CodecId::Zstd => Zstd.encode(src, dst),
            CodecId::Lz4 => Lz4.encode(src, dst),
        }
    }

    /// Decodes with this codec; see [`Codec::decode`].
    ///
    /// # Errors
    /// As [`Codec::decode`].
    pub fn decode(self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        match self {
            CodecId::Raw => Raw.decode(src, dst),
            CodecId::Deflate => Deflate.decode(src, dst),
            CodecId::Zstd => Zstd.decode(src, dst),
            CodecId::Lz4 => Lz4.decode(src, dst),
            CodecId::ZstdDict => Err(DecodeError::new(
                "zstd_dict records decode with their store's dictionary",
            )),
        }
    }
}

impl fmt::Display for CodecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
        assert_eq!(CodecId::from_tag(CodecTag(7)), None);
        assert_eq!(CodecId::Deflate.name(), "flate");
    }

    #[test]
    fn compressible_data_shrinks_with_every_codec() {
        let data: Vec<u8> = (0..12288u32).map(|i| (i / 64) as u8).collect();
        for c in [CodecId::Deflate, CodecId::Zstd, CodecId::Lz4] {
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
        for c in [CodecId::Deflate, CodecId::Zstd, CodecId::Lz4] {
            let mut out = vec![0u8; 100];
            assert!(c.decode(&garbage, &mut out).is_err(), "{c}");
            assert!(c.decode(&[], &mut out).is_err(), "{c} empty");
        }
        let mut out = [0u8; 3];
        assert!(Raw.decode(&[1, 2], &mut out).is_err());
    }

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
            for c in CodecId::ALL {
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
