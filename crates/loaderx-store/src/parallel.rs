//! Fan-out of per-record work over a thread pool, and the one raw-pointer
//! type that lets workers write disjoint parts of a caller's buffer.
//!
//! Unsafe here (allowed by name in `lib.rs`), each use sound for its own
//! reason, argued where it sits:
//!
//! * [`SharedDst::range_mut`]: workers write ranges of the caller's buffer
//!   through a raw pointer. Its callers prove the ranges in bounds and
//!   disjoint, and hand each to one worker (`for_strided` does that
//!   itself, so its callers need no `unsafe`).
//! * [`for_ranges`]: the per-part closure borrows the caller's stack and is
//!   handed to `'static` pool jobs with its lifetime erased; a job calls it
//!   only after claiming a part, and the caller returns only once every
//!   claimed part has finished. It never unwinds (panics are parked).
//! * [`pool`]: the pool is published through an `AtomicPtr` to a leaked
//!   `Box`, never freed, so a loaded pointer never dangles.
//! * `block_interrupts` (Unix): `pthread_sigmask` on a local, initialised
//!   `sigset_t`, changing only the calling thread's mask.
//!
//! The pool is rayon's, but owned here and tied to the process (by its fork
//! generation, which the store's `pthread_atfork` handler counts): a child
//! created by `fork()` inherits the pool's bookkeeping but none of its
//! threads, so the first parallel call in a child builds a fresh pool (the
//! dead one is leaked on purpose: dropping it would wait for threads that do
//! not exist). That is what keeps a store opened before `os.fork()` usable in
//! PyTorch-style worker processes.

use std::{
    ops::Range,
    panic::{self, AssertUnwindSafe},
    sync::{
        Arc, Condvar, Mutex, OnceLock,
        atomic::{AtomicPtr, AtomicUsize, Ordering},
    },
};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::Result;

/// Work (in raw-copy byte equivalents) below which a batch runs on the
/// calling thread: sharing it costs more than it saves. A second thread
/// pays off from a few hundred KiB of raw copying, and already for two
/// compressed records (their decode cost weighs them: `gather.rs`,
/// `decode_cost`). The `gather-small` rows of `docs/bench/rust.md`
/// ("Store") are what place it; `LOADERX_SERIAL_BYTES` moves it to measure
/// another machine.
pub(crate) const SERIAL_BYTES: u64 = 256 << 10;

/// The threshold in force: [`SERIAL_BYTES`], unless the environment variable
/// `LOADERX_SERIAL_BYTES` (read once) says otherwise — for measuring it on a
/// given machine (`0` = always parallel).
pub(crate) fn serial_bytes() -> u64 {
    static VALUE: OnceLock<u64> = OnceLock::new();
    *VALUE.get_or_init(|| env_bytes("LOADERX_SERIAL_BYTES", SERIAL_BYTES))
}

/// The byte count the environment variable `name` holds, else `default`.
fn env_bytes(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Records at least this large (logical bytes) are read with a positioned
/// read (`pread`) instead of from the map — raw ones straight into the
/// destination, compressed ones into a per-thread scratch buffer that they
/// are decoded from: the kernel copies them out of the page cache without
/// mapping the pages into this process,
/// so a loader streaming through a store many times the size of its
/// batches does not carry the store's touched pages in its resident and
/// proportional memory (the page cache holds them either way), and no
/// first-touch page faults are taken. Smaller records stay on the map,
/// where a system call per record would cost more than the copy.
pub(crate) const COPY_READS_AT: u64 = 64 << 10;

/// The threshold in force: [`COPY_READS_AT`], unless the environment
/// variable `LOADERX_COPY_READS_AT` (read once) says otherwise (bytes;
/// `0` = always, a huge value = never) — for measuring it on a machine.
pub(crate) fn copy_reads_at() -> u64 {
    static VALUE: OnceLock<u64> = OnceLock::new();
    *VALUE.get_or_init(|| env_bytes("LOADERX_COPY_READS_AT", COPY_READS_AT))
}

/// Scratch buffers at most this large stay with their thread for the next
/// record; a larger one is freed after use.
const SCRATCH_KEPT: usize = 8 << 20;

/// Runs `f` on `len` bytes of this thread's scratch buffer (contents
/// unspecified: `f` overwrites them), growing it as needed. Not reentrant:
/// `f` must not call it again.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|cell| {
        let mut buf = cell.borrow_mut();
        if buf.len() < len {
            buf.clear();
            buf.try_reserve_exact(len)
                .map_err(|_| crate::Error::OutOfMemory { bytes: len as u64 })?;
            buf.resize(len, 0);
        }
        let out = f(&mut buf[..len]);
        if buf.len() > SCRATCH_KEPT {
            *buf = Vec::new();
        }
        out
    })
}

struct Pool {
    /// The fork generation of the process that built it.
    generation: u64,
    pool: Arc<ThreadPool>,
}

/// The pool of the process that built it. A pointer rather than a mutex: a
/// child forked while a thread of its parent held such a mutex would wait
/// for it forever. Every `Pool` ever published is leaked (one per process
/// that gathers in parallel), so a pointer loaded here never dangles.
static POOL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());

/// The process's pool, built on first use and rebuilt after a fork.
pub(crate) fn pool() -> Arc<ThreadPool> {
    let here = crate::process_generation();
    let mut seen = POOL.load(Ordering::Acquire);
    loop {
        // SAFETY: non-null values of `POOL` come from `Box::leak` below and
        // are never freed.
        if let Some(p) = unsafe { seen.as_ref() }
            && p.generation == here
        {
            return Arc::clone(&p.pool);
        }
        // None yet, or inherited across fork(): its threads are gone, so
        // it is never joined (it stays leaked). Build this process's own.
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let built = Box::leak(Box::new(Pool {
            generation: here,
            pool: Arc::new(
                ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("loaderx-{i}"))
                    .start_handler(|_| block_interrupts())
                    .build()
                    .expect("spawning the loaderx thread pool"),
            ),
        }));
        match POOL.compare_exchange(seen, built, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Arc::clone(&built.pool),
            Err(now) => {
                // Another thread published first: use its pool, let ours go.
                // SAFETY: `built` was leaked just above and never published.
                drop(unsafe { Box::from_raw(std::ptr::from_mut(built)) });
                seen = now;
            }
        }
    }
}

/// Keeps `SIGINT` and `SIGTERM` away from this (pool) thread, so the kernel
/// delivers them to a thread of the host program instead. A Python program
/// handles them on its main thread: when that thread is blocked in a read
/// (of a pipe, say) and the signal lands on a pool thread, the read is never
/// interrupted and Ctrl-C does nothing until the read returns. Checked on
/// Linux.
#[cfg(unix)]
fn block_interrupts() {
    // SAFETY: `set` is a local `sigset_t` initialised by `sigemptyset`
    // before use; `pthread_sigmask` only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGINT);
        libc::sigaddset(&raw mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
    }
}

/// Windows has no signal masks (Ctrl-C runs a handler on a thread of its
/// own).
#[cfg(not(unix))]
fn block_interrupts() {}

/// Number of worker threads a parallel batch is split over.
pub(crate) fn threads() -> usize {
    pool().current_num_threads()
}

/// Runs `work` over `0..n`, split into contiguous ranges, or on the calling
/// thread alone when `bytes` of work is too little to be worth sharing.
/// Returns the first error in index order.
///
/// The calling thread works too: it and up to `threads − 1` pool helpers
/// claim parts from a shared counter until none are left, then the caller
/// waits only for parts already claimed. A helper that the scheduler starts
/// late (the other core is busy) finds nothing left and never delays the
/// batch, and a small batch never pays for a thread hand-off in each
/// direction.
pub(crate) fn for_ranges<F>(n: usize, bytes: u64, work: F) -> Result<()>
where
    F: Fn(Range<usize>) -> Result<()> + Sync,
{
    if n == 0 {
        return Ok(());
    }
    // Before the pool is asked for (an atomic load and a lock).
    if n == 1 || bytes < serial_bytes() {
        return work(0..n);
    }
    let pool = pool();
    let threads = pool.current_num_threads();
    if threads == 1 {
        return work(0..n);
    }
    let parts = (threads * 4).min(n);
    let errors: Mutex<Vec<(usize, crate::Error)>> = Mutex::new(Vec::new());
    let panicked: Mutex<Option<Box<dyn std::any::Any + Send>>> = Mutex::new(None);
    // Never unwinds: errors and panics are parked for the caller.
    let body = |part: usize| {
        let range = (part * n / parts)..((part + 1) * n / parts);
        match panic::catch_unwind(AssertUnwindSafe(|| work(range))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => lock(&errors).push((part, e)),
            Err(payload) => {
                lock(&panicked).get_or_insert(payload);
            }
        }
    };
    let body: &(dyn Fn(usize) + Sync) = &body;
    // SAFETY: only the lifetime is erased (same fat-pointer layout). The
    // pointer is dereferenced only by whoever claims a part below `parts`
    // (`Shared::run`), and this function returns only once every claimed part
    // has finished (`done == parts`), so no dereference outlives `body`.
    // (A pointer cast cannot lengthen a trait object's lifetime; a transmute can.)
    #[allow(clippy::transmute_ptr_to_ptr)]
    let body: *const (dyn Fn(usize) + Sync + 'static) = unsafe {
        std::mem::transmute::<
            *const (dyn Fn(usize) + Sync + '_),
            *const (dyn Fn(usize) + Sync + 'static),
        >(body)
    };
    let shared = Arc::new(Shared {
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        parts,
        body,
        finished: Mutex::new(false),
        wake: Condvar::new(),
    });
    for _ in 1..threads {
        let helper = Arc::clone(&shared);
        pool.spawn(move || helper.run());
    }
    shared.run();
    let mut finished = lock(&shared.finished);
    while !*finished {
        finished = shared
            .wake
            .wait(finished)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
    drop(finished);
    if let Some(payload) = lock(&panicked).take() {
        panic::resume_unwind(payload);
    }
    first_error(errors)
}

/// The error of the lowest numbered part among `errors`, if any.
fn first_error(errors: Mutex<Vec<(usize, crate::Error)>>) -> Result<()> {
    let errors = errors
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match errors.into_iter().min_by_key(|(part, _)| *part) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Threads [`for_io_items`] shares writes out to, at least: while one waits
/// on the disk (faulting in a memory-mapped source, say), another copies.
/// More only contend for the same disk and cores (the append rows of
/// `docs/bench/rust.md`, "Store").
const IO_THREADS: usize = 2;

/// Work below this many bytes goes to [`for_ranges`] instead: starting
/// threads costs tens of microseconds.
const IO_SHARE_BYTES: u64 = 16 << 20;

/// Runs `work(state, i)` for every `i` in `0..n`, for work that waits on
/// I/O: at least [`IO_THREADS`] threads (scoped, started for this call,
/// the caller among them; each with a `state` of its own, such as a
/// scratch buffer) claim the items one at a time, in order, so items the
/// caller ordered to touch different files run side by side. Small work
/// (`bytes`) goes to [`for_ranges`]. Returns the error of the lowest item
/// that failed.
pub(crate) fn for_io_items<T, F>(n: usize, bytes: u64, work: F) -> Result<()>
where
    T: Default,
    F: Fn(&mut T, usize) -> Result<()> + Sync,
{
    let threads = IO_THREADS.max(self::threads()).min(n);
    if bytes < IO_SHARE_BYTES || threads < 2 {
        return for_ranges(n, bytes, |range| {
            let mut state = T::default();
            range.into_iter().try_for_each(|i| work(&mut state, i))
        });
    }
    let next = AtomicUsize::new(0);
    let errors: Mutex<Vec<(usize, crate::Error)>> = Mutex::new(Vec::new());
    let panicked: Mutex<Option<Box<dyn std::any::Any + Send>>> = Mutex::new(None);
    // Never unwinds: errors and the first panic are parked for the caller,
    // and once something panicked the items left are not started.
    let run = || {
        let mut state = T::default();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n || lock(&panicked).is_some() {
                break;
            }
            match panic::catch_unwind(AssertUnwindSafe(|| work(&mut state, i))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => lock(&errors).push((i, e)),
                Err(payload) => {
                    lock(&panicked).get_or_insert(payload);
                }
            }
        }
    };
    std::thread::scope(|scope| {
        for k in 1..threads {
            let helper = std::thread::Builder::new()
                .name(format!("loaderx-io-{k}"))
                .spawn_scoped(scope, || {
                    block_interrupts();
                    run();
                });
            if helper.is_err() {
                break; // No thread to be had: the ones running share the rest.
            }
        }
        run();
    });
    if let Some(payload) = lock(&panicked).take() {
        panic::resume_unwind(payload);
    }
    first_error(errors)
}

/// The parts of one [`for_ranges`] call, shared with the pool helpers.
struct Shared {
    /// Next part to claim.
    next: AtomicUsize,
    /// Parts finished.
    done: AtomicUsize,
    parts: usize,
    /// The caller's per-part work, lifetime erased (see `for_ranges`).
    body: *const (dyn Fn(usize) + Sync + 'static),
    finished: Mutex<bool>,
    wake: Condvar,
}

// SAFETY: `body` points at a `Sync` closure, so calling it from any thread is
// sound; the other fields are thread-safe. When it may be dereferenced is
// argued in `for_ranges`.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// Claims and runs parts until none are left.
    fn run(&self) {
        loop {
            let part = self.next.fetch_add(1, Ordering::AcqRel);
            if part >= self.parts {
                return;
            }
            // SAFETY: `part < parts` was claimed by this thread, so the caller
            // of `for_ranges` is still waiting for it and `body` is alive.
            let body = unsafe { &*self.body };
            body(part);
            if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.parts {
                *lock(&self.finished) = true;
                self.wake.notify_all();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `work` on every part, in parallel unless `bytes` of work is too
/// little to be worth a pool round trip.
pub(crate) fn for_each_part<T, F>(parts: Vec<T>, bytes: u64, work: F)
where
    T: Send,
    F: Fn(T) + Sync + Send,
{
    use rayon::iter::{IntoParallelIterator, ParallelIterator};
    if parts.len() <= 1 || bytes < serial_bytes() {
        parts.into_iter().for_each(work);
    } else {
        pool().install(|| parts.into_par_iter().for_each(work));
    }
}

/// Runs `work(range, out)` over `0..n` as [`for_ranges`] does, where `dst`
/// holds `n` slots of `stride` bytes (slot `i` at `i · stride`; the last
/// may be cut short by the end of `dst`) and `out` is the part of `dst`
/// that the slots of `range` cover: `dst[range.start · stride ..
/// range.end · stride]`, clamped to `dst`'s length. The parts handed to
/// distinct ranges never overlap, so the workers write their own slots
/// with no `unsafe` on the caller's side.
#[cfg(feature = "image")]
pub(crate) fn for_strided<F>(
    dst: &mut [u8],
    stride: usize,
    n: usize,
    bytes: u64,
    work: F,
) -> Result<()>
where
    F: Fn(Range<usize>, &mut [u8]) -> Result<()> + Sync,
{
    let len = dst.len();
    let shared = SharedDst::new(dst);
    for_ranges(n, bytes, |range| {
        let start = range.start.saturating_mul(stride).min(len);
        let end = range.end.saturating_mul(stride).min(len);
        // SAFETY: `start <= end <= len`, so the part lies inside `dst`,
        // which this call borrows mutably throughout; `for_ranges` hands
        // out disjoint ranges, one worker each, and the parts of disjoint
        // ranges of slots are disjoint (clamping keeps them so).
        let out = unsafe { shared.range_mut(start, end - start) };
        work(range, out)
    })
}

/// A caller's destination buffer, shared by the workers of one gather.
///
/// Each worker writes only the ranges of the records it was given; the gather
/// validated beforehand that all those ranges lie inside the buffer and do not
/// overlap, which is what makes handing out `&mut` sub-slices sound.
pub(crate) struct SharedDst {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: SharedDst is only a pointer and a length; every access goes through
// `range_mut`, whose contract (disjoint, in-bounds ranges) rules out data races.
unsafe impl Send for SharedDst {}
// SAFETY: as above; shared references only hand out disjoint ranges.
unsafe impl Sync for SharedDst {}

impl SharedDst {
    pub(crate) fn new(dst: &mut [u8]) -> SharedDst {
        SharedDst {
            ptr: dst.as_mut_ptr(),
            len: dst.len(),
        }
    }

    /// The buffer's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `len` bytes of the buffer starting at `start`.
    ///
    /// # Safety
    /// `start + len` must not exceed the buffer, and no other live reference
    /// may cover any byte of the range (callers hand each range to exactly one
    /// worker), and the buffer must outlive the returned slice.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn range_mut(&self, start: usize, len: usize) -> &mut [u8] {
        debug_assert!(start.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds and exclusive per the function's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_index_runs_exactly_once() {
        for n in [1usize, 2, 3, 7, 64, 1000] {
            let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            for_ranges(n, u64::MAX, |range| {
                for i in range {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
            .unwrap();
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n={n}");
        }
    }

    #[test]
    fn the_first_error_in_index_order_wins() {
        let err = for_ranges(100, u64::MAX, |range| {
            match range.clone().find(|&i| i == 30 || i == 80) {
                Some(i) => Err(crate::Error::IndexOutOfRange {
                    index: i as u64,
                    len: 0,
                }),
                None => Ok(()),
            }
        })
        .unwrap_err();
        assert!(matches!(
            err,
            crate::Error::IndexOutOfRange { index: 30, .. }
        ));
    }

    #[test]
    fn io_items_run_once_each_with_a_state_per_thread_and_the_lowest_error_wins() {
        for (n, bytes) in [(1usize, u64::MAX), (7, u64::MAX), (500, u64::MAX), (500, 0)] {
            let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            let states = AtomicU64::new(0);
            for_io_items(n, bytes, |seen: &mut Vec<usize>, i| {
                if seen.is_empty() {
                    states.fetch_add(1, Ordering::Relaxed);
                }
                // A thread's state persists across the items it claims, in order.
                assert!(seen.last().is_none_or(|&last| last < i));
                seen.push(i);
                hits[i].fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n={n}");
            assert!(states.load(Ordering::Relaxed) <= (IO_THREADS.max(threads()) * 4) as u64);
        }
        let err = for_io_items(100, u64::MAX, |(): &mut (), i| {
            if i == 30 || i == 80 {
                return Err(crate::Error::IndexOutOfRange {
                    index: i as u64,
                    len: 0,
                });
            }
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(
            err,
            crate::Error::IndexOutOfRange { index: 30, .. }
        ));
    }

    #[test]
    fn a_panic_in_an_io_item_reaches_the_caller_as_it_was() {
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            for_io_items(64, u64::MAX, |(): &mut (), i| {
                assert!(i != 10, "boom at 10");
                Ok(())
            })
        }))
        .unwrap_err();
        let message = caught
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| caught.downcast_ref::<String>().map(String::as_str));
        assert_eq!(message, Some("boom at 10"));
    }

    #[test]
    fn a_panic_reaches_the_caller_after_the_others_finish() {
        let finished = AtomicU64::new(0);
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            for_ranges(64, u64::MAX, |range| {
                assert!(!range.contains(&10), "boom");
                finished.fetch_add(range.len() as u64, Ordering::Relaxed);
                Ok(())
            })
        }));
        assert!(caught.is_err());
        // Every part that did not panic ran to completion before the unwind.
        assert!(finished.load(Ordering::Relaxed) >= 64 - 64 / 8);
    }
}
