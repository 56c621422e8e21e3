//! Arbitrary bytes as a meta.zr image, plus arbitrary chunk-file lengths,
//! through the format crate's parser and validator. It must never panic,
//! overflow, loop or allocate by an untrusted size.
//!
//! Input: `[n_chunks: u8][n_chunks × u64 LE chunk lengths][meta image…]`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loaderx_format::{Header, Index, parse_index};

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 8);
    if rest.len() < n * 8 {
        return;
    }
    let (lens, image) = rest.split_at(n * 8);
    let lens: Vec<u64> = lens
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let full = parse_index(image, &lens);
    let header_only = Index::parse_header(image, &lens);
    // Whatever the whole parse says, the header check agrees on the header.
    if let Ok(index) = &full {
        let header = header_only.expect("a valid image has a valid header");
        assert_eq!(header.header, index.header);
        for i in 0..index.header.length {
            assert!(index.entry(i).is_some());
        }
        assert_eq!(Header::decode(image).unwrap(), index.header);
    }
});
