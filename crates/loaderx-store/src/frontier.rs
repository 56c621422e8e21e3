//! The counters readers trust: the published head (`length` and each
//! lane's write frontier) and the bytes known to exist in each chunk file.
//!
//! A writer stores them with release ordering after the bytes and table
//! entries they cover are written; a reader loads them with acquire ordering
//! and never looks past them. That is the whole of the read path's
//! synchronisation (docs/ARCHITECTURE.md, "Concurrency").

use std::sync::atomic::{AtomicU64, Ordering};

use loaderx_format::{Head, MAX_LANES, Tail};

use crate::slots::Slots;

/// The published head: what a reader that starts now sees.
#[derive(Debug)]
pub(crate) struct Frontier {
    /// `length`: entries below it are committed.
    len: AtomicU64,
    /// Each lane's write frontier, [`Tail::pack`]ed, so one load sees a
    /// consistent pair.
    tails: [AtomicU64; MAX_LANES],
    /// Lanes in use (fixed for the life of a store).
    lanes: u8,
}

impl Frontier {
    pub(crate) fn new(head: &Head) -> Frontier {
        Frontier {
            len: AtomicU64::new(head.length),
            tails: std::array::from_fn(|l| AtomicU64::new(head.tails[l].pack())),
            lanes: head.lanes,
        }
    }

    /// Committed records.
    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// The published head.
    pub(crate) fn head(&self) -> Head {
        let length = self.len();
        let mut head = Head::empty(self.lanes);
        head.length = length;
        for l in 0..usize::from(self.lanes) {
            head.tails[l] = Tail::unpack(self.tails[l].load(Ordering::Acquire));
        }
        head
    }

    /// Publishes `head`'s frontiers, then its length (an append's order: a
    /// reader that sees the new length also sees the frontiers that cover it).
    pub(crate) fn publish(&self, head: &Head) {
        self.publish_tails(head);
        self.publish_len(head.length);
    }

    /// Publishes `head`'s frontiers alone.
    pub(crate) fn publish_tails(&self, head: &Head) {
        for l in 0..usize::from(self.lanes) {
            self.tails[l].store(head.tails[l].pack(), Ordering::Release);
        }
    }

    /// Publishes a new length alone.
    pub(crate) fn publish_len(&self, length: u64) {
        self.len.store(length, Ordering::Release);
    }
}

/// Bytes known to exist in each chunk file: measured at open, grown by our
/// own writes. Reads never go past them, so a file cut short behind our back
/// cannot make a read of a mapping run past its end (SIGBUS).
#[derive(Debug)]
pub(crate) struct ChunkLens(Slots<AtomicU64>);

/// Flag bit of a measured chunk (lengths stay far below it).
const KNOWN: u64 = 1 << 63;

impl ChunkLens {
    pub(crate) fn new() -> ChunkLens {
        ChunkLens(Slots::new())
    }

    fn slot(&self, chunk: u32) -> &AtomicU64 {
        self.0.get(chunk)
    }

    /// The known length of `chunk` (0 for a chunk never measured).
    pub(crate) fn get(&self, chunk: u32) -> u64 {
        self.0
            .peek(chunk)
            .map_or(0, |l| l.load(Ordering::Acquire) & !KNOWN)
    }

    /// The known length of `chunk`, if this handle measured it (one load).
    #[inline]
    pub(crate) fn known(&self, chunk: u32) -> Option<u64> {
        let word = self.0.peek(chunk)?.load(Ordering::Acquire);
        (word & KNOWN != 0).then_some(word & !KNOWN)
    }

    /// Whether `chunk` was measured (opened) by this handle.
    pub(crate) fn is_known(&self, chunk: u32) -> bool {
        self.0
            .peek(chunk)
            .is_some_and(|l| l.load(Ordering::Acquire) & KNOWN != 0)
    }

    /// Replaces the known length of `chunk`. Only for callers that no append
    /// can race: open, and exclusive (`&mut`) operations.
    pub(crate) fn set(&self, chunk: u32, len: u64) {
        self.slot(chunk).store(len | KNOWN, Ordering::Release);
    }

    /// Records that `chunk` now holds at least `end` bytes.
    pub(crate) fn grow(&self, chunk: u32, end: u64) {
        self.slot(chunk).fetch_max(end | KNOWN, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontier_round_trips() {
        let mut head = Head::empty(3);
        head.length = 1 << 40;
        head.tails[2] = Tail {
            chunk: 5,
            offset: u32::MAX,
        };
        let frontier = Frontier::new(&Head::empty(3));
        assert_eq!(frontier.head(), Head::empty(3));
        frontier.publish(&head);
        assert_eq!(frontier.head(), head);
        frontier.publish_len(3);
        assert_eq!(frontier.len(), 3);
    }

    #[test]
    fn known_lengths_only_grow_unless_set() {
        let lens = ChunkLens::new();
        lens.grow(2, 10);
        lens.grow(2, 5);
        assert_eq!(lens.get(2), 10);
        lens.set(2, 4);
        assert_eq!(lens.get(2), 4);
    }
}
