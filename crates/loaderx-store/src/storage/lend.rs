//! Lending several ranges at once from a storage that lends one range per
//! call ([`Storage::with_bytes`] takes a closure): the default of
//! [`Storage::with_many_bytes`].
//!
//! Unsafe here (allowed by name in `storage/mod.rs`), and sound for one
//! reason: each range is borrowed by a `with_bytes` call whose frame
//! encloses the innermost one, where the slices are rebuilt from the
//! addresses those calls lent; the slices are handed to `f` there and do
//! not outlive it, so every one is used only while its lender still runs.

use std::io;

use super::{FileId, Storage};

/// Borrows `ranges` one inside the other and calls `f` with all of them
/// from the innermost borrow.
pub(super) fn nested<S: Storage + ?Sized, R>(
    storage: &S,
    ranges: &[(FileId, u64, usize)],
    f: impl FnOnce(&[&[u8]]) -> R,
) -> Result<R, (FileId, io::Error)> {
    /// A lent range: its address and length.
    type Lent = (*const u8, usize);
    /// Borrows `ranges` one inside the other, their addresses into
    /// `lent`, and calls `f` from the innermost borrow.
    fn nest<S: Storage + ?Sized>(
        storage: &S,
        ranges: &[(FileId, u64, usize)],
        lent: &mut Vec<Lent>,
        f: &mut dyn FnMut(&[Lent]),
    ) -> Result<(), (FileId, io::Error)> {
        let Some((&(file, offset, len), rest)) = ranges.split_first() else {
            f(lent);
            return Ok(());
        };
        storage
            .with_bytes(file, offset, len, |bytes| {
                lent.push((bytes.as_ptr(), bytes.len()));
                nest(storage, rest, lent, f)
            })
            .map_err(|e| (file, e))?
    }
    let mut f = Some(f);
    let mut out = None;
    let mut lent = Vec::with_capacity(ranges.len());
    nest(storage, ranges, &mut lent, &mut |lent| {
        // SAFETY: every address was lent by a `with_bytes` call that is
        // still running (an enclosing frame of `nest`), for its length.
        let slices: Vec<&[u8]> = lent
            .iter()
            .map(|&(at, len)| unsafe { std::slice::from_raw_parts(at, len) })
            .collect();
        if let Some(f) = f.take() {
            out = Some(f(&slices));
        }
    })?;
    Ok(out.expect("the innermost borrow calls f once"))
}
