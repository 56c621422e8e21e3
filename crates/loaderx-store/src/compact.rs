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

use loaderx_format::{Header, MAX_CHUNKS, RecordLoc};

use crate::{
    Codec, Error, Result, Store,
    storage::{FileId, Storage},
};

impl<C: Codec, S: Storage> Store<C, S> {
    /// Reclaims the space left behind by `delete`. Needs exclusive access: in
    /// this process `&mut self`, across processes an exclusive advisory lock
    /// (fails with [`Error::Locked`] while another handle has the store
    /// open). Pending appends are committed first.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::Locked`], [`Error::Full`] when there is no
    /// chunk id left to stage the moved records in, a damaged entry or file,
    /// or an I/O failure (the store then still holds every record, and
    /// compacting again finishes the job).
    pub fn compact(&mut self) -> Result<()> {
        self.check_usable()?;
        if self.is_read_only() {
            return Err(Error::ReadOnly {
                path: self.path().to_owned(),
                op: "compact",
            });
        }
        self.exclusively(Self::compact_locked)
    }

    fn compact_locked(&mut self) -> Result<()> {
        let header = self.header();
        // Files cut short behind our back must give errors, not a SIGBUS.
        self.check_meta_len(&header)?;
        // Exclusive (`&mut self`): no append can be growing a file, so the
        // lengths measured now may replace the known ones.
        for id in 0..=header.tail_chunk {
            let len = self.current_chunk_len(id)?;
            self.chunk_lens.set(u32::from(id), len);
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
            self.create_chunks(u32::from(header.tail_chunk) + 1..=stage_chunk)?;
            self.copy_records(moving.iter().map(|(_, l)| l).zip(&staged))?;
            self.sync_chunks(u32::from(header.tail_chunk) + 1..=stage_chunk)?;
            self.files.sync_dir()?;
            // The frontier that covers the staged copies is durable before
            // any entry pointing at them can be: an entry past the durable
            // frontier would make the store unreadable.
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
        let old_tail = u32::from(self.frontier.tail_chunk());
        let new = Header {
            tail_chunk: final_chunk as u16,
            tail_offset: final_offset as u32,
            length: header.length,
        };
        self.publish_tail(&new)?;
        // Past the old frontier there may also be staging chunks that an
        // interrupted compaction left behind.
        let mut past: Vec<u32> = (final_chunk + 1..=old_tail).collect();
        let listed = self.files.chunk_ids()?;
        past.extend(listed.into_iter().filter(|&id| id > old_tail));
        for id in past {
            self.files.remove(FileId::Chunk(id))?;
            self.chunk_lens.set(id, 0);
        }
        if self.chunk_lens.get(final_chunk) > final_offset {
            self.files
                .truncate(FileId::Chunk(final_chunk), final_offset)?;
            self.chunk_lens.set(final_chunk, final_offset);
        }
        // Removed chunks that come back after power loss lie past the
        // frontier, where the next compaction removes them; this only keeps
        // them from taking space.
        self.files.sync_dir()
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
            self.files
                .read(src, u64::from(from.offset), &mut staging, "read")?;
            self.write_chunk(to.chunk_id, to.offset, &staging)?;
        }
        Ok(())
    }

    /// Rewrites the table entries of the given records.
    fn point_entries<'a>(&self, entries: impl Iterator<Item = (u32, &'a RecordLoc)>) -> Result<()> {
        for (index, loc) in entries {
            self.files.write_entry(index, loc, "write table")?;
        }
        Ok(())
    }

    /// Writes `header` and publishes its frontier to readers.
    /// Writes `header` and publishes its frontier, then makes it durable
    /// (the barrier every step of the protocol needs before the next).
    fn publish_tail(&mut self, header: &Header) -> Result<()> {
        self.files.write_header(header, "write header")?;
        self.frontier.publish_tail(header);
        self.sync_meta()?;
        *self
            .committed
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = *header;
        Ok(())
    }

    fn sync_chunks(&self, ids: std::ops::RangeInclusive<u32>) -> Result<()> {
        self.files.sync_all(ids.map(FileId::Chunk))
    }

    fn sync_meta(&self) -> Result<()> {
        self.files.sync(FileId::Meta)
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
