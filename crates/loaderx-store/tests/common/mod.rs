//! Helpers shared by the integration tests.
#![allow(dead_code)]

use loaderx_store::{
    Codec, OpenOptions, Store,
    storage::{MemStorage, Storage},
};

/// Smooth, image-like bytes that compress a little, seeded per record.
pub fn image_like(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let base = ((i / 64) as u64 + seed * 3) as u8;
            base.wrapping_add((state % 5) as u8)
        })
        .collect()
}

/// Every record of `store`, gathered one at a time.
pub fn contents<C: Codec, S: Storage>(store: &Store<C, S>) -> Vec<Vec<u8>> {
    let n = store.len();
    let idxs: Vec<u64> = (0..n).collect();
    let mut lens = vec![0u32; n as usize];
    store.lengths(&idxs, &mut lens).unwrap();
    idxs.iter()
        .zip(&lens)
        .map(|(&i, &len)| {
            let mut out = vec![0u8; len as usize];
            store.gather(&[i], &mut out, len as usize).unwrap();
            out
        })
        .collect()
}

/// Options with a small chunk capacity so rollover happens in tests.
pub fn small_chunks(capacity: u64) -> OpenOptions {
    OpenOptions {
        chunk_capacity: capacity,
        ..OpenOptions::default()
    }
}

pub fn mem_store<C: Codec>(storage: &MemStorage, capacity: u64) -> Store<C, MemStorage> {
    Store::open_in(storage.clone(), small_chunks(capacity)).unwrap()
}
