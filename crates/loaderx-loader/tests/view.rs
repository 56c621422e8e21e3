//! A ragged stream's record sizes and bytes come from one view of its
//! source.

use std::{
    cell::Cell,
    sync::{
        RwLock, RwLockReadGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use loaderx_loader::{Loader, Source, Stream};
use loaderx_sampler::{Mode, Sampler};
use loaderx_store::{Result, Store};

/// Records in the store, in every generation.
const N: u64 = 32;

/// Size of record `index` in `generation`: never the same in two
/// consecutive generations.
fn size(index: u64, generation: u64) -> usize {
    16 + ((index + generation) % 9) as usize * 37
}

/// Record `index` of `generation`: its index, its generation and its size
/// (4 bytes each), then a pattern of the three.
fn record(index: u64, generation: u64) -> Vec<u8> {
    let len = size(index, generation);
    let mut bytes = Vec::with_capacity(len);
    for field in [index, generation, len as u64] {
        bytes.extend_from_slice(&(field as u32).to_le_bytes());
    }
    bytes.extend((12..len).map(|k| pattern(index, generation, k)));
    bytes
}

fn pattern(index: u64, generation: u64, k: usize) -> u8 {
    (index * 131 + generation * 17 + k as u64 * 3) as u8 | 1
}

/// Parses a gathered item as [`record`]: `(index, generation)`, or why it is
/// not exactly one record.
fn parse(item: &[u8]) -> std::result::Result<(u64, u64), String> {
    if item.len() < 12 {
        return Err(format!("{} bytes, too short for a record", item.len()));
    }
    let field = |at: usize| u64::from(u32::from_le_bytes(item[at..at + 4].try_into().unwrap()));
    let (index, generation, len) = (field(0), field(4), field(8) as usize);
    if len != item.len() {
        return Err(format!(
            "record {index} of generation {generation} is {len} bytes, its slot {}",
            item.len()
        ));
    }
    match (12..len).find(|&k| item[k] != pattern(index, generation, k)) {
        Some(k) => Err(format!(
            "record {index} of generation {generation} is wrong at byte {k}"
        )),
        None => Ok((index, generation)),
    }
}

/// A real store that another party rewrites every time the store is taken
/// for reading: each acquisition (a call of any gathering method, or one
/// [`Source::with_view`]) first deletes every record and appends the next
/// generation, in which every record has another size, then reads under a
/// shared lock that keeps the next rewrite out until it is done.
#[derive(Debug)]
struct Rewritten {
    store: RwLock<Store>,
    generation: AtomicU64,
    acquisitions: AtomicU64,
}

impl Rewritten {
    fn new(store: Store) -> Rewritten {
        let rewritten = Rewritten {
            store: RwLock::new(store),
            generation: AtomicU64::new(0),
            acquisitions: AtomicU64::new(0),
        };
        rewritten.write_generation(0);
        rewritten
    }

    fn write_generation(&self, generation: u64) {
        let mut store = self.store.write().unwrap();
        let all: Vec<u64> = (0..store.len()).collect();
        store.delete(&all).unwrap();
        let records: Vec<Vec<u8>> = (0..N).map(|i| record(i, generation)).collect();
        let lens: Vec<u32> = records.iter().map(|r| r.len() as u32).collect();
        let offsets: Vec<u64> = lens
            .iter()
            .scan(0u64, |at, &l| {
                let o = *at;
                *at += u64::from(l);
                Some(o)
            })
            .collect();
        store
            .append_ragged(&records.concat(), &offsets, &lens)
            .unwrap();
        self.generation.store(generation, Ordering::SeqCst);
    }

    /// Rewrites the store, then takes it for reading.
    fn acquire(&self) -> RwLockReadGuard<'_, Store> {
        // Rewriting needs the write lock, which the view this thread holds
        // would keep out forever: fail instead of hanging.
        assert!(
            !IN_VIEW.get(),
            "the source was called back from inside its own view"
        );
        self.acquisitions.fetch_add(1, Ordering::SeqCst);
        self.write_generation(self.generation.load(Ordering::SeqCst) + 1);
        self.store.read().unwrap()
    }
}

impl Source for Rewritten {
    fn len(&self) -> u64 {
        N
    }

    fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        self.acquire().gather(idxs, dst, stride)
    }

    fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], item_len: usize) -> Result<()> {
        self.acquire().gather_exact(idxs, dst, item_len)
    }

    fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
        self.acquire().gather_ragged(idxs, dst, offsets)
    }

    fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        self.acquire().lengths(idxs, out)
    }

    fn with_view(&self, f: &mut dyn FnMut(&dyn Source) -> Result<()>) -> Result<()> {
        let view = self.acquire();
        IN_VIEW.set(true);
        let result = f(&*view);
        IN_VIEW.set(false);
        result
    }
}

thread_local! {
    /// Whether this thread is inside [`Rewritten::with_view`].
    static IN_VIEW: Cell<bool> = const { Cell::new(false) };
}

/// Guards the finding "the loader reads lengths and records under separate
/// locks, so a delete between them can yield a zero-padded or misaligned
/// sample": a ragged batch must take its sizes and its bytes through one
/// [`Source::with_view`].
///
/// The source is a real store rewritten (delete everything, append a
/// generation in which every record has another size) before each
/// acquisition, so the outcome does not depend on timing. A loader that
/// asked for the sizes and the bytes in two acquisitions would always see
/// two generations: each item would come out misaligned (a record longer
/// than its slot fails the gather; a shorter one leaves padding behind it),
/// and the check of every item's self-description below fails. Through one
/// view, every item is exactly the record at its index, all of one
/// generation, and the batch cost one acquisition.
#[test]
fn a_ragged_batch_reads_sizes_and_bytes_through_one_view() {
    let dir = tempfile::tempdir().unwrap();
    let source = std::sync::Arc::new(Rewritten::new(
        Store::open(dir.path().join("ragged")).unwrap(),
    ));
    const BATCH: usize = 8;
    const STEPS: u64 = 40;
    const PREFETCH: usize = 2;
    let loader = Loader::builder(Sampler::new(N, BATCH, Mode::Iid, 11).unwrap())
        .stream(Stream::ragged("ragged", source.clone()))
        .num_workers(3)
        .prefetch(PREFETCH)
        .build()
        .unwrap();
    for step in 0..STEPS {
        let batch = loader.next().unwrap_or_else(|e| panic!("step {step}: {e}"));
        let column = batch.column("ragged").unwrap();
        let offsets = column.offsets().unwrap();
        assert_eq!(*offsets.last().unwrap() as usize, column.data().len());
        let mut generations = Vec::new();
        for (i, &index) in batch.indices().iter().enumerate() {
            let (found, generation) = parse(column.item(i))
                .unwrap_or_else(|why| panic!("step {step}, item {i} (index {index}): {why}"));
            assert_eq!(found, index, "step {step}, item {i}");
            generations.push(generation);
        }
        generations.dedup();
        assert_eq!(
            generations.len(),
            1,
            "step {step}: one view, one generation"
        );
        loader.recycle(batch);
    }
    loader.close();
    // One acquisition per batch produced; at most `PREFETCH` steps past the
    // last one taken were claimed.
    let acquisitions = source.acquisitions.load(Ordering::SeqCst);
    assert!(
        (STEPS..=STEPS + PREFETCH as u64).contains(&acquisitions),
        "{acquisitions} acquisitions for {STEPS} batches and a few prefetched"
    );
}
