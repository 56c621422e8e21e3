//! Deterministic, resumable, shardable streams of batch indices for an
//! endless data loader.
//!
//! A [`Sampler`] turns `(seed, mode, len N, global batch size B)` into an
//! endless stream of global batches of indices into `0..N`, and writes one
//! rank's share of each batch into a slice the caller owns. A
//! [`SamplerState`] is the small value that checkpoints it; [`Mode`] says how
//! indices are drawn; every failure is an [`Error`].
//!
//! # How data flows
//!
//! Global position `p = step·B + j` (`j in 0..B`) maps to its index by a pure
//! function of `(seed, mode, N, B, p)`:
//!
//! * [`Mode::Sequential`]: `p mod N`, a window sliding round a circular index
//!   space.
//! * [`Mode::Iid`]: uniform with replacement, unbiased (Lemire's
//!   multiply-shift with rejection) from xoshiro256++ generators seeded per
//!   256-position block of each batch.
//! * [`Mode::Shuffle`]: epoch `e = p / N` and `perm_e(p mod N)`, where
//!   `perm_e` is a keyed Feistel bijection of `0..N` (cycle-walking over the
//!   next power of two; an exact Fisher–Yates pass over a fixed 2 KiB stack
//!   table when `N ≤ 1024`): every epoch is a fresh permutation, in O(1)
//!   memory.
//! * [`Mode::Cyclic`]: the same permutations, but an epoch holds only whole
//!   batches (`⌊N/B⌋` of them; the `N mod B` left over are skipped), as
//!   loaderx 2.8's `CYCLIC` draws.
//!
//! Rank `r` of `W` ranks writes positions `[r·B/W, (r+1)·B/W)` of each
//! batch. Since no index depends on `W` or on earlier positions, every host
//! agrees on the global stream, ranks' shares are disjoint and cover it,
//! any step can be computed directly ([`Sampler::indices_at`],
//! [`Sampler::set_step`]), and a checkpoint taken with one world size resumes
//! under another with the same `B` ([`Sampler::restore`]). The same seed gives
//! the same indices on every machine and every run: all arithmetic is exact
//! integer arithmetic with fixed widths.
//!
//! # Stability of the stream
//!
//! The mapping from `(seed, mode, N, B, step)` to indices is part of the
//! contract: checkpoints and reproduced experiments depend on it. It uses
//! only fixed-width integer arithmetic (no floats, no platform-sized
//! integers, no hash-map ordering), and a golden-value test pins it. Each
//! mode's module (`sequential.rs`, `iid.rs`, `shuffle.rs` with `feistel.rs`
//! and `small.rs`) opens with its exact definition and the reasons for its
//! constants; changing any of them is a breaking change.
//!
//! # What it never does
//!
//! It never allocates per batch ([`Sampler::fill`] writes into the caller's
//! slice), never holds an O(N) table, never reads a clock, the environment or
//! an OS entropy source, never spawns threads, and never touches a store: it
//! only produces indices.
//!
//! # Example
//!
//! ```
//! use loaderx_sampler::{Mode, Sampler, SamplerState};
//!
//! // Rank 1 of 2 draws its half of each global batch of 8 from 0..10.
//! let mut sampler = Sampler::new(10, 8, Mode::Shuffle, 42)?.sharded(1, 2)?;
//! let mut batch = vec![0u64; sampler.local_batch_size()];
//! sampler.fill(&mut batch)?;
//! assert!(batch.iter().all(|&i| i < 10));
//!
//! // Checkpoint, keep going, and resume from the checkpoint elsewhere.
//! let checkpoint = sampler.state().to_bytes();
//! sampler.fill(&mut batch)?;
//! let expected = batch.clone();
//!
//! let state = SamplerState::from_bytes(&checkpoint)?;
//! let mut resumed = Sampler::new(10, 8, Mode::Shuffle, 0)?.sharded(1, 2)?;
//! resumed.restore(&state)?; // takes the seed and step from the checkpoint
//! resumed.fill(&mut batch)?;
//! assert_eq!(batch, expected);
//!
//! // Sequential batches slide round the index space.
//! let seq = Sampler::new(10, 4, Mode::Sequential, 0)?;
//! let mut window = [0u64; 4];
//! seq.indices_at(2, &mut window)?;
//! assert_eq!(window, [8, 9, 0, 1]);
//! # Ok::<(), loaderx_sampler::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::pedantic)]
// Accessors and pure constructors: a `#[must_use]` on each is noise.
#![allow(clippy::must_use_candidate)]
// The generators keep the low bits of wide products and reduced values on
// purpose (multiply-shift, Feistel halves, `x % len < len`); each cast says why.
#![allow(clippy::cast_possible_truncation)]
// The per-index hot paths are forced inline on purpose; the sampler bench
// (`benches/benches/sampler.rs`) is what keeps them there.
#![allow(clippy::inline_always)]

mod error;
mod feistel;
mod iid;
mod keys;
mod lanes;
mod mode;
mod sampler;
mod sequential;
mod shard;
mod shuffle;
mod small;
mod state;

pub use error::{Error, Result};
pub use mode::Mode;
pub use sampler::Sampler;
pub use state::SamplerState;
