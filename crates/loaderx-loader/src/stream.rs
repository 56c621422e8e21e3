//! [`Stream`]: one named set of records the loader gathers at every batch's
//! indices, and how its records are laid out in a batch.

use std::sync::Arc;

use crate::Source;

/// How a stream's records are laid out in a batch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Every record is exactly `item_len` bytes; record `i` of a batch is at
    /// `i · item_len` and the buffer is `n · item_len` bytes. A record of any
    /// other size fails the batch with [`Error::Gather`](crate::Error::Gather)
    /// carrying the store's
    /// [`RecordLength`](loaderx_store::Error::RecordLength) error.
    Fixed {
        /// Size of every record, in bytes.
        item_len: usize,
    },
    /// Records of any size, packed back to back; the batch carries their
    /// offsets.
    Ragged,
}

/// A named source of records and the layout its batches use.
///
/// Every stream of a loader is gathered at the same indices, so the streams
/// of one loader must hold the same records in the same order (e.g. images
/// and their labels).
#[derive(Debug, Clone)]
pub struct Stream {
    pub(crate) name: Arc<str>,
    pub(crate) source: Arc<dyn Source>,
    pub(crate) kind: StreamKind,
}

impl Stream {
    /// A stream of `kind` named `name`, reading `source`.
    pub fn new(name: impl Into<Arc<str>>, source: Arc<dyn Source>, kind: StreamKind) -> Stream {
        Stream {
            name: name.into(),
            source,
            kind,
        }
    }

    /// A stream of records of exactly `item_len` bytes each.
    pub fn fixed(name: impl Into<Arc<str>>, source: Arc<dyn Source>, item_len: usize) -> Stream {
        Stream::new(name, source, StreamKind::Fixed { item_len })
    }

    /// A stream of records of any size.
    pub fn ragged(name: impl Into<Arc<str>>, source: Arc<dyn Source>) -> Stream {
        Stream::new(name, source, StreamKind::Ragged)
    }

    /// The stream's name, unique within a loader.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How its records are laid out in a batch.
    pub fn kind(&self) -> StreamKind {
        self.kind
    }

    /// What it reads from.
    pub fn source(&self) -> &Arc<dyn Source> {
        &self.source
    }
}
