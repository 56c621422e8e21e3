//! Interrupted operations through the storage seam: a compaction stopped
//! after k writes, I/O failures injected into appends and deletes, and power
//! loss (only what `sync` made durable survives).

mod common;

use common::{contents, mem_store};
use loaderx_store::storage::{FileId, Storage};
use loaderx_store::{ErrorCode, Stats};
use loaderx_store::{Raw, Store, storage::MemStorage};

const CAPACITY: u64 = 5000;

fn filled(storage: &MemStorage) -> (Store<Raw, MemStorage>, Vec<Vec<u8>>) {
    let mut store: Store<Raw, MemStorage> = mem_store(storage, CAPACITY);
    // Records of varied sizes, so compaction has both overlapping and
    // non-overlapping moves.
    let lens: Vec<u32> = (0..60).map(|i| 100 + (i * 37 % 400)).collect();
    let recs: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(k, &l)| vec![k as u8; l as usize])
        .collect();
    let mut offsets = Vec::new();
    let mut at = 0;
    for &l in &lens {
        offsets.push(at);
        at += u64::from(l);
    }
    store
        .append_ragged(&recs.concat(), &offsets, &lens)
        .unwrap();
    store
        .delete(&[0, 3, 4, 10, 11, 12, 30, 31, 45, 59, 58])
        .unwrap();
    store.sync().unwrap();
    let live = contents(&store);
    (store, live)
}

#[test]
fn compaction_is_interruptible_at_every_step() {
    // How many mutating operations a full compaction takes.
    let probe = MemStorage::new();
    let (mut store, expect) = filled(&probe);
    let start = probe.ops();
    store.compact().unwrap();
    let steps = probe.ops() - start;
    assert!(steps > 10, "compaction took only {steps} steps");
    let clean = store.stats().unwrap();

    for k in 0..steps {
        let storage = MemStorage::new();
        let (mut store, live) = filled(&storage);
        assert!(live == expect);
        storage.fail_after(k);
        assert!(store.compact().is_err(), "step {k} did not fail");
        drop(store);
        // What a killed process leaves: everything written before the failure.
        let after = storage.after_process_crash();
        let mut store: Store<Raw, MemStorage> = mem_store(&after, CAPACITY);
        store.verify().unwrap();
        assert!(
            contents(&store) == expect,
            "contents changed after step {k}"
        );
        assert_stats_on_disk(&store, &after, &format!("after step {k}"));
        // Running compaction again finishes the job.
        store.compact().unwrap();
        assert!(
            contents(&store) == expect,
            "contents changed after rerun {k}"
        );
        assert_stats_on_disk(&store, &after, &format!("after rerun {k}"));
        assert_finished(&mut store, &clean, k);
    }
}

/// The report this came from: two write lanes of 4 GiB chunks, a
/// compaction killed after it published the frontiers that cover its
/// staging chunks, and `stats` counting every chunk below each tail as
/// full: 8 GiB "reclaimable" beside a few KiB of files.
#[test]
fn stats_after_an_interrupted_compaction_stay_within_the_files() {
    let fill = |storage: &MemStorage| {
        let options = loaderx_store::OpenOptions {
            lanes: 2,
            lane_bytes: 0,
            ..loaderx_store::OpenOptions::default()
        };
        let schema = loaderx_store::format::v2::Schema::bytes(loaderx_store::format::CodecTag::RAW);
        let mut store: Store<Raw, MemStorage> =
            Store::create_v2_in(storage.clone(), &schema, options).unwrap();
        for round in 0..4u8 {
            store.append_fixed(&vec![round; 8 * 300], 8, 300).unwrap();
        }
        store.delete(&[0, 1, 2, 9, 17]).unwrap();
        store.sync().unwrap();
        store
    };
    let probe = MemStorage::new();
    let mut store = fill(&probe);
    let start = probe.ops();
    store.compact().unwrap();
    let steps = probe.ops() - start;
    let mut staged = 0;
    for k in 0..steps {
        let storage = MemStorage::new();
        let mut store = fill(&storage);
        storage.fail_after(k);
        assert!(store.compact().is_err(), "step {k} did not fail");
        drop(store);
        let after = storage.after_process_crash();
        // Staging chunks lie past the lanes' first chunks 0 and 1.
        staged += usize::from(after.chunk_ids().unwrap().iter().any(|&id| id > 1));
        let store: Store<Raw, MemStorage> =
            Store::open_in(after.clone(), loaderx_store::OpenOptions::default()).unwrap();
        assert_stats_on_disk(&store, &after, &format!("after step {k}"));
    }
    assert!(staged > 0, "no step left staging chunks behind");
}

/// Bytes the chunk files of `storage` hold.
fn chunk_file_bytes(storage: &MemStorage) -> u64 {
    storage
        .chunk_ids()
        .unwrap()
        .into_iter()
        .map(|id| {
            storage
                .contents(FileId::Chunk(id))
                .map_or(0, |b| b.len() as u64)
        })
        .sum()
}

/// `stats` counts what the chunk files hold, never the whole chunks that
/// the frontiers of an interrupted compaction span (it reported 8 GiB
/// reclaimable beside 353 MiB of files).
fn assert_stats_on_disk(store: &Store<Raw, MemStorage>, storage: &MemStorage, when: &str) {
    let stats = store.stats().unwrap();
    let disk = chunk_file_bytes(storage);
    assert!(
        stats.chunk_bytes <= disk && stats.reclaimable <= disk,
        "{when}: {stats:?} with {disk} bytes of chunk files"
    );
    assert!(stats.live_bytes <= stats.chunk_bytes, "{when}: {stats:?}");
}

/// A finished compaction: nothing left to reclaim but rollover slack, and
/// compacting again changes nothing.
fn assert_finished(store: &mut Store<Raw, MemStorage>, clean: &Stats, step: u64) {
    let stats = store.stats().unwrap();
    assert_eq!(stats.records, clean.records, "step {step}");
    assert_eq!(stats.live_bytes, clean.live_bytes, "step {step}");
    let chunks = stats.chunk_bytes / CAPACITY + 1;
    assert!(stats.reclaimable < chunks * 500, "step {step}: {stats:?}");
    store.compact().unwrap();
    assert_eq!(
        store.stats().unwrap(),
        stats,
        "step {step}: second compaction moved data"
    );
}

#[test]
fn a_failed_append_changes_nothing() {
    for k in 0..8 {
        let storage = MemStorage::new();
        let (store, expect) = filled(&storage);
        let stats = store.stats().unwrap();
        storage.fail_after(k);
        let result = store.append_fixed(&vec![7u8; 6000], 20, 300);
        storage.clear_faults();
        if result.is_ok() {
            continue;
        }
        assert!(contents(&store) == expect, "k={k}");
        assert_eq!(store.stats().unwrap(), stats);
        drop(store);
        let store: Store<Raw, MemStorage> = mem_store(&storage.after_process_crash(), CAPACITY);
        assert!(contents(&store) == expect, "k={k} after reopen");
        // And the store still takes appends.
        store.append_fixed(&[1u8; 10], 1, 10).unwrap();
    }
}

#[test]
fn a_failed_delete_changes_nothing() {
    let probe = MemStorage::new();
    let (mut store, _) = filled(&probe);
    let start = probe.ops();
    store.delete(&[1, 2, 40]).unwrap();
    let after_delete = contents(&store);
    let steps = probe.ops() - start;
    assert!(steps >= 4, "a delete takes {steps} steps");
    let mut refused_read_only = 0;
    for transient in [true, false] {
        for k in 0..steps {
            let storage = MemStorage::new();
            let (mut store, expect) = filled(&storage);
            if transient {
                storage.fail_once_after(k);
            } else {
                storage.fail_after(k);
            }
            assert!(store.delete(&[1, 2, 40]).is_err(), "step {k} did not fail");
            // Undone in place, this handle still reads the old records; if
            // the undo could not be finished in place, it refuses to read.
            match store.lengths(&[0], &mut [0u32]) {
                Ok(()) => assert!(contents(&store) == expect, "k={k}"),
                Err(e) => assert!(matches!(e, loaderx_store::Error::Poisoned { .. }), "{e}"),
            }
            drop(store);
            // The last step is the directory sync after the undo log's
            // removal: the delete is complete on disk by then, and only
            // power loss could still bring the log back and undo it.
            let either =
                |got: &Vec<Vec<u8>>| *got == expect || (k + 1 == steps && *got == after_delete);
            // A read-only open refuses a store with a pending undo log
            // rather than show a half-done delete: code -2, naming the log
            // and the writable open that rolls it back.
            let crashed = storage.after_process_crash();
            let read_only = || {
                Store::<Raw, MemStorage>::open_in(
                    crashed.read_only(),
                    loaderx_store::OpenOptions::read_only(),
                )
            };
            match read_only() {
                Ok(ro) => assert!(either(&contents(&ro)), "k={k} read-only"),
                Err(e) => {
                    assert!(
                        matches!(&e, loaderx_store::Error::NeedsRecovery { path }
                            if path.ends_with("meta.zr.undo")),
                        "k={k}: {e:?}"
                    );
                    assert_eq!(e.code(), ErrorCode::Io, "k={k}: {e}");
                    let text = e.to_string();
                    assert!(
                        text.contains("meta.zr.undo") && text.contains("open the store writable"),
                        "k={k}: {text}"
                    );
                    refused_read_only += 1;
                }
            }
            let store: Store<Raw, MemStorage> = mem_store(&crashed, CAPACITY);
            assert!(
                either(&contents(&store)),
                "k={k} transient={transient} after reopen"
            );
            store.verify().unwrap();
            drop(store);
            // The writable open rolled it back: a read-only open now works.
            let ro = read_only().unwrap_or_else(|e| panic!("k={k} after recovery: {e}"));
            assert!(either(&contents(&ro)), "k={k} read-only after recovery");
        }
    }
    assert!(
        refused_read_only > 0,
        "no step left an undo log for a read-only open to refuse"
    );
    // A process killed after the delete completed keeps it.
    let done: Store<Raw, MemStorage> = mem_store(&probe.after_process_crash(), CAPACITY);
    assert!(contents(&done) == after_delete);
}

#[test]
fn power_loss_keeps_exactly_what_was_synced() {
    let storage = MemStorage::new();
    let store: Store<Raw, MemStorage> = mem_store(&storage, CAPACITY);
    let mut synced: Vec<Vec<u8>> = Vec::new();
    let mut appended: Vec<Vec<u8>> = Vec::new();
    for round in 0..12u8 {
        let recs: Vec<Vec<u8>> = (0..5).map(|k| vec![round * 10 + k; 700]).collect();
        store.append_fixed(&recs.concat(), 5, 700).unwrap();
        appended.extend(recs);
        if round % 3 == 2 {
            store.sync().unwrap();
            synced = appended.clone();
        }
        let survivor = storage.after_power_loss();
        let reopened: Store<Raw, MemStorage> = mem_store(&survivor, CAPACITY);
        reopened.verify().unwrap();
        assert!(contents(&reopened) == synced, "round {round}");
        // So does a process crash: appends count once committed.
        let crashed: Store<Raw, MemStorage> = mem_store(&storage.after_process_crash(), CAPACITY);
        assert!(contents(&crashed) == synced, "round {round}");
        // The handle itself sees everything it appended.
        assert!(contents(&store) == appended, "round {round}");
    }
}

#[test]
fn power_loss_during_compaction_keeps_the_records() {
    let probe = MemStorage::new();
    let (mut store, expect) = filled(&probe);
    let start = probe.ops();
    store.compact().unwrap();
    let clean = store.stats().unwrap();
    let steps = probe.ops() - start;
    for k in 0..steps {
        let storage = MemStorage::new();
        let (mut store, _) = filled(&storage);
        storage.fail_after(k);
        let _ = store.compact();
        drop(store);
        let mut store: Store<Raw, MemStorage> = mem_store(&storage.after_power_loss(), CAPACITY);
        store.verify().unwrap();
        assert!(contents(&store) == expect, "power loss after step {k}");
        store.compact().unwrap();
        assert!(
            contents(&store) == expect,
            "rerun after power loss at step {k}"
        );
        assert_finished(&mut store, &clean, k);
    }
}

/// Finding: a failed commit was forgotten. After a failed `fsync` Linux
/// marks the pages it could not write clean, so a retried `sync` succeeded
/// and published a header over data the disk never got (the storage seam
/// now models exactly that: one failed sync, later ones succeed without
/// writing what it dropped). Now a commit that fails at any of its steps
/// poisons the handle: every later operation names the first failure,
/// `close` reports it, dropping the handle publishes nothing, and power loss
/// leaves the last successful commit, every record of it intact.
#[test]
fn a_failed_commit_is_never_retried_into_success() {
    // How many mutating operations a commit of one append takes.
    let probe = MemStorage::new();
    let (store, _) = filled(&probe);
    store.append_fixed(&[7u8; 300], 3, 100).unwrap();
    let start = probe.ops();
    store.sync().unwrap();
    let steps = probe.ops() - start;
    assert!(steps >= 3, "a commit takes {steps} steps");
    for k in 0..steps {
        for close in [false, true] {
            let storage = MemStorage::new();
            let (store, expect) = filled(&storage);
            store.append_fixed(&[7u8; 300], 3, 100).unwrap();
            storage.fail_once_after(k);
            let first = store.sync().unwrap_err().to_string();
            // The fault was transient: the storage would take the retry.
            let again = if close {
                store.close()
            } else {
                let again = store.sync();
                assert!(
                    store.append_fixed(&[8u8; 100], 1, 100).is_err(),
                    "k={k}: a poisoned handle took an append"
                );
                drop(store);
                again
            };
            let err = again.expect_err("a retried commit succeeded after a failed one");
            assert!(
                matches!(err, loaderx_store::Error::Poisoned { .. }),
                "k={k}: {err}"
            );
            assert!(
                err.to_string().contains(&first),
                "k={k}: {err} does not name {first}"
            );
            // Whatever reached the disk, the store opens at a commit, intact.
            for survivor in [storage.after_power_loss(), storage.after_process_crash()] {
                let store: Store<Raw, MemStorage> = mem_store(&survivor, CAPACITY);
                store.verify().unwrap();
                let got = contents(&store);
                assert!(
                    got == expect || got.len() == expect.len() + 3,
                    "k={k}: {} records",
                    got.len()
                );
            }
        }
    }
}
