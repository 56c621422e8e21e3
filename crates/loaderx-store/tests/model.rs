//! The store against a trivial model (`Vec<Vec<u8>>`): random sequences of
//! fixed and ragged appends with random codecs, gathers, deletes,
//! compactions and reopens must always agree with it.

mod common;

use common::mem_store;
use loaderx_store::{CodecId, Deflate, Store, storage::MemStorage};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    AppendFixed {
        codec: usize,
        n: usize,
        len: usize,
        seed: u8,
    },
    AppendRagged {
        codec: usize,
        lens: Vec<usize>,
        seed: u8,
    },
    Gather {
        picks: Vec<usize>,
    },
    GatherRagged {
        picks: Vec<usize>,
    },
    Delete {
        picks: Vec<usize>,
    },
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4usize, 1..20usize, 1..700usize, any::<u8>())
            .prop_map(|(codec, n, len, seed)| Op::AppendFixed { codec, n, len, seed }),
        2 => (0..4usize, proptest::collection::vec(1..900usize, 1..12), any::<u8>())
            .prop_map(|(codec, lens, seed)| Op::AppendRagged { codec, lens, seed }),
        3 => proptest::collection::vec(any::<usize>(), 1..40).prop_map(|picks| Op::Gather { picks }),
        2 => proptest::collection::vec(any::<usize>(), 1..20).prop_map(|picks| Op::GatherRagged { picks }),
        2 => proptest::collection::vec(any::<usize>(), 1..8).prop_map(|picks| Op::Delete { picks }),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

/// Bytes that are sometimes compressible, sometimes not.
fn record(seed: u8, k: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if seed.is_multiple_of(3) {
                (i.wrapping_mul(2_654_435_761) >> 7) as u8 ^ seed
            } else {
                ((i / 16) as u8).wrapping_add(seed).wrapping_add(k as u8)
            }
        })
        .collect()
}

fn run(ops: Vec<Op>) {
    // A 4 KiB chunk capacity makes rollover and multi-chunk compaction common.
    const CAPACITY: u64 = 4096;
    let storage = MemStorage::new();
    let mut store: Store<Deflate, MemStorage> = mem_store(&storage, CAPACITY);
    let mut model: Vec<Vec<u8>> = Vec::new();
    for op in ops {
        match op {
            Op::AppendFixed {
                codec,
                n,
                len,
                seed,
            } => {
                let recs: Vec<Vec<u8>> = (0..n).map(|k| record(seed, k, len)).collect();
                let first = store
                    .append_fixed_with(usable(codec), &recs.concat(), n, len)
                    .unwrap();
                assert_eq!(first, model.len() as u64);
                model.extend(recs);
            }
            Op::AppendRagged { codec, lens, seed } => {
                let recs: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(k, &l)| record(seed, k, l))
                    .collect();
                // Lay the records out in reverse in the source, to exercise offsets.
                let mut src = Vec::new();
                let mut offsets = vec![0u64; recs.len()];
                for (k, r) in recs.iter().enumerate().rev() {
                    offsets[k] = src.len() as u64;
                    src.extend_from_slice(r);
                }
                let lens: Vec<u32> = lens.iter().map(|&l| l as u32).collect();
                store
                    .append_ragged_with(usable(codec), &src, &offsets, &lens)
                    .unwrap();
                model.extend(recs);
            }
            Op::Gather { picks } => {
                if model.is_empty() {
                    assert_eq!(store.gather(&[0], &mut [0u8; 8], 8).unwrap_err().code(), -3);
                    continue;
                }
                let idxs: Vec<u64> = picks.iter().map(|p| (p % model.len()) as u64).collect();
                let stride = 900;
                let mut dst = vec![0u8; idxs.len() * stride];
                let fits = idxs.iter().all(|&i| model[i as usize].len() <= stride);
                let result = store.gather(&idxs, &mut dst, stride);
                if !fits {
                    assert_eq!(result.unwrap_err().code(), -6);
                    continue;
                }
                result.unwrap();
                for (k, &i) in idxs.iter().enumerate() {
                    let r = &model[i as usize];
                    assert_eq!(&dst[k * stride..][..r.len()], &r[..]);
                }
            }
            Op::GatherRagged { picks } => {
                if model.is_empty() {
                    continue;
                }
                let idxs: Vec<u64> = picks.iter().map(|p| (p % model.len()) as u64).collect();
                let mut lens = vec![0u32; idxs.len()];
                store.lengths(&idxs, &mut lens).unwrap();
                let mut offsets = Vec::new();
                let mut at = 0u64;
                for (&i, &l) in idxs.iter().zip(&lens) {
                    assert_eq!(l as usize, model[i as usize].len());
                    offsets.push(at);
                    at += u64::from(l);
                }
                let mut dst = vec![0u8; at as usize];
                store.gather_ragged(&idxs, &mut dst, &offsets).unwrap();
                let expect: Vec<u8> = idxs
                    .iter()
                    .flat_map(|&i| model[i as usize].clone())
                    .collect();
                assert_eq!(dst, expect);
            }
            Op::Delete { picks } => {
                if model.is_empty() {
                    continue;
                }
                let idxs: Vec<u64> = picks.iter().map(|p| (p % model.len()) as u64).collect();
                store.delete(&idxs).unwrap();
                let mut sorted = idxs.clone();
                sorted.sort_unstable_by(|a, b| b.cmp(a));
                sorted.dedup();
                for i in sorted {
                    model.swap_remove(i as usize);
                }
            }
            Op::Compact => store.compact().unwrap(),
            Op::Reopen => {
                drop(store);
                store = mem_store(&storage, CAPACITY);
            }
        }
        assert_eq!(store.len(), model.len() as u64);
    }
    store.verify().unwrap();
    assert!(
        common::contents(&store) == model,
        "store and model disagree"
    );
    let stats = store.stats().unwrap();
    assert_eq!(stats.records, model.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn store_agrees_with_a_vec_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}

#[test]
fn compaction_after_heavy_deletes_agrees_with_the_model() {
    let mut ops = Vec::new();
    for seed in 0..6u8 {
        ops.push(Op::AppendFixed {
            codec: (seed % 4) as usize,
            n: 19,
            len: 333,
            seed,
        });
        ops.push(Op::Delete {
            picks: vec![1, 5, 9, 13, 2, 7],
        });
    }
    ops.push(Op::Compact);
    ops.push(Op::Reopen);
    ops.push(Op::Gather {
        picks: (0..60).collect(),
    });
    run(ops);
}

/// `CodecId::ALL[i]`, or raw where this build leaves that codec out.
fn usable(i: usize) -> CodecId {
    let codec = CodecId::ALL[i];
    if codec.missing_feature().is_some() {
        CodecId::Raw
    } else {
        codec
    }
}
