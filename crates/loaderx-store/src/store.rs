//! The [`Store`] type: its state, and the read-side accessors (`len`,
//! `lengths`, `stats`, `sync`, `verify`) with the entry checks every read
//! path shares. Opening is `open.rs`; appends, gathers, deletes and
//! compaction have a file each.

use std::{
    marker::PhantomData,
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock},
};

use loaderx_format::{CodecTag, FormatError, Head, RecordLoc, v2::Schema};

use crate::{
    Codec, CodecId, Deflate, Error, Result,
    files::Files,
    frontier::{ChunkLens, Frontier},
    layout::Layout,
    lock::StoreLock,
    parallel,
    storage::{FileId, FileStorage, Storage},
};

/// Storage usage, as reported by [`Store::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Live records.
    pub records: u64,
    /// Bytes the live records occupy on disk (sum of stored lengths).
    pub live_bytes: u64,
    /// Bytes of the chunk files up to the write frontiers: never more than
    /// the files hold.
    pub chunk_bytes: u64,
    /// `chunk_bytes - live_bytes`: an upper bound on what `compact` frees,
    /// never more than the chunk files hold.
    pub reclaimable: u64,
}

/// A persistent store of byte records (format v1, compatible with loaderx 0.5.x).
///
/// `C` is the codec appends use by default; reads dispatch on each record's
/// own tag, so a store may mix codecs. `S` is where the bytes live.
///
/// Concurrency: `Store` is `Send + Sync`. Gathers (`&self`) take no lock and
/// may run on many threads while one append (`&self`, serialised internally)
/// runs. `delete` and `compact` take `&mut self`.
///
/// Commits: an append is visible to this handle at once, and becomes part
/// of the store on disk — visible to handles opened later, kept through a
/// crash or power loss — at the next commit: [`sync`](Store::sync), a
/// `delete` or `compact`, or dropping the handle. Until then a crash loses
/// it whole. Across processes there is one writer at a time
/// ([`Error::Locked`] for the next), and `delete`/`compact` need every
/// other handle closed (`docs/ARCHITECTURE.md`, "Locking").
#[derive(Debug)]
pub struct Store<C: Codec = Deflate, S: Storage = FileStorage> {
    pub(crate) files: Files<S>,
    /// Bytes a chunk holds before appends roll over (`OpenOptions::chunk_capacity`).
    pub(crate) capacity: u64,
    /// The published head readers trust.
    pub(crate) frontier: Frontier,
    /// The head on disk: what the last commit made durable. Appends past
    /// it are pending until the next commit. Guarded by `append_lock`'s
    /// holders (appends and commits) and `&mut self` (delete, compact).
    pub(crate) committed: Mutex<Head>,
    /// Format v2's schema (`None` for a v1 store).
    pub(crate) schema: Option<Schema>,
    /// Whether gathers check the CRC32C of raw records too (compressed
    /// records are always checked in format v2): `OpenOptions::check_raw`,
    /// or a store whose schema codec compresses ([`Schema::compresses`]).
    pub(crate) check_raw: bool,
    /// [`OpenOptions::lane_bytes`](crate::OpenOptions::lane_bytes).
    pub(crate) lane_bytes: u64,
    /// The store's zstd dictionary, prepared once (v2 `zstd_dict` stores).
    pub(crate) dictionary: Option<crate::codec::ZstdDictionary>,
    /// The process that opened the handle: a forked child's copy must not
    /// commit its parent's pending appends when it is dropped.
    pub(crate) owner: u32,
    /// Bytes known to exist in each chunk file.
    pub(crate) chunk_lens: ChunkLens,
    /// Serialises appends (and the writers' view of the frontier).
    pub(crate) append_lock: Mutex<()>,
    /// The arena compressed appends encode into, kept from one append to
    /// the next so its pages are faulted in once per writing session, not
    /// once per append window (at most one window, 64 MiB: a window of one
    /// larger record uses an arena of its own). Fresh pages cost a fault
    /// each, a visible share of a large compressed append's time (the
    /// append rows of `docs/bench/rust.md`, "Store").
    /// [`sync`](Self::sync) frees it, and so does closing.
    pub(crate) append_arena: Mutex<Vec<u8>>,
    /// Set, to the first failure, when a write failed halfway and could not
    /// be undone in place (the bytes on disk are recovered by the next open,
    /// not by this handle), or when a commit failed.
    pub(crate) poisoned: OnceLock<String>,
    /// The advisory lock between processes (`None` for stores not on files,
    /// or where the file system has no `flock`).
    pub(crate) lock: Option<StoreLock>,
    /// The codecs past the built-ins this handle can use: those of the
    /// registry it was opened with that the schema lists.
    pub(crate) codecs: crate::CodecRegistry,
    /// Where small raw records lie, indexed by gathers (`runs.rs`).
    pub(crate) raw_runs: std::sync::RwLock<crate::runs::RawRuns>,
    /// `C`'s id: what appends use by default.
    pub(crate) default_codec: CodecId,
    pub(crate) _codec: PhantomData<C>,
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Refuses to work on a handle whose last write failed halfway, or
    /// that a forked child cannot use; adopts a handle on its first use in
    /// a forked child (`fork.rs`).
    #[inline]
    pub(crate) fn check_usable(&self) -> Result<()> {
        if let Some(cause) = self.poisoned.get() {
            return Err(Error::Poisoned {
                path: self.path().to_owned(),
                cause: cause.clone(),
            });
        }
        #[cfg(unix)]
        if let Some(lock) = &self.lock
            && lock.inherited().state() != crate::fork::state::NORMAL
        {
            return self.adopt_inherited(lock);
        }
        Ok(())
    }

    /// A handle used in a forked child: on its first use its view goes back
    /// to the last commit (the parent's pending appends are the parent's to
    /// publish or abandon, and a later writer may overwrite their bytes);
    /// unusable when the parent was changing the store at the fork.
    #[cfg(unix)]
    #[cold]
    fn adopt_inherited(&self, lock: &StoreLock) -> Result<()> {
        let inherited = lock.inherited();
        if inherited.first_use() {
            match self.committed.try_lock() {
                Ok(committed) => self.frontier.publish(&committed),
                Err(std::sync::TryLockError::Poisoned(p)) => self.frontier.publish(&p.into_inner()),
                // Held by a thread of the parent (a commit under way): the
                // head it was publishing may or may not be durable.
                Err(std::sync::TryLockError::WouldBlock) => inherited.refuse(),
            }
            // A run table's index being extended by a thread of the parent
            // at the fork stays locked in this copy forever.
            if matches!(
                self.files.run_table().try_read(),
                Err(std::sync::TryLockError::WouldBlock)
            ) {
                inherited.refuse();
            }
        }
        if inherited.state() == crate::fork::state::REFUSED {
            return Err(lock.refused_error());
        }
        Ok(())
    }

    /// Whether this process is not the one that opened the handle (a child
    /// forked from it), where the handle only reads.
    pub(crate) fn forked(&self) -> bool {
        self.owner != std::process::id()
    }

    /// [`check_usable`](Self::check_usable), and that this handle may
    /// write: `op` names the refused operation.
    pub(crate) fn check_writable(&self, op: &'static str) -> Result<()> {
        self.check_usable()?;
        if self.forked() {
            return Err(self.inherited_error());
        }
        if self.is_read_only() {
            return Err(Error::ReadOnly {
                path: self.path().to_owned(),
                op,
            });
        }
        Ok(())
    }

    /// The error for a write through a handle inherited across `fork()`.
    pub(crate) fn inherited_error(&self) -> Error {
        match &self.lock {
            Some(lock) => lock.inherited_error(),
            None => Error::Locked {
                path: self.path().to_owned(),
                holder: format!(
                    "this handle was opened by process {} and inherited by this process \
                     through fork(): a forked process only reads through it (open the store \
                     again in this process to write)",
                    self.owner
                ),
            },
        }
    }

    /// Makes the handle unusable; `cause` (the first failure) is named by
    /// every later error.
    pub(crate) fn poison(&self, cause: &Error) {
        let _ = self.poisoned.set(cause.to_string());
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        self.files.dir()
    }

    /// The codec appends use unless told otherwise.
    pub fn default_codec(&self) -> CodecId {
        self.default_codec
    }

    /// The codecs past the built-ins this handle can use (those the
    /// store's schema lists, as registered when it was opened).
    pub fn codecs(&self) -> &crate::CodecRegistry {
        &self.codecs
    }

    /// Whether writes are refused.
    pub fn is_read_only(&self) -> bool {
        self.files.is_read_only()
    }

    /// Number of live records; the index space is `0..len()`.
    pub fn len(&self) -> u64 {
        // A forked child's view starts at the parent's last commit.
        #[cfg(unix)]
        if let Some(lock) = &self.lock
            && lock.inherited().state() == crate::fork::state::INHERITED
        {
            let _ = self.adopt_inherited(lock);
        }
        self.frontier.len()
    }

    /// The on-disk format version: 1 (loaderx 0.5.x's) or 2.
    pub fn format_version(&self) -> u16 {
        self.layout().version()
    }

    /// The write lanes: over how many chunk sequences, at most, appends
    /// spread records (chosen at creation; 1 for a format v1 store).
    pub fn lanes(&self) -> u8 {
        self.head().lanes
    }

    /// The schema of a format v2 store (`None` for v1).
    pub fn schema(&self) -> Option<&Schema> {
        self.schema.as_ref()
    }

    /// What this store's format version does differently (`layout.rs`).
    #[inline]
    pub(crate) fn layout(&self) -> Layout {
        self.files.layout()
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage the store lives on.
    pub fn storage(&self) -> &S {
        self.files.storage()
    }

    /// The published head: what a reader that starts now sees.
    pub(crate) fn head(&self) -> Head {
        self.frontier.head()
    }

    /// Where `file` lives, for error messages.
    pub(crate) fn file_path(&self, file: FileId) -> PathBuf {
        self.files.path(file)
    }

    /// Checks that `meta.zr` still holds the table `header` describes: a file
    /// truncated behind our back must give an error, not a SIGBUS. With
    /// `drained`, `meta.zr`'s length is the one from its last check when
    /// `drained` shows no event for it since.
    pub(crate) fn check_meta_len(
        &self,
        head: &Head,
        drained: Option<&crate::storage::Drained>,
    ) -> Result<()> {
        let need = self.files.table_end(head.length)?;
        let have = self.files.current_len(FileId::Meta, drained)?;
        if have < need {
            return Err(Error::format(
                self.file_path(FileId::Meta),
                FormatError::Truncated { need, have },
            ));
        }
        Ok(())
    }

    /// The length of chunk `id` to trust for records committed before this
    /// call: what we know we wrote, capped by what the file system reports now
    /// (someone may have cut the file). Not stored back: a concurrent append
    /// may be growing the file between the `stat` and the store, and lowering
    /// the shared value then would hide its records from later readers. With
    /// `drained`, a file it shows unchanged since its last check keeps that
    /// check's length ([`Storage::current_len_since`]).
    pub(crate) fn current_chunk_len(
        &self,
        id: u32,
        drained: Option<&crate::storage::Drained>,
    ) -> Result<u64> {
        let known = self.chunk_lens.get(id);
        let now = self.files.current_len(FileId::Chunk(id), drained)?;
        Ok(known.min(now))
    }

    /// Creates the chunk files `ids` (new ones past the frontier) and records
    /// their lengths.
    pub(crate) fn create_chunks(&self, ids: impl IntoIterator<Item = u32>) -> Result<()> {
        for id in ids {
            let len = self.files.create(FileId::Chunk(id), 0)?;
            self.chunk_lens.set(id, len);
        }
        Ok(())
    }

    /// Writes `bytes` at `offset` of chunk `chunk` and records that the file
    /// now reaches their end.
    pub(crate) fn write_chunk(&self, chunk: u32, offset: u32, bytes: &[u8]) -> Result<()> {
        let file = FileId::Chunk(chunk);
        self.files.write(file, u64::from(offset), bytes, "write")?;
        self.chunk_lens
            .grow(chunk, u64::from(offset) + bytes.len() as u64);
        Ok(())
    }

    /// Opens chunk `id` if this handle has not yet (chunks are opened on
    /// first touch) and records its length.
    pub(crate) fn touch_chunk(&self, id: u32) -> Result<()> {
        if self.chunk_lens.is_known(id) {
            return Ok(());
        }
        match self.files.open(FileId::Chunk(id))? {
            Some(len) => {
                self.chunk_lens.grow(id, len);
                Ok(())
            }
            None => Err(Error::NotAStore {
                path: self.file_path(FileId::Chunk(id)),
                reason: "chunk file is missing (the header says it exists)".into(),
            }),
        }
    }

    /// Reads and validates the entry of live record `index` against `head`.
    #[inline]
    pub(crate) fn entry(&self, index: u64, head: &Head) -> Result<RecordLoc> {
        if index >= head.length {
            return Err(Error::IndexOutOfRange {
                index,
                len: head.length,
            });
        }
        let loc = self.files.read_entry(index)?;
        self.check_entry(index, &loc, head)?;
        Ok(loc)
    }

    /// Validates the decoded entry of live record `index` against `head` and
    /// its chunk file's length (opening the chunk on first touch).
    #[inline]
    pub(crate) fn check_entry(&self, index: u64, loc: &RecordLoc, head: &Head) -> Result<()> {
        // Chunks are opened on first touch (format v2 opens only the lanes'
        // tails up front); one the head does not name is refused below.
        let file_len = match self.chunk_lens.known(loc.chunk_id) {
            Some(len) => len,
            None if head.has_chunk(loc.chunk_id) => {
                self.touch_chunk(loc.chunk_id)?;
                self.chunk_lens.get(loc.chunk_id)
            }
            None => 0,
        };
        loaderx_format::validate_entry(index, loc, head, file_len, self.layout().rules())
            .map_err(|e| Error::format(self.file_path(FileId::Meta), e))
    }

    /// Logical size of each record in `idxs`, written to `out`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `out` and `idxs` differ in length,
    /// [`Error::IndexOutOfRange`], or a damaged entry or file.
    pub fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        self.lengths_in(idxs, out, None)
    }

    /// [`lengths`](Self::lengths), the table's length checked against
    /// `drained` when given (a collection's batch: one drain for all its
    /// parts).
    pub(crate) fn lengths_in(
        &self,
        idxs: &[u64],
        out: &mut [u32],
        drained: Option<&crate::storage::Drained>,
    ) -> Result<()> {
        Error::check_len("lengths output", idxs.len(), out.len())?;
        self.check_usable()?;
        let head = self.head();
        self.check_meta_len(&head, drained)?;
        for (&idx, slot) in idxs.iter().zip(out.iter_mut()) {
            *slot = self.entry(idx, &head)?.logic_length;
        }
        Ok(())
    }

    /// The dimensions of each record in `idxs` (ragged v2 stores), record
    /// `i`'s at `out[i · ndim ..][.. ndim]`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `out` is not `idxs.len() · ndim` long
    /// or the store keeps no dimensions, [`Error::IndexOutOfRange`], or a
    /// damaged entry.
    pub fn dims(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        self.dims_in(idxs, out, None)
    }

    /// [`dims`](Self::dims), the table's length checked against `drained`
    /// when given.
    pub(crate) fn dims_in(
        &self,
        idxs: &[u64],
        out: &mut [u32],
        drained: Option<&crate::storage::Drained>,
    ) -> Result<()> {
        let ndim = self.files.entry_dims();
        if ndim == 0 || out.len() != idxs.len() * ndim {
            return Err(Error::LengthMismatch {
                what: "dims output (records × rank of a ragged store)",
                expected: idxs.len() * ndim.max(1),
                found: out.len(),
            });
        }
        self.check_usable()?;
        let head = self.head();
        self.check_meta_len(&head, drained)?;
        let itemsize = self
            .schema
            .as_ref()
            .map_or(1, |schema| u64::from(schema.dtype.itemsize()));
        for (&idx, slot) in idxs.iter().zip(out.chunks_exact_mut(ndim)) {
            let loc = self.entry(idx, &head)?;
            self.files.read_dims(idx, slot)?;
            // The entry's checksum covers its dimensions; this also catches
            // an entry written wrong in the first place.
            let expected = slot
                .iter()
                .fold(itemsize, |a, &d| a.saturating_mul(u64::from(d)));
            if expected != u64::from(loc.logic_length) {
                return Err(Error::format(
                    self.file_path(FileId::Meta),
                    FormatError::BadEntry {
                        entry: idx,
                        reason: loaderx_format::EntryFault::Dims {
                            expected,
                            found: loc.logic_length,
                        },
                    },
                ));
            }
        }
        Ok(())
    }

    /// Storage usage. Scans the table, so it is a diagnostic, not a per-batch call.
    ///
    /// # Errors
    /// When `meta.zr` cannot be read or was cut short.
    pub fn stats(&self) -> Result<Stats> {
        self.check_usable()?;
        // A forked child never appends, and its copy of the lock may be
        // held forever by a thread that stayed in the parent.
        let _writer = (!self.forked()).then(|| {
            self.append_lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        });
        let head = self.head();
        self.check_meta_len(&head, None)?;
        let mut live_bytes = 0u64;
        self.files.for_each_entry(head.length, |loc| {
            live_bytes += u64::from(loc.phys_length);
        })?;
        let chunk_bytes = self.chunk_bytes(&head)?;
        Ok(Stats {
            records: head.length,
            live_bytes,
            chunk_bytes,
            reclaimable: chunk_bytes.saturating_sub(live_bytes),
        })
    }

    /// Bytes of the chunk files `head` names, each counted up to what its
    /// records may use: the capacity, and a lane's tail chunk up to its
    /// frontier. What the files really hold, not what the frontiers span:
    /// the frontiers an interrupted compaction left past its staging chunks
    /// span whole chunks that were never full. Files that are absent count
    /// nothing; the listing bounds the work whatever the header says.
    fn chunk_bytes(&self, head: &Head) -> Result<u64> {
        let mut total = 0u64;
        for id in self.files.chunk_ids()? {
            if !head.has_chunk(id) {
                continue;
            }
            let tail = head.tails[head.lane_of(id)];
            let usable = if id == tail.chunk {
                u64::from(tail.offset)
            } else {
                self.capacity
            };
            let len = self.files.open(FileId::Chunk(id))?.unwrap_or(0);
            total = total.saturating_add(len.min(usable));
        }
        Ok(total)
    }

    /// Commits everything appended so far: makes it durable and visible to
    /// handles opened from now on. The chunk files are synced first, then
    /// the new table entries, and only then is the header that counts them
    /// written and synced, so power loss at any instant leaves either the
    /// previous commit or this one, never a header naming bytes the disk
    /// did not get (`docs/FORMAT.md`, "Commit protocol").
    ///
    /// # Errors
    /// When a file cannot be synced or written.
    pub fn sync(&self) -> Result<()> {
        if self.is_read_only() {
            return Ok(());
        }
        if self.forked() {
            // Nothing here is this process's to commit: a forked child's
            // view starts at its parent's last commit.
            return self.check_usable();
        }
        let _writer = self
            .append_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *self
            .append_arena
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Vec::new();
        self.commit()
    }

    /// [`sync`](Self::sync), with the append lock held (or `&mut self`).
    pub(crate) fn commit(&self) -> Result<()> {
        self.check_usable()?;
        if !self.has_pending() {
            return Ok(());
        }
        // Before `committed` is locked: taking the role may refresh, which
        // locks it too. Nothing can change in between (the caller holds the
        // append lock or `&mut self`).
        self.become_writer()?;
        let mut committed = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let head = self.head();
        let published = self.publish(&committed, &head);
        if let Err(e) = &published {
            // The barrier may have failed with the kernel marking the pages
            // it could not write clean: a retry would "succeed" and put a
            // header over bytes the disk never got. Never retried, then.
            self.poison(e);
        }
        published?;
        *committed = head;
        Ok(())
    }

    /// The commit protocol's writes, from the durable head `committed` to
    /// `head` (`docs/FORMAT.md`, "Commit protocol").
    fn publish(&self, committed: &Head, head: &Head) -> Result<()> {
        // Every chunk written since the last commit: each lane's, from its
        // committed tail to its tail now.
        let lanes = u32::from(head.lanes);
        let mut new_chunks = false;
        let mut written = Vec::new();
        for (old, new) in committed.lane_tails().iter().zip(head.lane_tails()) {
            written.extend(
                (old.chunk..=new.chunk)
                    .step_by(lanes as usize)
                    .map(FileId::Chunk),
            );
            new_chunks |= new.chunk > old.chunk;
        }
        // All at once: the lanes' files are flushed together.
        self.files.sync_all(written)?;
        if new_chunks {
            // New chunk files: their names must be durable before a durable
            // header names them.
            self.files.sync_dir()?;
        }
        self.files.sync(FileId::Meta)?;
        self.files.write_head(head, "write header")?;
        self.files.sync(FileId::Meta)
    }

    /// Runs `f` with every other handle, in any process, shut out (the
    /// cross-process half of `&mut self`): [`Error::Locked`] while another
    /// handle has the store open. The handle's view is brought up to date
    /// with the header on disk (another writer may have committed since it
    /// was opened) and pending appends are committed first, so `f` starts
    /// from the durable state.
    pub(crate) fn exclusively<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        let lock = self.lock.take();
        let result = match &lock {
            Some(lock) => lock.exclusive(|| {
                self.refresh()
                    .and_then(|()| self.commit())
                    .and_then(|()| f(self))
            }),
            None => self.commit().and_then(|()| f(self)),
        };
        self.lock = lock;
        result
    }

    /// Takes the writer role (across processes) if this handle does not
    /// hold it yet, and then first catches up with what the previous
    /// writer committed, so appends start from the store's real frontier,
    /// never over records committed since this handle read the header.
    pub(crate) fn become_writer(&self) -> Result<()> {
        match &self.lock {
            Some(lock) if lock.writer()? => self.refresh(),
            _ => Ok(()),
        }
    }

    /// Adopts the header on disk when it differs from what this handle last
    /// committed or read. Only for callers holding the writer role (or
    /// exclusive access), with nothing pending: nobody else can be changing
    /// the store then.
    pub(crate) fn refresh(&self) -> Result<()> {
        let mut committed = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let disk = self.files.read_head()?;
        if disk == *committed {
            return Ok(());
        }
        debug_assert_eq!(
            self.head(),
            *committed,
            "appends pending without the writer role"
        );
        // Measure the chunks that are new or may have grown: the lanes'
        // tails, and everything past the tails this handle knew.
        let lanes = usize::from(disk.lanes);
        let grown = committed
            .lane_tails()
            .iter()
            .zip(disk.lane_tails())
            .flat_map(|(old, new)| (old.chunk..=new.chunk).step_by(lanes));
        for c in grown {
            match self.files.open(FileId::Chunk(c))? {
                Some(len) => self.chunk_lens.grow(c, len),
                None => {
                    return Err(Error::NotAStore {
                        path: self.file_path(FileId::Chunk(c)),
                        reason: "chunk file is missing (the header says it exists)".into(),
                    });
                }
            }
        }
        self.frontier.publish(&disk);
        *committed = disk;
        Ok(())
    }

    /// Whether appends are waiting for a commit.
    pub(crate) fn has_pending(&self) -> bool {
        let committed = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.head() != *committed
    }

    /// Checks the whole store: every table entry against the format's rules
    /// and the chunk files' lengths, that every record decodes, and in
    /// format v2 every entry's and record's checksum.
    ///
    /// # Errors
    /// The first problem found: [`Error::Corrupt`] naming the entry, or
    /// [`Error::NotAStore`] for a damaged header.
    pub fn verify(&self) -> Result<()> {
        self.scan(true).map(|_| ())
    }

    /// Checks every record like [`verify`](Self::verify), but goes on past
    /// damage: returns each damaged record's index with what is wrong with
    /// it (empty when the store is healthy), in index order.
    ///
    /// # Errors
    /// Problems that are not a record's: a damaged header, `meta.zr` cut
    /// short, a file that cannot be read.
    pub fn damaged(&self) -> Result<Vec<(u64, String)>> {
        self.scan(false)
    }

    fn scan(&self, stop_at_first: bool) -> Result<Vec<(u64, String)>> {
        // The published head, not the bytes on disk (which a concurrent
        // commit may be rewriting); files measured now, so one cut short
        // behind our back gives an error, not a SIGBUS.
        let head = self.head();
        self.check_meta_len(&head, None)?;
        for c in head.chunks() {
            self.touch_chunk(c)?;
        }
        let lens: std::collections::HashMap<u32, u64> = head
            .chunks()
            .map(|c| self.current_chunk_len(c, None).map(|l| (c, l)))
            .collect::<Result<_>>()?;
        if self.files.fetches() {
            return self.scan_fetched(&head, &lens, stop_at_first);
        }
        let n = usize::try_from(head.length).unwrap_or(usize::MAX);
        let found = Mutex::new(Vec::new());
        let runs = self.layout().runs();
        parallel::for_ranges(n, u64::MAX, |range| {
            let mut scratch = Vec::new();
            // A run table: each block checked once (`runs_loc_seen`).
            let mut seen = None;
            for i in range {
                let i = i as u64;
                let entry = if runs {
                    self.files
                        .runs_loc_seen(i, true, &mut seen)
                        .and_then(|loc| self.check_entry(i, &loc, &head).map(|()| loc))
                } else {
                    self.entry(i, &head)
                };
                let checked = entry.and_then(|loc| {
                    self.check_chunk_end(i, &loc, &lens)?;
                    // A table entry may claim up to 2 GiB for a record of
                    // a few stored bytes: the allocation may fail, never abort.
                    let need = loc.logic_length as usize;
                    scratch.clear();
                    scratch
                        .try_reserve_exact(need)
                        .map_err(|_| Error::OutOfMemory { bytes: need as u64 })?;
                    scratch.resize(need, 0);
                    self.decode_checked(i, &loc, &mut scratch, true)
                });
                match checked {
                    Ok(()) => {}
                    Err(e @ (Error::Corrupt { .. } | Error::NotAStore { .. })) => {
                        if stop_at_first {
                            return Err(e);
                        }
                        found
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push((i, e.to_string()));
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })?;
        let mut found = found
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        found.sort_unstable_by_key(|(i, _)| *i);
        Ok(found)
    }

    /// The error for a built-in `codec` this build lacks.
    pub(crate) fn unavailable(&self, codec: CodecId, feature: &str) -> Error {
        Error::CodecUnavailable {
            path: self.path().to_owned(),
            tag: codec.tag().0,
            name: codec.name().to_owned(),
            version: 1,
            reason: format!(
                "this build of loaderx-store lacks it: enable cargo feature `{feature}`"
            ),
        }
    }

    /// Decodes record `index` (whose validated entry is `loc`) into `out`,
    /// which is exactly `loc.logic_length` bytes.
    #[inline]
    pub(crate) fn decode_into(&self, index: u64, loc: &RecordLoc, out: &mut [u8]) -> Result<()> {
        self.decode_from(index, loc, out, self.check_raw, None)
    }

    /// [`decode_into`](Self::decode_into) from `fetched`, the record's
    /// stored bytes already read (a gather from storage that
    /// [`fetches`](Storage::fetches)), checked as they would be.
    #[inline]
    pub(crate) fn decode_fetched(
        &self,
        index: u64,
        loc: &RecordLoc,
        fetched: &[u8],
        out: &mut [u8],
    ) -> Result<()> {
        self.decode_from(index, loc, out, self.check_raw, Some(fetched))
    }

    /// [`decode_into`](Self::decode_into), checking a v2 record's CRC32C
    /// before decoding it when it is compressed or `check_raw` is set.
    pub(crate) fn decode_checked(
        &self,
        index: u64,
        loc: &RecordLoc,
        out: &mut [u8],
        check_raw: bool,
    ) -> Result<()> {
        self.decode_from(index, loc, out, check_raw, None)
    }

    /// [`decode_checked`](Self::decode_checked), from `fetched` when the
    /// stored bytes were already read, else from storage.
    pub(crate) fn decode_from(
        &self,
        index: u64,
        loc: &RecordLoc,
        out: &mut [u8],
        check_raw: bool,
        fetched: Option<&[u8]>,
    ) -> Result<()> {
        let codec = CodecId::from_tag(loc.codec).expect("validated entries have known codecs");
        let listed = || Error::Corrupt {
            path: self.file_path(FileId::Meta),
            entry: index,
            reason: format!(
                "codec tag {} is not listed in the store's codec table",
                loc.codec.0
            ),
        };
        if loc.codec == CodecTag::RAW
            && u64::from(loc.phys_length) >= crate::parallel::copy_reads_at()
            && out.len() == loc.phys_length as usize
        {
            // See `copy_reads_at`: large raw records are read, not mapped,
            // straight into place, and checked there when they are checked.
            let file = FileId::Chunk(loc.chunk_id);
            match fetched {
                Some(src) => out.copy_from_slice(src),
                None => self.files.copy(file, u64::from(loc.offset), out, "read")?,
            }
            if self.layout().checksums() && check_raw {
                let crc = loaderx_format::v2::crc32c(out);
                if crc != loc.crc {
                    return Err(Error::Corrupt {
                        path: self.file_path(file),
                        entry: index,
                        reason: format!("raw record: {}", crc_mismatch(crc, loc.crc)),
                    });
                }
            }
            return Ok(());
        }
        // Built-ins (and, with the `image` feature, the image codecs) are
        // dispatched by a match on the id; the rest come from the registry,
        // which holds only the codecs the schema lists.
        let plugged = if codec.is_builtin() || (cfg!(feature = "image") && loc.codec.is_image()) {
            if loc.codec.is_image()
                && self
                    .schema
                    .as_ref()
                    .and_then(|s| s.codec_ref(loc.codec))
                    .is_none()
            {
                return Err(listed());
            }
            if let Some(feature) = codec.missing_feature() {
                return Err(self.unavailable(codec, feature));
            }
            None
        } else {
            Some(self.codecs.registered(loc.codec).ok_or_else(listed)?)
        };
        let ctx = self.decode_context();
        self.read_record_from(
            index,
            loc,
            check_raw,
            plugged.map(Codec::name),
            fetched,
            |src| match plugged {
                Some(c) => c.decode_in(src, out, ctx),
                None => codec.decode_in(src, out, ctx),
            },
        )
    }

    /// What a codec may need to decode this store's records besides their
    /// bytes ([`Codec::decode_in`]).
    #[inline]
    pub(crate) fn decode_context(&self) -> crate::DecodeContext<'_> {
        crate::DecodeContext::new(self.schema.as_ref()).with_dictionary(self.dictionary.as_ref())
    }

    /// Runs `f` on record `index`'s stored bytes (`fetched` when they were
    /// already read, else read from storage), after checking a v2
    /// record's CRC32C when it is compressed or `check_raw` is set; a
    /// failure of either is [`Error::Corrupt`] naming the record (and the
    /// codec, by `plugged`'s name when it came from the registry).
    pub(crate) fn read_record_from(
        &self,
        index: u64,
        loc: &RecordLoc,
        check_raw: bool,
        plugged: Option<&str>,
        fetched: Option<&[u8]>,
        f: impl FnOnce(&[u8]) -> std::result::Result<(), crate::DecodeError>,
    ) -> Result<()> {
        let file = FileId::Chunk(loc.chunk_id);
        let check = self.layout().checksums() && (check_raw || loc.codec != CodecTag::RAW);
        let run = |src: &[u8]| {
            if check {
                let crc = loaderx_format::v2::crc32c(src);
                if crc != loc.crc {
                    return Err(crate::DecodeError::new(crc_mismatch(crc, loc.crc)));
                }
            }
            f(src)
        };
        let (offset, len) = (u64::from(loc.offset), loc.phys_length as usize);
        let outcome = if let Some(src) = fetched {
            run(src)
        } else if u64::from(loc.logic_length) >= crate::parallel::copy_reads_at() {
            // A large record's stored bytes are read into this thread's
            // scratch buffer rather than decoded from the map (see
            // `copy_reads_at`); next to decoding them, the copy is cheap.
            crate::parallel::with_scratch(len, |scratch| {
                self.files.copy(file, offset, scratch, "read")?;
                Ok(run(scratch))
            })?
        } else {
            self.files.with_bytes(file, offset, len, "read", run)?
        };
        outcome.map_err(|e| Error::Corrupt {
            path: self.file_path(file),
            entry: index,
            reason: match plugged {
                Some(name) => format!("{name} record (codec tag {}): {e}", loc.codec.0),
                None => format!("{} record: {e}", loc.codec.name().unwrap_or("unknown")),
            },
        })
    }
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Commits pending appends and closes the handle, reporting what the
    /// commit reported (dropping the handle commits too, but cannot report).
    /// In a forked child there is nothing of the child's to commit.
    ///
    /// # Errors
    /// What [`sync`](Store::sync) reports; the handle is closed either way,
    /// and after a failed commit nothing it appended is published.
    pub fn close(self) -> Result<()> {
        if self.forked() || self.is_read_only() {
            return Ok(());
        }
        self.sync()
    }
}

/// What a record whose stored bytes fail their checksum is told.
fn crc_mismatch(computed: u32, stored: u32) -> String {
    format!(
        "checksum mismatch: stored bytes have CRC32C {computed:#010x}, the table says {stored:#010x}"
    )
}

impl<C: Codec, S: Storage> Drop for Store<C, S> {
    /// Commits pending appends, like a file's close; errors are lost here, so
    /// call [`close`](Store::close) or [`sync`](Store::sync) to see them. A
    /// forked child's copy of a handle never commits: the appends it would
    /// publish are its parent's.
    fn drop(&mut self) {
        if !self.forked()
            && !self.is_read_only()
            && self.poisoned.get().is_none()
            && self.has_pending()
        {
            let _ = self.commit();
        }
    }
}
