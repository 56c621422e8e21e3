//! What a process made by `fork()` inherits from a store handle, and what it
//! must not.
//!
//! A forked child (a `PyTorch` data worker, a `multiprocessing` worker)
//! starts with a copy of every handle its parent had open, and with the
//! same *open file descriptions* behind their descriptors. An advisory lock
//! belongs to the open file description, so without care the child's reads
//! would shelter under its parent's presence lock: the parent dropping that
//! lock to go exclusive (delete, compact) drops it for the child too, and
//! the child then reads a table being rewritten. And the child's copy of the
//! writer lock would keep the parent's writer role alive after the parent
//! closed its handle.
//!
//! So `fork()` runs handlers (`pthread_atfork`, installed with the first
//! lock) around the copy:
//!
//! * before it, in the parent, for every open handle: a *fresh* open file
//!   description of `meta.zr` with a shared lock of its own, for the child.
//!   Taken before the copy, it is there from the child's first instant, so
//!   the parent's exclusive operations are refused while the child lives
//!   ([`Error::Locked`](crate::Error::Locked)), exactly as for any other
//!   process that has the store open. When it cannot be had (another thread
//!   of the parent is deleting, compacting or recovering), the handle is
//!   marked unusable in the child: every operation there reports it;
//! * after it, in the parent: its copies of those descriptors are closed;
//! * after it, in the child, before any of the child's code runs: each
//!   handle's presence descriptor is pointed at the fresh description, and
//!   every inherited writer-lock descriptor at `/dev/null`, so the writer
//!   role ends when the parent lets go of it, whatever the child does.
//!
//! The handlers call only `open`, `flock`, `dup2`, `fcntl` and `close` (all
//! async-signal-safe) and atomics. The registry they walk is guarded by a
//! spin flag that `prepare` takes and the other two release, so it is never
//! copied mid-change.
//!
//! Beyond the locks, a handle used in a child ([`Inherited::first_use`])
//! drops whatever appends its parent had not committed (their bytes are the
//! parent's to publish or abandon) and never takes the writer role
//! ([`Store::check_writable`](crate::Store)). Only Unix has `fork()`; on
//! Windows a new process opens its own handles.
//!
//! Unsafe here (allowed by name in `lib.rs`), and sound because: the handlers make only
//! those calls, on descriptors the registry lists, and a descriptor is
//! listed only while the `File` owning it is open (recorded and closed with
//! the flag held), so `dup2` never lands on a number that was closed or
//! reused; the registry's list sits in an `UnsafeCell` touched only while
//! its spin flag is held, which `prepare` takes in the forking thread
//! before the copy, so the child (one thread) and the parent's handler own
//! it until they release it.

use std::{
    cell::UnsafeCell,
    ffi::CString,
    os::unix::{ffi::OsStrExt, io::RawFd},
    path::Path,
    sync::{
        Arc, Once,
        atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, Ordering},
    },
};

/// A handle's state in the process it is used in.
pub(crate) mod state {
    /// Used in the process that opened it, or already adopted by a child.
    pub(crate) const NORMAL: u8 = 0;
    /// Inherited by a child that has not used it yet: its view still holds
    /// the parent's uncommitted appends.
    pub(crate) const INHERITED: u8 = 1;
    /// Inherited while the parent held the store exclusively: unusable here.
    pub(crate) const REFUSED: u8 = 2;
}

/// The descriptors of one handle's locks, as the fork handler sees them.
#[derive(Debug)]
pub(crate) struct Inherited {
    /// `meta.zr`, to open afresh in the child.
    meta: CString,
    /// The descriptor of the shared presence lock (fixed for the handle's life).
    presence: RawFd,
    /// The descriptor of the writer lock, or -1.
    writer: AtomicI32,
    /// During a fork: a fresh descriptor of `meta.zr` holding a shared lock
    /// of its own, opened before the fork for the child (-1: none could be
    /// had).
    prepared: AtomicI32,
    /// One of [`state`]'s values.
    state: AtomicU8,
}

impl Inherited {
    /// The entry of a handle whose presence lock is held through `presence`,
    /// registered with the fork handler until it is dropped
    /// ([`Registration`]).
    pub(crate) fn register(meta: &Path, presence: RawFd) -> Registration {
        install();
        let entry = Arc::new(Inherited {
            // A path with a NUL byte cannot have been opened: never reached.
            meta: CString::new(meta.as_os_str().as_bytes()).unwrap_or_default(),
            presence,
            writer: AtomicI32::new(-1),
            prepared: AtomicI32::new(-1),
            state: AtomicU8::new(state::NORMAL),
        });
        REGISTRY.with(|list| list.push(Arc::clone(&entry)));
        Registration(entry)
    }

    /// The handle's state here: one of [`state`]'s values.
    #[inline]
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Claims the first use of an inherited handle in a child: `true` for
    /// the one caller that must adopt it (drop the parent's pending
    /// appends), after which the handle is [`state::NORMAL`].
    pub(crate) fn first_use(&self) -> bool {
        self.state
            .compare_exchange(
                state::INHERITED,
                state::NORMAL,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Marks the handle unusable in this process.
    pub(crate) fn refuse(&self) {
        self.state.store(state::REFUSED, Ordering::Release);
    }

    /// Records the writer lock's descriptor (`-1`: none) and runs `f`
    /// (which stores or drops the lock's `File`) with the registry's flag
    /// held, so a fork never sees the two disagree: a child forked from
    /// now on lets go of exactly the descriptor that is open.
    pub(crate) fn set_writer(&self, fd: RawFd, f: impl FnOnce()) {
        REGISTRY.with(|_| {
            self.writer.store(fd, Ordering::Release);
            f();
        });
    }
}

impl Inherited {
    /// Runs `open` (the writer lock's file) and records the descriptor it
    /// returns, with the registry's flag held throughout.
    pub(crate) fn track_writer(
        &self,
        open: impl FnOnce() -> std::io::Result<std::fs::File>,
    ) -> std::io::Result<std::fs::File> {
        REGISTRY.with(|_| {
            let file = open()?;
            let fd = std::os::unix::io::AsRawFd::as_raw_fd(&file);
            self.writer.store(fd, Ordering::Release);
            Ok(file)
        })
    }
}

/// Keeps an [`Inherited`] in the fork handler's registry while it lives.
#[derive(Debug)]
pub(crate) struct Registration(Arc<Inherited>);

impl std::ops::Deref for Registration {
    type Target = Inherited;

    fn deref(&self) -> &Inherited {
        &self.0
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        REGISTRY.with(|list| list.retain(|e| !Arc::ptr_eq(e, &self.0)));
    }
}

/// The handles alive in this process, behind a spin flag (see the module
/// docs for why not a mutex: the `prepare` handler holds it across `fork`).
struct Registry {
    busy: AtomicBool,
    list: UnsafeCell<Vec<Arc<Inherited>>>,
}

// SAFETY: `list` is only reached through `with`/`acquire`, which hold `busy`
// exclusively for as long as they touch it.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    busy: AtomicBool::new(false),
    list: UnsafeCell::new(Vec::new()),
};

impl Registry {
    fn acquire(&self) {
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    fn release(&self) {
        self.busy.store(false, Ordering::Release);
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<Arc<Inherited>>) -> R) -> R {
        self.acquire();
        // SAFETY: `busy` is ours until `release`, so nobody else touches the list.
        let out = f(unsafe { &mut *self.list.get() });
        self.release();
        out
    }
}

/// Forks between the process that first asked for [`generation`] and this
/// one: the child handler adds one, in the child only.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// This process's place in its line of forks: a value recorded here and
/// read back equal means no `fork()` came between, without asking the
/// kernel for the process id (a system call) on hot paths. The handlers
/// are installed first, so every fork after a value was recorded counts.
/// A process made by a raw `clone` that skips the `pthread_atfork`
/// handlers is not told apart; nothing in a Python or Rust process does
/// that and then keeps running the parent's code. Where the handlers
/// could not be registered (`ENOMEM`), the process id stands in (with the
/// top bit set, so it never equals a count).
pub(crate) fn generation() -> u64 {
    install();
    if UNCOUNTED.load(Ordering::Acquire) {
        return (1 << 63) | u64::from(std::process::id());
    }
    FORKS.load(Ordering::Acquire)
}

/// Set when `pthread_atfork` failed: forks are not counted.
static UNCOUNTED: AtomicBool = AtomicBool::new(false);

/// Installs the fork handlers, once per process (a child inherits them).
fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the three handlers are `extern "C"` functions without
        // arguments that never unwind; registering them has no other effect.
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        // Only ENOMEM is possible; without the handlers a forked child
        // shares its parent's locks as if the handler had never existed,
        // which is no worse than not registering: nothing to report to.
        // `generation` falls back to the process id then.
        if rc != 0 {
            UNCOUNTED.store(true, Ordering::Release);
        }
    });
}

extern "C" fn prepare() {
    REGISTRY.acquire();
    // SAFETY: `busy` is ours until `parent` or `child` releases it.
    let list = unsafe { &*REGISTRY.list.get() };
    for entry in list {
        entry.prepared.store(lock_afresh(entry), Ordering::Release);
    }
}

extern "C" fn parent() {
    // SAFETY: `busy` is still ours (taken by `prepare` in this thread).
    let list = unsafe { &*REGISTRY.list.get() };
    for entry in list {
        let fd = entry.prepared.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: opened by `prepare` for the child, which has its own
            // copy now; the parent's copy is of no use.
            unsafe { libc::close(fd) };
        }
    }
    REGISTRY.release();
}

extern "C" fn child() {
    FORKS.fetch_add(1, Ordering::AcqRel);
    // SAFETY: `prepare` took `busy` in the thread that forked, which is the
    // child's only thread: the list is ours.
    let list = unsafe { &*REGISTRY.list.get() };
    for entry in list {
        adopt(entry);
    }
    REGISTRY.release();
}

/// A new open file description of `meta.zr` with a shared lock on it, for
/// a child about to be forked: taken before the fork, so there is no instant
/// at which the parent could go exclusive under a live child. -1 when the
/// lock cannot be had (another thread holds the store exclusively) or the
/// file cannot be opened.
fn lock_afresh(entry: &Inherited) -> RawFd {
    // SAFETY: `meta` is a NUL-terminated path; `open` and `flock` only read
    // it and return a descriptor or -1.
    unsafe {
        let fd = libc::open(entry.meta.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            -1
        } else if libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) == 0 {
            fd
        } else {
            libc::close(fd);
            -1
        }
    }
}

/// The child's half of the module docs, for one handle.
fn adopt(entry: &Inherited) {
    let writer = entry.writer.swap(-1, Ordering::AcqRel);
    if writer >= 0 {
        point_at_null(writer);
    }
    let fd = entry.prepared.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        replace(fd, entry.presence);
        // SAFETY: `fd` is ours and now duplicated into `presence`.
        unsafe { libc::close(fd) };
        entry.state.store(state::INHERITED, Ordering::Release);
    } else {
        point_at_null(entry.presence);
        entry.state.store(state::REFUSED, Ordering::Release);
    }
}

/// Makes descriptor `target` refer to `/dev/null`, letting go of whatever
/// open file description it shared with the parent.
fn point_at_null(target: RawFd) {
    // SAFETY: a static NUL-terminated path; `open` returns a descriptor or -1.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if null >= 0 {
        replace(null, target);
        // SAFETY: `null` is ours and now duplicated into `target`.
        unsafe { libc::close(null) };
    }
    // Else the descriptor table is full: `target` stays as it was (closing
    // it would let the handle's `File` close a reused number later).
}

/// `dup2(from, to)`, keeping `to` close-on-exec as std opens every file.
fn replace(from: RawFd, to: RawFd) {
    // SAFETY: both are open descriptors of this process; `dup2` atomically
    // closes `to` and makes it a copy of `from`.
    unsafe {
        if libc::dup2(from, to) >= 0 {
            libc::fcntl(to, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}
