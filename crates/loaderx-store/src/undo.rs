//! The engine's side of the undo log that makes `delete` all-or-nothing:
//! writing it, removing it, rolling the table back from it, and recovering
//! at open. Its bytes are [`loaderx_format::UndoLog`]'s; the protocol is
//! `docs/FORMAT.md`, "Delete".

use loaderx_format::{
    Head, UNDO_MAX_LEN, UndoLog,
    v2::{self, UndoLogV2},
};

use std::{
    thread,
    time::{Duration, Instant},
};

use crate::{
    Codec, Error, Result, Store,
    files::{Entry, Files},
    layout::Layout,
    lock::StoreLock,
    storage::{FileId, Storage},
};

/// What a delete is about to overwrite, in either format: the head before
/// it and every entry it will rewrite.
#[derive(Debug, Clone)]
pub(crate) struct Log {
    pub(crate) head: Head,
    pub(crate) entries: Vec<(u64, Entry)>,
    /// A run table's units it will rewrite, `(unit, old bytes)` (format v2,
    /// §9.5; `entries` is then empty).
    pub(crate) units: Vec<(u64, Vec<u8>)>,
}

impl Log {
    fn encode<S: Storage>(&self, files: &Files<S>) -> Vec<u8> {
        match files.layout() {
            Layout::V2 { runs: true, .. } => UndoLogV2 {
                length: self.head.length,
                entry_len: v2::runs::UNIT_LEN as u16,
                entries: self.units.clone(),
            }
            .encode(),
            Layout::V1 => UndoLog {
                header: self.head.to_v1().expect("a v1 store's head fits format v1"),
                entries: self
                    .entries
                    .iter()
                    .map(|(slot, e)| (*slot as u32, e.loc))
                    .collect(),
            }
            .encode(),
            Layout::V2 {
                entry_len, ndim, ..
            } => UndoLogV2 {
                length: self.head.length,
                entry_len: entry_len as u16,
                entries: self
                    .entries
                    .iter()
                    .map(|(slot, e)| {
                        let mut b = Vec::with_capacity(entry_len);
                        files.encode_entry(*slot, &e.loc, &e.dims[..ndim], &mut b);
                        (*slot, b)
                    })
                    .collect(),
            }
            .encode(),
        }
    }

    /// Parses a complete log for the store `files` holds (`None` when torn).
    fn decode<S: Storage>(files: &Files<S>, bytes: &[u8]) -> Result<Option<Log>> {
        Ok(match files.layout() {
            Layout::V1 => UndoLog::decode(bytes).map(|log| Log {
                head: Head::from(log.header),
                entries: log
                    .entries
                    .into_iter()
                    .map(|(slot, loc)| {
                        (
                            u64::from(slot),
                            Entry {
                                loc,
                                dims: [0; v2::MAX_NDIM],
                            },
                        )
                    })
                    .collect(),
                units: Vec::new(),
            }),
            Layout::V2 { runs: true, .. } => {
                let units = files.runs_units_in_file()?;
                let Some(log) = UndoLogV2::decode_units(bytes, units) else {
                    return Ok(None);
                };
                // A unit that fails its own checks at its position is not
                // one this log took from the table: the log is torn.
                if log
                    .entries
                    .iter()
                    .any(|(unit, b)| v2::decode_entry(*unit, b).is_err())
                {
                    return Ok(None);
                }
                let mut head = files.read_head_v2()?;
                head.length = log.length;
                Some(Log {
                    head,
                    entries: Vec::new(),
                    units: log.entries,
                })
            }
            Layout::V2 {
                entry_len, ndim, ..
            } => {
                let Some(log) = UndoLogV2::decode(bytes, entry_len as u16) else {
                    return Ok(None);
                };
                // Frontiers do not change in a delete: the old head is the
                // current one with the old count.
                let mut head = files.read_head_v2()?;
                head.length = log.length;
                let mut entries = Vec::with_capacity(log.entries.len());
                for (slot, b) in log.entries {
                    let Ok(loc) = v2::decode_entry(slot, &b) else {
                        return Ok(None);
                    };
                    let mut dims = [0; v2::MAX_NDIM];
                    v2::dims_of(&b, &mut dims[..ndim]);
                    entries.push((slot, Entry { loc, dims }));
                }
                Some(Log {
                    head,
                    entries,
                    units: Vec::new(),
                })
            }
        })
    }
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Writes `log` as the undo log and makes it durable, before anything in
    /// the table changes.
    pub(crate) fn write_undo(&mut self, log: &Log) -> Result<()> {
        let bytes = log.encode(&self.files);
        // The log must be found after power loss before the table changes:
        // written, synced, and its name synced too.
        if let Err(e) = self
            .files
            .write_durably(FileId::Undo, &bytes, "write undo log")
        {
            // Nothing in the table changed; a torn log is ignored on open.
            let _ = self.files.remove(FileId::Undo);
            return Err(e);
        }
        Ok(())
    }

    /// Removes the undo log, durably: the delete it guarded is done (or
    /// undone) and durable. A log that came back after power loss would
    /// undo a finished delete.
    pub(crate) fn remove_undo(&mut self) -> Result<()> {
        self.files.remove(FileId::Undo)?;
        self.files.sync_dir()
    }
}

/// Writes back the entries and header `log` recorded: the delete it guarded
/// did not happen. The one place a log is rolled back, in place after a
/// failed write and at open after a crash.
pub(crate) fn roll_back<S: Storage>(files: &Files<S>, log: &Log) -> Result<()> {
    for (slot, entry) in &log.entries {
        files.write_full(*slot, entry, "roll back table")?;
    }
    for (unit, bytes) in &log.units {
        files.write_unit(*unit, bytes, "roll back table")?;
    }
    files.reset_runs();
    files.write_head(&log.head, "roll back header")
}

/// At open: rolls back a delete that a complete undo log says did not
/// finish (and makes that durable), and removes the log. A torn log — the
/// crash came while writing it, before the table changed — is just removed.
/// A read-only open cannot roll back, so it refuses a complete log with
/// [`Error::NeedsRecovery`].
///
/// A live delete holds the store exclusively, so a handle that got its
/// shared lock knows any log it finds is left over from a crash; rolling it
/// back still needs every other handle gone (they may read the entries it
/// rewrites), so it runs under [`StoreLock::exclusive_once`], waiting up to
/// [`RECOVERY_WAIT`] for others to close and re-checking that the log is
/// still there (another opener may have recovered first).
pub(crate) fn recover<S: Storage>(
    files: &mut Files<S>,
    read_only: bool,
    lock: Option<&StoreLock>,
) -> Result<()> {
    if !files.exists(FileId::Undo)? {
        return Ok(());
    }
    if read_only {
        return match read_log(files)? {
            None => Ok(()),
            Some(_) => Err(Error::NeedsRecovery {
                path: files.path(FileId::Undo),
            }),
        };
    }
    let Some(lock) = lock else {
        return recover_now(files);
    };
    let deadline = Instant::now() + RECOVERY_WAIT;
    loop {
        match lock.exclusive_once(|| recover_now(files)) {
            Err(Error::Locked { .. }) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// How long an open waits for other handles to close so it can roll back
/// an interrupted delete.
pub(crate) const RECOVERY_WAIT: Duration = Duration::from_secs(2);

/// Rolls back and removes the undo log, if it is (still) there.
fn recover_now<S: Storage>(files: &mut Files<S>) -> Result<()> {
    if !files.exists(FileId::Undo)? {
        return Ok(());
    }
    if let Some(log) = read_log(files)? {
        roll_back(files, &log)?;
        files.sync(FileId::Meta)?;
    }
    files.remove(FileId::Undo)?;
    files.sync_dir()
}

/// The undo log, if it is complete (`None` when torn).
fn read_log<S: Storage>(files: &Files<S>) -> Result<Option<Log>> {
    let Some(len) = files.open(FileId::Undo)? else {
        return Ok(None);
    };
    // A log names at most every entry of the table once, so it is at most
    // about twice the table: anything longer is not a log.
    let cap = match files.layout() {
        Layout::V1 => UNDO_MAX_LEN,
        Layout::V2 { .. } => 64 + 2 * files.current_len(FileId::Meta, None)?,
    };
    if len > cap {
        return Ok(None);
    }
    let mut bytes = vec![0u8; len as usize];
    files.read(FileId::Undo, 0, &mut bytes, "read")?;
    Log::decode(files, &bytes)
}
