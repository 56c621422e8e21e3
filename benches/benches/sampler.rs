//! Index generation throughput of `loaderx-sampler`, in indices per second.
//!
//! Every mode at global batch 256 and 8192 over an index space of one
//! million, on one core, writing into a reused buffer (as the loader does).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use loaderx_sampler::{Mode, Sampler};

const LEN: u64 = 1_000_000;
const BATCHES: [usize; 2] = [256, 8192];

fn fill(c: &mut Criterion) {
    let mut group = c.benchmark_group("sampler_fill");
    for mode in Mode::ALL {
        for batch in BATCHES {
            let mut sampler = Sampler::new(LEN, batch, mode, 0x5eed).expect("valid sampler");
            let mut out = vec![0u64; batch];
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_function(BenchmarkId::new(mode.name(), batch), |b| {
                b.iter(|| {
                    sampler
                        .fill(black_box(&mut out))
                        .expect("buffer has the batch size");
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, fill);
criterion_main!(benches);
