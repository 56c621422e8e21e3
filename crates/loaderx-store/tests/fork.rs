//! A store handle used across `fork()`, in a test binary of its own: a
//! forked child holds every descriptor of its parent, locks included, so it
//! must not run beside other tests of the same process.
//!
//! Unix only: Windows has no `fork()` (a new process starts from scratch and
//! opens its own handles, which `multiprocess.rs` covers).
#![cfg(unix)]

use loaderx_store::{Deflate, Error, Store};

fn locked<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Locked { .. }))
}

/// Finding: a forked child shares its parent's lock (one open file
/// description); it used to be able to "upgrade" it and compact while the
/// parent still mapped the store.
#[test]
fn a_forked_child_cannot_write_or_compact_behind_its_parent() {
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
