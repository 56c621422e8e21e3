//! The local block cache of remote stores: blocks of objects kept as
//! files in a directory several processes may share.
//!
//! Rules: a block is the `block_bytes`-aligned byte range `i` of one
//! version of one object, named by a hash of the object's URL, its ETag
//! (or version) and size, and `i`; a changed object has another name, so
//! a block of an old version is never served for a new one. A block is
//! written under a temporary name and renamed into place, so a reader
//! (in any process) sees a whole block or none; two processes writing
//! the same block write the same bytes. A hit refreshes the file's
//! modification time; when the directory grows past its bound, the
//! process holding `.evict.lock` (taken without waiting: one evicts, the
//! others go on) removes the least recently used blocks until it is back
//! under. Files stay across restarts. A temporary file left by a process
//! that died while writing a block is removed by the next eviction once it
//! is older than [`STALE_TMP`]. Every record read through the cache is
//! still checked against its CRC32C.

use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::SystemTime,
};

/// Age past which a block's temporary file is one a dead writer left (a
/// live one renames it within a block's write).
const STALE_TMP: std::time::Duration = std::time::Duration::from_secs(600);

/// A cache directory and its bound.
#[derive(Debug)]
pub(crate) struct BlockCache {
    dir: PathBuf,
    bound: u64,
    pub(crate) block: u64,
    written: AtomicU64,
}

/// The cache's name for block `index` of an object version.
fn name(key: u64, index: u64) -> String {
    format!("{key:016x}-{index}.blk")
}

/// FNV-1a of the object's identity: its URL, ETag (or version) and size.
pub(crate) fn object_key(url: &str, tag: &str, size: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in url
        .bytes()
        .chain([0])
        .chain(tag.bytes())
        .chain([0])
        .chain(size.to_le_bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl BlockCache {
    pub(crate) fn new(dir: &Path, bound: u64, block: u64) -> io::Result<BlockCache> {
        fs::create_dir_all(dir)?;
        Ok(BlockCache {
            dir: dir.to_owned(),
            bound,
            block,
            written: AtomicU64::new(0),
        })
    }

    /// Block `index` of the object `key` when held and `len` bytes long.
    pub(crate) fn get(&self, key: u64, index: u64, len: u64) -> Option<Vec<u8>> {
        let path = self.dir.join(name(key, index));
        let bytes = fs::read(&path).ok()?;
        if bytes.len() as u64 != len {
            return None;
        }
        if let Ok(f) = fs::File::options().write(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(bytes)
    }

    /// Whether block `index` of the object `key` is held, `len` bytes long
    /// (a `stat`, not a read).
    pub(crate) fn contains(&self, key: u64, index: u64, len: u64) -> bool {
        fs::metadata(self.dir.join(name(key, index))).is_ok_and(|m| m.len() == len)
    }

    /// Keeps block `index` of the object `key`; failures only lose the
    /// block (the cache is an optimisation).
    pub(crate) fn put(&self, key: u64, index: u64, bytes: &[u8]) {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let done = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_data()?;
            fs::rename(&tmp, self.dir.join(name(key, index)))
        })();
        if done.is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        let total = self
            .written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed)
            + bytes.len() as u64;
        if total >= (self.bound / 8).max(self.block) {
            self.written.store(0, Ordering::Relaxed);
            let _ = self.evict();
        }
    }

    /// Removes the least recently used blocks until the directory holds at
    /// most its bound, unless another process is doing so.
    pub(crate) fn evict(&self) -> io::Result<()> {
        let lock = fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(".evict.lock"))?;
        if lock.try_lock().is_err() {
            return Ok(());
        }
        let mut blocks: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        let mut total = 0u64;
        let now = SystemTime::now();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let file_name = entry.file_name();
            let file_name = file_name.to_string_lossy();
            let Ok(md) = entry.metadata() else { continue };
            if file_name.starts_with(".tmp-") {
                let age = md.modified().ok().and_then(|m| now.duration_since(m).ok());
                if age.is_some_and(|a| a > STALE_TMP) {
                    let _ = fs::remove_file(entry.path());
                }
                continue;
            }
            if !file_name.ends_with(".blk") {
                continue;
            }
            total += md.len();
            blocks.push((
                md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                md.len(),
                entry.path(),
            ));
        }
        blocks.sort();
        for (_, len, path) in blocks {
            if total <= self.bound {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
        Ok(())
    }
}
