//! Collections by URL through `file://` (the same request path as S3):
//! parts uploaded, committed, opened lazily, pushed whole.

use std::path::Path;

use loaderx_format::{CodecTag, v2::Schema};
use loaderx_store::{Deflate, ErrorCode, OpenOptions, Store};

/// Writes part `p` (records `10 p .. 10 p + n`, 8 bytes each) as
/// `<dir>/<part>/v/`.
fn part(dir: &Path, p: u64, n: u64) {
    let store: Store = Store::create_v2(
        dir.join(format!("part-{p:05}")).join("v"),
        &Schema::bytes(CodecTag::ZSTD),
        OpenOptions::default(),
    )
    .unwrap();
    let data: Vec<u8> = (10 * p..10 * p + n).flat_map(u64::to_le_bytes).collect();
    store.append_fixed(&data, n as usize, 8).unwrap();
    store.close().unwrap();
}

fn read_all(
    coll: loaderx_store::collection::Collection<Deflate, loaderx_remote::AnyStorage>,
) -> Vec<u64> {
    let coll = std::sync::Arc::new(coll);
    let col = coll.column("v").unwrap();
    let idxs: Vec<u64> = (0..coll.len()).rev().collect();
    let mut out = vec![0u8; idxs.len() * 8];
    col.gather_exact(&idxs, &mut out, 8).unwrap();
    let mut got: Vec<u64> = out
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    got.reverse();
    got
}

#[test]
fn parts_uploaded_then_committed_read_back_by_url() {
    let dir = tempfile::tempdir().unwrap();
    let staging = dir.path().join("staging");
    let bucket = dir.path().join("bucket");
    std::fs::create_dir_all(&bucket).unwrap();
    let url = format!("file://{}", bucket.display());
    for (p, n) in [(0, 3), (1, 5), (2, 2)] {
        part(&staging, p, n);
        let name = format!("part-{p:05}");
        loaderx_remote::upload_part(&staging.join(&name), &url, &name, &[]).unwrap();
    }
    // No manifest yet: not a collection.
    assert!(!loaderx_remote::is_collection_url(&url, &[]).unwrap());
    let err = loaderx_remote::open_collection::<Deflate>(&url, &[], OpenOptions::default(), 4)
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotAStore, "{err}");
    // A part without its completion mark is ignored, and named.
    std::fs::remove_file(bucket.join("part-00002").join(loaderx_remote::PART_DONE)).unwrap();
    let done = loaderx_remote::commit_url(&url, None, &[]).unwrap();
    assert_eq!(done.ignored, vec!["part-00002".to_string()]);
    assert!(loaderx_remote::is_collection_url(&url, &[]).unwrap());
    let coll =
        loaderx_remote::open_collection::<Deflate>(&url, &[], OpenOptions::default(), 1).unwrap();
    assert_eq!(coll.len(), 8);
    assert_eq!(coll.opened_parts(), 0);
    assert_eq!(read_all(coll), vec![0, 1, 2, 10, 11, 12, 13, 14]);
    // Explicit parts must be finished.
    let err = loaderx_remote::commit_url(&url, Some(&["part-00002".to_string()]), &[]).unwrap_err();
    assert!(err.to_string().contains("not a finished part"), "{err}");
}

#[test]
fn a_local_collection_pushes_then_reads_back_and_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    for (p, n) in [(0, 4), (1, 0), (2, 6)] {
        part(&local, p, n);
    }
    loaderx_store::collection::commit(&local, None, &OpenOptions::default()).unwrap();
    let bucket = dir.path().join("bucket");
    std::fs::create_dir_all(&bucket).unwrap();
    let url = format!("file://{}", bucket.display());
    let pushed = loaderx_remote::push(&local, &url, &[]).unwrap();
    assert_eq!(
        pushed.objects.last().map(String::as_str),
        Some("manifest.zc")
    );
    for object in &pushed.objects {
        if !object.ends_with(loaderx_remote::PART_DONE) {
            assert_eq!(
                std::fs::read(bucket.join(object)).unwrap(),
                std::fs::read(local.join(object)).unwrap(),
                "{object}"
            );
        }
    }
    let coll =
        loaderx_remote::open_collection::<Deflate>(&url, &[], OpenOptions::default(), 8).unwrap();
    assert_eq!(read_all(coll), vec![0, 1, 2, 3, 20, 21, 22, 23, 24, 25]);
    // The same through a local path.
    let coll = loaderx_remote::open_collection::<Deflate>(
        local.to_str().unwrap(),
        &[],
        OpenOptions::default(),
        8,
    )
    .unwrap();
    assert_eq!(read_all(coll), vec![0, 1, 2, 3, 20, 21, 22, 23, 24, 25]);
    let err = loaderx_remote::push(&local, &url, &[]).unwrap_err();
    assert!(matches!(err, loaderx_store::Error::Exists { .. }), "{err}");
    let err = loaderx_remote::open_collection::<Deflate>(
        local.to_str().unwrap(),
        &[("aws_region".into(), "x".into())],
        OpenOptions::default(),
        8,
    )
    .unwrap_err();
    assert!(
        matches!(err, loaderx_store::Error::InvalidArgument { .. }),
        "{err}"
    );
}
