//! Encoded images: records stored as JPEG or PNG files (codec tags 5 and
//! 6, format v2) that decode to `uint8` RGB in the gather's own threads,
//! straight into the destination batch. Behind the cargo feature `image`
//! (the decoders live in the `loaderx-image` crate) they are built-in
//! [`CodecId`](crate::CodecId)s, ahead of the codec registry, decoded by
//! [`CodecId::decode_in`](crate::CodecId::decode_in) with the schema's
//! layout and size from its [`DecodeContext`](crate::DecodeContext). A
//! build without the feature refuses to open such stores (their codec table
//! lists `jpeg`/`png`), saying which feature to enable, unless a codec for
//! the tag was registered (which gets the same context).
//!
//! * A dense image store's schema shape is `(H, W, 3)` (HWC) or
//!   `(3, H, W)` (CHW); every record is an `H × W` image and decodes into
//!   that layout.
//! * A ragged image store has rank 3; record `i` is an image of its own
//!   size, its table entry holds `(h, w, 3)`, and it decodes as HWC.
//! * `Store::gather_images` decodes any image store's records resized
//!   (to cover) and centre-cropped to one fixed size, in either layout.
//!
//! Writing: `Store::append_images` encodes `uint8` arrays with the
//! schema's codec (JPEG at a quality, or PNG); `Store::append_encoded_images`
//! stores JPEG/PNG files as they are, after reading each header to learn (or
//! check) its size. Image records are always stored encoded, even in the
//! rare case where that is larger than the pixels.

use loaderx_format::{CodecTag, v2::Schema};

use super::DecodeError;

/// The version of the built-in `jpeg` and `png` codecs, which a store
/// records in its codec table (their records are plain JPEG and PNG files).
pub(crate) const VERSION: u32 = 1;

/// Completes the codec table of an image store's `schema` (codec `jpeg` or
/// `png`) as [`Store::create_v2`](crate::Store::create_v2) does with the
/// `image` feature: both `jpeg` and `png` are listed (version 1), since
/// `append_encoded_images` keeps files of either format, unless the
/// caller listed image codecs itself, in which case only the schema's own
/// codec is added. Other schemas are left alone.
pub fn list_codecs(schema: &mut Schema) {
    if !schema.codec.is_image() {
        return;
    }
    let chosen = schema.codecs.iter().any(|c| c.tag.is_image());
    for tag in [CodecTag::JPEG, CodecTag::PNG] {
        if schema.codec_ref(tag).is_none() && (!chosen || tag == schema.codec) {
            schema.codecs.push(loaderx_format::v2::CodecRef {
                tag,
                name: tag.name().unwrap_or("?").to_owned(),
                version: VERSION,
            });
        }
    }
    schema.codecs.sort_by_key(|c| c.tag);
}

/// Decodes one image record (`tag` is `jpeg` or `png`) into `out`, in the
/// layout and size the store's schema gives.
#[cfg(feature = "image")]
pub(crate) fn decode_record(
    schema: Option<&Schema>,
    tag: CodecTag,
    src: &[u8],
    out: &mut [u8],
) -> Result<(), DecodeError> {
    let Some(format) = imp::format_of(tag) else {
        return Err(DecodeError::new(format!("unknown codec tag {}", tag.0)));
    };
    let (layout, expect) = imp::target(schema);
    loaderx_image::decode_into(src, format, layout, expect, out)
        .map(|_| ())
        .map_err(|e| DecodeError::new(e.to_string()))
}

/// Without the `image` feature, image records cannot be decoded.
#[cfg(not(feature = "image"))]
pub(crate) fn decode_record(
    _schema: Option<&Schema>,
    tag: CodecTag,
    _src: &[u8],
    _out: &mut [u8],
) -> Result<(), DecodeError> {
    Err(DecodeError::new(match tag.name() {
        Some(name) if tag.is_image() => {
            format!("{name} records need loaderx-store built with the cargo feature `image`")
        }
        _ => format!("unknown codec tag {}", tag.0),
    }))
}

#[cfg(feature = "image")]
pub use imp::ImageLayout;

#[cfg(feature = "image")]
mod imp {
    use loaderx_format::{
        CodecTag, RecordLoc,
        v2::{Kind, Schema},
    };
    use loaderx_image::{Format, Layout};

    use crate::{
        Codec, DecodeError, Error, Result, Store, append_encoded::Prepared, parallel,
        storage::Storage,
    };

    /// Layout of decoded images (`loaderx_image::Layout`).
    pub type ImageLayout = Layout;

    pub(super) fn format_of(tag: CodecTag) -> Option<Format> {
        match tag {
            CodecTag::JPEG => Some(Format::Jpeg),
            CodecTag::PNG => Some(Format::Png),
            _ => None,
        }
    }

    fn tag_of(format: Format) -> CodecTag {
        match format {
            Format::Jpeg => CodecTag::JPEG,
            Format::Png => CodecTag::PNG,
        }
    }

    /// The layout records decode to, and the size every record must have
    /// (dense stores).
    pub(super) fn target(schema: Option<&Schema>) -> (Layout, Option<(u32, u32)>) {
        match schema {
            Some(s) if s.kind == Kind::Dense => match Layout::of_shape(&s.shape) {
                Some((layout, h, w)) => (layout, Some((h, w))),
                None => (Layout::Hwc, None),
            },
            _ => (Layout::Hwc, None),
        }
    }

    /// Maps `f` over `0..n` on the store's pool; the first error (by index)
    /// wins.
    fn par_map<R: Send + Default + Clone>(
        n: usize,
        cost: u64,
        f: impl Fn(usize) -> Result<R> + Sync,
    ) -> Result<Vec<R>> {
        let mut out = vec![R::default(); n];
        let shared = std::sync::Mutex::new(&mut out);
        // Results are collected per range, then stored under a short lock.
        parallel::for_ranges(n, cost, |range| {
            let start = range.start;
            let mut part = Vec::with_capacity(range.len());
            for i in range {
                part.push(f(i)?);
            }
            let mut guard = shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (k, r) in part.into_iter().enumerate() {
                guard[start + k] = r;
            }
            Ok(())
        })?;
        Ok(out)
    }

    impl<C: Codec, S: Storage> Store<C, S> {
        /// The image codec of this store's schema, or `Error::Schema`.
        fn image_schema(&self, op: &str) -> Result<(&Schema, Format)> {
            match &self.schema {
                Some(s) if s.codec.is_image() && s.kind != Kind::Bytes => {
                    Ok((s, format_of(s.codec).unwrap_or(Format::Jpeg)))
                }
                Some(s) => Err(self.schema_error(format!(
                    "{op} needs an image store (codec jpeg or png), this one's codec is {}",
                    s.codec.name().unwrap_or("unknown")
                ))),
                None => {
                    Err(self.schema_error(format!("{op} needs a typed image store (format v2)")))
                }
            }
        }

        /// Appends images given as `uint8` arrays, encoding each with the
        /// schema's codec (JPEG at `quality`, 1–100, or PNG) in parallel.
        /// Record `i` is `src[offsets[i]..][..lens[i]]`; in a dense store
        /// every record is one item of the schema's shape and `dims` is
        /// empty; in a ragged store record `i` is an `(h, w, 3)` HWC array
        /// with `dims[3i..3i + 3] == [h, w, 3]`. Returns the index of the
        /// first. Nothing is written unless every image encoded.
        ///
        /// # Errors
        /// [`Error::Schema`] for a store that is not an image store, a
        /// record of the wrong size or shape, or a quality out of range;
        /// otherwise as [`append_ragged`](Self::append_ragged).
        pub fn append_images(
            &self,
            src: &[u8],
            offsets: &[u64],
            lens: &[u64],
            dims: &[u32],
            quality: u8,
        ) -> Result<u64> {
            let (schema, format) = self.image_schema("append_images")?;
            Error::check_len("offsets", lens.len(), offsets.len())?;
            let n = lens.len();
            let (layout, fixed) = target(Some(schema));
            let ragged = schema.kind == Kind::Ragged;
            if ragged {
                Error::check_len("dims (records × 3)", 3 * n, dims.len())?;
            }
            let mut sizes = Vec::with_capacity(n);
            for i in 0..n {
                let (h, w) = if ragged {
                    let d = &dims[3 * i..3 * i + 3];
                    if d[2] != 3 || d[0] == 0 || d[1] == 0 {
                        return Err(self.schema_error(format!(
                            "record {i} (of this append) has shape {d:?}; an image store holds (h, w, 3) RGB arrays"
                        )));
                    }
                    (d[0], d[1])
                } else {
                    fixed.ok_or_else(|| {
                        self.schema_error("the schema is not an image shape".into())
                    })?
                };
                let want = u64::from(h) * u64::from(w) * 3;
                let end = offsets[i].checked_add(lens[i]);
                if lens[i] != want || end.is_none_or(|e| e > src.len() as u64) {
                    return Err(self.schema_error(format!(
                        "record {i} (of this append) is {} bytes at offset {}, expected a {h}x{w}x3 image ({want} bytes) inside the {}-byte source",
                        lens[i],
                        offsets[i],
                        src.len()
                    )));
                }
                sizes.push((h, w));
            }
            let total: u64 = lens.iter().sum();
            let encoded = par_map(n, total.saturating_mul(64), |i| {
                let (h, w) = sizes[i];
                let pixels = &src[offsets[i] as usize..][..lens[i] as usize];
                let r = match format {
                    Format::Jpeg => loaderx_image::encode_jpeg(pixels, h, w, layout, quality),
                    Format::Png => loaderx_image::encode_png(pixels, h, w, layout),
                };
                r.map_err(|e| self.schema_error(format!("record {i} (of this append): {e}")))
            })?;
            let records: Vec<Prepared<'_>> = encoded
                .iter()
                .zip(lens)
                .map(|(bytes, &len)| Prepared {
                    codec: tag_of(format),
                    bytes,
                    logic: len as u32,
                })
                .collect();
            let entry_dims: &[u32] = if ragged { dims } else { &[] };
            self.append_prepared(&records, entry_dims)
        }

        /// Appends JPEG or PNG files as they are (no re-encoding): record
        /// `i` is the file `src[offsets[i]..][..lens[i]]`. Each file's
        /// header is read (not its pixels) to learn its size: in a dense
        /// store it must be the schema's `H × W`; in a ragged store its
        /// `(h, w, 3)` becomes the record's shape. JPEG and PNG files may be
        /// mixed, whatever the schema's codec. Returns the index of the
        /// first; nothing is written unless every header was good.
        ///
        /// # Errors
        /// [`Error::Schema`] naming the record for a file that is not a
        /// JPEG or PNG, whose header is damaged, or whose size does not
        /// fit; otherwise as [`append_ragged`](Self::append_ragged).
        pub fn append_encoded_images(
            &self,
            src: &[u8],
            offsets: &[u64],
            lens: &[u64],
        ) -> Result<u64> {
            let (schema, _) = self.image_schema("append_encoded_images")?;
            Error::check_len("offsets", lens.len(), offsets.len())?;
            let (_, fixed) = target(Some(schema));
            let n = lens.len();
            let mut files = Vec::with_capacity(n);
            for i in 0..n {
                let end = offsets[i].checked_add(lens[i]);
                if end.is_none_or(|e| e > src.len() as u64) {
                    return Err(Error::BufferTooSmall {
                        what: "source",
                        position: i,
                        need: end.unwrap_or(u64::MAX),
                        have: src.len() as u64,
                    });
                }
                files.push(&src[offsets[i] as usize..][..lens[i] as usize]);
            }
            let headers = par_map(n, (n as u64) << 12, |i| {
                let bytes = files[i];
                let Some(format) = Format::sniff(bytes) else {
                    return Err(self.schema_error(format!(
                        "record {i} (of this append) is not a JPEG or PNG file (it starts with {:02x?})",
                        &bytes[..bytes.len().min(8)]
                    )));
                };
                let h = loaderx_image::read_header(bytes, format)
                    .map_err(|e| self.schema_error(format!("record {i} (of this append): {e}")))?;
                if let Some((height, width)) = fixed
                    && (h.height, h.width) != (height, width)
                {
                    return Err(self.schema_error(format!(
                        "record {i} (of this append) is a {}x{} {} image; this store holds {height}x{width} images (decode it with a resize, or store it in a ragged image store)",
                        h.height, h.width, h.format
                    )));
                }
                if schema.codec_ref(tag_of(format)).is_none() {
                    return Err(self.schema_error(format!(
                        "record {i} (of this append) is a {format} file, and this store's codec table does not list {} (image stores created by this build list jpeg and png)",
                        tag_of(format).name().unwrap_or("it")
                    )));
                }
                Ok(Some(h))
            })?;
            let mut records = Vec::with_capacity(n);
            let mut dims = Vec::new();
            for (bytes, h) in files.iter().zip(headers.iter().flatten()) {
                records.push(Prepared {
                    codec: tag_of(h.format),
                    bytes,
                    logic: u32::try_from(h.decoded_len()).unwrap_or(u32::MAX),
                });
                if schema.kind == Kind::Ragged {
                    dims.extend_from_slice(&[h.height, h.width, 3]);
                }
            }
            self.append_prepared(&records, &dims)
        }

        /// Decodes image records `idxs` into `dst`, each resized (keeping
        /// its aspect ratio) to cover `height × width` and centre-cropped to
        /// it (see `loaderx_image::fit_into`), record `i` at
        /// `dst[i · height · width · 3 ..]` in `layout`. Decoding runs on
        /// the store's pool, straight into `dst`. Every index is checked
        /// before anything is decoded.
        ///
        /// # Errors
        /// [`Error::IndexOutOfRange`], [`Error::BufferTooSmall`] when `dst`
        /// is not exactly `idxs.len() · height · width · 3` bytes,
        /// [`Error::Schema`] for a record that is not an encoded image, and
        /// [`Error::Corrupt`] naming the record whose image is damaged
        /// (`dst` is then partly written).
        pub fn gather_images(
            &self,
            idxs: &[u64],
            dst: &mut [u8],
            height: u32,
            width: u32,
            layout: Layout,
        ) -> Result<()> {
            self.check_usable()?;
            let item = height as usize * width as usize * 3;
            if item == 0 || dst.len() as u64 != idxs.len() as u64 * item as u64 {
                return Err(Error::BufferTooSmall {
                    what: "destination (images × height × width × 3)",
                    position: 0,
                    need: idxs.len() as u64 * item as u64,
                    have: dst.len() as u64,
                });
            }
            if idxs.is_empty() {
                return Ok(());
            }
            let head = self.head();
            self.check_meta_len(&head, None)?;
            let mut locs: Vec<(usize, RecordLoc)> = Vec::with_capacity(idxs.len());
            for (i, &idx) in idxs.iter().enumerate() {
                let loc = self.entry(idx, &head)?;
                if !loc.codec.is_image() {
                    return Err(self.schema_error(format!(
                        "record {idx} is stored with codec {}, not as an encoded image",
                        loc.codec.name().unwrap_or("unknown")
                    )));
                }
                if self
                    .schema
                    .as_ref()
                    .and_then(|s| s.codec_ref(loc.codec))
                    .is_none()
                {
                    return Err(Error::Corrupt {
                        path: self.file_path(crate::storage::FileId::Meta),
                        entry: idx,
                        reason: format!(
                            "codec tag {} is not listed in the store's codec table",
                            loc.codec.0
                        ),
                    });
                }
                locs.push((i * item, loc));
            }
            self.check_chunks_still_hold(idxs, &locs, None)?;
            // From storage that fetches: every record's bytes at once.
            let fetched = if self.files.fetches() {
                let ranges: Vec<_> = locs
                    .iter()
                    .map(|(_, l)| {
                        (
                            crate::storage::FileId::Chunk(l.chunk_id),
                            u64::from(l.offset),
                            l.phys_length as usize,
                        )
                    })
                    .collect();
                Some(self.files.fetch_many(&ranges, "read")?)
            } else {
                None
            };
            let work = (idxs.len() * item) as u64 * 64;
            // `dst` is exactly `idxs.len() · item` bytes (checked above):
            // record `i` owns slot `i`.
            parallel::for_strided(dst, item, idxs.len(), work, |range, slots| {
                for (i, out) in range.zip(slots.chunks_exact_mut(item)) {
                    let (_, loc) = &locs[i];
                    let format = format_of(loc.codec).unwrap_or(Format::Jpeg);
                    let src = fetched.as_ref().map(|f| f[i].as_slice());
                    self.read_record_from(idxs[i], loc, self.check_raw, None, src, |src| {
                        loaderx_image::decode_fit_into(src, format, layout, height, width, out)
                            .map(|_| ())
                            .map_err(|e| DecodeError::new(e.to_string()))
                    })?;
                }
                Ok(())
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use loaderx_format::CodecTag;

    use super::decode_record;

    /// Without the feature an image record is refused naming the feature;
    /// with it, damaged bytes are refused naming the format.
    #[test]
    fn image_records_decode_or_say_why() {
        let mut out = [0u8; 12];
        let err = decode_record(None, CodecTag::JPEG, b"\xff\xd8\xff", &mut out).unwrap_err();
        if cfg!(feature = "image") {
            assert!(err.reason.starts_with("JPEG: "), "{err}");
        } else {
            assert!(err.reason.contains("feature `image`"), "{err}");
        }
        let err = decode_record(None, CodecTag(9), b"", &mut out).unwrap_err();
        assert!(err.reason.contains("unknown codec tag 9"), "{err}");
    }
}
