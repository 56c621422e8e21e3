//! Sharding, checkpoints, elastic resume and the errors around them.

mod common;

use common::{global, is_permutation};
use loaderx_sampler::{Error, Mode, Sampler, SamplerState};

fn rank(len: u64, batch: usize, mode: Mode, seed: u64, r: usize, w: usize) -> Sampler {
    Sampler::new(len, batch, mode, seed)
        .unwrap()
        .sharded(r, w)
        .unwrap()
}

#[test]
fn ranks_split_each_global_batch_into_disjoint_covering_shares() {
    for mode in Mode::ALL {
        for world in [1, 2, 3, 4, 8] {
            let mut ranks: Vec<Sampler> = (0..world)
                .map(|r| rank(1000, 48, mode, 4, r, world))
                .collect();
            for step in 0..30 {
                let mut joined = Vec::new();
                for (r, s) in ranks.iter_mut().enumerate() {
                    let share = s.next_batch();
                    assert_eq!(share.len(), 48 / world);
                    // Rank r holds exactly positions [r·B/W, (r+1)·B/W).
                    assert_eq!(joined.len(), r * 48 / world);
                    joined.extend(share);
                }
                assert_eq!(
                    joined,
                    global(1000, 48, mode, 4, step),
                    "{mode} world {world} step {step}"
                );
            }
        }
    }
}

#[test]
fn in_shuffle_mode_the_ranks_of_an_epoch_together_hold_one_permutation() {
    // 960 = 20 batches of 48, so each epoch is 20 whole batches.
    let (len, batch, world) = (960u64, 48usize, 4usize);
    let ranks: Vec<Sampler> = (0..world)
        .map(|r| rank(len, batch, Mode::Shuffle, 9, r, world))
        .collect();
    let mut share = vec![0; batch / world];
    for epoch in 0..3u64 {
        let mut per_rank: Vec<Vec<u64>> = vec![Vec::new(); world];
        for step in epoch * 20..(epoch + 1) * 20 {
            for (r, s) in ranks.iter().enumerate() {
                s.indices_at(step, &mut share).unwrap();
                per_rank[r].extend_from_slice(&share);
            }
        }
        let union: Vec<u64> = per_rank.concat();
        assert_eq!(union.len(), len as usize);
        assert!(is_permutation(&union), "epoch {epoch}");
        for part in &per_rank {
            let mut sorted = part.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                part.len(),
                "a rank saw an index twice in epoch {epoch}"
            );
        }
    }
}

#[test]
fn state_round_trips_mid_epoch_through_bytes() {
    for mode in Mode::ALL {
        for len in [1000u64, 100_000] {
            let mut original = rank(len, 64, mode, 31, 1, 2);
            for _ in 0..7 {
                original.next_batch(); // mid-epoch: 7·64 < 1000
            }
            let state = original.state();
            assert_eq!(
                state,
                SamplerState {
                    seed: 31,
                    mode,
                    len,
                    batch_size: 64,
                    step: 7,
                    rank: 1,
                    world_size: 2
                }
            );
            let bytes = state.to_bytes();
            let decoded = SamplerState::from_bytes(&bytes).unwrap();
            assert_eq!(decoded, state);
            let mut resumed = Sampler::from_state(&decoded).unwrap();
            let mut restored = rank(len, 64, mode, 0, 1, 2);
            restored.restore(&decoded).unwrap();
            assert_eq!(restored.seed(), 31);
            for _ in 0..40 {
                let expected = original.next_batch();
                assert_eq!(resumed.next_batch(), expected, "{mode} len {len}");
                assert_eq!(restored.next_batch(), expected, "{mode} len {len}");
            }
            assert_eq!(resumed.state(), original.state());
        }
    }
}

#[test]
fn elastic_resume_from_four_ranks_to_two_continues_the_global_stream() {
    for mode in Mode::ALL {
        let (len, batch, seed) = (1000u64, 64usize, 77u64);
        let mut four: Vec<Sampler> = (0..4).map(|r| rank(len, batch, mode, seed, r, 4)).collect();
        for step in 0..5 {
            let joined: Vec<u64> = four.iter_mut().flat_map(|s| s.next_batch()).collect();
            assert_eq!(joined, global(len, batch, mode, seed, step));
        }
        // Checkpoint on rank 0 of 4, restart with 2 ranks.
        let checkpoint = SamplerState::from_bytes(&four[0].state().to_bytes()).unwrap();
        let mut two: Vec<Sampler> = (0..2)
            .map(|r| {
                let mut s = rank(len, batch, mode, 0, r, 2);
                s.restore(&checkpoint).unwrap();
                s
            })
            .collect();
        for step in 5..25 {
            let joined: Vec<u64> = two.iter_mut().flat_map(|s| s.next_batch()).collect();
            assert_eq!(
                joined,
                global(len, batch, mode, seed, step),
                "{mode} step {step}"
            );
        }
        // from_state keeps the recorded topology; re-sharding it is elastic too.
        let resharded = Sampler::from_state(&checkpoint)
            .unwrap()
            .sharded(1, 2)
            .unwrap();
        let mut out = vec![0; 32];
        resharded.indices_at(5, &mut out).unwrap();
        assert_eq!(out, global(len, batch, mode, seed, 5)[32..]);
    }
}

#[test]
fn restoring_a_state_of_another_configuration_is_an_error() {
    let mut s = Sampler::new(1000, 64, Mode::Shuffle, 1).unwrap();
    s.set_step(3);
    let base = Sampler::new(1000, 64, Mode::Shuffle, 2).unwrap().state();
    let cases = [
        (SamplerState { len: 999, ..base }, "len", 1000, 999),
        (
            SamplerState {
                batch_size: 32,
                ..base
            },
            "batch_size",
            64,
            32,
        ),
        (
            SamplerState {
                mode: Mode::Iid,
                ..base
            },
            "mode",
            2,
            1,
        ),
    ];
    for (state, field, expected, found) in cases {
        let err = s.restore(&state).unwrap_err();
        assert_eq!(
            err,
            Error::StateMismatch {
                field,
                expected,
                found
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains(field) && msg.contains(&found.to_string()),
            "{msg}"
        );
        // Nothing changed.
        assert_eq!((s.seed(), s.step()), (1, 3));
    }
    // A different rank/world size is allowed (elastic).
    s.restore(&SamplerState {
        rank: 3,
        world_size: 4,
        step: 9,
        ..base
    })
    .unwrap();
    assert_eq!((s.seed(), s.step(), s.rank(), s.world_size()), (2, 9, 0, 1));
    // from_state validates every field.
    assert_eq!(
        Sampler::from_state(&SamplerState {
            rank: 4,
            world_size: 4,
            ..base
        })
        .unwrap_err(),
        Error::RankOutOfRange {
            rank: 4,
            world_size: 4
        }
    );
    assert_eq!(
        Sampler::from_state(&SamplerState {
            world_size: 5,
            ..base
        })
        .unwrap_err(),
        Error::BatchNotDivisible {
            batch_size: 64,
            world_size: 5
        }
    );
    assert_eq!(
        Sampler::from_state(&SamplerState { len: 0, ..base }).unwrap_err(),
        Error::EmptyIndexSpace
    );
}

#[test]
fn invalid_configurations_and_buffers_are_clear_errors() {
    assert_eq!(
        Sampler::new(0, 8, Mode::Iid, 0).unwrap_err(),
        Error::EmptyIndexSpace
    );
    assert_eq!(
        Sampler::new(8, 0, Mode::Iid, 0).unwrap_err(),
        Error::ZeroBatch
    );
    let s = || Sampler::new(100, 10, Mode::Shuffle, 0).unwrap();
    assert_eq!(
        s().sharded(0, 3).unwrap_err(),
        Error::BatchNotDivisible {
            batch_size: 10,
            world_size: 3
        }
    );
    assert_eq!(
        s().sharded(2, 2).unwrap_err(),
        Error::RankOutOfRange {
            rank: 2,
            world_size: 2
        }
    );
    assert_eq!(s().sharded(0, 0).unwrap_err(), Error::ZeroWorldSize);
    let msg = s().sharded(0, 3).unwrap_err().to_string();
    assert!(msg.contains("10") && msg.contains('3'), "{msg}");

    let mut sharded = s().sharded(1, 2).unwrap();
    let mut wrong = vec![0; 10];
    assert_eq!(
        sharded.fill(&mut wrong).unwrap_err(),
        Error::OutputLength {
            expected: 5,
            found: 10
        }
    );
    assert_eq!(sharded.step(), 0, "a failed fill must not advance");
    assert_eq!(Mode::try_from(4).unwrap_err(), Error::UnknownMode(4));
    let boxed: Box<dyn std::error::Error> = Box::new(Error::ZeroBatch);
    assert!(!boxed.to_string().is_empty());
}
