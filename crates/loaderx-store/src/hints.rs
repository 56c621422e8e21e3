//! Speed hints to the processor and the kernel, the ones that need raw
//! pointers: asking for cache lines ahead of their use ([`prefetch`]),
//! asking for transparent huge pages under a buffer
//! ([`advise_huge_pages`]), and taking a large zeroed buffer straight from
//! the allocator ([`zeroed_buffer`]).
//!
//! Unsafe here (allowed by name in `lib.rs`), and sound for one reason:
//! a hint changes how fast memory is reached, never what it holds. Each
//! call is given an address inside a slice the caller holds borrowed for
//! the call: a prefetch reads nothing the program sees and never faults,
//! and `madvise(MADV_HUGEPAGE)` changes how the kernel backs pages this
//! process owns, not their contents. Errors and refusals are ignored.
//! [`zeroed_buffer`] is the one that allocates: it builds a `Vec` from
//! `alloc_zeroed` memory with the layout the `Vec` frees it with, every
//! byte initialised (to zero); it is `vec![0u8; len]` (which also takes
//! zeroed memory from the allocator) with an allocation failure returned,
//! not aborting the process.

/// Asks for every cache line of each of `slices`, so their loads (and TLB
/// walks) run in parallel ahead of the work that reads them. On x86-64 each
/// line is prefetched (no load waits on it); elsewhere each slice's first
/// byte is read. Speed only.
pub(crate) fn prefetch<'a>(slices: impl Iterator<Item = &'a [u8]>) {
    #[cfg(target_arch = "x86_64")]
    for bytes in slices {
        for line in bytes.chunks(64) {
            // SAFETY: SSE, which `prefetcht0` belongs to, is part of every
            // x86-64 CPU; and a prefetch is a hint that reads nothing the
            // program sees and never faults.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    line.as_ptr().cast(),
                );
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut acc = 0u8;
        for bytes in slices {
            if let Some(&b) = bytes.first() {
                acc ^= b;
            }
        }
        std::hint::black_box(acc);
    }
}

/// Asks the kernel to back the 2 MiB-aligned interior of `region` with
/// transparent huge pages. A fresh encode arena is touched first by the
/// workers encoding into it, and its 64 MiB then cost 16k page faults of 4 KiB
/// on first touch (expensive in a VM); with huge pages, 32. Advisory only:
/// where huge pages are off (`/sys/kernel/mm/transparent_hugepage/enabled`
/// set to `never`) the call changes nothing. Checked on Linux; a no-op
/// elsewhere.
#[cfg(target_os = "linux")]
pub(crate) fn advise_huge_pages(region: &mut [std::mem::MaybeUninit<u8>]) {
    const HUGE: usize = 2 << 20;
    let start = region.as_mut_ptr() as usize;
    let end = start + region.len();
    let first = start.next_multiple_of(HUGE);
    let last = end / HUGE * HUGE;
    if last > first {
        // SAFETY: [first, last) lies inside `region`, memory this process
        // owns and holds borrowed; MADV_HUGEPAGE changes how the kernel
        // backs the pages, never their contents. A refusal is harmless.
        unsafe {
            let from = region.as_mut_ptr().add(first - start);
            libc::madvise(from.cast(), last - first, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn advise_huge_pages(_region: &mut [std::mem::MaybeUninit<u8>]) {}

/// A `len`-byte buffer of zeros, or `None` when the allocator cannot give
/// one. Unlike `Vec::resize(len, 0)` it makes no pass over the buffer: a
/// buffer above the C allocator's mapping threshold (at most 32 MiB in
/// glibc) is fresh pages from the kernel, which are zero, so each page is
/// first touched by whoever writes it (the encode workers, in parallel) and
/// pages never written are never touched. Asks for huge pages under it.
pub(crate) fn zeroed_buffer(len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: `layout` has a non-zero size. The memory is `len` zeroed
    // bytes (every byte initialised) allocated by the global allocator with
    // the layout of a `[u8]` of length `len`, which is what `Box::from_raw`
    // needs and what the box (then the `Vec`) frees it with.
    let mut buf = unsafe {
        let ptr = std::alloc::alloc_zeroed(layout);
        if ptr.is_null() {
            return None;
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)).into_vec()
    };
    // SAFETY: `u8` and `MaybeUninit<u8>` have the same layout, and the
    // advice only reads the slice's address.
    let region = unsafe {
        std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>(), len)
    };
    advise_huge_pages(region);
    Some(buf)
}
