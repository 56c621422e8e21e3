//! The plug-in codec end to end: a store written with it reads back, a
//! reader without it refuses the store by name, and the codec keeps its
//! contract on arbitrary input.

use codec_plugin::DeltaRle;
use loaderx_store::{Codec, CodecRegistry, Deflate, Error, OpenOptions, Store, format::v2::Schema};
use proptest::prelude::*;

fn options() -> OpenOptions {
    let mut codecs = CodecRegistry::new();
    codecs.register(DeltaRle).unwrap();
    OpenOptions::default().with_codecs(codecs)
}

/// Ragged token sequences: `(bytes, offsets, lens)`.
fn documents() -> (Vec<u8>, Vec<u64>, Vec<u32>) {
    let (mut bytes, mut offsets, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    for doc in 0..300u32 {
        offsets.push(bytes.len() as u64);
        let n = 1 + (doc * 37) % 700;
        for t in 0..n {
            bytes.extend_from_slice(&(doc * 1000 + t / 3).to_le_bytes());
        }
        lens.push(n * 4);
    }
    (bytes, offsets, lens)
}

#[test]
fn a_store_written_with_the_plugin_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    let (bytes, offsets, lens) = documents();
    {
        let store: Store =
            Store::create_v2(&path, &Schema::bytes(DeltaRle::TAG), options()).unwrap();
        store.append_ragged(&bytes, &offsets, &lens).unwrap();
        let stats = store.stats().unwrap();
        assert!(
            stats.live_bytes * 2 < bytes.len() as u64,
            "token ids must shrink: {stats:?}"
        );
    }
    let store: Store = Store::open_with(&path, options()).unwrap();
    assert_eq!(store.len(), 300);
    store.verify().unwrap();
    let idxs: Vec<u64> = (0..300).rev().collect();
    let total: usize = lens.iter().map(|&l| l as usize).sum();
    let mut out = vec![0u8; total];
    let mut dst_offsets = Vec::new();
    let mut at = 0u64;
    for &i in &idxs {
        dst_offsets.push(at);
        at += u64::from(lens[i as usize]);
    }
    store.gather_ragged(&idxs, &mut out, &dst_offsets).unwrap();
    for (k, &i) in idxs.iter().enumerate() {
        let i = i as usize;
        let got = &out[dst_offsets[k] as usize..][..lens[i] as usize];
        let want = &bytes[offsets[i] as usize..][..lens[i] as usize];
        assert_eq!(got, want, "record {i}");
    }
}

#[test]
fn a_reader_without_the_plugin_refuses_the_store_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    let (bytes, offsets, lens) = documents();
    Store::<Deflate>::create_v2(&path, &Schema::bytes(DeltaRle::TAG), options())
        .unwrap()
        .append_ragged(&bytes, &offsets, &lens)
        .unwrap();
    for options in [OpenOptions::read_only(), OpenOptions::default()] {
        let err = Store::<Deflate>::open_with(&path, options).unwrap_err();
        assert!(
            matches!(&err, Error::CodecUnavailable { tag: 200, name, version: 1, .. } if name == "delta-rle"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("\"delta-rle\" version 1 (tag 200)"), "{text}");
    }
    // Refused means untouched: the store still opens with the codec.
    let store: Store = Store::open_with(&path, options()).unwrap();
    assert_eq!(store.len(), 300);
}

fn round_trip(data: &[u8]) {
    let mut packed = vec![0u8; data.len().saturating_sub(1)];
    if let Some(n) = DeltaRle.encode(data, &mut packed) {
        assert!(n < data.len());
        let mut out = vec![0u8; data.len()];
        DeltaRle.decode(&packed[..n], &mut out).unwrap();
        assert_eq!(out, data);
        let mut short = vec![0u8; data.len() - 1];
        assert!(DeltaRle.decode(&packed[..n], &mut short).is_err());
        let mut long = vec![0u8; data.len() + 1];
        assert!(DeltaRle.decode(&packed[..n], &mut long).is_err());
    }
}

#[test]
fn runs_and_literals_at_their_limits() {
    for len in [1, 2, 3, 4, 5, 127, 128, 129, 130, 131, 257, 1000] {
        round_trip(&vec![9u8; len]);
        round_trip(&(0..len).map(|i| (i * 31 % 251) as u8).collect::<Vec<_>>());
        round_trip(
            &(0..len as u32)
                .flat_map(u32::to_le_bytes)
                .collect::<Vec<_>>(),
        );
    }
    // A long constant record is a handful of bytes.
    let mut packed = [0u8; 64];
    let n = DeltaRle.encode(&[0u8; 4096], &mut packed).unwrap();
    assert!(n <= 2 * 4096 / 129 + 2, "{n}");
}

proptest! {
    #[test]
    fn round_trips_arbitrary_bytes(
        data in prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..3000),
            proptest::collection::vec(0u8..3, 1..3000),
        ]
    ) {
        round_trip(&data);
    }

    #[test]
    fn never_panics_on_garbage(
        src in proptest::collection::vec(any::<u8>(), 0..600),
        len in 1usize..2000,
    ) {
        let mut out = vec![0u8; len];
        let _ = DeltaRle.decode(&src, &mut out);
    }
}
