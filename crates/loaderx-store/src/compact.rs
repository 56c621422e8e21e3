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

use loaderx_format::{Head, RecordLoc, Tail};

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
        // Entries move in place: the index of raw records must not outlive them.
        self.forget_raw_runs();
        self.check_writable("compact")?;
        self.exclusively(Self::compact_locked)
    }

    fn compact_locked(&mut self) -> Result<()> {
        let head = self.head();
        // Files cut short behind our back must give errors, not a SIGBUS.
        self.check_meta_len(&head, None)?;
        // Exclusive (`&mut self`): no append can be growing a file, so the
        // lengths measured now may replace the known ones.
        for id in head.chunks() {
            self.touch_chunk(id)?;
            let len = self.current_chunk_len(id, None)?;
            self.chunk_lens.set(id, len);
        }
        let lanes = u32::from(head.lanes);
        let lane = |loc: &RecordLoc| (loc.chunk_id % lanes) as usize;
        // As long as the table on disk, which a damaged header sets: the
        // allocation may fail, never abort.
        let n = usize::try_from(head.length).unwrap_or(usize::MAX);
        let mut order: Vec<(u64, RecordLoc)> = Vec::new();
        order.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            bytes: (n as u64).saturating_mul(std::mem::size_of::<(u64, RecordLoc)>() as u64),
        })?;
        let runs = self.layout().runs();
        for i in 0..head.length {
            let loc = if runs {
                // A run record's block is checked when the table is
                // rewritten with it (`plan_runs`), once per block.
                let loc = self.files.runs_loc(i, false)?;
                self.check_entry(i, &loc, &head)?;
                loc
            } else {
                self.entry(i, &head)?
            };
            order.push((i, loc));
        }
        // Lane by lane, in physical order: each lane is packed on its own.
        order.sort_unstable_by_key(|(_, loc)| (lane(loc), loc.position()));

        // Final places: each lane packed from the start of its first chunk.
        let mut cursors: Vec<Cursor> = (0..lanes)
            .map(|l| Cursor::new(l, lanes, self.capacity))
            .collect();
        let finals: Vec<RecordLoc> = order
            .iter()
            .map(|(_, loc)| cursors[lane(loc)].place(loc))
            .collect();
        // A record moves when it, or one before it in its lane, is not in
        // its final place already.
        let mut moving_lane = vec![false; lanes as usize];
        let moving: Vec<bool> = order
            .iter()
            .zip(&finals)
            .map(|((_, loc), fin)| {
                let l = lane(loc);
                moving_lane[l] |= loc.position() != fin.position();
                moving_lane[l]
            })
            .collect();
        let moves: Vec<usize> = (0..order.len()).filter(|&k| moving[k]).collect();

        if !moves.is_empty() {
            self.move_records(&head, &order, &finals, &moves, &moving_lane)?;
        }

        // Move the frontiers down, then drop what lies past them.
        let mut new = head;
        for (l, cursor) in cursors.iter().enumerate() {
            let (chunk, offset) = cursor.frontier();
            new.tails[l] = Tail {
                chunk,
                offset: offset as u32,
            };
        }
        self.publish_tail(&new)?;
        // Past the old frontiers there may also be staging chunks that an
        // interrupted compaction left behind: every chunk file the new head
        // does not name goes.
        for id in self.files.chunk_ids()? {
            if !new.has_chunk(id) {
                self.files.remove(FileId::Chunk(id))?;
                self.chunk_lens.set(id, 0);
            }
        }
        for t in new.lane_tails() {
            let offset = u64::from(t.offset);
            if self.chunk_lens.get(t.chunk) > offset {
                self.files.truncate(FileId::Chunk(t.chunk), offset)?;
                self.chunk_lens.set(t.chunk, offset);
            }
        }
        // Removed chunks that come back after power loss lie past the
        // frontier, where the next compaction removes them; this only keeps
        // them from taking space.
        self.files.sync_dir()
    }

    /// Moves the records `moves` (positions in `order`) to their `finals`
    /// through staging chunks past each lane's frontier, each step durable
    /// before the next (`docs/FORMAT.md`, "Compaction").
    fn move_records(
        &mut self,
        head: &Head,
        order: &[(u64, RecordLoc)],
        finals: &[RecordLoc],
        moves: &[usize],
        moving_lane: &[bool],
    ) -> Result<()> {
        let lanes = u32::from(head.lanes);
        let lane = |loc: &RecordLoc| (loc.chunk_id % lanes) as usize;
        // Stage the moving records past each lane's frontier, in fresh chunks.
        let mut stage: Vec<Cursor> = head
            .lane_tails()
            .iter()
            .map(|t| Cursor::new(t.chunk.saturating_add(lanes), lanes, self.capacity))
            .collect();
        let staged: Vec<RecordLoc> = moves
            .iter()
            .map(|&k| stage[lane(&order[k].1)].place(&order[k].1))
            .collect();
        let mut staging_head = *head;
        let mut new_chunks = Vec::new();
        for (l, cursor) in stage.iter().enumerate() {
            if !moving_lane[l] {
                continue;
            }
            let (chunk, offset) = cursor.frontier();
            let limit = self.layout().max_chunks();
            if u64::from(chunk) >= limit || cursor.overflowed {
                return Err(Error::Full {
                    len: head.length,
                    extra: 0,
                    limit,
                    what: "chunk (compaction needs room to stage the records it moves)",
                });
            }
            let first = head.tails[l].chunk + lanes;
            new_chunks.extend((first..=chunk).step_by(lanes as usize));
            staging_head.tails[l] = Tail {
                chunk,
                offset: offset as u32,
            };
        }
        self.create_chunks(new_chunks.iter().copied())?;
        self.copy_records(moves.iter().map(|&k| &order[k].1).zip(&staged))?;
        self.files
            .sync_all(new_chunks.iter().map(|&c| FileId::Chunk(c)))?;
        self.files.sync_dir()?;
        // The frontier that covers the staged copies is durable before
        // any entry pointing at them can be: an entry past the durable
        // frontier would make the store unreadable.
        self.publish_tail(&staging_head)?;
        self.point_entries(moves.iter().map(|&k| order[k].0).zip(&staged))?;
        self.sync_meta()?;

        // Copy them down to their final places.
        let fin: Vec<RecordLoc> = moves.iter().map(|&k| finals[k]).collect();
        self.copy_records(staged.iter().zip(&fin))?;
        let mut touched: Vec<u32> = fin.iter().map(|l| l.chunk_id).collect();
        touched.sort_unstable();
        touched.dedup();
        self.files
            .sync_all(touched.into_iter().map(FileId::Chunk))?;
        self.point_entries(moves.iter().map(|&k| order[k].0).zip(&fin))?;
        self.sync_meta()?;
        Ok(())
    }

    /// Copies each record's stored bytes from `from` to `to`.
    fn copy_records<'a>(
        &self,
        moves: impl Iterator<Item = (&'a RecordLoc, &'a RecordLoc)>,
    ) -> Result<()> {
        let mut staging = Vec::new();
        for (from, to) in moves {
            let src = FileId::Chunk(from.chunk_id);
            staging.resize(from.phys_length as usize, 0);
            self.files
                .read(src, u64::from(from.offset), &mut staging, "read")?;
            self.write_chunk(to.chunk_id, to.offset, &staging)?;
        }
        Ok(())
    }

    /// Rewrites the table entries of the given records (a run table: all
    /// at once, through the undo log, see `runtable.rs`).
    fn point_entries<'a>(
        &mut self,
        entries: impl Iterator<Item = (u64, &'a RecordLoc)>,
    ) -> Result<()> {
        if self.layout().runs() {
            let moved: std::collections::HashMap<u64, RecordLoc> =
                entries.map(|(i, loc)| (i, *loc)).collect();
            let head = *self
                .committed
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            return self.rewrite_runs(
                &head,
                head.length,
                &std::collections::BTreeMap::new(),
                &moved,
            );
        }
        for (index, loc) in entries {
            self.files.write_entry(index, loc, "write table")?;
        }
        Ok(())
    }

    /// Writes `head` and publishes its frontiers, then makes it durable
    /// (the barrier every step of the protocol needs before the next).
    fn publish_tail(&mut self, head: &Head) -> Result<()> {
        self.files.write_head(head, "write header")?;
        self.frontier.publish_tails(head);
        self.sync_meta()?;
        *self
            .committed
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = *head;
        Ok(())
    }

    fn sync_meta(&self) -> Result<()> {
        self.files.sync(FileId::Meta)
    }
}

/// Packs records one after another from a starting chunk of a lane, never
/// letting one straddle chunks (the writer's rollover rule, FORMAT.md
/// "Limits"); the next chunk of a lane is `step` (the lane count) further.
struct Cursor {
    chunk: u32,
    offset: u64,
    capacity: u64,
    step: u32,
    overflowed: bool,
}

impl Cursor {
    fn new(chunk: u32, step: u32, capacity: u64) -> Cursor {
        Cursor {
            chunk,
            offset: 0,
            capacity,
            step,
            overflowed: false,
        }
    }

    fn place(&mut self, loc: &RecordLoc) -> RecordLoc {
        let phys = u64::from(loc.phys_length);
        if self.offset + phys >= self.capacity {
            match self.chunk.checked_add(self.step) {
                Some(c) => self.chunk = c,
                None => self.overflowed = true,
            }
            self.offset = 0;
        }
        let placed = RecordLoc {
            chunk_id: self.chunk,
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
