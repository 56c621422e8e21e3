//! Crash consistency with real processes: a child process appends (or
//! compacts) and is killed with SIGKILL while it is inside that operation;
//! after each kill the store must open, hold a prefix of what was appended
//! with every record intact, and lose nothing that had been synced.
//!
//! The child is this test binary itself, re-run with `--exact` on the
//! `#[ignore]`d entry points below and told what to do through environment
//! variables. It writes `enter N` to its stdout (a pipe) right before
//! operation N and `leave N` right after it returns; the parent kills it
//! only after reading `enter N`, and counts the kill as landed only if no
//! `leave N` reached the pipe before the child died. Each test requires a
//! minimum number of landed kills.

mod common;

use std::{
    env,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::Stdio,
    sync::mpsc,
    thread,
    time::Duration,
};

use loaderx_store::{CodecId, Deflate, Store};

const STORE_ENV: &str = "LOADERX_KILL_TEST_STORE";

/// Kills that must land inside the operation under test, and the most
/// attempts allowed to get them: a kill that comes after the operation
/// returned proves nothing and does not count.
const LANDED: usize = 16;
const ATTEMPTS: usize = 64;

/// Record `i`: its length and bytes are a function of `i` alone.
fn expected(i: u64) -> Vec<u8> {
    let len = 200 + (i * 7919 % 3000) as usize;
    (0..len)
        .map(|k| ((i * 31 + k as u64 / 16) % 251) as u8)
        .collect()
}

/// What a child reports on stdout, one line each, written to the pipe
/// before the child moves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// `enter N`: about to start operation N.
    Enter(u64),
    /// `leave N`: operation N returned.
    Leave(u64),
    /// `synced N`: the first N records are durable.
    Synced(u64),
}

impl Marker {
    /// The marker a line ends with (the test harness may have printed its
    /// own text before the first one, on the same line).
    fn parse(line: &str) -> Option<Marker> {
        let mut words = line.split_whitespace().rev();
        let n = words.next()?.parse().ok()?;
        let what = words.next()?;
        match what {
            "enter" => Some(Marker::Enter(n)),
            "leave" => Some(Marker::Leave(n)),
            "synced" => Some(Marker::Synced(n)),
            _ => None,
        }
    }

    /// Writes the marker and flushes it into the pipe.
    fn report(self) {
        let line = match self {
            Marker::Enter(n) => format!("enter {n}\n"),
            Marker::Leave(n) => format!("leave {n}\n"),
            Marker::Synced(n) => format!("synced {n}\n"),
        };
        let mut out = std::io::stdout().lock();
        out.write_all(line.as_bytes()).unwrap();
        out.flush().unwrap();
    }
}

/// What the parent saw of one killed child.
struct Kill {
    markers: Vec<Marker>,
    /// Whether our SIGKILL is what ended it.
    by_signal: bool,
}

impl Kill {
    /// Whether our kill ended the child inside an operation: its last
    /// `enter`/`leave` marker is an `enter`.
    fn landed_inside(&self) -> bool {
        if !self.by_signal {
            return false;
        }
        let last = self
            .markers
            .iter()
            .rev()
            .find(|m| !matches!(m, Marker::Synced(_)));
        matches!(last, Some(Marker::Enter(_)))
    }

    /// Records the child reported durable.
    fn synced(&self) -> u64 {
        self.markers
            .iter()
            .filter_map(|m| match m {
                Marker::Synced(n) => Some(*n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }
}

/// Runs child `entry` on `store`, waits until it enters operation `op`, lets
/// it run for `delay`, kills it with SIGKILL, and collects every marker it
/// wrote.
fn kill_during(entry: &str, store: &Path, op: u64, delay: Duration) -> Kill {
    let mut child = common::self_command()
        .args([
            "--exact",
            entry,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(STORE_ENV, store)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(m) = Marker::parse(&line) {
                let _ = tx.send(m);
            }
        }
    });
    let mut markers = Vec::new();
    loop {
        let m = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("child {entry} never entered operation {op}: {e}"));
        markers.push(m);
        if matches!(m, Marker::Enter(k) if k >= op) {
            break;
        }
    }
    thread::sleep(delay);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let by_signal = killed(status);
    assert!(
        by_signal || status.success(),
        "child {entry} failed on its own: {status}"
    );
    // The pipe closes with the child; the reader drains it, then ends.
    reader.join().unwrap();
    markers.extend(rx.try_iter());
    Kill { markers, by_signal }
}

/// Whether `Child::kill` ended the child: SIGKILL on Unix.
#[cfg(unix)]
fn killed(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGKILL)
}

/// Whether `Child::kill` ended the child: on Windows that is
/// `TerminateProcess` with exit code 1 (a panicking child exits with 101).
#[cfg(windows)]
fn killed(status: std::process::ExitStatus) -> bool {
    status.code() == Some(1)
}

/// Pseudo-random kill delays (deterministic, so a failure reproduces) below
/// a bound that shrinks each time a kill comes too late, so the kills keep
/// landing inside operations however fast this machine runs them; and the
/// count of kills that landed.
struct Aim {
    state: u64,
    max_delay_us: u64,
    /// The operation under test, for messages.
    what: &'static str,
    landed: usize,
    attempts: usize,
}

impl Aim {
    fn new(what: &'static str, seed: u64, max_delay_us: u64) -> Aim {
        Aim {
            state: seed,
            max_delay_us,
            what,
            landed: 0,
            attempts: 0,
        }
    }

    /// Whether another kill is needed; fails the test once [`ATTEMPTS`]
    /// attempts have not given [`LANDED`] landed kills.
    fn more(&mut self) -> bool {
        let (landed, attempts, what) = (self.landed, self.attempts, self.what);
        if landed >= LANDED {
            eprintln!("{landed} of {attempts} kills landed inside {what}");
            return false;
        }
        assert!(
            attempts < ATTEMPTS,
            "only {landed} of {attempts} kills landed inside {what}"
        );
        self.attempts += 1;
        true
    }

    /// Counts `kill` if it landed inside the operation; aims earlier if not.
    fn tally(&mut self, kill: &Kill) {
        if kill.landed_inside() {
            self.landed += 1;
        } else {
            self.max_delay_us = (self.max_delay_us * 3 / 4).max(50);
        }
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % bound
    }

    fn delay(&mut self) -> Duration {
        Duration::from_micros(self.below(self.max_delay_us + 1))
    }
}

fn check_prefix(store: &Store<Deflate>) {
    store.verify().unwrap();
    for (i, record) in contents(store).iter().enumerate() {
        assert!(
            *record == expected(i as u64),
            "record {i} is not what was appended"
        );
    }
}

fn contents(store: &Store<Deflate>) -> Vec<Vec<u8>> {
    (0..store.len())
        .map(|i| {
            let mut len = [0u32];
            store.lengths(&[i], &mut len).unwrap();
            let mut out = vec![0u8; len[0] as usize];
            store.gather(&[i], &mut out, len[0] as usize).unwrap();
            out
        })
        .collect()
}

/// `recs` as one ragged append's source, offsets and lengths.
fn ragged(recs: &[Vec<u8>]) -> (Vec<u8>, Vec<u64>, Vec<u32>) {
    let lens: Vec<u32> = recs.iter().map(|r| r.len() as u32).collect();
    let offsets = lens
        .iter()
        .scan(0u64, |at, &l| {
            let here = *at;
            *at += u64::from(l);
            Some(here)
        })
        .collect();
    (recs.concat(), offsets, lens)
}

#[test]
fn appends_survive_sigkill_inside_an_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let mut aim = Aim::new("an append", 0x2545_f491_4f6c_dd1d, 3000);
    let mut synced_floor = 0u64;
    while aim.more() {
        let attempts = aim.attempts;
        // Kill during one of the first few appends, somewhere inside it.
        let op = aim.below(4);
        let kill = kill_during("append_child", &path, op, aim.delay());
        aim.tally(&kill);
        synced_floor = synced_floor.max(kill.synced());
        let store: Store<Deflate> = Store::open(&path)
            .unwrap_or_else(|e| panic!("attempt {attempts}: the store did not reopen: {e}"));
        assert!(
            store.len() >= synced_floor,
            "attempt {attempts}: {} records, but {synced_floor} had been synced",
            store.len()
        );
        check_prefix(&store);
    }
    let store: Store<Deflate> = Store::open(&path).unwrap();
    assert!(!store.is_empty(), "the children never appended anything");
}

#[test]
fn compaction_survives_sigkill_inside_a_compaction_and_finishes_on_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    // Each record carries its own identity in its first 8 bytes.
    let tagged = |id: u64| -> Vec<u8> {
        let mut r = expected(id);
        r[..8].copy_from_slice(&id.to_le_bytes());
        r
    };
    {
        let store: Store<Deflate> = Store::open(&path).unwrap();
        for batch in 0..40u64 {
            let recs: Vec<Vec<u8>> = (batch * 100..batch * 100 + 100).map(tagged).collect();
            let (src, offsets, lens) = ragged(&recs);
            let codec = if batch % 2 == 0 {
                CodecId::Deflate
            } else {
                CodecId::Raw
            };
            store
                .append_ragged_with(codec, &src, &offsets, &lens)
                .unwrap();
        }
    }
    let mut aim = Aim::new("a compaction", 0x9e37_79b9_7f4a_7c15, 20_000);
    while aim.more() {
        let attempts = aim.attempts;
        // Give the child bytes to move: holes from a delete, then a record
        // appended at the frontier, past every hole, so a compaction must
        // move it (it is never a no-op).
        let expect = {
            let mut store: Store<Deflate> = Store::open(&path).unwrap();
            let n = store.len();
            let doomed: Vec<u64> = (0..n)
                .filter(|i| (i + attempts as u64).is_multiple_of(13))
                .collect();
            assert!(!doomed.is_empty());
            store.delete(&doomed).unwrap();
            let extra = tagged(100_000 + attempts as u64);
            store.append_fixed(&extra, 1, extra.len()).unwrap();
            store.sync().unwrap();
            assert!(store.stats().unwrap().reclaimable > 0);
            contents(&store)
        };
        let kill = kill_during("compact_child", &path, 0, aim.delay());
        aim.tally(&kill);
        let store: Store<Deflate> = Store::open(&path)
            .unwrap_or_else(|e| panic!("attempt {attempts}: the store did not reopen: {e}"));
        store.verify().unwrap();
        assert!(
            contents(&store) == expect,
            "attempt {attempts}: records changed"
        );
    }
    let expect = contents(&Store::<Deflate>::open(&path).unwrap());
    let mut store: Store<Deflate> = Store::open(&path).unwrap();
    store.compact().unwrap();
    assert!(contents(&store) == expect);
    let stats = store.stats().unwrap();
    // Nothing left to reclaim but what a 4 GiB chunk's end can hold.
    assert!(stats.reclaimable < 1 << 20, "{stats:?}");
    let on_disk: u64 = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let name = e.file_name();
            name != loaderx_store::format::META_FILE && name != loaderx_store::format::LOCK_FILE
        })
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let names: Vec<_> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        on_disk, stats.chunk_bytes,
        "files past the frontier were left behind: {names:?} {stats:?}"
    );
}

/// Child: appends batches forever, syncing every third one, with markers
/// around each append.
#[test]
#[ignore = "child process of appends_survive_sigkill_inside_an_append"]
fn append_child() {
    let Some(path) = env::var_os(STORE_ENV) else {
        return;
    };
    let store: Store<Deflate> = Store::open(path).unwrap();
    for batch in 0u64.. {
        let first = store.len();
        let recs: Vec<Vec<u8>> = (first..first + 128).map(expected).collect();
        let (src, offsets, lens) = ragged(&recs);
        let codec = CodecId::ALL[batch as usize % 4];
        // A codec this build leaves out (cargo features) is replaced by raw.
        let codec = if codec.missing_feature().is_some() {
            CodecId::Raw
        } else {
            codec
        };
        Marker::Enter(batch).report();
        store
            .append_ragged_with(codec, &src, &offsets, &lens)
            .unwrap();
        if batch % 3 == 2 {
            store.sync().unwrap();
            Marker::Synced(store.len()).report();
        }
        Marker::Leave(batch).report();
    }
}

/// Child: one compaction, with markers around it.
#[test]
#[ignore = "child process of compaction_survives_sigkill_inside_a_compaction_and_finishes_on_rerun"]
fn compact_child() {
    let Some(path) = env::var_os(STORE_ENV) else {
        return;
    };
    let mut store: Store<Deflate> = Store::open(path).unwrap();
    Marker::Enter(0).report();
    store.compact().unwrap();
    Marker::Leave(0).report();
}
