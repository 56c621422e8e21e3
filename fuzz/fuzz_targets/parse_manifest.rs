//! Arbitrary bytes as a collection manifest, through
//! `Manifest::decode`. It must never panic, overflow or allocate by an
//! untrusted count; whatever it accepts must pass `check`, re-encode to
//! exactly the bytes it came from, and have consistent part starts.
//!
//! Input: `[mode: u8][manifest…]`. With `mode` odd the harness first
//! recomputes the trailing CRC32C, so mutations get past the checksum to
//! the checks behind it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loaderx_format::manifest::Manifest;
use loaderx_format::v2::crc32c;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode % 2 == 1 && bytes.len() >= 4 {
        let n = bytes.len() - 4;
        let crc = crc32c(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
    }
    match Manifest::decode(&bytes) {
        Ok(m) => {
            m.check().expect("a decoded manifest passes check");
            assert_eq!(m.encode().expect("it encodes"), bytes, "re-encodes exactly");
            let starts = m.starts();
            assert_eq!(starts.len(), m.parts.len() + 1);
            assert_eq!(starts.last().copied(), m.records());
            assert!(starts.windows(2).all(|w| w[0] <= w[1]));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
