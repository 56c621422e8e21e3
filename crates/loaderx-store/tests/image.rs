//! Image stores (feature `image`): JPEG/PNG records written from arrays or
//! kept as the files they were, decoded on gather, and damaged images
//! reported with the record that holds them.

use std::fs;

use loaderx_store::{
    Codec, CodecId, CodecRegistry, DecodeError, Deflate, Error, OpenOptions, Store,
    format::{
        CodecTag,
        v2::{CodecRef, Dtype, Kind, Schema},
    },
    image::{Format, Layout, encode_jpeg, encode_png},
};

fn schema(kind: Kind, shape: &[u64], ndim: u8, codec: CodecTag) -> Schema {
    Schema {
        kind,
        dtype: Dtype::U8,
        shape: shape.to_vec(),
        ndim,
        codec,
        dictionary: None,
        // Left empty: creating the store lists the image codecs itself.
        codecs: Vec::new(),
    }
}

fn picture(h: u32, w: u32, seed: u32) -> Vec<u8> {
    (0..h * w * 3)
        .map(|i| {
            let (p, c) = (i / 3, i % 3);
            let (y, x) = (p / w, p % w);
            ((x * 5 + y * 3 + c * 70 + seed * 11) % 256) as u8
        })
        .collect()
}

fn create(dir: &tempfile::TempDir, s: &Schema) -> Store<Deflate> {
    Store::create_v2(dir.path().join("imgs"), s, OpenOptions::default()).unwrap()
}

#[test]
fn a_dense_png_store_round_trips_exactly_in_both_layouts() {
    let (h, w) = (12u32, 20u32);
    let images: Vec<Vec<u8>> = (0..5).map(|s| picture(h, w, s)).collect();
    let src = images.concat();
    let item = (h * w * 3) as u64;
    let offsets: Vec<u64> = (0..5).map(|i| i * item).collect();
    let lens = vec![item; 5];
    for (shape, layout) in [([12, 20, 3], Layout::Hwc), ([3, 12, 20], Layout::Chw)] {
        let dir = tempfile::tempdir().unwrap();
        let store = create(&dir, &schema(Kind::Dense, &shape, 3, CodecTag::PNG));
        // The source arrays are in the store's layout.
        let src: Vec<u8> = if layout == Layout::Chw {
            images.iter().flat_map(|im| to_chw(im, h, w)).collect()
        } else {
            src.clone()
        };
        assert_eq!(
            store.append_images(&src, &offsets, &lens, &[], 90).unwrap(),
            0
        );
        store.sync().unwrap();
        drop(store);
        let store: Store<Deflate> =
            Store::open_with(dir.path().join("imgs"), OpenOptions::default()).unwrap();
        let mut out = vec![0u8; 3 * item as usize];
        store
            .gather_exact(&[4, 0, 2], &mut out, item as usize)
            .unwrap();
        assert_eq!(
            out,
            [
                &src[4 * item as usize..],
                &src[..item as usize],
                &src[2 * item as usize..3 * item as usize]
            ]
            .iter()
            .map(|s| &s[..item as usize])
            .collect::<Vec<_>>()
            .concat()
        );
    }
}

fn to_chw(hwc: &[u8], h: u32, w: u32) -> Vec<u8> {
    let n = (h * w) as usize;
    let mut out = vec![0u8; hwc.len()];
    for i in 0..n {
        for c in 0..3 {
            out[c * n + i] = hwc[i * 3 + c];
        }
    }
    out
}

#[test]
fn files_are_stored_as_they_are_and_checked_against_the_shape() {
    let dir = tempfile::tempdir().unwrap();
    let store = create(&dir, &schema(Kind::Dense, &[16, 24, 3], 3, CodecTag::JPEG));
    let jpeg = encode_jpeg(&picture(16, 24, 1), 16, 24, Layout::Hwc, 90).unwrap();
    let png = encode_png(&picture(16, 24, 2), 16, 24, Layout::Hwc).unwrap();
    let src = [jpeg.clone(), png.clone()].concat();
    let offsets = [0, jpeg.len() as u64];
    let lens = [jpeg.len() as u64, png.len() as u64];
    store.append_encoded_images(&src, &offsets, &lens).unwrap();
    // The chunk files hold the JPEG's bytes unchanged.
    store.sync().unwrap();
    let stored: Vec<u8> = fs::read_dir(dir.path().join("imgs"))
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name != "meta.zr" && name.ends_with(".zr")).then(|| fs::read(p).unwrap())
        })
        .flatten()
        .collect();
    assert!(
        stored.windows(jpeg.len()).any(|w| w == jpeg),
        "JPEG kept verbatim"
    );
    let mut out = vec![0u8; 2 * 16 * 24 * 3];
    store.gather_exact(&[0, 1], &mut out, 16 * 24 * 3).unwrap();
    assert_eq!(&out[16 * 24 * 3..], &picture(16, 24, 2)[..], "PNG exact");

    // A file of another size, or not an image, is refused, naming it.
    let other = encode_png(&picture(8, 8, 0), 8, 8, Layout::Hwc).unwrap();
    let src = [jpeg.clone(), other.clone()].concat();
    let err = store
        .append_encoded_images(
            &src,
            &[0, jpeg.len() as u64],
            &[jpeg.len() as u64, other.len() as u64],
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("record 1 (of this append) is a 8x8 PNG image; this store holds 16x24"),
        "{err}"
    );
    let err = store
        .append_encoded_images(b"GIF89a", &[0], &[6])
        .unwrap_err();
    assert!(err.to_string().contains("not a JPEG or PNG"), "{err}");
    // Plain byte appends would store pixels raw in an image store: refused.
    let err = store
        .append_fixed(&picture(16, 24, 0), 1, 16 * 24 * 3)
        .unwrap_err();
    assert!(err.to_string().contains("append_images"), "{err}");
    assert_eq!(store.len(), 2, "refused appends change nothing");
}

#[test]
fn ragged_images_keep_their_shapes_and_decode_to_a_fixed_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = create(&dir, &schema(Kind::Ragged, &[], 3, CodecTag::PNG));
    let sizes = [(10u32, 30u32), (40, 20), (24, 24)];
    let images: Vec<Vec<u8>> = sizes.iter().map(|&(h, w)| picture(h, w, h)).collect();
    let src = images.concat();
    let mut offsets = vec![];
    let mut at = 0u64;
    for im in &images {
        offsets.push(at);
        at += im.len() as u64;
    }
    let lens: Vec<u64> = images.iter().map(|i| i.len() as u64).collect();
    let dims: Vec<u32> = sizes.iter().flat_map(|&(h, w)| [h, w, 3]).collect();
    store
        .append_images(&src, &offsets, &lens, &dims, 90)
        .unwrap();
    let mut got = vec![0u32; 9];
    store.dims(&[0, 1, 2], &mut got).unwrap();
    assert_eq!(got, dims);
    let mut one = vec![0u8; lens[1] as usize];
    store
        .gather_exact(&[1], &mut one, lens[1] as usize)
        .unwrap();
    assert_eq!(one, images[1]);

    let mut batch = vec![0u8; 3 * 24 * 24 * 3];
    store
        .gather_images(&[0, 1, 2], &mut batch, 24, 24, Layout::Hwc)
        .unwrap();
    let mut want = vec![0u8; 24 * 24 * 3];
    loaderx_store::image::fit_into(&images[1], 40, 20, &mut want, 24, 24, Layout::Hwc);
    assert_eq!(&batch[24 * 24 * 3..2 * 24 * 24 * 3], &want[..]);
    assert_eq!(
        &batch[2 * 24 * 24 * 3..],
        &images[2][..],
        "same size: as decoded"
    );
    let mut chw = vec![0u8; 24 * 24 * 3];
    store
        .gather_images(&[2], &mut chw, 24, 24, Layout::Chw)
        .unwrap();
    assert_eq!(chw, to_chw(&images[2], 24, 24));

    let mut wrong = vec![0u8; 10];
    assert!(
        store
            .gather_images(&[0], &mut wrong, 24, 24, Layout::Hwc)
            .is_err()
    );
    assert!(
        store
            .gather_images(&[3], &mut chw, 24, 24, Layout::Hwc)
            .is_err()
    );
    // A wrong shape is refused before anything is encoded.
    let err = store
        .append_images(&src[..12], &[0], &[12], &[2, 3, 3], 90)
        .unwrap_err();
    assert!(err.to_string().contains("expected a 2x3x3 image"), "{err}");
    assert_eq!(store.len(), 3);
}

#[test]
fn a_damaged_image_is_an_error_naming_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("imgs");
    let store = create(&dir, &schema(Kind::Dense, &[32, 32, 3], 3, CodecTag::JPEG));
    let pixels: Vec<u8> = (0..4).flat_map(|s| picture(32, 32, s)).collect();
    let item = 32 * 32 * 3u64;
    store
        .append_images(&pixels, &[0, item, 2 * item, 3 * item], &[item; 4], &[], 90)
        .unwrap();
    store.sync().unwrap();
    drop(store);
    // A JPEG that was cut short before it was stored: its CRC is right,
    // its image is not.
    let store: Store<Deflate> = Store::open_with(&path, OpenOptions::default()).unwrap();
    let jpeg = encode_jpeg(&picture(32, 32, 9), 32, 32, Layout::Hwc, 90).unwrap();
    let cut = &jpeg[..jpeg.len() * 2 / 3];
    // Headers are intact, so it is accepted as a 32x32 JPEG...
    store
        .append_encoded_images(cut, &[0], &[cut.len() as u64])
        .unwrap();
    let mut out = vec![0u8; 2 * item as usize];
    let err = store
        .gather_exact(&[1, 4], &mut out, item as usize)
        .unwrap_err();
    // ...and fails on read, naming record 4.
    match &err {
        Error::Corrupt {
            entry: 4, reason, ..
        } => {
            assert!(reason.contains("jpeg record: JPEG: truncated"), "{reason}")
        }
        other => panic!("expected a corrupt-record error, got {other:?}"),
    }
    let mut fit = vec![0u8; 2 * 8 * 8 * 3];
    let err = store
        .gather_images(&[0, 4], &mut fit, 8, 8, Layout::Hwc)
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { entry: 4, .. }), "{err:?}");
    assert_eq!(Format::sniff(&jpeg), Some(Format::Jpeg));
}

/// The image codecs are built in: an image store lists both in its codec
/// table when created, needs nothing registered to reopen, and the
/// registry will not take their tags.
#[test]
fn image_stores_list_their_codecs_and_need_no_registration() {
    let listed = |tag: CodecTag| CodecRef {
        tag,
        name: tag.name().unwrap().into(),
        version: 1,
    };
    for codec in [CodecTag::JPEG, CodecTag::PNG] {
        let dir = tempfile::tempdir().unwrap();
        let store = create(&dir, &schema(Kind::Ragged, &[], 3, codec));
        let want = vec![listed(CodecTag::JPEG), listed(CodecTag::PNG)];
        assert_eq!(store.schema().unwrap().codecs, want);
        // JPEG and PNG files share the store, whatever its codec.
        let jpeg = encode_jpeg(&picture(8, 8, 1), 8, 8, Layout::Hwc, 90).unwrap();
        let png = encode_png(&picture(6, 10, 2), 6, 10, Layout::Hwc).unwrap();
        let src = [jpeg.clone(), png.clone()].concat();
        store
            .append_encoded_images(
                &src,
                &[0, jpeg.len() as u64],
                &[jpeg.len() as u64, png.len() as u64],
            )
            .unwrap();
        // Plain appends with an image codec id are refused, even into a
        // byte store (they would store bytes no image path checked).
        let bytes = create(&tempfile::tempdir().unwrap(), &Schema::bytes(CodecTag::RAW));
        let id = CodecId::from_tag(codec).unwrap();
        let err = bytes.append_fixed_with(id, &[0u8; 12], 1, 12).unwrap_err();
        assert!(err.to_string().contains("append_images"), "{err}");
        assert_eq!(bytes.len(), 0);
        drop(store);
        let store: Store<Deflate> =
            Store::open_with(dir.path().join("imgs"), OpenOptions::default()).unwrap();
        assert_eq!(store.schema().unwrap().codecs, want);
        let mut out = vec![0u8; 6 * 10 * 3];
        store.gather_exact(&[1], &mut out, 6 * 10 * 3).unwrap();
        assert_eq!(out, picture(6, 10, 2));
    }

    // A store whose table lists only jpeg takes no PNG file.
    let dir = tempfile::tempdir().unwrap();
    let mut only_jpeg = schema(Kind::Ragged, &[], 3, CodecTag::JPEG);
    only_jpeg.codecs = vec![listed(CodecTag::JPEG)];
    let store = create(&dir, &only_jpeg);
    assert_eq!(store.schema().unwrap().codecs, only_jpeg.codecs);
    let png = encode_png(&picture(4, 4, 0), 4, 4, Layout::Hwc).unwrap();
    let err = store
        .append_encoded_images(&png, &[0], &[png.len() as u64])
        .unwrap_err();
    assert!(err.to_string().contains("does not list png"), "{err}");
    assert_eq!(store.len(), 0);

    // A store written by a later version of the image codecs is refused.
    let dir = tempfile::tempdir().unwrap();
    let mut later = schema(Kind::Ragged, &[], 3, CodecTag::PNG);
    later.codecs = vec![CodecRef {
        version: 2,
        ..listed(CodecTag::PNG)
    }];
    let err = Store::<Deflate>::create_v2(dir.path().join("s"), &later, OpenOptions::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::CodecUnavailable {
                tag: 6,
                version: 2,
                ..
            }
        ),
        "{err:?}"
    );

    #[derive(Debug)]
    struct Fake;
    impl Codec for Fake {
        fn id(&self) -> CodecId {
            CodecId::Jpeg
        }
        fn name(&self) -> &str {
            "jpeg"
        }
        fn encode(&self, _: &[u8], _: &mut [u8]) -> Option<usize> {
            None
        }
        fn decode(&self, _: &[u8], _: &mut [u8]) -> Result<(), DecodeError> {
            Err(DecodeError::new("never used"))
        }
    }
    let err = CodecRegistry::new().register(Fake).unwrap_err();
    assert!(err.reason.contains("feature `image`"), "{err}");
}

/// Writes `tests/fixtures/jpeg-store`, the image store the default-feature
/// build must refuse (`tests/codecs.rs`). Run with `--ignored` to redo it.
#[test]
#[ignore = "writes a fixture into the source tree"]
fn write_jpeg_store_fixture() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jpeg-store");
    let _ = fs::remove_dir_all(&path);
    let options = OpenOptions {
        chunk_capacity: 1 << 16,
        ..OpenOptions::default()
    };
    let store: Store<Deflate> = Store::create_v2(
        &path,
        &schema(Kind::Dense, &[8, 8, 3], 3, CodecTag::JPEG),
        options,
    )
    .unwrap();
    let jpeg = encode_jpeg(&picture(8, 8, 3), 8, 8, Layout::Hwc, 90).unwrap();
    store
        .append_encoded_images(&jpeg, &[0], &[jpeg.len() as u64])
        .unwrap();
    store.sync().unwrap();
}
