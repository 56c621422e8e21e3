//! [`Mode::Shuffle`](crate::Mode::Shuffle): draws without replacement, a
//! fresh permutation every epoch, in O(1) memory.
//!
//! Global position `p` belongs to epoch `e = p / N` and maps to
//! `perm_e(p mod N)`, where `perm_e` is the permutation of `0..N` keyed by
//! `child_key(child_key(root, e_low64), e_high64)`: the [`Feistel`]
//! bijection with cycle-walking for `N >` [`SMALL_LEN`], an exact
//! Fisher–Yates shuffle of a fixed stack table ([`shuffle_small`]) below it,
//! where a Feistel network over a tiny domain is visibly non-uniform. So every run of
//! `N` positions starting at a multiple of `N` is exactly one permutation,
//! epochs run back to back without a pause (a batch may straddle two), and
//! any position is computed without the ones before it. The one division
//! happens once per batch; keys are derived once per epoch a batch touches.

use crate::feistel::{Feistel, ROUNDS, RoundKeys};
use crate::keys::{SHUFFLE_DOMAIN, child_key, expand, root_key};
pub(crate) use crate::small::SMALL_LEN;
use crate::small::shuffle_small;

/// The without-replacement stream over `0..len`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shuffle {
    root: u64,
    len: u64,
    feistel: Feistel,
}

impl Shuffle {
    pub(crate) fn new(seed: u64, len: u64) -> Shuffle {
        debug_assert!(len > 0);
        Shuffle {
            root: root_key(seed, SHUFFLE_DOMAIN),
            len,
            feistel: Feistel::new(len),
        }
    }

    /// The key of `epoch`'s permutation.
    fn epoch_key(&self, epoch: u128) -> u64 {
        child_key(child_key(self.root, epoch as u64), (epoch >> 64) as u64)
    }

    /// The Feistel keys of `epoch`.
    pub(crate) fn epoch_keys(&self, epoch: u128) -> RoundKeys {
        RoundKeys::from_words(expand::<{ 2 * ROUNDS }>(self.epoch_key(epoch)))
    }

    /// Writes the indices of global positions `first..first + out.len()`.
    pub(crate) fn fill(&self, first: u128, out: &mut [u64]) {
        let len = u128::from(self.len);
        let mut epoch = first / len;
        // Below `len`, so lossless.
        let mut offset = (first % len) as u64;
        let mut rest = out;
        while !rest.is_empty() {
            let run = usize::try_from(self.len - offset).map_or(rest.len(), |r| r.min(rest.len()));
            let (head, tail) = rest.split_at_mut(run);
            if self.len <= SMALL_LEN as u64 {
                // Both below SMALL_LEN, so the casts are lossless.
                shuffle_small(
                    self.epoch_key(epoch),
                    self.len as usize,
                    offset as usize,
                    head,
                );
            } else {
                self.feistel
                    .permute_run(&self.epoch_keys(epoch), offset, head);
            }
            rest = tail;
            epoch += 1;
            offset = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn straddling_batches_equal_whole_epochs() {
        let s = Shuffle::new(3, 10);
        let mut whole = [0; 30];
        s.fill(0, &mut whole);
        let mut pieces = [0; 30];
        for (i, chunk) in pieces.chunks_mut(7).enumerate() {
            s.fill(7 * i as u128, chunk);
        }
        assert_eq!(whole, pieces);
        for epoch in whole.chunks(10) {
            let mut sorted = epoch.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..10).collect::<Vec<u64>>());
        }
        assert_ne!(whole[..10], whole[10..20]);
    }

    #[test]
    fn epochs_past_u64_are_keyed_by_all_their_bits() {
        let s = Shuffle::new(0, 1000);
        let a = s.epoch_keys(5);
        let b = s.epoch_keys(5 + (1u128 << 64));
        assert_ne!(a, b);
        let mut out = [0; 4];
        s.fill(u128::MAX - 3, &mut out);
        assert!(out.iter().all(|&i| i < 1000));
    }
}
