//! Sharding: which part of every global batch one rank produces.
//!
//! Rank `r` of `W` takes the contiguous slice `[r·B/W, (r+1)·B/W)` of each
//! global batch of `B` positions. The global stream itself never sees `W`, so
//! every host computes the same global stream, the ranks' slices are disjoint
//! and cover each batch (and so, in shuffle mode, each epoch is split into
//! disjoint parts whose union is one permutation), and a job restarted at a
//! step boundary with a different world size but the same global batch size
//! continues the same stream (elastic resume).

use crate::{Error, Result};

/// One rank's place in a world of `world_size` ranks, as
/// `torch.distributed.get_rank()`/`get_world_size()` or
/// `jax.process_index()`/`jax.process_count()` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
}

impl Shard {
    /// The whole batch on one rank.
    pub(crate) const SOLE: Shard = Shard {
        rank: 0,
        world_size: 1,
    };

    /// Checks the pair against a global batch size and returns the shard and
    /// its share of each batch.
    pub(crate) fn new(rank: usize, world_size: usize, batch_size: usize) -> Result<(Shard, usize)> {
        if world_size == 0 {
            return Err(Error::ZeroWorldSize);
        }
        if rank >= world_size {
            return Err(Error::RankOutOfRange { rank, world_size });
        }
        if !batch_size.is_multiple_of(world_size) {
            return Err(Error::BatchNotDivisible {
                batch_size,
                world_size,
            });
        }
        Ok((Shard { rank, world_size }, batch_size / world_size))
    }

    /// Where this rank's share starts inside a global batch.
    pub(crate) fn offset(self, local_batch: usize) -> usize {
        self.rank * local_batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_rank_world_and_divisibility() {
        assert_eq!(Shard::new(0, 0, 8), Err(Error::ZeroWorldSize));
        assert_eq!(
            Shard::new(4, 4, 8),
            Err(Error::RankOutOfRange {
                rank: 4,
                world_size: 4
            })
        );
        assert_eq!(
            Shard::new(0, 3, 8),
            Err(Error::BatchNotDivisible {
                batch_size: 8,
                world_size: 3
            })
        );
        let (shard, local) = Shard::new(3, 4, 8).unwrap();
        assert_eq!((local, shard.offset(local)), (2, 6));
    }
}
