//! A storage that breaks `with_bytes_as_fetched`'s contract (a range
//! handed over twice, one never handed over, bytes of the wrong size) gets
//! an error naming it, never an overlapping write or a stale slot.

use std::io;
use std::path::Path;

use loaderx_store::format::{CodecTag, v2::Schema};
use loaderx_store::storage::{FileId, FileStorage, OnFetched, Storage};
use loaderx_store::{ErrorCode, OpenOptions, Store};

#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    Twice,
    Missing,
    Short,
}

/// A local store that reads as a fetching one, with `fault` in the way it
/// hands bytes over.
#[derive(Debug)]
struct Faulty {
    inner: FileStorage,
    fault: Fault,
}

impl Storage for Faulty {
    fn location(&self) -> &Path {
        self.inner.location()
    }
    fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }
    fn open_file(&self, file: FileId, create: bool, create_len: u64) -> io::Result<Option<u64>> {
        self.inner.open_file(file, create, create_len)
    }
    fn current_len(&self, file: FileId) -> io::Result<u64> {
        self.inner.current_len(file)
    }
    fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        self.inner.with_bytes(file, offset, len, f)
    }
    fn with_bytes_as_fetched(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: &mut OnFetched<'_>,
    ) -> Result<(), (FileId, io::Error)> {
        self.inner.with_many_bytes(ranges, |all| {
            let mut positions: Vec<usize> = (0..all.len()).collect();
            let mut bytes: Vec<&[u8]> = all.to_vec();
            match self.fault {
                Fault::None => {}
                Fault::Twice => {
                    positions.push(0);
                    bytes.push(all[0]);
                }
                Fault::Missing => {
                    positions.pop();
                    bytes.pop();
                }
                Fault::Short => bytes[0] = &all[0][..all[0].len() - 1],
            }
            f(&positions, &bytes);
        })
    }
    fn fetches(&self) -> bool {
        true
    }
    fn write_at(&self, file: FileId, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_at(file, offset, bytes)
    }
    fn sync(&self, file: FileId) -> io::Result<()> {
        self.inner.sync(file)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn create_meta(&self, head: &[u8], len: u64) -> io::Result<bool> {
        self.inner.create_meta(head, len)
    }
    fn truncate(&mut self, file: FileId, len: u64) -> io::Result<()> {
        self.inner.truncate(file, len)
    }
    fn remove(&mut self, file: FileId) -> io::Result<()> {
        self.inner.remove(file)
    }
    fn exists(&self, file: FileId) -> io::Result<bool> {
        self.inner.exists(file)
    }
    fn chunk_ids(&self) -> io::Result<Vec<u32>> {
        self.inner.chunk_ids()
    }
}

#[test]
fn a_storage_that_breaks_the_hand_over_contract_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    {
        let store: Store = Store::create_v2(
            &path,
            &Schema::bytes(CodecTag::ZSTD),
            OpenOptions::default(),
        )
        .unwrap();
        let data: Vec<u8> = (0..64u32 * 100).map(|k| (k % 251) as u8).collect();
        store.append_fixed(&data, 64, 100).unwrap();
        store.close().unwrap();
    }
    let idxs: Vec<u64> = vec![5, 1, 60, 33];
    for fault in [Fault::None, Fault::Twice, Fault::Missing, Fault::Short] {
        let storage = Faulty {
            inner: FileStorage::new(&path, true),
            fault,
        };
        let store: Store<loaderx_store::Deflate, Faulty> =
            Store::open_in(storage, OpenOptions::read_only()).unwrap();
        let mut dst = vec![0u8; idxs.len() * 100];
        let got = store.gather_exact(&idxs, &mut dst, 100);
        match fault {
            Fault::None => {
                got.unwrap();
                for (k, &i) in idxs.iter().enumerate() {
                    let want: Vec<u8> = (i as u32 * 100..i as u32 * 100 + 100)
                        .map(|k| (k % 251) as u8)
                        .collect();
                    assert_eq!(&dst[k * 100..(k + 1) * 100], &want[..]);
                }
            }
            _ => {
                let err = got.unwrap_err();
                assert_eq!(err.code(), ErrorCode::Io, "{fault:?}: {err}");
                assert!(
                    err.to_string().contains("broke its contract"),
                    "{fault:?}: {err}"
                );
            }
        }
    }
}
