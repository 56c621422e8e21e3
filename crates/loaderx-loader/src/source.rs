//! [`Source`]: what a stream gathers from.
//!
//! The loader never names a concrete store type: it sees a stream's records
//! through this trait, so a binding can put its own handle in front of a
//! [`Store`] (for instance one behind an `RwLock`, so that `delete` and
//! `compact` get exclusive access) by forwarding six methods.

use std::{fmt, sync::Arc};

use loaderx_store::{Codec, Store, storage::Storage};

/// Records `0..len()` that can be gathered by index, from many threads at once.
///
/// The contract is [`Store`]'s: every method validates all indices and
/// destination ranges before writing anything, and errors are store errors
/// (the loader reports them with the stream and step they belong to).
/// Implementations must not call back into the loader that reads them.
///
/// A wrapper forwards to the store it guards; here one that a `delete` can
/// lock out for the time it runs:
///
/// ```
/// use std::sync::RwLock;
///
/// use loaderx_loader::Source;
/// use loaderx_store::{Result, Store};
///
/// #[derive(Debug)]
/// struct Guarded(RwLock<Store>);
///
/// impl Guarded {
///     fn read(&self) -> std::sync::RwLockReadGuard<'_, Store> {
///         self.0.read().unwrap_or_else(|p| p.into_inner())
///     }
/// }
///
/// impl Source for Guarded {
///     fn len(&self) -> u64 {
///         self.read().len()
///     }
///     fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
///         self.read().gather(idxs, dst, stride)
///     }
///     fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], item_len: usize) -> Result<()> {
///         self.read().gather_exact(idxs, dst, item_len)
///     }
///     fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
///         self.read().gather_ragged(idxs, dst, offsets)
///     }
///     fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
///         self.read().lengths(idxs, out)
///     }
///     fn with_view(&self, f: &mut dyn FnMut(&dyn Source) -> Result<()>) -> Result<()> {
///         f(&*self.read())
///     }
/// }
/// ```
pub trait Source: Send + Sync + fmt::Debug {
    /// Number of records; valid indices are `0..len()`.
    fn len(&self) -> u64;

    /// Whether the source holds no records.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes record `idxs[i]` to `dst[i · stride ..]` for every `i`.
    ///
    /// # Errors
    ///
    /// The store's error for an index out of range, a record of another
    /// size than `stride`, a damaged record or an I/O failure.
    fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> loaderx_store::Result<()>;

    /// Writes record `idxs[i]` to `dst[i · item_len ..]` for every `i`,
    /// refusing the whole call when any record is not exactly `item_len`
    /// bytes ([`Store::gather_exact`]).
    ///
    /// # Errors
    ///
    /// As [`gather`](Source::gather), plus the store's record-length error.
    fn gather_exact(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        item_len: usize,
    ) -> loaderx_store::Result<()>;

    /// Writes record `idxs[i]` to `dst[offsets[i] ..]` for every `i`.
    ///
    /// # Errors
    ///
    /// As [`Source::gather`], with the record sizes given by `offsets`.
    fn gather_ragged(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        offsets: &[u64],
    ) -> loaderx_store::Result<()>;

    /// Writes the size in bytes of record `idxs[i]` to `out[i]` for every `i`.
    ///
    /// # Errors
    ///
    /// The store's error for an index out of range or a damaged table entry.
    fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> loaderx_store::Result<()>;

    /// A hint that records `idxs` will be gathered soon (a later batch):
    /// a source whose reads are requests to a server starts them now
    /// ([`Store::prefetch`]). Never fails and changes nothing a gather
    /// returns; the default does nothing.
    fn prefetch(&self, idxs: &[u64]) {
        let _ = idxs;
    }

    /// Drops what [`prefetch`](Source::prefetch) started and nothing read
    /// (the loader was restored to another step, or closed).
    fn forget_prefetched(&self) {}

    /// Calls `f` with a view of the records that no `delete` or `close`
    /// can change while `f` runs, so sizes read with
    /// [`lengths`](Source::lengths) still hold when `f` gathers. A source
    /// nothing changes behind the loader's back is its own view.
    ///
    /// # Errors
    ///
    /// `f`'s error, or the source's own (a closed store).
    fn with_view(
        &self,
        f: &mut dyn FnMut(&dyn Source) -> loaderx_store::Result<()>,
    ) -> loaderx_store::Result<()>;
}

/// The five reading methods of a [`Source`] impl, each forwarding to the
/// method of the same name on `$target`, an expression of `$this` (`self`).
/// `with_view` is left to each impl: it is where they differ.
macro_rules! forward_reads {
    ($this:ident => $target:expr) => {
        fn len(&$this) -> u64 {
            $target.len()
        }

        fn gather(
            &$this,
            idxs: &[u64],
            dst: &mut [u8],
            stride: usize,
        ) -> loaderx_store::Result<()> {
            $target.gather(idxs, dst, stride)
        }

        fn gather_exact(
            &$this,
            idxs: &[u64],
            dst: &mut [u8],
            item_len: usize,
        ) -> loaderx_store::Result<()> {
            $target.gather_exact(idxs, dst, item_len)
        }

        fn gather_ragged(
            &$this,
            idxs: &[u64],
            dst: &mut [u8],
            offsets: &[u64],
        ) -> loaderx_store::Result<()> {
            $target.gather_ragged(idxs, dst, offsets)
        }

        fn lengths(&$this, idxs: &[u64], out: &mut [u32]) -> loaderx_store::Result<()> {
            $target.lengths(idxs, out)
        }
    };
}

/// A store is its own view: nothing changes it behind a shared reference
/// (`delete` and `compact` take `&mut`).
impl<C: Codec, S: Storage> Source for Store<C, S> {
    // The store's inherent methods, which take precedence over these.
    forward_reads!(self => self);

    fn prefetch(&self, idxs: &[u64]) {
        // A hint: a failure here is the gather's to report.
        let _ = Store::prefetch(self, idxs);
    }

    fn forget_prefetched(&self) {
        Store::forget_prefetched(self);
    }

    fn with_view(
        &self,
        f: &mut dyn FnMut(&dyn Source) -> loaderx_store::Result<()>,
    ) -> loaderx_store::Result<()> {
        f(self)
    }
}

/// A shared handle reads what it points at, so `Arc<Store>` and
/// `Arc<Wrapper>` are sources too.
impl<T: Source + ?Sized> Source for Arc<T> {
    forward_reads!(self => (**self));

    fn prefetch(&self, idxs: &[u64]) {
        (**self).prefetch(idxs);
    }

    fn forget_prefetched(&self) {
        (**self).forget_prefetched();
    }

    fn with_view(
        &self,
        f: &mut dyn FnMut(&dyn Source) -> loaderx_store::Result<()>,
    ) -> loaderx_store::Result<()> {
        (**self).with_view(f)
    }
}
