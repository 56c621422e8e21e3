//! Behaviour of the store on real files: round trips, rollover, delete,
//! compact, mixed codecs, read-only opens, and every refused argument.

mod common;

use std::fs;

use common::{contents, image_like, small_chunks};
use loaderx_store::{CodecId, Deflate, Error, OpenOptions, Raw, Store, format::entry_offset};

/// A second codec to make a handle's default: zstd, or lz4 in builds
/// without the `zstd` feature.
#[cfg(feature = "zstd")]
type Other = loaderx_store::Zstd;
#[cfg(not(feature = "zstd"))]
type Other = loaderx_store::Lz4;

fn fixed_batch(n: usize, len: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .flat_map(|i| image_like(seed + i as u64, len))
        .collect()
}

#[test]
fn fixed_records_round_trip_with_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    for codec in CodecId::available() {
        let store: Store = Store::open(dir.path().join(codec.name())).unwrap();
        let src = fixed_batch(300, 3000, 1);
        assert_eq!(store.append_fixed_with(codec, &src, 300, 3000).unwrap(), 0);
        assert_eq!(store.len(), 300);
        let idxs: Vec<u64> = (0..300).rev().collect();
        let mut dst = vec![0u8; 300 * 3000];
        store.gather(&idxs, &mut dst, 3000).unwrap();
        for (k, &i) in idxs.iter().enumerate() {
            let i = i as usize;
            assert_eq!(
                &dst[k * 3000..][..3000],
                &src[i * 3000..][..3000],
                "{codec}"
            );
        }
        store.verify().unwrap();
        let stats = store.stats().unwrap();
        if codec != CodecId::Raw {
            assert!(
                stats.live_bytes < src.len() as u64,
                "{codec} did not compress"
            );
        }
        assert_eq!(stats.reclaimable, stats.chunk_bytes - stats.live_bytes);
    }
}

#[test]
fn reopen_sees_what_was_appended_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let a = fixed_batch(10, 100, 1);
    let b = fixed_batch(5, 100, 50);
    {
        let store: Store = Store::open(&path).unwrap();
        store.append_fixed(&a, 10, 100).unwrap();
        store.sync().unwrap();
    }
    let store: Store<Other> = Store::open(&path).unwrap();
    assert_eq!(store.append_fixed(&b, 5, 100).unwrap(), 10);
    drop(store);
    let store: Store = Store::open_read_only(&path).unwrap();
    let all = contents(&store);
    assert_eq!(all.concat(), [a, b].concat());
}

#[test]
fn records_roll_over_onto_new_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store: Store<Raw> = Store::open_with(&path, small_chunks(1000)).unwrap();
    let src = fixed_batch(25, 300, 7);
    store.append_fixed(&src, 25, 300).unwrap();
    // 3 records per 1000-byte chunk (the 4th would end at 1200 >= 1000).
    assert!(path.join("8.zr").exists());
    assert!(!path.join("9.zr").exists());
    let stats = store.stats().unwrap();
    // What the files hold: the 100 bytes a full chunk leaves over are
    // never written (chunk files grow as written).
    assert_eq!(stats.chunk_bytes, 8 * 900 + 300);
    assert_eq!(contents(&store).concat(), src);
    drop(store);
    let store: Store<Raw> = Store::open_with(&path, small_chunks(1000)).unwrap();
    assert_eq!(contents(&store).concat(), src);
}

#[test]
fn ragged_records_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path().join("r")).unwrap();
    let blobs: Vec<Vec<u8>> = (0..40)
        .map(|i| vec![(i % 251) as u8; 100 + i * 13])
        .collect();
    let flat = blobs.concat();
    let lens: Vec<u32> = blobs.iter().map(|b| b.len() as u32).collect();
    let mut offsets = vec![0u64];
    for l in &lens[..39] {
        offsets.push(offsets.last().unwrap() + u64::from(*l));
    }
    store.append_ragged(&flat, &offsets, &lens).unwrap();
    let idxs: Vec<u64> = (0..40).collect();
    let mut got = vec![0u32; 40];
    store.lengths(&idxs, &mut got).unwrap();
    assert_eq!(got, lens);
    let mut out = vec![0u8; flat.len()];
    store.gather_ragged(&idxs, &mut out, &offsets).unwrap();
    assert_eq!(out, flat);
    // Reversed destination order works too.
    let rev: Vec<u64> = idxs.iter().rev().copied().collect();
    let mut rev_offsets = Vec::new();
    let mut at = 0;
    for &i in &rev {
        rev_offsets.push(at);
        at += u64::from(lens[i as usize]);
    }
    let mut out = vec![0u8; flat.len()];
    store.gather_ragged(&rev, &mut out, &rev_offsets).unwrap();
    let expect: Vec<u8> = rev
        .iter()
        .flat_map(|&i| blobs[i as usize].clone())
        .collect();
    assert_eq!(out, expect);
}

#[test]
fn incompressible_records_are_stored_raw() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path().join("n")).unwrap();
    let mut x = 0x1234_5678_9abc_def0u64;
    let noise: Vec<u8> = (0..32 * 4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    store.append_fixed(&noise, 32, 4096).unwrap();
    let stats = store.stats().unwrap();
    assert_eq!(stats.live_bytes, noise.len() as u64);
    assert_eq!(contents(&store).concat(), noise);
}

#[test]
fn tiny_records_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path().join("t")).unwrap();
    let src: Vec<u8> = (0..=255).collect();
    store.append_fixed(&src, 256, 1).unwrap();
    let idxs: Vec<u64> = (0..256).collect();
    let mut out = vec![0u8; 256];
    store.gather(&idxs, &mut out, 1).unwrap();
    assert_eq!(out, src);
}

#[test]
fn delete_keeps_the_index_space_dense() {
    let dir = tempfile::tempdir().unwrap();
    let mut store: Store = Store::open(dir.path().join("d")).unwrap();
    let src: Vec<u8> = (0..20u8).flat_map(|i| [i; 64]).collect();
    store.append_fixed(&src, 20, 64).unwrap();
    store.delete(&[19, 3, 3, 11]).unwrap();
    assert_eq!(store.len(), 17);
    let mut tags: Vec<u8> = contents(&store).iter().map(|r| r[0]).collect();
    tags.sort_unstable();
    let expect: Vec<u8> = (0..20).filter(|i| ![3, 11, 19].contains(i)).collect();
    assert_eq!(tags, expect);
    let mut out = [0u8; 64];
    assert!(matches!(
        store.gather(&[17], &mut out, 64),
        Err(Error::IndexOutOfRange { index: 17, len: 17 })
    ));
    // Deleting everything, then appending again.
    let all: Vec<u64> = (0..17).collect();
    store.delete(&all).unwrap();
    assert_eq!(store.len(), 0);
    assert_eq!(store.append_fixed(&src[..64], 1, 64).unwrap(), 0);
}

#[test]
fn compact_reclaims_space_and_keeps_contents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut store: Store = Store::open_with(&path, small_chunks(20_000)).unwrap();
    let src = fixed_batch(200, 2048, 3);
    store.append_fixed(&src, 200, 2048).unwrap();
    let evens: Vec<u64> = (0..200).step_by(2).collect();
    store.delete(&evens).unwrap();
    let before = contents(&store);
    let dirty = store.stats().unwrap();
    store.compact().unwrap();
    let clean = store.stats().unwrap();
    assert_eq!(clean.records, 100);
    assert_eq!(clean.live_bytes, dirty.live_bytes);
    assert!(clean.chunk_bytes < dirty.chunk_bytes);
    assert_eq!(contents(&store), before);
    store.verify().unwrap();
    let tail_chunk = (clean.chunk_bytes / 20_000) as u32;
    assert!(!path.join(format!("{}.zr", tail_chunk + 1)).exists());
    store.compact().unwrap();
    assert_eq!(store.stats().unwrap(), clean);
    drop(store);
    let store: Store = Store::open_with(&path, small_chunks(20_000)).unwrap();
    assert_eq!(contents(&store), before);
}

#[test]
fn a_store_may_mix_codecs() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path().join("m")).unwrap();
    let mut expect = Vec::new();
    for (k, codec) in CodecId::available().enumerate() {
        let src = fixed_batch(10, 500, k as u64 * 100);
        store.append_fixed_with(codec, &src, 10, 500).unwrap();
        expect.extend(src);
    }
    assert_eq!(contents(&store).concat(), expect);
    store.verify().unwrap();
}

#[test]
fn read_only_open_never_creates_or_writes() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent");
    let err = Store::<Deflate>::open_read_only(&absent).unwrap_err();
    assert_eq!(err.code(), -8);
    assert!(!absent.exists());

    let path = dir.path().join("s");
    Store::<Deflate>::open(&path)
        .unwrap()
        .append_fixed(&[1, 2, 3, 4], 2, 2)
        .unwrap();
    let before: Vec<(String, Vec<u8>)> = snapshot(&path);
    let mut store: Store = Store::open_read_only(&path).unwrap();
    assert_eq!(store.len(), 2);
    assert!(matches!(
        store.append_fixed(&[1], 1, 1),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(store.delete(&[0]), Err(Error::ReadOnly { .. })));
    assert!(matches!(store.compact(), Err(Error::ReadOnly { .. })));
    store.sync().unwrap();
    drop(store);
    assert_eq!(snapshot(&path), before);
}

fn snapshot(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = fs::read_dir(path)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn refused_arguments_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut store: Store = Store::open(&path).unwrap();
    store.append_fixed(&fixed_batch(4, 100, 1), 4, 100).unwrap();
    store.sync().unwrap();
    let before = snapshot(&path);

    let big = vec![0u8; (1 << 20) + 1];
    let cases: Vec<(i32, Error)> = vec![
        (-4, store.append_fixed(&[], 1, 0).unwrap_err()),
        (-4, store.append_fixed(&big, 1, big.len()).unwrap_err()),
        (-6, store.append_fixed(&[0u8; 10], 2, 6).unwrap_err()),
        (
            -6,
            store
                .append_ragged(&[0u8; 10], &[0, 8], &[4, 4])
                .unwrap_err(),
        ),
        (
            -6,
            store.append_ragged(&[0u8; 10], &[0], &[4, 4]).unwrap_err(),
        ),
        (
            -4,
            store
                .append_ragged(&[0u8; 10], &[0, 4], &[4, 0])
                .unwrap_err(),
        ),
        (-3, store.gather(&[0, 4], &mut [0u8; 200], 100).unwrap_err()),
        (-6, store.gather(&[0, 1], &mut [0u8; 199], 100).unwrap_err()),
        (-6, store.gather(&[0, 1], &mut [0u8; 400], 99).unwrap_err()),
        (
            -6,
            store
                .gather_ragged(&[0, 1], &mut [0u8; 400], &[0, 50])
                .unwrap_err(),
        ),
        (
            -6,
            store
                .gather_ragged(&[0, 1], &mut [0u8; 400], &[0])
                .unwrap_err(),
        ),
        (
            -6,
            store
                .gather_ragged(&[0], &mut [0u8; 400], &[u64::MAX])
                .unwrap_err(),
        ),
        (-3, store.lengths(&[9], &mut [0u32]).unwrap_err()),
        (-3, store.delete(&[1, 4]).unwrap_err()),
    ];
    for (k, (code, err)) in cases.iter().enumerate() {
        assert_eq!(err.code(), *code, "case {k}: {err}");
        assert!(!err.to_string().is_empty());
    }
    assert_eq!(store.len(), 4);
    drop(store);
    assert_eq!(snapshot(&path), before);
}

#[test]
fn error_messages_name_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path().join("s")).unwrap();
    store.append_fixed(&[1u8; 10], 10, 1).unwrap();
    let msg = store
        .gather(&[3, 12], &mut [0u8; 2], 1)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("12") && msg.contains("10"), "{msg}");
    let msg = store
        .append_fixed(&[], 1, 2_000_000)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("2000000") && msg.contains("1048576"), "{msg}");
    let file = dir.path().join("file");
    fs::write(&file, b"x").unwrap();
    let err = Store::<Deflate>::open(&file).unwrap_err();
    assert_eq!(err.code(), -8);
    assert!(err.to_string().contains("file"), "{err}");
}

#[test]
fn damaged_stores_are_refused_with_the_right_code() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    {
        let store: Store = Store::open(&path).unwrap();
        store
            .append_fixed(&fixed_batch(3, 1000, 1), 3, 1000)
            .unwrap();
    }
    let meta = fs::read(path.join("meta.zr")).unwrap();
    let reopen = || Store::<Deflate>::open_read_only(&path);

    let mut bad = meta.clone();
    bad[0] = b'X';
    fs::write(path.join("meta.zr"), &bad).unwrap();
    assert_eq!(reopen().unwrap_err().code(), -8);

    let mut bad = meta.clone();
    bad[4] = 2;
    fs::write(path.join("meta.zr"), &bad).unwrap();
    let err = reopen().unwrap_err();
    assert_eq!(err.code(), -8);
    assert!(err.to_string().contains("version 2"), "{err}");

    fs::write(path.join("meta.zr"), &meta[..10]).unwrap();
    assert_eq!(reopen().unwrap_err().code(), -8);
    fs::write(path.join("meta.zr"), &meta[..40]).unwrap();
    assert_eq!(reopen().unwrap_err().code(), -8);

    // An entry with an unknown codec: the store opens (O(1)), the gather that
    // touches the entry fails naming it, the others still work.
    let mut bad = meta.clone();
    // The codec byte (offset 14) of entry 1.
    bad[entry_offset(1) as usize + 14] = 9;
    fs::write(path.join("meta.zr"), &bad).unwrap();
    let store = reopen().unwrap();
    let err = store.gather(&[1], &mut [0u8; 1000], 1000).unwrap_err();
    assert_eq!(err.code(), -7);
    assert!(err.to_string().contains("entry 1"), "{err}");
    store.gather(&[0, 2], &mut [0u8; 2000], 1000).unwrap();
    assert_eq!(store.verify().unwrap_err().code(), -7);
    drop(store);

    // Compressed bytes that do not decode.
    fs::write(path.join("meta.zr"), &meta).unwrap();
    let chunk = fs::read(path.join("0.zr")).unwrap();
    fs::write(path.join("0.zr"), vec![0xffu8; chunk.len()]).unwrap();
    let store = reopen().unwrap();
    assert_eq!(
        store
            .gather(&[0], &mut [0u8; 1000], 1000)
            .unwrap_err()
            .code(),
        -7
    );
    drop(store);

    // A chunk file shorter than the entries that point into it.
    fs::write(path.join("0.zr"), &chunk[..chunk.len() / 2]).unwrap();
    let store = reopen().unwrap();
    assert_eq!(
        store
            .gather(&[2], &mut [0u8; 1000], 1000)
            .unwrap_err()
            .code(),
        -7
    );
    drop(store);

    // A missing chunk file.
    fs::remove_file(path.join("0.zr")).unwrap();
    assert_eq!(reopen().unwrap_err().code(), -8);
}

#[test]
fn gathers_run_alongside_an_append() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Store::open(dir.path().join("c")).unwrap();
    let first = fixed_batch(64, 1024, 0);
    store.append_fixed(&first, 64, 1024).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let store = &store;
            let first = &first;
            s.spawn(move || {
                let mut dst = vec![0u8; 16 * 1024];
                for round in 0..200u64 {
                    let idxs: Vec<u64> = (0..16).map(|k| (k * 7 + round + t) % 64).collect();
                    store.gather(&idxs, &mut dst, 1024).unwrap();
                    for (k, &i) in idxs.iter().enumerate() {
                        let i = i as usize;
                        assert_eq!(&dst[k * 1024..][..1024], &first[i * 1024..][..1024]);
                    }
                    // Whatever length a reader sees, every record below it reads.
                    let n = store.len();
                    let mut one = vec![0u8; 1024];
                    store.gather(&[n - 1], &mut one, 1024).unwrap();
                }
            });
        }
        s.spawn(|| {
            for k in 0..50 {
                store
                    .append_fixed(&fixed_batch(8, 1024, 1000 + k), 8, 1024)
                    .unwrap();
            }
        });
    });
    assert_eq!(store.len(), 64 + 50 * 8);
}

#[test]
fn concurrent_compaction_by_another_handle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l");
    let mut a: Store = Store::open(&path).unwrap();
    a.append_fixed(&[1u8; 100], 10, 10).unwrap();
    a.delete(&[0]).unwrap();
    let b: Store = Store::open_read_only(&path).unwrap();
    let err = a.compact().unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    drop(b);
    a.compact().unwrap();
    let _ = OpenOptions::default();
}

#[test]
#[cfg_attr(
    windows,
    ignore = "Windows refuses to truncate a mapped file and has no SIGBUS"
)]
fn files_truncated_after_open_give_errors_not_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store: Store<Raw> = Store::open(&path).unwrap();
    store
        .append_fixed(&fixed_batch(8, 4096, 1), 8, 4096)
        .unwrap();
    let mut out = vec![0u8; 4096];
    store.gather(&[7], &mut out, 4096).unwrap();
    // Another program cuts the chunk file short while we have it mapped.
    fs::OpenOptions::new()
        .write(true)
        .open(path.join("0.zr"))
        .unwrap()
        .set_len(4096 * 3)
        .unwrap();
    let err = store.gather(&[7], &mut out, 4096).unwrap_err();
    assert_eq!(err.code(), -7, "{err}");
    assert!(err.to_string().contains("entry 7"), "{err}");
    store.gather(&[0, 2], &mut vec![0u8; 8192], 4096).unwrap();
    // And meta.zr cut below the table.
    fs::OpenOptions::new()
        .write(true)
        .open(path.join("meta.zr"))
        .unwrap()
        .set_len(40)
        .unwrap();
    assert_eq!(store.gather(&[0], &mut out, 4096).unwrap_err().code(), -8);
    assert_eq!(store.lengths(&[0], &mut [0]).unwrap_err().code(), -8);
}

#[test]
fn every_kind_of_bad_entry_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    {
        let store: Store = Store::open(&path).unwrap();
        store
            .append_fixed_with(CodecId::Raw, &fixed_batch(2, 1000, 1), 2, 1000)
            .unwrap();
        store
            .append_fixed_with(CodecId::Deflate, &fixed_batch(1, 1000, 9), 1, 1000)
            .unwrap();
    }
    let meta = fs::read(path.join("meta.zr")).unwrap();
    let entry = |i: u32| entry_offset(i) as usize;
    let put = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = meta.clone();
        f(&mut m);
        fs::write(path.join("meta.zr"), &m).unwrap();
    };
    let gather_err = |idx: u64| {
        let store = Store::<Deflate>::open_read_only(&path).unwrap();
        let err = store.gather(&[idx], &mut [0u8; 4096], 4096).unwrap_err();
        (err.code(), err.to_string())
    };
    // Header length over 2^24: refused at open.
    put(&|m| m[12..16].copy_from_slice(&((1u32 << 24) + 1).to_le_bytes()));
    assert_eq!(
        Store::<Deflate>::open_read_only(&path).unwrap_err().code(),
        -8
    );
    // A chunk id past the tail.
    put(&|m| m[entry(1) + 12] = 3);
    let (code, msg) = gather_err(1);
    assert_eq!(code, -7);
    assert!(msg.contains("entry 1") && msg.contains("tail"), "{msg}");
    // A zero logical length.
    put(&|m| m[entry(0) + 8..entry(0) + 12].copy_from_slice(&0u32.to_le_bytes()));
    assert_eq!(gather_err(0).0, -7);
    // An oversized logical length.
    put(&|m| m[entry(2) + 8..entry(2) + 12].copy_from_slice(&(2u32 << 20).to_le_bytes()));
    assert_eq!(gather_err(2).0, -7);
    // Raw entry whose sizes disagree.
    put(&|m| m[entry(0) + 4..entry(0) + 8].copy_from_slice(&999u32.to_le_bytes()));
    assert!(gather_err(0).1.contains("raw"));
    // Compressed bytes that decode to a different size than the entry claims.
    put(&|m| m[entry(2) + 8..entry(2) + 12].copy_from_slice(&1200u32.to_le_bytes()));
    let (code, msg) = gather_err(2);
    assert_eq!(code, -7);
    assert!(msg.contains("entry 2"), "{msg}");
    // Outside the tail chunk's frontier.
    put(&|m| m[entry(1)..entry(1) + 4].copy_from_slice(&5000u32.to_le_bytes()));
    assert!(gather_err(1).1.contains("frontier"));
    // Restored, everything reads again.
    put(&|_| {});
    let store = Store::<Deflate>::open_read_only(&path).unwrap();
    store.verify().unwrap();
}

#[test]
fn a_directory_with_chunks_but_no_meta_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    Store::<Raw>::open(&path)
        .unwrap()
        .append_fixed(&[3u8; 100], 10, 10)
        .unwrap();
    fs::remove_file(path.join("meta.zr")).unwrap();
    let chunk = fs::read(path.join("0.zr")).unwrap();
    let err = Store::<Raw>::open(&path).unwrap_err();
    assert_eq!(err.code(), -8);
    assert!(err.to_string().contains("0.zr"), "{err}");
    assert!(!path.join("meta.zr").exists());
    assert_eq!(fs::read(path.join("0.zr")).unwrap(), chunk);
}

#[test]
fn appending_after_the_tail_chunk_was_cut_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store: Store<Raw> = Store::open(&path).unwrap();
    let src = fixed_batch(8, 100, 4);
    store.append_fixed(&src, 8, 100).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(path.join("0.zr"))
        .unwrap()
        .set_len(250)
        .unwrap();
    let err = store.append_fixed(&[9u8; 100], 1, 100).unwrap_err();
    assert_eq!(err.code(), -8, "{err}");
    assert!(err.to_string().contains("0.zr"), "{err}");
    assert_eq!(store.len(), 8);
    // The records before the cut still read; those after it are errors, not zeros.
    let mut out = vec![0u8; 200];
    store.gather(&[0, 1], &mut out, 100).unwrap();
    assert_eq!(out, src[..200]);
    assert_eq!(
        store.gather(&[5], &mut out[..100], 100).unwrap_err().code(),
        -7
    );
}
