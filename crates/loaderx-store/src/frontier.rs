//! The counters readers trust: the published header (`length` and the write
//! frontier) and the bytes known to exist in each chunk file.
//!
//! A writer stores them with release ordering after the bytes and table
//! entries they cover are written; a reader loads them with acquire ordering
//! and never looks past them. That is the whole of the read path's
//! synchronisation (docs/ARCHITECTURE.md, "Concurrency").

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use loaderx_format::{Header, MAX_CHUNKS};

/// The published header: what a reader that starts now sees.
#[derive(Debug)]
pub(crate) struct Frontier {
    /// `length`: entries below it are committed.
    len: AtomicU32,
    /// The write frontier, `tail_chunk << 32 | tail_offset`, so one load sees
    /// a consistent pair.
    tail: AtomicU64,
}

impl Frontier {
    pub(crate) fn new(header: &Header) -> Frontier {
        Frontier {
            len: AtomicU32::new(header.length),
            tail: AtomicU64::new(pack_tail(header.tail_chunk, header.tail_offset)),
        }
    }

    /// Committed records.
    pub(crate) fn len(&self) -> u32 {
        self.len.load(Ordering::Acquire)
    }

    /// The chunk holding the write frontier.
    pub(crate) fn tail_chunk(&self) -> u16 {
        unpack_tail(self.tail.load(Ordering::Acquire)).0
    }

    /// The published header.
    pub(crate) fn header(&self) -> Header {
        let length = self.len();
        let (tail_chunk, tail_offset) = unpack_tail(self.tail.load(Ordering::Acquire));
        Header {
            tail_chunk,
            tail_offset,
            length,
        }
    }

    /// Publishes `header`'s frontier, then its length (an append's order: a
    /// reader that sees the new length also sees the frontier that covers it).
    pub(crate) fn publish(&self, header: &Header) {
        self.publish_tail(header);
        self.publish_len(header.length);
    }

    /// Publishes `header`'s frontier alone.
    pub(crate) fn publish_tail(&self, header: &Header) {
        self.tail.store(
            pack_tail(header.tail_chunk, header.tail_offset),
            Ordering::Release,
        );
    }

    /// Publishes a new length alone.
    pub(crate) fn publish_len(&self, length: u32) {
        self.len.store(length, Ordering::Release);
    }
}

fn pack_tail(chunk: u16, offset: u32) -> u64 {
    (u64::from(chunk) << 32) | u64::from(offset)
}

fn unpack_tail(packed: u64) -> (u16, u32) {
    ((packed >> 32) as u16, packed as u32)
}

/// Bytes known to exist in each chunk file: measured at open, grown by our
/// own writes. Reads never go past them, so a file cut short behind our back
/// cannot make a read of a mapping run past its end (SIGBUS).
#[derive(Debug)]
pub(crate) struct ChunkLens(Box<[AtomicU64]>);

impl ChunkLens {
    pub(crate) fn new() -> ChunkLens {
        ChunkLens((0..MAX_CHUNKS).map(|_| AtomicU64::new(0)).collect())
    }

    fn slot(&self, chunk: u32) -> &AtomicU64 {
        // Ids come from validated entries or the header; the modulo keeps an
        // unvalidated one from indexing out of bounds (it cannot be valid).
        &self.0[chunk as usize % MAX_CHUNKS as usize]
    }

    /// The known length of `chunk`.
    pub(crate) fn get(&self, chunk: u32) -> u64 {
        self.slot(chunk).load(Ordering::Acquire)
    }

    /// Replaces the known length of `chunk`. Only for callers that no append
    /// can race: open, and exclusive (`&mut`) operations.
    pub(crate) fn set(&self, chunk: u32, len: u64) {
        self.slot(chunk).store(len, Ordering::Release);
    }

    /// Records that `chunk` now holds at least `end` bytes.
    pub(crate) fn grow(&self, chunk: u32, end: u64) {
        self.slot(chunk).fetch_max(end, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontier_round_trips_through_one_word() {
        let header = Header {
            tail_chunk: 4095,
            tail_offset: u32::MAX,
            length: 1 << 24,
        };
        let frontier = Frontier::new(&Header::default());
        assert_eq!(frontier.header(), Header::default());
        frontier.publish(&header);
        assert_eq!(frontier.header(), header);
        assert_eq!(frontier.tail_chunk(), 4095);
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
