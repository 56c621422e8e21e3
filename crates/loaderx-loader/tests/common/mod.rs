//! Fixtures shared by the integration tests: real stores in temp dirs, the
//! reference (a direct gather), and sources and allocators that count, block
//! or fail on purpose.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::{
    path::Path,
    sync::{Arc, Condvar, Mutex},
};

use loaderx_loader::{Batch, BufferAllocator, Loader, Source, Stream};
use loaderx_sampler::{Mode, Sampler};
use loaderx_store::Store;
use tempfile::TempDir;

/// Records in the fixture stores.
pub const N: u64 = 96;
/// Size of a data record.
pub const ITEM: usize = 300;

/// Data record `i`: compressible, different for every `i`.
pub fn data_record(i: u64) -> Vec<u8> {
    (0..ITEM)
        .map(|j| (i as usize * 7 + j / 3 + (j * j * (i as usize + 1)) % 5) as u8)
        .collect()
}

/// Label record `i`: `i` as a little-endian u32.
pub fn label_record(i: u64) -> [u8; 4] {
    (i as u32).to_le_bytes()
}

/// Ragged record `i`: 1 to 700 bytes.
pub fn ragged_record(i: u64) -> Vec<u8> {
    let len = 1 + (i as usize * 37 + 11) % 700;
    (0..len).map(|j| (i as usize + j / 4) as u8).collect()
}

/// The stores of one test, and the directory they live in.
pub struct Fixture {
    pub dir: TempDir,
    pub data: Arc<Store>,
    pub label: Arc<Store>,
    pub ragged: Arc<Store>,
}

/// Writes a fixed-size store of `records` to `path`.
pub fn write_fixed(path: &Path, records: impl Iterator<Item = Vec<u8>>) -> Store {
    let store: Store = Store::open(path).expect("create store");
    let records: Vec<Vec<u8>> = records.collect();
    let item = records[0].len();
    store
        .append_fixed(&records.concat(), records.len(), item)
        .expect("append");
    store
}

/// Data (fixed, deflate), label (fixed, 4 bytes) and ragged stores of `N`
/// records each.
pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = write_fixed(&dir.path().join("data"), (0..N).map(data_record));
    let label = write_fixed(
        &dir.path().join("label"),
        (0..N).map(|i| label_record(i).to_vec()),
    );
    let ragged: Store = Store::open(dir.path().join("ragged")).expect("create store");
    let records: Vec<Vec<u8>> = (0..N).map(ragged_record).collect();
    let lens: Vec<u32> = records.iter().map(|r| r.len() as u32).collect();
    let mut offsets = vec![0u64];
    for r in &records {
        offsets.push(offsets.last().unwrap() + r.len() as u64);
    }
    offsets.pop();
    ragged
        .append_ragged(&records.concat(), &offsets, &lens)
        .expect("append");
    Fixture {
        dir,
        data: Arc::new(data),
        label: Arc::new(label),
        ragged: Arc::new(ragged),
    }
}

impl Fixture {
    pub fn data_stream(&self) -> Stream {
        Stream::fixed("data", self.data.clone(), ITEM)
    }

    pub fn label_stream(&self) -> Stream {
        Stream::fixed("label", self.label.clone(), 4)
    }

    pub fn ragged_stream(&self) -> Stream {
        Stream::ragged("ragged", self.ragged.clone())
    }
}

/// A sampler over the fixture.
pub fn sampler(mode: Mode, batch: usize) -> Sampler {
    Sampler::new(N, batch, mode, 7).expect("sampler")
}

/// Everything a batch says, for comparing runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub step: u64,
    pub indices: Vec<u64>,
    pub columns: Vec<(String, Vec<u8>, Option<Vec<u64>>)>,
}

pub fn snapshot<B: AsRef<[u8]>>(batch: &Batch<B>) -> Snapshot {
    Snapshot {
        step: batch.step(),
        indices: batch.indices().to_vec(),
        columns: batch
            .columns()
            .iter()
            .map(|c| {
                (
                    c.name().to_owned(),
                    c.data().to_vec(),
                    c.offsets().map(<[u64]>::to_vec),
                )
            })
            .collect(),
    }
}

/// `count` batches of `loader`, recycled after the snapshot.
pub fn take<A: BufferAllocator>(loader: &Loader<A>, count: usize) -> Vec<Snapshot> {
    (0..count)
        .map(|_| {
            let batch = loader.next().expect("batch");
            let snap = snapshot(&batch);
            loader.recycle(batch);
            snap
        })
        .collect()
}

/// What a direct gather of `idxs` from `store` returns, at stride `item`.
pub fn direct_fixed(store: &Store, idxs: &[u64], item: usize) -> Vec<u8> {
    let mut out = vec![0u8; idxs.len() * item];
    store.gather(idxs, &mut out, item).expect("direct gather");
    out
}

/// Counts of a [`Counting`] allocator, per stream.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Buffers allocated fresh (not reused).
    pub fresh: Vec<usize>,
    /// Buffers handed out and not yet given back.
    pub outstanding: Vec<usize>,
    /// Highest `outstanding` seen.
    pub max_outstanding: Vec<usize>,
}

/// A pool that counts what it hands out and gets back.
#[derive(Debug, Default)]
pub struct Counting {
    inner: Mutex<(Vec<Vec<Vec<u8>>>, Counts)>,
}

impl Counting {
    pub fn counts(&self) -> Counts {
        self.inner.lock().unwrap().1.clone()
    }
}

fn slot<T: Default + Clone>(v: &mut Vec<T>, i: usize) -> &mut T {
    if v.len() <= i {
        v.resize(i + 1, T::default());
    }
    &mut v[i]
}

impl BufferAllocator for Counting {
    type Buffer = Vec<u8>;

    fn allocate(&self, stream: usize, len: usize) -> Option<Vec<u8>> {
        let mut guard = self.inner.lock().unwrap();
        let (free, counts) = &mut *guard;
        let buffer = match slot(free, stream).pop() {
            Some(mut reused) => {
                reused.resize(len, 0);
                reused
            }
            None => {
                *slot(&mut counts.fresh, stream) += 1;
                vec![0; len]
            }
        };
        let now = slot(&mut counts.outstanding, stream);
        *now += 1;
        let now = *now;
        let max = slot(&mut counts.max_outstanding, stream);
        *max = (*max).max(now);
        Some(buffer)
    }

    fn recycle(&self, stream: usize, buffer: Vec<u8>) {
        let mut guard = self.inner.lock().unwrap();
        let (free, counts) = &mut *guard;
        *slot(&mut counts.outstanding, stream) -= 1;
        slot(free, stream).push(buffer);
    }
}

/// A source whose gathers wait at a gate until it opens, counting the
/// gathers that reached it.
#[derive(Debug)]
pub struct Gated {
    pub inner: Arc<Store>,
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

impl Gated {
    pub fn new(inner: Arc<Store>) -> Arc<Gated> {
        Arc::new(Gated {
            inner,
            state: Mutex::new((false, 0)),
            changed: Condvar::new(),
        })
    }

    pub fn open(&self) {
        self.state.lock().unwrap().0 = true;
        self.changed.notify_all();
    }

    /// Blocks until `n` gathers have reached the gate.
    pub fn wait_for_arrivals(&self, n: usize) {
        let s = self.state.lock().unwrap();
        drop(self.changed.wait_while(s, |s| s.1 < n).unwrap());
    }

    fn pass(&self) {
        let mut s = self.state.lock().unwrap();
        s.1 += 1;
        self.changed.notify_all();
        drop(self.changed.wait_while(s, |s| !s.0).unwrap());
    }
}

impl Source for Gated {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> loaderx_store::Result<()> {
        self.pass();
        self.inner.gather(idxs, dst, stride)
    }

    fn gather_exact(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        item_len: usize,
    ) -> loaderx_store::Result<()> {
        self.pass();
        self.inner.gather_exact(idxs, dst, item_len)
    }

    fn gather_ragged(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        offsets: &[u64],
    ) -> loaderx_store::Result<()> {
        self.pass();
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
