//! The decode contract of every codec, on arbitrary bytes: decoding into a
//! destination of the requested size either fails or succeeds with exactly
//! that many bytes written; it never panics and never writes outside the
//! destination; and whatever a codec encodes decodes back to the same bytes.
//!
//! Input: `[len: u16 LE][bytes…]`. The bytes are decoded by every codec into a
//! destination of `len + 1` bytes with guard bytes on both sides; on success
//! the target checks that every byte of the destination was written (a second
//! decode into a destination filled differently gives the same output) and
//! that the same stream does not also decode to one byte more or less. The
//! bytes are then used as a record: each codec's encoding of them must decode
//! to them exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loaderx_store::CodecId;

const GUARD: usize = 64;

/// Decodes `src` into a destination of `len` bytes first filled with `fill`
/// and surrounded by guard bytes, which must survive whatever the outcome.
/// Returns the destination on success.
fn decode_guarded(codec: CodecId, src: &[u8], len: usize, fill: u8) -> Option<Vec<u8>> {
    let mut buf = vec![fill; len + 2 * GUARD];
    let (head, rest) = buf.split_at_mut(GUARD);
    let (dst, tail) = rest.split_at_mut(len);
    let result = codec.decode(src, dst);
    assert!(head.iter().all(|&b| b == fill), "{codec} wrote before its destination");
    assert!(tail.iter().all(|&b| b == fill), "{codec} wrote past its destination");
    result.ok().map(|()| dst.to_vec())
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let len = usize::from(u16::from_le_bytes([data[0], data[1]])) + 1;
    let bytes = &data[2..];
    for codec in CodecId::ALL {
        // Arbitrary stored bytes: an error, or exactly `len` bytes written.
        if let Some(out) = decode_guarded(codec, bytes, len, 0xa5) {
            let again = decode_guarded(codec, bytes, len, 0x5a);
            assert_eq!(
                again.as_ref(),
                Some(&out),
                "{codec} reported success for {len} bytes without writing all of them"
            );
            assert!(
                decode_guarded(codec, bytes, len + 1, 0xa5).is_none(),
                "{codec} decoded the same stream to both {len} and {} bytes",
                len + 1
            );
            assert!(
                len == 1 || decode_guarded(codec, bytes, len - 1, 0xa5).is_none(),
                "{codec} decoded the same stream to both {len} and {} bytes",
                len - 1
            );
        }

        // The bytes as a record: what we encode decodes back to it. Encoders
        // get one byte less than the record, as the store gives them (a
        // record that does not shrink is stored raw).
        let mut packed = vec![0u8; bytes.len().saturating_sub(1)];
        let stored = match codec.encode(bytes, &mut packed) {
            Some(n) => {
                assert!(n < bytes.len(), "{codec} claimed {n} bytes for {}", bytes.len());
                &packed[..n]
            }
            None => bytes,
        };
        let decoder = if stored.len() == bytes.len() { CodecId::Raw } else { codec };
        let back = decode_guarded(decoder, stored, bytes.len(), 0xa5);
        assert_eq!(
            back.as_deref(),
            Some(bytes),
            "{codec} did not round-trip a record of {} bytes",
            bytes.len()
        );
    }
});
