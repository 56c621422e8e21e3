//! Two-way compatibility with the original loaderx 0.5.4 (format v1).
//!
//! The original is installed from PyPI into a scratch virtualenv under the
//! target directory (once; later runs reuse it). It writes stores with both
//! its codecs, including deletes and a compaction, and we read them back
//! identical; we write stores with `raw` and `flate` (with deletes and a
//! compaction) and it reads them back identical.
//!
//! The read direction also runs offline, from stores 0.5.4 wrote that are
//! committed as fixtures: see `fixtures_054.rs`.

mod common;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use loaderx_store::{CodecId, Deflate, Store};

const ORIGINAL: &str = "loaderx==0.5.4";

/// The virtualenv holding the original, created on first use.
fn original_python() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_owned();
    let venv = target.join("compat-venv");
    let python = venv.join("bin/python");
    let ready = || {
        Command::new(&python)
            .args([
                "-c",
                "import loaderx, numpy; assert loaderx.__version__ == '0.5.4'",
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready() {
        return python;
    }
    let lock = target.join("compat-venv.lock");
    let lock_file = fs::File::create(&lock).expect("lock file");
    lock_file.lock().expect("locking the venv");
    if !ready() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "creating the virtualenv at {} failed", venv.display());
        let ok = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                ORIGINAL,
                "numpy",
            ])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "pip could not install {ORIGINAL} from PyPI into {}: the compatibility test needs it",
            venv.display()
        );
    }
    assert!(
        ready(),
        "{ORIGINAL} is not importable from {}",
        venv.display()
    );
    python
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/compat")
        .join(name)
}

fn read_lens(path: &Path) -> Vec<u32> {
    fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
#[cfg_attr(
    windows,
    ignore = "runs loaderx 0.5.4 from a Unix venv (fixtures_054.rs covers this direction offline)"
)]
fn we_read_stores_the_original_wrote() {
    let python = original_python();
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(&python)
        .arg(script("original_write.py"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "the original failed to write its stores");
    for codec in ["raw", "flate"] {
        let d = dir.path().join(codec);
        let expect = fs::read(d.join("expect.bin")).unwrap();
        let lens = read_lens(&d.join("lens.bin"));
        let store: Store = Store::open_read_only(d.join("store")).unwrap();
        assert_eq!(store.len(), lens.len() as u64, "{codec}");
        store.verify().unwrap();
        let got = common::contents(&store);
        let got_lens: Vec<u32> = got.iter().map(|r| r.len() as u32).collect();
        assert_eq!(got_lens, lens, "{codec}");
        assert!(got.concat() == expect, "{codec}: records differ");
        if codec == "flate" {
            assert!(store.stats().unwrap().live_bytes < expect.len() as u64);
        }
        // And we can keep appending to it.
        drop(store);
        let store: Store = Store::open(d.join("store")).unwrap();
        store.append_fixed(&[5u8; 100], 1, 100).unwrap();
        store.verify().unwrap();
    }
}

#[test]
#[cfg_attr(windows, ignore = "runs loaderx 0.5.4 from a Unix venv")]
fn the_original_reads_stores_we_wrote() {
    let python = original_python();
    let dir = tempfile::tempdir().unwrap();
    for codec in [CodecId::Raw, CodecId::Deflate] {
        let path = dir.path().join(codec.name());
        let mut store: Store<Deflate> = Store::open(&path).unwrap();
        let fixed: Vec<u8> = (0..60).flat_map(|i| common::image_like(i, 2500)).collect();
        store.append_fixed_with(codec, &fixed, 60, 2500).unwrap();
        let blobs: Vec<Vec<u8>> = (0..25)
            .map(|i| common::image_like(500 + i, 100 + 41 * i as usize))
            .collect();
        let lens: Vec<u32> = blobs.iter().map(|b| b.len() as u32).collect();
        let mut offsets = vec![0u64];
        for l in &lens[..lens.len() - 1] {
            offsets.push(offsets.last().unwrap() + u64::from(*l));
        }
        store
            .append_ragged_with(codec, &blobs.concat(), &offsets, &lens)
            .unwrap();
        store.delete(&[3, 3, 59, 0, 70, 84]).unwrap();
        store.compact().unwrap();
        store.sync().unwrap();
        let records = common::contents(&store);
        drop(store);
        let expect_path = dir.path().join(format!("{}.expect", codec.name()));
        let lens_path = dir.path().join(format!("{}.lens", codec.name()));
        fs::write(&expect_path, records.concat()).unwrap();
        let lens_bytes: Vec<u8> = records
            .iter()
            .flat_map(|r| (r.len() as u32).to_le_bytes())
            .collect();
        fs::write(&lens_path, lens_bytes).unwrap();
        let out = Command::new(&python)
            .arg(script("original_read.py"))
            .arg(&path)
            .arg(&expect_path)
            .arg(&lens_path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the original could not read our {codec} store: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
