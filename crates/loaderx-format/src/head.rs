//! The committed state of a store in either format version: how many
//! records it holds and where each write lane's frontier is. Format v1 has
//! one lane and narrower fields ([`Header`]); format v2 stores this whole
//! ([`v2::HeaderV2`](crate::v2::HeaderV2)).

use crate::{CHUNK_CAPACITY, Header, MAX_LANES};

/// The write frontier of one lane: the chunk appends go to next and the
/// byte offset inside it where they start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Tail {
    /// The lane's last chunk; the lane's chunks are `lane, lane + lanes, …, chunk`.
    pub chunk: u32,
    /// Bytes used in `chunk`.
    pub offset: u32,
}

impl Tail {
    /// The frontier as one word (`chunk << 32 | offset`), for atomics.
    #[must_use]
    pub fn pack(self) -> u64 {
        (u64::from(self.chunk) << 32) | u64::from(self.offset)
    }

    /// The inverse of [`pack`](Tail::pack).
    #[must_use]
    pub fn unpack(word: u64) -> Tail {
        Tail {
            chunk: (word >> 32) as u32,
            offset: word as u32,
        }
    }
}

/// Records and write frontiers: what a commit makes durable and what a
/// reader checks entries against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Head {
    /// Live records; the index space is `0..length`.
    pub length: u64,
    /// Write lanes, `1..=MAX_LANES`; lane `l` owns the chunks whose id is
    /// `l` modulo `lanes`.
    pub lanes: u8,
    /// Frontier of each lane; entries at and past `lanes` are zero.
    pub tails: [Tail; MAX_LANES],
}

impl Default for Head {
    fn default() -> Self {
        Head::empty(1)
    }
}

impl Head {
    /// An empty store with `lanes` lanes: lane `l`'s frontier at the start of chunk `l`.
    #[must_use]
    pub fn empty(lanes: u8) -> Head {
        let mut tails = [Tail::default(); MAX_LANES];
        for (l, t) in tails.iter_mut().enumerate().take(usize::from(lanes)) {
            t.chunk = l as u32;
        }
        Head {
            length: 0,
            lanes,
            tails,
        }
    }

    /// The lanes in use.
    #[must_use]
    pub fn lane_tails(&self) -> &[Tail] {
        &self.tails[..usize::from(self.lanes)]
    }

    /// The lane that owns chunk `chunk`.
    #[must_use]
    #[inline]
    pub fn lane_of(&self, chunk: u32) -> usize {
        // One lane is the common case: no division on every entry checked.
        if self.lanes <= 1 {
            0
        } else {
            (chunk % u32::from(self.lanes)) as usize
        }
    }

    /// Whether chunk `chunk` exists under this head (lane chunks up to each tail).
    #[must_use]
    pub fn has_chunk(&self, chunk: u32) -> bool {
        chunk <= self.tails[self.lane_of(chunk)].chunk
    }

    /// Every chunk id that exists under this head, in increasing order.
    pub fn chunks(&self) -> impl Iterator<Item = u32> + '_ {
        let last = self.lane_tails().iter().map(|t| t.chunk).max().unwrap_or(0);
        (0..=last).filter(|&c| self.has_chunk(c))
    }

    /// The v1 header this head is, if it fits format v1 (one lane, narrow fields).
    #[must_use]
    pub fn to_v1(&self) -> Option<Header> {
        let t = self.tails[0];
        Some(Header {
            tail_chunk: u16::try_from(t.chunk).ok().filter(|_| self.lanes == 1)?,
            tail_offset: t.offset,
            length: u32::try_from(self.length).ok()?,
        })
    }
}

impl From<Header> for Head {
    fn from(h: Header) -> Head {
        let mut head = Head::empty(1);
        head.length = u64::from(h.length);
        head.tails[0] = Tail {
            chunk: u32::from(h.tail_chunk),
            offset: h.tail_offset,
        };
        head
    }
}

// A record never straddles chunks and a frontier stays below the capacity,
// so an offset always fits its u32.
const _: () = assert!(CHUNK_CAPACITY <= 1 << 32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_own_interleaved_chunks() {
        let mut head = Head::empty(3);
        assert_eq!(head.chunks().collect::<Vec<_>>(), [0, 1, 2]);
        head.tails[1] = Tail {
            chunk: 7,
            offset: 5,
        };
        assert_eq!(head.chunks().collect::<Vec<_>>(), [0, 1, 2, 4, 7]);
        assert!(head.has_chunk(4) && !head.has_chunk(5) && !head.has_chunk(3 + 6));
        assert_eq!(head.to_v1(), None);
    }

    #[test]
    fn v1_headers_round_trip() {
        let h = Header {
            tail_chunk: 3,
            tail_offset: 9,
            length: 12,
        };
        assert_eq!(Head::from(h).to_v1(), Some(h));
        assert_eq!(
            Tail::unpack(
                Tail {
                    chunk: 7,
                    offset: u32::MAX
                }
                .pack()
            )
            .chunk,
            7
        );
    }
}
