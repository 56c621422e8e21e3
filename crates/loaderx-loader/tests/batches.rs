//! What comes out: every batch equals a direct gather of the sampler's
//! indices, for fixed and ragged streams together, in sampler order
//! whatever the number of workers.

mod common;

use common::*;
use loaderx_loader::{Layout, Loader};
use loaderx_sampler::Mode;

#[test]
fn fixed_streams_equal_a_direct_gather_at_the_sampler_indices() {
    let fx = fixture();
    let sampler = sampler(Mode::Shuffle, 16);
    let loader = Loader::builder(sampler.clone())
        .stream(fx.data_stream())
        .stream(fx.label_stream())
        .num_workers(4)
        .prefetch(3)
        .build()
        .unwrap();
    let mut idxs = vec![0u64; 16];
    for step in 0..40 {
        let batch = loader.next().unwrap();
        sampler.indices_at(step, &mut idxs).unwrap();
        assert_eq!(batch.step(), step);
        assert_eq!(batch.indices(), idxs);
        let data = batch.column("data").unwrap();
        assert_eq!(data.layout(), &Layout::Fixed { item_len: ITEM });
        assert_eq!(data.data(), direct_fixed(&fx.data, &idxs, ITEM));
        let label = &batch.columns()[1];
        assert_eq!(label.name(), "label");
        assert_eq!(label.data(), direct_fixed(&fx.label, &idxs, 4));
        for (i, &idx) in idxs.iter().enumerate() {
            // Both streams were gathered at the same indices.
            assert_eq!(data.item(i), data_record(idx));
            assert_eq!(label.item(i), label_record(idx));
        }
        loader.recycle(batch);
    }
}

#[test]
fn ragged_streams_carry_offsets_and_equal_a_direct_gather() {
    let fx = fixture();
    let sampler = sampler(Mode::Iid, 10);
    let loader = Loader::builder(sampler.clone())
        .stream(fx.ragged_stream())
        .stream(fx.label_stream())
        .num_workers(3)
        .prefetch(5)
        .build()
        .unwrap();
    let mut idxs = vec![0u64; 10];
    for step in 0..40 {
        let batch = loader.next().unwrap();
        sampler.indices_at(step, &mut idxs).unwrap();
        assert_eq!(batch.indices(), idxs);
        let ragged = batch.column("ragged").unwrap();
        let offsets = ragged.offsets().unwrap();
        assert_eq!(offsets.len(), idxs.len() + 1);
        assert_eq!(*offsets.last().unwrap() as usize, ragged.data().len());

        let mut lens = vec![0u32; idxs.len()];
        fx.ragged.lengths(&idxs, &mut lens).unwrap();
        let mut expected = vec![0u8; ragged.data().len()];
        fx.ragged
            .gather_ragged(&idxs, &mut expected, &offsets[..idxs.len()])
            .unwrap();
        assert_eq!(ragged.data(), expected);
        for (i, &idx) in idxs.iter().enumerate() {
            assert_eq!(offsets[i + 1] - offsets[i], u64::from(lens[i]));
            assert_eq!(ragged.item(i), ragged_record(idx));
            assert_eq!(batch.columns()[1].item(i), label_record(idx));
        }
        // Recycled buffers of another size are reused for the next batches.
        loader.recycle(batch);
    }
}

#[test]
fn order_is_the_same_with_one_worker_and_with_eight() {
    let fx = fixture();
    for mode in Mode::ALL {
        let run = |workers: usize, prefetch: usize| {
            let loader = Loader::builder(sampler(mode, 12))
                .stream(fx.data_stream())
                .stream(fx.ragged_stream())
                .num_workers(workers)
                .prefetch(prefetch)
                .build()
                .unwrap();
            take(&loader, 60)
        };
        let serial = run(1, 1);
        assert_eq!(
            serial.iter().map(|s| s.step).collect::<Vec<_>>(),
            (0..60).collect::<Vec<_>>()
        );
        assert_eq!(run(8, 8), serial, "{mode}: 8 workers, prefetch 8");
        assert_eq!(run(8, 3), serial, "{mode}: 8 workers, prefetch 3");
    }
}

#[test]
fn sharded_loaders_split_each_global_batch() {
    let fx = fixture();
    let global = Loader::builder(sampler(Mode::Shuffle, 16))
        .stream(fx.label_stream())
        .build()
        .unwrap();
    let ranks: Vec<Loader> = (0..2)
        .map(|rank| {
            Loader::builder(sampler(Mode::Shuffle, 16).sharded(rank, 2).unwrap())
                .stream(fx.label_stream())
                .build()
                .unwrap()
        })
        .collect();
    assert_eq!(ranks[1].local_batch_size(), 8);
    for _ in 0..20 {
        let whole = snapshot(&global.next().unwrap());
        let parts: Vec<Snapshot> = ranks.iter().map(|l| snapshot(&l.next().unwrap())).collect();
        assert_eq!(
            [parts[0].indices.clone(), parts[1].indices.clone()].concat(),
            whole.indices
        );
        assert_eq!(
            [parts[0].columns[0].1.clone(), parts[1].columns[0].1.clone()].concat(),
            whole.columns[0].1
        );
    }
}
