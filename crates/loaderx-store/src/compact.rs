//! Compaction: pack the live records densely from the start of chunk 0, in
//! physical order, so the space left by deletes is reclaimed.
//!
//! Records are never written over bytes that a table entry — in memory or
//! durable on disk — still points at. The records that must move (those after
//! the first gap) are first copied past the frontier into fresh chunks
//! ("staging"), made durable, and their entries pointed there; only then are
//! they copied down to their final places, made durable, and their entries
//! pointed there; the frontier moves down last and the staging chunks are
//! deleted. So a process killed, or a machine losing power, at any instant
//! leaves a store holding exactly the same records, and re-running finishes
//! the job. The price is copying the moved records twice. `docs/FORMAT.md`
//! walks through what a crash at each step leaves.

use std::sync::atomic::Ordering;

use loaderx_format::{Header, MAX_CHUNKS, RecordLoc, entry_offset};

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
        self.check_usable()?;
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
        let header = self.header();
        // Files cut short behind our back must give errors, not a SIGBUS.
        self.check_meta_len(&header)?;
        // Exclusive (`&mut self`): no append can be growing a file, so the
        // lengths measured now may replace the known ones.
        for id in 0..=header.tail_chunk {
            let len = self.current_chunk_len(id)?;
            self.chunk_lens[usize::from(id)].store(len, Ordering::Release);
        }
        let mut order: Vec<(u32, RecordLoc)> = Vec::with_capacity(header.length as usize);
        for i in 0..header.length {
            order.push((i, self.entry(u64::from(i), &header)?));
        }
        order.sort_unstable_by_key(|(_, loc)| loc.position());

        // Final places: packed from (0, 0) in physical order.
        let mut cursor = Cursor::new(0, self.capacity);
        let finals: Vec<RecordLoc> = order.iter().map(|(_, loc)| cursor.place(loc)).collect();
        let (final_chunk, final_offset) = cursor.frontier();
        let first_move = order
            .iter()
            .zip(&finals)
            .position(|((_, loc), fin)| loc.position() != fin.position());

        if let Some(k) = first_move {
            let moving = &order[k..];
            // Stage the moving records past the frontier, in fresh chunks.
            let mut stage_cursor = Cursor::new(u32::from(header.tail_chunk) + 1, self.capacity);
            let staged: Vec<RecordLoc> = moving
                .iter()
                .map(|(_, loc)| stage_cursor.place(loc))
                .collect();
            let (stage_chunk, stage_offset) = stage_cursor.frontier();
            if stage_chunk >= MAX_CHUNKS {
                return Err(Error::Full {
                    len: u64::from(header.length),
                    extra: 0,
                    limit: u64::from(MAX_CHUNKS),
                    what: "chunk (compaction needs room to stage the records it moves)",
                });
            }
            for id in u32::from(header.tail_chunk) + 1..=stage_chunk {
                let file = FileId::Chunk(id);
                let len = self
                    .storage
                    .open_file(file, true, 0)
                    .map_err(|e| Error::io(self.file_path(file), "create", e))?
                    .unwrap_or(0);
                self.chunk_lens[id as usize].store(len, Ordering::Release);
            }
            self.copy_records(moving.iter().map(|(_, l)| l).zip(&staged))?;
            self.sync_chunks(u32::from(header.tail_chunk) + 1..=stage_chunk)?;
            let staging_header = Header {
                tail_chunk: stage_chunk as u16,
                tail_offset: stage_offset as u32,
                ..header
            };
            self.publish_tail(&staging_header)?;
            self.point_entries(moving.iter().map(|(i, _)| *i).zip(&staged))?;
            self.sync_meta()?;

            // Copy them down to their final places.
            self.copy_records(staged.iter().zip(&finals[k..]))?;
            self.sync_chunks(0..=final_chunk)?;
            self.point_entries(moving.iter().map(|(i, _)| *i).zip(&finals[k..]))?;
            self.sync_meta()?;
        }

        // Move the frontier down, then drop what lies past it.
        let old_tail = u32::from(self.header().tail_chunk);
        let new = Header {
            tail_chunk: final_chunk as u16,
            tail_offset: final_offset as u32,
            length: header.length,
        };
        self.publish_tail(&new)?;
        self.sync_meta()?;
        // Past the old frontier there may also be staging chunks that an
        // interrupted compaction left behind.
        let mut past: Vec<u32> = (final_chunk + 1..=old_tail).collect();
        let listed = self
            .storage
            .chunk_ids()
            .map_err(|e| Error::io(&self.path, "list chunk files", e))?;
        past.extend(listed.into_iter().filter(|&id| id > old_tail));
        for id in past {
            let file = FileId::Chunk(id);
            self.storage
                .remove(file)
                .map_err(|e| Error::io(self.file_path(file), "remove", e))?;
            self.chunk_lens[id as usize].store(0, Ordering::Release);
        }
        let tail_file = FileId::Chunk(final_chunk);
        if self.chunk_lens[final_chunk as usize].load(Ordering::Acquire) > final_offset {
            self.storage
                .truncate(tail_file, final_offset)
                .map_err(|e| Error::io(self.file_path(tail_file), "truncate", e))?;
            self.chunk_lens[final_chunk as usize].store(final_offset, Ordering::Release);
        }
        Ok(())
    }

    /// Copies each record's stored bytes from `from` to `to`.
    fn copy_records<'a>(
        &self,
        moves: impl Iterator<Item = (&'a RecordLoc, &'a RecordLoc)>,
    ) -> Result<()> {
        let mut staging = Vec::new();
        for (from, to) in moves {
            let src = FileId::Chunk(u32::from(from.chunk_id));
            staging.resize(from.phys_length as usize, 0);
            self.storage
                .read_at(src, u64::from(from.offset), &mut staging)
                .map_err(|e| Error::io(self.file_path(src), "read", e))?;
            let dst = FileId::Chunk(u32::from(to.chunk_id));
            self.storage
                .write_at(dst, u64::from(to.offset), &staging)
                .map_err(|e| Error::io(self.file_path(dst), "write", e))?;
            self.chunk_lens[usize::from(to.chunk_id)].fetch_max(to.end(), Ordering::AcqRel);
        }
        Ok(())
    }

    /// Rewrites the table entries of the given records.
    fn point_entries<'a>(&self, entries: impl Iterator<Item = (u32, &'a RecordLoc)>) -> Result<()> {
        for (index, loc) in entries {
            self.write_meta(entry_offset(index), &loc.encode(), "write table")?;
        }
        Ok(())
    }

    /// Writes `header` and publishes its frontier to readers.
    fn publish_tail(&self, header: &Header) -> Result<()> {
        self.write_meta(0, &header.encode(), "write header")?;
        self.tail.store(
            pack_tail(header.tail_chunk, header.tail_offset),
            Ordering::Release,
        );
        Ok(())
    }

    fn sync_chunks(&self, ids: std::ops::RangeInclusive<u32>) -> Result<()> {
        for id in ids {
            let file = FileId::Chunk(id);
            self.storage
                .sync(file)
                .map_err(|e| Error::io(self.file_path(file), "sync", e))?;
        }
        Ok(())
    }

    fn sync_meta(&self) -> Result<()> {
        self.storage
            .sync(FileId::Meta)
            .map_err(|e| Error::io(self.meta_path(), "sync", e))
    }
}

/// Packs records one after another from a starting chunk, never letting one
/// straddle chunks (the writer's rollover rule, FORMAT.md "Limits").
struct Cursor {
    chunk: u32,
    offset: u64,
    capacity: u64,
}

impl Cursor {
    fn new(chunk: u32, capacity: u64) -> Cursor {
        Cursor {
            chunk,
            offset: 0,
            capacity,
        }
    }

    fn place(&mut self, loc: &RecordLoc) -> RecordLoc {
        let phys = u64::from(loc.phys_length);
        if self.offset + phys >= self.capacity {
            self.chunk += 1;
            self.offset = 0;
        }
        let placed = RecordLoc {
            chunk_id: self.chunk as u16,
            offset: self.offset as u32,
            ..*loc
        };
        self.offset += phys;
        placed
    }

    fn frontier(&self) -> (u32, u64) {
        (self.chunk, self.offset)
    }
}
