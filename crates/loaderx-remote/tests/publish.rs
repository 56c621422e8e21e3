//! Publishing a staged output through `file://` (the same request path as
//! S3): a free prefix, a directory of stores and a collection published
//! whole, refusals.

use std::path::Path;

use loaderx_format::{CodecTag, v2::Schema};
use loaderx_store::{ErrorCode, OpenOptions, Store};

/// A closed v2 store of `n` 8-byte records (`base + i`) at `dir`.
fn store(dir: &Path, base: u64, n: u64) {
    let store: Store =
        Store::create_v2(dir, &Schema::bytes(CodecTag::ZSTD), OpenOptions::default()).unwrap();
    let data: Vec<u8> = (base..base + n).flat_map(u64::to_le_bytes).collect();
    store.append_fixed(&data, n as usize, 8).unwrap();
    store.close().unwrap();
}

fn read(url: &str) -> Vec<u64> {
    let s: Store<loaderx_store::Deflate, loaderx_remote::AnyStorage> =
        loaderx_remote::open_url(url, &[], OpenOptions::read_only()).unwrap();
    let idxs: Vec<u64> = (0..s.len()).collect();
    let mut out = vec![0u8; idxs.len() * 8];
    s.gather_exact(&idxs, &mut out, 8).unwrap();
    out.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn a_tree_of_stores_publishes_whole_and_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    store(&out.join("a"), 0, 50);
    store(&out.join("split/b"), 100, 50);
    std::fs::write(out.join("classes.txt"), "cat\ndog\n").unwrap();
    let bucket = dir.path().join("bucket");
    std::fs::create_dir(&bucket).unwrap();
    let url = format!("file://{}/prefix", bucket.display());
    assert_eq!(loaderx_remote::first_object(&url, &[]).unwrap(), None);

    let pushed = loaderx_remote::publish_tree(&out, &url, &[]).unwrap();
    // Data first, every meta.zr after all of it.
    let first_meta = pushed
        .objects
        .iter()
        .position(|o| o.ends_with("meta.zr"))
        .unwrap();
    assert!(
        pushed.objects[first_meta..]
            .iter()
            .all(|o| o.ends_with("meta.zr"))
    );
    assert!(pushed.objects.contains(&"classes.txt".to_owned()));
    assert_eq!(read(&format!("{url}/a")), (0..50).collect::<Vec<_>>());
    assert_eq!(
        read(&format!("{url}/split/b")),
        (100..150).collect::<Vec<_>>()
    );
    assert_eq!(
        std::fs::read(bucket.join("prefix/classes.txt")).unwrap(),
        b"cat\ndog\n"
    );
    assert!(loaderx_remote::first_object(&url, &[]).unwrap().is_some());

    // Published again: refused before anything is written.
    let err = loaderx_remote::publish_tree(&out, &url, &[]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io);
    assert!(err.to_string().contains("meta.zr"), "{err}");

    // A directory with no store is not published.
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::write(plain.join("x.txt"), "x").unwrap();
    let other = format!("file://{}/other", bucket.display());
    let err = loaderx_remote::publish_tree(&plain, &other, &[]).unwrap_err();
    assert!(err.to_string().contains("holds no store"), "{err}");
    assert_eq!(loaderx_remote::first_object(&other, &[]).unwrap(), None);
}

#[test]
fn http_urls_are_not_written() {
    let err = loaderx_remote::first_object("http://127.0.0.1:9/x", &[]).unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
}
