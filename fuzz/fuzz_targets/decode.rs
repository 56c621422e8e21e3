//! The decode contract of every codec, `zstd_dict` included, on arbitrary
//! bytes: decoding into a destination of the requested size either fails or
//! succeeds with exactly that many bytes written, and those bytes are the
//! right ones; it never panics and never writes outside the destination; and
//! whatever a codec encodes decodes back to the same bytes.
//!
//! Input: `[len: u16 LE][bytes…]`. The bytes are decoded by every codec into a
//! destination of `len + 1` bytes with guard bytes on both sides; on success
//! the target checks that every byte of the destination was written (a second
//! decode into a destination filled differently gives the same output) and
//! that the same stream does not also decode to one byte more or less. For
//! `zstd_dict` (decoded with a dictionary trained at start-up, see the
//! crate's `fuzz_dictionary`) a success must also name that dictionary, and
//! zstd's own decoder, given the same dictionary another way, must produce
//! exactly the same bytes. The bytes are then used as a record: each codec's
//! encoding of them must decode to them exactly. The bytes (up to 16 KiB)
//! are also offered
//! to `ZstdDictionary::new`, which must refuse them cleanly or load a
//! dictionary that round-trips records: a trained one (the bytes start with
//! the zstd dictionary magic) with an id, any other bytes as raw content.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use loaderx_fuzz::fuzz_dictionary;
use loaderx_store::{CodecId, DICT_MAGIC, DecodeError, ZstdDictionary};
use zstd::zstd_safe;

const GUARD: usize = 64;

/// A decoder under test: a plain codec, or `zstd_dict` with the dictionary.
#[derive(Clone, Copy)]
enum Dec<'a> {
    Plain(CodecId),
    Dict(&'a ZstdDictionary),
}

impl Dec<'_> {
    fn name(self) -> &'static str {
        match self {
            Dec::Plain(c) => c.name(),
            Dec::Dict(_) => "zstd_dict",
        }
    }

    fn decode(self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        match self {
            Dec::Plain(c) => c.decode(src, dst),
            Dec::Dict(d) => d.decode(src, dst),
        }
    }

    fn encode(self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        match self {
            Dec::Plain(c) => c.encode(src, dst),
            Dec::Dict(d) => d.encode(src, dst),
        }
    }
}

fn dictionary() -> &'static ZstdDictionary {
    static DICT: OnceLock<ZstdDictionary> = OnceLock::new();
    DICT.get_or_init(|| {
        ZstdDictionary::new(&fuzz_dictionary()).expect("the trained dictionary loads")
    })
}

/// Decodes `src` into a destination of `len` bytes first filled with `fill`
/// and surrounded by guard bytes, which must survive whatever the outcome.
/// Returns the destination on success.
fn decode_guarded(dec: Dec<'_>, src: &[u8], len: usize, fill: u8) -> Option<Vec<u8>> {
    let mut buf = vec![fill; len + 2 * GUARD];
    let (head, rest) = buf.split_at_mut(GUARD);
    let (dst, tail) = rest.split_at_mut(len);
    let result = dec.decode(src, dst);
    let name = dec.name();
    assert!(
        head.iter().all(|&b| b == fill),
        "{name} wrote before its destination"
    );
    assert!(
        tail.iter().all(|&b| b == fill),
        "{name} wrote past its destination"
    );
    result.ok().map(|()| dst.to_vec())
}

/// The right bytes for a `zstd_dict` stream the store accepted: what zstd's
/// bulk decoder makes of it with the same dictionary loaded into a plain
/// decompression context (not the prepared `DDict` the store uses). One byte
/// of extra room, so a stream that holds more than `len` bytes shows.
fn reference_dict_decode(dict: &ZstdDictionary, src: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut d = zstd::bulk::Decompressor::with_dictionary(dict.bytes()).ok()?;
    d.decompress(src, len + 1).ok()
}

/// Checks the decode contract of `dec` on arbitrary stored `bytes`.
fn check_decode(dec: Dec<'_>, bytes: &[u8], len: usize) {
    let name = dec.name();
    let Some(out) = decode_guarded(dec, bytes, len, 0xa5) else {
        return;
    };
    let again = decode_guarded(dec, bytes, len, 0x5a);
    assert_eq!(
        again.as_ref(),
        Some(&out),
        "{name} reported success for {len} bytes without writing all of them"
    );
    assert!(
        decode_guarded(dec, bytes, len + 1, 0xa5).is_none(),
        "{name} decoded the same stream to both {len} and {} bytes",
        len + 1
    );
    assert!(
        len == 1 || decode_guarded(dec, bytes, len - 1, 0xa5).is_none(),
        "{name} decoded the same stream to both {len} and {} bytes",
        len - 1
    );
    if let Dec::Dict(dict) = dec {
        let named = zstd_safe::get_dict_id_from_frame(bytes).map(std::num::NonZeroU32::get);
        assert_eq!(
            named,
            Some(dict.id()),
            "zstd_dict accepted a frame that does not name its dictionary"
        );
        assert_eq!(
            reference_dict_decode(dict, bytes, len).as_deref(),
            Some(&out[..]),
            "zstd_dict returned other bytes than zstd's own decoder for a {len}-byte record"
        );
    }
}

/// The bytes as a record: what `dec` encodes decodes back to it. Encoders
/// get one byte less than the record, as the store gives them (a record
/// that does not shrink is stored raw).
fn check_round_trip(dec: Dec<'_>, bytes: &[u8]) {
    let name = dec.name();
    let mut packed = vec![0u8; bytes.len().saturating_sub(1)];
    let stored = match dec.encode(bytes, &mut packed) {
        Some(n) => {
            assert!(
                n < bytes.len(),
                "{name} claimed {n} bytes for {}",
                bytes.len()
            );
            &packed[..n]
        }
        None => bytes,
    };
    let decoder = if stored.len() == bytes.len() {
        Dec::Plain(CodecId::Raw)
    } else {
        dec
    };
    let back = decode_guarded(decoder, stored, bytes.len(), 0xa5);
    assert_eq!(
        back.as_deref(),
        Some(bytes),
        "{name} did not round-trip a record of {} bytes",
        bytes.len()
    );
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let len = usize::from(u16::from_le_bytes([data[0], data[1]])) + 1;
    let bytes = &data[2..];
    let decoders = CodecId::ALL
        .into_iter()
        .map(Dec::Plain)
        .chain([Dec::Dict(dictionary())]);
    for dec in decoders {
        check_decode(dec, bytes, len);
        check_round_trip(dec, bytes);
    }
    // The store refuses `zstd_dict` without its dictionary, whatever the bytes.
    let mut dst = vec![0u8; len];
    assert!(CodecId::ZstdDict.decode(bytes, &mut dst).is_err());

    // Dictionary bytes as read from a schema block: refused, or usable —
    // a trained dictionary (the magic) with an id, any other bytes as raw
    // content without one.
    // (Up to 16 KiB: preparing a dictionary costs time per input.)
    if bytes.len() <= 16 << 10
        && let Ok(dict) = ZstdDictionary::new(bytes)
    {
        assert_eq!(dict.bytes(), bytes);
        assert_eq!(
            dict.id() != 0,
            bytes.starts_with(&DICT_MAGIC),
            "only a trained dictionary has an id"
        );
        let record: Vec<u8> = (0..600u32).map(|i| (i % 7 * 3 + i / 50) as u8).collect();
        check_round_trip(Dec::Dict(&dict), &record);
    }
});
