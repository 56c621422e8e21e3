//! The remote storage through the engine, over object_store's in-memory
//! store: gathers, the table read by pages, the consistency rule, the CRC
//! check of raw records, read-only refusals.

use std::sync::Arc;

use loaderx_format::{CodecTag, v2::Schema};
use loaderx_remote::{AnyStorage, RemoteOptions, RemoteStorage};
use loaderx_store::{Deflate, ErrorCode, OpenOptions, Store};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, memory::InMemory, path::Path};

/// A local v2 store of `n` 100-byte records (record `i` is bytes
/// `(i + j) % 251`), with codec `codec`, uploaded under `pre/`.
fn uploaded(
    n: u32,
    codec: CodecTag,
    options: RemoteOptions,
) -> (Arc<InMemory>, Vec<u8>, RemoteStorage) {
    uploaded_as(n, codec, options, false)
}

/// [`uploaded`], with a run table when `runs`.
fn uploaded_as(
    n: u32,
    codec: CodecTag,
    options: RemoteOptions,
    runs: bool,
) -> (Arc<InMemory>, Vec<u8>, RemoteStorage) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let data: Vec<u8> = (0..n * 100)
        .map(|k| ((k / 100 + k % 100) % 251) as u8)
        .collect();
    {
        let schema = Schema::bytes(codec);
        let store: Store = if runs {
            Store::create_v2_runs(&path, &schema, OpenOptions::default()).unwrap()
        } else {
            Store::create_v2(&path, &schema, OpenOptions::default()).unwrap()
        };
        store.append_fixed(&data, n as usize, 100).unwrap();
        store.close().unwrap();
    }
    let mem = Arc::new(InMemory::new());
    let rt = tokio_rt();
    for entry in std::fs::read_dir(&path).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if !name.ends_with(".zr") {
            continue;
        }
        let bytes = std::fs::read(entry.path()).unwrap();
        rt.block_on(mem.put(&Path::from(format!("pre/{name}")), PutPayload::from(bytes)))
            .unwrap();
    }
    let storage = RemoteStorage::with_store(mem.clone(), "pre", "memory:///pre", options).unwrap();
    (mem, data, storage)
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn open(storage: RemoteStorage) -> Store<Deflate, AnyStorage> {
    let options = OpenOptions {
        check_raw: true,
        ..OpenOptions::read_only()
    };
    Store::open_in(AnyStorage::Remote(storage), options).unwrap()
}

#[test]
fn a_gather_reads_the_records_asked_for_raw_and_compressed() {
    for codec in [CodecTag::RAW, CodecTag::ZSTD, CodecTag::LZ4] {
        // Small pages and no merging: many requests per gather.
        let options = RemoteOptions {
            table_page_bytes: 4096,
            coalesce_bytes: 0,
            concurrency: 4,
            ..RemoteOptions::default()
        };
        let (_mem, data, storage) = uploaded(2000, codec, options);
        let store = open(storage);
        assert_eq!(store.len(), 2000);
        let idxs: Vec<u64> = vec![1999, 3, 1000, 3, 0, 517, 1234];
        let mut dst = vec![0u8; idxs.len() * 100];
        store.gather(&idxs, &mut dst, 100).unwrap();
        for (k, &i) in idxs.iter().enumerate() {
            let i = i as usize;
            assert_eq!(
                &dst[k * 100..(k + 1) * 100],
                &data[i * 100..(i + 1) * 100],
                "{codec:?} record {i}"
            );
        }
        let mut lens = vec![0u32; 3];
        store.lengths(&[0, 1, 1999], &mut lens).unwrap();
        assert_eq!(lens, [100, 100, 100]);
        store.verify().unwrap();
    }
}

/// Ranges far apart are handed over request by request as they arrive,
/// each once, with the bytes a plain read gives: a batch's bodies are not
/// held until the last one is in.
#[test]
fn ranges_are_handed_over_request_by_request() {
    use loaderx_store::storage::{FileId, Storage};
    let options = RemoteOptions {
        coalesce_bytes: 0,
        concurrency: 2,
        ..RemoteOptions::default()
    };
    let (_mem, _data, storage) = uploaded(2000, CodecTag::RAW, options);
    let store = open(storage);
    let storage = remote(&store);
    // Ten 100-byte ranges 10,000 bytes apart, an empty one, out of order.
    let mut ranges: Vec<(FileId, u64, usize)> = (0..10u64)
        .rev()
        .map(|k| (FileId::Chunk(0), k * 10_000, 100))
        .collect();
    ranges.push((FileId::Chunk(0), 5, 0));
    let mut got: Vec<Option<Vec<u8>>> = vec![None; ranges.len()];
    let mut groups = 0;
    storage
        .with_bytes_as_fetched(&ranges, &mut |positions, bytes| {
            groups += 1;
            assert_eq!(positions.len(), bytes.len());
            for (&p, b) in positions.iter().zip(bytes) {
                assert!(got[p].replace(b.to_vec()).is_none(), "range {p} twice");
            }
        })
        .unwrap();
    // One group for the empty range, one for each request.
    assert_eq!(groups, 11);
    for (p, &(file, offset, len)) in ranges.iter().enumerate() {
        let mut want = vec![0u8; len];
        storage.read_at(file, offset, &mut want).unwrap();
        assert_eq!(got[p].as_deref(), Some(&want[..]), "range {p}");
    }
    // Past the end: the error names the object, nothing is handed over.
    let err = storage
        .with_bytes_as_fetched(&[(FileId::Chunk(0), 1 << 40, 8)], &mut |_, _| {
            panic!("handed over")
        })
        .unwrap_err();
    assert!(err.1.to_string().contains("0.zr"), "{}", err.1);
}

/// A store with a run table, read by pages: every record's block is
/// fetched and checked against its CRC before the record is copied out,
/// and a damaged byte fails the records of its block only.
#[test]
fn a_run_table_is_read_by_pages_and_its_blocks_checked() {
    let options = RemoteOptions {
        table_page_bytes: 4096,
        coalesce_bytes: 0,
        ..RemoteOptions::default()
    };
    let (mem, data, storage) = uploaded_as(2000, CodecTag::RAW, options.clone(), true);
    let store = open(storage);
    assert_eq!(store.len(), 2000);
    let idxs: Vec<u64> = vec![1999, 3, 1000, 3, 0, 517, 1234];
    let mut dst = vec![0u8; idxs.len() * 100];
    store.gather(&idxs, &mut dst, 100).unwrap();
    for (k, &i) in idxs.iter().enumerate() {
        let i = i as usize;
        assert_eq!(&dst[k * 100..(k + 1) * 100], &data[i * 100..(i + 1) * 100]);
    }
    // A batch over many blocks, some twice.
    let many: Vec<u64> = (0..300u64).map(|k| k * 7919 % 2000).collect();
    let mut dst = vec![0u8; many.len() * 100];
    store.gather(&many, &mut dst, 100).unwrap();
    for (k, &i) in many.iter().enumerate() {
        let i = i as usize;
        assert_eq!(&dst[k * 100..(k + 1) * 100], &data[i * 100..(i + 1) * 100]);
    }
    store.verify().unwrap();
    drop(store);
    // 100-byte records: 40 a block. Record 85 lies in block 2 (80..120).
    let chunk = Path::from("pre/0.zr");
    let rt = tokio_rt();
    let mut bytes = rt
        .block_on(async { mem.get(&chunk).await.unwrap().bytes().await.unwrap() })
        .to_vec();
    bytes[85 * 100 + 5] ^= 1;
    rt.block_on(mem.put(&chunk, PutPayload::from(bytes)))
        .unwrap();
    let storage = RemoteStorage::with_store(mem.clone(), "pre", "memory:///pre", options).unwrap();
    let store = open(storage);
    let mut one = vec![0u8; 100];
    store.gather(&[79], &mut one, 100).unwrap();
    store.gather(&[120], &mut one, 100).unwrap();
    let err = store.gather(&[80], &mut one, 100).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Corrupt, "{err}");
    assert!(
        err.to_string()
            .contains("block 2 of its run (records 80 ..= 119)"),
        "{err}"
    );
    // In a batch, the first damaged record by position is the one named.
    let mut two = vec![0u8; 300];
    let err = store.gather(&[5, 119, 81], &mut two, 100).unwrap_err();
    assert!(
        matches!(err, loaderx_store::Error::Corrupt { entry: 119, .. }),
        "{err}"
    );
}

#[test]
fn an_object_changed_after_open_is_an_error_naming_it() {
    let (mem, _data, storage) = uploaded(50, CodecTag::RAW, RemoteOptions::default());
    let store = open(storage);
    let mut dst = vec![0u8; 100];
    store.gather(&[7], &mut dst, 100).unwrap();
    // Same length, other bytes: only the ETag tells.
    let chunk = Path::from("pre/0.zr");
    let rt = tokio_rt();
    let mut bytes = rt
        .block_on(async { mem.get(&chunk).await.unwrap().bytes().await.unwrap() })
        .to_vec();
    bytes[8 * 100] ^= 0xFF;
    rt.block_on(mem.put(&chunk, PutPayload::from(bytes)))
        .unwrap();
    let err = store.gather(&[8], &mut dst, 100).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("memory:///pre/0.zr") && text.contains("changed since"),
        "{text}"
    );
    // Deleted: an error too.
    rt.block_on(mem.delete(&chunk)).unwrap();
    let text = store.gather(&[9], &mut dst, 100).unwrap_err().to_string();
    assert!(text.contains("memory:///pre/0.zr"), "{text}");
}

#[test]
fn a_raw_record_damaged_before_open_fails_its_checksum() {
    let (mem, _data, _) = uploaded(50, CodecTag::RAW, RemoteOptions::default());
    let chunk = Path::from("pre/0.zr");
    let rt = tokio_rt();
    let mut bytes = rt
        .block_on(async { mem.get(&chunk).await.unwrap().bytes().await.unwrap() })
        .to_vec();
    bytes[20 * 100 + 5] ^= 1;
    rt.block_on(mem.put(&chunk, PutPayload::from(bytes)))
        .unwrap();
    let storage = RemoteStorage::with_store(
        mem.clone(),
        "pre",
        "memory:///pre",
        RemoteOptions::default(),
    )
    .unwrap();
    let store = open(storage);
    let mut dst = vec![0u8; 200];
    store.gather(&[19, 21], &mut dst, 100).unwrap();
    let err = store.gather(&[19, 20], &mut dst, 100).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Corrupt, "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");
}

#[test]
fn writes_are_refused_and_the_store_is_unchanged() {
    let (_mem, _data, storage) = uploaded(10, CodecTag::RAW, RemoteOptions::default());
    let store = open(storage);
    assert!(store.is_read_only());
    let err = store.append_fixed(&[0u8; 100], 1, 100).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io, "{err}");
    assert_eq!(store.len(), 10);
}

#[test]
fn missing_store_and_bad_options_are_clear_errors() {
    let mem: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let storage = RemoteStorage::with_store(
        mem,
        "nothing",
        "memory:///nothing",
        RemoteOptions::default(),
    )
    .unwrap();
    let err = Store::<Deflate, AnyStorage>::open_in(
        AnyStorage::Remote(storage),
        OpenOptions::read_only(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("meta.zr is missing"), "{err}");

    let opts = vec![("aws_no_such_key".to_owned(), "1".to_owned())];
    let err = loaderx_remote::open_url::<Deflate>("s3://bucket/x", &opts, OpenOptions::read_only())
        .unwrap_err();
    assert!(err.to_string().contains("aws_no_such_key"), "{err}");
    let opts = vec![("timeout".to_owned(), "soon".to_owned())];
    let err = loaderx_remote::open_url::<Deflate>("s3://bucket/x", &opts, OpenOptions::read_only())
        .unwrap_err();
    assert!(err.to_string().contains("timeout"), "{err}");
    let err = loaderx_remote::open_url::<Deflate>("ftp://host/x", &[], OpenOptions::read_only())
        .unwrap_err();
    assert!(err.to_string().contains("ftp://host/x"), "{err}");
}

#[test]
fn a_store_opens_by_file_url_and_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    {
        let store: Store =
            Store::create_v2(&path, &Schema::bytes(CodecTag::RAW), OpenOptions::default()).unwrap();
        store.append_fixed(&[5u8; 40], 4, 10).unwrap();
        store.close().unwrap();
    }
    let url = format!("file://{}", path.display());
    let store = loaderx_remote::open_store::<Deflate>(&url, &[], OpenOptions::default()).unwrap();
    assert!(store.storage().remote().is_some() && store.is_read_only());
    let mut dst = [0u8; 20];
    store.gather(&[3, 1], &mut dst, 10).unwrap();
    assert_eq!(dst, [5u8; 20]);
    let local =
        loaderx_remote::open_store::<Deflate>(path.to_str().unwrap(), &[], OpenOptions::default())
            .unwrap();
    assert!(local.storage().remote().is_none() && !local.is_read_only());
}

#[test]
fn push_uploads_a_chunk_file_larger_than_one_part_in_parts() {
    // Parts are 16 MiB: a 40 MiB chunk file goes up as three.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let record = 1 << 20;
    let data: Vec<u8> = (0..40 * record).map(|k| (k % 251) as u8).collect();
    {
        let store: Store =
            Store::create_v2(&path, &Schema::bytes(CodecTag::RAW), OpenOptions::default()).unwrap();
        store.append_fixed(&data, 40, record).unwrap();
        store.close().unwrap();
    }
    let largest = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .max()
        .unwrap();
    assert!(largest > 16 << 20, "a chunk file of {largest} bytes");
    let dest = dir.path().join("bucket").join("big");
    std::fs::create_dir_all(&dest).unwrap();
    let url = format!("file://{}", dest.display());
    loaderx_remote::push(&path, &url, &[]).unwrap();
    let store = loaderx_remote::open_store::<Deflate>(&url, &[], OpenOptions::default()).unwrap();
    let mut dst = vec![0u8; 2 * record];
    store.gather(&[39, 17], &mut dst, record).unwrap();
    assert_eq!(&dst[..record], &data[39 * record..]);
    assert_eq!(&dst[record..], &data[17 * record..18 * record]);
    store.verify().unwrap();
}

#[test]
fn push_uploads_chunks_then_meta_and_refuses_to_replace_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let data: Vec<u8> = (0..4000u32).map(|k| (k % 253) as u8).collect();
    {
        let store: Store = Store::create_v2(
            &path,
            &Schema::bytes(CodecTag::ZSTD),
            OpenOptions::default(),
        )
        .unwrap();
        store.append_fixed(&data, 40, 100).unwrap();
        store.close().unwrap();
    }
    let dest = dir.path().join("bucket").join("copy");
    std::fs::create_dir_all(&dest).unwrap();
    let url = format!("file://{}", dest.display());
    let pushed = loaderx_remote::push(&path, &url, &[]).unwrap();
    assert_eq!(pushed.objects.last().map(String::as_str), Some("meta.zr"));
    let store = loaderx_remote::open_store::<Deflate>(&url, &[], OpenOptions::default()).unwrap();
    let mut dst = vec![0u8; 200];
    store.gather(&[39, 0], &mut dst, 100).unwrap();
    assert_eq!(&dst[..100], &data[3900..]);
    assert_eq!(&dst[100..], &data[..100]);
    let err = loaderx_remote::push(&path, &url, &[]).unwrap_err();
    assert!(matches!(err, loaderx_store::Error::Exists { .. }), "{err}");
    // A directory holding no store: nothing uploaded.
    let empty = dir.path().join("bucket").join("none");
    std::fs::create_dir_all(&empty).unwrap();
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("notes.txt"), "not a store").unwrap();
    let err =
        loaderx_remote::push(&plain, &format!("file://{}", empty.display()), &[]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotAStore, "{err}");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

#[test]
fn the_block_cache_serves_blocks_across_handles_never_of_a_changed_object() {
    let cache = tempfile::tempdir().unwrap();
    let options = || RemoteOptions {
        cache_dir: Some(cache.path().to_owned()),
        cache_block_bytes: 4096,
        cache_bytes: 1 << 30,
        ..RemoteOptions::default()
    };
    let (mem, data, storage) = uploaded(300, CodecTag::RAW, options());
    let store = open(storage);
    let all: Vec<u64> = (0..300).collect();
    let mut dst = vec![0u8; 300 * 100];
    store.gather(&all, &mut dst, 100).unwrap();
    assert_eq!(dst, data);
    let blocks = std::fs::read_dir(cache.path()).unwrap().filter(|e| {
        e.as_ref()
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".blk")
    });
    assert!(blocks.count() >= 8);
    // A second handle, as after a restart, lists the objects and then
    // reads from the cache alone.
    let rt = tokio_rt();
    let storage =
        RemoteStorage::with_store(mem.clone(), "pre", "memory:///pre", options()).unwrap();
    let chunk = Path::from("pre/0.zr");
    let original = rt.block_on(async { mem.get(&chunk).await.unwrap().bytes().await.unwrap() });
    let mut changed = original.to_vec();
    changed[5] ^= 0xFF;
    let store = open(storage);
    // Overwritten after this handle listed it: the cache still serves the
    // version the handle opened (its blocks are named by that ETag)...
    rt.block_on(mem.put(&chunk, PutPayload::from(changed)))
        .unwrap();
    let mut again = vec![0u8; 300 * 100];
    store.gather(&all, &mut again, 100).unwrap();
    assert_eq!(again, data);
    // ...and a handle opened now sees the new ETag: no old block is
    // served, the changed byte fails record 0's checksum.
    let storage =
        RemoteStorage::with_store(mem.clone(), "pre", "memory:///pre", options()).unwrap();
    let store = open(storage);
    let err = store.gather(&[0], &mut again[..100], 100).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Corrupt, "{err}");
}

#[test]
fn the_block_cache_stays_under_its_bound() {
    let cache = tempfile::tempdir().unwrap();
    let options = RemoteOptions {
        cache_dir: Some(cache.path().to_owned()),
        cache_block_bytes: 4096,
        cache_bytes: 16384,
        ..RemoteOptions::default()
    };
    // What a process killed while writing blocks leaves: temporary files,
    // an old one (its writer is gone) and a fresh one (maybe still written).
    let stale = cache.path().join(".tmp-999999-1");
    let fresh = cache.path().join(".tmp-999999-2");
    for tmp in [&stale, &fresh] {
        std::fs::write(tmp, vec![7u8; 4096]).unwrap();
    }
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
    let (_mem, data, storage) = uploaded(1000, CodecTag::RAW, options);
    let store = open(storage);
    let mut dst = vec![0u8; 100];
    for i in 0..1000u64 {
        store.gather(&[i], &mut dst, 100).unwrap();
        assert_eq!(dst, data[i as usize * 100..][..100]);
    }
    let held: u64 = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".blk"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    // At most the bound, plus what was written since the last eviction.
    assert!(held <= 16384 + 4096, "{held}");
    assert!(!stale.exists(), "a dead writer's temporary file is removed");
    assert!(
        fresh.exists(),
        "a live writer's temporary file is left alone"
    );
}

fn remote(store: &Store<Deflate, AnyStorage>) -> &RemoteStorage {
    match store.storage() {
        AnyStorage::Remote(r) => r,
        AnyStorage::Local(_) => panic!("a remote store"),
    }
}

/// Replaces every chunk object under `pre/` with other bytes (new ETags).
fn overwrite_chunks(mem: &InMemory) {
    let rt = tokio_rt();
    let listed = rt
        .block_on(mem.list_with_delimiter(Some(&Path::from("pre"))))
        .unwrap();
    for object in listed.objects {
        if object.location.as_ref().ends_with(".zr") && !object.location.as_ref().contains("meta") {
            let junk = vec![0xA5u8; object.size as usize];
            rt.block_on(mem.put(&object.location, PutPayload::from(junk)))
                .unwrap();
        }
    }
}

#[test]
fn records_requested_ahead_are_read_from_what_arrived() {
    let options = RemoteOptions {
        coalesce_bytes: 0,
        ..RemoteOptions::default()
    };
    let (mem, data, storage) = uploaded(2000, CodecTag::RAW, options);
    let store = open(storage);
    let idxs: Vec<u64> = vec![1500, 5, 700];
    store.prefetch(&idxs).unwrap();
    remote(&store).wait_prefetched().unwrap();
    assert_eq!(remote(&store).prefetched(), (3, 300));
    // The objects change: only bytes that had already arrived can serve
    // the gather, and they are the ones of the version opened.
    overwrite_chunks(&mem);
    let mut dst = vec![0u8; idxs.len() * 100];
    store.gather(&idxs, &mut dst, 100).unwrap();
    for (k, &i) in idxs.iter().enumerate() {
        let i = i as usize;
        assert_eq!(&dst[k * 100..(k + 1) * 100], &data[i * 100..(i + 1) * 100]);
    }
    // Read once, then gone: the next gather of them asks the server, which
    // now has other bytes under other ETags.
    assert_eq!(remote(&store).prefetched(), (0, 0));
    let err = store.gather(&idxs, &mut dst, 100).unwrap_err();
    assert!(err.to_string().contains("changed"), "{err}");
}

/// With a block cache, the lookahead requests the blocks the cache lacks,
/// and a gather takes them from what arrived before asking the network for
/// the rest: whole blocks, as the version opened, never mixed with bytes
/// of a newer one.
#[test]
fn blocks_requested_ahead_feed_the_block_cache() {
    let cache = tempfile::tempdir().unwrap();
    let options = |dir: &std::path::Path| RemoteOptions {
        cache_dir: Some(dir.to_owned()),
        cache_block_bytes: 4096,
        cache_bytes: 1 << 30,
        coalesce_bytes: 0,
        ..RemoteOptions::default()
    };
    // Records 5, 700 and 1500 lie in three blocks of 4 KiB, far apart.
    let idxs: Vec<u64> = vec![1500, 5, 700];
    let (mem, data, storage) = uploaded(2000, CodecTag::RAW, options(&cache.path().join("a")));
    let store = open(storage);
    store.prefetch(&idxs).unwrap();
    remote(&store).wait_prefetched().unwrap();
    assert_eq!(remote(&store).prefetched(), (3, 3 * 4096));
    // The objects change: any request now fails, so the gather can only
    // succeed from the blocks that had already arrived.
    overwrite_chunks(&mem);
    let mut dst = vec![0u8; idxs.len() * 100];
    store.gather(&idxs, &mut dst, 100).unwrap();
    for (k, &i) in idxs.iter().enumerate() {
        let i = i as usize;
        assert_eq!(&dst[k * 100..(k + 1) * 100], &data[i * 100..(i + 1) * 100]);
    }
    assert_eq!(remote(&store).prefetched(), (0, 0));
    // The blocks went into the cache: read again, they come from there.
    // So do their neighbours in the same blocks.
    let again: Vec<u64> = vec![701, 6, 1501, 700];
    let mut dst = vec![0u8; again.len() * 100];
    store.gather(&again, &mut dst, 100).unwrap();
    for (k, &i) in again.iter().enumerate() {
        let i = i as usize;
        assert_eq!(&dst[k * 100..(k + 1) * 100], &data[i * 100..(i + 1) * 100]);
    }

    // Partly staged: two of the batch's three blocks arrived before the
    // change, the third must be requested after it. The batch fails,
    // naming the object, rather than mixing the two versions. (A cache
    // directory of its own: the first store's blocks would serve this one,
    // whose objects have the same URLs, sizes and ETags.)
    let (mem, _data, storage) = uploaded(2000, CodecTag::RAW, options(&cache.path().join("b")));
    let store = open(storage);
    store.prefetch(&[5, 700]).unwrap();
    remote(&store).wait_prefetched().unwrap();
    assert_eq!(remote(&store).prefetched(), (2, 2 * 4096));
    overwrite_chunks(&mem);
    let mut dst = vec![0u8; idxs.len() * 100];
    let err = store.gather(&idxs, &mut dst, 100).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("memory:///pre/0.zr") && text.contains("changed since"),
        "{text}"
    );
}

#[test]
fn reading_ahead_keeps_to_its_bound_and_can_be_forgotten() {
    let options = RemoteOptions {
        coalesce_bytes: 0,
        lookahead_bytes: 250,
        ..RemoteOptions::default()
    };
    let (_mem, data, storage) = uploaded(2000, CodecTag::RAW, options);
    let store = open(storage);
    store.prefetch(&[10, 20, 30, 40, 50]).unwrap();
    assert_eq!(remote(&store).prefetched(), (2, 200));
    // Indices out of range are the gather's to refuse, not the hint's.
    store.prefetch(&[60, 5000]).unwrap();
    assert_eq!(remote(&store).prefetched(), (2, 200));
    store.forget_prefetched();
    assert_eq!(remote(&store).prefetched(), (0, 0));
    // Nothing held: the gather reads from the server as usual.
    let mut dst = vec![0u8; 100];
    store.gather(&[30], &mut dst, 100).unwrap();
    assert_eq!(&dst[..], &data[3000..3100]);
    // No reading ahead at all with a bound of 0.
    let options = RemoteOptions {
        lookahead_bytes: 0,
        ..RemoteOptions::default()
    };
    let (_mem, _data, storage) = uploaded(100, CodecTag::RAW, options);
    let store = open(storage);
    store.prefetch(&[1, 2, 3]).unwrap();
    assert_eq!(remote(&store).prefetched(), (0, 0));
}
