//! DEFLATE stores are the same bytes whichever implementation wrote them:
//! a libdeflate build (feature `deflate-libdeflate`) and a pure-Rust flate2
//! build (`deflate-flate2` alone) each read what the other writes.
//!
//! One build cannot hold both, so `cargo xtask test` runs this test three
//! times with `LOADERX_CROSS_DIR` set to one directory: the libdeflate build
//! writes its store, the flate2 build writes its own and reads the
//! libdeflate one, then the libdeflate build reads the flate2 one. Without
//! the variable the test writes and reads its own build's store.
#![cfg(any(feature = "deflate-libdeflate", feature = "deflate-flate2"))]

use std::path::Path;

use loaderx_store::{CodecId, Deflate, OpenOptions, Store, format::CodecTag, format::v2::Schema};

/// Which implementation this build's `Deflate` uses.
const THIS: &str = if cfg!(feature = "deflate-libdeflate") {
    "libdeflate"
} else {
    "flate2"
};
const OTHER: &str = if cfg!(feature = "deflate-libdeflate") {
    "flate2"
} else {
    "libdeflate"
};

const RECORDS: usize = 64;
const LEN: usize = 12 * 1024;

/// Image-like records: smooth gradients with some noise, every one different.
fn records() -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..RECORDS * LEN)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let (r, x) = (i / LEN, i % LEN);
            let noise = if x % 8 == 0 { (state % 5) as u8 } else { 0 };
            ((x / 48 + r * 3) as u8).wrapping_add(noise)
        })
        .collect()
}

fn write(dir: &Path) {
    let data = records();
    // A v1 store (the format loaderx 0.5.x shares) and a v2 one.
    let v1: Store = Store::open_with(dir.join("v1"), OpenOptions::default()).unwrap();
    v1.append_fixed_with(CodecId::Deflate, &data, RECORDS, LEN)
        .unwrap();
    v1.sync().unwrap();
    let v2: Store = Store::create_v2(
        dir.join("v2"),
        &Schema::bytes(CodecTag::FLATE),
        OpenOptions::default(),
    )
    .unwrap();
    v2.append_fixed(&data, RECORDS, LEN).unwrap();
    v2.sync().unwrap();
}

fn read(dir: &Path, who: &str) {
    let data = records();
    for kind in ["v1", "v2"] {
        let store: Store<Deflate> = Store::open_read_only(dir.join(kind)).unwrap();
        assert_eq!(store.len(), RECORDS as u64, "{who} {kind}");
        let stats = store.stats().unwrap();
        // Stored compressed, so this really exercises the other decoder.
        assert!(
            stats.live_bytes < (RECORDS * LEN / 3) as u64,
            "{who} {kind}: {stats:?}"
        );
        let idxs: Vec<u64> = (0..RECORDS as u64).rev().collect();
        let mut out = vec![0u8; RECORDS * LEN];
        store.gather(&idxs, &mut out, LEN).unwrap();
        for (k, &i) in idxs.iter().enumerate() {
            let i = i as usize;
            assert_eq!(
                out[k * LEN..][..LEN],
                data[i * LEN..][..LEN],
                "{THIS} reading {who}'s {kind} record {i}"
            );
        }
        store.verify().unwrap();
    }
}

#[test]
fn deflate_stores_cross_implementations() {
    let Some(root) = std::env::var_os("LOADERX_CROSS_DIR") else {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path());
        read(dir.path(), THIS);
        return;
    };
    let root = Path::new(&root);
    let mine = root.join(THIS);
    if !mine.exists() {
        write(&mine);
    }
    read(&mine, THIS);
    let theirs = root.join(OTHER);
    if theirs.exists() {
        read(&theirs, OTHER);
        std::fs::write(root.join(format!("{THIS}-read-{OTHER}")), b"ok").unwrap();
    }
}
