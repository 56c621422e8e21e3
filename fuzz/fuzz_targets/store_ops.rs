//! A random sequence of append / gather / delete / compact / reopen on the
//! in-memory storage, with I/O failures injected after N operations, checked
//! against a `Vec<Vec<u8>>` model: after any failure the store (reopened, as
//! a restarted process would) reflects the operation fully or not at all,
//! except that a failed commit (delete and compact commit pending appends
//! first) publishes nothing more: the store then holds its last commit.
//!
//! The store is format v1, v2, or v2 with a run table, by the first byte
//! after the last whole 4-byte operation (none: v1).
#![no_main]

use libfuzzer_sys::fuzz_target;
use loaderx_store::format::{CodecTag, v2::Schema};
use loaderx_store::{CodecId, Deflate, OpenOptions, Store, storage::MemStorage};

const CAPACITY: u64 = 2048;

fn options() -> OpenOptions {
    OpenOptions {
        chunk_capacity: CAPACITY,
        ..OpenOptions::default()
    }
}

fn open(storage: &MemStorage) -> Store<Deflate, MemStorage> {
    Store::open_in(storage.clone(), options()).expect("a store reopens after any failure")
}

fn contents(store: &Store<Deflate, MemStorage>) -> Vec<Vec<u8>> {
    let n = store.len();
    let idxs: Vec<u64> = (0..n).collect();
    let mut lens = vec![0u32; n as usize];
    store.lengths(&idxs, &mut lens).unwrap();
    let mut offsets = Vec::new();
    let mut at = 0u64;
    for &l in &lens {
        offsets.push(at);
        at += u64::from(l);
    }
    let mut flat = vec![0u8; at as usize];
    store.gather_ragged(&idxs, &mut flat, &offsets).unwrap();
    idxs.iter()
        .map(|&i| flat[offsets[i as usize] as usize..][..lens[i as usize] as usize].to_vec())
        .collect()
}

fn record(seed: u8, k: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| if seed & 1 == 0 { (i / 8) as u8 ^ seed } else { (i * 31 + k * 7) as u8 ^ seed })
        .collect()
}

/// A new store on `storage`: v1 (`format` 0), v2 (1) or v2 with a run
/// table (2), of untyped records.
fn create(storage: &MemStorage, format: u8) -> Store<Deflate, MemStorage> {
    let schema = Schema::bytes(CodecTag::RAW);
    match format {
        1 => Store::create_v2_in(storage.clone(), &schema, options()),
        2 => Store::create_v2_runs_in(storage.clone(), &schema, options()),
        _ => return open(storage),
    }
    .expect("a new store")
}

fuzz_target!(|data: &[u8]| {
    let mut storage = MemStorage::new();
    let format = data.chunks_exact(4).remainder().first().map_or(0, |b| b % 3);
    let mut store = create(&storage, format);
    let mut model: Vec<Vec<u8>> = Vec::new();
    // The contents as of the last commit.
    let mut committed: Vec<Vec<u8>> = Vec::new();
    let mut bytes = data.chunks_exact(4);
    for op in bytes.by_ref().take(64) {
        let (kind, a, b, c) = (op[0] % 8, op[1], op[2], op[3]);
        // Some operations run with a failure injected after `c % 8` writes.
        // Operations skipped below (`continue`) must not leave a fault armed.
        storage.clear_faults();
        let inject = kind >= 5 && c & 0x80 != 0;
        if inject {
            storage.fail_after(u64::from(c % 8));
        }
        let before = model.clone();
        let outcome: Result<Vec<Vec<u8>>, ()> = match kind {
            0 | 5 => {
                let n = usize::from(a % 8) + 1;
                let len = usize::from(b) * 7 + 1;
                let recs: Vec<Vec<u8>> = (0..n).map(|k| record(c, k, len)).collect();
                let codec = CodecId::ALL[usize::from(c % 4)];
                match store.append_fixed_with(codec, &recs.concat(), n, len) {
                    Ok(first) => {
                        assert_eq!(first, model.len() as u64);
                        let mut m = model.clone();
                        m.extend(recs);
                        Ok(m)
                    }
                    Err(e) => {
                        assert!(inject, "append failed without an injected fault: {e}");
                        Err(())
                    }
                }
            }
            1 => {
                if model.is_empty() {
                    continue;
                }
                let idxs: Vec<u64> = [a, b, c].iter().map(|&x| u64::from(x) % model.len() as u64).collect();
                let stride = 1 + 255 * 7;
                let mut dst = vec![0u8; 3 * stride];
                store.gather(&idxs, &mut dst, stride).unwrap();
                for (k, &i) in idxs.iter().enumerate() {
                    let r = &model[i as usize];
                    assert_eq!(&dst[k * stride..][..r.len()], &r[..]);
                }
                continue;
            }
            2 | 6 => {
                if model.is_empty() {
                    continue;
                }
                let idxs: Vec<u64> = [a, b].iter().map(|&x| u64::from(x) % model.len() as u64).collect();
                match store.delete(&idxs) {
                    Ok(()) => {
                        let mut m = model.clone();
                        let mut sorted = idxs.clone();
                        sorted.sort_unstable_by(|x, y| y.cmp(x));
                        sorted.dedup();
                        for i in sorted {
                            m.swap_remove(i as usize);
                        }
                        Ok(m)
                    }
                    Err(e) => {
                        assert!(inject, "delete failed without an injected fault: {e}");
                        Err(())
                    }
                }
            }
            3 | 7 => match store.compact() {
                Ok(()) => Ok(model.clone()),
                Err(e) => {
                    assert!(inject, "compact failed without an injected fault: {e}");
                    Err(())
                }
            },
            _ => {
                drop(store);
                store = open(&storage);
                Ok(model.clone())
            }
        };
        storage.clear_faults();
        match outcome {
            Ok(m) => {
                // Delete, compact and reopen commit everything before them.
                if !matches!(kind, 0 | 5 | 1) {
                    committed = m.clone();
                }
                model = m;
            }
            Err(()) => {
                assert!(inject, "an operation failed without an injected fault");
                // What a restarted process sees: everything written so far.
                drop(store);
                storage = storage.after_process_crash();
                store = open(&storage);
                let now = contents(&store);
                assert!(
                    now == before || now == committed,
                    "a failed operation left a partial change"
                );
                model = now.clone();
                committed = now;
            }
        }
        assert_eq!(store.len(), model.len() as u64);
    }
    storage.clear_faults();
    store.verify().unwrap();
    assert!(contents(&store) == model);
});
