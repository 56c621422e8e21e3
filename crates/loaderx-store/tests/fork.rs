//! A store handle used across `fork()`, in a test binary of its own: a
//! forked child holds every descriptor of its parent, locks included, so it
//! must not run beside other tests of the same process.
//!
//! Unix only: Windows has no `fork()` (a new process starts from scratch and
//! opens its own handles, which `multiprocess.rs` covers).
#![cfg(unix)]

mod common;

use std::time::{Duration, Instant};

use common::{check_self_describing, self_describing_sized};
use loaderx_store::{
    Deflate, Error, OpenOptions, Raw, Store, format::CodecTag, format::v2::Schema,
};

fn locked<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Locked { .. }))
}

/// Finding: a forked child shares its parent's lock (one open file
/// description); it used to be able to "upgrade" it and compact while the
/// parent still mapped the store.
#[test]
fn a_forked_child_cannot_write_or_compact_behind_its_parent() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut store: Store<Deflate> = Store::open(&path).unwrap();
    let recs: Vec<u8> = (0..8u8).flat_map(|i| vec![i; 100]).collect();
    store.append_fixed(&recs, 8, 100).unwrap();
    store.delete(&[0, 1]).unwrap();
    // The parent is the writer (it deleted); the child may only read.
    // SAFETY: the child calls only async-signal-safe-enough code of ours
    // (no locks held by other threads of this test are touched: the store
    // was not in use during the fork) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut buf = vec![0u8; 100];
        let read = store.gather(&[0], &mut buf, 100).is_ok();
        let append = locked(store.append_fixed(&[9u8; 100], 1, 100));
        let compact = locked(store.compact());
        let delete = locked(store.delete(&[0]));
        let code = i32::from(read)
            | i32::from(append) << 1
            | i32::from(compact) << 2
            | i32::from(delete) << 3;
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child we forked.
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status));
    assert_eq!(
        libc::WEXITSTATUS(status),
        0b1111,
        "child: read ok (1), append locked (2), compact locked (4), delete locked (8)"
    );
    // The parent is untouched and still the writer.
    assert_eq!(store.len(), 6);
    store.append_fixed(&[9u8; 100], 1, 100).unwrap();
    store.compact().unwrap();
    assert_eq!(store.len(), 7);
}

/// Held by every test here: a test's threads hold the process's locks
/// (the watches' instance, a collection's open parts) in tight loops, and
/// another test forking meanwhile would give its child a lock it cannot
/// take, changing what that child does.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Forks; the child runs `child` and leaves with its return value as exit
/// status, without running the parent's destructors.
fn fork(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the test's other threads hold none of the locks the child
    // takes (the store's own fork handler re-points its descriptors), and
    // the child ends with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for `pid` for up to `limit`; its exit status, or `None` (after
/// killing it) when it hung.
fn wait(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: polls a child we forked.
        let got = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
        if got == pid {
            assert!(libc::WIFEXITED(status), "child {pid} died: status {status}");
            return Some(libc::WEXITSTATUS(status));
        }
        if Instant::now() > deadline {
            // SAFETY: kills and reaps the child we forked.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &raw mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

const RECORDS: u64 = 4096;

/// A store of [`RECORDS`] records, record `i` being the self-describing
/// record of id `i`: raw 32-byte records in format v2 (the path that copies
/// covered small records), or flate ones in format v1.
fn numbered(path: &std::path::Path, raw: bool) -> Store<Deflate> {
    let store: Store<Deflate> = if raw {
        let schema = Schema::bytes(CodecTag::RAW);
        Store::create_v2(path, &schema, OpenOptions::default()).unwrap()
    } else {
        Store::open(path).unwrap()
    };
    let src: Vec<u8> = (0..RECORDS)
        .flat_map(|i| self_describing_sized(i, if raw { 32 } else { 700 }))
        .collect();
    let len = if raw { 32 } else { 700 };
    store.append_fixed(&src, RECORDS as usize, len).unwrap();
    store.sync().unwrap();
    store
}

/// Gathers random batches for `run` and checks that record `i` is the one of
/// id `i` every time: 0 when all were, 1 on wrong bytes, 2 on an error.
fn read_numbered(store: &Store<Deflate>, len: usize, run: Duration) -> i32 {
    let started = Instant::now();
    let mut rng = u64::from(std::process::id()) | 1;
    let mut dst = vec![0u8; 64 * len];
    while started.elapsed() < run {
        let idxs: Vec<u64> = (0..64)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % RECORDS
            })
            .collect();
        if let Err(e) = store.gather(&idxs, &mut dst, len) {
            eprintln!("child: gather failed: {e}");
            return 2;
        }
        for (k, &i) in idxs.iter().enumerate() {
            match check_self_describing(&dst[k * len..(k + 1) * len]) {
                Ok(id) if id == i => {}
                other => {
                    eprintln!("child: index {i} read as {other:?}");
                    return 1;
                }
            }
        }
    }
    0
}

/// Finding: a forked child's reads sheltered under its parent's presence
/// lock (one open file description), so the parent's delete and compact
/// went ahead while the child still read the old table: wrong bytes, no
/// error. Now each child holds a lock of its own from the instant of the
/// fork: the parent's exclusive operations are refused (naming the child)
/// while any child lives, and the children read right bytes throughout.
#[test]
fn the_parent_cannot_delete_or_compact_under_forked_readers() {
    let _serial = serial();
    for raw in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let mut store = numbered(&path, raw);
        let len = if raw { 32 } else { 700 };
        // Maps and the small-record index exist before the fork.
        assert_eq!(read_numbered(&store, len, Duration::ZERO), 0);
        let run = Duration::from_millis(800);
        let children: Vec<libc::pid_t> = (0..2)
            .map(|_| fork(|| read_numbered(&store, len, run)))
            .collect();
        let (mut refused, mut done) = (0, 0);
        let started = Instant::now();
        while started.elapsed() < run / 2 {
            let victims: Vec<u64> = (0..32).collect();
            match store.delete(&victims).and_then(|()| store.compact()) {
                Ok(()) => done += 1,
                Err(e @ Error::Locked { .. }) => {
                    let message = e.to_string();
                    assert!(
                        children
                            .iter()
                            .any(|pid| message.contains(&format!("process {pid}"))
                                || message.contains(&pid.to_string())),
                        "the refusal names no child: {message}"
                    );
                    refused += 1;
                }
                Err(e) => panic!("delete/compact failed: {e}"),
            }
        }
        for pid in children {
            assert_eq!(
                wait(pid, Duration::from_secs(20)),
                Some(0),
                "a child read wrong bytes (1) or failed (2) or hung (None); raw={raw}"
            );
        }
        assert_eq!(done, 0, "delete/compact ran under live readers (raw={raw})");
        assert!(refused > 0);
        // With the children gone, the parent goes ahead.
        store.delete(&(0..32).collect::<Vec<u64>>()).unwrap();
        store.compact().unwrap();
        assert_eq!(store.len(), RECORDS - 32);
    }
}

/// Finding: a forked child kept its copy of the writer lock's descriptor,
/// so after the parent closed its writer and opened the store again it
/// could not append while any child lived, and was told that "another
/// handle in this process" was the writer.
#[test]
fn a_forked_child_does_not_keep_its_parents_writer_role() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = numbered(&path, true);
    // The parent is the writer (it appended).
    let child = fork(|| {
        std::thread::sleep(Duration::from_millis(600));
        0
    });
    drop(store);
    let again: Store<Deflate> = Store::open(&path).unwrap();
    let appended = again.append_fixed(&self_describing_sized(RECORDS, 32), 1, 32);
    let synced = appended.and_then(|_| again.sync());
    assert_eq!(wait(child, Duration::from_secs(20)), Some(0));
    synced.unwrap();
    assert_eq!(again.len(), RECORDS + 1);
}

/// Finding: a child that inherited pending appends deadlocked in `sync`
/// (the commit took the writer role, whose refresh locked the mutex the
/// commit held). A forked child's view now starts at the parent's last
/// commit: it neither sees nor commits the parent's pending appends, and
/// `sync` returns at once.
#[test]
fn a_forked_child_does_not_inherit_pending_appends() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = numbered(&path, true);
    store
        .append_fixed(&self_describing_sized(RECORDS, 32), 1, 32)
        .unwrap();
    assert_eq!(store.len(), RECORDS + 1);
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let child = fork(|| {
        // Wait for the parent to close (and commit) first.
        let mut byte = 0u8;
        // SAFETY: reads one byte from the pipe's read end into `byte`.
        unsafe { libc::read(fds[0], (&raw mut byte).cast(), 1) };
        let mut code = 0;
        if store.len() != RECORDS {
            code |= 1;
        }
        if store.sync().is_err() {
            code |= 2;
        }
        let mut buf = [0u8; 32];
        if !matches!(
            store.gather(&[RECORDS], &mut buf, 32),
            Err(Error::IndexOutOfRange { .. })
        ) {
            code |= 4;
        }
        if !matches!(store.append_fixed(&buf, 1, 32), Err(Error::Locked { .. })) {
            code |= 8;
        }
        code
    });
    drop(store);
    // SAFETY: writes one byte to the pipe's write end.
    unsafe { libc::write(fds[1], [1u8].as_ptr().cast(), 1) };
    assert_eq!(
        wait(child, Duration::from_secs(20)),
        Some(0),
        "child: len is the parent's commit (1), sync returns (2), the pending record is out \
         of range (4), append refused (8); None: it hung"
    );
    let reopened: Store<Raw> = Store::open(&path).unwrap();
    assert_eq!(
        reopened.len(),
        RECORDS + 1,
        "the parent committed its append"
    );
}

/// A forked child reads a store with a run table through its copy of the
/// parent's index of pieces: the parent's committed runs, not its pending
/// ones.
#[test]
fn a_forked_child_reads_a_run_table() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store: Store<Raw> =
        Store::create_v2_runs(&path, &Schema::bytes(CodecTag::RAW), OpenOptions::default())
            .unwrap();
    let labels: Vec<u8> = (0..5000u64).flat_map(|i| (i * 3).to_le_bytes()).collect();
    store.append_fixed(&labels, 5000, 8).unwrap();
    store.sync().unwrap();
    store.append_fixed(&labels[..80], 10, 8).unwrap();
    let child = fork(|| {
        let mut code = 0;
        if store.len() != 5000 {
            code |= 1;
        }
        let mut out = vec![0u8; 3 * 8];
        if store.gather(&[4999, 0, 2500], &mut out, 8).is_err()
            || out[..8] != (4999u64 * 3).to_le_bytes()
            || out[16..] != (2500u64 * 3).to_le_bytes()
        {
            code |= 2;
        }
        if store.verify().is_err() {
            code |= 4;
        }
        code
    });
    assert_eq!(
        wait(child, Duration::from_secs(20)),
        Some(0),
        "child: len is the commit (1), records read (2), verify (4); None: it hung"
    );
    assert_eq!(store.len(), 5010);
}

/// Finding: the process's inotify instance is reached through one global
/// lock; a child forked while a thread of its parent held it (taking a
/// batch's drain of the watches, as every batch over a collection's parts
/// does) waited for it for ever: that thread does not exist in the child.
/// A child must never wait for a lock a thread of its parent held: it
/// does without the watches then (a `statx` per file, as without inotify).
#[test]
fn a_child_forked_while_a_thread_drains_the_watches_does_not_hang() {
    let _serial = serial();
    use loaderx_store::storage::Drained;
    use std::sync::atomic::{AtomicBool, Ordering};
    // A read-only handle, so the process has an instance with a watch.
    let dir = tempfile::tempdir().unwrap();
    drop(numbered(&dir.path().join("s"), true));
    let store: Store<Deflate> = Store::open_read_only(dir.path().join("s")).unwrap();
    let mut out = vec![0u8; 32];
    store.gather(&[1], &mut out, 32).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let drainer = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                drop(Drained::now());
            }
        })
    };
    let mut hung = 0;
    for _ in 0..300 {
        let pid = fork(|| {
            drop(Drained::now());
            0
        });
        if wait(pid, Duration::from_secs(5)).is_none() {
            hung += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    drainer.join().unwrap();
    assert_eq!(hung, 0, "{hung} of 300 children hung");
}

/// The descriptors of the inotify instances this process holds that watch
/// at least one file (`/proc/self/fdinfo` lists an instance's watches).
#[cfg(target_os = "linux")]
fn inotify_instances_watching() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|to| to.to_str() == Some("anon_inode:inotify"))
        })
        .map(|fd| fd.file_name().to_string_lossy().into_owned())
        .filter(|fd| {
            let info = format!("/proc/self/fdinfo/{fd}");
            std::fs::read_to_string(info).is_ok_and(|text| text.contains("inotify wd:"))
        })
        .collect()
}

/// A collection of 3 raw parts of 4 records of 32 bytes (record `i`
/// being 32 bytes of `i`), opened, and a batch spread over its parts with
/// the bytes it reads.
fn raw_collection(
    root: &std::path::Path,
) -> (
    std::sync::Arc<loaderx_store::collection::Collection>,
    [u64; 6],
    Vec<u8>,
) {
    use loaderx_store::collection::{Collection, commit};
    for p in 0..3u8 {
        let path = root.join(format!("part-{p:05}")).join("x");
        let store: Store<Deflate> =
            Store::create_v2(path, &Schema::bytes(CodecTag::RAW), OpenOptions::default()).unwrap();
        let src: Vec<u8> = (0..4u8).flat_map(|i| [p * 4 + i; 32]).collect();
        store.append_fixed(&src, 4, 32).unwrap();
        store.close().unwrap();
    }
    commit(root, None, &OpenOptions::default()).unwrap();
    let coll = std::sync::Arc::new(Collection::open(root, OpenOptions::default()).unwrap());
    let batch = [0u64, 4, 8, 1, 5, 9];
    let want: Vec<u8> = batch.iter().flat_map(|&i| [i as u8; 32]).collect();
    (coll, batch, want)
}

/// A forked child (a PyTorch worker) reading a collection its parent
/// opened watches the parts' files in an instance of its own (it must not
/// read its parent's), instead of asking each file's length per batch.
#[cfg(target_os = "linux")]
#[test]
fn a_forked_child_watches_the_part_files_its_parent_mapped() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (coll, batch, want) = raw_collection(dir.path());
    let x = coll.column("x").unwrap();
    let mut out = vec![0u8; batch.len() * 32];
    x.gather_exact(&batch, &mut out, 32).unwrap();
    assert_eq!(out, want);
    let watching = inotify_instances_watching();
    if watching.is_empty() {
        eprintln!("skipped: the temporary directory's file system is not watched");
        return;
    }
    // The instances one more than `before`: the ones inherited and one new.
    let one_more = |before: &std::collections::BTreeSet<String>| {
        let now = inotify_instances_watching();
        now.len() == before.len() + 1 && now.difference(before).count() == 1
    };
    let pid = fork(|| {
        let mut out = vec![0u8; batch.len() * 32];
        for _ in 0..2 {
            if x.gather_exact(&batch, &mut out, 32).is_err() || out != want {
                return 2;
            }
        }
        // The parent's instance (inherited) and the child's own.
        if !one_more(&watching) {
            return 3;
        }
        // A child of the child reads neither's queue: it makes its own (and
        // lets go of its copy of the child's, which it no longer uses).
        let in_child = inotify_instances_watching();
        let grandchild = fork(|| {
            let mut out = vec![0u8; batch.len() * 32];
            if x.gather_exact(&batch, &mut out, 32).is_err() || out != want {
                return 2;
            }
            let now = inotify_instances_watching();
            let new = now.difference(&in_child).count() == 1;
            if new && one_more(&watching) { 0 } else { 3 }
        });
        wait(grandchild, Duration::from_secs(30)).map_or(4, |code| 10 + code)
    });
    assert_eq!(wait(pid, Duration::from_secs(30)), Some(10));
}

/// Finding: a collection's set of open part stores sits behind one lock,
/// which every batch takes; a child forked while a thread of its parent
/// held it waited for it for ever on its first read. A child reads
/// without the set then (each part opened for the read).
#[test]
fn a_child_forked_while_a_thread_reads_a_collection_does_not_hang() {
    let _serial = serial();
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let (coll, batch, want) = raw_collection(dir.path());
    let x = coll.column("x").unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, x, want) = (std::sync::Arc::clone(&stop), x.clone(), want.clone());
        std::thread::spawn(move || {
            let mut out = vec![0u8; batch.len() * 32];
            while !stop.load(Ordering::Relaxed) {
                x.gather_exact(&batch, &mut out, 32).unwrap();
                assert_eq!(out, want);
            }
        })
    };
    let mut hung = 0;
    for _ in 0..300 {
        let pid = fork(|| {
            let mut out = vec![0u8; batch.len() * 32];
            match x.gather_exact(&batch, &mut out, 32) {
                Ok(()) if out == want => 0,
                _ => 2,
            }
        });
        match wait(pid, Duration::from_secs(5)) {
            Some(0) => {}
            Some(code) => panic!("a child read wrong: exit {code}"),
            None => hung += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert_eq!(hung, 0, "{hung} of 300 children hung");
}
