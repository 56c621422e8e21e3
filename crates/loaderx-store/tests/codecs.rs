//! The codec registry: codecs past the built-ins, recorded by name and
//! version in the schema block, and refused by name when a reader lacks them.

use loaderx_store::{
    Codec, CodecId, CodecRegistry, DecodeError, Deflate, Error, OpenOptions, Store,
    format::{
        CodecTag,
        v2::{CodecRef, Schema},
    },
};

/// Run-length pairs `(count, byte)`, count `1 ..= 255`: small, but a real
/// encoding with real failure modes.
#[derive(Debug, Clone)]
struct Runs {
    tag: u8,
    name: &'static str,
    version: u32,
}

impl Runs {
    fn new() -> Runs {
        Runs {
            tag: 200,
            name: "runs",
            version: 2,
        }
    }
}

impl Codec for Runs {
    fn id(&self) -> CodecId {
        CodecId::external(self.tag).unwrap()
    }
    fn name(&self) -> &str {
        self.name
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        let mut n = 0;
        let mut rest = src;
        while let Some(&b) = rest.first() {
            let run = rest.iter().take(255).take_while(|&&x| x == b).count();
            dst.get_mut(n..n + 2)?.copy_from_slice(&[run as u8, b]);
            n += 2;
            rest = &rest[run..];
        }
        Some(n)
    }
    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        if !src.len().is_multiple_of(2) {
            return Err(DecodeError::new("odd number of run bytes"));
        }
        let mut at = 0;
        for pair in src.chunks_exact(2) {
            let run = usize::from(pair[0]);
            if run == 0 {
                return Err(DecodeError::new("a run of length 0"));
            }
            let Some(out) = dst.get_mut(at..at + run) else {
                return Err(DecodeError::new(format!(
                    "runs decode past {} bytes",
                    dst.len()
                )));
            };
            out.fill(pair[1]);
            at += run;
        }
        if at != dst.len() {
            return Err(DecodeError::wrong_size(at, dst.len()));
        }
        Ok(())
    }
}

fn registry(codec: Runs) -> CodecRegistry {
    let mut r = CodecRegistry::new();
    r.register(codec).unwrap();
    r
}

fn runs_schema() -> Schema {
    Schema::bytes(CodecTag(200))
}

fn records() -> Vec<u8> {
    // 8 records of 1000 bytes: long runs, so every one shrinks.
    (0..8000u32).map(|i| (i / 300) as u8).collect()
}

#[test]
fn an_external_codec_round_trips_and_is_recorded_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let options = OpenOptions::default().with_codecs(registry(Runs::new()));
    let data = records();
    {
        let store: Store = Store::create_v2(&path, &runs_schema(), options.clone()).unwrap();
        assert_eq!(store.append_codec(), CodecId::external(200).unwrap());
        store.append_fixed(&data, 8, 1000).unwrap();
        let stats = store.stats().unwrap();
        assert!(stats.live_bytes < 200, "runs must shrink: {stats:?}");
        store.sync().unwrap();
    }
    let store: Store = Store::open_with(&path, options).unwrap();
    assert_eq!(
        store.schema().unwrap().codecs,
        vec![CodecRef {
            tag: CodecTag(200),
            name: "runs".into(),
            version: 2
        }]
    );
    let mut out = vec![0u8; 8000];
    store
        .gather(&[0, 1, 2, 3, 4, 5, 6, 7], &mut out, 1000)
        .unwrap();
    assert_eq!(out, data);
    store.verify().unwrap();
    // Built-ins still write into the same store; reads dispatch per record.
    let i = store
        .append_fixed_with(CodecId::Deflate, &data[..1000], 1, 1000)
        .unwrap();
    let mut one = vec![0u8; 1000];
    store.gather(&[i], &mut one, 1000).unwrap();
    assert_eq!(one, data[..1000]);
}

#[test]
fn a_store_with_an_unregistered_codec_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let options = OpenOptions::default().with_codecs(registry(Runs::new()));
    Store::<Deflate>::create_v2(&path, &runs_schema(), options)
        .unwrap()
        .append_fixed(&records(), 8, 1000)
        .unwrap();

    let check = |options: OpenOptions, says: &str| {
        let err = Store::<Deflate>::open_with(&path, options).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(&err, Error::CodecUnavailable { tag: 200, name, version: 2, .. } if name == "runs"),
            "{err:?}"
        );
        assert!(text.contains("\"runs\" version 2 (tag 200)"), "{text}");
        assert!(text.contains(says), "{text}");
    };
    check(OpenOptions::read_only(), "not registered");
    // Another codec under the same tag is not it.
    let other = Runs {
        name: "other",
        ..Runs::new()
    };
    check(
        OpenOptions::read_only().with_codecs(registry(other)),
        "a different codec",
    );
    // An older version may not understand what a newer one wrote.
    let old = Runs {
        version: 1,
        ..Runs::new()
    };
    check(
        OpenOptions::read_only().with_codecs(registry(old)),
        "older than the store's",
    );
    // A newer version reads, but does not append (that would mix versions).
    let newer = OpenOptions::default().with_codecs(registry(Runs {
        version: 3,
        ..Runs::new()
    }));
    let store: Store = Store::open_with(&path, newer).unwrap();
    let mut out = vec![0u8; 1000];
    store.gather(&[7], &mut out, 1000).unwrap();
    assert_eq!(out, records()[7000..]);
    let err = store.append_fixed(&out, 1, 1000).unwrap_err();
    assert!(err.to_string().contains("mix versions"), "{err}");
    assert_eq!(store.len(), 8);
}

#[test]
fn creating_with_an_unregistered_codec_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let err =
        Store::<Deflate>::create_v2(&path, &runs_schema(), OpenOptions::default()).unwrap_err();
    assert!(
        matches!(err, Error::CodecUnavailable { tag: 200, .. }),
        "{err:?}"
    );
    assert!(!path.exists(), "a refused creation makes nothing");
}

#[test]
#[cfg(not(feature = "image"))]
fn image_codecs_need_the_image_feature() {
    let dir = tempfile::tempdir().unwrap();
    for (tag, name) in [(CodecTag::JPEG, "jpeg"), (CodecTag::PNG, "png")] {
        let path = dir.path().join(name);
        let err = Store::<Deflate>::create_v2(&path, &Schema::bytes(tag), OpenOptions::default())
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&format!("{name:?}")), "{text}");
        assert!(text.contains("enable cargo feature `image`"), "{text}");
    }
    // A store written elsewhere with the image codec listed is refused the same way.
    let path = dir.path().join("listed");
    let mut schema = Schema::bytes(CodecTag::RAW);
    schema.codecs.push(CodecRef {
        tag: CodecTag::JPEG,
        name: "jpeg".into(),
        version: 1,
    });
    let err = Store::<Deflate>::create_v2(&path, &schema, OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("feature `image`"), "{err}");
}

/// A copy of `tests/fixtures/jpeg-store`: a dense 8x8 JPEG store of one
/// record, written by a build with feature `image` (`tests/image.rs`,
/// `write_jpeg_store_fixture`).
fn jpeg_store() -> (tempfile::TempDir, std::path::PathBuf) {
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jpeg-store");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jpeg-store");
    std::fs::create_dir(&path).unwrap();
    for name in ["meta.zr", "0.zr"] {
        std::fs::copy(from.join(name), path.join(name)).unwrap();
    }
    (dir, path)
}

/// A real image store opened by a build without feature `image` is
/// refused at open, naming the codec and the feature, and left unchanged.
#[test]
#[cfg(not(feature = "image"))]
fn a_jpeg_store_is_refused_without_the_image_feature() {
    let (_dir, path) = jpeg_store();
    let before = std::fs::read(path.join("meta.zr")).unwrap();
    for read_only in [true, false] {
        let options = OpenOptions {
            read_only,
            ..OpenOptions::default()
        };
        let err = Store::<Deflate>::open_with(&path, options).unwrap_err();
        assert!(
            matches!(&err, Error::CodecUnavailable { tag: 5, name, .. } if name == "jpeg"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("enable cargo feature `image`"), "{text}");
    }
    assert_eq!(std::fs::read(path.join("meta.zr")).unwrap(), before);
}

/// With feature `image` the same store opens with nothing registered and
/// its record decodes.
#[test]
#[cfg(feature = "image")]
fn a_jpeg_store_opens_with_the_image_feature() {
    let (_dir, path) = jpeg_store();
    let store: Store = Store::open_with(&path, OpenOptions::default()).unwrap();
    assert_eq!(store.len(), 1);
    let mut out = vec![0u8; 8 * 8 * 3];
    store.gather_exact(&[0], &mut out, 8 * 8 * 3).unwrap();
    assert!(out.iter().any(|&b| b != 0), "pixels were written");
}

#[test]
fn appends_with_an_unlisted_codec_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let options = OpenOptions::default().with_codecs(registry(Runs::new()));
    // A v2 store created without the codec in its table.
    let v2: Store = Store::create_v2(
        dir.path().join("v2"),
        &Schema::bytes(CodecTag::FLATE),
        options.clone(),
    )
    .unwrap();
    let runs = CodecId::external(200).unwrap();
    let err = v2.append_fixed_with(runs, &records(), 8, 1000).unwrap_err();
    assert!(
        err.to_string().contains("not in the store's codec table"),
        "{err}"
    );
    assert_eq!(v2.len(), 0);
    // Format v1 has no codec table at all.
    let v1: Store = Store::open_with(dir.path().join("v1"), options).unwrap();
    let err = v1.append_fixed_with(runs, &records(), 8, 1000).unwrap_err();
    assert!(err.to_string().contains("needs a format v2 store"), "{err}");
    assert_eq!(v1.len(), 0);
}

#[test]
fn the_registry_refuses_builtin_taken_and_misnamed_tags() {
    let mut r = registry(Runs::new());
    let taken = r.register(Runs::new()).unwrap_err();
    assert!(taken.to_string().contains("already registered"), "{taken}");
    let bad_name = Runs {
        tag: 201,
        name: "has space",
        ..Runs::new()
    };
    assert!(r.register(bad_name).is_err());
    #[derive(Debug)]
    struct FakeDeflate;
    impl Codec for FakeDeflate {
        fn id(&self) -> CodecId {
            CodecId::Deflate
        }
        fn encode(&self, _: &[u8], _: &mut [u8]) -> Option<usize> {
            None
        }
        fn decode(&self, _: &[u8], _: &mut [u8]) -> Result<(), DecodeError> {
            Err(DecodeError::new("never"))
        }
    }
    let err = r.register(FakeDeflate).unwrap_err();
    assert!(err.to_string().contains("built-in"), "{err}");
    assert_eq!(r.get(CodecId::Deflate).unwrap().name(), "flate");
    assert!(r.get(CodecId::external(201).unwrap()).is_none());
}

#[test]
fn damaged_external_records_are_errors_naming_the_codec() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let options = OpenOptions::default().with_codecs(registry(Runs::new()));
    let store: Store = Store::create_v2(&path, &runs_schema(), options.clone()).unwrap();
    store.append_fixed(&records(), 8, 1000).unwrap();
    drop(store);
    // Flip a byte of the only chunk: the record's CRC32C catches it first.
    let chunk = path.join("0.zr");
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[0] ^= 0x40;
    std::fs::write(&chunk, &bytes).unwrap();
    let store: Store = Store::open_with(&path, options).unwrap();
    let mut out = vec![0u8; 1000];
    let err = store.gather(&[0], &mut out, 1000).unwrap_err();
    assert!(matches!(err, Error::Corrupt { entry: 0, .. }), "{err:?}");
    assert!(
        err.to_string().contains("runs record (codec tag 200)"),
        "{err}"
    );
}
