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
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc::{Receiver, Sender, channel},
    },
    thread,
    time::Duration,
};

use common::{
    forward::{Overridden, Overrides},
    small_chunks,
};
use loaderx_store::{
    Raw, Store,
    storage::{Drained, FileId, MemStorage, Storage},
};

/// How long either side waits for the other before the test fails (instead
/// of hanging) because the race was not replayed.
const PATIENCE: Duration = Duration::from_secs(60);

/// Overrides of a [`MemStorage`] that, once armed, hold the next `stat` of
/// chunk 0 after the length is measured and before it is returned, until
/// the test lets it go.
#[derive(Debug)]
struct StatPause {
    armed: AtomicBool,
    /// Tells the test that the paused `stat` has measured the length.
    measured: Mutex<Sender<()>>,
    /// Where the test says the paused `stat` may return.
    release: Mutex<Receiver<()>>,
}

/// The test's ends of the two signals.
struct Controls {
    measured: Receiver<()>,
    release: Sender<()>,
}

impl StatPause {
    fn new() -> (Overridden<MemStorage, StatPause>, Controls) {
        let (measured_tx, measured_rx) = channel();
        let (release_tx, release_rx) = channel();
        let storage = Overridden {
            inner: MemStorage::new(),
            overrides: StatPause {
                armed: AtomicBool::new(false),
                measured: Mutex::new(measured_tx),
                release: Mutex::new(release_rx),
            },
        };
        let controls = Controls {
            measured: measured_rx,
            release: release_tx,
        };
        (storage, controls)
    }
}

impl Overrides<MemStorage> for StatPause {
    fn current_len(&self, inner: &MemStorage, file: FileId) -> io::Result<u64> {
        let len = inner.current_len(file)?;
        if file == FileId::Chunk(0) && self.armed.swap(false, Ordering::SeqCst) {
            self.measured.lock().unwrap().send(()).unwrap();
            self.release
                .lock()
                .unwrap()
                .recv_timeout(PATIENCE)
                .expect("the test never released the stat");
        }
        Ok(len)
    }

    /// A gather checks its chunks through this one; `Storage`'s default
    /// answers with `current_len`, held above (forwarding it would skip the
    /// pause).
    fn current_len_since(&self, inner: &MemStorage, file: FileId, _: &Drained) -> io::Result<u64> {
        self.current_len(inner, file)
    }
}

#[test]
fn a_stat_racing_an_append_does_not_hide_the_appended_records() {
    let (storage, controls) = StatPause::new();
    let store: Store<Raw, Overridden<MemStorage, StatPause>> =
        Store::open_in(storage, small_chunks(1 << 20)).unwrap();
    let pause = &store.storage().overrides;
    let old: Vec<u8> = (0..4u8).flat_map(|k| [k; 100]).collect();
    store.append_fixed(&old, 4, 100).unwrap();

    let new: Vec<u8> = (4..8u8).flat_map(|k| [k; 100]).collect();
    pause.armed.store(true, Ordering::SeqCst);
    thread::scope(|s| {
        // A reader of the old records: its check of chunk 0 measures 400
        // bytes, then stalls.
        let reader = s.spawn(|| {
            let mut out = vec![0u8; 100];
            store.gather(&[3], &mut out, 100).unwrap();
            assert_eq!(out, [3u8; 100]);
        });
        controls
            .measured
            .recv_timeout(PATIENCE)
            .expect("the reader never stat'ed chunk 0");
        // Meanwhile the writer appends four records to chunk 0 (800 bytes).
        assert_eq!(store.append_fixed(&new, 4, 100).unwrap(), 4);
        controls.release.send(()).unwrap();
        reader.join().unwrap();
    });

    // The reader's stale measurement must not have hidden the new records.
    let mut out = vec![0u8; 400];
    store
        .gather(&[4, 5, 6, 7], &mut out, 100)
        .unwrap_or_else(|e| panic!("records appended during a reader's stat are lost: {e}"));
    assert_eq!(out, new);
    store.verify().unwrap();
}
