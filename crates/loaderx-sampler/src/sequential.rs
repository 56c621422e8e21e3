//! [`Mode::Sequential`](crate::Mode::Sequential): global position `p` maps to
//! index `p mod N`.
//!
//! Batch `k` is therefore the window `(k·B + j) mod N`, `j in 0..B`, sliding
//! over a circular index space: a batch that reaches the end of `0..N` wraps
//! to the start instead of being truncated. The one division happens once per
//! batch; the loop itself is a counter with a wrap test.

/// The sliding-window stream over `0..len`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sequential {
    len: u64,
}

impl Sequential {
    pub(crate) fn new(len: u64) -> Sequential {
        debug_assert!(len > 0);
        Sequential { len }
    }

    /// Writes the indices of global positions `first..first + out.len()`.
    pub(crate) fn fill(self, first: u128, out: &mut [u64]) {
        // `first % len < len`, so the cast is lossless.
        let mut start = (first % u128::from(self.len)) as u64;
        let mut rest = out;
        while !rest.is_empty() {
            // Up to the end of the index space, then wrap to 0.
            let run = usize::try_from(self.len - start).map_or(rest.len(), |r| r.min(rest.len()));
            let (head, tail) = rest.split_at_mut(run);
            for (slot, index) in head.iter_mut().zip(start..) {
                *slot = index;
            }
            rest = tail;
            start = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_around_the_end() {
        let seq = Sequential::new(5);
        let mut out = [0; 12];
        seq.fill(3, &mut out);
        assert_eq!(out, [3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
        let mut one = [9; 4];
        Sequential::new(1).fill(123, &mut one);
        assert_eq!(one, [0; 4]);
        let huge = Sequential::new(u64::MAX);
        let mut out = [0; 3];
        huge.fill(u128::from(u64::MAX) - 1, &mut out);
        assert_eq!(out, [u64::MAX - 1, 0, 1]);
    }
}
