//! JPEG and PNG images as loaderx records, in pure Rust.
//!
//! * [`read_header`] reads an encoded image's size and channel count without
//!   decoding it, so files that are already JPEG or PNG (an image folder, a
//!   `WebDataset` shard) can be stored as they are with their shape known.
//! * [`decode_into`] decodes straight into a caller's `&mut [u8]` of exactly
//!   `height × width × 3` bytes, in [`Layout::Hwc`] or [`Layout::Chw`].
//! * [`decode_fit_into`] decodes, scales so the image covers a fixed
//!   `(height, width)` and crops the centre: the usual training input.
//! * [`encode_jpeg`] and [`encode_png`] encode `uint8` RGB arrays.
//!
//! **Colour.** Output is always 8-bit RGB. Greyscale inputs are replicated
//! into the three channels, alpha is dropped (not composited: PIL's
//! `convert("RGB")` does the same), palettes are expanded, 16-bit PNG
//! samples are cut to their high byte, CMYK/YCCK JPEGs are converted by the
//! decoder. No colour profile is applied.
//!
//! **Errors.** Every failure is an [`ImageError`] naming the format and what
//! is wrong (truncated data, a bad marker, a checksum, a size that is not
//! the one expected). The JPEG decoder runs in strict mode, so a truncated
//! or damaged entropy stream is an error, never a grey or black fill; PNG
//! chunk CRCs and the zlib Adler-32 are verified. A panic inside a decoder
//! is caught and reported as an error too.
//!
//! Decoders: `zune-jpeg` (SIMD, about as fast as libjpeg-turbo on one core)
//! and `png`; encoders: our own baseline JPEG encoder (written from ITU-T
//! T.81, SIMD-friendly `f32` DCT) and `png`.
//!
//! ```
//! use loaderx_image::{Format, Layout, decode_into, encode_png, read_header};
//!
//! let pixels: Vec<u8> = (0..4 * 6 * 3).map(|i| i as u8).collect();
//! let png = encode_png(&pixels, 4, 6, Layout::Hwc).unwrap();
//! let header = read_header(&png, Format::Png).unwrap();
//! assert_eq!((header.height, header.width), (4, 6));
//! let mut out = vec![0u8; 4 * 6 * 3];
//! decode_into(&png, Format::Png, Layout::Hwc, None, &mut out).unwrap();
//! assert_eq!(out, pixels);
//! ```
#![warn(missing_docs)]
#![deny(unsafe_code)]
#![warn(clippy::pedantic)]
#![allow(clippy::cast_possible_truncation)]

mod decode;
mod encode;
#[allow(unsafe_code)] // SIMD kernels of the JPEG encoder: see docs/ARCHITECTURE.md
mod jpeg;
mod resize;

use std::fmt;

pub use decode::{decode_fit_into, decode_into, read_header};
pub use encode::{encode_jpeg, encode_png};
pub use resize::fit_into;

/// Channels of every decoded image (RGB).
pub const CHANNELS: usize = 3;

/// Largest height or width accepted, in pixels (JPEG's own limit).
pub const MAX_SIDE: u32 = 65_535;

/// An encoded image format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// JPEG (JFIF/Exif; baseline or progressive).
    Jpeg,
    /// PNG (any colour type and bit depth; the first frame of an APNG).
    Png,
}

impl Format {
    /// The format `bytes` start like, by their signature.
    #[must_use]
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Format::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Format::Png)
        } else {
            None
        }
    }

    /// `"jpeg"` or `"png"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "jpeg",
            Format::Png => "png",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Jpeg => "JPEG",
            Format::Png => "PNG",
        })
    }
}

/// How a decoded image is laid out in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// `(height, width, 3)`: pixels in rows, channels interleaved (NumPy/PIL).
    #[default]
    Hwc,
    /// `(3, height, width)`: one plane per channel (`PyTorch`).
    Chw,
}

impl Layout {
    /// The `(d0, d1, d2)` array shape of an image of this size.
    #[must_use]
    pub fn shape(self, height: u32, width: u32) -> [u32; 3] {
        match self {
            Layout::Hwc => [height, width, CHANNELS as u32],
            Layout::Chw => [CHANNELS as u32, height, width],
        }
    }

    /// The layout and `(height, width)` of an RGB array shape: `(H, W, 3)`
    /// is HWC, else `(3, H, W)` is CHW (`(3, W, 3)`-like shapes count as
    /// HWC); `None` for any other shape.
    #[must_use]
    pub fn of_shape(shape: &[u64]) -> Option<(Layout, u32, u32)> {
        let side = |d: u64| u32::try_from(d).ok().filter(|d| (1..=MAX_SIDE).contains(d));
        match *shape {
            [h, w, 3] => Some((Layout::Hwc, side(h)?, side(w)?)),
            [3, h, w] => Some((Layout::Chw, side(h)?, side(w)?)),
            _ => None,
        }
    }
}

/// What an image's header says, read without decoding the pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The format.
    pub format: Format,
    /// Rows, in pixels.
    pub height: u32,
    /// Columns, in pixels.
    pub width: u32,
    /// Channels as stored: 1 (grey), 2 (grey + alpha), 3 (colour), 4
    /// (colour + alpha, or CMYK). Decoding always gives 3.
    pub channels: u8,
}

impl Header {
    /// Bytes of the decoded RGB image, `height × width × 3`.
    #[must_use]
    pub fn decoded_len(&self) -> usize {
        self.height as usize * self.width as usize * CHANNELS
    }
}

/// Why an image could not be read or written: the format, and what is
/// wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError {
    /// The format involved.
    pub format: Format,
    /// What went wrong, in words.
    pub reason: String,
}

impl ImageError {
    pub(crate) fn new(format: Format, reason: impl Into<String>) -> ImageError {
        ImageError {
            format,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.format, self.reason)
    }
}

impl std::error::Error for ImageError {}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, ImageError>;
