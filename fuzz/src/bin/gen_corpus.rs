//! Writes the seed corpus of every fuzz target into `corpus/<target>/`.
//!
//! Run by `fuzz/run.sh` before fuzzing; the seeds are real stores and real
//! codec output made by the project itself, so the fuzzer starts from valid
//! inputs and mutates them into damaged ones.

use std::{fs, path::Path};

use loaderx_format::{CodecTag, Header, RecordLoc};
use loaderx_store::{CodecId, Deflate, OpenOptions, Store, storage::{FileId, MemStorage}};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

fn parse_index_seeds(dir: &Path) {
    // A real store's meta image (trimmed to its table) with its chunk lengths.
    let storage = MemStorage::new();
    let store: Store<Deflate, MemStorage> = Store::open_in(
        storage.clone(),
        OpenOptions { chunk_capacity: 4096, ..OpenOptions::default() },
    )
    .unwrap();
    let data: Vec<u8> = (0..20u32).flat_map(|i| (0..700u32).map(move |j| ((i + j / 9) % 251) as u8)).collect();
    store.append_fixed_with(CodecId::Deflate, &data[..7000], 10, 700).unwrap();
    store.append_fixed_with(CodecId::Raw, &data[7000..], 10, 700).unwrap();
    let header = Header::decode(&storage.contents(FileId::Meta).unwrap()).unwrap();
    let meta = storage.contents(FileId::Meta).unwrap();
    let image = &meta[..16 + 16 * header.length as usize];
    let mut seed = vec![(header.tail_chunk + 1) as u8];
    for c in 0..=u32::from(header.tail_chunk) {
        let len = storage.contents(FileId::Chunk(c)).map_or(0, |b| b.len() as u64);
        seed.extend_from_slice(&len.to_le_bytes());
    }
    seed.extend_from_slice(image);
    write(dir, "real_store", &seed);

    // A hand-made one-entry store, and an empty one.
    let h = Header { tail_chunk: 0, tail_offset: 100, length: 1 };
    let e = RecordLoc { offset: 0, phys_length: 100, logic_length: 100, chunk_id: 0, codec: CodecTag::RAW };
    let mut seed = vec![1u8];
    seed.extend_from_slice(&100u64.to_le_bytes());
    seed.extend_from_slice(&h.encode());
    seed.extend_from_slice(&e.encode());
    write(dir, "one_raw", &seed);
    let mut seed = vec![1u8];
    seed.extend_from_slice(&0u64.to_le_bytes());
    seed.extend_from_slice(&Header::default().encode());
    write(dir, "empty", &seed);
}

fn decode_seeds(dir: &Path) {
    let record: Vec<u8> = (0..3000u32).map(|i| (i / 40) as u8).collect();
    for codec in [CodecId::Deflate, CodecId::Zstd, CodecId::Lz4] {
        let mut out = vec![0u8; record.len() - 1];
        let n = codec.encode(&record, &mut out).unwrap();
        let mut seed = ((record.len() - 1) as u16).to_le_bytes().to_vec();
        seed.extend_from_slice(&out[..n]);
        write(dir, codec.name(), &seed);
    }
    let mut seed = 99u16.to_le_bytes().to_vec();
    seed.extend_from_slice(&[7u8; 100]);
    write(dir, "raw", &seed);
}

fn store_ops_seeds(dir: &Path) {
    // [kind, a, b, c] quadruples: appends, gathers, deletes, compactions,
    // reopens, and the same with failures injected (c & 0x80).
    let plain = [
        0, 3, 40, 1, 0, 7, 90, 2, 1, 0, 5, 9, 2, 1, 3, 0, 3, 0, 0, 0, 4, 0, 0, 0, 1, 2, 4, 6,
    ];
    write(dir, "plain", &plain);
    let faulty = [
        0, 5, 60, 1, 5, 2, 30, 0x83, 6, 1, 2, 0x81, 7, 0, 0, 0x84, 4, 0, 0, 0, 1, 1, 2, 3,
    ];
    write(dir, "faulty", &faulty);
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    parse_index_seeds(&root.join("parse_index"));
    decode_seeds(&root.join("decode"));
    store_ops_seeds(&root.join("store_ops"));
    println!("seed corpus written to {}", root.display());
}
