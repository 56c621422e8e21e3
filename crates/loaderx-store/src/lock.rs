//! Advisory locking between processes (`flock` on `meta.zr`).
//!
//! Every open handle holds a shared lock; `compact` upgrades to an exclusive
//! one without waiting, so it fails with [`Error::Locked`] while any other
//! handle (in this or another process) has the store open, instead of moving
//! bytes under a reader's feet. Appends from two processes at once are not
//! supported (each keeps its own view of the header); the shared lock does
//! not prevent that, `docs/ARCHITECTURE.md` says so.

use std::{fs::File, io, os::fd::AsRawFd, path::Path};

use crate::{Error, Result};

/// A shared lock on a store, held for the life of an open handle.
#[derive(Debug)]
pub(crate) struct StoreLock {
    file: File,
}

impl StoreLock {
    /// Takes a shared lock on `dir/meta.zr` if it exists. File systems without
    /// `flock` support give no lock rather than an error.
    pub(crate) fn acquire(dir: &Path, _read_only: bool) -> Result<Option<StoreLock>> {
        let meta = dir.join(loaderx_format::META_FILE);
        let file = match File::open(&meta) {
            Ok(f) => f,
            // A new store: the lock is taken once meta.zr exists (see `Store::open_with`).
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(meta, "open for locking", e)),
        };
        let lock = StoreLock { file };
        match lock.flock(libc::LOCK_SH | libc::LOCK_NB) {
            Ok(()) => Ok(Some(lock)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(Error::Locked {
                path: dir.to_owned(),
                holder: "another handle is compacting it",
            }),
            Err(_) => Ok(None),
        }
    }

    /// Upgrades to an exclusive lock without waiting.
    pub(crate) fn exclusive(&self, dir: &Path) -> Result<()> {
        self.flock(libc::LOCK_EX | libc::LOCK_NB)
            .map_err(|e| match e.kind() {
                io::ErrorKind::WouldBlock => Error::Locked {
                    path: dir.to_owned(),
                    holder: "another handle (in this or another process) has it open; close that first",
                },
                _ => Error::io(dir.join(loaderx_format::META_FILE), "lock", e),
            })
    }

    /// Returns to a shared lock.
    pub(crate) fn shared(&self) {
        let _ = self.flock(libc::LOCK_SH | libc::LOCK_NB);
    }

    fn flock(&self, op: libc::c_int) -> io::Result<()> {
        // SAFETY: flock takes a file descriptor we own for the duration of the
        // call and an operation constant; it touches no memory of ours.
        let rc = unsafe { libc::flock(self.file.as_raw_fd(), op) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
