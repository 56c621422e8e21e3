//! The [`Store`] type: its state, and the read-side accessors (`len`,
//! `lengths`, `stats`, `sync`, `verify`) with the entry checks every read
//! path shares. Opening is `open.rs`; appends, gathers, deletes and
//! compaction have a file each.

use std::{
    marker::PhantomData,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use loaderx_format::{FormatError, Header, RecordLoc};

use crate::{
    Codec, CodecId, Deflate, Error, Result,
    files::Files,
    frontier::{ChunkLens, Frontier},
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
    /// Chunk space up to the write frontier.
    pub chunk_bytes: u64,
    /// `chunk_bytes - live_bytes`: an upper bound on what `compact` frees.
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
    /// The published header readers trust.
    pub(crate) frontier: Frontier,
    /// The header on disk: what the last commit made durable. Appends past
    /// it are pending until the next commit. Guarded by `append_lock`'s
    /// holders (appends and commits) and `&mut self` (delete, compact).
    pub(crate) committed: Mutex<Header>,
    /// The process that opened the handle: a forked child's copy must not
    /// commit its parent's pending appends when it is dropped.
    pub(crate) owner: u32,
    /// Bytes known to exist in each chunk file.
    pub(crate) chunk_lens: ChunkLens,
    /// Serialises appends (and the writers' view of the frontier).
    pub(crate) append_lock: Mutex<()>,
    /// Set when a write failed halfway and could not be undone in place: the
    /// bytes on disk are recovered by the next open, not by this handle.
    pub(crate) poisoned: AtomicBool,
    /// The advisory lock between processes (`None` for stores not on files,
    /// or where the file system has no `flock`).
    pub(crate) lock: Option<StoreLock>,
    pub(crate) _codec: PhantomData<C>,
}

impl<C: Codec, S: Storage> Store<C, S> {
    /// Refuses to work on a handle whose last write failed halfway.
    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned {
                path: self.path().to_owned(),
            });
        }
        Ok(())
    }

    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        self.files.dir()
    }

    /// The codec appends use unless told otherwise.
    pub fn default_codec(&self) -> CodecId {
        C::ID
    }

    /// Whether writes are refused.
    pub fn is_read_only(&self) -> bool {
        self.files.is_read_only()
    }

    /// Number of live records; the index space is `0..len()`.
    pub fn len(&self) -> u64 {
        u64::from(self.frontier.len())
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage the store lives on.
    pub fn storage(&self) -> &S {
        self.files.storage()
    }

    /// The published header: what a reader that starts now sees.
    pub(crate) fn header(&self) -> Header {
        self.frontier.header()
    }

    /// Where `file` lives, for error messages.
    pub(crate) fn file_path(&self, file: FileId) -> PathBuf {
        self.files.path(file)
    }

    /// Checks that `meta.zr` still holds the table `header` describes: a file
    /// truncated behind our back must give an error, not a SIGBUS.
    pub(crate) fn check_meta_len(&self, header: &Header) -> Result<()> {
        let need = header.table_end();
        let have = self.files.current_len(FileId::Meta)?;
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
    /// the shared value then would hide its records from later readers.
    pub(crate) fn current_chunk_len(&self, id: u16) -> Result<u64> {
        let known = self.chunk_lens.get(u32::from(id));
        let now = self.files.current_len(FileId::Chunk(u32::from(id)))?;
        Ok(known.min(now))
    }

    /// Creates the chunk files `ids` (new ones past the frontier) and records
    /// their lengths.
    pub(crate) fn create_chunks(&self, ids: std::ops::RangeInclusive<u32>) -> Result<()> {
        for id in ids {
            let len = self.files.create(FileId::Chunk(id), 0)?;
            self.chunk_lens.set(id, len);
        }
        Ok(())
    }

    /// Writes `bytes` at `offset` of chunk `chunk` and records that the file
    /// now reaches their end.
    pub(crate) fn write_chunk(&self, chunk: u16, offset: u32, bytes: &[u8]) -> Result<()> {
        let file = FileId::Chunk(u32::from(chunk));
        self.files.write(file, u64::from(offset), bytes, "write")?;
        self.chunk_lens
            .grow(u32::from(chunk), u64::from(offset) + bytes.len() as u64);
        Ok(())
    }

    /// Reads and validates the entry of live record `index` against `header`.
    pub(crate) fn entry(&self, index: u64, header: &Header) -> Result<RecordLoc> {
        if index >= u64::from(header.length) {
            return Err(Error::IndexOutOfRange {
                index,
                len: u64::from(header.length),
            });
        }
        let index = index as u32;
        let loc = self.files.read_entry(index)?;
        let file_len = self.chunk_lens.get(u32::from(loc.chunk_id));
        loaderx_format::validate_entry(index, &loc, header, file_len)
            .map_err(|e| Error::format(self.file_path(FileId::Meta), e))?;
        Ok(loc)
    }

    /// Logical size of each record in `idxs`, written to `out`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `out` and `idxs` differ in length,
    /// [`Error::IndexOutOfRange`], or a damaged entry or file.
    pub fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        if out.len() != idxs.len() {
            return Err(Error::LengthMismatch {
                what: "lengths output",
                expected: idxs.len(),
                found: out.len(),
            });
        }
        self.check_usable()?;
        let header = self.header();
        self.check_meta_len(&header)?;
        for (&idx, slot) in idxs.iter().zip(out.iter_mut()) {
            *slot = self.entry(idx, &header)?.logic_length;
        }
        Ok(())
    }

    /// Storage usage. Scans the table, so it is a diagnostic, not a per-batch call.
    ///
    /// # Errors
    /// When `meta.zr` cannot be read or was cut short.
    pub fn stats(&self) -> Result<Stats> {
        let _writer = self
            .append_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.check_usable()?;
        let header = self.header();
        self.check_meta_len(&header)?;
        let mut live_bytes = 0u64;
        self.files.for_each_entry(header.length, |loc| {
            live_bytes += u64::from(loc.phys_length);
        })?;
        let chunk_bytes =
            u64::from(header.tail_chunk) * self.capacity + u64::from(header.tail_offset);
        Ok(Stats {
            records: u64::from(header.length),
            live_bytes,
            chunk_bytes,
            reclaimable: chunk_bytes.saturating_sub(live_bytes),
        })
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
        let _writer = self
            .append_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.commit()
    }

    /// [`sync`](Self::sync), with the append lock held (or `&mut self`).
    pub(crate) fn commit(&self) -> Result<()> {
        self.check_usable()?;
        let mut committed = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let header = self.header();
        if header == *committed {
            return Ok(());
        }
        if let Some(lock) = &self.lock {
            lock.writer()?;
        }
        let first = u32::from(committed.tail_chunk);
        self.files
            .sync_all((first..=u32::from(header.tail_chunk)).map(FileId::Chunk))?;
        if header.tail_chunk > committed.tail_chunk {
            // New chunk files: their names must be durable before a durable
            // header names them.
            self.files.sync_dir()?;
        }
        self.files.sync(FileId::Meta)?;
        self.files.write_header(&header, "write header")?;
        self.files.sync(FileId::Meta)?;
        *committed = header;
        Ok(())
    }

    /// Runs `f` with every other handle, in any process, shut out (the
    /// cross-process half of `&mut self`): [`Error::Locked`] while another
    /// handle has the store open. Pending appends are committed first, so
    /// `f` starts from a durable state.
    pub(crate) fn exclusively<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        let lock = self.lock.take();
        let result = match &lock {
            Some(lock) => lock.exclusive(|| self.commit().and_then(|()| f(self))),
            None => self.commit().and_then(|()| f(self)),
        };
        self.lock = lock;
        result
    }

    /// Whether appends are waiting for a commit.
    pub(crate) fn has_pending(&self) -> bool {
        let committed = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.header() != *committed
    }

    /// Checks the whole store: every table entry against the format's rules
    /// and the chunk files' lengths, and that every record decodes.
    ///
    /// # Errors
    /// The first problem found: [`Error::Corrupt`] naming the entry, or
    /// [`Error::NotAStore`] for a damaged header.
    pub fn verify(&self) -> Result<()> {
        // The published header, not the bytes on disk (which a concurrent
        // commit may be rewriting); files measured now, so one cut short
        // behind our back gives an error, not a SIGBUS.
        let header = self.header();
        self.check_meta_len(&header)?;
        let lens = (0..=header.tail_chunk)
            .map(|c| self.current_chunk_len(c))
            .collect::<Result<Vec<u64>>>()?;
        let n = header.length as usize;
        parallel::for_ranges(n, u64::MAX, |range| {
            let mut scratch = Vec::new();
            for i in range {
                let loc = self.entry(i as u64, &header)?;
                let have = lens[usize::from(loc.chunk_id)];
                if loc.end() > have {
                    return Err(Error::Corrupt {
                        path: self.file_path(FileId::Chunk(u32::from(loc.chunk_id))),
                        entry: i as u64,
                        reason: format!(
                            "bytes end at {}, past the end of chunk file {}.zr ({have} bytes)",
                            loc.end(),
                            loc.chunk_id
                        ),
                    });
                }
                scratch.resize(loc.logic_length as usize, 0);
                self.decode_into(i as u64, &loc, &mut scratch)?;
            }
            Ok(())
        })
    }

    /// Decodes record `index` (whose validated entry is `loc`) into `out`,
    /// which is exactly `loc.logic_length` bytes.
    pub(crate) fn decode_into(&self, index: u64, loc: &RecordLoc, out: &mut [u8]) -> Result<()> {
        let codec = CodecId::from_tag(loc.codec).expect("validated entries have known codecs");
        let file = FileId::Chunk(u32::from(loc.chunk_id));
        self.files
            .with_bytes(
                file,
                u64::from(loc.offset),
                loc.phys_length as usize,
                "read",
                |src| codec.decode(src, out),
            )?
            .map_err(|e| Error::Corrupt {
                path: self.file_path(file),
                entry: index,
                reason: format!("{codec} record: {e}"),
            })
    }
}

impl<C: Codec, S: Storage> Drop for Store<C, S> {
    /// Commits pending appends, like a file's close; errors are lost here, so
    /// call [`sync`](Store::sync) to see them. A forked child's copy of a
    /// handle never commits: the appends it would publish are its parent's.
    fn drop(&mut self) {
        if self.owner == std::process::id()
            && !self.is_read_only()
            && !self.poisoned.load(Ordering::Acquire)
            && self.has_pending()
        {
            let _ = self.commit();
        }
    }
}
