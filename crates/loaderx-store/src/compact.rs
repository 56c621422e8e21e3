//! Compaction: slide every live record down to the next free position, in
//! physical order, so the space left by deletes is reclaimed in place.
//!
//! Each move commits on its own (bytes land, then the entry is rewritten), so
//! an interrupted compaction leaves a valid store holding the same records and
//! re-running it finishes the job. A record whose new place overlaps its old
//! one is first copied past the frontier ("bounced") and its entry pointed
//! there, so that at no instant does an entry point at half-overwritten bytes.
//! `docs/FORMAT.md` walks through what a crash at each step leaves.

use std::sync::atomic::Ordering;

use loaderx_format::{Header, RecordLoc, entry_offset};

use crate::{
    Codec, Error, Result, Store,
    storage::{FileId, Storage},
    store::pack_tail,
};

impl<C: Codec, S: Storage> Store<C, S> {
    /// Reclaims the space left behind by `delete`. Needs exclusive access: in
    /// this process `&mut self`, across processes an exclusive advisory lock
    /// (fails with [`Error::Locked`] while another handle has the store open).
    pub fn compact(&mut self) -> Result<()> {
        if self.is_read_only() {
            return Err(Error::ReadOnly {
                path: self.path.clone(),
                op: "compact",
            });
        }
        if let Some(lock) = &self._lock {
            lock.exclusive(&self.path)?;
        }
        let result = self.compact_locked();
        if let Some(lock) = &self._lock {
            lock.shared();
        }
        result
    }

    fn compact_locked(&mut self) -> Result<()> {
        let mut header = self.header();
        let mut order: Vec<(u32, RecordLoc)> = Vec::with_capacity(header.length as usize);
        for i in 0..header.length {
            order.push((i, self.entry(u64::from(i), &header)?));
        }
        order.sort_unstable_by_key(|(_, loc)| loc.position());

        let position = |chunk: u32, offset: u64| u64::from(chunk) * self.capacity + offset;
        let mut staging = Vec::new();
        let (mut chunk, mut offset) = (0u32, 0u64);
        for (index, loc) in order {
            let phys = u64::from(loc.phys_length);
            if offset + phys >= self.capacity {
                chunk += 1;
                offset = 0;
            }
            let (src_chunk, src_offset) = (u32::from(loc.chunk_id), u64::from(loc.offset));
            if position(chunk, offset) >= position(src_chunk, src_offset) {
                // Already in place, or (for a record laid out against the
                // rules of our writer) moving would not go down: keep it.
                chunk = src_chunk;
                offset = src_offset + phys;
                continue;
            }
            staging.resize(phys as usize, 0);
            self.storage
                .read_at(FileId::Chunk(src_chunk), src_offset, &mut staging)
                .map_err(|e| Error::io(self.file_path(FileId::Chunk(src_chunk)), "read", e))?;
            let overlaps = chunk == src_chunk && offset + phys > src_offset;
            if overlaps {
                let tail_end = u64::from(header.tail_offset) + phys;
                if tail_end >= self.capacity {
                    // No room to bounce through: leave this record where it is.
                    chunk = src_chunk;
                    offset = src_offset + phys;
                    continue;
                }
                let bounce = RecordLoc {
                    chunk_id: header.tail_chunk,
                    offset: header.tail_offset,
                    ..loc
                };
                self.put_record(&bounce, &staging)?;
                header.tail_offset = tail_end as u32;
                self.write_meta(0, &header.encode(), "write header")?;
                self.tail.store(
                    pack_tail(header.tail_chunk, header.tail_offset),
                    Ordering::Release,
                );
                self.write_meta(entry_offset(index), &bounce.encode(), "write table")?;
            }
            let moved = RecordLoc {
                chunk_id: chunk as u16,
                offset: offset as u32,
                ..loc
            };
            self.put_record(&moved, &staging)?;
            self.write_meta(entry_offset(index), &moved.encode(), "write table")?;
            offset += phys;
        }

        // Everything is in place: make it durable, then move the frontier
        // down, then drop the chunk files past it.
        self.sync_all()?;
        let old_tail = header.tail_chunk;
        let new = Header {
            tail_chunk: chunk as u16,
            tail_offset: offset as u32,
            length: header.length,
        };
        self.write_meta(0, &new.encode(), "write header")?;
        self.storage
            .sync(FileId::Meta)
            .map_err(|e| Error::io(self.meta_path(), "sync", e))?;
        self.tail.store(
            pack_tail(new.tail_chunk, new.tail_offset),
            Ordering::Release,
        );
        for id in chunk + 1..=u32::from(old_tail) {
            let file = FileId::Chunk(id);
            self.storage
                .remove(file)
                .map_err(|e| Error::io(self.file_path(file), "remove", e))?;
            self.chunk_lens[id as usize].store(0, Ordering::Release);
        }
        let tail_file = FileId::Chunk(chunk);
        if self.chunk_lens[chunk as usize].load(Ordering::Acquire) > offset {
            self.storage
                .truncate(tail_file, offset)
                .map_err(|e| Error::io(self.file_path(tail_file), "truncate", e))?;
            self.chunk_lens[chunk as usize].store(offset, Ordering::Release);
        }
        Ok(())
    }

    /// Writes a record's stored bytes at `loc` and records the chunk's growth.
    fn put_record(&self, loc: &RecordLoc, bytes: &[u8]) -> Result<()> {
        let file = FileId::Chunk(u32::from(loc.chunk_id));
        self.storage
            .write_at(file, u64::from(loc.offset), bytes)
            .map_err(|e| Error::io(self.file_path(file), "write", e))?;
        self.chunk_lens[usize::from(loc.chunk_id)].fetch_max(loc.end(), Ordering::AcqRel);
        Ok(())
    }
}
