//! A gather's `stat` of a chunk file racing an append to the same chunk,
//! replayed deterministically through the storage seam.
//!
//! Before every gather the store re-checks the chunk files it reads against
//! the file system (a file cut short behind its back must give an error, not
//! a SIGBUS). If that check stored the length it measured back into the
//! handle's shared "bytes known to exist" — as it once did — a `stat` taken
//! before a concurrent append and applied after it would lower the shared
//! length below the append's records, and every later read of those records
//! would be refused as "past the end of the chunk file". Here the `stat` is
//! held at exactly that point while the append runs to completion.

mod common;

use std::{
    io,
    path::Path,
    sync::{
        Barrier,
        atomic::{AtomicBool, Ordering},
    },
    thread,
};

use common::small_chunks;
use loaderx_store::{
    Raw, Store,
    storage::{FileId, MemStorage, Storage},
};

/// Storage that, once armed, holds the next `stat` of chunk 0 after the
/// length is measured and before it is returned, until the test lets it go.
#[derive(Debug)]
struct StatPause {
    inner: MemStorage,
    armed: AtomicBool,
    /// Met by the paused `stat` (its length is taken) and the test.
    measured: Barrier,
    /// Met by the test (the append is done) and the paused `stat`.
    release: Barrier,
}

impl StatPause {
    fn new() -> StatPause {
        StatPause {
            inner: MemStorage::new(),
            armed: AtomicBool::new(false),
            measured: Barrier::new(2),
            release: Barrier::new(2),
        }
    }
}

impl Storage for StatPause {
    fn location(&self) -> &Path {
        self.inner.location()
    }

    fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    fn open_file(&self, file: FileId, create: bool, create_len: u64) -> io::Result<Option<u64>> {
        self.inner.open_file(file, create, create_len)
    }

    fn current_len(&self, file: FileId) -> io::Result<u64> {
        let len = self.inner.current_len(file)?;
        if file == FileId::Chunk(0) && self.armed.swap(false, Ordering::SeqCst) {
            self.measured.wait();
            self.release.wait();
        }
        Ok(len)
    }

    fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        self.inner.with_bytes(file, offset, len, f)
    }

    fn write_at(&self, file: FileId, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_at(file, offset, bytes)
    }

    fn sync(&self, file: FileId) -> io::Result<()> {
        self.inner.sync(file)
    }

    fn truncate(&mut self, file: FileId, len: u64) -> io::Result<()> {
        self.inner.truncate(file, len)
    }

    fn remove(&mut self, file: FileId) -> io::Result<()> {
        self.inner.remove(file)
    }

    fn chunk_ids(&self) -> io::Result<Vec<u32>> {
        self.inner.chunk_ids()
    }
}

#[test]
fn a_stat_racing_an_append_does_not_hide_the_appended_records() {
    let store: Store<Raw, StatPause> =
        Store::open_in(StatPause::new(), small_chunks(1 << 20)).unwrap();
    let storage = store.storage();
    let old: Vec<u8> = (0..4u8).flat_map(|k| [k; 100]).collect();
    store.append_fixed(&old, 4, 100).unwrap();

    let new: Vec<u8> = (4..8u8).flat_map(|k| [k; 100]).collect();
    storage.armed.store(true, Ordering::SeqCst);
    thread::scope(|s| {
        // A reader of the old records: its check of chunk 0 measures 400
        // bytes, then stalls.
        let reader = s.spawn(|| {
            let mut out = vec![0u8; 100];
            store.gather(&[3], &mut out, 100).unwrap();
            assert_eq!(out, [3u8; 100]);
        });
        storage.measured.wait();
        // Meanwhile the writer appends four records to chunk 0 (800 bytes).
        assert_eq!(store.append_fixed(&new, 4, 100).unwrap(), 4);
        storage.release.wait();
        reader.join().unwrap();
    });
    assert!(
        !storage.armed.load(Ordering::SeqCst),
        "the reader never stat'ed chunk 0, so the race was not replayed"
    );

    // The reader's stale measurement must not have hidden the new records.
    let mut out = vec![0u8; 400];
    store
        .gather(&[4, 5, 6, 7], &mut out, 100)
        .unwrap_or_else(|e| panic!("records appended during a reader's stat are lost: {e}"));
    assert_eq!(out, new);
    store.verify().unwrap();
}
