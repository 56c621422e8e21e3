//! Reading stores the original loaderx 0.5.4 wrote, from committed fixtures:
//! no network, no Python. (`compat.rs` keeps the two-way test that installs
//! 0.5.4.)
//!
//! `tests/fixtures/loaderx-054/make_fixtures.py` wrote the stores and packed
//! them; its docstring describes the packed form (each file's used prefix plus
//! its original length, listed in `MANIFEST`) and the record contents. Here
//! every store is restored into a temporary directory (prefix written, file
//! extended with `set_len` to its original sparse length), checked to be
//! exactly that prefix followed by zeros, and read back.

mod common;

use std::{
    collections::BTreeMap,
    fs,
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
};

use loaderx_store::Store;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loaderx-054")
}

/// One line of `MANIFEST`.
struct Packed {
    store: String,
    file: String,
    len: u64,
    prefix_len: u64,
    crc32: u32,
}

fn manifest() -> Vec<Packed> {
    let path = fixtures().join("MANIFEST");
    let text = fs::read_to_string(&path).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.len(), 4, "{}: bad line {line:?}", path.display());
            let (store, file) = f[0].split_once('/').unwrap();
            Packed {
                store: store.to_owned(),
                file: file.to_owned(),
                len: f[1].parse().unwrap(),
                prefix_len: f[2].parse().unwrap(),
                crc32: f[3].parse().unwrap(),
            }
        })
        .collect()
}

/// Ranges `[start, end)` of `file` past `from` that may hold data (the rest
/// are holes, which read as zeros).
#[cfg(unix)]
fn data_extents(file: &fs::File, from: u64, len: u64) -> Vec<(u64, u64)> {
    use std::os::unix::io::AsRawFd;
    let fd = file.as_raw_fd();
    let mut out = Vec::new();
    let mut pos = from;
    while pos < len {
        // SAFETY: lseek on a descriptor we own; no memory is touched.
        let start = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        if start < 0 {
            break; // ENXIO: only a hole is left
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        assert!(end > start, "SEEK_HOLE failed");
        out.push((start as u64, end as u64));
        pos = end as u64;
    }
    out
}

/// Elsewhere (Windows) the whole rest of the file may hold data: slower,
/// same check.
#[cfg(not(unix))]
fn data_extents(_file: &fs::File, from: u64, len: u64) -> Vec<(u64, u64)> {
    vec![(from, len)]
}

/// Restores every packed store under `root` and checks each file is its
/// prefix (with the manifest's CRC) followed by zeros up to its length.
/// Returns the store directories by name.
fn restore_all(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut stores = BTreeMap::new();
    let packed = manifest();
    assert!(!packed.is_empty());
    for p in &packed {
        let dir = root.join(&p.store);
        fs::create_dir_all(&dir).unwrap();
        let prefix = fs::read(fixtures().join("stores").join(&p.store).join(&p.file)).unwrap();
        let name = format!("{}/{}", p.store, p.file);
        assert_eq!(prefix.len() as u64, p.prefix_len, "{name}: packed length");
        let mut crc = flate2::Crc::new();
        crc.update(&prefix);
        assert_eq!(crc.sum(), p.crc32, "{name}: packed CRC");
        let dest = dir.join(&p.file);
        fs::write(&dest, &prefix).unwrap();
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dest)
            .unwrap();
        file.set_len(p.len).unwrap();

        assert_eq!(file.metadata().unwrap().len(), p.len, "{name}: length");
        let mut head = vec![0u8; prefix.len()];
        file.read_exact(&mut head).unwrap();
        assert!(head == prefix, "{name}: prefix");
        for (start, end) in data_extents(&file, p.prefix_len, p.len) {
            let mut at = start.max(p.prefix_len);
            let mut block = vec![0u8; 1 << 20];
            while at < end {
                let n = (end - at).min(block.len() as u64) as usize;
                file.seek(SeekFrom::Start(at)).unwrap();
                file.read_exact(&mut block[..n]).unwrap();
                assert!(
                    block[..n].iter().all(|&b| b == 0),
                    "{name}: bytes past the prefix near {at}"
                );
                at += n as u64;
            }
        }
        stores.insert(p.store.clone(), dir);
    }
    stores
}

/// `(tag, length)` of every live record in index order, as 0.5.4 read them.
fn expected(store: &str) -> Vec<(u64, usize)> {
    let path = fixtures().join("expected").join(format!("{store}.txt"));
    fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| {
            let (tag, len) = l.split_once(' ').unwrap();
            (tag.parse().unwrap(), len.parse().unwrap())
        })
        .collect()
}

/// Record contents as make_fixtures.py defines them.
fn record(store: &str, tag: u64, len: usize) -> Vec<u8> {
    if store.starts_with("dataset-") {
        // An int32 row of 16 values, `16 * tag + k`, little-endian.
        assert_eq!(len, 64);
        return (0..16u32)
            .flat_map(|k| (16 * tag as u32 + k).to_le_bytes())
            .collect();
    }
    (0..len)
        .map(|j| ((7 * tag + j as u64 / 16) % 251) as u8)
        .collect()
}

fn records(store: &str, order: &[(u64, usize)]) -> Vec<Vec<u8>> {
    order
        .iter()
        .map(|&(tag, len)| record(store, tag, len))
        .collect()
}

#[test]
fn every_store_054_wrote_reads_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let stores = restore_all(dir.path());
    let names: Vec<&str> = stores.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "compacted",
            "dataset-flate",
            "dataset-raw",
            "deleted",
            "flate",
            "raw"
        ]
    );
    for (name, path) in &stores {
        let order = expected(name);
        let want = records(name, &order);
        let store: Store = Store::open_read_only(path).unwrap();
        assert_eq!(store.len(), want.len() as u64, "{name}");
        store.verify().unwrap();
        assert!(common::contents(&store) == want, "{name}: records differ");
        // A batch gather too, in an order of our own.
        let (tag, len) = order[order.len() / 2];
        if order.iter().all(|&(_, l)| l == len) {
            let idxs: Vec<u64> = (0..store.len()).rev().collect();
            let mut dst = vec![0u8; idxs.len() * len];
            store.gather(&idxs, &mut dst, len).unwrap();
            assert_eq!(
                dst[..len],
                record(name, order.last().unwrap().0, len),
                "{name}"
            );
            let mid = (idxs.len() - 1 - order.len() / 2) * len;
            assert_eq!(dst[mid..mid + len], record(name, tag, len), "{name}");
        }
        let stats = store.stats().unwrap();
        let logical: u64 = order.iter().map(|&(_, l)| l as u64).sum();
        assert_eq!(stats.records, order.len() as u64, "{name}");
        if name.ends_with("raw") {
            assert_eq!(
                stats.live_bytes, logical,
                "{name}: raw records are stored as is"
            );
        } else {
            assert!(
                stats.live_bytes < logical,
                "{name}: flate records are compressed"
            );
        }
    }
    // What 0.5.4 made of the deletes: the table's tail moved into the holes.
    let deleted: Vec<u64> = expected("deleted").iter().map(|r| r.0).collect();
    assert_eq!(deleted.len(), 29);
    assert!(!deleted.contains(&3) && deleted[3] == 29);
    let compacted = expected("compacted");
    assert!(compacted.iter().all(|r| ![0, 7, 49, 55, 69].contains(&r.0)));
    assert_eq!(compacted.len(), 70);
}

#[test]
fn we_keep_writing_to_stores_054_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let stores = restore_all(dir.path());
    for name in ["raw", "flate", "deleted", "compacted"] {
        let mut want = records(name, &expected(name));
        let mut store: Store = Store::open(&stores[name]).unwrap();
        let extra = record(name, 200, 333);
        assert_eq!(
            store.append_fixed(&extra, 1, 333).unwrap(),
            want.len() as u64
        );
        want.push(extra);
        store.delete(&[0]).unwrap();
        want.swap_remove(0);
        store.compact().unwrap();
        store.verify().unwrap();
        assert!(
            common::contents(&store) == want,
            "{name}: after append/delete/compact"
        );
        drop(store);
        let store: Store = Store::open_read_only(&stores[name]).unwrap();
        assert!(common::contents(&store) == want, "{name}: after reopening");
    }
}
