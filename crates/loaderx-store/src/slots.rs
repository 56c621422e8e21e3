//! [`Slots`]: a table indexed by `u32` that allocates only the part in use,
//! shared between threads without a lock. Chunk ids are unbounded in format
//! v2, so per-chunk state (maps, known lengths) cannot be a fixed array.

use std::sync::OnceLock;

/// Bucket `b` holds slots `2^b - 1 .. 2^(b+1) - 1`; 33 buckets cover every `u32`.
const BUCKETS: usize = 33;

/// Per-id slots, each `T::default()` until used; buckets are allocated on
/// first touch, so a table whose ids stay small stays small.
pub(crate) struct Slots<T> {
    buckets: [OnceLock<Box<[T]>>; BUCKETS],
}

impl<T> std::fmt::Debug for Slots<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used = self.buckets.iter().filter(|b| b.get().is_some()).count();
        write!(f, "Slots({used} buckets)")
    }
}

fn locate(id: u32) -> (usize, usize) {
    let j = u64::from(id) + 1;
    let b = 63 - j.leading_zeros() as usize;
    (b, (j - (1 << b)) as usize)
}

impl<T: Default> Slots<T> {
    pub(crate) fn new() -> Slots<T> {
        Slots {
            buckets: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// Slot `id`, allocating its bucket when needed.
    pub(crate) fn get(&self, id: u32) -> &T {
        let (b, k) = locate(id);
        &self.buckets[b].get_or_init(|| (0..1usize << b).map(|_| T::default()).collect())[k]
    }

    /// Slot `id` if its bucket exists.
    pub(crate) fn peek(&self, id: u32) -> Option<&T> {
        let (b, k) = locate(id);
        self.buckets[b].get().map(|bucket| &bucket[k])
    }

    /// Slot `id` for exclusive use, if its bucket exists.
    pub(crate) fn peek_mut(&mut self, id: u32) -> Option<&mut T> {
        let (b, k) = locate(id);
        self.buckets[b].get_mut().map(|bucket| &mut bucket[k])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_to_distinct_slots_across_the_range() {
        let s: Slots<std::sync::atomic::AtomicU32> = Slots::new();
        for id in [0u32, 1, 2, 3, 6, 7, 1000, 65_536, 70_001] {
            s.get(id)
                .store(id + 1, std::sync::atomic::Ordering::Relaxed);
        }
        for id in [0u32, 1, 2, 3, 6, 7, 1000, 65_536, 70_001] {
            assert_eq!(s.get(id).load(std::sync::atomic::Ordering::Relaxed), id + 1);
        }
        assert!(s.peek(1 << 30).is_none());
        assert_eq!(locate(u32::MAX), (32, 0));
        assert_eq!(locate(u32::MAX - 1), (31, (1usize << 31) - 1));
    }
}
