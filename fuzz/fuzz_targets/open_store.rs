//! Whole format v2 stores, built from the input with every checksum
//! recomputed and written as files (in `/dev/shm` when there is one),
//! opened by the engine and read every way a caller can: the open and
//! every read must succeed or fail with an error — never panic,
//! never abort, never allocate by a size only a header, schema block or
//! table entry vouches for (`fuzz/run.sh` runs this target with
//! `-malloc_limit_mb=1024`: any single allocation of 1 GiB or more is a
//! crash, as it would be under `RLIMIT_AS`).
//!
//! Input: `[flags: u8][n: u8][n × u32 LE chunk lengths][the n chunk files'
//! bytes, each as long as its length (at most 64 KiB; zeros past the
//! input)][squeezed meta.zr]`, the last as `parse_index` reads it: header
//! slot 0 (172 bytes), slot 1 (172 bytes), the schema block (as long as
//! slot 0's `schema_len`), then the table. Every checksum is recomputed
//! (`fix_v2_checksums`) unless `flags & 1`; with `flags & 2` the store is
//! then also opened for writing, deleted from and compacted (not appended
//! to: an append writes at the header's frontier, up to 4 GiB into a file).
#![no_main]

use libfuzzer_sys::fuzz_target;
use loaderx_format::v2::{self, HEADER_V2_LEN, Kind, MAX_SCHEMA_LEN};
use loaderx_fuzz::fix_v2_checksums;
use loaderx_store::{Deflate, OpenOptions, Store};
use std::{
    fs,
    path::{Path, PathBuf},
};

/// Largest chunk file the input makes.
const MAX_CHUNK: usize = 64 << 10;

/// Largest record the harness gathers or verifies: a caller's own buffers
/// are its business (a table entry may say 2 GiB for a zstd frame of a few
/// bytes, and decoding it does need 2 GiB).
const MAX_READ: u32 = 1 << 20;

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = data.split_at(n.min(data.len()));
    *data = rest;
    head
}

/// Where this process builds its stores: files, so the engine runs on the
/// storage real stores use (memory maps, chunk files opened on first touch).
fn scratch_dir() -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("loaderx-open-store-{}", std::process::id()))
}

/// Writes the store the input describes into `dir`; the flags.
fn build(dir: &Path, mut data: &[u8]) -> Option<u8> {
    let flags = *take(&mut data, 1).first()?;
    let n = usize::from(*take(&mut data, 1).first()? % 9);
    let lens: Vec<usize> = (0..n)
        .map(|_| {
            let mut w = [0u8; 4];
            let b = take(&mut data, 4);
            w[..b.len()].copy_from_slice(b);
            (u32::from_le_bytes(w) as usize).min(MAX_CHUNK)
        })
        .collect();
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).expect("the scratch directory can be made");
    for (id, &len) in lens.iter().enumerate() {
        let mut bytes = take(&mut data, len).to_vec();
        bytes.resize(len, 0);
        fs::write(dir.join(format!("{id}.zr")), &bytes).expect("a chunk file can be written");
    }
    let mut image = data.to_vec();
    if flags & 1 == 0 {
        fix_v2_checksums(&mut image);
    }
    // Unsqueeze: slot 0 at 0, slot 1 at one slot on, the schema block at
    // its offset, the table at the one slot 0's `schema_len` gives.
    let (slots, rest) = image.split_at(image.len().min(2 * HEADER_V2_LEN));
    let (slot0, slot1) = slots.split_at(slots.len().min(HEADER_V2_LEN));
    let schema_len = slot0
        .get(24..28)
        .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()))
        .min(MAX_SCHEMA_LEN);
    let (block, table) = rest.split_at(rest.len().min(schema_len as usize));
    let table_at = v2::table_offset(schema_len) as usize;
    let mut meta = vec![0u8; table_at];
    meta[..slot0.len()].copy_from_slice(slot0);
    let at = v2::SLOT_LEN as usize;
    meta[at..at + slot1.len()].copy_from_slice(slot1);
    let at = v2::SCHEMA_OFFSET as usize;
    meta[at..at + block.len()].copy_from_slice(block);
    meta.extend_from_slice(table);
    fs::write(dir.join("meta.zr"), &meta).expect("meta.zr can be written");
    Some(flags)
}

/// Reads everything a careful caller would; returns nothing (every outcome
/// is fine but a panic or an abort).
fn read(store: &Store<Deflate>) {
    let n = store.len().min(64);
    let idxs: Vec<u64> = (0..n).collect();
    let mut lens = vec![0u32; idxs.len()];
    let lens_ok = store.lengths(&idxs, &mut lens).is_ok();
    if let Some(schema) = store.schema().filter(|s| s.kind == Kind::Ragged) {
        let mut dims = vec![0u32; idxs.len() * usize::from(schema.ndim)];
        let _ = store.dims(&idxs, &mut dims);
    }
    for (&i, &len) in idxs.iter().zip(&lens) {
        if len <= MAX_READ {
            let stride = len.max(1) as usize;
            let mut out = vec![0u8; stride];
            let _ = store.gather(&[i], &mut out, stride);
        }
    }
    let small: Vec<u64> = idxs
        .iter()
        .zip(&lens)
        .filter(|(_, l)| **l <= 256)
        .map(|(i, _)| *i)
        .collect();
    if small.len() >= 2 {
        let mut out = vec![0u8; small.len() * 256];
        let _ = store.gather(&small, &mut out, 256);
        let _ = store.gather(&small, &mut out, 256);
    }
    let _ = store.stats();
    // `verify` decodes every record: only when every one is small enough
    // for the harness to pay for.
    let all = store.len();
    if lens_ok && all <= 64 && lens.iter().all(|&l| l <= MAX_READ) {
        let _ = store.damaged();
        let _ = store.verify();
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch_dir();
    let Some(flags) = build(&dir, data) else {
        return;
    };
    match Store::<Deflate>::open_read_only(&dir) {
        Ok(store) => read(&store),
        Err(e) => {
            // Refusals say what they refuse.
            assert!(!e.to_string().is_empty());
        }
    }
    if flags & 2 == 0 {
        return;
    }
    let Ok(mut store) = Store::<Deflate>::open_with(&dir, OpenOptions::default()) else {
        return;
    };
    let len = store.len();
    if len > 2 && len <= 64 {
        let _ = store.delete(&[0, len - 2]);
    }
    if store.len() <= 64 {
        let _ = store.compact();
        read(&store);
    }
});
