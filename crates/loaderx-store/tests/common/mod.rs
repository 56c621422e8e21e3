//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod forward;

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

pub fn mem_store<C: Codec + Default>(storage: &MemStorage, capacity: u64) -> Store<C, MemStorage> {
    Store::open_in(storage.clone(), small_chunks(capacity)).unwrap()
}

/// Record `id` of the multi-process tests: 12 header bytes (the id, the
/// length) then a pattern derived from the id, so a reader can check any
/// record it gathers without knowing which index holds it.
pub fn self_describing(id: u64) -> Vec<u8> {
    let len = 16 + (id * 7919 % 2000) as usize;
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(&id.to_le_bytes());
    bytes.extend_from_slice(&(len as u32).to_le_bytes());
    bytes.extend((12..len).map(|k| pattern(id, k)));
    bytes
}

/// A [`self_describing`] record of `len` bytes (at least 12), whatever its
/// id: for stores of fixed-size records.
pub fn self_describing_sized(id: u64, len: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(&id.to_le_bytes());
    bytes.extend_from_slice(&(len as u32).to_le_bytes());
    bytes.extend((12..len).map(|k| pattern(id, k)));
    bytes
}

fn pattern(id: u64, k: usize) -> u8 {
    ((id.wrapping_mul(31) + k as u64 * 7) % 251) as u8 ^ 0x5a
}

/// Checks that `bytes` is exactly some [`self_describing`] record; returns
/// its id.
pub fn check_self_describing(bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() < 12 {
        return Err(format!("record of {} bytes is too short", bytes.len()));
    }
    let id = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    if len != bytes.len() {
        return Err(format!(
            "record {id} says {len} bytes but {} were read",
            bytes.len()
        ));
    }
    if let Some(k) = (12..len).find(|&k| bytes[k] != pattern(id, k)) {
        return Err(format!("record {id} is wrong at byte {k}"));
    }
    Ok(id)
}

/// The records of `ids` laid out for `append_ragged`: bytes, offsets, lengths.
pub fn ragged_batch(ids: impl IntoIterator<Item = u64>) -> (Vec<u8>, Vec<u64>, Vec<u32>) {
    let (mut src, mut offsets, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    for id in ids {
        let r = self_describing(id);
        offsets.push(src.len() as u64);
        lens.push(r.len() as u32);
        src.extend_from_slice(&r);
    }
    (src, offsets, lens)
}

/// Every record of `store` checked with [`check_self_describing`]: their ids
/// in index order.
pub fn self_describing_ids<C: Codec, S: Storage>(store: &Store<C, S>) -> Vec<u64> {
    contents(store)
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            check_self_describing(bytes).unwrap_or_else(|why| panic!("index {i}: {why}"))
        })
        .collect()
}

/// A command that runs this test binary again. Under an emulator (cross
/// tests: `cargo xtask cross-test` runs aarch64 binaries under qemu-user,
/// which cannot start a foreign binary by itself) `LOADERX_TEST_CHILD_RUNNER`
/// holds the emulator's command line, which the child is started through.
#[allow(dead_code)]
pub fn self_command() -> std::process::Command {
    let exe = std::env::current_exe().unwrap();
    let runner = std::env::var("LOADERX_TEST_CHILD_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut command = std::process::Command::new(program);
            command.args(words).arg(exe);
            command
        }
        None => std::process::Command::new(exe),
    }
}

/// Runs the `#[ignore]`d test `entry` of this test binary as a child
/// process with `envs` set, its output captured.
pub fn spawn_child(entry: &str, envs: &[(&str, &std::ffi::OsStr)]) -> std::process::Child {
    let mut command = self_command();
    command
        .args([
            "--exact",
            entry,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (key, value) in envs {
        command.env(key, value);
    }
    command.spawn().unwrap()
}
