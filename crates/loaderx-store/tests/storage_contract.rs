//! A storage that breaks `with_bytes_as_fetched`'s contract (a range
//! handed over twice, one never handed over, bytes of the wrong size) gets
//! an error naming it, never an overlapping write or a stale slot.

mod common;

use std::io;

use common::forward::{Overridden, Overrides};
use loaderx_store::format::{CodecTag, v2::Schema};
use loaderx_store::storage::{FileId, FileStorage, OnFetched, Storage};
use loaderx_store::{ErrorCode, OpenOptions, Store};

/// A fault in the way a storage hands bytes over.
#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    Twice,
    Missing,
    Short,
}

/// A local store that reads as a fetching one, with a [`Fault`] in the way
/// it hands bytes over.
type Faulty = Overridden<FileStorage, Fault>;

impl Overrides<FileStorage> for Fault {
    fn with_bytes_as_fetched(
        &self,
        inner: &FileStorage,
        ranges: &[(FileId, u64, usize)],
        f: &mut OnFetched<'_>,
    ) -> Result<(), (FileId, io::Error)> {
        inner.with_many_bytes(ranges, |all| {
            let mut positions: Vec<usize> = (0..all.len()).collect();
            let mut bytes: Vec<&[u8]> = all.to_vec();
            match self {
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

    fn fetches(&self, _: &FileStorage) -> bool {
        true
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
            overrides: fault,
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
