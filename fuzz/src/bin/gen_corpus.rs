//! Writes the seed corpus of every fuzz target into `corpus/<target>/`.
//!
//! Run by `fuzz/run.sh` before fuzzing; the seeds are real stores and real
//! codec output made by the project itself, so the fuzzer starts from valid
//! inputs and mutates them into damaged ones.

use std::{fs, path::Path};

use loaderx_format::{
    CodecTag, Header, RecordLoc, Rules, entry_fault,
    v2::{self, Dtype, Kind, Schema, UndoLogV2},
};
use loaderx_fuzz::{fuzz_dictionary, token_records};
use loaderx_store::{
    CodecId, Deflate, OpenOptions, Store, ZstdDictionary,
    storage::{FileId, MemStorage},
};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

/// `parse_index` input modes (see the target).
const MODE_V1: u8 = 0;
const MODE_V2: u8 = 1;
const MODE_V2_FIXED: u8 = 2;
const MODE_UNDO_V2: u8 = 3;

fn parse_index_seeds(dir: &Path) {
    parse_index_v1_seeds(dir);
    parse_index_v2_seeds(dir);
}

fn parse_index_v1_seeds(dir: &Path) {
    // A real store's meta image (trimmed to its table) with its chunk lengths.
    let storage = MemStorage::new();
    let store: Store<Deflate, MemStorage> = Store::open_in(
        storage.clone(),
        OpenOptions {
            chunk_capacity: 4096,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    let data: Vec<u8> = (0..20u32)
        .flat_map(|i| (0..700u32).map(move |j| ((i + j / 9) % 251) as u8))
        .collect();
    store
        .append_fixed_with(CodecId::Deflate, &data[..7000], 10, 700)
        .unwrap();
    store
        .append_fixed_with(CodecId::Raw, &data[7000..], 10, 700)
        .unwrap();
    // Appends reach the header on disk at the commit.
    store.sync().unwrap();
    let header = Header::decode(&storage.contents(FileId::Meta).unwrap()).unwrap();
    let meta = storage.contents(FileId::Meta).unwrap();
    let image = &meta[..16 + 16 * header.length as usize];
    let mut seed = vec![MODE_V1, (header.tail_chunk + 1) as u8];
    for c in 0..=u32::from(header.tail_chunk) {
        let len = storage
            .contents(FileId::Chunk(c))
            .map_or(0, |b| b.len() as u64);
        seed.extend_from_slice(&len.to_le_bytes());
    }
    seed.extend_from_slice(image);
    write(dir, "real_store", &seed);

    // A hand-made one-entry store, and an empty one.
    let h = Header {
        tail_chunk: 0,
        tail_offset: 100,
        length: 1,
    };
    let e = RecordLoc {
        offset: 0,
        phys_length: 100,
        logic_length: 100,
        chunk_id: 0,
        codec: CodecTag::RAW,
        crc: 0,
    };
    let mut seed = vec![MODE_V1, 1u8];
    seed.extend_from_slice(&100u64.to_le_bytes());
    seed.extend_from_slice(&h.encode());
    seed.extend_from_slice(&e.encode());
    write(dir, "one_raw", &seed);
    let mut seed = vec![MODE_V1, 1u8];
    seed.extend_from_slice(&0u64.to_le_bytes());
    seed.extend_from_slice(&Header::default().encode());
    write(dir, "empty", &seed);
}

/// One v2 store of each kind, made by the engine in memory: its `meta.zr`
/// squeezed as the target reads it (slot 0, slot 1, schema block, table),
/// with its chunk lengths. Returns the squeezed image, the table alone and
/// its entry length, and the `open_store` seed (the chunk files' bytes and
/// the squeezed image).
fn v2_image(
    schema: &Schema,
    lanes: u8,
    append: impl Fn(&Store<Deflate, MemStorage>),
) -> (Vec<u8>, Vec<u8>, u16, Vec<u8>) {
    v2_image_as(schema, lanes, false, append)
}

/// [`v2_image`], with a run table (§9.5) when `runs`.
fn v2_image_as(
    schema: &Schema,
    lanes: u8,
    runs: bool,
    append: impl Fn(&Store<Deflate, MemStorage>),
) -> (Vec<u8>, Vec<u8>, u16, Vec<u8>) {
    let storage = MemStorage::new();
    let options = OpenOptions {
        chunk_capacity: 4096,
        lanes,
        // The small appends below over every lane, so the seeds hold
        // several lanes' tails.
        lane_bytes: 0,
        ..OpenOptions::default()
    };
    let store: Store<Deflate, MemStorage> = if runs {
        Store::create_v2_runs_in(storage.clone(), schema, options).unwrap()
    } else {
        Store::create_v2_in(storage.clone(), schema, options).unwrap()
    };
    // Two commits, so both header slots are valid (sequences 1 and 2).
    append(&store);
    store.sync().unwrap();
    append(&store);
    store.sync().unwrap();
    let meta = storage.contents(FileId::Meta).unwrap();
    let header = v2::pick_header(
        &meta[..v2::HEADER_V2_LEN],
        &meta[v2::SLOT_LEN as usize..][..v2::HEADER_V2_LEN],
    )
    .unwrap();
    assert_eq!(header.sequence, 2);
    let table_at = v2::table_offset(header.schema_len) as usize;
    // A run table's units are not one per record: all of them.
    let table = if runs {
        &meta[table_at..]
    } else {
        &meta[table_at..table_at + header.head.length as usize * usize::from(header.entry_len)]
    };
    let chunks: Vec<u32> = header.head.chunks().collect();
    let n = chunks.iter().max().map_or(0, |&c| c + 1);
    assert!(n < 8, "the target takes at most 7 chunk lengths");
    let mut seed = vec![MODE_V2, n as u8];
    for c in 0..n {
        let len = storage
            .contents(FileId::Chunk(c))
            .map_or(0, |b| b.len() as u64);
        seed.extend_from_slice(&len.to_le_bytes());
    }
    seed.extend_from_slice(&meta[..v2::HEADER_V2_LEN]);
    seed.extend_from_slice(&meta[v2::SLOT_LEN as usize..][..v2::HEADER_V2_LEN]);
    seed.extend_from_slice(&meta[v2::SCHEMA_OFFSET as usize..][..header.schema_len as usize]);
    seed.extend_from_slice(table);
    // The seed reaches the target's deepest checks: every entry is valid.
    let lens: Vec<u64> = (0..n)
        .map(|c| {
            storage
                .contents(FileId::Chunk(c))
                .map_or(0, |b| b.len() as u64)
        })
        .collect();
    for (i, bytes) in table
        .chunks_exact(usize::from(header.entry_len))
        .enumerate()
        .filter(|_| !runs)
    {
        let loc = v2::decode_entry(i as u64, bytes).unwrap();
        let fault = entry_fault(&loc, &header.head, lens[loc.chunk_id as usize], Rules::V2);
        assert_eq!(fault, None, "entry {i} of a real store");
    }
    let squeezed = &seed[2 + 8 * n as usize..];
    let mut open = vec![0u8, n as u8];
    let chunks: Vec<Vec<u8>> = (0..n)
        .map(|c| storage.contents(FileId::Chunk(c)).unwrap_or_default())
        .collect();
    for c in &chunks {
        open.extend_from_slice(&(c.len() as u32).to_le_bytes());
    }
    for c in &chunks {
        open.extend_from_slice(c);
    }
    open.extend_from_slice(squeezed);
    (seed, table.to_vec(), header.entry_len, open)
}

fn parse_index_v2_seeds(dir: &Path) {
    let record = |i: usize, len: usize| -> Vec<u8> {
        (0..len).map(|j| ((i * 7 + j / 5) % 251) as u8).collect()
    };
    let bytes = Schema::bytes(CodecTag::FLATE);
    let dense = Schema {
        kind: Kind::Dense,
        dtype: Dtype::from_name("<f4").unwrap(),
        shape: vec![4, 10],
        ndim: 2,
        codec: CodecTag::ZSTD,
        dictionary: None,
        codecs: Vec::new(),
    };
    let ragged = Schema {
        kind: Kind::Ragged,
        dtype: Dtype::from_name("<i2").unwrap(),
        shape: vec![],
        ndim: 2,
        codec: CodecTag::LZ4,
        dictionary: None,
        codecs: Vec::new(),
    };
    let tokens = Schema {
        kind: Kind::Ragged,
        dtype: Dtype::from_name("<u4").unwrap(),
        shape: vec![],
        ndim: 1,
        codec: CodecTag::ZSTD_DICT,
        dictionary: Some(fuzz_dictionary()),
        codecs: Vec::new(),
    };
    let mut images = Vec::new();
    images.push((
        "v2_bytes",
        v2_image(&bytes, 1, |s| {
            let src: Vec<u8> = (0..6).flat_map(|i| record(i, 500)).collect();
            s.append_ragged_with(
                CodecId::Deflate,
                &src,
                &[0, 500, 1000, 1500, 2000, 2500],
                &[500, 500, 400, 500, 500, 300],
            )
            .unwrap();
            s.append_fixed_with(CodecId::Raw, &src[..900], 3, 300)
                .unwrap();
        }),
    ));
    images.push((
        "v2_runs",
        v2_image_as(&Schema::bytes(CodecTag::LZ4), 2, true, |s| {
            // Runs of 8-byte records (kept raw: they do not shrink) over
            // two lanes, around records that compress (a group).
            let src: Vec<u8> = (0..60u64)
                .flat_map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes())
                .collect();
            s.append_fixed(&src, 60, 8).unwrap();
            s.append_fixed(&[0u8; 600], 3, 200).unwrap();
            s.append_fixed(&src[..160], 20, 8).unwrap();
        }),
    ));
    images.push((
        "v2_dense",
        v2_image(&dense, 2, |s| {
            let src: Vec<u8> = (0..5).flat_map(|i| record(i, 160)).collect();
            s.append_fixed(&src, 5, 160).unwrap();
        }),
    ));
    images.push((
        "v2_ragged",
        v2_image(&ragged, 3, |s| {
            let src: Vec<u8> = (0..4).flat_map(|i| record(i, 120)).collect();
            // Shapes 2×30, 3×20, 1×60, 6×10 of i16.
            s.append_shaped(
                &src,
                &[0, 120, 240, 360],
                &[120, 120, 120, 120],
                &[2, 30, 3, 20, 1, 60, 6, 10],
            )
            .unwrap();
        }),
    ));
    images.push((
        "v2_zstd_dict",
        v2_image(&tokens, 1, |s| {
            let recs = token_records(7, 4);
            let mut src = Vec::new();
            let (mut offsets, mut lens, mut dims) = (Vec::new(), Vec::new(), Vec::new());
            for r in &recs {
                offsets.push(src.len() as u64);
                lens.push(r.len() as u32);
                dims.push(r.len() as u32 / 4);
                src.extend_from_slice(r);
            }
            s.append_shaped(&src, &offsets, &lens, &dims).unwrap();
        }),
    ));
    for (name, (seed, table, entry_len, open)) in &images {
        write(dir, name, seed);
        // The same stores whole, for `open_store`: read-only, and (flag 2)
        // written to as well.
        let open_dir = dir.parent().unwrap().join("open_store");
        write(&open_dir, name, open);
        let mut writable = open.clone();
        writable[0] = 2;
        write(&open_dir, &format!("{name}_writable"), &writable);
        let mut fixed = seed.clone();
        fixed[0] = MODE_V2_FIXED;
        write(dir, &format!("{name}_fixed"), &fixed);
        // An undo log holding two of the store's real entries.
        let e = usize::from(*entry_len);
        let log = UndoLogV2 {
            length: (table.len() / e) as u64,
            entry_len: *entry_len,
            entries: vec![(0, table[..e].to_vec()), (2, table[2 * e..3 * e].to_vec())],
        };
        let mut seed = vec![MODE_UNDO_V2, 0];
        seed.extend_from_slice(&entry_len.to_le_bytes());
        seed.extend_from_slice(&log.encode());
        write(dir, &format!("{name}_undo"), &seed);
    }
}

fn decode_seeds(dir: &Path) {
    let record: Vec<u8> = (0..3000u32).map(|i| (i / 40) as u8).collect();
    for codec in [CodecId::Deflate, CodecId::Zstd, CodecId::Lz4] {
        let mut out = vec![0u8; record.len() - 1];
        let n = codec.encode(&record, &mut out).unwrap();
        let mut seed = ((record.len() - 1) as u16).to_le_bytes().to_vec();
        seed.extend_from_slice(&out[..n]);
        write(dir, codec.name(), &seed);
    }
    let mut seed = 99u16.to_le_bytes().to_vec();
    seed.extend_from_slice(&[7u8; 100]);
    write(dir, "raw", &seed);

    // zstd_dict: frames made with the dictionary the target decodes with
    // (trained the same way there; training is deterministic).
    let dict_bytes = fuzz_dictionary();
    assert_eq!(
        dict_bytes,
        fuzz_dictionary(),
        "dictionary training is deterministic"
    );
    let dict = ZstdDictionary::new(&dict_bytes).unwrap();
    for (k, record) in token_records(3, 3).iter().enumerate() {
        let mut out = vec![0u8; record.len() - 1];
        let n = dict
            .encode(record, &mut out)
            .expect("token records shrink with the dictionary");
        let mut seed = ((record.len() - 1) as u16).to_le_bytes().to_vec();
        seed.extend_from_slice(&out[..n]);
        write(dir, &format!("zstd_dict_{k}"), &seed);
    }
    // The dictionary itself, which the target also loads as one.
    let mut seed = 0u16.to_le_bytes().to_vec();
    seed.extend_from_slice(&dict_bytes);
    write(dir, "dictionary", &seed);
}

fn store_ops_seeds(dir: &Path) {
    // [kind, a, b, c] quadruples: appends, gathers, deletes, compactions,
    // reopens, and the same with failures injected (c & 0x80).
    let plain = [
        0, 3, 40, 1, 0, 7, 90, 2, 1, 0, 5, 9, 2, 1, 3, 0, 3, 0, 0, 0, 4, 0, 0, 0, 1, 2, 4, 6,
    ];
    write(dir, "plain", &plain);
    let faulty = [
        0, 5, 60, 1, 5, 2, 30, 0x83, 6, 1, 2, 0x81, 7, 0, 0, 0x84, 4, 0, 0, 0, 1, 1, 2, 3,
    ];
    write(dir, "faulty", &faulty);
    // The same on a format v2 store and on one with a run table (the byte
    // after the last whole operation picks the format).
    for (name, format) in [("v2", 1u8), ("runs", 2)] {
        for (kind, ops) in [("plain", &plain[..]), ("faulty", &faulty[..])] {
            let mut seed = ops.to_vec();
            seed.push(format);
            write(dir, &format!("{kind}-{name}"), &seed);
        }
    }
}

/// Small JPEGs and PNGs of a few sizes, made by the project's encoders.
fn image_decode_seeds(dir: &Path) {
    use loaderx_image::{Layout, encode_jpeg, encode_png};
    for (h, w) in [(1u32, 1u32), (8, 8), (9, 17), (24, 16)] {
        let pixels: Vec<u8> = (0..h * w * 3).map(|i| (i * 37 % 251) as u8).collect();
        let jpeg = encode_jpeg(&pixels, h, w, Layout::Hwc, 85).unwrap();
        write(dir, &format!("jpeg_{h}x{w}"), &jpeg);
        let png = encode_png(&pixels, h, w, Layout::Hwc).unwrap();
        write(dir, &format!("png_{h}x{w}"), &png);
    }
}

/// Manifests of a dense and an image column over a few parts (one
/// empty), as is (mode 0) and with the checksum fixed up (mode 1).
fn parse_manifest_seeds(dir: &Path) {
    use loaderx_format::manifest::{Column, Manifest, Part};
    let dense = Schema {
        kind: Kind::Dense,
        dtype: Dtype::from_name("<f4").unwrap(),
        shape: vec![2, 3],
        ndim: 2,
        codec: CodecTag::ZSTD,
        dictionary: None,
        codecs: Vec::new(),
    };
    let image = Schema {
        kind: Kind::Ragged,
        dtype: Dtype::U8,
        shape: Vec::new(),
        ndim: 3,
        codec: CodecTag::JPEG,
        dictionary: None,
        codecs: vec![
            v2::CodecRef { tag: CodecTag::JPEG, name: "jpeg".into(), version: 1 },
            v2::CodecRef { tag: CodecTag::PNG, name: "png".into(), version: 1 },
        ],
    };
    for parts in [1usize, 4] {
        let m = Manifest {
            columns: vec![
                Column { name: "x".into(), schema: dense.clone() },
                Column { name: "image".into(), schema: image.clone() },
            ],
            parts: (0..parts)
                .map(|i| Part { name: format!("part-{i:05}"), records: (i as u64 * 7) % 5 })
                .collect(),
        };
        let bytes = m.encode().unwrap();
        for mode in [0u8, 1] {
            let mut input = vec![mode];
            input.extend_from_slice(&bytes);
            write(dir, &format!("manifest_{parts}_parts_mode{mode}"), &input);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    parse_index_seeds(&root.join("parse_index"));
    parse_manifest_seeds(&root.join("parse_manifest"));
    decode_seeds(&root.join("decode"));
    store_ops_seeds(&root.join("store_ops"));
    image_decode_seeds(&root.join("image_decode"));
    println!("seed corpus written to {}", root.display());
}
