//! Stores with a run table (format v2, `docs/FORMAT.md` §9.5): small
//! fixed-size records cost little more than their bytes on disk, every
//! read gives what a store with one entry per record gives, damage to a
//! block or a piece is caught and named, and what the engine cannot do on
//! such a store is refused without changing it.

mod common;

use std::{fs, path::Path};

use loaderx_store::{
    Error, OpenOptions, Store,
    format::{
        CodecTag,
        v2::{Dtype, Kind, Schema},
    },
};

fn dense(dtype: &str, shape: Vec<u64>, codec: CodecTag) -> Schema {
    Schema {
        kind: Kind::Dense,
        dtype: Dtype::from_name(dtype).unwrap(),
        ndim: shape.len() as u8,
        shape,
        codec,
        dictionary: None,
        codecs: Vec::new(),
    }
}

/// Bytes the store's files hold (their lengths, as `du --apparent-size`).
fn store_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "meta.zr.lock")
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

fn labels(n: u64, seed: u64) -> Vec<u8> {
    (0..n)
        .flat_map(|i| ((i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64).to_le_bytes())
        .collect()
}

fn random_idxs(n: u64, count: usize, seed: u64) -> Vec<u64> {
    let mut s = seed;
    (0..count)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 33) % n
        })
        .collect()
}

#[test]
fn a_million_labels_cost_at_most_five_percent_more_than_their_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (runs, flat) = (tmp.path().join("runs"), tmp.path().join("flat"));
    let n = 1_000_000u64;
    let src = labels(n, 1);
    let schema = dense("<i8", vec![], CodecTag::RAW);
    {
        let a: Store = Store::create_v2_runs(&runs, &schema, OpenOptions::default()).unwrap();
        a.append_fixed(&src, n as usize, 8).unwrap();
        let b: Store = Store::create_v2(&flat, &schema, OpenOptions::default()).unwrap();
        b.append_fixed(&src, n as usize, 8).unwrap();
    }
    let raw = src.len() as u64;
    let (with_runs, without) = (store_bytes(&runs), store_bytes(&flat));
    assert!(
        with_runs as f64 <= 1.05 * raw as f64,
        "{with_runs} bytes for {raw} bytes of labels"
    );
    assert!(without > 4 * raw, "the per-record table: {without} bytes");

    let a: Store = Store::open_with(&runs, OpenOptions::default()).unwrap();
    let b: Store = Store::open_with(&flat, OpenOptions::default()).unwrap();
    assert_eq!(a.len(), n);
    for seed in 0..20 {
        let idxs = random_idxs(n, 256, seed);
        let (mut x, mut y) = (vec![0u8; 256 * 8], vec![0u8; 256 * 8]);
        a.gather(&idxs, &mut x, 8).unwrap();
        b.gather(&idxs, &mut y, 8).unwrap();
        assert_eq!(x, y, "seed {seed}");
        for (k, &i) in idxs.iter().enumerate() {
            assert_eq!(x[8 * k..8 * k + 8], src[8 * i as usize..8 * i as usize + 8]);
        }
    }
    let mut all = vec![0u8; src.len()];
    let every: Vec<u64> = (0..n).collect();
    a.gather(&every, &mut all, 8).unwrap();
    assert_eq!(all, src);
    a.verify().unwrap();
}

#[test]
fn token_blocks_cost_at_most_two_percent_more_than_their_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tok");
    let n = 4096u64;
    let src: Vec<u8> = (0..n * 2048).map(|i| (i * 7 % 251) as u8).collect();
    {
        let s: Store = Store::create_v2_runs(
            &dir,
            &dense("<u2", vec![1024], CodecTag::RAW),
            OpenOptions::default(),
        )
        .unwrap();
        // In several appends, as a converter writes them.
        for part in src.chunks(2048 * 1000) {
            s.append_fixed(part, part.len() / 2048, 2048).unwrap();
        }
    }
    let bytes = store_bytes(&dir);
    assert!(
        bytes as f64 <= 1.02 * src.len() as f64,
        "{bytes} bytes for {} bytes of tokens",
        src.len()
    );
    let s: Store = Store::open_with(&dir, OpenOptions::default()).unwrap();
    let idxs = random_idxs(n, 64, 3);
    let mut out = vec![0u8; 64 * 2048];
    s.gather(&idxs, &mut out, 2048).unwrap();
    for (k, &i) in idxs.iter().enumerate() {
        assert_eq!(
            out[2048 * k..2048 * (k + 1)],
            src[2048 * i as usize..2048 * (i as usize + 1)]
        );
    }
    s.verify().unwrap();
}

/// One append of records of mixed sizes (groups of entries) between
/// records of one size (runs), over lanes and small chunks, with a
/// compressed codec that keeps the incompressible ones raw: every way of
/// reading gives what the per-record table gives.
#[test]
fn every_read_matches_a_store_with_one_entry_per_record() {
    let tmp = tempfile::tempdir().unwrap();
    let mut recs: Vec<Vec<u8>> = Vec::new();
    for i in 0..3000u64 {
        let len = match i % 500 {
            0..=399 => 24,
            400..=409 => 1 + (i % 37) as usize,
            // Compressible: stored as lz4, never in a run.
            410..=419 => 300,
            _ => 40,
        };
        let fill = |k: usize| {
            if len == 300 {
                0
            } else {
                ((i as usize * 131 + k * 7) % 256) as u8
            }
        };
        recs.push((0..len).map(fill).collect());
    }
    let lens: Vec<u32> = recs.iter().map(|r| r.len() as u32).collect();
    let offsets: Vec<u64> = lens
        .iter()
        .scan(0u64, |at, &l| {
            let o = *at;
            *at += u64::from(l);
            Some(o)
        })
        .collect();
    let data = recs.concat();
    let options = |check_raw| OpenOptions {
        chunk_capacity: 16 << 10,
        lanes: 3,
        lane_bytes: 4096,
        check_raw,
        ..OpenOptions::default()
    };
    let schema = Schema::bytes(CodecTag::LZ4);
    let (a_dir, b_dir) = (tmp.path().join("runs"), tmp.path().join("flat"));
    {
        let a: Store = Store::create_v2_runs(&a_dir, &schema, options(false)).unwrap();
        let b: Store = Store::create_v2(&b_dir, &schema, options(false)).unwrap();
        // Two appends, the second a single record.
        for s in [&a, &b] {
            s.append_ragged(&data, &offsets[..2999], &lens[..2999])
                .unwrap();
            s.sync().unwrap();
            s.append_ragged(&data, &offsets[2999..], &lens[2999..])
                .unwrap();
        }
    }
    assert!(store_bytes(&a_dir) < store_bytes(&b_dir));
    for check_raw in [false, true] {
        let a: Store = Store::open_with(&a_dir, options(check_raw)).unwrap();
        let b: Store = Store::open_with(&b_dir, options(check_raw)).unwrap();
        assert_eq!(a.len(), 3000);
        let idxs = random_idxs(3000, 700, 9);
        let mut la = vec![0u32; idxs.len()];
        let mut lb = vec![0u32; idxs.len()];
        a.lengths(&idxs, &mut la).unwrap();
        b.lengths(&idxs, &mut lb).unwrap();
        assert_eq!(la, lb);
        let offs: Vec<u64> = la
            .iter()
            .scan(0u64, |at, &l| {
                let o = *at;
                *at += u64::from(l);
                Some(o)
            })
            .collect();
        let total = la.iter().map(|&l| l as usize).sum();
        let (mut x, mut y) = (vec![0u8; total], vec![0u8; total]);
        a.gather_ragged(&idxs, &mut x, &offs).unwrap();
        b.gather_ragged(&idxs, &mut y, &offs).unwrap();
        assert_eq!(x, y);
        for (k, &i) in idxs.iter().enumerate() {
            let at = offs[k] as usize;
            assert_eq!(&x[at..at + la[k] as usize], &recs[i as usize][..]);
        }
        assert_eq!(a.stats().unwrap().live_bytes, b.stats().unwrap().live_bytes);
        a.verify().unwrap();
        assert!(a.damaged().unwrap().is_empty());
    }
}

/// Flips one byte of `file` at `at`.
fn flip(file: &Path, at: u64) {
    let mut bytes = fs::read(file).unwrap();
    bytes[at as usize] ^= 0x40;
    fs::write(file, bytes).unwrap();
}

#[test]
fn a_damaged_block_is_named_and_a_damaged_piece_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let n = 10_000u64;
    let src = labels(n, 5);
    {
        let s: Store = Store::create_v2_runs(
            &dir,
            &dense("<i8", vec![], CodecTag::RAW),
            OpenOptions::default(),
        )
        .unwrap();
        s.append_fixed(&src, n as usize, 8).unwrap();
    }
    // Record 5000's byte: block 9 (512 records a block).
    flip(&dir.join("0.zr"), 5000 * 8 + 3);
    let s: Store = Store::open_with(&dir, OpenOptions::default()).unwrap();
    let err = s.verify().unwrap_err().to_string();
    assert!(err.contains("block 9 of its run"), "{err}");
    assert!(err.contains("0.zr"), "{err}");
    let damaged = s.damaged().unwrap();
    assert_eq!(damaged.len(), 512, "{damaged:?}");
    assert_eq!(damaged[0].0, 9 * 512);
    // A raw store's gathers copy without checking (`check_raw` off)...
    let mut out = [0u8; 8];
    s.gather(&[4999], &mut out, 8).unwrap();
    drop(s);
    // ...and check the block when asked to.
    let checked: Store = Store::open_with(
        &dir,
        OpenOptions {
            check_raw: true,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    checked.gather(&[4000], &mut out, 8).unwrap();
    let err = checked.gather(&[4999], &mut out, 8).unwrap_err();
    assert!(matches!(err, Error::Corrupt { entry: 4999, .. }), "{err}");
    drop(checked);

    // A damaged run unit: the table fails its unit checksum.
    flip(&dir.join("0.zr"), 5000 * 8 + 3);
    let meta = dir.join("meta.zr");
    flip(&meta, 12288 + 9);
    let err = match Store::<loaderx_store::Deflate>::open_with(&dir, OpenOptions::default()) {
        Ok(s) => {
            let mut out = [0u8; 8];
            s.gather(&[1], &mut out, 8).unwrap_err()
        }
        Err(e) => e,
    };
    assert!(err.to_string().contains("meta.zr"), "{err}");
}

/// Appends write their bytes in pieces of a few MiB and compute each
/// block CRC from the bytes as they write them: with 24-byte records a
/// block (170 records, 4080 bytes) does not divide a piece, runs cross
/// chunks and lanes, and groups sit between runs; every block's CRC must
/// still be that of its records, from a dense append (written from the
/// caller's array) and a bytes append (copied record by record).
#[test]
fn block_crcs_are_those_of_the_records_whatever_the_write_pieces() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 300_000usize;
    let data = labels(3 * n as u64, 7);
    let options = || OpenOptions {
        chunk_capacity: 3 << 20,
        lanes: 2,
        check_raw: true,
        ..OpenOptions::default()
    };
    let dense_dir = tmp.path().join("dense");
    {
        let s: Store = Store::create_v2_runs(
            &dense_dir,
            &dense("|u1", vec![24], CodecTag::RAW),
            options(),
        )
        .unwrap();
        s.append_fixed(&data, n, 24).unwrap();
    }
    // Bytes records: 24 bytes each but every 1000th, 5 bytes (a group).
    let lens: Vec<u32> = (0..n)
        .map(|i| if i % 1000 == 999 { 5 } else { 24 })
        .collect();
    let offsets: Vec<u64> = (0..n as u64).map(|i| i * 24).collect();
    let bytes_dir = tmp.path().join("bytes");
    {
        let s: Store =
            Store::create_v2_runs(&bytes_dir, &Schema::bytes(CodecTag::RAW), options()).unwrap();
        s.append_ragged(&data, &offsets, &lens).unwrap();
    }
    for dir in [&dense_dir, &bytes_dir] {
        let s: Store = Store::open_with(dir, options()).unwrap();
        assert_eq!(s.len(), n as u64);
        s.verify().unwrap();
        assert!(s.damaged().unwrap().is_empty());
        // Read with every block checked (`check_raw`).
        for (i, got) in all_records(&s).iter().enumerate() {
            let at = i * 24;
            let len = if dir == &dense_dir {
                24
            } else {
                lens[i] as usize
            };
            assert_eq!(got[..], data[at..at + len], "record {i}");
        }
    }
    // A flipped byte of one record fails its block, and only that block.
    let s: Store = Store::open_with(&dense_dir, options()).unwrap();
    let mut out = vec![0u8; 24];
    s.gather(&[200_000], &mut out, 24).unwrap();
    drop(s);
    let chunk = fs::read_dir(&dense_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.extension().is_some_and(|e| e == "zr")
                && p.file_name().unwrap() != "meta.zr"
                && fs::read(p).unwrap().windows(24).any(|w| w == out)
        })
        .unwrap();
    let at = fs::read(&chunk)
        .unwrap()
        .windows(24)
        .position(|w| w == out)
        .unwrap();
    flip(&chunk, at as u64 + 5);
    let s: Store = Store::open_with(&dense_dir, options()).unwrap();
    let damaged: Vec<u64> = s.damaged().unwrap().into_iter().map(|(i, _)| i).collect();
    assert!(damaged.contains(&200_000), "{damaged:?}");
    assert!(damaged.len() <= 170, "{} records", damaged.len());
    assert!(damaged.windows(2).all(|w| w[1] == w[0] + 1), "{damaged:?}");
}

#[test]
fn a_ragged_store_has_no_run_table_and_nothing_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let schema = Schema {
        kind: Kind::Ragged,
        dtype: Dtype::from_name("<i4").unwrap(),
        shape: vec![],
        ndim: 1,
        codec: CodecTag::RAW,
        dictionary: None,
        codecs: Vec::new(),
    };
    let err =
        Store::<loaderx_store::Deflate>::create_v2_runs(&dir, &schema, OpenOptions::default())
            .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                argument: "runs",
                ..
            }
        ),
        "{err}"
    );
    assert!(!dir.exists());
}

fn all_records(s: &Store) -> Vec<Vec<u8>> {
    let n = s.len();
    let idxs: Vec<u64> = (0..n).collect();
    let mut lens = vec![0u32; n as usize];
    s.lengths(&idxs, &mut lens).unwrap();
    let offs: Vec<u64> = lens
        .iter()
        .scan(0u64, |at, &l| {
            let o = *at;
            *at += u64::from(l);
            Some(o)
        })
        .collect();
    let mut out = vec![0u8; lens.iter().map(|&l| l as usize).sum()];
    s.gather_ragged(&idxs, &mut out, &offs).unwrap();
    offs.iter()
        .zip(&lens)
        .map(|(&o, &l)| out[o as usize..o as usize + l as usize].to_vec())
        .collect()
}

/// Deletes inside runs, at their ends, of the last record and of records
/// with entries of their own, then compactions and appends: after each,
/// the store with a run table holds what the store with one entry per
/// record holds, before and after reopening, and verifies.
#[test]
fn deletes_and_compactions_match_a_store_with_one_entry_per_record() {
    let tmp = tempfile::tempdir().unwrap();
    let options = || OpenOptions {
        chunk_capacity: 8 << 10,
        lanes: 2,
        lane_bytes: 4096,
        ..OpenOptions::default()
    };
    let schema = Schema::bytes(CodecTag::RAW);
    let (a_dir, b_dir) = (tmp.path().join("runs"), tmp.path().join("flat"));
    let batch = |base: u64, n: u64| {
        let recs: Vec<Vec<u8>> = (base..base + n)
            .map(|i| {
                let len = if i % 97 == 13 { 3 + i % 11 } else { 16 };
                (0..len).map(|k| (i * 31 + k * 5) as u8).collect()
            })
            .collect();
        let lens: Vec<u32> = recs.iter().map(|r| r.len() as u32).collect();
        let offs: Vec<u64> = lens
            .iter()
            .scan(0u64, |at, &l| {
                let o = *at;
                *at += u64::from(l);
                Some(o)
            })
            .collect();
        (recs.concat(), offs, lens)
    };
    let mut a: Store = Store::create_v2_runs(&a_dir, &schema, options()).unwrap();
    let mut b: Store = Store::create_v2(&b_dir, &schema, options()).unwrap();
    let (data, offs, lens) = batch(0, 2000);
    for s in [&a, &b] {
        s.append_ragged(&data, &offs, &lens).unwrap();
    }
    let steps: Vec<Vec<u64>> = vec![
        vec![1000],
        vec![0, 1, 2, 1998],
        vec![1996],
        vec![13, 110, 500, 501, 502, 777],
        random_idxs(1980, 300, 4),
        vec![],
    ];
    for (n, idxs) in steps.iter().enumerate() {
        a.delete(idxs).unwrap();
        b.delete(idxs).unwrap();
        assert_eq!(all_records(&a), all_records(&b), "after delete {n}");
        if n % 2 == 1 {
            a.compact().unwrap();
            b.compact().unwrap();
            assert_eq!(all_records(&a), all_records(&b), "after compaction {n}");
        }
        let (data, offs, lens) = batch(10_000 * (n as u64 + 1), 150);
        a.append_ragged(&data, &offs, &lens).unwrap();
        b.append_ragged(&data, &offs, &lens).unwrap();
        a.verify().unwrap();
    }
    a.compact().unwrap();
    b.compact().unwrap();
    drop((a, b));
    let a: Store = Store::open_with(&a_dir, options()).unwrap();
    let b: Store = Store::open_with(&b_dir, options()).unwrap();
    assert_eq!(all_records(&a), all_records(&b));
    a.verify().unwrap();
    assert!(store_bytes(&a_dir) < store_bytes(&b_dir));
}

#[test]
fn a_delete_inside_a_run_of_labels_splits_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let n = 100_000u64;
    let mut values = labels(n, 8);
    let mut s: Store = Store::create_v2_runs(
        &dir,
        &dense("<i8", vec![], CodecTag::RAW),
        OpenOptions::default(),
    )
    .unwrap();
    s.append_fixed(&values, n as usize, 8).unwrap();
    s.sync().unwrap();
    let before = store_bytes(&dir);
    s.delete(&[50_000]).unwrap();
    // The last label fills the hole.
    values.copy_within(8 * (n as usize - 1).., 8 * 50_000);
    values.truncate(8 * (n as usize - 1));
    let mut out = vec![0u8; values.len()];
    let every: Vec<u64> = (0..n - 1).collect();
    s.gather(&every, &mut out, 8).unwrap();
    assert_eq!(out, values);
    // Two runs and one entry: a few units more, not an entry a record.
    assert!(
        store_bytes(&dir) < before + 200,
        "{} > {before}",
        store_bytes(&dir)
    );
    s.compact().unwrap();
    drop(s);
    let s: Store = Store::open_with(&dir, OpenOptions::default()).unwrap();
    s.gather(&every, &mut out, 8).unwrap();
    assert_eq!(out, values);
    s.verify().unwrap();
}
