//! What the codec registry costs on the gather path: the same lz4 records
//! gathered through the built-in `lz4` codec (static dispatch) and through
//! an external codec that wraps it (registry lookup + one virtual call per
//! record). lz4 on text-like records decodes fast, so a per-record
//! overhead would show here first.
//!
//! `cargo bench -p loaderx-benches --bench codec_dispatch`

use std::time::Duration;

use loaderx_benches::{BATCH, RECORD, best_gather, random_batches, xorshift};
use loaderx_store::{
    Codec, CodecId, CodecRegistry, DecodeError, Lz4, OpenOptions, Store,
    format::{CodecTag, v2::Schema},
};

const RECORDS: usize = 4096;

/// lz4, under an external tag: found through the registry.
#[derive(Debug)]
struct WrappedLz4;

impl Codec for WrappedLz4 {
    fn id(&self) -> CodecId {
        CodecId::external(130).expect("external")
    }
    fn name(&self) -> &'static str {
        "wrapped-lz4"
    }
    fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        Lz4.encode(src, dst)
    }
    fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        Lz4.decode(src, dst)
    }
}

/// Words from a small vocabulary: lz4 shrinks it about 2×.
fn text(n: usize) -> Vec<u8> {
    const WORDS: [&[u8]; 12] = [
        b"the ",
        b"loader ",
        b"gathers ",
        b"records ",
        b"into ",
        b"memory ",
        b"while ",
        b"training ",
        b"runs. ",
        b"a ",
        b"batch ",
        b"of ",
    ];
    let mut x = 11u64;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        out.extend_from_slice(WORDS[(xorshift(&mut x) % 12) as usize]);
    }
    out.truncate(n);
    out
}

fn main() {
    let data = text(RECORDS * RECORD);
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut codecs = CodecRegistry::new();
    codecs.register(WrappedLz4).expect("register");
    let options = OpenOptions::default().with_codecs(codecs);
    let batches = random_batches(RECORDS as u64, 64, 5);
    let mut out = vec![0u8; BATCH * RECORD];
    let mut results = Vec::new();
    for (name, tag) in [
        ("built-in lz4", CodecTag::LZ4),
        ("registry lz4", CodecTag(130)),
    ] {
        let path = tmp.path().join(name.replace(' ', "-"));
        let store: Store =
            Store::create_v2(&path, &Schema::bytes(tag), options.clone()).expect("create");
        store.append_fixed(&data, RECORDS, RECORD).expect("append");
        let stats = store.stats().expect("stats");
        assert!(
            stats.live_bytes < (RECORDS * RECORD) as u64 * 3 / 4,
            "{stats:?}"
        );
        results.push((name, store));
    }
    // Alternate, so load from elsewhere hits both alike.
    let mut times = vec![Duration::MAX; results.len()];
    for _ in 0..4 {
        for (k, (_, store)) in results.iter().enumerate() {
            let t = best_gather(store, &batches, &mut out, 1, Duration::from_millis(400));
            times[k] = times[k].min(t);
        }
    }
    for ((name, _), t) in results.iter().zip(&times) {
        println!(
            "{name}: {:.3} ms per batch of {BATCH} ({:.2} µs/record)",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e6 / BATCH as f64
        );
    }
}
