//! Speed hints to the processor and the kernel, the two that need raw
//! pointers: asking for cache lines ahead of their use ([`prefetch`]) and
//! asking for transparent huge pages under a buffer
//! ([`advise_huge_pages`]).
//!
//! Unsafe here (allowed by name in `lib.rs`), and sound for one reason:
//! a hint changes how fast memory is reached, never what it holds. Each
//! call is given an address inside a slice the caller holds borrowed for
//! the call: a prefetch reads nothing the program sees and never faults,
//! and `madvise(MADV_HUGEPAGE)` changes how the kernel backs pages this
//! process owns, not their contents. Errors and refusals are ignored.

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
/// transparent huge pages. The encode arena is touched first when it is
/// filled, and a fresh handle's 64 MiB then costs 16k page faults of 4 KiB
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
