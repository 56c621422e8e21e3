//! Loader throughput next to the loop it replaces: 20,000 smooth image-like
//! 12 KiB records, batches of 256 IID indices.
//!
//! * `direct`: the sampler fills an index buffer and `store.gather` decodes
//!   into one reused batch buffer, on the calling thread (plus the store's
//!   own parallel fan-out).
//! * `loader`: `Loader::next` end to end (4 workers, prefetch 4, the Python
//!   `DataLoader` defaults), recycling every batch.
//!
//! Both in bytes of batch per second; the target is loader ≥ 90% of direct.
//! Records stored raw (the copy-bound case, where loader overhead shows
//! most) and deflate-compressed (decode-bound).

use std::{hint::black_box, sync::Arc};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loaderx_benches::{BATCH, RECORD, image_record};
use loaderx_loader::{Loader, Stream};
use loaderx_sampler::{Mode, Sampler};
use loaderx_store::{CodecId, Store};

const RECORDS: u64 = 20_000;
const SEED: u64 = 42;

/// A store of `RECORDS` image records encoded with `codec`, in `dir`.
fn image_store(dir: &std::path::Path, codec: CodecId) -> Arc<Store> {
    let store: Store = Store::open(dir.join(codec.name())).unwrap();
    const PART: u64 = 1000;
    for first in (0..RECORDS).step_by(PART as usize) {
        let records: Vec<u8> = (first..first + PART).flat_map(image_record).collect();
        store
            .append_fixed_with(codec, &records, PART as usize, RECORD)
            .unwrap();
    }
    Arc::new(store)
}

/// Before timing: the loader's first batches hold exactly what a direct gather
/// at the sampler's indices for their step gives, so the bench measures a
/// loader that delivers the right bytes.
fn check_batches(loader: &Loader, sampler: &Sampler, store: &Store) {
    let mut idxs = vec![0u64; BATCH];
    let mut want = vec![0u8; BATCH * RECORD];
    for _ in 0..8 {
        let batch = loader.next().unwrap();
        sampler.indices_at(batch.step(), &mut idxs).unwrap();
        store.gather(&idxs, &mut want, RECORD).unwrap();
        assert_eq!(batch.len(), BATCH);
        assert!(
            batch.columns()[0].data() == want.as_slice(),
            "loader batch {} differs from a direct gather",
            batch.step()
        );
        loader.recycle(batch);
    }
}

fn loader_vs_direct(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    for codec in [CodecId::Raw, CodecId::Deflate] {
        let store = image_store(dir.path(), codec);
        let sampler = Sampler::new(RECORDS, BATCH, Mode::Iid, SEED).unwrap();
        let mut group = c.benchmark_group(format!("loader-{}", codec.name()));
        group.throughput(Throughput::Bytes((BATCH * RECORD) as u64));

        let mut direct = sampler.clone();
        let mut idxs = vec![0u64; BATCH];
        let mut buf = vec![0u8; BATCH * RECORD];
        // Warm: every page of the store mapped and cached.
        for _ in 0..2 * RECORDS as usize / BATCH {
            direct.fill(&mut idxs).unwrap();
            store.gather(&idxs, &mut buf, RECORD).unwrap();
        }
        group.bench_function("direct", |b| {
            b.iter(|| {
                direct.fill(&mut idxs).unwrap();
                store.gather(&idxs, &mut buf, RECORD).unwrap();
                black_box(&buf);
            })
        });

        let loader = Loader::builder(sampler.clone())
            .stream(Stream::fixed("image", store.clone(), RECORD))
            .num_workers(4)
            .prefetch(4)
            .build()
            .unwrap();
        check_batches(&loader, &sampler, &store);
        group.bench_function("loader", |b| {
            b.iter(|| {
                let batch = loader.next().unwrap();
                black_box(batch.columns()[0].data());
                loader.recycle(batch);
            })
        });
        loader.close();
        group.finish();
    }
}

criterion_group!(benches, loader_vs_direct);
criterion_main!(benches);
