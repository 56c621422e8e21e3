//! [`Slots`]: a table indexed by `u32` that allocates only the part in use,
//! shared between threads without a lock. Chunk ids are unbounded in format
//! v2, so per-chunk state (maps, known lengths) cannot be a fixed array.

use std::sync::OnceLock;

/// Bucket `b` holds slots `2^b - 1 .. 2^(b+1) - 1`; 33 buckets cover every `u32`.
const BUCKETS: usize = 33;

/// Buckets below this one are allocated whole (2^15 slots at most); from
/// it on, a bucket is a table of pages of [`PAGE`] slots, each allocated on
/// first touch. So touching any id, however large, allocates at most one
/// page and one page table (a few MiB), never `2^31` slots: chunk ids come
/// from headers and table entries, which a damaged or hostile store sets to
/// anything (docs/FORMAT.md, "Validation").
const PAGED: usize = 16;

/// Slots per page of a paged bucket.
const PAGE: usize = 1 << PAGED;

/// The pages of a paged bucket, each allocated on first touch.
type Pages<T> = Box<[OnceLock<Box<[T]>>]>;

/// Per-id slots, each `T::default()` until used; buckets (and pages of
/// large buckets) are allocated on first touch, so a table whose ids stay
/// small stays small, and one id far out costs one page.
pub(crate) struct Slots<T> {
    small: [OnceLock<Box<[T]>>; PAGED],
    paged: [OnceLock<Pages<T>>; BUCKETS - PAGED],
}

impl<T> std::fmt::Debug for Slots<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let small = self.small.iter().filter(|b| b.get().is_some()).count();
        let paged = self.paged.iter().filter(|b| b.get().is_some()).count();
        write!(f, "Slots({small} buckets, {paged} paged buckets)")
    }
}

/// The bucket of `id` and its place in it.
#[inline]
fn locate(id: u32) -> (usize, usize) {
    let j = u64::from(id) + 1;
    let b = 63 - j.leading_zeros() as usize;
    (b, (j - (1 << b)) as usize)
}

/// Pages of paged bucket `b`: enough for its ids that fit a `u32` (bucket
/// 32 holds one, `u32::MAX`).
fn pages_of(b: usize) -> usize {
    let first = (1u64 << b) - 1;
    let ids = (1u64 << b).min(u64::from(u32::MAX) - first + 1);
    ids.div_ceil(PAGE as u64) as usize
}

fn fresh<T: Default>(n: usize) -> Box<[T]> {
    (0..n).map(|_| T::default()).collect()
}

impl<T: Default> Slots<T> {
    pub(crate) fn new() -> Slots<T> {
        Slots {
            small: std::array::from_fn(|_| OnceLock::new()),
            paged: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// Slot `id`, allocating its bucket (or page) when needed.
    pub(crate) fn get(&self, id: u32) -> &T {
        let (b, k) = locate(id);
        if b < PAGED {
            return &self.small[b].get_or_init(|| fresh(1 << b))[k];
        }
        let pages = self.paged[b - PAGED].get_or_init(|| fresh(pages_of(b)));
        &pages[k / PAGE].get_or_init(|| fresh(PAGE))[k % PAGE]
    }

    /// Slot `id` if its bucket (and page) exists.
    #[inline]
    pub(crate) fn peek(&self, id: u32) -> Option<&T> {
        let (b, k) = locate(id);
        if b < PAGED {
            return self.small[b].get().map(|bucket| &bucket[k]);
        }
        let page = self.paged[b - PAGED].get()?[k / PAGE].get()?;
        Some(&page[k % PAGE])
    }

    /// Slot `id` for exclusive use, if its bucket (and page) exists.
    pub(crate) fn peek_mut(&mut self, id: u32) -> Option<&mut T> {
        let (b, k) = locate(id);
        if b < PAGED {
            return self.small[b].get_mut().map(|bucket| &mut bucket[k]);
        }
        let page = self.paged[b - PAGED].get_mut()?[k / PAGE].get_mut()?;
        Some(&mut page[k % PAGE])
    }

    /// Slots allocated so far (pages' and buckets' slots; page tables not
    /// counted).
    #[cfg(test)]
    fn allocated(&self) -> usize {
        let small: usize = self
            .small
            .iter()
            .filter_map(OnceLock::get)
            .map(|b| b.len())
            .sum();
        let paged: usize = self
            .paged
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|pages| pages.iter().filter_map(OnceLock::get))
            .map(|p| p.len())
            .sum();
        small + paged
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

    #[test]
    fn an_id_far_out_allocates_one_page() {
        let mut s: Slots<std::sync::atomic::AtomicU64> = Slots::new();
        for id in [2_147_483_000u32, u32::MAX, u32::MAX - 1, 1 << 31, 65_535] {
            assert!(s.peek(id).is_none());
            s.get(id)
                .store(u64::from(id), std::sync::atomic::Ordering::Relaxed);
        }
        // One page each (u32::MAX - 1 and 2^31 share bucket 31 but not a
        // page), bucket 32's table a single page long.
        assert_eq!(s.allocated(), 5 * PAGE);
        assert_eq!(pages_of(32), 1);
        assert_eq!(pages_of(31), 1 << 15);
        for id in [2_147_483_000u32, u32::MAX, u32::MAX - 1, 1 << 31, 65_535] {
            let got = s.peek_mut(id).unwrap().get_mut();
            assert_eq!(*got, u64::from(id));
        }
        assert!(s.peek(3_000_000_000).is_none());
    }
}
