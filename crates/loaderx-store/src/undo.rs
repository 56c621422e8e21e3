//! The engine's side of the undo log that makes `delete` all-or-nothing:
//! writing it, removing it, rolling the table back from it, and recovering
//! at open. Its bytes are [`loaderx_format::UndoLog`]'s; the protocol is
//! `docs/FORMAT.md`, "Delete".

use loaderx_format::{UNDO_MAX_LEN, UndoLog};

use std::{
    thread,
    time::{Duration, Instant},
};

use crate::{
    Codec, Error, Result, Store,
    files::Files,
    lock::StoreLock,
    storage::{FileId, Storage},
};

impl<C: Codec, S: Storage> Store<C, S> {
    /// Writes `log` as the undo log and makes it durable, before anything in
    /// the table changes.
    pub(crate) fn write_undo(&mut self, log: &UndoLog) -> Result<()> {
        let path = self.file_path(FileId::Undo);
        let storage = self.files.storage_mut();
        let written = storage
            .open_file(FileId::Undo, true, 0)
            .and_then(|_| storage.truncate(FileId::Undo, 0))
            .and_then(|()| storage.write_at(FileId::Undo, 0, &log.encode()))
            .and_then(|()| storage.sync(FileId::Undo))
            // The log must be found after power loss before the table changes.
            .and_then(|()| storage.sync_dir());
        if let Err(e) = written {
            // Nothing in the table changed; a torn log is ignored on open.
            let _ = self.files.remove(FileId::Undo);
            return Err(Error::io(path, "write undo log", e));
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
pub(crate) fn roll_back<S: Storage>(files: &Files<S>, log: &UndoLog) -> Result<()> {
    for (slot, loc) in &log.entries {
        files.write_entry(*slot, loc, "roll back table")?;
    }
    files.write_header(&log.header, "roll back header")
}

/// At open: rolls back a delete that a complete undo log says did not
/// finish (and makes that durable), and removes the log. A torn log — the
/// crash came while writing it, before the table changed — is just removed.
/// A read-only open cannot roll back, so it refuses a complete log.
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
            Some(_) => Err(Error::NotAStore {
                path: files.dir().to_owned(),
                reason: "an interrupted delete must be rolled back first: open the store for \
                         writing once"
                    .into(),
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
fn read_log<S: Storage>(files: &Files<S>) -> Result<Option<UndoLog>> {
    let Some(len) = files.open(FileId::Undo)? else {
        return Ok(None);
    };
    if len > UNDO_MAX_LEN {
        return Ok(None);
    }
    files.with_bytes(FileId::Undo, 0, len as usize, "read", UndoLog::decode)
}
