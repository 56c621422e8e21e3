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
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use loaderx_loader::BufferAllocator;
use pyo3::prelude::*;

/// The size of a transparent huge page on x86-64 and (with 4 KiB base pages)
/// aarch64 Linux; large buffers are aligned to it.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Buffers at least this large are mapped (Linux) rather than taken from
/// the heap. Below it, the allocator's own reuse of freed memory is as good.
#[cfg(target_os = "linux")]
const MAP_AT_LEAST: usize = 1 << 20;

/// Where a [`PoolBuf`]'s memory comes from.
enum Memory {
    /// A zeroed heap allocation; its length is its capacity.
    Heap(Box<[u8]>),
    /// An anonymous private mapping of `cap` bytes at `ptr` (zero-filled by
    /// the kernel on first touch), `HUGE_PAGE`-aligned.
    #[cfg(target_os = "linux")]
    Mapped {
        ptr: std::ptr::NonNull<u8>,
        cap: usize,
    },
}

/// A batch buffer: `len` initialized bytes at the start of an allocation
/// that may be larger (a reused buffer of a ragged stream).
pub(crate) struct PoolBuf {
    memory: Memory,
    len: usize,
}

// SAFETY: a `PoolBuf` owns its memory exclusively (the mapping is never
// shared with another `PoolBuf`), like a `Box<[u8]>` does, so moving it to
// another thread is fine, and `&PoolBuf` only gives out `&[u8]`.
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
        // `vec![0; len]` would abort rather than fail; this resize is over
        // reserved capacity and compiles to a `memset`, for small buffers only
        // on Linux (large ones are mapped).
        heap.resize(len, 0);
        Some(PoolBuf {
            memory: Memory::Heap(heap.into_boxed_slice()),
            len,
        })
    }

    /// An anonymous mapping of at least `len` bytes (rounded up to whole
    /// huge pages), aligned to `HUGE_PAGE`, advised to use huge pages.
    #[cfg(target_os = "linux")]
    fn map(len: usize) -> Option<PoolBuf> {
        let cap = len.checked_next_multiple_of(HUGE_PAGE)?;
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
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE);
        let head = aligned - start;
        let tail = over - head - cap;
        // SAFETY: both ranges lie inside the mapping just made, outside
        // `aligned .. aligned + cap`, and are page-aligned (`head` and `tail`
        // are multiples of the base page size since `start`, `aligned`,
        // `over` and `cap` are).
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap(raw.cast::<u8>().add(head + cap).cast(), tail);
            }
            // Advice only: an error (e.g. a kernel without THP) changes
            // nothing but speed.
            libc::madvise(raw.cast::<u8>().add(head).cast(), cap, libc::MADV_HUGEPAGE);
        }
        let ptr = std::ptr::NonNull::new(aligned as *mut u8)?;
        Some(PoolBuf {
            memory: Memory::Mapped { ptr, cap },
            len,
        })
    }

    /// Bytes this buffer can hold without a new allocation.
    fn capacity(&self) -> usize {
        match &self.memory {
            Memory::Heap(heap) => heap.len(),
            #[cfg(target_os = "linux")]
            Memory::Mapped { cap, .. } => *cap,
        }
    }

    fn as_ptr(&self) -> *const u8 {
        match &self.memory {
            Memory::Heap(heap) => heap.as_ptr(),
            #[cfg(target_os = "linux")]
            Memory::Mapped { ptr, .. } => ptr.as_ptr(),
        }
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        match &mut self.memory {
            Memory::Heap(heap) => heap.as_mut_ptr(),
            #[cfg(target_os = "linux")]
            Memory::Mapped { ptr, .. } => ptr.as_ptr(),
        }
    }
}

impl AsRef<[u8]> for PoolBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len <= capacity()` (see `BatchPool::allocate`), and every
        // byte of the allocation is initialized (zeroed when made).
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }
}

impl AsMut<[u8]> for PoolBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        // SAFETY: as in `as_ref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), len) }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Memory::Mapped { ptr, cap } = self.memory {
            // SAFETY: the mapping `map` made and nothing else unmaps; no
            // reference into it outlives `self`.
            unsafe { libc::munmap(ptr.as_ptr().cast(), cap) };
        }
    }
}

impl fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

/// The native loader's batch buffers: reused per stream, at most `keep`
/// idle ones per stream.
pub(crate) struct BatchPool {
    free: Mutex<Vec<Vec<PoolBuf>>>,
    keep: usize,
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
            closed: AtomicBool::new(false),
            created_by: std::process::id(),
        }
    }

    /// Frees the idle buffers, and from now on every returned one.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if std::process::id() == self.created_by {
            let idle =
                std::mem::take(&mut *self.free.lock().unwrap_or_else(PoisonError::into_inner));
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
        let reused = {
            let mut free = self.0.free.lock().unwrap_or_else(PoisonError::into_inner);
            free.get_mut(stream).and_then(|list| {
                // The most recently returned buffer that fits (its pages are
                // the likeliest to be cached); a ragged stream's batches vary
                // in size.
                let at = list.iter().rposition(|b| b.capacity() >= len)?;
                Some(list.swap_remove(at))
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
        let list = &mut free[stream];
        if list.len() < pool.keep {
            list.push(buffer);
            return;
        }
        // Full: keep the larger buffer (it fits more of a ragged stream's
        // batches), free the smaller one outside the lock.
        let smallest = list
            .iter()
            .enumerate()
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        let freed = match smallest {
            Some(i) if list[i].capacity() < buffer.capacity() => {
                std::mem::replace(&mut list[i], buffer)
            }
            _ => buffer,
        };
        drop(free);
        drop(freed);
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
        let bytes = owner.get().buffer.as_ref().map_or(&[][..], AsRef::as_ref);
        let view = numpy::ndarray::ArrayView1::from(bytes);
        // SAFETY: the array's base is `owner`, which keeps the buffer (a
        // heap or mapped allocation that never moves) until it is dropped;
        // `owner` is frozen and never touches the bytes before then. NumPy
        // writes through the array are writes to memory the buffer owns
        // exclusively.
        let array = unsafe { numpy::PyArray1::borrow_from_array(&view, owner.clone().into_any()) };
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
