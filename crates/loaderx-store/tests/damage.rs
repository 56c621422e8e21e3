//! Damaged stores: every kind of damage to `meta.zr` or a chunk file, made
//! before the store is opened or behind an open store's back (another program
//! cutting or removing a file), is an error that names the file and, for a
//! table entry, the entry and what is wrong with it. A refused open repairs
//! nothing; a failed gather writes nothing; the undamaged records still read.
//!
//! Byte positions follow docs/FORMAT.md: a 16-byte header (magic, version u16,
//! tail chunk u16 at 6, tail offset u32 at 8, length u32 at 12), then 16-byte
//! entries (offset u32, stored length u32, logical length u32, chunk id u16 at
//! 12, codec tag u8 at 14, reserved u8).

use std::{
    collections::BTreeMap,
    fs,
    io::{Read, Seek, SeekFrom},
    path::Path,
};

use loaderx_store::{CodecId, Deflate, MAX_RECORD_LEN, Store};

const HEADER: usize = 16;
const ENTRY: usize = 16;
const OFFSET: usize = 0;
const PHYS: usize = 4;
const LOGIC: usize = 8;
const CHUNK: usize = 12;
const CODEC: usize = 14;

/// Record `i` of a test store: bytes that depend on `i` and the position, so
/// every codec compresses them.
fn ramp(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| ((i * 7 + j / 16) % 251) as u8).collect()
}

/// A store of `n` records of `len` bytes with `codec`; returns their bytes.
fn make_store(path: &Path, codec: CodecId, n: usize, len: usize) -> Vec<Vec<u8>> {
    let records: Vec<Vec<u8>> = (0..n).map(|i| ramp(i, len)).collect();
    let store: Store = Store::open(path).unwrap();
    store
        .append_fixed_with(codec, &records.concat(), n, len)
        .unwrap();
    store.sync().unwrap();
    records
}

fn open(path: &Path) -> loaderx_store::Result<Store> {
    Store::<Deflate>::open(path)
}

/// Patches `bytes` at `at` in `path/file`.
fn patch(path: &Path, file: &str, at: usize, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path.join(file))
        .unwrap();
    f.seek(SeekFrom::Start(at as u64)).unwrap();
    std::io::Write::write_all(&mut f, bytes).unwrap();
}

fn truncate(path: &Path, file: &str, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path.join(file))
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn entry_field(path: &Path, i: usize, field: usize) -> u32 {
    let mut f = fs::File::open(path.join("meta.zr")).unwrap();
    f.seek(SeekFrom::Start((HEADER + ENTRY * i + field) as u64))
        .unwrap();
    let mut b = [0u8; 4];
    f.read_exact(&mut b).unwrap();
    u32::from_le_bytes(b)
}

fn set_entry_u32(path: &Path, i: usize, field: usize, value: u32) {
    patch(
        path,
        "meta.zr",
        HEADER + ENTRY * i + field,
        &value.to_le_bytes(),
    );
}

/// The next run of data at or after `pos` in `f` as `(start, end)`, `None`
/// when only a hole is left (Unix: `SEEK_DATA`/`SEEK_HOLE`).
#[cfg(unix)]
fn data_extent(f: &fs::File, pos: u64, _len: u64) -> Option<(u64, u64)> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: lseek on a descriptor we own; no memory is touched.
    let start = unsafe { libc::lseek(f.as_raw_fd(), pos as libc::off_t, libc::SEEK_DATA) };
    if start < 0 {
        return None; // ENXIO
    }
    // SAFETY: as above.
    let end = unsafe { libc::lseek(f.as_raw_fd(), start, libc::SEEK_HOLE) } as u64;
    Some((start as u64, end))
}

/// Elsewhere (Windows) the whole rest of the file counts as data: slower,
/// same result.
#[cfg(not(unix))]
fn data_extent(_f: &fs::File, pos: u64, len: u64) -> Option<(u64, u64)> {
    Some((pos, len))
}

/// Every file's length and non-zero 64 KiB blocks (meta.zr is a 268 MB sparse
/// file: only its data extents are read).
fn image(dir: &Path) -> BTreeMap<String, (u64, BTreeMap<u64, Vec<u8>>)> {
    const BLOCK: u64 = 1 << 16;
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let mut f = fs::File::open(&path).unwrap();
        let len = f.metadata().unwrap().len();
        let mut blocks = BTreeMap::new();
        let mut pos = 0u64;
        while pos < len {
            let Some((start, end)) = data_extent(&f, pos, len) else {
                break; // only a hole is left
            };
            let mut at = start / BLOCK * BLOCK;
            while at < end {
                let mut block = vec![0u8; BLOCK.min(len - at) as usize];
                f.seek(SeekFrom::Start(at)).unwrap();
                f.read_exact(&mut block).unwrap();
                if block.iter().any(|&b| b != 0) {
                    blocks.insert(at, block);
                }
                at += BLOCK;
            }
            pos = end.max(at);
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        out.insert(name, (len, blocks));
    }
    out
}

fn assert_mentions(err: &loaderx_store::Error, fragments: &[&str]) {
    let msg = err.to_string();
    for f in fragments {
        assert!(msg.contains(f), "{f:?} missing from: {msg}");
    }
}

// --- damage before the open: the header and the files ---------------------------

#[test]
fn damaged_header_or_files_refuse_to_open_and_stay_untouched() {
    type Damage = fn(&Path);
    let cases: [(&str, Damage, &[&str]); 8] = [
        (
            "meta.zr empty",
            |p| truncate(p, "meta.zr", 0),
            &["meta.zr", "truncated", "need 16", "have 0"],
        ),
        (
            "shorter than the header",
            |p| truncate(p, "meta.zr", 10),
            &["meta.zr", "truncated", "need 16", "have 10"],
        ),
        (
            "shorter than its table",
            |p| truncate(p, "meta.zr", 16 + 16 * 5),
            &["meta.zr", "truncated", "need 144", "have 96"],
        ),
        (
            "length over 2^24",
            |p| patch(p, "meta.zr", 12, &((1u32 << 24) + 1).to_le_bytes()),
            &["meta.zr", "16777217", "16777216"],
        ),
        (
            "length of 2^32 - 1",
            |p| patch(p, "meta.zr", 12, &u32::MAX.to_le_bytes()),
            &["meta.zr", "4294967295", "16777216"],
        ),
        (
            "tail chunk over the limit",
            |p| patch(p, "meta.zr", 6, &4096u16.to_le_bytes()),
            &["meta.zr", "tail_chunk 4096", "4096 chunks"],
        ),
        (
            "tail chunk past the chunk files",
            |p| patch(p, "meta.zr", 6, &3u16.to_le_bytes()),
            &["1.zr", "missing", "0..=3"],
        ),
        (
            "chunk file missing",
            |p| fs::remove_file(p.join("0.zr")).unwrap(),
            &["0.zr", "missing"],
        ),
    ];
    for (case, damage, fragments) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z");
        make_store(&path, CodecId::Raw, 8, 100);
        damage(&path);
        let before = image(&path);
        let err = open(&path).map(|_| ()).unwrap_err();
        assert_eq!(err.code(), -8, "{case}: {err}");
        assert_mentions(&err, fragments);
        assert_mentions(&err, &[&path.display().to_string()]);
        let err = Store::<Deflate>::open_read_only(&path)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.code(), -8, "{case}, read-only: {err}");
        assert!(
            image(&path) == before,
            "{case}: a refused open changed the files"
        );
    }
}

// --- damage before the open: table entries ----------------------------------------

#[test]
fn a_damaged_table_entry_is_code_7_naming_the_entry() {
    type Damage = fn(&Path);
    let cases: [(&str, Damage, &str); 8] = [
        (
            "offset past the tail chunk's frontier",
            |p| set_entry_u32(p, 5, OFFSET, 790),
            "past the tail chunk's frontier 800",
        ),
        (
            "offset near the 4 GiB capacity",
            |p| set_entry_u32(p, 5, OFFSET, 0xFFFF_FFF0),
            "past the 4 GiB chunk capacity",
        ),
        (
            "chunk id past the tail",
            |p| {
                patch(
                    p,
                    "meta.zr",
                    HEADER + ENTRY * 5 + CHUNK,
                    &1u16.to_le_bytes(),
                )
            },
            "chunk 1 is past the tail chunk 0",
        ),
        (
            "unknown codec",
            |p| patch(p, "meta.zr", HEADER + ENTRY * 5 + CODEC, &[9]),
            "unknown codec tag 9",
        ),
        (
            "zero length",
            |p| {
                set_entry_u32(p, 5, PHYS, 0);
                set_entry_u32(p, 5, LOGIC, 0);
            },
            "logical length 0",
        ),
        (
            "length over 1 MiB",
            |p| {
                set_entry_u32(p, 5, PHYS, MAX_RECORD_LEN + 1);
                set_entry_u32(p, 5, LOGIC, MAX_RECORD_LEN + 1);
            },
            "logical length 1048577",
        ),
        (
            "stored length over 1 MiB",
            |p| {
                set_entry_u32(p, 5, PHYS, MAX_RECORD_LEN + 1);
                patch(p, "meta.zr", HEADER + ENTRY * 5 + CODEC, &[1]);
            },
            "stored length 1048577",
        ),
        (
            "raw sizes disagree",
            |p| set_entry_u32(p, 5, LOGIC, 99),
            "raw record stores 100 bytes but claims 99",
        ),
    ];
    for (case, damage, reason) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z");
        let records = make_store(&path, CodecId::Raw, 8, 100);
        damage(&path);
        // The store opens (entries are checked when touched).
        let store = open(&path).unwrap();
        let mut dst = vec![0xEEu8; 300];
        let err = store.gather(&[0, 5, 7], &mut dst, 100).unwrap_err();
        assert_eq!(err.code(), -7, "{case}: {err}");
        assert_mentions(&err, &["meta.zr entry 5", reason]);
        assert!(
            dst.iter().all(|&b| b == 0xEE),
            "{case}: written before validation"
        );
        let err = store.lengths(&[5], &mut [0]).unwrap_err();
        assert_eq!(err.code(), -7, "{case}: {err}");
        assert_mentions(&err, &["meta.zr entry 5", reason]);
        store.gather(&[0, 4, 7], &mut dst, 100).unwrap();
        assert_eq!(dst, [&records[0][..], &records[4], &records[7]].concat());
        assert_eq!(store.verify().unwrap_err().code(), -7, "{case}");
    }
}

#[test]
fn a_chunk_shorter_than_its_records_is_code_7() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("z");
    let records = make_store(&path, CodecId::Raw, 8, 100);
    truncate(&path, "0.zr", 450);
    let store = open(&path).unwrap();
    let mut dst = vec![0u8; 800];
    let idxs: Vec<u64> = (0..8).collect();
    let err = store.gather(&idxs, &mut dst, 100).unwrap_err();
    assert_eq!(err.code(), -7, "{err}");
    assert_mentions(
        &err,
        &["entry 4", "past the end of chunk file 0.zr (450 bytes)"],
    );
    store.gather(&idxs[..4], &mut dst[..400], 100).unwrap();
    assert_eq!(dst[..400], records[..4].concat());
}

#[test]
fn a_compressed_record_that_does_not_decode_exactly_is_code_7() {
    let cases = [
        (CodecId::Zstd, "garbage bytes", "invalid zstd frame"),
        (CodecId::Lz4, "garbage bytes", "invalid lz4 block"),
        (CodecId::Deflate, "claims fewer bytes", "flate record"),
        (CodecId::Zstd, "claims fewer bytes", "zstd record"),
        (CodecId::Lz4, "claims fewer bytes", "lz4 record"),
        (
            CodecId::Deflate,
            "claims more bytes",
            "decoded to 100 bytes, expected 150",
        ),
        (CodecId::Zstd, "claims more bytes", "expected 150"),
        (
            CodecId::Lz4,
            "claims more bytes",
            "decoded to 100 bytes, expected 150",
        ),
        (CodecId::Deflate, "stored bytes cut short", "flate record"),
        (CodecId::Zstd, "stored bytes cut short", "zstd record"),
        (CodecId::Lz4, "stored bytes cut short", "lz4 record"),
    ];
    // Codecs this build leaves out (cargo features) have nothing to damage.
    let cases = cases
        .into_iter()
        .filter(|(codec, ..)| codec.missing_feature().is_none());
    for (codec, fault, reason) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z");
        let records = make_store(&path, codec, 4, 100);
        let (offset, phys, logic) = (
            entry_field(&path, 1, OFFSET),
            entry_field(&path, 1, PHYS),
            entry_field(&path, 1, LOGIC),
        );
        assert!(phys < 100, "{codec:?}: record 1 is not compressed");
        match fault {
            "garbage bytes" => patch(&path, "0.zr", offset as usize, &vec![0xA5; phys as usize]),
            "claims fewer bytes" => set_entry_u32(&path, 1, LOGIC, logic - 1),
            "claims more bytes" => set_entry_u32(&path, 1, LOGIC, logic + 50),
            _ => set_entry_u32(&path, 1, PHYS, phys - 3),
        }
        let store = open(&path).unwrap();
        let err = store.gather(&[0, 1], &mut [0u8; 400], 200).unwrap_err();
        assert_eq!(err.code(), -7, "{codec:?} {fault}: {err}");
        assert_mentions(&err, &["0.zr entry 1", reason]);
        let mut out = vec![0u8; 200];
        store.gather(&[3, 0], &mut out, 100).unwrap();
        assert_eq!(out, [&records[3][..], &records[0]].concat());
    }
}

// --- damage behind an open store's back -------------------------------------------

#[test]
#[cfg_attr(
    windows,
    ignore = "Windows refuses to truncate a mapped file, so this damage cannot happen there"
)]
fn a_chunk_cut_after_open_fails_the_records_past_the_cut() {
    for codec in [CodecId::Raw, CodecId::Deflate] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z");
        let records = make_store(&path, codec, 64, 4096);
        let store = open(&path).unwrap();
        let size = fs::metadata(path.join("0.zr")).unwrap().len();
        let cut = size / 2;
        let first_lost = (0..64)
            .find(|&i| {
                u64::from(entry_field(&path, i, OFFSET)) + u64::from(entry_field(&path, i, PHYS))
                    > cut
            })
            .unwrap();
        truncate(&path, "0.zr", cut);
        let mut out = vec![0u8; 4 * 4096];
        store.gather(&[0, 1, 2, 3], &mut out, 4096).unwrap();
        assert_eq!(out, records[..4].concat(), "{codec:?}");
        let idxs: Vec<u64> = (0..64).collect();
        let err = store
            .gather(&idxs, &mut vec![0u8; 64 * 4096], 4096)
            .unwrap_err();
        assert_eq!(err.code(), -7, "{codec:?}: {err}");
        assert_mentions(
            &err,
            &[
                &format!("entry {first_lost}:"),
                "past the end of chunk file",
            ],
        );
        truncate(&path, "0.zr", 0);
        let err = store.gather(&[0], &mut out[..4096], 4096).unwrap_err();
        assert_eq!(err.code(), -7, "{codec:?}: {err}");
        assert_mentions(&err, &["0.zr entry 0:", "0.zr (0 bytes)"]);
    }
}

#[test]
#[cfg_attr(
    windows,
    ignore = "on Windows a deleted file keeps its name until its last handle closes (a mapped one cannot be deleted at all)"
)]
fn a_chunk_removed_after_open_still_reads_and_reopening_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("z");
    let records = make_store(&path, CodecId::Raw, 16, 256);
    let store = open(&path).unwrap();
    fs::remove_file(path.join("0.zr")).unwrap();
    // The open handle keeps the unlinked file's bytes: never a wrong answer.
    let idxs: Vec<u64> = (0..16).collect();
    let mut out = vec![0u8; 16 * 256];
    store.gather(&idxs, &mut out, 256).unwrap();
    assert_eq!(out, records.concat());
    let err = Store::<Deflate>::open_read_only(&path)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code(), -8, "{err}");
    assert_mentions(&err, &["0.zr", "missing"]);
}

#[test]
#[cfg_attr(
    windows,
    ignore = "Windows refuses to truncate a mapped file, so this damage cannot happen there"
)]
fn meta_cut_after_open_refuses_reads_and_maintenance() {
    for op in ["gather", "lengths", "stats", "delete", "compact"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z");
        make_store(&path, CodecId::Raw, 4000, 8);
        let mut store = open(&path).unwrap();
        truncate(&path, "meta.zr", 8192);
        let err = match op {
            "gather" => store
                .gather(&(0..4000).collect::<Vec<_>>(), &mut vec![0u8; 32_000], 8)
                .unwrap_err(),
            "lengths" => store.lengths(&[3999], &mut [0]).unwrap_err(),
            "stats" => store.stats().unwrap_err(),
            "delete" => store.delete(&[0, 1]).unwrap_err(),
            _ => store.compact().unwrap_err(),
        };
        assert_mentions(&err, &["meta.zr"]);
        if matches!(op, "gather" | "lengths") {
            assert_eq!(err.code(), -8, "{op}: {err}");
            assert_mentions(&err, &["meta.zr is truncated", "have 8192"]);
        } else {
            assert!(matches!(err.code().value(), -7 | -8), "{op}: {err}");
        }
    }
}

#[test]
#[cfg_attr(
    windows,
    ignore = "Windows refuses to truncate a mapped file, so this damage cannot happen there"
)]
fn a_chunk_cut_after_open_refuses_compact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("z");
    make_store(&path, CodecId::Raw, 4000, 512);
    let mut store = open(&path).unwrap();
    store
        .delete(&(0..4000).step_by(2).collect::<Vec<_>>())
        .unwrap();
    truncate(&path, "0.zr", 100_000);
    let err = store.compact().unwrap_err();
    assert_eq!(err.code(), -7, "{err}");
    assert_mentions(&err, &["0.zr"]);
}
