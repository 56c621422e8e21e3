//! Advisory locks between handles and processes: many readers, one writer,
//! and exclusive access for the operations that rewrite what others read.
//!
//! Two locks, each on its own file, each through its own open file
//! description (std's `File::lock*`: `flock` on Linux and the BSDs,
//! `LockFileEx` on Windows), so two handles in one process conflict exactly
//! as two processes do:
//!
//! * **presence** — every open handle holds a *shared* lock on `meta.zr`.
//!   Opening fails with [`Error::Locked`] while someone holds it exclusively
//!   (a delete, a compaction or a recovery is rewriting the table).
//! * **writer** — the first operation that writes (append, delete, compact,
//!   a commit of new records) takes an *exclusive* lock on `meta.zr.lock`
//!   without waiting, writes its process id into it, and keeps it until the
//!   handle closes. A second would-be writer gets [`Error::Locked`] naming
//!   that process.
//! * **exclusive** — delete, compact and undo-log recovery additionally need
//!   no other handle to have the store open. The writer drops its shared
//!   presence lock and tries an exclusive one without waiting; whatever the
//!   outcome it takes the shared lock back afterwards. A lock is never
//!   converted in place (on Linux a failed `flock` conversion loses the lock
//!   it had), and the gap is harmless: only the holder of the writer lock
//!   ever asks for the exclusive presence lock, so while it holds the writer
//!   lock nobody else can shut it out.
//!
//! `fork()`: a lock belongs to an open file description, which a forked
//! child shares with its parent, so a child must not unlock or "acquire"
//! through inherited descriptors. Every operation first checks the process
//! id; in a child it opens fresh descriptors, takes its own shared presence
//! lock and forgets the inherited writer role, so a child can neither write
//! nor compact behind its parent's back (its own attempt to become the
//! writer conflicts with the parent's lock).
//!
//! File systems without lock support give no locks rather than an error
//! (the store still works; nothing protects it across processes).
//!
//! Checked on Linux (flock). Windows and macOS go through the same std calls;
//! `docs/ARCHITECTURE.md` lists what differs there.

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{self, Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard},
    thread,
    time::{Duration, Instant},
};

use crate::{Error, Result};

/// The locks one open handle holds.
#[derive(Debug)]
pub(crate) struct StoreLock {
    dir: PathBuf,
    state: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    /// Process that took the locks below; another id means we were forked.
    pid: u32,
    /// Shared presence lock on `meta.zr`.
    presence: File,
    /// Exclusive writer lock on `meta.zr.lock`, once this handle writes.
    writer: Option<File>,
}

impl StoreLock {
    /// Takes the shared presence lock on `dir/meta.zr`. `Ok(None)` when the
    /// file system does not support locks.
    pub(crate) fn acquire(dir: &Path) -> Result<Option<StoreLock>> {
        // `meta.zr` exists: the caller created or found it first.
        match presence(dir)? {
            Some(file) => Ok(Some(StoreLock {
                dir: dir.to_owned(),
                state: Mutex::new(Held {
                    pid: std::process::id(),
                    presence: file,
                    writer: None,
                }),
            })),
            None => Ok(None),
        }
    }

    /// Makes this handle the store's one writer (a no-op when it already
    /// is). Returns whether it just became the writer: another writer may
    /// have committed since this handle read the header.
    pub(crate) fn writer(&self) -> Result<bool> {
        let mut held = self.held()?;
        self.take_writer(&mut held)
    }

    /// Whether this handle holds the writer role now (in this process).
    pub(crate) fn is_writer(&self) -> bool {
        let held = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held.pid == std::process::id() && held.writer.is_some()
    }

    /// Runs `f` while no other handle, in any process, has the store open.
    /// Takes the writer role first. Fails with [`Error::Locked`] without
    /// running `f` when others have it open.
    pub(crate) fn exclusive<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.exclusive_as(true, f)
    }

    /// [`exclusive`](Self::exclusive) for a reader that must repair the
    /// store once (undo-log recovery at open): a handle that was not the
    /// writer before does not stay the writer after.
    pub(crate) fn exclusive_once<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.exclusive_as(false, f)
    }

    fn exclusive_as<R>(&self, stay_writer: bool, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let mut held = self.held()?;
        let was_writer = held.writer.is_some();
        self.take_writer(&mut held)?;
        let result = self.exclusive_held(&mut held, f);
        // A refused attempt leaves the handle as it was.
        if !was_writer && (!stay_writer || result.is_err()) {
            held.writer = None;
        }
        result
    }

    fn exclusive_held<R>(&self, held: &mut Held, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let meta = self.dir.join(loaderx_format::META_FILE);
        let got = patiently(|| {
            held.presence.unlock()?;
            let got = held.presence.try_lock();
            if matches!(got, Err(TryLockError::WouldBlock)) {
                held.presence.lock_shared()?;
            }
            Ok(got)
        })
        .map_err(|e| Error::io(&meta, "lock", e))?;
        // Whatever happened, go back to shared. Nobody else can hold the
        // exclusive presence lock (that needs the writer lock, which we
        // hold), so this never waits on anyone.
        let back = |held: &Held| {
            held.presence
                .unlock()
                .and_then(|()| held.presence.lock_shared())
                .map_err(|e| Error::io(&meta, "lock", e))
        };
        match got {
            Ok(()) => {
                let result = f();
                back(held)?;
                result
            }
            Err(TryLockError::WouldBlock) => {
                back(held)?;
                Err(Error::Locked {
                    path: self.dir.clone(),
                    holder: "other handles (in this or other processes) have the store open; \
                             close them first"
                        .to_owned(),
                })
            }
            Err(TryLockError::Error(e)) => {
                back(held)?;
                Err(Error::io(&meta, "lock", e))
            }
        }
    }

    /// The held locks, re-taken through fresh descriptors in a forked child.
    fn held(&self) -> Result<MutexGuard<'_, Held>> {
        let mut held = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let pid = std::process::id();
        if held.pid != pid {
            let Some(file) = presence(&self.dir)? else {
                return Err(Error::io(
                    self.dir.join(loaderx_format::META_FILE),
                    "lock in a forked child",
                    io::Error::other("the file system stopped supporting locks"),
                ));
            };
            // Dropping the inherited descriptors releases nothing the parent
            // still holds (a lock lives until every descriptor of its open
            // file description is closed).
            held.presence = file;
            held.writer = None;
            held.pid = pid;
        }
        Ok(held)
    }

    fn take_writer(&self, held: &mut Held) -> Result<bool> {
        if held.writer.is_some() {
            return Ok(false);
        }
        let path = self.dir.join(loaderx_format::LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, "open writer lock", e))?;
        match patiently(|| Ok(file.try_lock())).map_err(|e| Error::io(&path, "lock", e))? {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    path: self.dir.clone(),
                    holder: holder_of(&mut file),
                });
            }
            Err(TryLockError::Error(e)) if unsupported(&e) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(Error::io(&path, "lock", e)),
        }
        // Best effort: the id only makes the error of the next would-be
        // writer more helpful.
        let _ = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| write!(file, "{}", std::process::id()));
        held.writer = Some(file);
        Ok(true)
    }
}

/// How long a lock attempt keeps retrying before it reports
/// [`Error::Locked`]. Another thread of this process forking a child (a
/// `subprocess`, a `PyTorch` worker) lends that child every open descriptor,
/// locks included, until it calls `exec`: such a hold is transient, a real
/// holder is not.
const GRACE: Duration = Duration::from_millis(200);

/// Runs `attempt` until it does not report `WouldBlock`, for up to [`GRACE`].
fn patiently(
    mut attempt: impl FnMut() -> io::Result<std::result::Result<(), TryLockError>>,
) -> io::Result<std::result::Result<(), TryLockError>> {
    let deadline = Instant::now() + GRACE;
    loop {
        match attempt()? {
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(2));
            }
            other => return Ok(other),
        }
    }
}

/// Opens `dir/meta.zr` and takes a shared lock on it without waiting.
fn presence(dir: &Path) -> Result<Option<File>> {
    let meta = dir.join(loaderx_format::META_FILE);
    let file = File::open(&meta).map_err(|e| Error::io(&meta, "open for locking", e))?;
    match patiently(|| Ok(file.try_lock_shared())).map_err(|e| Error::io(&meta, "lock", e))? {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Err(Error::Locked {
            path: dir.to_owned(),
            holder: "another handle is deleting from, compacting or recovering it; retry when \
                     it is done"
                .to_owned(),
        }),
        Err(TryLockError::Error(e)) if unsupported(&e) => Ok(None),
        Err(TryLockError::Error(e)) => Err(Error::io(&meta, "lock", e)),
    }
}

/// Who holds the writer lock, as far as its file says.
fn holder_of(file: &mut File) -> String {
    let mut text = String::new();
    let pid = file
        .read_to_string(&mut text)
        .ok()
        .and_then(|_| text.trim().parse::<u32>().ok());
    match pid {
        Some(pid) if pid == std::process::id() => {
            "another handle in this process is its writer; close it first".to_owned()
        }
        Some(pid) => format!("process {pid} is its writer; close it there first"),
        None => "another handle is its writer; close it first".to_owned(),
    }
}

/// Whether a lock call failed because the file system has no locks.
fn unsupported(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::Unsupported) || unsupported_os(e)
}

#[cfg(unix)]
fn unsupported_os(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::ENOLCK)
    )
}

#[cfg(not(unix))]
fn unsupported_os(_: &io::Error) -> bool {
    false
}
