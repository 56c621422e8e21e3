//! Crash consistency with real processes: a child process appends (or
//! compacts) and is killed with SIGKILL at random instants; after each kill
//! the store must open, hold a prefix of what was appended with every record
//! intact, and lose nothing that had been synced.
//!
//! The child is this test binary itself, re-run with `--exact` on the
//! `#[ignore]`d entry points below and told what to do through environment
//! variables.

use std::{
    env,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::Duration,
};

use loaderx_store::{CodecId, Deflate, Store};

const STORE_ENV: &str = "LOADERX_KILL_TEST_STORE";

/// Record `i`: its length and bytes are a function of `i` alone.
fn expected(i: u64) -> Vec<u8> {
    let len = 200 + (i * 7919 % 3000) as usize;
    (0..len)
        .map(|k| ((i * 31 + k as u64 / 16) % 251) as u8)
        .collect()
}

fn spawn_child(entry: &str, store: &Path) -> Child {
    Command::new(env::current_exe().unwrap())
        .args([
            "--exact",
            entry,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(STORE_ENV, store)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Reads the child's "synced N" lines on a thread; returns the channel.
fn watch(child: &mut Child) -> mpsc::Receiver<u64> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("synced ") {
                let _ = tx.send(n.trim().parse().unwrap());
            }
        }
    });
    rx
}

fn check_prefix(store: &Store<Deflate>) {
    store.verify().unwrap();
    let n = store.len();
    let idxs: Vec<u64> = (0..n).collect();
    let mut lens = vec![0u32; n as usize];
    store.lengths(&idxs, &mut lens).unwrap();
    for (i, &len) in lens.iter().enumerate() {
        let mut out = vec![0u8; len as usize];
        store.gather(&[i as u64], &mut out, len as usize).unwrap();
        assert!(
            out == expected(i as u64),
            "record {i} is not what was appended"
        );
    }
}

/// Deterministic "random" delays, so a failure reproduces.
fn delays(count: usize) -> Vec<u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            5 + x % 60
        })
        .collect()
}

#[test]
fn appends_survive_sigkill_at_random_instants() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let mut synced_floor = 0u64;
    for (round, delay) in delays(24).into_iter().enumerate() {
        let mut child = spawn_child("append_child", &path);
        let synced = watch(&mut child);
        thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        child.wait().unwrap();
        for n in synced.try_iter() {
            synced_floor = synced_floor.max(n);
        }
        let store: Store<Deflate> = Store::open(&path)
            .unwrap_or_else(|e| panic!("round {round}: the store did not reopen: {e}"));
        assert!(
            store.len() >= synced_floor,
            "round {round}: {} records, but {synced_floor} had been synced",
            store.len()
        );
        check_prefix(&store);
    }
    let store: Store<Deflate> = Store::open(&path).unwrap();
    assert!(!store.is_empty(), "the children never appended anything");
}

#[test]
fn compaction_survives_sigkill_and_finishes_on_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    // Each record carries its own identity in its first 8 bytes.
    let tagged = |id: u64| -> Vec<u8> {
        let mut r = expected(id);
        r[..8].copy_from_slice(&id.to_le_bytes());
        r
    };
    let mut expect: Vec<Vec<u8>> = {
        let mut store: Store<Deflate> = Store::open(&path).unwrap();
        for batch in 0..40u64 {
            let recs: Vec<Vec<u8>> = (batch * 100..batch * 100 + 100).map(tagged).collect();
            let lens: Vec<u32> = recs.iter().map(|r| r.len() as u32).collect();
            let mut offsets = vec![0u64];
            for l in &lens[..lens.len() - 1] {
                offsets.push(offsets.last().unwrap() + u64::from(*l));
            }
            let codec = if batch % 2 == 0 {
                CodecId::Deflate
            } else {
                CodecId::Raw
            };
            store
                .append_ragged_with(codec, &recs.concat(), &offsets, &lens)
                .unwrap();
        }
        let doomed: Vec<u64> = (0..4000).filter(|i| i % 3 == 0 || i % 7 == 0).collect();
        store.delete(&doomed).unwrap();
        store.sync().unwrap();
        contents(&store)
    };
    for (round, delay) in delays(20).into_iter().enumerate() {
        let mut child = spawn_child("compact_child", &path);
        thread::sleep(Duration::from_millis(delay / 2));
        child.kill().unwrap();
        child.wait().unwrap();
        let store: Store<Deflate> = Store::open(&path)
            .unwrap_or_else(|e| panic!("round {round}: the store did not reopen: {e}"));
        store.verify().unwrap();
        assert!(contents(&store) == expect, "round {round}: records changed");
        // Leave the next child something to compact: more holes, more records.
        drop(store);
        let mut store: Store<Deflate> = Store::open(&path).unwrap();
        let n = store.len();
        let doomed: Vec<u64> = (0..n)
            .filter(|i| (i + round as u64).is_multiple_of(11))
            .collect();
        store.delete(&doomed).unwrap();
        let id = 100_000 + round as u64;
        let extra = tagged(id);
        store.append_fixed(&extra, 1, extra.len()).unwrap();
        store.sync().unwrap();
        expect = contents(&store);
    }
    let mut store: Store<Deflate> = Store::open(&path).unwrap();
    store.compact().unwrap();
    assert!(contents(&store) == expect);
    let stats = store.stats().unwrap();
    // Nothing left to reclaim but what a 4 GiB chunk's end can hold.
    assert!(stats.reclaimable < 1 << 20, "{stats:?}");
    let on_disk: u64 = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "meta.zr")
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let names: Vec<_> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        on_disk, stats.chunk_bytes,
        "files past the frontier were left behind: {names:?} {stats:?}"
    );
}

fn contents(store: &Store<Deflate>) -> Vec<Vec<u8>> {
    (0..store.len())
        .map(|i| {
            let mut len = [0u32];
            store.lengths(&[i], &mut len).unwrap();
            let mut out = vec![0u8; len[0] as usize];
            store.gather(&[i], &mut out, len[0] as usize).unwrap();
            out
        })
        .collect()
}

/// Child: appends batches forever, syncing every third one and reporting it.
#[test]
#[ignore = "child process of appends_survive_sigkill_at_random_instants"]
fn append_child() {
    let Some(path) = env::var_os(STORE_ENV) else {
        return;
    };
    let store: Store<Deflate> = Store::open(path).unwrap();
    for batch in 0.. {
        let first = store.len();
        let recs: Vec<Vec<u8>> = (first..first + 16).map(expected).collect();
        let lens: Vec<u32> = recs.iter().map(|r| r.len() as u32).collect();
        let mut offsets = vec![0u64];
        for l in &lens[..15] {
            offsets.push(offsets.last().unwrap() + u64::from(*l));
        }
        let codec = CodecId::ALL[batch % 4];
        store
            .append_ragged_with(codec, &recs.concat(), &offsets, &lens)
            .unwrap();
        if batch % 3 == 2 {
            store.sync().unwrap();
            println!("synced {}", store.len());
        }
    }
}

/// Child: compacts the store (and keeps compacting, to be killed at any step).
#[test]
#[ignore = "child process of compaction_survives_sigkill_and_finishes_on_rerun"]
fn compact_child() {
    let Some(path) = env::var_os(STORE_ENV) else {
        return;
    };
    let mut store: Store<Deflate> = Store::open(path).unwrap();
    loop {
        store.compact().unwrap();
    }
}
