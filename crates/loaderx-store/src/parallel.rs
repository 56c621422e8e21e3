//! Fan-out of per-record work over a thread pool, and the one raw-pointer
//! type that lets workers write disjoint parts of a caller's buffer.
//!
//! The pool is rayon's, but owned here and tied to the process id: a child
//! created by `fork()` inherits the pool's bookkeeping but none of its
//! threads, so the first parallel call in a child builds a fresh pool (the
//! dead one is leaked on purpose: dropping it would wait for threads that do
//! not exist). That is what keeps a store opened before `os.fork()` usable in
//! PyTorch-style worker processes.

use std::{
    ops::Range,
    sync::{Arc, Mutex},
};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::Result;

/// Work (in bytes moved) below which a batch runs on the calling thread:
/// a pool round trip costs more than it saves on batches this small.
/// Measured in `benches/benches/store.rs` (see `docs/BENCHMARKS.md`).
pub(crate) const SERIAL_BYTES: u64 = 96 << 10;

/// The threshold in force: [`SERIAL_BYTES`], unless the environment variable
/// `LOADERX_SERIAL_BYTES` (read once) says otherwise — for measuring it on a
/// given machine (`0` = always parallel).
pub(crate) fn serial_bytes() -> u64 {
    static VALUE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *VALUE.get_or_init(|| {
        std::env::var("LOADERX_SERIAL_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(SERIAL_BYTES)
    })
}

struct Pool {
    pid: u32,
    pool: Arc<ThreadPool>,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// The process's pool, built on first use and rebuilt after a fork.
pub(crate) fn pool() -> Arc<ThreadPool> {
    let pid = std::process::id();
    let mut slot = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = slot.as_ref()
        && p.pid == pid
    {
        return Arc::clone(&p.pool);
    }
    if let Some(stale) = slot.take() {
        // Inherited across fork(): its threads are gone, so it must never be
        // joined. Leak it.
        std::mem::forget(stale.pool);
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = Arc::new(
        ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("loaderx-{i}"))
            .build()
            .expect("spawning the loaderx thread pool"),
    );
    *slot = Some(Pool {
        pid,
        pool: Arc::clone(&pool),
    });
    pool
}

/// Number of worker threads a parallel batch is split over.
pub(crate) fn threads() -> usize {
    pool().current_num_threads()
}

/// Runs `work` over `0..n`, split into contiguous ranges across the pool, or
/// on the calling thread when `bytes` of work is too little to be worth it.
/// Returns the first error in index order.
pub(crate) fn for_ranges<F>(n: usize, bytes: u64, work: F) -> Result<()>
where
    F: Fn(Range<usize>) -> Result<()> + Sync,
{
    if n == 0 {
        return Ok(());
    }
    if n == 1 || bytes < serial_bytes() {
        return work(0..n);
    }
    let pool = pool();
    let parts = (pool.current_num_threads() * 2).clamp(1, n);
    let errors: Mutex<Vec<(usize, crate::Error)>> = Mutex::new(Vec::new());
    pool.scope(|s| {
        for p in 0..parts {
            let range = (p * n / parts)..((p + 1) * n / parts);
            let work = &work;
            let errors = &errors;
            s.spawn(move |_| {
                let start = range.start;
                if let Err(e) = work(range) {
                    errors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((start, e));
                }
            });
        }
    });
    let mut errors = errors.into_inner().unwrap_or_else(|p| p.into_inner());
    errors.sort_by_key(|(start, _)| *start);
    match errors.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
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
