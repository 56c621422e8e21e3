//! Failures reach the consumer as an `Err` in place of the batch they
//! concern, in order, and the loader goes on; bad configurations are refused.

mod common;

use std::{fs, os::unix::fs::FileExt, sync::Arc};

use common::*;
use loaderx_loader::{Error, Loader, Source, Stream};
use loaderx_sampler::{Mode, Sampler};
use loaderx_store::Store;

/// Overwrites the stored bytes of record `index` of the closed store at
/// `path` with 0xFF, which is no valid DEFLATE stream (block type 3).
fn corrupt_record(path: &std::path::Path, index: u64) {
    let meta = fs::File::open(path.join("meta.zr")).unwrap();
    let mut entry = [0u8; 16];
    meta.read_exact_at(&mut entry, 16 + 16 * index).unwrap();
    let offset = u32::from_le_bytes(entry[0..4].try_into().unwrap());
    let phys = u32::from_le_bytes(entry[4..8].try_into().unwrap());
    let chunk = u16::from_le_bytes(entry[12..14].try_into().unwrap());
    assert_eq!(entry[14], 1, "the record is flate-compressed");
    let file = fs::OpenOptions::new()
        .write(true)
        .open(path.join(format!("{chunk}.zr")))
        .unwrap();
    file.write_all_at(&vec![0xFF; phys as usize], u64::from(offset))
        .unwrap();
}

#[test]
fn a_corrupt_record_fails_exactly_its_batches_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    drop(write_fixed(&path, (0..N).map(data_record)));
    let bad = 21;
    corrupt_record(&path, bad);
    let data: Arc<Store> = Arc::new(Store::open(&path).unwrap());
    let label = Arc::new(write_fixed(
        &dir.path().join("label"),
        (0..N).map(|i| label_record(i).to_vec()),
    ));

    // Sequential, 8 per batch: record 21 is in step 2 of every 12-step lap.
    let sampler = Sampler::new(N, 8, Mode::Sequential, 0).unwrap();
    let loader = Loader::builder(sampler.clone())
        .stream(Stream::fixed("label", label.clone(), 4))
        .stream(Stream::fixed("data", data.clone(), ITEM))
        .num_workers(8)
        .prefetch(6)
        .allocator(Counting::default())
        .build()
        .unwrap();
    let mut idxs = vec![0u64; 8];
    for step in 0..30u64 {
        sampler.indices_at(step, &mut idxs).unwrap();
        match loader.next() {
            Ok(batch) => {
                assert!(!idxs.contains(&bad), "step {step} should have failed");
                assert_eq!(batch.step(), step);
                assert_eq!(batch.columns()[1].data(), direct_fixed(&data, &idxs, ITEM));
                loader.recycle(batch);
            }
            Err(e) => {
                assert!(idxs.contains(&bad), "step {step} failed: {e}");
                assert_eq!(e.step(), Some(step));
                assert!(matches!(&e, Error::Gather { stream, .. } if &**stream == "data"));
                let store_error = e.store_error().expect("a store error");
                assert_eq!(store_error.code(), -7, "{store_error}");
                assert!(matches!(
                    store_error,
                    loaderx_store::Error::Corrupt { entry: 21, .. }
                ));
                assert!(e.to_string().contains("\"data\""), "{e}");
                // The step is consumed: the state moved past it.
                assert_eq!(loader.state().step, step + 1);
            }
        }
    }
    loader.close();
    // The label buffers of the failed batches were returned too.
    assert_eq!(loader.allocator().counts().outstanding, [0, 0]);
}

/// A source that panics when asked for `poison`.
#[derive(Debug)]
struct Panicky {
    inner: Arc<Store>,
    poison: u64,
}

impl Source for Panicky {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> loaderx_store::Result<()> {
        assert!(!idxs.contains(&self.poison), "poisoned index requested");
        self.inner.gather(idxs, dst, stride)
    }

    fn gather_exact(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        item_len: usize,
    ) -> loaderx_store::Result<()> {
        assert!(!idxs.contains(&self.poison), "poisoned index requested");
        self.inner.gather_exact(idxs, dst, item_len)
    }

    fn gather_ragged(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        offsets: &[u64],
    ) -> loaderx_store::Result<()> {
        self.inner.gather_ragged(idxs, dst, offsets)
    }

    fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> loaderx_store::Result<()> {
        self.inner.lengths(idxs, out)
    }

    fn with_view(
        &self,
        f: &mut dyn FnMut(&dyn Source) -> loaderx_store::Result<()>,
    ) -> loaderx_store::Result<()> {
        f(self)
    }
}

#[test]
fn a_panicking_source_fails_its_batch_and_the_workers_go_on() {
    let fx = fixture();
    let source = Arc::new(Panicky {
        inner: fx.data.clone(),
        poison: 5,
    });
    let loader = Loader::builder(Sampler::new(N, 4, Mode::Sequential, 0).unwrap())
        .stream(Stream::fixed("data", source, ITEM))
        .num_workers(2)
        .prefetch(4)
        .build()
        .unwrap();
    // Record 5 is in step 1 of each 24-step lap; 60 steps need all the
    // workers to survive their panics.
    for step in 0..60u64 {
        match loader.next() {
            Ok(batch) => assert!(step % 24 != 1 && batch.step() == step),
            Err(Error::WorkerPanicked {
                step: failed,
                message,
            }) => {
                assert_eq!((failed, step % 24), (step, 1));
                assert!(message.contains("poisoned"), "{message}");
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
}

#[test]
fn a_record_of_the_wrong_size_in_a_fixed_stream_fails_its_batch() {
    let fx = fixture();
    // Ragged records read as fixed 300-byte ones: only the 300-byte one fits.
    let fits = (0..N).find(|&i| ragged_record(i).len() == 300);
    assert!(fits.is_none(), "pick another item_len");
    let loader = Loader::builder(Sampler::new(N, 4, Mode::Sequential, 0).unwrap())
        .stream(Stream::fixed("ragged", fx.ragged.clone(), 300))
        .num_workers(2)
        .build()
        .unwrap();
    for step in 0..3u64 {
        match loader.next() {
            Err(Error::Gather {
                stream,
                step: s,
                source:
                    loaderx_store::Error::RecordLength {
                        index,
                        expected,
                        found,
                        ..
                    },
            }) => {
                assert_eq!((&*stream, s, expected), ("ragged", step, 300));
                assert_eq!(index, step * 4, "the first record of the batch");
                assert_eq!(found as usize, ragged_record(index).len());
            }
            other => panic!("expected a record length error, got {other:?}"),
        }
    }
}

#[test]
fn bad_configurations_are_refused_before_any_thread_starts() {
    let fx = fixture();
    let sampler = || Sampler::new(N, 8, Mode::Iid, 1).unwrap();
    let err = |b: loaderx_loader::LoaderBuilder| b.build().expect_err("refused");

    assert!(matches!(err(Loader::builder(sampler())), Error::NoStreams));
    assert!(matches!(
        err(Loader::builder(sampler())
            .stream(fx.data_stream())
            .stream(Stream::fixed("data", fx.label.clone(), 4))),
        Error::DuplicateStream { name } if &*name == "data"
    ));
    assert!(matches!(
        err(Loader::builder(sampler()).stream(Stream::fixed("x", fx.data.clone(), 0))),
        Error::ZeroItemLen { .. }
    ));
    assert!(matches!(
        err(Loader::builder(sampler())
            .stream(fx.data_stream())
            .num_workers(0)),
        Error::ZeroSetting {
            setting: "num_workers"
        }
    ));
    assert!(matches!(
        err(Loader::builder(sampler())
            .stream(fx.data_stream())
            .prefetch(0)),
        Error::ZeroSetting {
            setting: "prefetch"
        }
    ));
    let short = Arc::new(write_fixed(
        &fx.dir.path().join("short"),
        (0..N - 1).map(|i| label_record(i).to_vec()),
    ));
    assert!(matches!(
        err(Loader::builder(sampler())
            .stream(fx.data_stream())
            .stream(Stream::fixed("short", short, 4))),
        Error::StreamLength { len, expected: N, .. } if len == N - 1
    ));
    assert!(matches!(
        err(Loader::builder(Sampler::new(N + 1, 8, Mode::Iid, 1).unwrap()).stream(fx.data_stream())),
        Error::SamplerLength { sampler_len, stream_len: N } if sampler_len == N + 1
    ));
    // A sampler over a prefix of the streams is fine (e.g. a training split).
    let prefix = Loader::builder(Sampler::new(N / 2, 8, Mode::Shuffle, 1).unwrap())
        .stream(fx.data_stream())
        .build()
        .unwrap();
    assert!(prefix.next().unwrap().indices().iter().all(|&i| i < N / 2));
}
