//! Arbitrary bytes decoded by every codec into a fixed-size destination: an
//! error or an exact-size success, never a panic or an out-of-bounds write.
//!
//! Input: `[len: u16 LE][stored bytes…]`; the destination is `len + 1` bytes
//! with guard bytes on both sides that must survive.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loaderx_store::CodecId;

const GUARD: usize = 64;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let len = usize::from(u16::from_le_bytes([data[0], data[1]])) + 1;
    let src = &data[2..];
    let mut buf = vec![0xa5u8; len + 2 * GUARD];
    for codec in CodecId::ALL {
        let (head, rest) = buf.split_at_mut(GUARD);
        let (dst, tail) = rest.split_at_mut(len);
        let _ = codec.decode(src, dst);
        assert!(head.iter().all(|&b| b == 0xa5), "{codec} wrote before its destination");
        assert!(tail.iter().all(|&b| b == 0xa5), "{codec} wrote past its destination");
        // Encoding what we got back must round-trip.
        let mut packed = vec![0u8; len.saturating_sub(1)];
        if let Some(n) = codec.encode(dst, &mut packed) {
            let mut back = vec![0u8; len];
            codec.decode(&packed[..n], &mut back).expect("own encoding decodes");
            assert_eq!(back.as_slice(), &*dst);
        }
    }
});
