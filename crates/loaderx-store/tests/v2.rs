//! Format v2 end to end: typed schemas, lanes, checksums, the dictionary
//! codec, and the ceilings format v1 had (records, record size, chunks).

mod common;

use std::fs;

use common::{contents, image_like};
use loaderx_store::{
    CodecId, Deflate, Error, OpenOptions, Store,
    format::{
        CodecTag,
        v2::{Dtype, Kind, Schema},
    },
    storage::MemStorage,
    train_dictionary,
};

/// A compressing codec besides DEFLATE: zstd, or lz4 in builds without
/// the `zstd` feature.
const SECOND: CodecTag = if cfg!(feature = "zstd") {
    CodecTag::ZSTD
} else {
    CodecTag::LZ4
};

fn dense(dtype: &str, shape: &[u64], codec: CodecTag) -> Schema {
    Schema {
        kind: Kind::Dense,
        dtype: Dtype::from_name(dtype).unwrap(),
        shape: shape.to_vec(),
        ndim: shape.len() as u8,
        codec,
        dictionary: None,
        codecs: Vec::new(),
    }
}

fn ragged(dtype: &str, ndim: u8, codec: CodecTag, dictionary: Option<Vec<u8>>) -> Schema {
    Schema {
        kind: Kind::Ragged,
        dtype: Dtype::from_name(dtype).unwrap(),
        shape: vec![],
        ndim,
        codec,
        dictionary,
        codecs: Vec::new(),
    }
}

fn lanes(n: u8) -> OpenOptions {
    OpenOptions {
        lanes: n,
        // The tests' small appends spread over every lane.
        lane_bytes: 0,
        ..OpenOptions::default()
    }
}

/// The per-record codecs this build has (the no-C build lacks zstd).
fn available_codecs() -> impl Iterator<Item = CodecTag> {
    [
        CodecTag::RAW,
        CodecTag::FLATE,
        CodecTag::ZSTD,
        CodecTag::LZ4,
    ]
    .into_iter()
    .filter(|&t| CodecId::from_tag(t).unwrap().missing_feature().is_none())
}

/// Token-like int32 sequences, 16..=512 tokens, as bytes.
fn tokens(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let len = 16 + (next() % 497) as usize;
            (0..len)
                .flat_map(|_| {
                    let r = next() % 1000;
                    // Zipf-ish: small ids are common.
                    let id = (r * r / 1000) as i32;
                    id.to_le_bytes()
                })
                .collect()
        })
        .collect()
}

fn pack(records: &[Vec<u8>]) -> (Vec<u8>, Vec<u64>, Vec<u32>) {
    let mut src = Vec::new();
    let mut offsets = Vec::new();
    let mut lens = Vec::new();
    for r in records {
        offsets.push(src.len() as u64);
        lens.push(r.len() as u32);
        src.extend_from_slice(r);
    }
    (src, offsets, lens)
}

#[test]
fn a_dense_store_round_trips_through_every_codec_and_lane_count() {
    for codec in available_codecs() {
        for n_lanes in [1u8, 3] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("d");
            let schema = dense("|u1", &[3, 16, 16], codec);
            let items: Vec<u8> = (0..40).flat_map(|i| image_like(i, 768)).collect();
            {
                let store: Store = Store::create_v2(&path, &schema, lanes(n_lanes)).unwrap();
                assert_eq!(store.format_version(), 2);
                store.append_fixed(&items[..768 * 25], 25, 768).unwrap();
                store.append_fixed(&items[768 * 25..], 15, 768).unwrap();
                // A record of another size is refused by the schema.
                let err = store.append_fixed(&items[..767], 1, 767).unwrap_err();
                assert!(matches!(err, Error::Schema { .. }), "{err}");
                assert!(err.to_string().contains("768 bytes"), "{err}");
            }
            let store: Store = Store::open_read_only(&path).unwrap();
            assert_eq!(store.schema(), Some(&schema));
            assert_eq!(store.len(), 40);
            let mut out = vec![0u8; 768 * 3];
            store.gather_exact(&[39, 0, 17], &mut out, 768).unwrap();
            assert_eq!(&out[..768], &items[768 * 39..768 * 40]);
            assert_eq!(&out[768..1536], &items[..768]);
            assert_eq!(&out[1536..], &items[768 * 17..768 * 18]);
            store.verify().unwrap();
            assert!(store.damaged().unwrap().is_empty());
            if n_lanes == 3 {
                for c in 0..3 {
                    assert!(path.join(format!("{c}.zr")).exists());
                }
            }
        }
    }
}

#[test]
fn ragged_records_keep_their_dimensions_and_refuse_mismatches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r");
    let schema = ragged("<f4", 3, SECOND, None);
    let shapes: Vec<[u32; 3]> = (0..30).map(|i| [1 + i % 3, 2 + i % 5, 1 + i % 7]).collect();
    let records: Vec<Vec<u8>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| image_like(i as u64, (s[0] * s[1] * s[2] * 4) as usize))
        .collect();
    let (src, offsets, lens) = pack(&records);
    let dims: Vec<u32> = shapes.iter().flatten().copied().collect();
    {
        let store: Store = Store::create_v2(&path, &schema, lanes(2)).unwrap();
        store.append_shaped(&src, &offsets, &lens, &dims).unwrap();
        let mut bad = dims.clone();
        bad[4] += 1;
        let err = store
            .append_shaped(&src, &offsets, &lens, &bad)
            .unwrap_err();
        assert!(err.to_string().contains("record 1"), "{err}");
        let err = store.append_fixed(&src[..8], 1, 8).unwrap_err();
        assert!(err.to_string().contains("append_shaped"), "{err}");
        assert_eq!(store.len(), 30);
    }
    let store: Store = Store::open(&path).unwrap();
    assert_eq!(contents(&store), records);
    let mut got = vec![0u32; 6];
    store.dims(&[29, 3], &mut got).unwrap();
    assert_eq!(&got[..3], &shapes[29]);
    assert_eq!(&got[3..], &shapes[3]);
}

#[test]
fn records_in_buffers_of_their_own_store_like_packed_ones() {
    let records = tokens(11, 400);
    let dims: Vec<u32> = records.iter().map(|r| r.len() as u32 / 4).collect();
    let (src, offsets, lens) = pack(&records);
    // Three records of 30 MiB: the append crosses its 64 MiB windows.
    let big: Vec<Vec<u8>> = (0..3).map(|i| image_like(i, 30 << 20)).collect();
    let big_dims: Vec<u32> = big.iter().map(|r| r.len() as u32 / 4).collect();
    for codec in available_codecs() {
        for n_lanes in [1u8, 3] {
            let dir = tempfile::tempdir().unwrap();
            let (packed, parts) = (dir.path().join("packed"), dir.path().join("parts"));
            let schema = ragged("<i4", 1, codec, None);
            let a: Store = Store::create_v2(&packed, &schema, lanes(n_lanes)).unwrap();
            let b: Store = Store::create_v2(&parts, &schema, lanes(n_lanes)).unwrap();
            a.append_shaped(&src, &offsets, &lens, &dims).unwrap();
            let views: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            assert_eq!(b.append_shaped_parts(&views, &dims).unwrap(), 0);
            if codec == CodecTag::RAW {
                let views: Vec<&[u8]> = big.iter().map(Vec::as_slice).collect();
                assert_eq!(b.append_shaped_parts(&views, &big_dims).unwrap(), 400);
            }
            // Refused whole: a record whose dimensions do not give its size,
            // a dims array of the wrong length, an oversized record.
            let mut bad = dims.clone();
            bad[7] += 1;
            let err = b.append_shaped_parts(&views, &bad).unwrap_err();
            assert!(err.to_string().contains("record 7"), "{err}");
            let err = b.append_shaped_parts(&views, &dims[1..]).unwrap_err();
            assert!(matches!(err, Error::LengthMismatch { .. }), "{err}");
            let expected_len = if codec == CodecTag::RAW { 403 } else { 400 };
            assert_eq!(b.len(), expected_len);
            b.sync().unwrap();
            let got = contents(&b);
            assert_eq!(got[..400], contents(&a)[..], "{codec:?} {n_lanes}");
            assert_eq!(got[400..], big[..got.len() - 400]);
            let mut d = vec![0u32; 2];
            b.dims(&[399, 0], &mut d).unwrap();
            assert_eq!(d, [dims[399], dims[0]]);
            b.verify().unwrap();
        }
    }
    // A bytes or dense store takes no dimensions.
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::create_v2(
        dir.path().join("d"),
        &dense("<i4", &[4], CodecTag::RAW),
        lanes(1),
    )
    .unwrap();
    let err = store
        .append_shaped_parts(&[&[0u8; 16][..]], &[4])
        .unwrap_err();
    assert!(err.to_string().contains("ragged store"), "{err}");
}

#[test]
fn delete_and_compact_keep_every_survivor_and_its_dimensions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r");
    let schema = ragged("<i4", 1, CodecTag::LZ4, None);
    let records = tokens(7, 300);
    let (src, offsets, lens) = pack(&records);
    let dims: Vec<u32> = lens.iter().map(|l| l / 4).collect();
    let options = OpenOptions {
        chunk_capacity: 20_000,
        ..lanes(3)
    };
    let mut store: Store = Store::create_v2(&path, &schema, options.clone()).unwrap();
    store.append_shaped(&src, &offsets, &lens, &dims).unwrap();
    let mut model = records.clone();
    let doomed = [0u64, 5, 299, 150, 151, 7];
    store.delete(&doomed).unwrap();
    let mut sorted = doomed.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    for idx in sorted {
        let last = model.pop().unwrap();
        if (idx as usize) < model.len() {
            model[idx as usize] = last;
        }
    }
    assert_eq!(contents(&store), model);
    let before = store.stats().unwrap();
    store.compact().unwrap();
    let after = store.stats().unwrap();
    assert!(
        after.chunk_bytes < before.chunk_bytes,
        "{before:?} -> {after:?}"
    );
    // What is left is the unused ends of full chunks (records never straddle).
    assert!(
        after.reclaimable < before.reclaimable,
        "{before:?} -> {after:?}"
    );
    assert_eq!(contents(&store), model);
    let idxs: Vec<u64> = (0..model.len() as u64).collect();
    let mut got = vec![0u32; model.len()];
    store.dims(&idxs, &mut got).unwrap();
    assert!(
        got.iter()
            .zip(&model)
            .all(|(&d, r)| d as usize * 4 == r.len())
    );
    drop(store);
    let store: Store = Store::open_with(&path, options).unwrap();
    assert_eq!(contents(&store), model);
    store.verify().unwrap();
}

/// Rewrites the start of a file the store has mapped with `bytes` (of the
/// file's length) without truncating it first, as `fs::write` would: Windows
/// refuses to truncate a mapped file.
fn overwrite_in_place(file: &std::path::Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new().write(true).open(file).unwrap();
    std::io::Write::write_all(&mut f, bytes).unwrap();
}

#[cfg(feature = "zstd")]
#[test]
fn damage_to_a_record_an_entry_the_schema_or_the_dictionary_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("z");
    let records = tokens(3, 400);
    let (src, offsets, lens) = pack(&records);
    let dict = train_dictionary(
        &src,
        &lens.iter().map(|&l| l as usize).collect::<Vec<_>>(),
        16 << 10,
    )
    .unwrap();
    let schema = ragged("<i4", 1, CodecTag::ZSTD_DICT, Some(dict));
    let dims: Vec<u32> = lens.iter().map(|l| l / 4).collect();
    {
        let store: Store = Store::create_v2(&path, &schema, OpenOptions::default()).unwrap();
        store.append_shaped(&src, &offsets, &lens, &dims).unwrap();
    }
    let store: Store = Store::open_read_only(&path).unwrap();
    assert_eq!(contents(&store), records);
    drop(store);

    // A flipped byte inside record 10's stored bytes.
    let meta = fs::read(path.join("meta.zr")).unwrap();
    let chunk = fs::read(path.join("0.zr")).unwrap();
    let store: Store = Store::open_read_only(&path).unwrap();
    let stored_at: usize = {
        // Records are packed in order in one lane: record 10 starts after the
        // stored bytes of records 0..10, which `stats` cannot tell; find it
        // by damaging each byte until record 10 (and only it) fails.
        let mut at = 0;
        for i in 0..chunk.len() {
            let mut bad = chunk.clone();
            bad[i] ^= 0x40;
            overwrite_in_place(&path.join("0.zr"), &bad);
            let damaged = store.damaged().unwrap();
            if damaged.first().map(|d| d.0) == Some(10) {
                at = i;
                break;
            }
        }
        at
    };
    let damaged = store.damaged().unwrap();
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert!(damaged[0].1.contains("checksum"), "{damaged:?}");
    let len = records[10].len();
    let mut out = vec![0u8; len];
    let err = store.gather(&[10], &mut out, len).unwrap_err();
    assert!(matches!(err, Error::Corrupt { entry: 10, .. }), "{err}");
    assert!(err.to_string().contains("0.zr"), "{err}");
    assert!(stored_at > 0);
    overwrite_in_place(&path.join("0.zr"), &chunk);
    drop(store);

    // A flipped byte in table entry 3.
    let table = loaderx_store::format::v2::table_offset(u32::from_le_bytes(
        meta[24..28].try_into().unwrap(),
    )) as usize;
    let entry_len = u16::from_le_bytes(meta[32..34].try_into().unwrap()) as usize;
    let mut bad = meta.clone();
    bad[table + 3 * entry_len + 9] ^= 1;
    fs::write(path.join("meta.zr"), &bad).unwrap();
    let store: Store = Store::open_read_only(&path).unwrap();
    let damaged = store.damaged().unwrap();
    assert_eq!(damaged.iter().map(|d| d.0).collect::<Vec<_>>(), [3]);
    assert!(damaged[0].1.contains("entry checksum"), "{damaged:?}");
    assert!(store.verify().is_err());
    drop(store);

    // The schema block, and the dictionary inside it.
    for (what, at) in [("schema", 8192 + 5), ("dictionary", 8192 + 200)] {
        let mut bad = meta.clone();
        bad[at] ^= 1;
        fs::write(path.join("meta.zr"), &bad).unwrap();
        let err = Store::<Deflate>::open_read_only(&path).unwrap_err();
        assert_eq!(err.code(), -8, "{err}");
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
    fs::write(path.join("meta.zr"), &meta).unwrap();
    Store::<Deflate>::open_read_only(&path)
        .unwrap()
        .verify()
        .unwrap();
}

#[test]
fn a_torn_header_slot_falls_back_to_the_previous_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let schema = Schema::bytes(CodecTag::RAW);
    {
        let store: Store = Store::create_v2(&path, &schema, OpenOptions::default()).unwrap();
        store.append_fixed(&[1u8; 40], 4, 10).unwrap();
        store.sync().unwrap();
        store.append_fixed(&[2u8; 20], 2, 10).unwrap();
    }
    let mut meta = fs::read(path.join("meta.zr")).unwrap();
    let seq = |m: &[u8], at: usize| u64::from_le_bytes(m[at + 8..at + 16].try_into().unwrap());
    let newest = if seq(&meta, 0) > seq(&meta, 4096) {
        0
    } else {
        4096
    };
    meta[newest + 20] ^= 0xff;
    fs::write(path.join("meta.zr"), &meta).unwrap();
    let store: Store = Store::open_read_only(&path).unwrap();
    assert_eq!(store.len(), 4);
    assert_eq!(contents(&store), vec![vec![1u8; 10]; 4]);
    drop(store);

    // Slot 0 damaged where the version is: still a v2 store, read from
    // slot 1.
    let mut meta = fs::read(path.join("meta.zr")).unwrap();
    meta[newest + 20] ^= 0xff;
    meta[4] ^= 0xff;
    fs::write(path.join("meta.zr"), &meta).unwrap();
    let store: Store = Store::open_read_only(&path).unwrap();
    assert_eq!(store.format_version(), 2);
    assert_eq!(store.len(), if newest == 0 { 4 } else { 6 });
}

#[test]
fn creating_over_a_store_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let schema = dense("<i8", &[], CodecTag::RAW);
    {
        let store: Store = Store::create_v2(&path, &schema, OpenOptions::default()).unwrap();
        store.append_fixed(&[7u8; 16], 2, 8).unwrap();
    }
    let before = fs::read(path.join("meta.zr")).unwrap();
    let err = Store::<Deflate>::create_v2(&path, &schema, OpenOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Exists { .. }), "{err}");
    assert_eq!(fs::read(path.join("meta.zr")).unwrap(), before);
    for bad in [
        dense("<f4", &[3, 0], CodecTag::RAW),
        ragged("<f4", 1, CodecTag::ZSTD_DICT, None),
        ragged("<f4", 0, CodecTag::RAW, None),
    ] {
        let p = dir.path().join("bad");
        let err = Store::<Deflate>::create_v2(&p, &bad, OpenOptions::default()).unwrap_err();
        assert!(!p.exists());
        if bad.codec == CodecTag::ZSTD_DICT && !cfg!(feature = "zstd") {
            // Refused for the codec this build lacks, first.
            assert!(matches!(err, Error::CodecUnavailable { .. }), "{err}");
            continue;
        }
        // A bad argument, not a damaged store (-8).
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert_eq!(err.code(), -4, "{err}");
        assert!(!p.exists());
    }
    let err = Store::<Deflate>::create_v2(dir.path().join("l"), &schema, lanes(17)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                argument: "lanes",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_64_mib_record_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let schema = Schema::bytes(SECOND);
    let record = image_like(1, 64 << 20);
    let store: Store = Store::create_v2(&path, &schema, OpenOptions::default()).unwrap();
    store
        .append_fixed_with(CodecId::from_tag(SECOND).unwrap(), &record, 1, record.len())
        .unwrap();
    let mut out = vec![0u8; record.len()];
    store.gather_exact(&[0], &mut out, record.len()).unwrap();
    assert!(out == record);
}

#[test]
fn chunk_ids_past_65536_work() {
    let storage = MemStorage::new();
    let options = OpenOptions {
        chunk_capacity: 16,
        ..OpenOptions::default()
    };
    let schema = Schema::bytes(CodecTag::RAW);
    let store: Store<Deflate, MemStorage> =
        Store::create_v2_in(storage.clone(), &schema, options.clone()).unwrap();
    // One 10-byte record per 16-byte chunk.
    let n = 65_540usize;
    let src: Vec<u8> = (0..n).flat_map(|i| [(i % 251) as u8; 10]).collect();
    store.append_fixed(&src, n, 10).unwrap();
    drop(store);
    let store: Store<Deflate, MemStorage> = Store::open_in(storage, options).unwrap();
    let mut out = vec![0u8; 20];
    store.gather(&[65_539, 1], &mut out, 10).unwrap();
    assert_eq!(out[0], (65_539 % 251) as u8);
    assert_eq!(out[10], 1);
    assert_eq!(store.stats().unwrap().records, n as u64);
}

#[test]
fn a_store_crosses_two_to_the_24_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many");
    let schema = dense("|u1", &[], CodecTag::RAW);
    let n = (1usize << 24) + 3;
    let src: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    {
        let store: Store = Store::create_v2(&path, &schema, OpenOptions::default()).unwrap();
        store.append_fixed(&src[..n / 2], n / 2, 1).unwrap();
        store.append_fixed(&src[n / 2..], n - n / 2, 1).unwrap();
    }
    let store: Store = Store::open_read_only(&path).unwrap();
    assert_eq!(store.len(), n as u64);
    let last = [n as u64 - 1, 1 << 24, 0];
    let mut out = [0u8; 3];
    store.gather_exact(&last, &mut out, 1).unwrap();
    assert_eq!(out, [src[n - 1], src[1 << 24], src[0]]);
}

#[cfg(not(feature = "zstd"))]
#[test]
fn zstd_stores_are_refused_naming_the_feature_in_builds_without_it() {
    let dir = tempfile::tempdir().unwrap();
    for (tag, dict) in [
        (CodecTag::ZSTD, None),
        (CodecTag::ZSTD_DICT, Some(b"whatever".to_vec())),
    ] {
        let path = dir.path().join(format!("s{}", tag.0));
        let err = Store::<Deflate>::create_v2(
            &path,
            &ragged("<i4", 1, tag, dict),
            OpenOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(err, Error::CodecUnavailable { .. }), "{err:?}");
        assert!(
            err.to_string().contains("enable cargo feature `zstd`"),
            "{err}"
        );
        assert!(!path.join("meta.zr").exists());
    }
    let err = train_dictionary(&[0u8; 70], &[10; 7], 1024).unwrap_err();
    assert!(err.to_string().contains("`zstd`"), "{err}");
    // Appending zstd records to a store of another codec is refused the same way.
    let store: Store = Store::create_v2(
        dir.path().join("f"),
        &Schema::bytes(CodecTag::FLATE),
        OpenOptions::default(),
    )
    .unwrap();
    let err = store
        .append_fixed_with(CodecId::Zstd, &[1u8; 100], 1, 100)
        .unwrap_err();
    assert!(err.to_string().contains("`zstd`"), "{err}");
    assert_eq!(store.len(), 0);
}

#[cfg(feature = "zstd")]
#[test]
fn the_dictionary_is_refused_when_damaged_at_creation() {
    // The zstd dictionary magic and an id, then entropy tables that are
    // garbage (bytes without the magic would be a raw-content dictionary).
    let damaged: Vec<u8> = [
        &loaderx_store::DICT_MAGIC[..],
        &7u32.to_le_bytes(),
        &[0xff; 100],
    ]
    .concat();
    let err = loaderx_store::ZstdDictionary::new(&damaged).unwrap_err();
    assert!(err.to_string().contains("corrupt"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let schema = ragged("<i4", 1, CodecTag::ZSTD_DICT, Some(damaged));
    let err = Store::<Deflate>::create_v2(dir.path().join("x"), &schema, OpenOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("dictionary"), "{err}");
}

/// Appends are encoded and written in windows of 64 MiB of source: one of
/// 80 MiB crosses a window boundary in both layouts, and every record is
/// where the append order puts it.
#[test]
fn an_append_larger_than_a_window_lands_whole_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let rec = 1 << 20;
    let n = 80;
    let src: Vec<u8> = (0..n).flat_map(|i| vec![i as u8; rec]).collect();
    let fixed: Store = Store::create_v2(
        dir.path().join("f"),
        &Schema::bytes(CodecTag::RAW),
        lanes(2),
    )
    .unwrap();
    fixed.append_fixed(&src, n, rec).unwrap();
    let ragged: Store = Store::create_v2(
        dir.path().join("r"),
        &Schema::bytes(CodecTag::LZ4),
        lanes(3),
    )
    .unwrap();
    let offsets: Vec<u64> = (0..n as u64).map(|i| i * rec as u64).collect();
    ragged
        .append_ragged(&src, &offsets, &vec![rec as u32; n])
        .unwrap();
    for store in [&fixed, &ragged] {
        assert_eq!(store.len(), n as u64);
        let mut out = vec![0u8; 3 * rec];
        store.gather_exact(&[79, 0, 64], &mut out, rec).unwrap();
        assert!(out[..rec].iter().all(|&b| b == 79));
        assert!(out[rec..2 * rec].iter().all(|&b| b == 0));
        assert!(out[2 * rec..].iter().all(|&b| b == 64));
        store.verify().unwrap();
    }
}

/// `append_fixed`/`append_ragged` on a v2 store use the schema's codec,
/// whatever the handle's default codec type is.
#[cfg(feature = "zstd")]
#[test]
fn appends_use_the_schema_codec() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store<Deflate> = Store::create_v2(
        dir.path().join("s"),
        &dense("|u1", &[4096], CodecTag::ZSTD),
        OpenOptions::default(),
    )
    .unwrap();
    assert_eq!(store.append_codec(), CodecId::Zstd);
    store.append_fixed(&vec![7u8; 4096 * 4], 4, 4096).unwrap();
    store.sync().unwrap();
    // Each record is a zstd frame (magic 28 B5 2F FD), not DEFLATE.
    let chunk = fs::read(dir.path().join("s").join("0.zr")).unwrap();
    assert_eq!(&chunk[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
}

#[test]
fn empty_sequences_of_a_ragged_store_round_trip_with_every_codec() {
    for codec in available_codecs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let mut records = tokens(11, 40);
        for i in [0, 7, 8, 39] {
            records[i].clear();
        }
        let (src, offsets, lens) = pack(&records);
        let dims: Vec<u32> = lens.iter().map(|l| l / 4).collect();
        let store: Store =
            Store::create_v2(&path, &ragged("<i4", 1, codec, None), lanes(2)).unwrap();
        store.append_shaped(&src, &offsets, &lens, &dims).unwrap();
        assert_eq!(contents(&store), records, "{codec:?}");
        let mut got = vec![9u32; 2];
        store.dims(&[7, 1], &mut got).unwrap();
        assert_eq!(got[0], 0);
        assert!(got[1] > 0);
        drop(store);
        // Reopened, checked, then moved about by a delete and a compaction.
        let mut store: Store = Store::open(&path).unwrap();
        assert!(store.damaged().unwrap().is_empty(), "{codec:?}");
        assert_eq!(contents(&store), records);
        store.delete(&[1]).unwrap();
        records[1] = records.pop().unwrap();
        store.compact().unwrap();
        assert_eq!(contents(&store), records);
    }
}

/// Records of 64 KiB and more are read with a positioned read rather than
/// from the map (into the destination when raw, into a scratch buffer they
/// are decoded from otherwise): both sides of the threshold round-trip with
/// every codec, alone and mixed in one batch, and a damaged large record
/// is still an error naming it.
#[test]
fn records_on_both_sides_of_the_read_threshold_round_trip_and_damage_is_named() {
    for codec in available_codecs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let sizes = [65_535usize, 65_536, 65_537, 10, 300_000, 1 << 20];
        let records: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| image_like(i as u64 + 1, n))
            .collect();
        let (src, offsets, lens) = pack(&records);
        {
            let schema = ragged("|u1", 1, codec, None);
            let store: Store = Store::create_v2(&path, &schema, OpenOptions::default()).unwrap();
            store.append_shaped(&src, &offsets, &lens, &lens).unwrap();
        }
        let store: Store = Store::open_read_only(&path).unwrap();
        assert_eq!(contents(&store), records, "{codec:?}");
        let idxs = [5u64, 0, 4, 3, 1, 2, 5];
        let mut at = Vec::new();
        let mut end = 0u64;
        for &i in &idxs {
            at.push(end);
            end += records[i as usize].len() as u64;
        }
        let mut out = vec![0u8; end as usize];
        store.gather_ragged(&idxs, &mut out, &at).unwrap();
        for (k, &i) in idxs.iter().enumerate() {
            let got = &out[at[k] as usize..][..records[i as usize].len()];
            assert!(got == records[i as usize], "{codec:?} record {i}");
        }
        drop(store);

        // The last stored byte belongs to the last, 1 MiB record.
        let chunk = path.join("0.zr");
        let mut bytes = fs::read(&chunk).unwrap();
        *bytes.last_mut().unwrap() ^= 0x10;
        overwrite_in_place(&chunk, &bytes);
        let options = OpenOptions {
            check_raw: true,
            ..OpenOptions::default()
        };
        let store: Store = Store::open_with(&path, options).unwrap();
        let mut out = vec![0u8; 1 << 20];
        let err = store.gather(&[5], &mut out, 1 << 20).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { entry: 5, .. }),
            "{codec:?}: {err}"
        );
        assert!(err.to_string().contains("0.zr"), "{err}");
        let mut out = vec![0u8; 300_000];
        store.gather(&[4], &mut out, 300_000).unwrap();
        assert!(out == records[4]);
    }
}

/// An append places its records in as many lanes as it fills with
/// `lane_bytes` each (lane 0 first, every lane at most), and `lane_bytes: 0`
/// spreads even a small append over every lane; either way every record
/// reads back.
#[test]
fn appends_use_as_many_lanes_as_they_fill() {
    let dir = tempfile::tempdir().unwrap();
    let written = |path: &std::path::Path| -> Vec<u32> {
        (0..4u32)
            .filter(|c| std::fs::metadata(path.join(format!("{c}.zr"))).is_ok_and(|m| m.len() > 0))
            .collect()
    };
    let schema = Schema::bytes(CodecTag::RAW);
    let records: Vec<u8> = (0..80u32).flat_map(|i| [i as u8; 100]).collect();
    let path = dir.path().join("filled");
    let options = OpenOptions {
        lanes: 4,
        lane_bytes: 1000,
        ..OpenOptions::default()
    };
    let store: Store = Store::create_v2(&path, &schema, options).unwrap();
    // 500 bytes: one lane's worth.
    store.append_fixed(&records[..500], 5, 100).unwrap();
    assert_eq!(written(&path), [0]);
    // 2,500 bytes: three lanes.
    store.append_fixed(&records[500..3000], 25, 100).unwrap();
    assert_eq!(written(&path), [0, 1, 2]);
    assert_eq!(std::fs::metadata(path.join("3.zr")).unwrap().len(), 0);
    // 5,000 bytes: all four (no more than the store has).
    store.append_fixed(&records[3000..8000], 50, 100).unwrap();
    assert_eq!(written(&path), [0, 1, 2, 3]);
    let mut out = vec![0u8; 8000];
    let all: Vec<u64> = (0..80).collect();
    store.gather_exact(&all, &mut out, 100).unwrap();
    assert_eq!(out, records);

    let path = dir.path().join("spread");
    let store: Store = Store::create_v2(&path, &schema, lanes(4)).unwrap();
    store.append_fixed(&records[..500], 5, 100).unwrap();
    assert_eq!(written(&path), [0, 1, 2, 3]);
    let mut out = vec![0u8; 500];
    store.gather_exact(&[0, 1, 2, 3, 4], &mut out, 100).unwrap();
    assert_eq!(out, records[..500]);
}

/// `n` records of `len` random bytes: no codec shrinks them, so a
/// compressed store keeps each raw.
fn incompressible(seed: u64, n: usize, len: usize) -> Vec<Vec<u8>> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        })
        .collect()
}

/// Where record `index`'s stored bytes are, read from the table on disk.
fn stored_at(path: &std::path::Path, index: u64) -> loaderx_store::format::RecordLoc {
    use loaderx_store::format::v2;
    let meta = fs::read(path.join("meta.zr")).unwrap();
    let schema_len = u32::from_le_bytes(meta[24..28].try_into().unwrap());
    let entry_len = usize::from(u16::from_le_bytes(meta[32..34].try_into().unwrap()));
    let at = v2::table_offset(schema_len) as usize + index as usize * entry_len;
    v2::decode_entry(index, &meta[at..at + entry_len]).unwrap()
}

#[test]
fn a_damaged_raw_kept_record_of_a_compressed_store_fails_every_gather() {
    let mut codecs: Vec<CodecTag> = available_codecs().filter(|&c| c != CodecTag::RAW).collect();
    if cfg!(feature = "zstd") {
        codecs.push(CodecTag::ZSTD_DICT);
    }
    // Small records (gathered from the map, and in batches of one length
    // through the index of raw records) and large ones (read with pread).
    for len in [96usize, 150 << 10] {
        for &codec in &codecs {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s");
            let records = incompressible(len as u64, 12, len);
            let schema = if codec == CodecTag::ZSTD_DICT {
                let samples = tokens(5, 400);
                let (src, _, lens) = pack(&samples);
                let sizes: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
                let dict = train_dictionary(&src, &sizes, 8 << 10).unwrap();
                ragged("|u1", 1, codec, Some(dict))
            } else {
                Schema::bytes(codec)
            };
            {
                let store: Store =
                    Store::create_v2(&path, &schema, OpenOptions::default()).unwrap();
                let dims = vec![len as u32; records.len()];
                let (src, offsets, lens) = pack(&records);
                if schema.kind == Kind::Ragged {
                    store.append_shaped(&src, &offsets, &lens, &dims).unwrap();
                } else {
                    store.append_ragged(&src, &offsets, &lens).unwrap();
                }
            }
            let loc = stored_at(&path, 5);
            assert_eq!(loc.codec, CodecTag::RAW, "{codec:?}: record 5 was kept raw");
            let mut chunk = fs::read(path.join(format!("{}.zr", loc.chunk_id))).unwrap();
            chunk[loc.offset as usize + len / 2] ^= 0x10;
            fs::write(path.join(format!("{}.zr", loc.chunk_id)), &chunk).unwrap();

            let store: Store = Store::open_read_only(&path).unwrap();
            let all: Vec<u64> = (0..12).collect();
            let mut out = vec![0u8; all.len() * len];
            // Twice: the first batch of small raw records indexes them, the
            // second is copied through that index.
            for round in 0..2 {
                let err = store.gather(&all, &mut out, len).unwrap_err();
                assert!(
                    matches!(err, Error::Corrupt { entry: 5, .. }),
                    "{codec:?}, {len}-byte records, round {round}: {err}"
                );
                assert!(err.to_string().contains("checksum"), "{err}");
            }
            let err = store.gather(&[5], &mut out[..len], len).unwrap_err();
            assert!(matches!(err, Error::Corrupt { entry: 5, .. }), "{err}");
            // The other records still read, through every path.
            let rest: Vec<u64> = (0..12).filter(|&i| i != 5).collect();
            for _ in 0..2 {
                store
                    .gather(&rest, &mut out[..rest.len() * len], len)
                    .unwrap();
                for (k, &i) in rest.iter().enumerate() {
                    assert_eq!(&out[k * len..(k + 1) * len], &records[i as usize][..]);
                }
            }
        }
    }
}

#[test]
fn a_raw_store_checks_raw_records_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let records = incompressible(9, 12, 64);
    {
        let store: Store =
            Store::create_v2(&path, &Schema::bytes(CodecTag::RAW), OpenOptions::default()).unwrap();
        let (src, offsets, lens) = pack(&records);
        store.append_ragged(&src, &offsets, &lens).unwrap();
    }
    let loc = stored_at(&path, 3);
    let file = path.join(format!("{}.zr", loc.chunk_id));
    let mut chunk = fs::read(&file).unwrap();
    chunk[loc.offset as usize] ^= 1;
    fs::write(&file, &chunk).unwrap();
    let mut out = vec![0u8; 64];
    // The documented trade: a raw store's reads copy without checking...
    Store::<Deflate>::open_read_only(&path)
        .unwrap()
        .gather(&[3], &mut out, 64)
        .unwrap();
    // ...unless asked to, and verify always checks.
    let checked: Store = Store::open_with(
        &path,
        OpenOptions {
            check_raw: true,
            ..OpenOptions::read_only()
        },
    )
    .unwrap();
    let err = checked.gather(&[3], &mut out, 64).unwrap_err();
    assert!(matches!(err, Error::Corrupt { entry: 3, .. }), "{err}");
    assert!(checked.verify().is_err());
}

/// A creation refused for a bad argument names that argument, is not taken
/// for a damaged store (it was "not a loaderx store: damaged or invalid
/// schema block", code -8), and makes nothing, not even the directories.
#[test]
fn invalid_create_arguments_are_named_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let usable = vec![7u8; 64];
    let cases: [(&str, Schema, u8, &str); 9] = [
        (
            "shape",
            dense("<f4", &[4, 0], CodecTag::RAW),
            1,
            "dimension 1 = 0",
        ),
        (
            "shape",
            dense("<f8", &[1 << 40, 1 << 40, 1 << 40], CodecTag::RAW),
            1,
            "over 2^64 - 1 bytes",
        ),
        (
            "shape",
            dense("|u1", &[1 << 32], CodecTag::RAW),
            1,
            "record limit",
        ),
        ("ndim", ragged("<i4", 0, CodecTag::RAW, None), 1, "1..=16"),
        ("ndim", ragged("<i4", 17, CodecTag::RAW, None), 1, "1..=16"),
        (
            "codec",
            dense("<i4", &[2], CodecTag(9)),
            1,
            "unknown codec tag 9",
        ),
        (
            "dictionary",
            ragged("<i4", 1, CodecTag::ZSTD_DICT, None),
            1,
            "needs a dictionary",
        ),
        (
            "lanes",
            dense("<i4", &[2], CodecTag::RAW),
            0,
            "0 write lanes",
        ),
        (
            "lanes",
            dense("<i4", &[2], CodecTag::RAW),
            17,
            "17 write lanes",
        ),
    ];
    for (k, (argument, schema, lanes, fragment)) in cases.into_iter().enumerate() {
        if schema.codec == CodecTag::ZSTD_DICT && !cfg!(feature = "zstd") {
            // Refused for the codec first (`zstd_stores_are_refused_...`).
            continue;
        }
        let path = dir.path().join(format!("n{k}")).join("s");
        let options = OpenOptions {
            lanes,
            ..OpenOptions::default()
        };
        let err = Store::<Deflate>::create_v2(&path, &schema, options.clone()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("invalid {argument}: "))
                && text.contains(fragment)
                && text.contains(&path.display().to_string()),
            "{argument}: {text}"
        );
        assert!(!text.contains("damaged"), "{argument}: {text}");
        assert_ne!(err.code(), loaderx_store::ErrorCode::NotAStore, "{text}");
        assert!(
            matches!(&err, Error::InvalidArgument { argument: a, .. } if a == &argument),
            "{err:?}"
        );
        assert!(!path.exists() && !path.parent().unwrap().exists(), "{text}");
        // Through the storage seam too, which has no directory to spare.
        let err = Store::<Deflate, MemStorage>::create_v2_in(MemStorage::new(), &schema, options)
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { argument: a, .. } if a == &argument),
            "{err:?}"
        );
    }
    // A dictionary zstd cannot load is a bad argument as well.
    if cfg!(feature = "zstd") {
        let mut unusable = vec![0x37, 0xa4, 0x30, 0xec, 0, 0, 0, 0];
        unusable.resize(200, 0);
        let path = dir.path().join("dict").join("s");
        let schema = ragged("<i4", 1, CodecTag::ZSTD_DICT, Some(unusable));
        let err = Store::<Deflate>::create_v2(&path, &schema, OpenOptions::default()).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::InvalidArgument {
                    argument: "dictionary",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!path.parent().unwrap().exists(), "{err}");
        let ok = ragged("<i4", 1, CodecTag::ZSTD_DICT, Some(usable));
        Store::<Deflate>::create_v2(&path, &ok, OpenOptions::default()).unwrap();
    }
}
