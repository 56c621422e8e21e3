//! Batch buffers that go back to a pool when the NumPy array viewing them
//! dies.
//!
//! A batch of 256 images of `uint8(3, 224, 224)` is 37.6 MiB. Handing each
//! one to NumPy as an adopted `Vec` meant a fresh allocation per batch,
//! whose pages the kernel faults in and clears 4 KiB at a time the first
//! time the gather writes them: that cost about as much as the gather. So:
//!
//! * [`BatchPool`] is the loader's [`BufferAllocator`]: it hands out
//!   [`PoolBuf`]s, reusing returned ones per stream, and keeps at most
//!   `keep` idle buffers per stream (more are freed).
//! * [`BatchBuffer`] is the Python object that owns a buffer while NumPy
//!   uses it: `next()` makes each column's array a view whose base is a
//!   `BatchBuffer`, and when the last array (or view of it) goes, Python
//!   drops the `BatchBuffer`, whose `Drop` gives the buffer back to the
//!   pool. A buffer a user keeps alive is simply not reused; nothing is
//!   reused or freed while an array still points into it.
//! * [`Output`] is the same idea for direct reads (`Dense[idx]`, a ragged
//!   gather, decoded images): each `Store` handle keeps an [`output_pool`]
//!   and a batch of at least [`POOLED_OUTPUT_BYTES`] is gathered into one of
//!   its buffers, so a training loop that gathers batch after batch and
//!   drops each one writes into warm pages instead of asking the kernel for
//!   (and clearing) fresh ones every step. Smaller batches stay ordinary
//!   heap allocations, which the system allocator already recycles.
//! * New large buffers skip any user-space zero-fill and, on Linux, are
//!   anonymous mappings aligned to 2 MiB with `MADV_HUGEPAGE`, so the
//!   kernel can back them with transparent huge pages (a fault per 2 MiB
//!   instead of per 4 KiB) when the system allows it (`madvise` or `always`
//!   in `/sys/kernel/mm/transparent_hugepage/enabled`; with `never` the
//!   advice is ignored). Elsewhere they are zeroed heap allocations
//!   (`calloc`, which for sizes this large gets fresh pages from the OS
//!   already zeroed, without a `memset`).

use std::{
    fmt,
    ptr::NonNull,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use loaderx_loader::BufferAllocator;
use pyo3::exceptions::{PyMemoryError, PyRuntimeError};
use pyo3::prelude::*;

/// The size of a transparent huge page on x86-64 and (with 4 KiB base pages)
/// aarch64 Linux; large buffers are aligned to it. (With 64 KiB base pages
/// THPs are 512 MiB and these buffers just get base pages, as before.)
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Buffers at least this large are mapped (Linux) rather than taken from
/// the heap: a smaller one could not hold a huge page anyway.
#[cfg(target_os = "linux")]
const MAP_AT_LEAST: usize = HUGE_PAGE;

/// Direct reads whose output is at least this large gather into a pooled
/// buffer ([`Output`]); smaller ones into ordinary allocations. Below it the
/// system allocator already reuses freed memory (glibc serves requests
/// under its adaptive mmap threshold, up to 32 MiB, from the heap), and a
/// pooled buffer could not hold a huge page.
pub(crate) const POOLED_OUTPUT_BYTES: usize = 2 << 20;

/// Idle buffers a store handle keeps per kind of direct read: one for the
/// batch being dropped while the next is gathered, one spare.
const OUTPUT_KEEP: usize = 2;

/// Kinds of direct read, each with its own free list in a handle's pool.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OutputKind {
    Dense = 0,
    Ragged = 1,
    Images = 2,
    /// Regions taken by `Allocator.acquire` (an [`OutputPool`] only).
    Acquired = 3,
}

/// A new pool for one store handle's direct reads.
pub(crate) fn output_pool() -> SharedPool {
    SharedPool(Arc::new(BatchPool::new(OUTPUT_KEEP)))
}

/// The buffer a direct read fills: pooled when large, else a plain vector.
pub(crate) enum Output {
    Heap(Vec<u8>),
    Pooled(PoolBuf),
}

impl Output {
    /// `len` zeroed or recycled bytes (a recycled buffer holds an earlier
    /// batch's bytes: the caller overwrites all `len` of them), or `None`
    /// when the memory is not there.
    pub(crate) fn allocate(pool: &SharedPool, kind: OutputKind, len: usize) -> Option<Output> {
        if len >= POOLED_OUTPUT_BYTES {
            return pool.allocate(kind as usize, len).map(Output::Pooled);
        }
        let mut heap = Vec::new();
        heap.try_reserve_exact(len).ok()?;
        heap.resize(len, 0);
        Some(Output::Heap(heap))
    }

    /// [`allocate`](Self::allocate), or the engine's out-of-memory error.
    pub(crate) fn allocate_or_oom(
        pool: &SharedPool,
        kind: OutputKind,
        len: usize,
    ) -> loaderx_store::Result<Output> {
        Output::allocate(pool, kind, len)
            .ok_or(loaderx_store::Error::OutOfMemory { bytes: len as u64 })
    }

    /// A NumPy `uint8` array over the bytes: a pooled buffer goes back to
    /// `pool` once the array and its views are gone.
    pub(crate) fn into_array<'py>(
        self,
        py: Python<'py>,
        pool: &SharedPool,
        kind: OutputKind,
    ) -> PyResult<Bound<'py, numpy::PyArray1<u8>>> {
        match self {
            Output::Heap(heap) => Ok(numpy::PyArray1::from_vec(py, heap)),
            Output::Pooled(buf) => BatchBuffer::into_array(py, buf, kind as usize, pool.clone()),
        }
    }
}

impl AsMut<[u8]> for Output {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            Output::Heap(heap) => heap,
            Output::Pooled(buf) => buf.as_mut(),
        }
    }
}

/// A batch buffer: `len` initialized bytes at the start of an allocation
/// of `cap` bytes (more for a reused buffer of a ragged stream).
///
/// Held as a raw pointer, never as a Rust reference, because NumPy writes
/// through it while a [`BatchBuffer`] owns it.
pub(crate) struct PoolBuf {
    /// Every one of the `cap` bytes is initialized (zeroed when made).
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
    /// An anonymous mapping (`map`) rather than a leaked `Box<[u8]>`.
    mapped: bool,
}

// SAFETY: a `PoolBuf` owns its allocation exclusively, as a `Box<[u8]>`
// does, so it may move to another thread; `&PoolBuf` only gives out `&[u8]`.
unsafe impl Send for PoolBuf {}
// SAFETY: see `Send`: shared access is read-only.
unsafe impl Sync for PoolBuf {}

impl PoolBuf {
    /// A new buffer of `len` bytes, or `None` if the memory is not there.
    fn new(len: usize) -> Option<PoolBuf> {
        #[cfg(target_os = "linux")]
        if len >= MAP_AT_LEAST {
            return PoolBuf::map(len);
        }
        let mut heap = Vec::new();
        heap.try_reserve_exact(len).ok()?;
        // `vec![0; len]` would abort rather than fail. On Linux only small
        // buffers get here (large ones are mapped); elsewhere this is the
        // path for all, and for large sizes the system allocator takes fresh
        // pages from the OS, which arrive zeroed (no faulting in at
        // allocation: pages are touched first by the gather).
        heap.resize(len, 0);
        let raw = Box::into_raw(heap.into_boxed_slice());
        Some(PoolBuf {
            ptr: NonNull::new(raw.cast::<u8>())?,
            cap: len,
            len,
            mapped: false,
        })
    }

    /// An anonymous mapping of `len` bytes (rounded up to whole base
    /// pages) starting on a `HUGE_PAGE` boundary, advised to use huge pages.
    /// Not rounded up to whole huge pages: the partial last one is simply
    /// backed by base pages, so no memory is wasted.
    #[cfg(target_os = "linux")]
    fn map(len: usize) -> Option<PoolBuf> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two() && *p <= HUGE_PAGE)?;
        let cap = len.checked_next_multiple_of(page)?;
        // Map one huge page more than needed and trim both ends to get the
        // alignment: mmap only promises base-page alignment.
        let over = cap.checked_add(HUGE_PAGE)?;
        // SAFETY: a fresh anonymous private mapping; no existing memory is
        // touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let head = (raw as usize).next_multiple_of(HUGE_PAGE) - raw as usize;
        let tail = over - head - cap;
        // SAFETY: both trimmed ranges lie inside the mapping just made,
        // outside the `cap` bytes kept at `raw + head`, and are page-aligned
        // (`raw`, `HUGE_PAGE` and `cap` are multiples of the page size).
        let aligned = unsafe {
            let aligned = raw.cast::<u8>().add(head);
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap(aligned.add(cap).cast(), tail);
            }
            // Advice only: an error (e.g. a kernel without THP) changes
            // nothing but speed.
            libc::madvise(aligned.cast(), cap, libc::MADV_HUGEPAGE);
            aligned
        };
        Some(PoolBuf {
            ptr: NonNull::new(aligned)?,
            cap,
            len,
            mapped: true,
        })
    }
}

impl AsRef<[u8]> for PoolBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len <= cap` (see `SharedPool::allocate`) and all `cap`
        // bytes are initialized; the allocation lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsMut<[u8]> for PoolBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`, and `&mut self` makes the access exclusive
        // (a buffer reaches Python, which could also write it, only by value
        // inside a `BatchBuffer`, which never calls this).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if self.mapped {
            #[cfg(target_os = "linux")]
            // SAFETY: the mapping `map` made, which nothing else unmaps; no
            // reference into it outlives `self`.
            unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.cap);
            }
        } else {
            let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.cap);
            // SAFETY: `new` leaked exactly this `Box<[u8]>` of `cap` bytes.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

impl fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuf")
            .field("len", &self.len)
            .field("capacity", &self.cap)
            .finish()
    }
}

/// The native loader's batch buffers: reused per stream, at most `keep`
/// idle ones per stream, and with a byte budget ([`BatchPool::with_budget`])
/// at most that many idle bytes in all.
pub(crate) struct BatchPool {
    free: Mutex<Vec<Vec<PoolBuf>>>,
    keep: usize,
    /// The most idle bytes kept, if bounded.
    budget: Option<usize>,
    /// The capacity of the idle buffers; changed only under `free`'s lock.
    idle_bytes: AtomicUsize,
    /// Set by `close()`: from then on returned buffers are freed.
    closed: AtomicBool,
    /// The process that made the pool. In a child forked from it, the mutex
    /// may have been held by a worker thread that does not exist there, so
    /// the child never takes it: its buffers are just freed.
    created_by: u32,
}

impl BatchPool {
    /// A pool keeping up to `keep` idle buffers per stream.
    pub(crate) fn new(keep: usize) -> BatchPool {
        BatchPool {
            free: Mutex::new(Vec::new()),
            keep,
            budget: None,
            idle_bytes: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            created_by: std::process::id(),
        }
    }

    /// A pool keeping idle buffers up to `bytes` of capacity in all (a
    /// buffer larger than that is freed when returned; returning one past
    /// the budget frees the longest idle first), however many.
    pub(crate) fn with_budget(bytes: usize) -> BatchPool {
        BatchPool {
            budget: Some(bytes),
            ..BatchPool::new(usize::MAX)
        }
    }

    /// The capacity of the idle buffers, in bytes.
    pub(crate) fn idle_bytes(&self) -> usize {
        self.idle_bytes.load(Ordering::Relaxed)
    }

    /// Frees the idle buffers, and from now on every returned one.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if std::process::id() == self.created_by {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            let idle = std::mem::take(&mut *free);
            self.idle_bytes.store(0, Ordering::Relaxed);
            drop(free);
            drop(idle);
        }
    }
}

impl fmt::Debug for BatchPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchPool")
            .field("keep", &self.keep)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The loader's allocator: a shared handle to the pool, which the
/// [`BatchBuffer`]s handed to Python hold too.
#[derive(Debug, Clone)]
pub(crate) struct SharedPool(pub(crate) Arc<BatchPool>);

impl BufferAllocator for SharedPool {
    type Buffer = PoolBuf;

    fn allocate(&self, stream: usize, len: usize) -> Option<PoolBuf> {
        if std::process::id() != self.0.created_by {
            // A forked child: the mutex may be held forever by a thread that
            // stayed in the parent (and the child recycles nothing anyway).
            return PoolBuf::new(len);
        }
        let reused = {
            let mut free = self.0.free.lock().unwrap_or_else(PoisonError::into_inner);
            free.get_mut(stream).and_then(|list| {
                // The most recently returned buffer that fits (its pages are
                // the likeliest to be cached; a ragged stream's batches vary
                // in size), or for `Allocator.acquire`, whose requests vary
                // widely, the smallest that fits: a small region must not
                // tie up a large buffer.
                let at = if stream == OutputKind::Acquired as usize {
                    (0..list.len())
                        .filter(|&i| list[i].cap >= len)
                        .min_by_key(|&i| list[i].cap)?
                } else {
                    list.iter().rposition(|b| b.cap >= len)?
                };
                let buf = list.remove(at);
                self.0.idle_bytes.fetch_sub(buf.cap, Ordering::Relaxed);
                Some(buf)
            })
        };
        match reused {
            Some(mut buf) => {
                // Bytes past the old `len` were initialized when the buffer
                // was made; the gather overwrites all `len` of them.
                buf.len = len;
                Some(buf)
            }
            None => PoolBuf::new(len),
        }
    }

    fn recycle(&self, stream: usize, buffer: PoolBuf) {
        let pool = &*self.0;
        if pool.closed.load(Ordering::Acquire) || std::process::id() != pool.created_by {
            return;
        }
        let mut free = pool.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() <= stream {
            free.resize_with(stream + 1, Vec::new);
        }
        if let Some(budget) = pool.budget {
            if buffer.cap > budget {
                drop(free);
                drop(buffer);
                return;
            }
            // Evict the longest idle (the front of each list) until it fits.
            let mut evicted = Vec::new();
            let mut idle = pool.idle_bytes.load(Ordering::Relaxed);
            for list in free.iter_mut() {
                while idle + buffer.cap > budget && !list.is_empty() {
                    let old = list.remove(0);
                    idle -= old.cap;
                    evicted.push(old);
                }
            }
            pool.idle_bytes.store(idle + buffer.cap, Ordering::Relaxed);
            free[stream].push(buffer);
            drop(free);
            drop(evicted);
            return;
        }
        let list = &mut free[stream];
        if list.len() < pool.keep {
            pool.idle_bytes.fetch_add(buffer.cap, Ordering::Relaxed);
            list.push(buffer);
            return;
        }
        // Full: keep the larger buffer (it fits more of a ragged stream's
        // batches), free the smaller one outside the lock.
        let smallest = list
            .iter()
            .enumerate()
            .min_by_key(|(_, b)| b.cap)
            .map(|(i, _)| i);
        let freed = match smallest {
            Some(i) if list[i].cap < buffer.cap => {
                pool.idle_bytes
                    .fetch_add(buffer.cap - list[i].cap, Ordering::Relaxed);
                std::mem::replace(&mut list[i], buffer)
            }
            _ => buffer,
        };
        drop(free);
        drop(freed);
    }
}

/// `loaderx._native.OutputPool(pool_size)`: the pool of a 2.8 `Allocator`.
/// Reads through its views of at least [`POOLED_OUTPUT_BYTES`] are gathered
/// into its buffers, which come back when the consumer drops every array
/// and capsule of the batch; at most `pool_size` bytes of them stay idle.
#[pyclass(module = "loaderx._native", name = "OutputPool", frozen)]
pub(crate) struct OutputPool(pub(crate) SharedPool);

#[pymethods]
impl OutputPool {
    #[new]
    fn new(pool_size: usize) -> Self {
        OutputPool(SharedPool(Arc::new(BatchPool::with_budget(pool_size))))
    }

    /// The capacity of the idle buffers, in bytes.
    #[getter]
    fn cached_bytes(&self) -> usize {
        self.0.0.idle_bytes()
    }

    /// The most idle bytes kept.
    #[getter]
    fn pool_size(&self) -> usize {
        self.0.0.budget.unwrap_or(usize::MAX)
    }

    /// Frees the idle buffers, and from now on every returned one.
    fn close(&self) {
        self.0.0.close();
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.0.0.closed.load(Ordering::Acquire)
    }

    /// `size` bytes of the pool (`Allocator.acquire`), as a NumPy `uint8`
    /// array whose buffer comes back to the pool once it and every view of
    /// it are gone. A reused buffer holds earlier bytes, a new one zeros.
    fn acquire<'py>(
        &self,
        py: Python<'py>,
        size: usize,
    ) -> PyResult<Bound<'py, numpy::PyArray1<u8>>> {
        if self.closed() {
            return Err(PyRuntimeError::new_err("allocator is closed"));
        }
        let kind = OutputKind::Acquired as usize;
        let buffer = self.0.allocate(kind, size).ok_or_else(|| {
            PyMemoryError::new_err(format!("the allocator cannot allocate {size} bytes"))
        })?;
        BatchBuffer::into_array(py, buffer, kind, self.0.clone())
    }
}

/// Owns one column's buffer while NumPy arrays view it; gives it back to
/// the loader's pool when the last of them goes.
#[pyclass(module = "loaderx._native", name = "BatchBuffer", frozen)]
pub(crate) struct BatchBuffer {
    /// `None` only while being dropped.
    buffer: Option<PoolBuf>,
    stream: usize,
    pool: SharedPool,
}

impl BatchBuffer {
    /// A NumPy `uint8` array over `buffer`, whose base owns it and returns
    /// it to `pool` once the array and every view of it are gone.
    pub(crate) fn into_array(
        py: Python<'_>,
        buffer: PoolBuf,
        stream: usize,
        pool: SharedPool,
    ) -> PyResult<Bound<'_, numpy::PyArray1<u8>>> {
        let owner = Bound::new(
            py,
            BatchBuffer {
                buffer: Some(buffer),
                stream,
                pool,
            },
        )?;
        let (ptr, len) = owner
            .get()
            .buffer
            .as_ref()
            .map_or((NonNull::dangling(), 0), |b| (b.ptr, b.len));
        // SAFETY: `ptr` points at `len` initialized bytes (see `PoolBuf`).
        let view = unsafe { numpy::ndarray::ArrayView1::from_shape_ptr(len, ptr.as_ptr()) };
        // SAFETY: the array's base is `owner`, which keeps the allocation
        // (heap or mapped, never moved) until it is dropped, and which is
        // frozen and never touches the bytes before then; so NumPy's reads
        // and writes through the array reach memory only it uses.
        let array = unsafe { numpy::PyArray1::borrow_from_array(&view, owner.into_any()) };
        Ok(array)
    }
}

impl Drop for BatchBuffer {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.pool.recycle(self.stream, buffer);
        }
    }
}

#[pymethods]
impl BatchBuffer {
    /// Bytes in the buffer.
    fn __len__(&self) -> usize {
        self.buffer.as_ref().map_or(0, |b| b.len)
    }
}
