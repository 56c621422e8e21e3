//! Store throughput: append and gather for every codec, per-core decode
//! speed, and opening a store of a million records, next to a plain memcpy
//! of the same bytes. `cargo xtask bench` keeps the figures in docs/bench/.

use std::{
    hint::black_box,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use loaderx_benches::{BATCH, RECORD, image_records, random_batches, text_record, token_record};
use loaderx_store::{
    CodecId, Deflate, OpenOptions, Store,
    format::{
        CodecTag,
        v2::{Dtype, Kind, Schema},
    },
};

const RECORDS: usize = 4096;

fn gather(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let data = image_records(RECORDS, 1);
    let batches = random_batches(RECORDS as u64, 64, 7);
    let mut group = c.benchmark_group("gather");
    group.throughput(Throughput::Bytes((BATCH * RECORD) as u64));

    // Baselines: copying the same scattered records out of memory, on one
    // thread and on as many threads as the store's gather uses.
    let mut dst = vec![0u8; BATCH * RECORD];
    let mut k = 0;
    group.bench_function("memcpy-1-thread", |b| {
        b.iter(|| {
            let idxs = &batches[k % batches.len()];
            k += 1;
            copy_records(&data, idxs, &mut dst);
            black_box(&dst);
        })
    });
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let helpers = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.saturating_sub(1).max(1))
        .build()
        .unwrap();
    group.bench_function("memcpy-caller+pool", |b| {
        b.iter(|| {
            let idxs = &batches[k % batches.len()];
            k += 1;
            copy_records_shared(&helpers, threads, &data, idxs, &mut dst);
            black_box(&dst);
        })
    });

    for codec in CodecId::ALL {
        let store: Store<Deflate> = Store::open(dir.path().join(codec.name())).unwrap();
        store
            .append_fixed_with(codec, &data, RECORDS, RECORD)
            .unwrap();
        // Warm: every page mapped and cached.
        for idxs in &batches {
            store.gather(idxs, &mut dst, RECORD).unwrap();
        }
        let stats = store.stats().unwrap();
        eprintln!(
            "{codec}: {} records, ratio {:.3}",
            stats.records,
            (RECORDS * RECORD) as f64 / stats.live_bytes as f64
        );
        group.bench_function(codec.name(), |b| {
            b.iter(|| {
                let idxs = &batches[k % batches.len()];
                k += 1;
                store.gather(idxs, &mut dst, RECORD).unwrap();
                black_box(&dst);
            })
        });
    }
    // Format v2 (a dense store of the same records): table entries carry
    // their own checksum, and compressed records are checked before they
    // are decoded; `+crc` also checks raw records (`check_raw`).
    for (codec, tag, check_raw) in [
        (CodecId::Raw, CodecTag::RAW, false),
        (CodecId::Raw, CodecTag::RAW, true),
        (CodecId::Lz4, CodecTag::LZ4, false),
        (CodecId::Zstd, CodecTag::ZSTD, false),
        (CodecId::Deflate, CodecTag::FLATE, false),
    ] {
        let schema = Schema {
            kind: Kind::Dense,
            dtype: Dtype::U8,
            shape: vec![RECORD as u64],
            ndim: 1,
            codec: tag,
            dictionary: None,
            codecs: Vec::new(),
        };
        let name = format!("v2-{}{}", codec.name(), if check_raw { "+crc" } else { "" });
        let path = dir.path().join(&name);
        Store::<Deflate>::create_v2(&path, &schema, OpenOptions::default())
            .unwrap()
            .append_fixed_with(codec, &data, RECORDS, RECORD)
            .unwrap();
        let options = OpenOptions {
            check_raw,
            ..OpenOptions::read_only()
        };
        let store: Store<Deflate> = Store::open_with(&path, options).unwrap();
        for idxs in &batches {
            store.gather(idxs, &mut dst, RECORD).unwrap();
        }
        group.bench_function(&name, |b| {
            b.iter(|| {
                let idxs = &batches[k % batches.len()];
                k += 1;
                store.gather(idxs, &mut dst, RECORD).unwrap();
                black_box(&dst);
            })
        });
    }
    group.finish();
}

/// Copies the records `idxs` of `data` into consecutive slots of `dst`.
fn copy_records(data: &[u8], idxs: &[u64], dst: &mut [u8]) {
    for (slot, &i) in dst.chunks_exact_mut(RECORD).zip(idxs) {
        let i = usize::try_from(i).unwrap();
        slot.copy_from_slice(&data[i * RECORD..][..RECORD]);
    }
}

/// One part of a shared copy: its slots in the destination and their indices.
type Part<'a> = (&'a mut [u8], &'a [u64]);

/// [`copy_records`] shared out the way the store shares a gather: the batch
/// is cut into `4 × threads` parts, and the calling thread plus
/// `threads − 1` helpers of a persistent pool claim parts until none are
/// left. The baseline the store's parallel gather is judged against.
fn copy_records_shared(
    helpers: &rayon::ThreadPool,
    threads: usize,
    data: &[u8],
    idxs: &[u64],
    dst: &mut [u8],
) {
    let parts = (threads * 4).min(idxs.len()).max(1);
    let per_part = idxs.len().div_ceil(parts);
    let work: Vec<Mutex<Option<Part<'_>>>> = dst
        .chunks_mut(per_part * RECORD)
        .zip(idxs.chunks(per_part))
        .map(|part| Mutex::new(Some(part)))
        .collect();
    let next = AtomicUsize::new(0);
    let claim = || {
        while let Some(slot) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
            if let Some((out, ids)) = slot.lock().unwrap().take() {
                copy_records(data, ids, out);
            }
        }
    };
    helpers.in_place_scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|_| claim());
        }
        claim();
    });
}

/// Small batches around the serial/parallel threshold: per-batch time should
/// grow smoothly with the batch; a step up where the pool kicks in means the
/// threshold is too low, a flat stretch above it that it is too high.
fn gather_small(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let data = image_records(512, 11);
    let batches = random_batches(512, 64, 3);
    let mut group = c.benchmark_group("gather-small");
    let mut dst = vec![0u8; BATCH * RECORD];
    for codec in [CodecId::Raw, CodecId::Deflate] {
        let store: Store<Deflate> = Store::open(dir.path().join(codec.name())).unwrap();
        store.append_fixed_with(codec, &data, 512, RECORD).unwrap();
        let sizes: &[usize] = if codec == CodecId::Raw {
            &[1, 4, 7, 8, 16, 32, 64]
        } else {
            &[1, 2, 4, 8]
        };
        for &k in sizes {
            group.throughput(Throughput::Bytes((k * RECORD) as u64));
            let mut n = 0;
            group.bench_function(format!("{codec}/{k}"), |b| {
                b.iter(|| {
                    let idxs = &batches[n % batches.len()][..k];
                    n += 1;
                    store.gather(idxs, &mut dst[..k * RECORD], RECORD).unwrap();
                    black_box(&dst);
                })
            });
        }
    }
    group.finish();
}

/// Labels: 256 random `int64` records out of 1,000,000, from a run-table
/// store (what `Dense.create` makes for them), next to a copy loop over
/// the same bytes in memory. The gap is the engine's per-call cost: its
/// checks, its lookups and its lock; the Python `Dense[idx]` row of
/// `benches/field.py` adds the binding's.
fn gather_labels(c: &mut Criterion) {
    const LABELS: usize = 1_000_000;
    const PICK: usize = 256;
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..LABELS as u64)
        .flat_map(|i| (i * 7 % 1000).to_le_bytes())
        .collect();
    let batches = random_batches(LABELS as u64, 64, 5);
    let mut group = c.benchmark_group("gather-labels");
    group.throughput(Throughput::Elements(PICK as u64));
    let mut dst = vec![0u8; PICK * 8];
    let mut k = 0;
    group.bench_function("copy-loop", |b| {
        b.iter(|| {
            let idxs = &batches[k % batches.len()][..PICK];
            k += 1;
            for (slot, &i) in dst.chunks_exact_mut(8).zip(idxs) {
                let i = usize::try_from(i).unwrap();
                slot.copy_from_slice(&data[i * 8..][..8]);
            }
            black_box(&dst);
        })
    });
    let schema = Schema {
        kind: Kind::Dense,
        dtype: Dtype::from_name("<i8").unwrap(),
        shape: Vec::new(),
        ndim: 0,
        codec: CodecTag::RAW,
        dictionary: None,
        codecs: Vec::new(),
    };
    let path = dir.path().join("labels");
    Store::<Deflate>::create_v2_runs(&path, &schema, OpenOptions::default())
        .unwrap()
        .append_fixed_with(CodecId::Raw, &data, LABELS, 8)
        .unwrap();
    let store: Store<Deflate> = Store::open_with(&path, OpenOptions::read_only()).unwrap();
    group.bench_function("store", |b| {
        b.iter(|| {
            let idxs = &batches[k % batches.len()][..PICK];
            k += 1;
            store.gather(idxs, &mut dst, 8).unwrap();
            black_box(&dst);
        })
    });
    group.finish();
}

fn decode_per_core(c: &mut Criterion) {
    let images = image_records(BATCH, 3);
    let tokens: Vec<u8> = (0..BATCH as u64).flat_map(token_record).collect();
    let text: Vec<u8> = (0..BATCH as u64).flat_map(text_record).collect();
    let mut group = c.benchmark_group("decode-1-core");
    group.throughput(Throughput::Bytes((BATCH * RECORD) as u64));
    for (kind, data, codec) in [CodecId::Deflate, CodecId::Zstd, CodecId::Lz4]
        .into_iter()
        .flat_map(|c| {
            [
                ("image", &images, c),
                ("tokens", &tokens, c),
                ("text", &text, c),
            ]
        })
    {
        let encoded: Vec<Vec<u8>> = data
            .chunks_exact(RECORD)
            .map(|r| {
                let mut out = vec![0u8; RECORD - 1];
                let n = codec.encode(r, &mut out).unwrap_or_else(|| {
                    out.copy_from_slice(&r[..RECORD - 1]);
                    usize::MAX
                });
                if n == usize::MAX {
                    // Did not shrink: the store would keep it raw.
                    return r.to_vec();
                }
                out.truncate(n);
                out
            })
            .collect();
        let stored: usize = encoded.iter().map(Vec::len).sum();
        eprintln!(
            "{codec}/{kind}: ratio {:.3}",
            data.len() as f64 / stored as f64
        );
        let mut dst = vec![0u8; RECORD];
        group.bench_function(format!("{codec}/{kind}"), |b| {
            b.iter(|| {
                for e in &encoded {
                    if e.len() == RECORD {
                        dst.copy_from_slice(e);
                    } else {
                        codec.decode(e, &mut dst).unwrap();
                    }
                }
                black_box(&dst);
            })
        });
    }
    group.finish();
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let data = image_records(1024, 5);
    let mut group = c.benchmark_group("append");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(data.len() as u64));
    let mut n = 0;
    for codec in CodecId::ALL {
        group.bench_function(codec.name(), |b| {
            b.iter_batched(
                || {
                    n += 1;
                    Store::<Deflate>::open(dir.path().join(format!("a{n}"))).unwrap()
                },
                |store| {
                    store.append_fixed_with(codec, &data, 1024, RECORD).unwrap();
                    store
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn open_million(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("million");
    {
        let store: Store<Deflate> = Store::open(&path).unwrap();
        let bytes = vec![1u8; 1 << 20];
        for _ in 0..4 {
            store
                .append_fixed_with(CodecId::Raw, &bytes, 250_000, 4)
                .unwrap();
        }
        assert_eq!(store.len(), 1_000_000);
    }
    // Resident memory added by one open, read from /proc.
    let rss = || -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
            * 4096
    };
    let before = rss();
    let t = Instant::now();
    let store: Store<Deflate> = Store::open_read_only(&path).unwrap();
    let took = t.elapsed();
    eprintln!(
        "open 1M records: {:?}, resident +{} KiB",
        took,
        rss().saturating_sub(before) / 1024
    );
    drop(store);
    c.bench_function("open-1M-records", |b| {
        b.iter(|| black_box(Store::<Deflate>::open_read_only(&path).unwrap()))
    });
}

criterion_group!(
    benches,
    gather,
    gather_small,
    gather_labels,
    decode_per_core,
    append,
    open_million
);
criterion_main!(benches);
