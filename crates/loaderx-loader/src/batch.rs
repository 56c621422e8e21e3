//! [`Batch`]: the records of every stream at one step's indices, and
//! [`Column`]: one stream's part of it.

use std::{fmt, sync::Arc};

/// Where the records of a [`Column`] sit in its buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Record `i` is `data[i · item_len .. (i + 1) · item_len]`.
    Fixed {
        /// Size of every record.
        item_len: usize,
    },
    /// Record `i` is `data[offsets[i] .. offsets[i + 1]]`; `offsets` has one
    /// entry more than the batch has records, starts at 0 and ends at the
    /// buffer's length.
    Ragged {
        /// Start of each record, then the end of the last one.
        offsets: Vec<u64>,
    },
}

/// One stream's records for a batch, in the batch's index order.
pub struct Column<B = Vec<u8>> {
    pub(crate) name: Arc<str>,
    pub(crate) stream: usize,
    pub(crate) data: B,
    pub(crate) layout: Layout,
}

impl<B: AsRef<[u8]>> Column<B> {
    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream's position in the loader's stream list.
    pub fn stream(&self) -> usize {
        self.stream
    }

    /// All the records, back to back.
    pub fn data(&self) -> &[u8] {
        self.data.as_ref()
    }

    /// Where each record sits in [`Column::data`].
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The record size of a fixed-size stream.
    pub fn item_len(&self) -> Option<usize> {
        match self.layout {
            Layout::Fixed { item_len } => Some(item_len),
            Layout::Ragged { .. } => None,
        }
    }

    /// The `n + 1` record offsets of a ragged stream.
    pub fn offsets(&self) -> Option<&[u64]> {
        match &self.layout {
            Layout::Fixed { .. } => None,
            Layout::Ragged { offsets } => Some(offsets),
        }
    }

    /// Record `i` of the batch.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn item(&self, i: usize) -> &[u8] {
        let data = self.data();
        match &self.layout {
            Layout::Fixed { item_len } => &data[i * item_len..(i + 1) * item_len],
            Layout::Ragged { offsets } => &data[as_index(offsets[i])..as_index(offsets[i + 1])],
        }
    }

    /// The buffer and its layout, e.g. to hand the buffer to another owner.
    pub fn into_parts(self) -> (B, Layout) {
        (self.data, self.layout)
    }
}

impl<B: AsRef<[u8]>> fmt::Debug for Column<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Column");
        s.field("name", &self.name)
            .field("stream", &self.stream)
            .field("bytes", &self.data.as_ref().len());
        match &self.layout {
            Layout::Fixed { item_len } => s.field("item_len", item_len),
            Layout::Ragged { offsets } => s.field("ragged_items", &(offsets.len() - 1)),
        };
        s.finish()
    }
}

/// The records of every stream at the indices of one sampler step.
///
/// Give it back with [`Loader::recycle`](crate::Loader::recycle) when done,
/// so its buffers are reused.
pub struct Batch<B = Vec<u8>> {
    pub(crate) step: u64,
    pub(crate) indices: Vec<u64>,
    pub(crate) columns: Vec<Column<B>>,
}

impl<B: AsRef<[u8]>> Batch<B> {
    /// The global sampler step this batch is.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Number of records per stream.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch holds no records (never, for batches a loader makes).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The indices every stream was gathered at, in batch order.
    pub fn indices(&self) -> &[u64] {
        &self.indices
    }

    /// One column per stream, in the loader's stream order.
    pub fn columns(&self) -> &[Column<B>] {
        &self.columns
    }

    /// The column of the stream named `name`.
    pub fn column(&self, name: &str) -> Option<&Column<B>> {
        self.columns.iter().find(|c| &*c.name == name)
    }

    /// The columns, to take their buffers.
    pub fn into_columns(self) -> Vec<Column<B>> {
        self.columns
    }

    /// The indices and the columns, to take both without a copy.
    pub fn into_parts(self) -> (Vec<u64>, Vec<Column<B>>) {
        (self.indices, self.columns)
    }
}

impl<B: AsRef<[u8]>> fmt::Debug for Batch<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("step", &self.step)
            .field("len", &self.indices.len())
            .field("columns", &self.columns)
            .finish()
    }
}

/// An offset into a batch buffer that exists in memory, so it fits `usize`.
fn as_index(offset: u64) -> usize {
    usize::try_from(offset).expect("an offset inside an allocated buffer fits usize")
}
