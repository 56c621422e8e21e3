//! Shutdown under every queue state, waiting with a timeout, resuming from a
//! state, and the memory bound.

mod common;

use std::{
    sync::{Arc, mpsc},
    thread,
    time::Duration,
};

use common::*;
use loaderx_loader::{Error, Loader, Stream};
use loaderx_sampler::{Mode, Sampler, SamplerState};

/// Waits (sleeping, not spinning hot) until `done` holds. Only for setting
/// up a queue state; nothing is asserted about how long it takes.
fn wait_until(mut done: impl FnMut() -> bool) {
    while !done() {
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn two_hundred_create_consume_close_cycles_finish() {
    let fx = fixture();
    for cycle in 0..200usize {
        let loader = Loader::builder(sampler(Mode::ALL[cycle % Mode::ALL.len()], 8))
            .stream(fx.data_stream())
            .stream(fx.ragged_stream())
            .num_workers(1 + cycle % 8)
            .prefetch(1 + cycle % 5)
            .build()
            .unwrap();
        let mut held = Vec::new();
        for k in 0..cycle % 4 {
            let batch = loader.next().unwrap();
            assert_eq!(batch.step(), k as u64);
            if k % 2 == 0 {
                loader.recycle(batch);
            } else {
                held.push(batch); // outlives the loader's close
            }
        }
        match cycle % 3 {
            0 => drop(loader),
            1 => {
                loader.close();
                assert!(matches!(loader.next(), Err(Error::Closed)));
            }
            _ => {
                loader.close();
                loader.close();
                assert!(matches!(
                    loader.next_timeout(Duration::from_secs(60)),
                    Err(Error::Closed)
                ));
            }
        }
        drop(held);
    }
}

#[test]
fn close_with_a_full_queue_and_no_consumer() {
    let fx = fixture();
    let loader = Loader::builder(sampler(Mode::Iid, 8))
        .stream(fx.data_stream())
        .stream(fx.label_stream())
        .num_workers(6)
        .prefetch(4)
        .allocator(Counting::default())
        .build()
        .unwrap();
    wait_until(|| loader.prefetched() == 4);
    // The workers are parked: nothing beyond the window was made.
    assert_eq!(loader.allocator().counts().fresh, [4, 4]);
    loader.close();
    assert!(loader.is_closed());
    // The prefetched batches went back to the allocator.
    assert_eq!(loader.allocator().counts().outstanding, [0, 0]);
}

#[test]
fn close_while_workers_are_mid_gather() {
    let fx = fixture();
    let gate = Gated::new(fx.data.clone());
    let loader = Arc::new(
        Loader::builder(sampler(Mode::Sequential, 8))
            .stream(Stream::fixed("data", gate.clone(), ITEM))
            .stream(fx.label_stream())
            .num_workers(3)
            .prefetch(4)
            .allocator(Counting::default())
            .build()
            .unwrap(),
    );
    // Every worker is inside a gather, holding a buffer.
    gate.wait_for_arrivals(3);

    // A consumer blocked in next() and a thread closing the loader.
    let (tx, rx) = mpsc::channel();
    let consumer = {
        let loader = Arc::clone(&loader);
        thread::spawn(move || tx.send(loader.next().map(|b| b.step())).unwrap())
    };
    let closer = {
        let loader = Arc::clone(&loader);
        thread::spawn(move || loader.close())
    };
    wait_until(|| loader.is_closed());
    // close() wakes the consumer before it waits for the workers, which
    // are still stuck in their gathers.
    assert!(matches!(rx.recv().unwrap(), Err(Error::Closed)));
    gate.open();
    closer.join().unwrap();
    consumer.join().unwrap();
    // The gathers finished after the close and their buffers were returned.
    let counts = loader.allocator().counts();
    assert_eq!(counts.outstanding, [0, 0]);
    assert_eq!(counts.fresh[0], 3, "one data buffer per worker");
}

#[test]
fn next_timeout_returns_none_while_waiting_and_keeps_the_batch() {
    let fx = fixture();
    let gate = Gated::new(fx.data.clone());
    let loader = Loader::builder(sampler(Mode::Shuffle, 8))
        .stream(Stream::fixed("data", gate.clone(), ITEM))
        .num_workers(2)
        .prefetch(2)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(
            loader
                .next_timeout(Duration::from_millis(5))
                .unwrap()
                .is_none()
        );
    }
    gate.open();
    for step in 0..5 {
        let batch = loader
            .next_timeout(Duration::from_secs(600))
            .unwrap()
            .expect("the gate is open");
        assert_eq!(batch.step(), step);
    }
}

#[test]
fn a_loader_built_from_a_saved_state_continues_bit_identically() {
    let fx = fixture();
    let build = |sampler: Sampler| {
        Loader::builder(sampler)
            .stream(fx.data_stream())
            .stream(fx.ragged_stream())
            .num_workers(4)
            .prefetch(4)
            .build()
            .unwrap()
    };
    for mode in Mode::ALL {
        let uninterrupted = take(&build(sampler(mode, 12)), 40);

        let first = build(sampler(mode, 12));
        assert_eq!(take(&first, 15), uninterrupted[..15]);
        let saved = first.state().to_bytes();
        drop(first); // with batches still prefetched

        let state = SamplerState::from_bytes(&saved).unwrap();
        assert_eq!(state.step, 15);
        let resumed = build(Sampler::from_state(&state).unwrap());
        assert_eq!(resumed.state(), state);
        assert_eq!(take(&resumed, 25), uninterrupted[15..], "{mode}");
    }
}

#[test]
fn restore_on_a_running_loader_rewinds_and_skips_ahead() {
    let fx = fixture();
    let loader = Loader::builder(sampler(Mode::Iid, 12))
        .stream(fx.data_stream())
        .stream(fx.label_stream())
        .num_workers(4)
        .prefetch(4)
        .allocator(Counting::default())
        .build()
        .unwrap();
    let reference = take(&loader, 40);

    // Rewind while batches 40.. are prefetched or in flight.
    let mut at = loader.state();
    at.step = 10;
    loader.restore(&at).unwrap();
    assert_eq!(loader.state(), at);
    assert_eq!(take(&loader, 30), reference[10..]);

    // Skip ahead, from a state of an unsharded run taken elsewhere.
    at.step = 33;
    loader.restore(&at).unwrap();
    assert_eq!(take(&loader, 7), reference[33..]);

    // A state of another configuration is refused, and nothing changes.
    let other = Sampler::new(N, 6, Mode::Iid, 7).unwrap().state();
    assert!(matches!(loader.restore(&other), Err(Error::Sampler(_))));
    let batch = loader.next().unwrap();
    assert_eq!(batch.step(), 40);
    loader.recycle(batch);

    loader.close();
    assert_eq!(loader.allocator().counts().outstanding, [0, 0]);
    assert!(matches!(loader.restore(&at), Err(Error::Closed)));
}

#[test]
fn buffers_in_use_stay_within_prefetch_plus_the_consumers() {
    let fx = fixture();
    let prefetch = 3;
    let loader = Loader::builder(sampler(Mode::Shuffle, 16))
        .stream(fx.data_stream())
        .stream(fx.ragged_stream())
        .num_workers(8)
        .prefetch(prefetch)
        .allocator(Counting::default())
        .build()
        .unwrap();
    for _ in 0..300 {
        let batch = loader.next().unwrap();
        loader.recycle(batch);
    }
    let counts = loader.allocator().counts();
    // At most `prefetch` batches are between claim and delivery, plus the
    // one the consumer holds; with recycling, no more are ever allocated.
    for stream in 0..2 {
        assert!(counts.max_outstanding[stream] <= prefetch + 1, "{counts:?}");
        assert!(counts.fresh[stream] <= prefetch + 1, "{counts:?}");
    }
    loader.close();
    assert_eq!(loader.allocator().counts().outstanding, [0, 0]);
}
