//! Which mapped chunk files may have changed, without asking the kernel
//! about each one (Linux).
//!
//! A gather re-checks, before it reads a map, that the file still holds
//! what it reads (a file cut behind the store's back must give an error,
//! not a `SIGBUS`): one `statx` per file (`meta.zr` for the table, each
//! chunk file). A collection's batch touches hundreds of part stores, each
//! with its own files, so those checks cost more than the copies. Here one
//! inotify instance per process watches the table and chunk files
//! read-only handles map (`IN_MODIFY`, which
//! every write, truncation and hole punch raises, and `IN_ATTRIB`); one
//! non-blocking read of its queue ([`Drained::now`]) tells which files
//! had events since, and a file with none keeps the length checked last.
//!
//! The rule, and why it keeps the guarantee: a length is recorded with
//! the number of the drain made *before* the `statx` that read it. A
//! change to the file after that `statx` queues an event before the
//! changing call returns, so any drain after the change reads it and marks
//! the file with a number past the recorded one: the file is checked
//! again. A change after the last drain is not seen, exactly as a change
//! after a `statx` is not (the window between check and copy is the
//! same). Queue overflow marks every file; a watch the kernel drops
//! (`IN_IGNORED`: file gone, file system unmounted) marks its file for
//! ever.
//!
//! Only files on local file systems whose changes all pass through this
//! kernel are watched (ext4, XFS, Btrfs, tmpfs, F2FS): a network file
//! system's other clients raise no events here. A forked child never reads
//! its parent's instance (it would take the parent's events: the queue is
//! shared), and never removes a watch from it; it makes an instance of its
//! own, and watches there the files its parent watched, on their first
//! check (`FileStorage::current_len_since`). Nor
//! does it wait for the lock of the process's instance that a thread of
//! its parent held at the fork (that thread does not exist in the child):
//! it does without watches then.

use std::{
    collections::HashMap,
    fs::File,
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd, OwnedFd},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use rustix::fs::inotify;

/// File systems whose every change raises an event here (`statfs`'s
/// `f_type`): ext2/3/4, XFS, Btrfs, tmpfs, F2FS.
const LOCAL_FILE_SYSTEMS: [i128; 5] = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0xF2F5_2010];

/// What is watched for.
fn mask() -> inotify::WatchFlags {
    inotify::WatchFlags::MODIFY | inotify::WatchFlags::ATTRIB
}

/// The instance of this process, once made.
static CURRENT: Mutex<Option<Arc<Watches>>> = Mutex::new(None);

/// One more than the [`generation`](crate::fork::generation) of the
/// process whose threads may take [`CURRENT`]'s lock (set before any of
/// them first does; 0 before).
static OWNER: AtomicU64 = AtomicU64::new(0);

/// [`CURRENT`], locked. In a forked child whose parent had a thread
/// holding the lock at the fork, `None`: that thread does not exist here,
/// so the lock is never released, and the caller does without watches (a
/// `statx` per file). The child's own threads wait for the lock as usual
/// once one of them took it.
fn current() -> Option<std::sync::MutexGuard<'static, Option<Arc<Watches>>>> {
    let here = crate::fork::generation() + 1;
    let owner = match OWNER.compare_exchange(0, here, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => here,
        Err(owner) => owner,
    };
    if owner == here {
        return Some(lock(&CURRENT));
    }
    let guard = match CURRENT.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    OWNER.store(here, Ordering::Release);
    Some(guard)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One process's inotify instance, and what its drains saw.
#[derive(Debug)]
pub(crate) struct Watches {
    /// The [`generation`](crate::fork::generation) of the process that
    /// made it (a forked child must not use it).
    generation: u64,
    fd: OwnedFd,
    /// The number of the last drain that read an event of every kind
    /// (queue overflow: any file may have changed).
    overflow: AtomicU64,
    /// Held while draining and while adding or removing a watch.
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Drains that read at least one event.
    drains: u64,
    /// Watch descriptor -> what its files share.
    watched: HashMap<i32, Arc<Shared>>,
}

/// What the files behind one watch descriptor share.
#[derive(Debug)]
struct Shared {
    wd: i32,
    /// The number of the last drain that read an event for it
    /// (`u64::MAX`: the kernel dropped the watch).
    changed: AtomicU64,
}

impl Watches {
    /// This process's instance, made on first use (and anew in a forked
    /// child); `None` where inotify cannot be had (too many instances).
    fn current() -> Option<Arc<Watches>> {
        let generation = crate::fork::generation();
        let mut held = current()?;
        if let Some(w) = held.as_ref().filter(|w| w.generation == generation) {
            return Some(Arc::clone(w));
        }
        let fd =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
        let made = Arc::new(Watches {
            generation,
            fd,
            overflow: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        });
        *held = Some(Arc::clone(&made));
        Some(made)
    }

    /// Reads every queued event and marks the files they name: the
    /// number of this drain (the last one's when none was queued).
    fn drain(&self) -> u64 {
        let mut state = lock(&self.state);
        let next = state.drains + 1;
        let mut any = false;
        let mut buf = [const { MaybeUninit::<u8>::uninit() }; 4096];
        let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut buf);
        // Until the queue is empty (`EAGAIN`) or unreadable: an error other
        // than `EAGAIN` counts as an overflow, so nothing is trusted.
        loop {
            match reader.next() {
                Ok(event) => {
                    any = true;
                    let flags = event.events();
                    if flags.contains(inotify::ReadFlags::QUEUE_OVERFLOW) {
                        self.overflow.store(next, Ordering::Release);
                    } else if let Some(shared) = state.watched.get(&event.wd()) {
                        let mark = if flags.contains(inotify::ReadFlags::IGNORED) {
                            u64::MAX
                        } else {
                            next
                        };
                        shared.changed.fetch_max(mark, Ordering::AcqRel);
                    }
                }
                Err(rustix::io::Errno::AGAIN) => break,
                Err(_) => {
                    any = true;
                    self.overflow.store(next, Ordering::Release);
                    break;
                }
            }
        }
        if any {
            state.drains = next;
        }
        state.drains
    }
}

/// A drain of this process's watches: what a check of a watched file's
/// length may rely on ([`Storage::current_len_since`](super::Storage::current_len_since)).
/// Take one per batch, just before its checks.
#[derive(Debug, Clone, Default)]
pub struct Drained(Option<(Arc<Watches>, u64)>);

impl Drained {
    /// Reads this process's queue of events now (one system call; nothing
    /// when no file is watched yet).
    #[must_use]
    pub fn now() -> Drained {
        let held = current().and_then(|held| held.clone());
        let generation = crate::fork::generation();
        match held.filter(|w| w.generation == generation) {
            Some(w) => {
                let at = w.drain();
                Drained(Some((w, at)))
            }
            None => Drained(None),
        }
    }
}

/// One mapped file's watch, and its length as last checked.
#[derive(Debug)]
pub(crate) struct Watch {
    watches: Arc<Watches>,
    shared: Arc<Shared>,
    /// `(drain number before the check, length)` of the last check.
    checked: Mutex<Option<(u64, u64)>>,
}

impl Watch {
    /// Watches `file` (open, and about to be mapped) in this process's
    /// instance; `None` when it cannot be (not a local file system, no
    /// inotify, out of watches): its length is then asked each time.
    pub(crate) fn new(file: &File) -> Option<Watch> {
        let fs = rustix::fs::fstatfs(file).ok()?;
        // `f_type`'s integer type differs between architectures.
        let kind = i128::from(fs.f_type);
        if !LOCAL_FILE_SYSTEMS.contains(&kind) {
            return None;
        }
        let watches = Watches::current()?;
        // The open file itself (the magic link names its inode), not a
        // path that may name another file by now.
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let mut state = lock(&watches.state);
        let wd = inotify::add_watch(&watches.fd, path, mask()).ok()?;
        // A descriptor the kernel reuses after dropping a watch starts
        // afresh; one still live is the same inode watched by another
        // handle.
        let shared = match state.watched.get(&wd) {
            Some(s) if s.changed.load(Ordering::Acquire) != u64::MAX => Arc::clone(s),
            _ => {
                let s = Arc::new(Shared {
                    wd,
                    changed: AtomicU64::new(0),
                });
                state.watched.insert(wd, Arc::clone(&s));
                s
            }
        };
        drop(state);
        Some(Watch {
            watches,
            shared,
            checked: Mutex::new(None),
        })
    }

    /// Whether the watch is of this process's instance (not of the
    /// process this one was forked from).
    pub(crate) fn is_here(&self) -> bool {
        self.watches.generation == crate::fork::generation()
    }

    /// The length checked last, if `drained` (a drain of this watch's
    /// instance) shows no event for the file since that check.
    pub(crate) fn unchanged(&self, drained: &Drained) -> Option<u64> {
        let (watches, _) = drained.0.as_ref()?;
        if !Arc::ptr_eq(watches, &self.watches) {
            return None;
        }
        let (at, len) = (*lock(&self.checked))?;
        let changed = self.shared.changed.load(Ordering::Acquire);
        let overflow = self.watches.overflow.load(Ordering::Acquire);
        (changed <= at && overflow <= at).then_some(len)
    }

    /// Records `len`, read by a `statx` made after `drained`.
    pub(crate) fn record(&self, drained: &Drained, len: u64) {
        if let Some((watches, at)) = &drained.0
            && Arc::ptr_eq(watches, &self.watches)
        {
            *lock(&self.checked) = Some((*at, len));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // A forked child's copy of its parent's instance is the parent's:
        // leave its watches alone.
        if self.watches.generation != crate::fork::generation() {
            return;
        }
        let mut state = lock(&self.watches.state);
        let last = state
            .watched
            .get(&self.shared.wd)
            .is_some_and(|s| Arc::ptr_eq(s, &self.shared) && Arc::strong_count(s) == 2);
        if last {
            state.watched.remove(&self.shared.wd);
            if self.shared.changed.load(Ordering::Acquire) != u64::MAX {
                let _ = inotify::remove_watch(&self.watches.fd, self.shared.wd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file of `len` bytes in a fresh directory (kept alive by the
    /// returned guard), opened read-only and watched; `None` when the test
    /// directory's file system is not one that is watched.
    fn watched(len: usize) -> Option<(tempfile::TempDir, std::path::PathBuf, File, Watch)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.zr");
        std::fs::write(&path, vec![7u8; len]).unwrap();
        let file = File::open(&path).unwrap();
        let watch = Watch::new(&file)?;
        Some((dir, path, file, watch))
    }

    #[test]
    fn a_length_is_kept_until_the_file_has_an_event() {
        let Some((_dir, path, _file, watch)) = watched(100) else {
            eprintln!("skipped: the temporary directory's file system is not watched");
            return;
        };
        let first = Drained::now();
        assert_eq!(watch.unchanged(&first), None, "never checked yet");
        watch.record(&first, 100);
        assert_eq!(watch.unchanged(&Drained::now()), Some(100));
        // Cut from another handle: the next drain sees it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(40)
            .unwrap();
        let after = Drained::now();
        assert_eq!(watch.unchanged(&after), None);
        watch.record(&after, 40);
        assert_eq!(watch.unchanged(&Drained::now()), Some(40));
        // A write (no change of length) is an event too.
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all(b"x").unwrap();
        assert_eq!(watch.unchanged(&Drained::now()), None);
        // A drain of no instance (a token from before any watch, or of
        // another process's instance) never vouches for a length.
        assert_eq!(watch.unchanged(&Drained(None)), None);
    }

    #[test]
    fn two_handles_of_one_file_share_its_watch_and_either_may_go_first() {
        let Some((_dir, path, file, a)) = watched(10) else {
            return;
        };
        let b = Watch::new(&file).unwrap();
        assert!(Arc::ptr_eq(&a.shared, &b.shared));
        let now = Drained::now();
        a.record(&now, 10);
        b.record(&now, 10);
        drop(a);
        // The watch stays for `b`.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        assert_eq!(b.unchanged(&Drained::now()), None);
    }
}
