//! Gather speed of DEFLATE records in this build: libdeflate (default
//! features) or flate2 (`--no-default-features --features
//! deflate-flate2,lz4`). Run both and compare (`docs/bench/rust.md`):
//!
//! ```text
//! cargo bench -p loaderx-benches --bench deflate_gather
//! cargo bench -p loaderx-benches --bench deflate_gather --no-default-features --features deflate-flate2,lz4
//! ```
//!
//! Workload: 4096 records of 12 KiB smooth image-like `uint8(3, 64, 64)`
//! content stored as DEFLATE, gathered in batches of 256 random indices;
//! also one core decoding the same records back to back (no store).
//!
//! With `DEFLATE_GATHER_DIR` set, the first run writes the store (and the
//! packed records) there and later runs read them, so two builds decode the
//! very same bytes.

use std::time::Duration;

use loaderx_benches::{BATCH, RECORD, best_gather, best_of, image_records, random_batches};
use loaderx_store::{Codec, CodecId, Deflate, OpenOptions, Store};

const RECORDS: usize = 4096;

fn main() {
    let backend = if cfg!(feature = "deflate-libdeflate") {
        "libdeflate"
    } else {
        "flate2 (zlib-rs)"
    };
    let data = image_records(RECORDS, 0);
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = std::env::var_os("DEFLATE_GATHER_DIR")
        .map_or_else(|| tmp.path().to_owned(), std::path::PathBuf::from);
    let (path, packed_path) = (dir.join("store"), dir.join("packed.bin"));
    let written_here = !path.exists();
    let packed: Vec<Vec<u8>> = if written_here {
        let packed: Vec<Vec<u8>> = data
            .chunks_exact(RECORD)
            .map(|r| {
                let mut p = vec![0u8; RECORD - 1];
                let n = Deflate.encode(r, &mut p).expect("shrinks");
                p.truncate(n);
                p
            })
            .collect();
        let mut file = Vec::new();
        for p in &packed {
            file.extend_from_slice(&u32::try_from(p.len()).expect("small").to_le_bytes());
            file.extend_from_slice(p);
        }
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(&packed_path, file).expect("write packed");
        packed
    } else {
        let file = std::fs::read(&packed_path).expect("read packed");
        let mut rest = &file[..];
        let mut packed = Vec::new();
        while let Some((len, tail)) = rest.split_first_chunk::<4>() {
            let n = u32::from_le_bytes(*len) as usize;
            packed.push(tail[..n].to_vec());
            rest = &tail[n..];
        }
        packed
    };
    let store: Store = Store::open_with(&path, OpenOptions::default()).expect("open");
    if written_here {
        store
            .append_fixed_with(CodecId::Deflate, &data, RECORDS, RECORD)
            .expect("append");
        store.sync().expect("sync");
    }
    let stats = store.stats().expect("stats");
    let writer = if written_here {
        "this build"
    } else {
        "an earlier run"
    };

    let batches = random_batches(RECORDS as u64, 64, 7);
    let mut out = vec![0u8; BATCH * RECORD];
    let gather = best_gather(&store, &batches, &mut out, 5, Duration::from_millis(600));

    // One core, the codec alone: every record's packed bytes decoded in turn.
    let mut one = vec![0u8; RECORD];
    let decode = best_of(5, Duration::from_millis(600), || {
        for p in &packed {
            Deflate.decode(p, &mut one).expect("decode");
            std::hint::black_box(&one);
        }
    });

    let gib = |bytes: usize, t: Duration| bytes as f64 / t.as_secs_f64() / f64::from(1u32 << 30);
    println!(
        "deflate backend: {backend}; {RECORDS} records of {RECORD} B stored in {} B ({:.2}x), written by {writer}",
        stats.live_bytes,
        (RECORDS * RECORD) as f64 / stats.live_bytes as f64
    );
    println!(
        "gather, batch {BATCH}, all cores: {:.3} ms/batch = {:.2} GiB/s of records",
        gather.as_secs_f64() * 1e3,
        gib(BATCH * RECORD, gather)
    );
    println!(
        "decode, one core: {:.2} GiB/s of records ({:.1} µs/record)",
        gib(RECORDS * RECORD, decode),
        decode.as_secs_f64() * 1e6 / RECORDS as f64
    );
}
