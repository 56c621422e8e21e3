//! Power loss at any instant, on a disk as harsh as real ones.
//!
//! A history of appends, syncs, deletes and compactions runs on
//! [`MemStorage`]; its storage operations are cut off after the k-th one
//! (every later one fails, as if the machine stopped there), for every k.
//! The disk then keeps any subset of the pages written since each file's
//! last sync, each in any version it had, and any subset of the creations
//! and removals since the last directory sync (`MemStorage::
//! after_power_loss_with`). For each such state the store must open, pass
//! `verify`, and hold exactly the records of one committed state: the last
//! one before the interrupted operation, or one the operation itself
//! commits. A record is whole or absent; nothing acknowledged by a finished
//! commit is lost.
//!
//! Small histories are checked against every possible disk state; random
//! ones (proptest) against random disk states. `LOADERX_STRESS_SCALE`
//! multiplies the number of random cases (`cargo xtask stress`).

use loaderx_store::{
    OpenOptions, Raw, Store,
    format::{CodecTag, v2::Schema},
    storage::MemStorage,
};
use proptest::prelude::*;

/// Small chunks, so histories roll over to new chunk files.
const CAPACITY: u64 = 1500;

const TINY: u64 = 1 << 20;

/// Ids from here on are 8-byte records: appends of them make runs.
const FIXED: u64 = 2 << 20;

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<u64>),
    Sync,
    Delete(Vec<u64>),
    Compact,
}

type State = Vec<Vec<u8>>;

/// Record `id`: up to 600 bytes; ids from [`TINY`] on are 1 to 4 bytes, so
/// a history can fill table pages without filling chunk pages.
fn record(id: u64) -> Vec<u8> {
    let len = if id >= FIXED {
        8
    } else if id >= TINY {
        1 + (id % 4) as usize
    } else {
        1 + (id * 7919 % 600) as usize
    };
    (0..len).map(|k| (id as usize * 31 + k) as u8).collect()
}

/// Which format a history runs on: v1, or v2 with `lanes` write lanes.
#[derive(Debug, Clone, Copy)]
enum Fmt {
    V1,
    V2 {
        lanes: u8,
    },
    /// Format v2 with a run table.
    Runs {
        lanes: u8,
    },
}

fn options() -> OpenOptions {
    OpenOptions {
        chunk_capacity: CAPACITY,
        // Every append over every lane, however small: the histories
        // commit several lanes' tails at once.
        lane_bytes: 0,
        ..OpenOptions::default()
    }
}

/// Creates the store (operation 0 of every history).
fn create(storage: &MemStorage, fmt: Fmt) -> loaderx_store::Result<Store<Raw, MemStorage>> {
    match fmt {
        Fmt::V1 => Store::open_in(storage.clone(), options()),
        Fmt::V2 { lanes } => Store::create_v2_in(
            storage.clone(),
            &Schema::bytes(CodecTag::LZ4),
            OpenOptions { lanes, ..options() },
        ),
        Fmt::Runs { lanes } => Store::create_v2_runs_in(
            storage.clone(),
            &Schema::bytes(CodecTag::LZ4),
            OpenOptions { lanes, ..options() },
        ),
    }
}

fn contents(store: &Store<Raw, MemStorage>) -> State {
    (0..store.len())
        .map(|i| {
            let mut len = [0u32];
            store.lengths(&[i], &mut len).unwrap();
            let mut buf = vec![0u8; len[0] as usize];
            store.gather_ragged(&[i], &mut buf, &[0]).unwrap();
            buf
        })
        .collect()
}

/// Applies `op` to the model: `pending` is what the handle sees, and every
/// state the operation commits is pushed to `commits`.
fn model(op: &Op, pending: &mut State, commits: &mut Vec<State>) {
    match op {
        Op::Append(ids) => pending.extend(ids.iter().map(|&id| record(id))),
        Op::Sync | Op::Compact => commits.push(pending.clone()),
        // A delete with an index out of range is refused before anything.
        Op::Delete(idxs) if idxs.iter().all(|&i| i < pending.len() as u64) => {
            commits.push(pending.clone());
            let mut targets = idxs.clone();
            targets.sort_unstable_by(|a, b| b.cmp(a));
            targets.dedup();
            for i in targets {
                pending.swap_remove(i as usize);
            }
            commits.push(pending.clone());
        }
        Op::Delete(_) => {}
    }
}

fn run(store: &mut Store<Raw, MemStorage>, op: &Op) {
    let _ = match op {
        Op::Append(ids) => {
            let recs: Vec<Vec<u8>> = ids.iter().map(|&id| record(id)).collect();
            let lens: Vec<u32> = recs.iter().map(|r| r.len() as u32).collect();
            let offsets: Vec<u64> = lens
                .iter()
                .scan(0u64, |at, &l| {
                    let o = *at;
                    *at += u64::from(l);
                    Some(o)
                })
                .collect();
            store
                .append_ragged(&recs.concat(), &offsets, &lens)
                .map(|_| ())
        }
        Op::Sync => store.sync(),
        Op::Delete(idxs) => store.delete(idxs),
        Op::Compact => store.compact(),
    };
}

/// The states a crash during each operation may leave: for operation `j`
/// (the store's creation is operation 0, the final drop the last), the
/// last committed state before it and those it commits itself; and how many
/// storage operations each history operation performs.
fn plan(history: &[Op], fmt: Fmt) -> (Vec<Vec<State>>, Vec<u64>) {
    let storage = MemStorage::new();
    let mut ends = Vec::new();
    let mut store = create(&storage, fmt).unwrap();
    ends.push(storage.ops());
    let mut allowed = vec![vec![State::new()]];
    let mut pending = State::new();
    let mut commits = vec![State::new()];
    for op in history {
        let before = commits.len();
        let last = commits.last().unwrap().clone();
        model(op, &mut pending, &mut commits);
        run(&mut store, op);
        assert_eq!(contents(&store), pending, "the model is wrong for {op:?}");
        let mut states = vec![last];
        states.extend(commits[before..].iter().cloned());
        allowed.push(states);
        ends.push(storage.ops());
    }
    // Dropping the handle commits what is pending.
    allowed.push(vec![commits.last().unwrap().clone(), pending]);
    drop(store);
    ends.push(storage.ops());
    (allowed, ends)
}

/// Runs `history` with storage cut off after `k` operations.
fn crash_at(history: &[Op], k: u64, fmt: Fmt) -> MemStorage {
    let storage = MemStorage::new();
    storage.fail_after(k);
    if let Ok(mut store) = create(&storage, fmt) {
        for op in history {
            run(&mut store, op);
        }
    }
    storage
}

/// Checks the store a power loss left against the states allowed.
fn check(disk: &MemStorage, allowed: &[State], what: &dyn Fn() -> String) {
    let store = Store::<Raw, MemStorage>::open_in(disk.clone(), options())
        .unwrap_or_else(|e| panic!("{}: the store did not open: {e}", what()));
    store
        .verify()
        .unwrap_or_else(|e| panic!("{}: verify: {e}", what()));
    let got = contents(&store);
    assert!(
        allowed.contains(&got),
        "{}: {} records, none of the allowed states ({:?} records)",
        what(),
        got.len(),
        allowed.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

/// Enumerates choice sequences depth first (a choice may depend on earlier
/// ones, so the sequence is rediscovered on every run).
#[derive(Default)]
struct Odometer {
    digits: Vec<(usize, usize)>,
    at: usize,
}

impl Odometer {
    fn choose(&mut self, n: usize) -> usize {
        if self.at == self.digits.len() {
            self.digits.push((0, n));
        }
        self.digits[self.at].1 = n;
        let d = self.digits[self.at].0.min(n - 1);
        self.at += 1;
        d
    }

    /// Moves to the next sequence; false when all were visited.
    fn advance(&mut self) -> bool {
        self.digits.truncate(self.at);
        self.at = 0;
        while let Some((d, n)) = self.digits.last_mut() {
            if *d + 1 < *n {
                *d += 1;
                return true;
            }
            self.digits.pop();
        }
        false
    }
}

/// Every crash point of `history`, every disk state each may leave.
fn exhaustively(history: &[Op], fmt: Fmt) -> u64 {
    let (allowed, ends) = plan(history, fmt);
    let mut states = 0;
    for k in 0..*ends.last().unwrap() {
        let j = ends.iter().position(|&end| k < end).unwrap();
        let crashed = crash_at(history, k, fmt);
        let what = || format!("crash at storage op {k} (history op {j})");
        check(&crashed.after_process_crash(), &allowed[j], &|| {
            format!("{} then process exit", what())
        });
        let mut odometer = Odometer::default();
        loop {
            let disk = crashed.after_power_loss_with(&mut |n| odometer.choose(n));
            check(&disk, &allowed[j], &|| {
                format!("{} then power loss {:?}", what(), odometer.digits)
            });
            states += 1;
            if !odometer.advance() {
                break;
            }
        }
    }
    println!(
        "{} crash points, {states} disk states",
        ends.last().unwrap()
    );
    states
}

/// Every crash point of `history`, and `samples` random disk states each
/// (plus the harshest: nothing unsynced survived).
fn sampled(history: &[Op], samples: u64, fmt: Fmt) {
    let (allowed, ends) = plan(history, fmt);
    for k in 0..*ends.last().unwrap() {
        let j = ends.iter().position(|&end| k < end).unwrap();
        let crashed = crash_at(history, k, fmt);
        for seed in 0..=samples {
            let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let disk = crashed.after_power_loss_with(&mut |n| {
                if seed == 0 {
                    return 0;
                }
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % n as u64) as usize
            });
            check(&disk, &allowed[j], &|| {
                format!("crash at storage op {k} (history op {j}), sample {seed}")
            });
        }
    }
}

#[test]
fn every_disk_state_of_appends_and_syncs() {
    let history = [
        Op::Append(vec![1, 2, 3]),
        Op::Sync,
        Op::Append(vec![4, 5]),
        Op::Append(vec![6]),
        Op::Sync,
        Op::Append(vec![7]),
    ];
    let states = exhaustively(&history, Fmt::V1);
    assert!(states > 100, "only {states} disk states");
}

/// The same in format v2 with two lanes: two header slots, checksummed
/// entries, two tail chunks written by every append.
#[test]
fn every_disk_state_of_appends_and_syncs_in_format_v2() {
    let history = [
        Op::Append(vec![1, 2, 3]),
        Op::Sync,
        Op::Append(vec![4, 5]),
        Op::Sync,
        Op::Append(vec![7]),
    ];
    let states = exhaustively(&history, Fmt::V2 { lanes: 2 });
    assert!(states > 100, "only {states} disk states");
}

/// Appends that make runs (8-byte records, kept raw by LZ4), between
/// records that do not (groups of entries), over two lanes and across
/// chunk rollovers: every subset of unsynced pages leaves a committed
/// state, read back through the run table with every block's CRC checked.
#[test]
fn every_disk_state_of_appends_that_make_runs() {
    let history = [
        Op::Append([1].into_iter().chain(FIXED..FIXED + 30).collect()),
        Op::Sync,
        Op::Append((FIXED + 30..FIXED + 200).collect()),
        Op::Sync,
        Op::Append((FIXED + 200..FIXED + 210).chain([2, 3]).collect()),
    ];
    let states = exhaustively(&history, Fmt::Runs { lanes: 2 });
    assert!(states > 100, "only {states} disk states");
}

/// A delete that cuts a run (the table rewritten from the cut on, through
/// the undo log), and a compaction that moves runs through staging chunks.
#[test]
fn every_disk_state_of_a_delete_and_a_compaction_of_runs() {
    exhaustively(
        &[
            Op::Append((FIXED..FIXED + 40).chain([1]).collect()),
            Op::Sync,
            Op::Delete(vec![7, 20]),
        ],
        Fmt::Runs { lanes: 2 },
    );
    sampled(
        &[
            Op::Append((FIXED..FIXED + 60).collect()),
            Op::Delete(vec![0, 30]),
            Op::Append((FIXED + 60..FIXED + 70).collect()),
            Op::Compact,
        ],
        12,
        Fmt::Runs { lanes: 2 },
    );
}

#[test]
fn every_disk_state_of_a_delete_and_a_compaction_in_format_v2() {
    exhaustively(
        &[
            Op::Append(vec![1, 2, 3, 4, 5]),
            Op::Sync,
            Op::Delete(vec![1, 3]),
        ],
        Fmt::V2 { lanes: 2 },
    );
    sampled(
        &[
            Op::Append(vec![1, 2, 3, 4, 5, 6]),
            Op::Delete(vec![0, 2]),
            Op::Append(vec![7]),
            Op::Compact,
        ],
        12,
        Fmt::V2 { lanes: 2 },
    );
}

/// The table crosses from page 0 (which holds the header) into page 1, so
/// entries and the header that counts them can reach the disk separately.
#[test]
fn every_disk_state_of_a_commit_whose_table_spans_pages() {
    let history = [
        Op::Append((TINY..TINY + 250).collect()),
        Op::Sync,
        Op::Append((TINY + 250..TINY + 270).collect()),
        Op::Sync,
        Op::Delete(vec![3, 260]),
    ];
    exhaustively(&history, Fmt::V1);
}

/// Compaction moves records whose entries lie on page 1 while the frontier
/// that covers their staged copies is on page 0. Too many disk states to
/// visit them all: every crash point, sampled.
#[test]
fn sampled_disk_states_of_a_compaction_whose_table_spans_pages() {
    let history = [
        Op::Append((TINY..TINY + 262).collect()),
        Op::Sync,
        Op::Delete(vec![257]),
        Op::Compact,
    ];
    sampled(&history, 24, Fmt::V1);
}

#[test]
fn every_disk_state_of_a_delete() {
    let history = [
        Op::Append(vec![1, 2, 3, 4, 5]),
        Op::Sync,
        Op::Append(vec![6]),
        Op::Delete(vec![1, 3]),
    ];
    exhaustively(&history, Fmt::V1);
}

#[test]
fn every_disk_state_of_a_compaction() {
    let history = [
        Op::Append(vec![1, 2, 3, 4, 5, 6]),
        Op::Delete(vec![0, 2]),
        Op::Append(vec![7]),
        Op::Compact,
    ];
    exhaustively(&history, Fmt::V1);
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec(0u64..1000, 1..6).prop_map(Op::Append),
        2 => Just(Op::Sync),
        1 => prop::collection::vec(0u64..12, 1..4).prop_map(Op::Delete),
        1 => Just(Op::Compact),
    ]
}

fn cases() -> u32 {
    let scale: u32 = std::env::var("LOADERX_STRESS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    24 * scale.max(1)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random histories, random crash points, random disk states.
    #[test]
    fn random_histories_survive_power_loss(
        history in prop::collection::vec(op(), 1..10),
        cut in any::<u64>(),
        seeds in prop::collection::vec(any::<u64>(), 8),
        v2_lanes in 0u8..4,
    ) {
        let fmt = if v2_lanes == 0 { Fmt::V1 } else { Fmt::V2 { lanes: v2_lanes } };
        let (allowed, ends) = plan(&history, fmt);
        let k = cut % ends.last().unwrap();
        let j = ends.iter().position(|&end| k < end).unwrap();
        let crashed = crash_at(&history, k, fmt);
        for seed in seeds {
            let mut rng = seed | 1;
            let disk = crashed.after_power_loss_with(&mut |n| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % n as u64) as usize
            });
            check(&disk, &allowed[j], &|| format!("{history:?} ({fmt:?}): crash at {k}, seed {seed}"));
        }
    }
}
