//! The engine's side of the undo log that makes `delete` all-or-nothing:
//! writing it, removing it, rolling the table back from it, and recovering
//! at open. Its bytes are [`loaderx_format::UndoLog`]'s; the protocol is
//! `docs/FORMAT.md`, "Delete".

use loaderx_format::{UNDO_MAX_LEN, UndoLog};

use crate::{
    Codec, Error, Result, Store,
    files::Files,
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
            .and_then(|()| storage.sync(FileId::Undo));
        if let Err(e) = written {
            // Nothing in the table changed; a torn log is ignored on open.
            let _ = self.files.remove(FileId::Undo);
            return Err(Error::io(path, "write undo log", e));
        }
        Ok(())
    }

    /// Removes the undo log: the delete it guarded is done (or undone).
    pub(crate) fn remove_undo(&mut self) -> Result<()> {
        self.files.remove(FileId::Undo)
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
pub(crate) fn recover<S: Storage>(files: &mut Files<S>, read_only: bool) -> Result<()> {
    let Some(len) = files.open(FileId::Undo)? else {
        return Ok(());
    };
    let log = if len > UNDO_MAX_LEN {
        None
    } else {
        files.with_bytes(FileId::Undo, 0, len as usize, "read", UndoLog::decode)?
    };
    match (log, read_only) {
        (None, true) => Ok(()),
        (Some(_), true) => Err(Error::NotAStore {
            path: files.dir().to_owned(),
            reason:
                "an interrupted delete must be rolled back first: open the store for writing once"
                    .into(),
        }),
        (log, false) => {
            if let Some(log) = log {
                roll_back(files, &log)?;
                files.sync(FileId::Meta)?;
            }
            files.remove(FileId::Undo)
        }
    }
}
