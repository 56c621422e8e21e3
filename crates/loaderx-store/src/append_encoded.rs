//! Appending records that are already encoded: their bytes are stored as
//! they are, under the codec tag and decoded size the caller gives (an
//! image file kept as its JPEG bytes, say). Same placement, durability and
//! all-or-nothing publication as every other append (`append.rs`).

use std::sync::atomic::{AtomicU32, Ordering};

use loaderx_format::CodecTag;

use crate::{
    Codec, Error, Result, Store,
    append::{Encoded, Layout, split_mut},
    parallel, runtable,
    storage::Storage,
};

/// One record to store as it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prepared<'a> {
    /// How its bytes decode.
    pub(crate) codec: CodecTag,
    /// The bytes to store.
    pub(crate) bytes: &'a [u8],
    /// What they decode to, in bytes.
    pub(crate) logic: u32,
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Appends `records` verbatim, with `dims` (`ndim` per record, ragged
    /// stores) in their table entries. Returns the index of the first.
    pub(crate) fn append_prepared(&self, records: &[Prepared<'_>], dims: &[u32]) -> Result<u64> {
        self.check_writable("append")?;
        let format = self.layout();
        let limit = format.max_record_len();
        for (position, r) in records.iter().enumerate() {
            for len in [r.bytes.len() as u64, u64::from(r.logic)] {
                if len == 0 || len > u64::from(limit) {
                    return Err(Error::RecordSize {
                        position,
                        len,
                        limit,
                    });
                }
            }
        }
        let ndim = self.files.entry_dims();
        Error::check_len("dims (records × rank)", records.len() * ndim, dims.len())?;
        let n = records.len();
        if n == 0 {
            return Ok(self.len());
        }
        let total: u64 = records.iter().map(|r| r.bytes.len() as u64).sum();
        let mut encoded: Vec<Encoded> = records
            .iter()
            .map(|r| Encoded {
                phys: r.bytes.len() as u32,
                codec: r.codec,
                crc: 0,
            })
            .collect();
        // A run table's records get their checksums as they are written,
        // only those it keeps (`append_window`).
        let runs = format.runs();
        if format.checksums() && !runs {
            parallel::for_each_part(split_mut(&mut encoded), total, |(first, part)| {
                for (k, e) in part.iter_mut().enumerate() {
                    e.crc = loaderx_format::v2::crc32c(records[first + k].bytes);
                }
            });
        }
        let offsets = vec![0u64; n];
        let logic: Vec<u32> = records.iter().map(|r| r.logic).collect();
        let layout = Layout::Ragged {
            offsets: &offsets,
            lens: &logic,
        };
        let (_writer, head) = self.begin_append(n, format.max_records())?;
        let (mut locs, after, new_chunks) = self.place(&head, &encoded, &layout, n)?;
        self.create_chunks(new_chunks)?;
        if runs {
            let spans = runtable::plan_spans(&locs);
            let crcs: Vec<AtomicU32> = if format.checksums() {
                (0..n).map(|_| AtomicU32::new(0)).collect()
            } else {
                Vec::new()
            };
            self.write_payloads(
                &locs,
                &|i| records[i].bytes,
                None,
                format.checksums().then_some((&crcs[..], &spans[..])),
            )?;
            for (loc, crc) in locs.iter_mut().zip(&crcs) {
                loc.crc = crc.load(Ordering::Relaxed);
            }
            self.files.write_runs(head.length, &locs, &spans, &|b, _| {
                crcs.get(b).map_or(0, |c| c.load(Ordering::Relaxed))
            })?;
            self.frontier.publish(&after);
            return Ok(head.length);
        }
        self.write_payloads(&locs, &|i| records[i].bytes, None, None)?;
        let entry_len = self.files.entry_len();
        let mut table = Vec::new();
        table
            .try_reserve_exact(n * entry_len)
            .map_err(|_| Error::OutOfMemory {
                bytes: (n * entry_len) as u64,
            })?;
        for (k, loc) in locs.iter().enumerate() {
            let d = &dims[k * ndim..(k + 1) * ndim];
            self.files
                .encode_entry(head.length + k as u64, loc, d, &mut table);
        }
        self.files.write_entries(head.length, &table)?;
        self.frontier.publish(&after);
        Ok(head.length)
    }
}
