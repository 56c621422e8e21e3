//! The image decoders (`loaderx-image`) on arbitrary bytes, as JPEG and as
//! PNG: reading the header, decoding into HWC and CHW, and decoding with a
//! resize + centre crop either fail with an error or succeed, never panic,
//! never write outside the destination; a header and a decode agree on the
//! size; and the CHW decode is exactly the HWC one rearranged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loaderx_image::{Format, Layout, decode_fit_into, decode_into, read_header};

const GUARD: usize = 32;
/// Larger images are skipped (the fuzzer would spend its time allocating).
const MAX_PIXELS: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    for format in [Format::Jpeg, Format::Png] {
        let Ok(header) = read_header(data, format) else {
            continue;
        };
        let len = header.decoded_len();
        if len > MAX_PIXELS * 3 {
            continue;
        }
        let mut hwc = vec![0xA5u8; len + 2 * GUARD];
        let got = decode_into(
            data,
            format,
            Layout::Hwc,
            None,
            &mut hwc[GUARD..GUARD + len],
        );
        assert!(
            hwc[..GUARD]
                .iter()
                .chain(&hwc[GUARD + len..])
                .all(|&b| b == 0xA5)
        );
        let mut chw = vec![0x5Au8; len];
        let got_chw = decode_into(data, format, Layout::Chw, None, &mut chw);
        assert_eq!(got.is_ok(), got_chw.is_ok(), "{format}: layouts disagree");
        if let Ok(h) = got {
            assert_eq!(h, header, "{format}: header and decode disagree");
            let plane = len / 3;
            for i in 0..plane {
                for c in 0..3 {
                    assert_eq!(chw[c * plane + i], hwc[GUARD + i * 3 + c]);
                }
            }
        }
        let mut small = vec![0u8; 5 * 7 * 3];
        let fit = decode_fit_into(data, format, Layout::Chw, 5, 7, &mut small);
        assert_eq!(
            fit.is_ok(),
            got.is_ok(),
            "{format}: fit and plain decode disagree"
        );
    }
});
