//! Gathers of small raw records through a handle's index of where they lie
//! (the engine's `runs.rs`): the same bytes as the table path through
//! chunk rollover, lanes, appends after indexing, deletes and compaction;
//! stores that break the pattern keep working; and the index holds entries
//! only as they were when checked.

mod common;

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
};

use loaderx_store::{
    CodecId, Error, OpenOptions, Store,
    format::{
        CodecTag,
        v2::{Dtype, Kind, Schema},
    },
};

const LEN: usize = 8;

fn labels_schema(codec: CodecTag) -> Schema {
    Schema {
        kind: Kind::Dense,
        dtype: Dtype::from_name("<i8").unwrap(),
        shape: vec![],
        ndim: 0,
        codec,
        dictionary: None,
        codecs: Vec::new(),
    }
}

fn options(chunk_capacity: u64, lanes: u8) -> OpenOptions {
    OpenOptions {
        chunk_capacity,
        lanes,
        // Small appends over every lane too: runs cross lanes.
        lane_bytes: 0,
        ..OpenOptions::default()
    }
}

/// Record `v`'s bytes: its value as a little-endian i64.
fn label(v: u64) -> [u8; LEN] {
    (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64).to_le_bytes()
}

fn append_labels<S: loaderx_store::storage::Storage>(
    store: &Store<loaderx_store::Deflate, S>,
    values: std::ops::Range<u64>,
) {
    let src: Vec<u8> = values.clone().flat_map(label).collect();
    store
        .append_fixed(&src, (values.end - values.start) as usize, LEN)
        .unwrap();
}

/// Index sequences of a few shapes: sorted, reversed, scattered, repeated.
fn batches(n: u64) -> Vec<Vec<u64>> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut out = Vec::new();
    for size in [8usize, 9, 64, 256, 1000] {
        let mut scattered: Vec<u64> = (0..size).map(|_| next()).collect();
        out.push(scattered.clone());
        scattered.sort_unstable();
        out.push(scattered.clone());
        scattered.reverse();
        out.push(scattered);
    }
    out.push(vec![n - 1; 16]);
    out.push((0..n).collect());
    out
}

/// Gathers every batch twice (the first gathers build the index, the later
/// ones read through it) and checks each record against `expected`.
fn check_gathers<S: loaderx_store::storage::Storage>(
    store: &Store<loaderx_store::Deflate, S>,
    expected: &[u64],
) {
    let n = expected.len() as u64;
    for round in 0..2 {
        for batch in batches(n) {
            let mut out = vec![0u8; batch.len() * LEN];
            store.gather_exact(&batch, &mut out, LEN).unwrap();
            for (k, &i) in batch.iter().enumerate() {
                assert_eq!(
                    out[k * LEN..][..LEN],
                    label(expected[i as usize]),
                    "round {round}, record {i} at position {k}"
                );
            }
            // Strided and explicit placements take the same path.
            let mut wide = vec![0xAAu8; batch.len() * 12];
            store.gather(&batch, &mut wide, 12).unwrap();
            for (k, &i) in batch.iter().enumerate() {
                assert_eq!(wide[k * 12..][..LEN], label(expected[i as usize]));
                assert_eq!(wide[k * 12 + LEN..][..4], [0xAA; 4]);
            }
        }
    }
}

#[test]
fn gathers_read_the_same_bytes_through_rollover_lanes_appends_deletes_and_compaction() {
    // 4 KiB chunks hold 512 labels, so runs break at every rollover; 256-byte
    // chunks spread one batch over more chunks than a gather borrows at once.
    for (capacity, lanes) in [(4096, 1u8), (4096, 3), (256, 2)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("labels");
        let mut store: Store = Store::create_v2(
            &path,
            &labels_schema(CodecTag::RAW),
            options(capacity, lanes),
        )
        .unwrap();
        append_labels(&store, 0..3000);
        let mut expected: Vec<u64> = (0..3000).collect();
        check_gathers(&store, &expected);

        // Appends after the index was built: it grows to cover them.
        append_labels(&store, 3000..3500);
        expected.extend(3000..3500);
        check_gathers(&store, &expected);

        // A delete moves records into the holes; compaction moves them
        // between chunks. The index must not outlive either.
        store.delete(&[0, 17, 1234, 3499]).unwrap();
        // The store says what a delete leaves where: compare with its own
        // table path (a fresh handle on the same files).
        store.sync().unwrap();
        let fresh: Store = Store::open_read_only(&path).unwrap();
        let truth = common::contents(&fresh);
        drop(fresh);
        let value_of: HashMap<[u8; LEN], u64> = (0..3500).map(|v| (label(v), v)).collect();
        let expected: Vec<u64> = truth
            .iter()
            .map(|r| value_of[&<[u8; LEN]>::try_from(&r[..]).unwrap()])
            .collect();
        assert_eq!(expected.len(), 3496);
        check_gathers(&store, &expected);

        store.compact().unwrap();
        check_gathers(&store, &expected);
        drop(store);
        let reopened: Store = Store::open_read_only(&path).unwrap();
        check_gathers(&reopened, &expected);
    }
}

#[test]
fn the_in_memory_storage_lends_every_chunk_at_once_as_files_do() {
    // A covered gather borrows all of the index's chunks at once
    // (`Storage::with_many_bytes`); the in-memory storage of the crash
    // tests lends them under one hold of its lock, and reads the same
    // bytes as the files; through runs of irregular length too (appends of
    // 1 to 200 records over 3 lanes).
    let storage = loaderx_store::storage::MemStorage::new();
    let store: Store<loaderx_store::Deflate, _> = Store::create_v2_in(
        storage.clone(),
        &labels_schema(CodecTag::RAW),
        options(1 << 20, 3),
    )
    .unwrap();
    let mut next = 0u64;
    for k in 0..60u64 {
        let n = 1 + (k * k * 37) % 200;
        append_labels(&store, next..next + n);
        next += n;
    }
    let expected: Vec<u64> = (0..next).collect();
    check_gathers(&store, &expected);
}

#[test]
fn stores_that_break_the_pattern_keep_the_table_path() {
    let dir = tempfile::tempdir().unwrap();
    // Compressed records among raw ones, and records of another length.
    let path = dir.path().join("mixed");
    let store: Store =
        Store::create_v2(&path, &Schema::bytes(CodecTag::RAW), OpenOptions::default()).unwrap();
    append_labels(&store, 0..600);
    let src: Vec<u8> = (600..700).flat_map(label).collect();
    store
        .append_fixed_with(CodecId::Deflate, &src, 100, LEN)
        .unwrap();
    append_labels(&store, 700..1000);
    store.append_fixed(&[7u8; 16], 1, 16).unwrap();
    let expected: Vec<u64> = (0..1000).collect();
    // Batches of the first 1000 only (all 8 bytes long).
    check_gathers(&store, &expected);
    let mut out = [0u8; 16];
    store.gather(&[1000], &mut out, 16).unwrap();
    assert_eq!(out, [7u8; 16]);
    let err = store
        .gather_exact(&[5, 1000], &mut [0u8; 16], LEN)
        .unwrap_err();
    assert!(
        matches!(err, Error::RecordLength { index: 1000, .. }),
        "{err}"
    );

    // A handle that checks raw records' checksums reads every entry.
    drop(store);
    let checking: Store = Store::open_with(
        &path,
        OpenOptions {
            check_raw: true,
            ..OpenOptions::read_only()
        },
    )
    .unwrap();
    check_gathers(&checking, &expected);
}

/// A raw labels store at `dir/labels` holding labels `0 .. n`, closed.
fn raw_labels_store(dir: &Path, n: u64) -> PathBuf {
    let path = dir.join("labels");
    let store: Store =
        Store::create_v2(&path, &labels_schema(CodecTag::RAW), OpenOptions::default()).unwrap();
    append_labels(&store, 0..n);
    path
}

/// Byte offset of table entry `index` in a v2 `meta.zr`, and the entry's length.
fn entry_at(meta: &[u8], index: u64) -> (usize, usize) {
    let table = loaderx_store::format::v2::table_offset(u32::from_le_bytes(
        meta[24..28].try_into().unwrap(),
    )) as usize;
    let entry_len = u16::from_le_bytes(meta[32..34].try_into().unwrap()) as usize;
    (table + index as usize * entry_len, entry_len)
}

#[test]
fn damaged_entries_are_reported_by_the_gather_that_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = raw_labels_store(dir.path(), 2000);
    let mut meta = fs::read(path.join("meta.zr")).unwrap();
    let (at, _) = entry_at(&meta, 1500);
    meta[at + 5] ^= 0x10;
    fs::write(path.join("meta.zr"), &meta).unwrap();

    let store: Store = Store::open_read_only(&path).unwrap();
    // Batches that miss entry 1500 succeed, again and again (the indexing
    // they trigger meets the damage and stops there)...
    let clean: Vec<u64> = (0..1500).step_by(7).collect();
    for _ in 0..3 {
        let mut out = vec![0u8; clean.len() * LEN];
        store.gather_exact(&clean, &mut out, LEN).unwrap();
        for (k, &i) in clean.iter().enumerate() {
            assert_eq!(out[k * LEN..][..LEN], label(i));
        }
    }
    // ...and the one that reads it names it.
    let bad: Vec<u64> = (1490..1510).collect();
    let err = store
        .gather_exact(&bad, &mut vec![0u8; bad.len() * LEN], LEN)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { .. }) && err.to_string().contains("1500"),
        "{err}"
    );
}

#[test]
fn an_indexed_handle_keeps_the_entries_it_checked() {
    // The index holds each entry as it was when it was read and checked;
    // the table is not read again for records it covers. Damage that comes
    // later (the table rewritten behind the handle's back) is therefore not
    // seen by this handle — and a new handle reports it.
    let dir = tempfile::tempdir().unwrap();
    let path = raw_labels_store(dir.path(), 1000);
    let store: Store = Store::open_read_only(&path).unwrap();
    let all: Vec<u64> = (0..1000).collect();
    let mut out = vec![0u8; all.len() * LEN];
    store.gather_exact(&all, &mut out, LEN).unwrap();

    let mut meta = fs::read(path.join("meta.zr")).unwrap();
    let (at, _) = entry_at(&meta, 10);
    meta[at + 5] ^= 0x10;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path.join("meta.zr"))
        .unwrap();
    std::io::Write::write_all(&mut f, &meta).unwrap();
    drop(f);

    let batch: Vec<u64> = (5..20).collect();
    let mut out = vec![0u8; batch.len() * LEN];
    store.gather_exact(&batch, &mut out, LEN).unwrap();
    assert_eq!(out[5 * LEN..][..LEN], label(10));

    let fresh: Store = Store::open_read_only(&path).unwrap();
    let err = fresh
        .gather_exact(&batch, &mut vec![0u8; batch.len() * LEN], LEN)
        .unwrap_err();
    assert!(err.to_string().contains("10"), "{err}");
}

#[test]
fn an_indexed_batch_that_cannot_be_gathered_writes_nothing_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = raw_labels_store(dir.path(), 4000);
    let store: Store = Store::open_read_only(&path).unwrap();
    let all: Vec<u64> = (0..4000).collect();
    let mut out = vec![0u8; all.len() * LEN];
    store.gather_exact(&all, &mut out, LEN).unwrap();
    store.gather_exact(&all, &mut out, LEN).unwrap();

    let batch: Vec<u64> = (0..64).map(|k| (k * 61) % 4000).collect();
    let untouched = |out: &[u8]| out.iter().all(|&b| b == 0x5A);
    let mut out = vec![0x5Au8; batch.len() * LEN];
    let err = store.gather_exact(&batch, &mut out, 4).unwrap_err();
    assert!(
        matches!(
            err,
            Error::RecordLength {
                index: 0,
                position: 0,
                expected: 4,
                found: 8,
                ..
            }
        ),
        "{err}"
    );
    let err = store.gather(&batch, &mut out, 4).unwrap_err();
    assert!(
        matches!(err, Error::BufferTooSmall { position: 0, .. }),
        "{err}"
    );
    let short = out.len() - 1;
    let err = store
        .gather_exact(&batch, &mut out[..short], LEN)
        .unwrap_err();
    assert!(
        matches!(err, Error::BufferTooSmall { position: 63, .. }),
        "{err}"
    );
    let mut past = batch.clone();
    past[40] = 4000;
    let err = store.gather_exact(&past, &mut out, LEN).unwrap_err();
    assert!(
        matches!(err, Error::IndexOutOfRange { index: 4000, .. }),
        "{err}"
    );
    assert!(untouched(&out));

    // A chunk file cut short behind the handle's back (Windows refuses to
    // truncate a mapped file, so this part runs on Unix only): an error
    // naming a record past the new end, not a SIGBUS, and nothing written.
    #[cfg(unix)]
    {
        let chunk = path.join("0.zr");
        let len = fs::metadata(&chunk).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&chunk)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        let err = store.gather_exact(&all, &mut vec![0x5Au8; all.len() * LEN][..], LEN);
        let err = err.unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { .. }) && err.to_string().contains("past the end"),
            "{err}"
        );
        let mut out = vec![0x5Au8; all.len() * LEN];
        assert!(store.gather_exact(&all, &mut out, LEN).is_err());
        assert!(untouched(&out));
    }
}
