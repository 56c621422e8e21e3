//! Collections on real directories: parts written as v2 stores, committed,
//! opened lazily and read over global indices in every order.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use loaderx_store::collection::{Collection, commit};
use loaderx_store::format::CodecTag;
use loaderx_store::format::manifest::{MANIFEST_FILE, Manifest};
use loaderx_store::format::v2::{Dtype, Kind, Schema};
use loaderx_store::{Error, ErrorCode, OpenOptions, Store};

const ITEM: usize = 6; // dense item: 3 x <u2

fn dense_schema() -> Schema {
    dense_schema_with(CodecTag::FLATE)
}

fn dense_schema_with(codec: CodecTag) -> Schema {
    Schema {
        kind: Kind::Dense,
        dtype: Dtype::from_name("<u2").unwrap(),
        shape: vec![3],
        ndim: 1,
        codec,
        dictionary: None,
        codecs: Vec::new(),
    }
}

fn ragged_schema() -> Schema {
    Schema {
        kind: Kind::Ragged,
        dtype: Dtype::U8,
        shape: vec![],
        ndim: 1,
        codec: CodecTag::LZ4,
        dictionary: None,
        codecs: Vec::new(),
    }
}

/// The dense item and ragged record of global record `g`.
fn item(g: u64) -> Vec<u8> {
    (0..3u16)
        .flat_map(|k| (g as u16 * 3 + k).to_le_bytes())
        .collect()
}

fn token(g: u64) -> Vec<u8> {
    // Record 0 of every 7 is empty: empty records must gather too.
    (0..(g % 7) * 5).map(|k| (g + k) as u8).collect()
}

/// Writes part `name` holding global records `range` in columns `x`
/// (dense, compressed), `r` (the same items raw: gathers of a batch over
/// parts copy them from each part's index of raw runs) and `t` (ragged).
fn write_part(root: &Path, name: &str, range: std::ops::Range<u64>) {
    let dir = root.join(name);
    let data: Vec<u8> = range.clone().flat_map(item).collect();
    for (column, codec) in [("x", CodecTag::FLATE), ("r", CodecTag::RAW)] {
        let s: Store = Store::create_v2(
            dir.join(column),
            &dense_schema_with(codec),
            OpenOptions::default(),
        )
        .unwrap();
        s.append_fixed(&data, range.clone().count(), ITEM).unwrap();
        s.close().unwrap();
    }
    let t: Store =
        Store::create_v2(dir.join("t"), &ragged_schema(), OpenOptions::default()).unwrap();
    let mut src = Vec::new();
    let mut offsets = Vec::new();
    let mut lens = Vec::new();
    let mut dims = Vec::new();
    for g in range {
        let r = token(g);
        offsets.push(src.len() as u64);
        lens.push(r.len() as u32);
        dims.push(r.len() as u32);
        src.extend_from_slice(&r);
    }
    if !lens.is_empty() {
        t.append_shaped(&src, &offsets, &lens, &dims).unwrap();
    }
    t.close().unwrap();
}

/// A collection of parts of sizes 5, 0, 9, 1, 12 (27 records).
fn sample(root: &Path) -> u64 {
    let sizes = [5u64, 0, 9, 1, 12];
    let mut at = 0;
    for (p, n) in sizes.iter().enumerate() {
        write_part(root, &format!("part-{p:05}"), at..at + n);
        at += n;
    }
    at
}

fn open(root: &Path) -> Arc<Collection> {
    Arc::new(Collection::open(root, OpenOptions::default()).unwrap())
}

#[test]
fn commit_then_read_every_order_matches_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let n = sample(root);
    // An unfinished write (a temporary name) is ignored, and named.
    fs::create_dir_all(root.join(".part-00009.tmp-1/x")).unwrap();
    let done = commit(root, None, &OpenOptions::default()).unwrap();
    assert_eq!(done.ignored, vec![".part-00009.tmp-1".to_string()]);
    assert_eq!(done.manifest.records(), Some(n));
    assert!(
        !root
            .join(format!(".{MANIFEST_FILE}.{}.tmp", std::process::id()))
            .exists()
    );

    let coll = open(root);
    assert_eq!(coll.len(), n);
    assert_eq!(coll.opened_parts(), 0, "opening reads the manifest only");
    let x = coll.column("x").unwrap();
    let r = coll.column("r").unwrap();
    let t = coll.column("t").unwrap();

    let sequential: Vec<u64> = (0..n).collect();
    let reversed: Vec<u64> = (0..n).rev().collect();
    let scattered: Vec<u64> = (0..n).map(|i| (i * 11) % n).collect();
    let one_part: Vec<u64> = vec![7, 6, 8];
    let repeats: Vec<u64> = vec![26, 0, 26, 14, 0];
    // Over the store's serial threshold (256 KiB of output): the parts
    // gather in parallel, grouped and scattered.
    let long_grouped: Vec<u64> = (0..60_000u64).map(|i| i * n / 60_000).collect();
    let long_scattered: Vec<u64> = (0..60_000u64).map(|i| (i * 7919) % n).collect();
    for idxs in [
        &sequential,
        &reversed,
        &scattered,
        &one_part,
        &repeats,
        &long_grouped,
        &long_scattered,
    ] {
        let want: Vec<u8> = idxs.iter().copied().flat_map(item).collect();
        for column in [&x, &r] {
            let mut out = vec![0u8; idxs.len() * ITEM];
            column.gather_exact(idxs, &mut out, ITEM).unwrap();
            assert_eq!(out, want, "dense {} {idxs:?}", column.name());
        }

        let mut lens = vec![0u32; idxs.len()];
        t.lengths(idxs, &mut lens).unwrap();
        let want_lens: Vec<u32> = idxs.iter().map(|&g| token(g).len() as u32).collect();
        assert_eq!(lens, want_lens);
        let mut dims = vec![0u32; idxs.len()];
        t.dims(idxs, &mut dims).unwrap();
        assert_eq!(dims, want_lens);
        let mut offsets = Vec::new();
        let mut total = 0u64;
        for &l in &lens {
            offsets.push(total);
            total += u64::from(l);
        }
        let mut flat = vec![0u8; total as usize];
        t.gather_ragged(idxs, &mut flat, &offsets).unwrap();
        let want: Vec<u8> = idxs.iter().copied().flat_map(token).collect();
        assert_eq!(flat, want, "ragged {idxs:?}");
    }
    // Reads touched parts 0, 2, 3 and 4 of the three columns; the empty
    // part 1 is never opened.
    assert_eq!(coll.opened_parts(), 12);
    x.verify().unwrap();
    assert!(t.damaged().unwrap().is_empty());
}

#[test]
fn out_of_range_and_bad_buffers_are_refused_before_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let n = sample(dir.path());
    commit(dir.path(), None, &OpenOptions::default()).unwrap();
    let coll = open(dir.path());
    let x = coll.column("x").unwrap();
    let mut out = vec![9u8; 2 * ITEM];
    let err = x.gather_exact(&[0, n], &mut out, ITEM).unwrap_err();
    assert!(matches!(err, Error::IndexOutOfRange { index, len } if index == n && len == n));
    assert!(out.iter().all(|&b| b == 9));
    let err = x.gather_exact(&[0, 1], &mut out[..ITEM], ITEM).unwrap_err();
    assert_eq!(err.code(), ErrorCode::BufferTooSmall);
    let err = coll.column("nope").unwrap_err();
    assert!(err.to_string().contains("\"nope\""), "{err}");
    // Overlapping ragged destinations across parts.
    let t = coll.column("t").unwrap();
    let mut flat = vec![0u8; 100];
    let err = t.gather_ragged(&[3, 20], &mut flat, &[0, 1]).unwrap_err();
    assert!(
        matches!(err, Error::OverlappingDestinations { .. }),
        "{err}"
    );
}

#[test]
fn a_part_that_disagrees_with_the_manifest_fails_when_touched_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    sample(root);
    let committed = commit(root, None, &OpenOptions::default()).unwrap();
    // Part 2 replaced by one record fewer after the commit.
    fs::remove_dir_all(root.join("part-00002")).unwrap();
    write_part(root, "part-00002", 5..13);
    let coll = open(root);
    let x = coll.column("x").unwrap();
    let mut out = vec![0u8; ITEM];
    x.gather_exact(&[0], &mut out, ITEM).unwrap();
    let err = x.gather_exact(&[6], &mut out, ITEM).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotAStore);
    assert!(err.to_string().contains("part-00002"), "{err}");
    assert!(
        err.to_string().contains("8 records; the manifest says 9"),
        "{err}"
    );
    // A removed part fails with its path.
    fs::remove_dir_all(root.join("part-00004")).unwrap();
    let err = x.gather_exact(&[20], &mut out, ITEM).unwrap_err();
    assert!(err.to_string().contains("part-00004"), "{err}");
    drop(committed);
}

#[test]
fn commit_refuses_inconsistent_parts_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_part(root, "part-00000", 0..4);
    write_part(root, "part-00001", 4..8);
    // A column of another schema in part 1.
    let odd = root.join("part-00002");
    write_part(root, "part-00002", 8..9);
    fs::remove_dir_all(odd.join("x")).unwrap();
    let mut other = dense_schema();
    other.shape = vec![4];
    let s: Store = Store::create_v2(odd.join("x"), &other, OpenOptions::default()).unwrap();
    s.append_fixed(&[0u8; 8], 1, 8).unwrap();
    s.close().unwrap();
    let err = commit(root, None, &OpenOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("part 2 (\"part-00002\") column \"x\" holds dense <u2 (4,), flate; part 0"),
        "{err}"
    );
    assert!(!root.join(MANIFEST_FILE).exists());

    // Columns of unequal length in one part.
    fs::remove_dir_all(&odd).unwrap();
    write_part(root, "part-00002", 8..10);
    let t: Store = Store::open(odd.join("t")).unwrap();
    t.append_shaped(&[1], &[0], &[1], &[1]).unwrap();
    t.close().unwrap();
    let err = commit(root, None, &OpenOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("column \"t\" holds 3"), "{err}");
    assert!(msg.ends_with("holds 2"), "{err}");
    assert!(!root.join(MANIFEST_FILE).exists());

    // The engine's list: only the parts named, in that order; others ignored.
    let parts = vec!["part-00001".to_string(), "part-00000".to_string()];
    let done = commit(root, Some(&parts), &OpenOptions::default()).unwrap();
    assert_eq!(done.ignored, vec!["part-00002".to_string()]);
    let coll = open(root);
    let x = coll.column("x").unwrap();
    let mut out = vec![0u8; ITEM];
    x.gather_exact(&[0], &mut out, ITEM).unwrap();
    assert_eq!(out, item(4), "part-00001 comes first");
    // A named part that does not exist.
    let err = commit(
        root,
        Some(&["part-00007".to_string()]),
        &OpenOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("part-00007"), "{err}");
    // Nothing to commit.
    let empty = tempfile::tempdir().unwrap();
    assert!(commit(empty.path(), None, &OpenOptions::default()).is_err());
    assert!(
        Collection::<loaderx_store::Deflate>::open(empty.path(), OpenOptions::default())
            .unwrap_err()
            .to_string()
            .contains("not a collection")
    );
}

#[test]
fn a_damaged_manifest_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    sample(root);
    commit(root, None, &OpenOptions::default()).unwrap();
    let path = root.join(MANIFEST_FILE);
    let mut bytes = fs::read(&path).unwrap();
    Manifest::decode(&bytes).unwrap();
    bytes[30] ^= 4;
    fs::write(&path, &bytes).unwrap();
    let err = Collection::<loaderx_store::Deflate>::open(root, OpenOptions::default()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotAStore);
    assert!(err.to_string().contains("manifest checksum"), "{err}");
}

/// Parts made on demand in memory: part `p` of `RECORDS_PER_PART` records
/// holding their global indices. Counts how many stores were opened.
#[derive(Debug, Default)]
struct Synth {
    opened: std::sync::atomic::AtomicUsize,
}

const RECORDS_PER_PART: u64 = 10;

fn scalar_u64() -> Schema {
    Schema {
        kind: Kind::Dense,
        dtype: Dtype::from_name("<u8").unwrap(),
        shape: vec![],
        ndim: 0,
        codec: CodecTag::LZ4,
        dictionary: None,
        codecs: Vec::new(),
    }
}

impl
    loaderx_store::collection::PartOpener<
        loaderx_store::Deflate,
        loaderx_store::storage::MemStorage,
    > for Synth
{
    fn open(
        &self,
        part: &str,
        _column: &str,
    ) -> loaderx_store::Result<Store<loaderx_store::Deflate, loaderx_store::storage::MemStorage>>
    {
        self.opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p: u64 = part.trim_start_matches("part-").parse().unwrap();
        let store = Store::create_v2_in(
            loaderx_store::storage::MemStorage::new(),
            &scalar_u64(),
            OpenOptions::default(),
        )?;
        let data: Vec<u8> = (p * RECORDS_PER_PART..(p + 1) * RECORDS_PER_PART)
            .flat_map(u64::to_le_bytes)
            .collect();
        store.append_fixed(&data, RECORDS_PER_PART as usize, 8)?;
        Ok(store)
    }

    fn location(&self, part: &str, column: &str) -> std::path::PathBuf {
        Path::new("mem").join(part).join(column)
    }
}

/// The scale simulation of docs/ARCHITECTURE.md ("Collections"): 100,000
/// parts of 10 records. Opening touches no part; a random batch opens
/// only the parts it falls in, and gathers the right records.
#[test]
fn a_hundred_thousand_parts_open_lazily_and_gather_by_part() {
    use loaderx_store::format::manifest::{Column as ColumnDef, Part};
    const PARTS: u64 = 100_000;
    let manifest = Manifest {
        columns: vec![ColumnDef {
            name: "id".into(),
            schema: scalar_u64(),
        }],
        parts: (0..PARTS)
            .map(|p| Part {
                name: format!("part-{p:06}"),
                records: RECORDS_PER_PART,
            })
            .collect(),
    };
    let bytes = manifest.encode().unwrap();
    // 8 (count) + 1 + 11 (name) bytes a part.
    assert!(
        bytes.len() <= PARTS as usize * 20 + 200,
        "{} bytes",
        bytes.len()
    );
    let coll: Arc<Collection<loaderx_store::Deflate, loaderx_store::storage::MemStorage>> =
        Arc::new(
            Collection::from_manifest("mem", &bytes, Box::new(Synth::default()))
                .unwrap()
                // Room for every part the batch touches.
                .with_max_open_parts(2048),
        );
    assert_eq!(coll.len(), PARTS * RECORDS_PER_PART);
    assert_eq!(coll.opened_parts(), 0);
    let col = coll.column("id").unwrap();
    // A shuffled batch of 1,024 over the whole index space.
    let idxs: Vec<u64> = (0..1024u64)
        .map(|i| (i * 2_654_435_761) % coll.len())
        .collect();
    let mut out = vec![0u8; idxs.len() * 8];
    col.gather_exact(&idxs, &mut out, 8).unwrap();
    for (k, &g) in idxs.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(out[k * 8..][..8].try_into().unwrap()), g);
    }
    let parts: std::collections::HashSet<u64> = idxs.iter().map(|g| g / RECORDS_PER_PART).collect();
    assert_eq!(coll.opened_parts(), parts.len());
    // The same batch again opens nothing more.
    col.gather_exact(&idxs, &mut out, 8).unwrap();
    assert_eq!(coll.opened_parts(), parts.len());
}

/// More parts than the cap on open part stores: every read is right, at
/// most the cap stay open, and a part closed to make room is opened again
/// when a read needs it.
#[test]
fn open_part_stores_are_capped_least_recently_used_first() {
    use loaderx_store::format::manifest::{Column as ColumnDef, Part};
    const PARTS: u64 = 300;
    let manifest = Manifest {
        columns: vec![ColumnDef {
            name: "id".into(),
            schema: scalar_u64(),
        }],
        parts: (0..PARTS)
            .map(|p| Part {
                name: format!("part-{p:05}"),
                records: RECORDS_PER_PART,
            })
            .collect(),
    };
    let bytes = manifest.encode().unwrap();
    let synth = std::sync::Arc::new(Synth::default());
    #[derive(Debug)]
    struct Shared(std::sync::Arc<Synth>);
    impl
        loaderx_store::collection::PartOpener<
            loaderx_store::Deflate,
            loaderx_store::storage::MemStorage,
        > for Shared
    {
        fn open(
            &self,
            part: &str,
            column: &str,
        ) -> loaderx_store::Result<Store<loaderx_store::Deflate, loaderx_store::storage::MemStorage>>
        {
            self.0.open(part, column)
        }
        fn location(&self, part: &str, column: &str) -> std::path::PathBuf {
            loaderx_store::collection::PartOpener::<
                loaderx_store::Deflate,
                loaderx_store::storage::MemStorage,
            >::location(&*self.0, part, column)
        }
    }
    let coll: Arc<Collection<loaderx_store::Deflate, loaderx_store::storage::MemStorage>> =
        Arc::new(
            Collection::from_manifest("mem", &bytes, Box::new(Shared(synth.clone())))
                .unwrap()
                .with_max_open_parts(8),
        );
    assert_eq!(coll.max_open_parts(), 8);
    let col = coll.column("id").unwrap();
    let n = coll.len();
    let all: Vec<u64> = (0..n).collect();
    let shuffled: Vec<u64> = (0..n).map(|i| (i * 2_654_435_761) % n).collect();
    for idxs in [&all, &shuffled, &all] {
        let mut out = vec![0u8; idxs.len() * 8];
        col.gather_exact(idxs, &mut out, 8).unwrap();
        for (k, &g) in idxs.iter().enumerate() {
            assert_eq!(u64::from_le_bytes(out[k * 8..][..8].try_into().unwrap()), g);
        }
        assert!(coll.opened_parts() <= 8, "{} open", coll.opened_parts());
    }
    let opened = synth.opened.load(std::sync::atomic::Ordering::Relaxed);
    // Each batch opens every part again, but those the batch before it
    // read last (still held when the next batch looks its parts up).
    assert!(opened >= 3 * (PARTS as usize - 8), "{opened} opens");
    // The parts read last are held: reading them again opens nothing.
    let last: Vec<u64> = ((n - 8 * RECORDS_PER_PART)..n).collect();
    let mut out = vec![0u8; last.len() * 8];
    col.gather_exact(&last, &mut out, 8).unwrap();
    assert_eq!(
        synth.opened.load(std::sync::atomic::Ordering::Relaxed),
        opened
    );
}

/// A part's chunk file cut after a batch read it: the next batch spread
/// over parts (one drain of the file watches for all of them) fails with
/// an error naming the chunk, never a `SIGBUS`; the other parts still read.
/// For compressed records (the table path) and raw ones (each part's index
/// of raw runs, built by the first batch).
#[test]
fn a_part_chunk_cut_between_batches_is_an_error_not_a_crash() {
    for column in ["x", "r"] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let n = sample(root);
        assert!(n > 26);
        commit(root, None, &OpenOptions::default()).unwrap();
        let coll = open(root);
        let x = coll.column(column).unwrap();
        // Parts 0, 2 and 4, interleaved: the in-place path.
        let spread: Vec<u64> = vec![20, 0, 6, 21, 1, 7, 26];
        let want: Vec<u8> = spread.iter().copied().flat_map(item).collect();
        let mut out = vec![0u8; spread.len() * ITEM];
        for _ in 0..2 {
            x.gather_exact(&spread, &mut out, ITEM).unwrap();
            assert_eq!(out, want, "{column}");
        }
        // Part 4 (records 15..27) cut to nothing behind the collection's back.
        let chunk = root.join("part-00004").join(column).join("0.zr");
        fs::OpenOptions::new()
            .write(true)
            .open(&chunk)
            .unwrap()
            .set_len(0)
            .unwrap();
        let err = x.gather_exact(&spread, &mut out, ITEM).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Corrupt, "{column}: {err}");
        assert!(err.to_string().contains("0.zr"), "{column}: {err}");
        assert!(err.to_string().contains("part-00004"), "{column}: {err}");
        let others: Vec<u64> = vec![0, 6, 1, 7, 8];
        let mut out = vec![0u8; others.len() * ITEM];
        x.gather_exact(&others, &mut out, ITEM).unwrap();
        let want: Vec<u8> = others.iter().copied().flat_map(item).collect();
        assert_eq!(out, want, "{column}");
        // Part 2's table (records 5..14) cut to a page boundary before its
        // entries' end (reading them through the map would fault).
        let meta = root.join("part-00002").join(column).join("meta.zr");
        let len = fs::metadata(&meta).unwrap().len();
        let keep = len / 4096 * 4096;
        assert!(keep < len && keep > 0, "{len}");
        fs::OpenOptions::new()
            .write(true)
            .open(&meta)
            .unwrap()
            .set_len(keep)
            .unwrap();
        match x.gather_exact(&others, &mut out, ITEM) {
            // The table path reads the entries: an error naming the table.
            Err(err) => {
                assert_eq!(column, "x", "{err}");
                assert!(err.to_string().contains("meta.zr"), "{err}");
                assert!(err.to_string().contains("part-00002"), "{err}");
            }
            // Raw runs indexed before the cut need no entry (as a single
            // store's indexed gathers): the records are whole.
            Ok(()) => {
                assert_eq!(column, "r");
                assert_eq!(out, want);
            }
        }
    }
}

/// A raw part's table cut behind the collection's back before the part's
/// index of raw runs was built: the batch that would build it gets an
/// error naming the table, never a `SIGBUS` (the index reads entries
/// through the map).
#[test]
fn a_part_table_cut_before_its_raw_runs_are_indexed_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    sample(root);
    commit(root, None, &OpenOptions::default()).unwrap();
    let coll = open(root);
    let r = coll.column("r").unwrap();
    // Part 2 opened by a one-part read of one record: not indexed.
    let mut out = vec![0u8; ITEM];
    r.gather_exact(&[5], &mut out, ITEM).unwrap();
    assert_eq!(out, item(5));
    let meta = root.join("part-00002").join("r").join("meta.zr");
    let len = fs::metadata(&meta).unwrap().len();
    let keep = len / 4096 * 4096;
    assert!(keep < len && keep > 0, "{len}");
    fs::OpenOptions::new()
        .write(true)
        .open(&meta)
        .unwrap()
        .set_len(keep)
        .unwrap();
    let mut out = vec![0u8; 2 * ITEM];
    let err = r.gather_exact(&[0, 5], &mut out, ITEM).unwrap_err();
    assert!(err.to_string().contains("meta.zr"), "{err}");
    assert!(err.to_string().contains("part-00002"), "{err}");
}
