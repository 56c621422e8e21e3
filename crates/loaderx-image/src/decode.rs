//! Decoding: headers, whole images into a caller's buffer, and decode +
//! resize + centre crop.

use std::cell::RefCell;
use std::io::Cursor;
use std::panic::{self, AssertUnwindSafe};

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

use crate::{CHANNELS, Format, Header, ImageError, Layout, MAX_SIDE, Result, resize};

thread_local! {
    /// Per-thread scratch for images that cannot be decoded in place
    /// (CHW output, channel conversion, resizing): reused, so a gather
    /// allocates only when an image is larger than any before it.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Reads the header of `bytes` (which must be a `format` image) without
/// decoding the pixels.
///
/// # Errors
/// When the bytes are not a `format` image or its header is damaged.
pub fn read_header(bytes: &[u8], format: Format) -> Result<Header> {
    guarded(format, || Opened::open(bytes, format).map(|o| o.header))
}

/// Decodes `bytes`, a `format` image, into `out` as 8-bit RGB in `layout`.
/// `out` must be exactly `height × width × 3` bytes of this image; with
/// `expect = Some((height, width))` the image must also be that size.
/// Returns the image's header.
///
/// # Errors
/// When the bytes are not a valid `format` image (truncated, damaged, a
/// checksum that does not match), or the image's size is not the one
/// expected or does not fill `out` exactly. `out` may have been partly
/// written then.
pub fn decode_into(
    bytes: &[u8],
    format: Format,
    layout: Layout,
    expect: Option<(u32, u32)>,
    out: &mut [u8],
) -> Result<Header> {
    guarded(format, || {
        let mut opened = Opened::open(bytes, format)?;
        let h = opened.header;
        if let Some((height, width)) = expect
            && (h.height, h.width) != (height, width)
        {
            return Err(ImageError::new(
                format,
                format!(
                    "the image is {}x{} (height x width), expected {height}x{width}",
                    h.height, h.width
                ),
            ));
        }
        if out.len() != h.decoded_len() {
            return Err(ImageError::new(
                format,
                format!(
                    "a {}x{} image decodes to {} bytes of RGB, the destination holds {}",
                    h.height,
                    h.width,
                    h.decoded_len(),
                    out.len()
                ),
            ));
        }
        match layout {
            Layout::Hwc => opened.decode_rgb(out)?,
            Layout::Chw => with_scratch(format, h.decoded_len(), |rgb| {
                opened.decode_rgb(rgb)?;
                resize::hwc_to_chw(rgb, h.height as usize, h.width as usize, out);
                Ok(())
            })?,
        }
        Ok(h)
    })
}

/// Decodes `bytes`, a `format` image, scales it (keeping its aspect ratio)
/// so it just covers `height × width`, and writes the centre
/// `height × width` crop into `out` (`height × width × 3` bytes, RGB, in
/// `layout`). An image already of that size is copied as decoded; see
/// [`fit_into`](crate::fit_into) for the filter. Returns the image's header.
///
/// # Errors
/// As [`decode_into`], and when `out` is not `height × width × 3` bytes.
pub fn decode_fit_into(
    bytes: &[u8],
    format: Format,
    layout: Layout,
    height: u32,
    width: u32,
    out: &mut [u8],
) -> Result<Header> {
    let want = height as usize * width as usize * CHANNELS;
    if out.len() != want || height == 0 || width == 0 {
        return Err(ImageError::new(
            format,
            format!(
                "a {height}x{width} RGB destination is {want} bytes, got {} bytes",
                out.len()
            ),
        ));
    }
    guarded(format, || {
        let mut opened = Opened::open(bytes, format)?;
        let h = opened.header;
        if (h.height, h.width) == (height, width) && layout == Layout::Hwc {
            opened.decode_rgb(out)?;
            return Ok(h);
        }
        with_scratch(format, h.decoded_len(), |rgb| {
            opened.decode_rgb(rgb)?;
            resize::fit_into(
                rgb,
                h.height as usize,
                h.width as usize,
                out,
                height as usize,
                width as usize,
                layout,
            );
            Ok(())
        })?;
        Ok(h)
    })
}

/// Scratch larger than this is not kept for reuse (one huge image must not
/// pin its buffer in every thread for the life of the process).
const KEEP_SCRATCH: usize = 16 << 20;

/// A zeroed buffer of `len` bytes, or an error instead of an abort when the
/// memory is not there (the size comes from an image header).
pub(crate) fn alloc(format: Format, len: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        ImageError::new(
            format,
            format!("out of memory allocating {len} bytes for the decoded image"),
        )
    })?;
    v.resize(len, 0);
    Ok(v)
}

/// Runs `f` with a scratch buffer of `len` bytes: this thread's reusable
/// one, or a fresh one for a very large image.
fn with_scratch<R>(
    format: Format,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> Result<R>,
) -> Result<R> {
    if len > KEEP_SCRATCH {
        return f(&mut alloc(format, len)?);
    }
    SCRATCH.with(|cell| {
        // A nested use (cannot happen today) gets a fresh buffer instead
        // of a borrow panic.
        if let Ok(mut buf) = cell.try_borrow_mut() {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            f(&mut buf[..len])
        } else {
            f(&mut alloc(format, len)?)
        }
    })
}

/// Runs a decoder, turning a panic inside it into an error.
fn guarded<R>(format: Format, f: impl FnOnce() -> Result<R>) -> Result<R> {
    panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        Err(ImageError::new(
            format,
            format!("the decoder failed on these bytes (it panicked: {what})"),
        ))
    })
}

/// Checks that `bytes` start with `format`'s signature.
fn check_signature(bytes: &[u8], format: Format) -> Result<()> {
    match Format::sniff(bytes) {
        Some(found) if found == format => Ok(()),
        Some(found) => Err(ImageError::new(
            format,
            format!("the bytes are a {found} image, not {format}"),
        )),
        None if bytes.is_empty() => Err(ImageError::new(format, "no bytes (empty record)")),
        None => Err(ImageError::new(
            format,
            format!(
                "not a {format} image: it starts with {:02x?}",
                &bytes[..bytes.len().min(8)]
            ),
        )),
    }
}

/// An image whose header has been read, ready to decode.
enum Decoder<'a> {
    Jpeg(Box<JpegDecoder<ZCursor<&'a [u8]>>>),
    Png(Box<png::Reader<Cursor<&'a [u8]>>>),
}

struct Opened<'a> {
    bytes: &'a [u8],
    header: Header,
    decoder: Decoder<'a>,
}

impl<'a> Opened<'a> {
    fn open(bytes: &'a [u8], format: Format) -> Result<Opened<'a>> {
        check_signature(bytes, format)?;
        match format {
            Format::Jpeg => open_jpeg(bytes),
            Format::Png => open_png(bytes),
        }
    }

    /// Decodes into `dst`, exactly `header.decoded_len()` bytes, as HWC RGB.
    fn decode_rgb(&mut self, dst: &mut [u8]) -> Result<()> {
        debug_assert_eq!(dst.len(), self.header.decoded_len());
        match &mut self.decoder {
            Decoder::Jpeg(d) => {
                check_jpeg_structure(self.bytes)?;
                // Whatever a damaged stream leaves unwritten is zero, never
                // the previous image's pixels.
                dst.fill(0);
                d.decode_into(dst)
                    .map_err(|e| ImageError::new(Format::Jpeg, jpeg_reason(&e)))
            }
            Decoder::Png(r) => {
                decode_png(r, self.header, dst)?;
                // Read on to IEND, so a file cut after its pixel data is
                // still refused.
                r.finish().map_err(|e| png_error(&e))
            }
        }
    }
}

fn jpeg_reason(e: &zune_jpeg::errors::DecodeErrors) -> String {
    let text = format!("{e:?}");
    let text = text.trim_matches('"');
    if text.contains("Premature end")
        || text.contains("No more bytes")
        || text.contains("Exhausted data")
    {
        format!("truncated data ({text})")
    } else {
        text.replace("\\\"", "\"")
    }
}

/// Checks what the decoder does not: that a JPEG was not cut short, and
/// that a single-scan image has nothing but entropy data between its scan
/// header and its end.
///
/// * Scanning back from the end, the first `FF D9` (EOI) or `FF DA` (SOS)
///   found must be EOI: a file whose last scan has no end-of-image marker
///   after it was cut, and its last rows would be filled with nothing.
///   Neither marker can occur inside entropy-coded data, where `FF` is
///   always followed by `00` or a restart marker.
/// * A sequential image whose first scan holds every component (the usual
///   baseline JPEG) has one scan: a header marker between that scan and EOI
///   (a damaged or spliced file) would make the decoder stop early and
///   leave the rest of the image unwritten, so it is refused.
fn check_jpeg_structure(bytes: &[u8]) -> Result<()> {
    let bad = |why: String| Err(ImageError::new(Format::Jpeg, why));
    let mut end_ok = false;
    for i in (0..bytes.len().saturating_sub(1)).rev() {
        if bytes[i] == 0xFF {
            match bytes[i + 1] {
                0xD9 => {
                    end_ok = true;
                    break;
                }
                0xDA => break,
                _ => {}
            }
        }
    }
    if !end_ok {
        return bad("truncated data (no end-of-image marker after the last scan)".into());
    }
    // Walk the header segments to the first scan.
    let (mut pos, mut frame_components, mut sequential) = (2usize, 0u8, false);
    let scan_start = loop {
        while bytes.get(pos) == Some(&0xFF) && bytes.get(pos + 1) == Some(&0xFF) {
            pos += 1;
        }
        let (Some(&0xFF), Some(&marker)) = (bytes.get(pos), bytes.get(pos + 1)) else {
            return Ok(()); // the decoder already judged the headers
        };
        if matches!(marker, 0x01 | 0xD0..=0xD7) {
            pos += 2;
            continue;
        }
        let Some(len) = bytes
            .get(pos + 2..pos + 4)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        else {
            return Ok(());
        };
        match marker {
            0xC0 | 0xC1 => {
                sequential = true;
                frame_components = bytes.get(pos + 9).copied().unwrap_or(0);
            }
            0xC2 | 0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => sequential = false,
            0xDA => {
                let scan_components = bytes.get(pos + 4).copied().unwrap_or(0);
                if !(sequential && scan_components == frame_components) {
                    return Ok(());
                }
                break pos + 2 + len;
            }
            _ => {}
        }
        pos += 2 + len;
    };
    let mut i = scan_start;
    while i + 1 < bytes.len() {
        if bytes[i] == 0xFF {
            match bytes[i + 1] {
                0x00 | 0xD0..=0xD7 => i += 2,
                0xFF => i += 1,
                0xD9 => return Ok(()),
                m => {
                    return bad(format!(
                        "marker FF {m:02X} inside the image data at byte {i} (a damaged or spliced file)"
                    ));
                }
            }
        } else {
            i += 1;
        }
    }
    Ok(())
}

fn open_jpeg(bytes: &[u8]) -> Result<Opened<'_>> {
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_strict_mode(true)
        .set_max_width(MAX_SIDE as usize)
        .set_max_height(MAX_SIDE as usize);
    let mut d = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    d.decode_headers()
        .map_err(|e| ImageError::new(Format::Jpeg, jpeg_reason(&e)))?;
    let (Some((width, height)), Some(space)) = (d.dimensions(), d.input_colorspace()) else {
        return Err(ImageError::new(Format::Jpeg, "no frame header (SOF)"));
    };
    if width == 0 || height == 0 {
        return Err(ImageError::new(
            Format::Jpeg,
            format!("the frame header gives a {height}x{width} image"),
        ));
    }
    if d.output_buffer_size() != Some(height * width * CHANNELS) {
        return Err(ImageError::new(
            Format::Jpeg,
            format!("the decoder cannot give RGB for this image ({space:?})"),
        ));
    }
    Ok(Opened {
        bytes,
        header: Header {
            format: Format::Jpeg,
            height: height as u32,
            width: width as u32,
            channels: space.num_components() as u8,
        },
        decoder: Decoder::Jpeg(Box::new(d)),
    })
}

fn png_error(e: &png::DecodingError) -> ImageError {
    let reason = match e {
        png::DecodingError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            "truncated data (the bytes end inside the image)".to_owned()
        }
        other => other.to_string(),
    };
    ImageError::new(Format::Png, reason)
}

fn open_png(bytes: &[u8]) -> Result<Opened<'_>> {
    // Images up to the record limit (2 GiB of pixels), not png's 64 MiB.
    let mut d = png::Decoder::new_with_limits(Cursor::new(bytes), png::Limits { bytes: 1 << 31 });
    d.set_transformations(png::Transformations::normalize_to_color8());
    d.ignore_checksums(false);
    let reader = d.read_info().map_err(|e| png_error(&e))?;
    let info = reader.info();
    let (width, height) = (info.width, info.height);
    if width > MAX_SIDE || height > MAX_SIDE {
        return Err(ImageError::new(
            Format::Png,
            format!("a {height}x{width} image is larger than the {MAX_SIDE}-pixel side limit"),
        ));
    }
    let channels = info.color_type.samples() as u8;
    let channels = if info.color_type == png::ColorType::Indexed {
        if info.trns.is_some() { 4 } else { 3 }
    } else {
        channels
    };
    Ok(Opened {
        bytes,
        header: Header {
            format: Format::Png,
            height,
            width,
            channels,
        },
        decoder: Decoder::Png(Box::new(reader)),
    })
}

fn decode_png(
    reader: &mut png::Reader<Cursor<&[u8]>>,
    header: Header,
    dst: &mut [u8],
) -> Result<()> {
    let (color, depth) = reader.output_color_type();
    if depth != png::BitDepth::Eight {
        return Err(ImageError::new(
            Format::Png,
            format!("unexpected {depth:?} output after normalising"),
        ));
    }
    let samples = color.samples();
    let pixels = header.height as usize * header.width as usize;
    let need = reader.output_buffer_size().unwrap_or(usize::MAX);
    if samples == CHANNELS && need == dst.len() {
        reader.next_frame(dst).map_err(|e| png_error(&e))?;
        return Ok(());
    }
    if need != pixels * samples {
        return Err(ImageError::new(
            Format::Png,
            format!("unexpected {need}-byte frame for a {pixels}-pixel image"),
        ));
    }
    let mut frame = alloc(Format::Png, need)?;
    reader.next_frame(&mut frame).map_err(|e| png_error(&e))?;
    match samples {
        1 | 2 => {
            for (px, src) in dst.chunks_exact_mut(3).zip(frame.chunks_exact(samples)) {
                px.fill(src[0]);
            }
        }
        4 => {
            for (px, src) in dst.chunks_exact_mut(3).zip(frame.chunks_exact(4)) {
                px.copy_from_slice(&src[..3]);
            }
        }
        3 => dst.copy_from_slice(&frame),
        n => {
            return Err(ImageError::new(
                Format::Png,
                format!("unexpected {n} samples per pixel"),
            ));
        }
    }
    Ok(())
}
