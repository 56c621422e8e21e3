//! Advisory locks between handles and processes: many readers, one writer,
//! and exclusive access for the operations that rewrite what others read.
//!
//! Two locks, each on its own file, each through its own open file
//! description (Unix: std's `File::lock*`, which is `flock` on Linux, macOS
//! and the BSDs; Windows: `LockFileEx` on one byte far past the end of the
//! file, see [`platform`]), so two handles in one process conflict exactly
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
//! child shares with its parent. The fork handler (`fork.rs`) gives the
//! child a presence lock of its own and lets go of the inherited writer
//! lock before the child runs any code, so the parent's delete and compact
//! are refused while a child lives, and the parent's writer role ends when
//! the parent closes. A handle inherited across `fork()` only reads: every
//! operation that needs the writer role or exclusive access fails with
//! [`Error::Locked`] in the child without touching the locks.
//!
//! File systems without lock support give no locks rather than an error
//! (the store still works; nothing protects it across processes).
//!
//! Checked on Linux (flock, natively and under qemu-user for aarch64) and on
//! Windows as emulated by Wine (`LockFileEx`); macOS goes through the same
//! std calls as Linux (`flock`) and has not been run here.
//! `docs/ARCHITECTURE.md` lists what differs between the platforms.

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
    /// The process that opened the handle; in any other (a forked child)
    /// the handle only reads.
    opened_by: u32,
    /// The descriptors the fork handler re-points in a child.
    #[cfg(unix)]
    inherited: crate::fork::Registration,
    state: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    /// Shared presence lock on `meta.zr` (`None` only while dropping).
    presence: Option<File>,
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
                opened_by: std::process::id(),
                #[cfg(unix)]
                inherited: crate::fork::Inherited::register(
                    &dir.join(loaderx_format::META_FILE),
                    std::os::unix::io::AsRawFd::as_raw_fd(&file),
                ),
                state: Mutex::new(Held {
                    presence: Some(file),
                    writer: None,
                }),
            })),
            None => Ok(None),
        }
    }

    /// Whether this process is a child forked after the handle was opened.
    pub(crate) fn forked(&self) -> bool {
        std::process::id() != self.opened_by
    }

    /// The fork handler's view of this handle (`fork.rs`).
    #[cfg(unix)]
    pub(crate) fn inherited(&self) -> &crate::fork::Inherited {
        &self.inherited
    }

    /// The error for an operation a forked child may not run through an
    /// inherited handle.
    pub(crate) fn inherited_error(&self) -> Error {
        Error::Locked {
            path: self.dir.clone(),
            holder: format!(
                "this handle was opened by process {} and inherited by this process \
                 through fork(): a forked process only reads through it (open the store \
                 again in this process to write)",
                self.opened_by
            ),
        }
    }

    /// The error of a child forked while its parent held the store
    /// exclusively.
    #[cfg(unix)]
    pub(crate) fn refused_error(&self) -> Error {
        Error::Locked {
            path: self.dir.clone(),
            holder: format!(
                "process {} was deleting from, compacting or recovering the store when this \
                 process was forked from it, so the handle inherited here cannot be used \
                 (open the store again in this process)",
                self.opened_by
            ),
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
        !self.forked() && self.lock_state().writer.is_some()
    }

    fn lock_state(&self) -> MutexGuard<'_, Held> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            self.drop_writer(&mut held);
        }
        result
    }

    fn exclusive_held<R>(&self, held: &mut Held, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let meta = self.dir.join(loaderx_format::META_FILE);
        let lock_error = |e| Error::io(&meta, "lock", e);
        // Every attempt that does not get the exclusive lock takes the
        // shared one back before it retries or gives up, so a refusal
        // leaves the handle as visible as it was.
        let Some(presence) = held.presence.as_ref() else {
            return Err(Error::Locked {
                path: self.dir.clone(),
                holder: "the handle is closing".to_owned(),
            });
        };
        let got = patiently(|| {
            platform::unlock(presence)?;
            let got = platform::try_lock(presence, true);
            if got.is_err() {
                platform::lock_shared(presence)?;
            }
            Ok(got)
        })
        .map_err(lock_error)?;
        match got {
            Ok(()) => {
                let result = f();
                // Back to shared. Nobody else can hold the exclusive presence
                // lock (that needs the writer lock, which we hold), so this
                // never waits on anyone.
                platform::unlock(presence)
                    .and_then(|()| platform::lock_shared(presence))
                    .map_err(lock_error)?;
                result
            }
            Err(TryLockError::WouldBlock) => Err(Error::Locked {
                path: self.dir.clone(),
                holder: format!(
                    "{}; it must be closed there first",
                    holders::describe(&meta, true, ("has the store open", "have the store open"))
                ),
            }),
            Err(TryLockError::Error(e)) => Err(lock_error(e)),
        }
    }

    /// The held locks, in the process that opened the handle; in a forked
    /// child an error, without touching them (the fork handler already
    /// gave the child its own presence lock and let go of the writer lock).
    fn held(&self) -> Result<MutexGuard<'_, Held>> {
        if self.forked() {
            return Err(self.inherited_error());
        }
        Ok(self.lock_state())
    }

    /// Lets go of the writer lock (and the fork handler of its descriptor).
    // Windows has no fork handler to tell.
    #[cfg_attr(not(unix), allow(clippy::unused_self))]
    fn drop_writer(&self, held: &mut Held) {
        #[cfg(unix)]
        self.inherited.set_writer(-1, || held.writer = None);
        #[cfg(not(unix))]
        {
            held.writer = None;
        }
    }

    /// Opens the writer lock's file, telling the fork handler of its
    /// descriptor in the same breath (a child forked in between would keep
    /// the lock's open file description alive).
    // Windows has no fork handler to tell.
    #[cfg_attr(not(unix), allow(clippy::unused_self))]
    fn open_writer(&self, path: &Path) -> io::Result<File> {
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
        };
        #[cfg(unix)]
        return self.inherited.track_writer(open);
        #[cfg(not(unix))]
        open()
    }

    fn take_writer(&self, held: &mut Held) -> Result<bool> {
        if held.writer.is_some() {
            return Ok(false);
        }
        let path = self.dir.join(loaderx_format::LOCK_FILE);
        let mut file = self
            .open_writer(&path)
            .map_err(|e| Error::io(&path, "open writer lock", e))?;
        let refused = match patiently(|| Ok(platform::try_lock(&file, true))) {
            Ok(Ok(())) => None,
            Ok(Err(TryLockError::WouldBlock)) => Some(Err(Error::Locked {
                path: self.dir.clone(),
                holder: holder_of(&path, &mut file),
            })),
            Ok(Err(TryLockError::Error(e))) if unsupported(&e) => Some(Ok(false)),
            Ok(Err(TryLockError::Error(e))) | Err(e) => Some(Err(Error::io(&path, "lock", e))),
        };
        if let Some(outcome) = refused {
            held.writer = Some(file);
            self.drop_writer(held);
            return outcome;
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

impl Drop for StoreLock {
    /// Closes the lock files and leaves the fork handler's registry in one
    /// step, so a child forked meanwhile inherits either a registered handle
    /// or no descriptor of it.
    fn drop(&mut self) {
        let held = self
            .state
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        #[cfg(unix)]
        self.inherited.set_writer(-1, || {
            held.writer = None;
            held.presence = None;
        });
        #[cfg(not(unix))]
        {
            held.writer = None;
            held.presence = None;
        }
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
    match patiently(|| Ok(platform::try_lock(&file, false)))
        .map_err(|e| Error::io(&meta, "lock", e))?
    {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Err(Error::Locked {
            path: dir.to_owned(),
            holder: format!(
                "{} deleting from, compacting or recovering it; retry when it is done",
                match holders::listed(&meta, false) {
                    Some((who, false)) => format!("{who} is"),
                    Some((who, true)) => format!("{who} are"),
                    None => "another handle is".to_owned(),
                }
            ),
        }),
        Err(TryLockError::Error(e)) if unsupported(&e) => Ok(None),
        Err(TryLockError::Error(e)) => Err(Error::io(&meta, "lock", e)),
    }
}

/// Who holds the writer lock: the processes the kernel lists as holding it
/// (Linux), else the process id its holder wrote into it.
fn holder_of(path: &Path, file: &mut File) -> String {
    if let Some((who, plural)) = holders::listed(path, false) {
        let verb = if plural { "hold" } else { "holds" };
        return format!("{who} {verb} its writer lock; close the store there first");
    }
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

/// Naming the processes that hold a lock on a file, from the kernel's list.
mod holders {
    use std::path::Path;

    /// `"{subject} {verb}"` for the processes holding locks on `path`:
    /// `verb` is `(singular, plural)`, the subject "process 12", "processes
    /// 12, 34" or "another handle of this process"; without the kernel's
    /// list, "other handles (in this or other processes)" (plural).
    pub(super) fn describe(path: &Path, ours: bool, verb: (&str, &str)) -> String {
        match listed(path, ours) {
            Some((who, false)) => format!("{who} {}", verb.0),
            Some((who, true)) => format!("{who} {}", verb.1),
            None => format!("other handles (in this or other processes) {}", verb.1),
        }
    }

    /// The holders of `path`'s locks, less one lock of this process when
    /// `ours` (the caller's own), as a subject and whether it is plural;
    /// `None` where the kernel does not list locks (not Linux) or lists no
    /// other.
    pub(super) fn listed(path: &Path, ours: bool) -> Option<(String, bool)> {
        let mut pids = pids(path)?;
        let me = std::process::id();
        if ours && let Some(at) = pids.iter().position(|&p| p == me) {
            pids.remove(at);
        }
        pids.sort_unstable();
        pids.dedup();
        match pids.as_slice() {
            [] => None,
            [p] if *p == me => Some(("another handle of this process".to_owned(), false)),
            [p] => Some((format!("process {p}"), false)),
            many => {
                let names: Vec<String> = many
                    .iter()
                    .map(|&p| {
                        if p == me {
                            "this process".to_owned()
                        } else {
                            p.to_string()
                        }
                    })
                    .collect();
                Some((format!("processes {}", names.join(", ")), true))
            }
        }
    }

    /// The process id behind every descriptor that holds a lock on
    /// `path`'s file, one entry per descriptor: from `/proc/<pid>/fd`, whose
    /// `fdinfo` lists the locks of each open file description (a scan of
    /// every process's descriptors, so for error messages only; a lock
    /// taken for a forked child belongs to the child there, where the
    /// kernel's `/proc/locks` would name the parent that took it).
    #[cfg(target_os = "linux")]
    fn pids(path: &Path) -> Option<Vec<u32>> {
        use std::os::unix::fs::MetadataExt;
        let target = std::fs::metadata(path).ok()?;
        let mut pids = Vec::new();
        for process in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = process
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                let same = std::fs::metadata(fd.path())
                    .is_ok_and(|m| m.dev() == target.dev() && m.ino() == target.ino());
                if !same {
                    continue;
                }
                let info = process.path().join("fdinfo").join(fd.file_name());
                if std::fs::read_to_string(info).is_ok_and(|t| t.contains("\nlock:")) {
                    pids.push(pid);
                }
            }
        }
        Some(pids)
    }

    #[cfg(not(target_os = "linux"))]
    fn pids(_: &Path) -> Option<Vec<u32>> {
        None
    }
}

/// Whether a lock call failed because the file system has no locks.
fn unsupported(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::Unsupported) || platform::unsupported_os(e)
}

// The lock calls, per platform. Both give each open file (description on
// Unix, handle on Windows) its own lock, so two handles of one process
// conflict like two processes; both release a process's locks when it dies.
#[cfg(not(windows))]
mod platform {
    //! Unix: std's whole-file advisory locks (`flock` on Linux, macOS and
    //! the BSDs). Advisory locks do not stop anyone's reads or writes, so the
    //! locked files stay usable through other descriptors. Checked on Linux
    //! (x86-64 natively, aarch64 under qemu-user).

    use std::{
        fs::{File, TryLockError},
        io,
    };

    /// Takes the lock without waiting, exclusive or shared.
    pub(super) fn try_lock(file: &File, exclusive: bool) -> Result<(), TryLockError> {
        if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        }
    }

    /// Takes the shared lock, waiting for an exclusive holder to let go.
    pub(super) fn lock_shared(file: &File) -> io::Result<()> {
        file.lock_shared()
    }

    /// Releases whichever lock `file` holds.
    pub(super) fn unlock(file: &File) -> io::Result<()> {
        file.unlock()
    }

    /// The errors of a file system that does not implement `flock`.
    pub(super) fn unsupported_os(e: &io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::ENOLCK)
        )
    }
}

#[cfg(windows)]
#[allow(unsafe_code)] // Win32 calls; the invariant is below
mod platform {
    //! Unsafe here (allowed by name: the crate's only Windows-only unsafe),
    //! sound because each call gets a handle its `File` owns for the whole
    //! call and an `OVERLAPPED` on the caller's stack, and the handle is
    //! opened for synchronous I/O, so the call finishes before it returns
    //! and keeps no pointer.
    //!
    //! Windows: `LockFileEx` on the single byte at offset 2^62, far past the
    //! end of any store file. Windows byte-range locks are mandatory: a
    //! shared lock over the whole file (what std's `File::lock_shared` takes)
    //! would refuse every write to `meta.zr`, even through the writer's own
    //! second handle, and an exclusive one every read of the writer's
    //! process id from `meta.zr.lock`. A lock on a byte no one reads or
    //! writes has the advisory meaning the Unix locks have and blocks no I/O.
    //! Checked under Wine (x86_64-pc-windows-gnu); the calls and their
    //! semantics are the documented Win32 ones.

    use std::{
        fs::{File, TryLockError},
        io,
        os::windows::io::AsRawHandle,
    };

    use windows_sys::Win32::{
        Foundation::{ERROR_INVALID_FUNCTION, ERROR_LOCK_VIOLATION, ERROR_NOT_SUPPORTED},
        Storage::FileSystem::{
            LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY, LockFileEx, UnlockFileEx,
        },
        System::IO::{OVERLAPPED, OVERLAPPED_0_0},
    };

    /// The locked byte's offset, as `OVERLAPPED` splits it: 2^62.
    const OFFSET: OVERLAPPED_0_0 = OVERLAPPED_0_0 {
        Offset: 0,
        OffsetHigh: 1 << 30,
    };

    fn at_offset() -> OVERLAPPED {
        let mut overlapped = OVERLAPPED::default();
        overlapped.Anonymous.Anonymous = OFFSET;
        overlapped
    }

    fn lock(file: &File, flags: u32) -> io::Result<()> {
        let mut overlapped = at_offset();
        // SAFETY: the handle is a valid open file handle owned by `file` for
        // the whole call; `overlapped` lives on this stack frame through the
        // call, and the handle was opened for synchronous I/O, so the call
        // completes (or fails) before it returns and keeps no pointer.
        let ok = unsafe { LockFileEx(file.as_raw_handle(), flags, 0, 1, 0, &raw mut overlapped) };
        if ok == 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Takes the lock without waiting, exclusive or shared.
    pub(super) fn try_lock(file: &File, exclusive: bool) -> Result<(), TryLockError> {
        let mode = if exclusive {
            LOCKFILE_EXCLUSIVE_LOCK
        } else {
            0
        };
        match lock(file, mode | LOCKFILE_FAIL_IMMEDIATELY) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION.cast_signed()) => {
                Err(TryLockError::WouldBlock)
            }
            Err(e) => Err(TryLockError::Error(e)),
        }
    }

    /// Takes the shared lock, waiting for an exclusive holder to let go.
    pub(super) fn lock_shared(file: &File) -> io::Result<()> {
        lock(file, 0)
    }

    /// Releases whichever lock `file` holds.
    pub(super) fn unlock(file: &File) -> io::Result<()> {
        let mut overlapped = at_offset();
        // SAFETY: as in `lock`: a valid handle, an `OVERLAPPED` that outlives
        // the synchronous call.
        let ok = unsafe { UnlockFileEx(file.as_raw_handle(), 0, 1, 0, &raw mut overlapped) };
        if ok == 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// The errors of a file system (a network share) without byte-range
    /// locks.
    pub(super) fn unsupported_os(e: &io::Error) -> bool {
        e.raw_os_error().is_some_and(|code| {
            code == ERROR_NOT_SUPPORTED.cast_signed()
                || code == ERROR_INVALID_FUNCTION.cast_signed()
        })
    }
}
