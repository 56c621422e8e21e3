//! A codec defined outside loaderx, plugged into the store through its
//! codec registry: **byte delta + run length** ("delta-rle").
//!
//! Each byte is replaced by its difference from the byte `STRIDE` places
//! before it (wrapping), which turns slowly changing little-endian integers
//! — token ids, counters, sorted keys, smooth sensor values — into long runs
//! of zeros; the differences are then packed with a PackBits-style run
//! length code:
//!
//! ```text
//! control c < 128 : c + 1 literal bytes follow
//! control c ≥ 128 : one byte follows, repeated c − 126 times (2 ..= 129)
//! ```
//!
//! To use it, register it and open (or create) stores with the registry:
//!
//! ```
//! use codec_plugin::DeltaRle;
//! use loaderx_store::{CodecRegistry, OpenOptions, Store, format::v2::Schema};
//!
//! let mut codecs = CodecRegistry::new();
//! codecs.register(DeltaRle).unwrap();
//! let dir = tempfile::tempdir().unwrap();
//! let store: Store = Store::create_v2(
//!     dir.path().join("tokens"),
//!     &Schema::bytes(DeltaRle::TAG),
//!     OpenOptions::default().with_codecs(codecs),
//! )
//! .unwrap();
//! let tokens: Vec<u8> = (1000u32..1256).flat_map(u32::to_le_bytes).collect();
//! store.append_fixed(&tokens, 1, tokens.len()).unwrap();
//! let mut back = vec![0u8; tokens.len()];
//! store.gather(&[0], &mut back, tokens.len()).unwrap();
//! assert_eq!(back, tokens);
//! ```
#![warn(missing_docs)]
#![warn(clippy::pedantic)]

use loaderx_store::{Codec, CodecId, DecodeError, format::CodecTag};

/// Distance of the byte each byte is compared with: 4, one little-endian
/// `u32` token id.
pub const STRIDE: usize = 4;

/// Longest literal run one control byte covers.
const MAX_LITERAL: usize = 128;
/// Shortest and longest repeat one control byte covers.
const MIN_REPEAT: usize = 2;
const MAX_REPEAT: usize = 129;

/// Byte delta (stride [`STRIDE`]) + run length: small, deterministic,
/// stateless (so trivially thread-safe), and good on token ids.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeltaRle;

impl DeltaRle {
    /// The codec's tag, in the external range `128 ..= 255`.
    pub const TAG: CodecTag = CodecTag(200);
}

/// The delta of `src` at `i`.
fn delta(src: &[u8], i: usize) -> u8 {
    if i < STRIDE {
        src[i]
    } else {
        src[i].wrapping_sub(src[i - STRIDE])
    }
}

impl Codec for DeltaRle {
    fn id(&self) -> CodecId {
        CodecId::external(Self::TAG.0).expect("200 is in the external range")
    }

    fn name(&self) -> &'static str {
        "delta-rle"
    }

    fn version(&self) -> u32 {
        1
    }

    fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        let mut out = 0;
        let mut put = |bytes: &[u8]| -> Option<()> {
            dst.get_mut(out..out + bytes.len())?.copy_from_slice(bytes);
            out += bytes.len();
            Some(())
        };
        let mut i = 0;
        let mut literal_from = 0;
        while i < src.len() {
            let d = delta(src, i);
            let mut run = 1;
            while i + run < src.len() && run < MAX_REPEAT && delta(src, i + run) == d {
                run += 1;
            }
            if run > MIN_REPEAT || (run == MIN_REPEAT && literal_from == i) {
                // Flush pending literals, then the repeat.
                flush_literals(src, literal_from, i, &mut put)?;
                // run ≤ MAX_REPEAT = 129, so the control byte is ≤ 255.
                put(&[u8::try_from(run + 126).ok()?, d])?;
                i += run;
                literal_from = i;
            } else {
                i += 1;
                if i - literal_from == MAX_LITERAL {
                    flush_literals(src, literal_from, i, &mut put)?;
                    literal_from = i;
                }
            }
        }
        flush_literals(src, literal_from, src.len(), &mut put)?;
        Some(out)
    }

    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        let mut at = 0;
        let mut i = 0;
        let too_long = |dst: &[u8]| {
            DecodeError::new(format!(
                "delta-rle data decodes to more than {} bytes",
                dst.len()
            ))
        };
        while i < src.len() {
            let c = usize::from(src[i]);
            i += 1;
            let (count, literal) = if c < 128 {
                (c + 1, true)
            } else {
                (c - 126, false)
            };
            if at + count > dst.len() {
                return Err(too_long(dst));
            }
            for k in 0..count {
                let Some(&d) = src.get(if literal { i + k } else { i }) else {
                    return Err(DecodeError::new(format!(
                        "delta-rle data is truncated at byte {}",
                        src.len()
                    )));
                };
                let base = if at >= STRIDE { dst[at - STRIDE] } else { 0 };
                dst[at] = base.wrapping_add(d);
                at += 1;
            }
            i += if literal { count } else { 1 };
        }
        if at != dst.len() {
            return Err(DecodeError::wrong_size(at, dst.len()));
        }
        Ok(())
    }
}

/// Writes the deltas of `src[from..to]` as literal runs.
fn flush_literals(
    src: &[u8],
    from: usize,
    to: usize,
    put: &mut impl FnMut(&[u8]) -> Option<()>,
) -> Option<()> {
    let mut buf = [0u8; MAX_LITERAL];
    let mut start = from;
    while start < to {
        let n = (to - start).min(MAX_LITERAL);
        for (k, slot) in buf[..n].iter_mut().enumerate() {
            *slot = delta(src, start + k);
        }
        put(&[u8::try_from(n - 1).ok()?])?;
        put(&buf[..n])?;
        start += n;
    }
    Some(())
}
