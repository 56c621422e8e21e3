use std::{fmt, io, path::PathBuf};

use loaderx_format::FormatError;

/// Everything that can go wrong in the store, with what and where.
///
/// Each variant maps to one of the stable codes of the Python `ZrecordError`
/// through [`Error::code`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An allocation the operation needed could not be made. Code -1.
    OutOfMemory {
        /// Bytes the allocation asked for.
        bytes: u64,
    },
    /// A file operation failed. Code -2.
    Io {
        /// The file (or directory) operated on.
        path: PathBuf,
        /// What was being done (`"write table"`, `"sync"`, …).
        op: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// The store was opened read-only and the operation writes. Code -2.
    ReadOnly {
        /// The store's directory.
        path: PathBuf,
        /// The refused operation.
        op: &'static str,
    },
    /// An earlier write on this handle failed halfway and could not be
    /// undone in place, or a commit failed (a failed `fsync` is not retried
    /// into success): the handle publishes nothing more; reopening the
    /// store finds what the last successful commit published (and recovers
    /// an interrupted delete). Code -2.
    Poisoned {
        /// The store's directory.
        path: PathBuf,
        /// The first failure, as it was reported.
        cause: String,
    },
    /// Another handle, in this or another process, holds a lock the
    /// operation needs (one writer; exclusive access for delete, compact
    /// and recovery). Code -2.
    Locked {
        /// The store's directory.
        path: PathBuf,
        /// Who holds the lock, and what to do about it.
        holder: String,
    },
    /// A read-only open found the undo log (`meta.zr.undo`) of a delete
    /// that was interrupted (the process killed, the machine losing power):
    /// the delete must be rolled back before the store can be read, and a
    /// read-only open cannot write. Opening the store writable once rolls it
    /// back (`docs/FORMAT.md`, "Delete"). Code -2.
    NeedsRecovery {
        /// The undo log.
        path: PathBuf,
    },
    /// An index is not below the store's length. Code -3.
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The store's length when it was asked.
        len: u64,
    },
    /// A record to append is empty or over 1 MiB (`position` is its place in the batch). Code -4.
    RecordSize {
        /// The record's place in the batch.
        position: usize,
        /// Its length.
        len: u64,
        /// The largest record allowed.
        limit: u32,
    },
    /// The store cannot take `extra` more records, or ran out of chunk files. Code -5.
    Full {
        /// Records the store holds.
        len: u64,
        /// Records the operation would add.
        extra: u64,
        /// The limit in the way.
        limit: u64,
        /// Which limit (`"record"`, `"chunk"`, …).
        what: &'static str,
    },
    /// A destination or source does not fit the requested geometry. Code -6.
    BufferTooSmall {
        /// Which buffer or slot.
        what: &'static str,
        /// The item of the batch that does not fit.
        position: usize,
        /// Bytes it needs (the end of its range).
        need: u64,
        /// Bytes there are.
        have: u64,
    },
    /// A gather that needs every record to be exactly `expected` bytes
    /// ([`Store::gather_exact`](crate::Store::gather_exact)) met one that is
    /// not: record `index`, item `position` of the batch, is `found` bytes.
    /// Code -6.
    RecordLength {
        /// The store.
        path: PathBuf,
        /// The record.
        index: u64,
        /// Its item in the batch.
        position: usize,
        /// Bytes every record of the gather must have.
        expected: usize,
        /// Bytes it has.
        found: u32,
    },
    /// Two ragged destination ranges overlap. Code -6.
    OverlappingDestinations {
        /// The earlier item of the batch.
        first: usize,
        /// The later item, whose range overlaps the earlier one's.
        second: usize,
    },
    /// Argument lists disagree in length (e.g. `offsets` and `idxs`). Code -6.
    LengthMismatch {
        /// The argument whose length is off.
        what: &'static str,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        found: usize,
    },
    /// A stored record or table entry is damaged. Code -7.
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// The table entry (record index) concerned.
        entry: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The directory is not a store, or is one of an unsupported version. Code -8.
    NotAStore {
        /// The directory or file concerned.
        path: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// Records that do not fit the store's schema (format v2: a dense
    /// store's item size, a ragged record's dimensions, a codec the store
    /// cannot use). Code -4, like other record size errors.
    Schema {
        /// The store.
        path: PathBuf,
        /// What does not fit, with the expected and found values.
        reason: String,
    },
    /// An argument given to create, open or push a store breaks a rule: a
    /// field of the schema (`codec`, `codecs`, `dtype`, `shape`, `ndim`,
    /// `dictionary`), the lane count (`lanes`), a store URL (`url`) or one
    /// of its `storage_options`. Nothing was created or changed.
    /// Code -4, like [`Error::Schema`] (the Python binding raises
    /// `ValueError` for it).
    InvalidArgument {
        /// The store (path or URL) the argument was given for.
        path: PathBuf,
        /// The argument at fault.
        argument: &'static str,
        /// The rule it breaks, with the value given.
        reason: String,
    },
    /// A store already exists where a new one was to be created. Code -2.
    Exists {
        /// The store's directory.
        path: PathBuf,
    },
    /// The store needs a codec this handle does not have: one defined
    /// outside loaderx that was not registered in
    /// [`OpenOptions::codecs`](crate::OpenOptions) (or is registered at an
    /// older version, or under another name), or one whose cargo feature
    /// this build lacks. Nothing was decoded. Code -8.
    CodecUnavailable {
        /// The store.
        path: PathBuf,
        /// The codec's tag.
        tag: u8,
        /// Its name, as the store records it.
        name: String,
        /// Its version, as the store records it.
        version: u32,
        /// Why it is unavailable, and what to do (the feature to enable).
        reason: String,
    },
    /// A collection's parts cannot be committed, or a column asked for is
    /// not in the collection (`collection`). Code -8.
    Collection {
        /// The collection's root.
        path: PathBuf,
        /// What is wrong, naming the part and column.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The stable kinds of store failure, each with the negative number that
/// identifies it across versions (loaderx 0.5.x used the same numbers) and
/// in the Python package (`ZrecordError.code`).
///
/// This is the one definition of the codes and their meanings: the Python
/// binding exports [`ErrorCode::ALL`] and builds its table from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
#[non_exhaustive]
pub enum ErrorCode {
    /// An allocation could not be made.
    OutOfMemory = -1,
    /// A file operation failed, or the store cannot be used for it right now
    /// (read-only, locked by another process, needing recovery).
    Io = -2,
    /// An index is not below the store's length.
    IndexOutOfRange = -3,
    /// A record is empty or over [`MAX_RECORD_LEN`](crate::MAX_RECORD_LEN).
    RecordSize = -4,
    /// The store cannot take more records.
    Full = -5,
    /// A destination or source does not fit the requested geometry.
    BufferTooSmall = -6,
    /// A stored record or table entry is damaged.
    Corrupt = -7,
    /// Not a store, or one written by an unsupported version.
    NotAStore = -8,
}

impl ErrorCode {
    /// Every code, from -1 down.
    pub const ALL: [ErrorCode; 8] = [
        ErrorCode::OutOfMemory,
        ErrorCode::Io,
        ErrorCode::IndexOutOfRange,
        ErrorCode::RecordSize,
        ErrorCode::Full,
        ErrorCode::BufferTooSmall,
        ErrorCode::Corrupt,
        ErrorCode::NotAStore,
    ];

    /// The stable number.
    #[must_use]
    pub fn value(self) -> i32 {
        self as i32
    }

    /// The code with number `value`, if there is one.
    #[must_use]
    pub fn from_value(value: i32) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|code| code.value() == value)
    }

    /// A stable identifier (`"INDEX_OUT_OF_RANGE"`), for bindings that name codes.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::OutOfMemory => "OUT_OF_MEMORY",
            ErrorCode::Io => "IO",
            ErrorCode::IndexOutOfRange => "INDEX_OUT_OF_RANGE",
            ErrorCode::RecordSize => "RECORD_SIZE",
            ErrorCode::Full => "FULL",
            ErrorCode::BufferTooSmall => "BUFFER_TOO_SMALL",
            ErrorCode::Corrupt => "CORRUPT",
            ErrorCode::NotAStore => "NOT_A_STORE",
        }
    }

    /// What the code means, in a few words: the message of an error that
    /// carries no other (every [`Error`] message starts with it or says more).
    #[must_use]
    pub fn meaning(self) -> &'static str {
        match self {
            ErrorCode::OutOfMemory => "out of memory",
            ErrorCode::Io => "file I/O failed",
            ErrorCode::IndexOutOfRange => "index out of range",
            ErrorCode::RecordSize => "record exceeds the 1048576 byte limit",
            ErrorCode::Full => "store is full",
            ErrorCode::BufferTooSmall => "buffer too small",
            ErrorCode::Corrupt => "stored record failed to decode",
            ErrorCode::NotAStore => "not a zrecord store, or written by an unsupported version",
        }
    }
}

/// Codes compare with their numbers, so tests and callers can write
/// `err.code() == -3`.
impl PartialEq<i32> for ErrorCode {
    fn eq(&self, other: &i32) -> bool {
        self.value() == *other
    }
}

impl From<ErrorCode> for i32 {
    fn from(code: ErrorCode) -> i32 {
        code.value()
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.value(), self.meaning())
    }
}

impl Error {
    /// The stable code of this error (the Python `ZrecordError.code`).
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::OutOfMemory { .. } => ErrorCode::OutOfMemory,
            Error::Io { .. }
            | Error::ReadOnly { .. }
            | Error::Locked { .. }
            | Error::Poisoned { .. }
            | Error::NeedsRecovery { .. }
            | Error::Exists { .. } => ErrorCode::Io,
            Error::IndexOutOfRange { .. } => ErrorCode::IndexOutOfRange,
            Error::RecordSize { .. } | Error::Schema { .. } | Error::InvalidArgument { .. } => {
                ErrorCode::RecordSize
            }
            Error::Full { .. } => ErrorCode::Full,
            Error::BufferTooSmall { .. }
            | Error::RecordLength { .. }
            | Error::OverlappingDestinations { .. }
            | Error::LengthMismatch { .. } => ErrorCode::BufferTooSmall,
            Error::Corrupt { .. } => ErrorCode::Corrupt,
            Error::NotAStore { .. } | Error::CodecUnavailable { .. } | Error::Collection { .. } => {
                ErrorCode::NotAStore
            }
        }
    }

    /// [`Error::LengthMismatch`] naming `what` unless `found == expected`:
    /// the check every call taking parallel arrays makes first.
    pub(crate) fn check_len(what: &'static str, expected: usize, found: usize) -> Result<()> {
        if found == expected {
            return Ok(());
        }
        Err(Error::LengthMismatch {
            what,
            expected,
            found,
        })
    }

    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Error {
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn format(path: impl Into<PathBuf>, err: FormatError) -> Error {
        match err {
            FormatError::BadEntry { entry, reason } => Error::Corrupt {
                path: path.into(),
                entry,
                reason: reason.to_string(),
            },
            other => Error::NotAStore {
                path: path.into(),
                reason: other.to_string(),
            },
        }
    }
}

impl fmt::Display for Error {
    // One arm per variant: long, but flat.
    #[allow(clippy::too_many_lines)]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::OutOfMemory { bytes } => write!(f, "out of memory allocating {bytes} bytes"),
            Error::Io { path, op, source } => {
                write!(f, "file I/O failed: {op} {}: {source}", path.display())
            }
            Error::ReadOnly { path, op } => write!(
                f,
                "cannot {op}: the store at {} is open read-only",
                path.display()
            ),
            Error::Poisoned { path, cause } => write!(
                f,
                "the handle on {} is unusable after an earlier failure ({cause}); nothing \
                 written through it since its last commit will be published: reopen the store",
                path.display()
            ),
            Error::Locked { path, holder } => {
                write!(f, "the store at {} is locked: {holder}", path.display())
            }
            Error::NeedsRecovery { path } => write!(
                f,
                "the store at {} needs recovery: {} is the undo log of an interrupted delete, \
                 which must be rolled back before the store can be read, and a read-only open \
                 cannot write; open the store writable once (that rolls the delete back), then \
                 read-only again",
                path.parent().unwrap_or(path).display(),
                path.display()
            ),
            Error::IndexOutOfRange { index, len } => {
                write!(f, "index {index} out of range for a store of {len} records")
            }
            Error::RecordSize {
                position,
                len,
                limit,
            } => {
                if *len == 0 {
                    write!(
                        f,
                        "record {position} of the batch is empty (records must be 1..={limit} bytes)"
                    )
                } else {
                    write!(
                        f,
                        "record {position} of the batch is {len} bytes, over the {limit} byte limit"
                    )
                }
            }
            Error::Full {
                len,
                extra,
                limit,
                what,
            } => write!(
                f,
                "store is full: it holds {len} records and cannot take {extra} more ({what} limit {limit})"
            ),
            Error::BufferTooSmall {
                what,
                position,
                need,
                have,
            } => write!(
                f,
                "buffer too small: {what} for item {position} needs {need} bytes, has {have}"
            ),
            Error::RecordLength {
                path,
                index,
                position,
                expected,
                found,
            } => write!(
                f,
                "buffer too small: record {index} is {found} bytes, but every record of this \
                 gather must be {expected} bytes (item {position} of the batch, in {})",
                path.display()
            ),
            Error::OverlappingDestinations { first, second } => write!(
                f,
                "buffer too small: destination ranges of items {first} and {second} overlap"
            ),
            Error::LengthMismatch {
                what,
                expected,
                found,
            } => write!(
                f,
                "buffer too small: {what} has {found} items, expected {expected}"
            ),
            Error::Corrupt {
                path,
                entry,
                reason,
            } => write!(
                f,
                "stored record failed to decode: {} entry {entry}: {reason}",
                path.display()
            ),
            Error::NotAStore { path, reason } => {
                write!(f, "not a loaderx store: {}: {reason}", path.display())
            }
            Error::CodecUnavailable {
                path,
                tag,
                name,
                version,
                reason,
            } => write!(
                f,
                "the store at {} needs codec {name:?} version {version} (tag {tag}), which is not available: {reason}",
                path.display()
            ),
            Error::Collection { path, reason } => {
                write!(f, "collection {}: {reason}", path.display())
            }
            Error::Schema { path, reason } => {
                write!(
                    f,
                    "does not fit the store's schema: {}: {reason}",
                    path.display()
                )
            }
            Error::InvalidArgument {
                path,
                argument,
                reason,
            } => write!(f, "{}: invalid {argument}: {reason}", path.display()),
            Error::Exists { path } => write!(
                f,
                "a store already exists at {}; open it instead, or choose another path",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_round_trip() {
        for (k, code) in (1..).zip(ErrorCode::ALL) {
            assert_eq!(code.value(), -k, "{code:?}");
            assert_eq!(ErrorCode::from_value(code.value()), Some(code));
            assert!(!code.meaning().is_empty() && !code.name().is_empty());
        }
        assert_eq!(ErrorCode::from_value(0), None);
        assert_eq!(ErrorCode::from_value(-9), None);
    }

    #[test]
    fn the_record_size_meaning_states_the_limit() {
        let limit = crate::MAX_RECORD_LEN.to_string();
        assert!(ErrorCode::RecordSize.meaning().contains(&limit));
    }
}
