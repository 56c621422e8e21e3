//! [`BufferAllocator`]: where batch buffers come from and go back to, and
//! [`VecPool`], the default that recycles plain `Vec<u8>`s.
//!
//! Reuse matters for speed: a fresh multi-MiB buffer per batch costs a page
//! fault per 4 KiB the first time the gather writes it, which can take as
//! long as the gather itself.

use std::{
    fmt,
    sync::{Mutex, PoisonError},
};

/// Supplies the buffers batches are gathered into, and takes them back.
///
/// A binding can hand out memory its runtime will own (for instance a `Vec`
/// that numpy adopts without a copy) or a buffer type whose `Drop` returns
/// it to a pool; the default, [`VecPool`], recycles what
/// [`Loader::recycle`](crate::Loader::recycle) gives back.
///
/// Called from the loader's worker threads, concurrently.
pub trait BufferAllocator: Send + Sync + fmt::Debug + 'static {
    /// A batch buffer.
    type Buffer: AsRef<[u8]> + AsMut<[u8]> + Send + 'static;

    /// A buffer of exactly `len` bytes for stream number `stream` (its
    /// position in the loader's stream list), or `None` when the memory is
    /// not available (the batch then fails with
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory)). The contents are
    /// overwritten by the gather.
    fn allocate(&self, stream: usize, len: usize) -> Option<Self::Buffer>;

    /// Takes back a buffer of stream `stream` that nobody uses any more: one
    /// the consumer recycled, or one of a batch the loader discarded (on
    /// close, restore, or a failed batch). The default drops it.
    fn recycle(&self, stream: usize, buffer: Self::Buffer) {
        let _ = stream;
        drop(buffer);
    }
}

/// The default allocator: `Vec<u8>` buffers, reused per stream.
///
/// Keeps at most `keep` returned buffers per stream; more are freed.
/// A reused buffer is resized to the request (a ragged stream's batches vary
/// in size), which only touches new bytes when it grows.
#[derive(Debug)]
pub struct VecPool {
    free: Mutex<Vec<Vec<Vec<u8>>>>,
    keep: usize,
}

impl VecPool {
    /// Buffers kept per stream by [`VecPool::new`].
    pub const DEFAULT_KEEP: usize = 16;

    /// A pool keeping up to [`VecPool::DEFAULT_KEEP`] buffers per stream.
    pub fn new() -> VecPool {
        VecPool::with_keep(VecPool::DEFAULT_KEEP)
    }

    /// A pool keeping up to `keep` buffers per stream.
    pub fn with_keep(keep: usize) -> VecPool {
        VecPool {
            free: Mutex::new(Vec::new()),
            keep,
        }
    }

    /// Buffers waiting to be reused, over all streams.
    pub fn pooled(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        free.iter().map(Vec::len).sum()
    }
}

impl Default for VecPool {
    fn default() -> VecPool {
        VecPool::new()
    }
}

impl BufferAllocator for VecPool {
    type Buffer = Vec<u8>;

    fn allocate(&self, stream: usize, len: usize) -> Option<Vec<u8>> {
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            free.get_mut(stream).and_then(Vec::pop)
        };
        match reused {
            Some(mut buf) if buf.capacity() >= len => {
                buf.resize(len, 0);
                Some(buf)
            }
            // Growing would copy bytes about to be overwritten; a zeroed
            // allocation is cheaper.
            _ => {
                // `vec![0; len]` would abort rather than fail.
                let mut buf = Vec::new();
                buf.try_reserve_exact(len).ok()?;
                buf.resize(len, 0);
                Some(buf)
            }
        }
    }

    fn recycle(&self, stream: usize, buffer: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() <= stream {
            free.resize_with(stream + 1, Vec::new);
        }
        if free[stream].len() < self.keep {
            free[stream].push(buffer);
            return;
        }
        drop(free);
        drop(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_per_stream_and_respects_keep() {
        let pool = VecPool::with_keep(1);
        let a = pool.allocate(0, 1000).unwrap();
        let ptr = a.as_ptr();
        pool.recycle(0, a);
        pool.recycle(0, vec![0; 10]); // over `keep`: freed
        assert_eq!(pool.pooled(), 1);
        // Another stream does not take stream 0's buffer.
        assert_eq!(pool.allocate(1, 1000).unwrap().len(), 1000);
        let b = pool.allocate(0, 600).unwrap();
        assert_eq!((b.as_ptr(), b.len()), (ptr, 600));
        assert_eq!(pool.pooled(), 0);
    }
}
