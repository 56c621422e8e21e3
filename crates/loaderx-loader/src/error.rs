//! [`Error`]: everything that can fail in building a loader or producing a
//! batch, with the stream and step it concerns.

use std::{fmt, io, sync::Arc};

/// Why a loader could not be built, or why a batch failed.
///
/// Batch errors ([`Error::Gather`], [`Error::OutOfMemory`], [`Error::SettingTooLarge`],
/// [`Error::WorkerPanicked`]) are delivered in
/// sampler order, in place of the batch they concern; the loader stays
/// usable after them.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A stream's source failed to gather the records of a batch.
    Gather {
        /// The stream.
        stream: Arc<str>,
        /// The global step of the batch.
        step: u64,
        /// What the store reported (its [`code`](loaderx_store::Error::code)
        /// is the Python `ZrecordError` code).
        source: loaderx_store::Error,
    },
    /// The allocator could not provide a batch buffer.
    OutOfMemory {
        /// The stream the buffer was for.
        stream: Arc<str>,
        /// Bytes asked for (saturated at `u64::MAX` when the size overflows).
        bytes: u64,
    },
    /// A setting asks for more memory than can be had: `prefetch` slots or
    /// worker handles when the loader is built, the indices of a batch when
    /// it is built or when a batch is made (then in place of that batch).
    SettingTooLarge {
        /// The setting: `"batch_size"` (this rank's share of a batch),
        /// `"prefetch"` or `"num_workers"`.
        setting: &'static str,
        /// Its value.
        value: u64,
        /// What the memory is for.
        what: &'static str,
        /// Bytes asked for (saturated at `u64::MAX` when the size overflows).
        bytes: u64,
    },
    /// A worker panicked while producing a batch (a bug in a source or an
    /// allocator); the step is reported as failed and the worker goes on.
    WorkerPanicked {
        /// The global step of the batch.
        step: u64,
        /// The panic message, when it was a string.
        message: String,
    },
    /// The sampler refused the configuration or a state to restore.
    Sampler(loaderx_sampler::Error),
    /// The loader was configured with no stream.
    NoStreams,
    /// Two streams have the same name.
    DuplicateStream {
        /// The name.
        name: Arc<str>,
    },
    /// A fixed-size stream was given `item_len` 0.
    ZeroItemLen {
        /// The stream.
        stream: Arc<str>,
    },
    /// Streams disagree in length: they must hold the same records.
    StreamLength {
        /// The stream whose length differs from the first stream's.
        stream: Arc<str>,
        /// Its length.
        len: u64,
        /// The first stream's length.
        expected: u64,
    },
    /// The sampler draws from more indices than the streams hold.
    SamplerLength {
        /// The sampler's `len`.
        sampler_len: u64,
        /// The streams' length.
        stream_len: u64,
    },
    /// `num_workers` or `prefetch` is zero.
    ZeroSetting {
        /// `"num_workers"` or `"prefetch"`.
        setting: &'static str,
    },
    /// A worker thread could not be started.
    Spawn(io::Error),
    /// The loader is closed.
    Closed,
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The store error behind a failed gather, if that is what this is.
    pub fn store_error(&self) -> Option<&loaderx_store::Error> {
        match self {
            Error::Gather { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The global step of the batch this error replaces, for batch errors.
    pub fn step(&self) -> Option<u64> {
        match self {
            Error::Gather { step, .. } | Error::WorkerPanicked { step, .. } => Some(*step),
            _ => None,
        }
    }
}

impl From<loaderx_sampler::Error> for Error {
    fn from(e: loaderx_sampler::Error) -> Error {
        Error::Sampler(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Gather {
                stream,
                step,
                source,
            } => write!(f, "stream {stream:?}, batch {step}: {source}"),
            Error::OutOfMemory { stream, bytes } => write!(
                f,
                "out of memory allocating a {bytes} byte buffer for stream {stream:?}"
            ),
            Error::SettingTooLarge {
                setting,
                value,
                what,
                bytes,
            } => write!(
                f,
                "out of memory: {setting} {value} needs {bytes} bytes for {what}, which cannot \
                 be allocated"
            ),
            Error::WorkerPanicked { step, message } => {
                write!(
                    f,
                    "a loader worker panicked producing batch {step}: {message}"
                )
            }
            Error::Sampler(e) => write!(f, "sampler: {e}"),
            Error::NoStreams => write!(f, "a loader needs at least one stream"),
            Error::DuplicateStream { name } => {
                write!(
                    f,
                    "two streams are named {name:?}; stream names must be unique"
                )
            }
            Error::ZeroItemLen { stream } => write!(
                f,
                "stream {stream:?} has item_len 0; a fixed-size record is 1 byte or more"
            ),
            Error::StreamLength {
                stream,
                len,
                expected,
            } => write!(
                f,
                "stream {stream:?} holds {len} records but the first stream holds {expected}; \
                 streams gathered together must have the same length"
            ),
            Error::SamplerLength {
                sampler_len,
                stream_len,
            } => write!(
                f,
                "the sampler draws from {sampler_len} indices but the streams hold only \
                 {stream_len} records"
            ),
            Error::ZeroSetting { setting } => write!(f, "{setting} must be at least 1"),
            Error::Spawn(e) => write!(f, "could not start a loader worker thread: {e}"),
            Error::Closed => write!(f, "the loader is closed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Gather { source, .. } => Some(source),
            Error::Sampler(e) => Some(e),
            Error::Spawn(e) => Some(e),
            _ => None,
        }
    }
}
