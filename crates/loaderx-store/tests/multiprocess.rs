//! Many processes on one store at once: one writer appending, three readers
//! gathering and checking every byte, one process trying `delete` and
//! `compact`, one opening and closing. Every process must finish cleanly; no
//! read may be torn or wrong; the only errors allowed are `Locked`.
//!
//! Records describe themselves (their id, their length and a pattern derived
//! from the id), so a reader can check any record it gathers without knowing
//! which index a delete moved it to.
//!
//! A third run keeps raw fixed-size records (format v2), whose gathers take
//! the path that copies covered small records straight from the maps. The
//! mutator must get most of its deletes and compactions through (at least
//! [`MIN_MUTATIONS`] of its attempts), so the test exercises them rather
//! than their refusal.
//!
//! The children are this test binary, re-run with `--exact` on the
//! `#[ignore]`d entry point and told their role through the environment.
//! `LOADERX_STRESS_SCALE` (default 1) multiplies every process's operation
//! count, not the store: the writer waits while the store holds [`CAP`]
//! records, and the mutator, which runs for as long as the writer does,
//! cuts the store back to half of that whenever it gets to delete. So
//! the store (and each compaction) stays the same size however long the
//! test runs. `cargo xtask stress` runs it long.

mod common;

use std::{
    env,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use common::{check_self_describing as check, ragged_batch, self_describing_sized, spawn_child};
use loaderx_store::{Deflate, Error, Store};

const STORE_ENV: &str = "LOADERX_MP_STORE";
const ROLE_ENV: &str = "LOADERX_MP_ROLE";
/// Set (to the record length) for the run on raw fixed-size records.
const FIXED_ENV: &str = "LOADERX_MP_FIXED";
const SCALE_ENV: &str = "LOADERX_STRESS_SCALE";

/// Records the store holds at most, give or take one batch.
const CAP: u64 = 512;
/// Records the writer appends at a time.
const BATCH: u64 = 16;
/// The share of the mutator's attempts that must succeed.
const MIN_MUTATIONS: f64 = 0.5;

/// The record length of the fixed-size run, or `None` for ragged records.
fn fixed() -> Option<usize> {
    env::var(FIXED_ENV).ok().and_then(|s| s.parse().ok())
}

fn scale() -> u64 {
    env::var(SCALE_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

fn locked(e: &Error) -> bool {
    matches!(e, Error::Locked { .. })
}

/// Opens the store, retrying while someone holds it exclusively. Its
/// appends, small as they are, spread over every lane of a v2 store.
fn open(path: &Path) -> Store<Deflate> {
    let options = loaderx_store::OpenOptions {
        lane_bytes: 0,
        ..loaderx_store::OpenOptions::default()
    };
    for _ in 0..2000 {
        match Store::open_with(path, options.clone()) {
            Ok(s) => return s,
            Err(e) if locked(&e) => thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("open failed: {e}"),
        }
    }
    panic!("store stayed locked for seconds");
}

/// The marker the writer leaves when it is done.
fn writer_done(path: &Path) -> std::path::PathBuf {
    path.with_extension("writer-done")
}

fn writer(path: &Path) {
    let (mut next, mut sessions, mut full) = (0u64, 0u64, 0u64);
    while sessions < 20 * scale() {
        let store = open(path);
        // At the cap, wait (without the store open) for the mutator to cut
        // it back; that wait is not a session.
        if store.len() >= CAP {
            full += 1;
            drop(store);
            thread::sleep(Duration::from_millis(3));
            continue;
        }
        for _batch in 0..5 {
            if store.len() >= CAP {
                break;
            }
            let appended = match fixed() {
                Some(len) => {
                    let src: Vec<u8> = (next..next + BATCH)
                        .flat_map(|id| self_describing_sized(id, len))
                        .collect();
                    store.append_fixed(&src, BATCH as usize, len)
                }
                None => {
                    let (src, offsets, lens) = ragged_batch(next..next + BATCH);
                    store.append_ragged(&src, &offsets, &lens)
                }
            };
            match appended {
                Ok(_) => next += BATCH,
                Err(e) if locked(&e) => break,
                Err(e) => panic!("append failed: {e}"),
            }
            match store.sync() {
                Ok(()) => {}
                Err(e) if locked(&e) => break,
                Err(e) => panic!("sync failed: {e}"),
            }
        }
        drop(store);
        sessions += 1;
        thread::sleep(Duration::from_millis(3));
    }
    std::fs::write(writer_done(path), b"").unwrap();
    println!("writer appended {next} records; waited {full} times for room");
}

fn reader(path: &Path, seed: u64) {
    let mut rng = seed | 1;
    let mut checked = 0u64;
    for _session in 0..40 * scale() {
        let store = open(path);
        for _ in 0..10 {
            let len = store.len();
            if len == 0 {
                break;
            }
            let idxs: Vec<u64> = (0..32)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng % len
                })
                .collect();
            if let Some(len) = fixed() {
                // Strided, as a batch of labels is gathered.
                let mut dst = vec![0u8; idxs.len() * len];
                store.gather(&idxs, &mut dst, len).expect("gather");
                for (i, bytes) in dst.chunks_exact(len).enumerate() {
                    if let Err(why) = check(bytes) {
                        panic!("index {}: {why}", idxs[i]);
                    }
                    checked += 1;
                }
                continue;
            }
            let mut lens = vec![0u32; idxs.len()];
            store.lengths(&idxs, &mut lens).expect("lengths");
            let mut offsets = Vec::with_capacity(idxs.len());
            let mut total = 0u64;
            for &l in &lens {
                offsets.push(total);
                total += u64::from(l);
            }
            let mut dst = vec![0u8; total as usize];
            store
                .gather_ragged(&idxs, &mut dst, &offsets)
                .expect("gather");
            for (i, &off) in offsets.iter().enumerate() {
                let bytes = &dst[off as usize..off as usize + lens[i] as usize];
                if let Err(why) = check(bytes) {
                    panic!("index {}: {why}", idxs[i]);
                }
                checked += 1;
            }
        }
        drop(store);
        thread::sleep(Duration::from_millis(1));
    }
    println!("reader checked {checked} records");
}

fn mutator(path: &Path) {
    let (mut deletes, mut compactions, mut refused) = (0, 0, 0);
    let mut round = 0;
    while round < 200 * scale() || !writer_done(path).exists() {
        let mut store = open(path);
        let len = store.len();
        let outcome = if round % 2 == 0 && len > 0 {
            // Above half the cap, cut back to half, so the writer goes on.
            let count = len.saturating_sub(CAP / 2).max(2).min(len);
            let victims: Vec<u64> = (0..count)
                .map(|j| (round + j * len / count) % len)
                .collect();
            store.delete(&victims).map(|()| deletes += 1)
        } else {
            store.compact().map(|()| compactions += 1)
        };
        match outcome {
            Ok(()) => {}
            Err(e) if locked(&e) => refused += 1,
            Err(e) => panic!("delete/compact failed: {e}"),
        }
        drop(store);
        round += 1;
        thread::sleep(Duration::from_millis(2));
    }
    println!("mutator did {deletes} deletes and {compactions} compactions; {refused} were refused");
}

fn opener(path: &Path) {
    for _ in 0..300 * scale() {
        let store = open(path);
        let _ = store.len();
        drop(store);
    }
}

#[test]
#[ignore = "child process of one_writer_many_readers_across_processes"]
fn multiprocess_child() {
    let (Ok(path), Ok(role)) = (env::var(STORE_ENV), env::var(ROLE_ENV)) else {
        return;
    };
    let path = Path::new(&path);
    let started = Instant::now();
    match role.as_str() {
        "writer" => writer(path),
        "reader0" => reader(path, 0x9e37_79b9),
        "reader1" => reader(path, 0x85eb_ca6b),
        "reader2" => reader(path, 0xc2b2_ae35),
        "mutator" => mutator(path),
        "opener" => opener(path),
        other => panic!("unknown role {other}"),
    }
    let base = role.trim_end_matches(char::is_numeric);
    println!("{base} took {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn one_writer_many_readers_across_processes() {
    stress(Kind::V1);
}

/// The same on a format v2 store with three write lanes.
#[test]
fn one_writer_many_readers_across_processes_in_format_v2() {
    stress(Kind::V2);
}

/// The same with raw 48-byte records in format v2, gathered strided.
#[test]
fn one_writer_many_readers_across_processes_on_raw_fixed_records() {
    stress(Kind::RawFixed(48));
}

#[derive(Clone, Copy)]
enum Kind {
    V1,
    V2,
    RawFixed(usize),
}

fn stress(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        // Seed it so readers have something from the start.
        let v2 = |codec, lanes| {
            let options = loaderx_store::OpenOptions {
                lanes,
                ..loaderx_store::OpenOptions::default()
            };
            let schema = loaderx_store::format::v2::Schema::bytes(codec);
            Store::<Deflate>::create_v2(&path, &schema, options).unwrap()
        };
        let store = match kind {
            Kind::V1 => Store::open(&path).unwrap(),
            Kind::V2 => v2(loaderx_store::format::CodecTag::FLATE, 3),
            Kind::RawFixed(_) => v2(loaderx_store::format::CodecTag::RAW, 1),
        };
        if let Kind::RawFixed(len) = kind {
            let src: Vec<u8> = (10_000_000..10_000_064)
                .flat_map(|id| self_describing_sized(id, len))
                .collect();
            store.append_fixed(&src, 64, len).unwrap();
        } else {
            let (records, offsets, lens) = ragged_batch(10_000_000..10_000_064);
            store.append_ragged(&records, &offsets, &lens).unwrap();
        }
        store.sync().unwrap();
    }
    let fixed_len = match kind {
        Kind::RawFixed(len) => len.to_string(),
        _ => String::new(),
    };
    let roles = [
        "writer", "reader0", "reader1", "reader2", "mutator", "opener",
    ];
    let children: Vec<_> = roles
        .iter()
        .map(|role| {
            let mut envs = vec![(STORE_ENV, path.as_os_str()), (ROLE_ENV, role.as_ref())];
            if !fixed_len.is_empty() {
                envs.push((FIXED_ENV, fixed_len.as_ref()));
            }
            let child = spawn_child("multiprocess_child", &envs);
            (role, child)
        })
        .collect();
    let mut failures = Vec::new();
    for (role, child) in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary: Vec<&str> = stdout
            .lines()
            .filter_map(|l| {
                let base = role.trim_end_matches(char::is_numeric);
                l.find(&format!("{base} ")).map(|at| &l[at..])
            })
            .collect();
        println!("{role}: {:?} {}", out.status, summary.join("; "));
        if *role == "mutator" && out.status.success() {
            check_mutations(&summary.join(" "));
        }
        if !out.status.success() {
            failures.push(format!(
                "{role} failed ({:?}):\n{}\n{}",
                out.status,
                stdout,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The survivors are all intact and distinct.
    let store: Store<Deflate> = Store::open(&path).unwrap();
    store.verify().unwrap();
    let len = store.len();
    assert!(
        len < CAP + BATCH,
        "the store grew past its cap: {len} records"
    );
    let idxs: Vec<u64> = (0..len).collect();
    let mut lens = vec![0u32; idxs.len()];
    store.lengths(&idxs, &mut lens).unwrap();
    let mut seen = std::collections::HashSet::new();
    for (i, &l) in lens.iter().enumerate() {
        let mut buf = vec![0u8; l as usize];
        store.gather_ragged(&[i as u64], &mut buf, &[0]).unwrap();
        let id = check(&buf).unwrap_or_else(|why| panic!("index {i}: {why}"));
        assert!(seen.insert(id), "record {id} appears twice");
    }
}

/// Fails unless the mutator's summary ("mutator did D deletes and C
/// compactions; R were refused") shows both kinds done and at least
/// [`MIN_MUTATIONS`] of its attempts through.
fn check_mutations(summary: &str) {
    let numbers: Vec<f64> = summary
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [deletes, compactions, refused, ..] = numbers[..] else {
        panic!("no counts in the mutator's summary: {summary:?}");
    };
    assert!(deletes > 0.0 && compactions > 0.0, "{summary}");
    let share = (deletes + compactions) / (deletes + compactions + refused);
    assert!(
        share >= MIN_MUTATIONS,
        "only {:.0}% of the mutator's attempts got through: {summary}",
        share * 100.0
    );
}
