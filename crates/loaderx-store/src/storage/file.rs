//! Files in a directory: reads through shared read-only memory maps, writes
//! with positioned writes (`pwrite` on Unix, `WriteFile` at an offset on
//! Windows). The mmap contract is on [`FileStorage`]; what differs per
//! platform is in [`View`] and [`write_all_at`].
//!
//! Unsafe here (allowed by name in `storage/mod.rs`): slices over memory
//! maps. Sound because (a) a range is lent only when it lies inside a
//! mapping the lending call holds alive, (b) the engine asks only for
//! ranges it checked against the file's known length, so no page lies past
//! the end of the file (no `SIGBUS`), and (c) nobody writes bytes while
//! they are lent: the engine's appends write past the committed frontier,
//! compaction needs `&mut` and every other handle closed, and programs
//! outside loaderx must not change a store's files while it is open (the
//! mmap contract, [`FileStorage`]). Besides, `sync_file_range` (Linux) is
//! a plain system call on a descriptor the file keeps open.

use std::{
    fs::{self, File, OpenOptions},
    io,
    path::{Path, PathBuf},
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use memmap2::MmapRaw;

use super::{FileId, Storage, read_only_error};
use loaderx_format::CHUNK_CAPACITY;

use crate::slots::Slots;

/// Bytes of address space `meta.zr` is mapped over: room for the v1 table
/// and for a v2 table of about 9.8 billion 28-byte entries. Only the pages
/// in use are ever touched.
pub const META_EXTENT: u64 = 1 << 38;

/// An open file and its read-only shared map(s).
#[derive(Debug)]
struct Mapped {
    file: File,
    view: View,
    /// The file's inotify watch (read-only handles on Linux, local file
    /// systems): its length is asked again only after an event. Made by
    /// the process that opened the file.
    #[cfg(target_os = "linux")]
    watch: Option<super::watch::Watch>,
    /// In a process forked since (whose parent's watch is of the parent's
    /// instance, which it must not read): the watch it made for itself on
    /// its first check, with its [`generation`](crate::fork::generation).
    /// Only tried, never waited for (a thread of the parent may have held
    /// it at the fork).
    #[cfg(target_os = "linux")]
    forked: std::sync::Mutex<Option<(u64, Option<super::watch::Watch>)>>,
}

/// Read-only shared maps of one file, in one of two modes.
///
/// * [`Extent`](View::Extent) (Unix; checked on Linux x86-64): one map of
///   the file's whole possible extent, made at open. A map may reach past
///   the end of the file there; only the pages read must exist, so the file
///   grows under the map and no map is ever redone.
/// * [`Growing`](View::Growing): each map covers the file as long as it was
///   when made; a read past the newest map makes a new one over the file's
///   current length. A map is shared (reference-counted) by the reads that
///   use it, and an older one goes away when the last read through it
///   ends, so a reader of a store that grows a little at a time holds one
///   map, not one per growth. Always used on Windows (checked under Wine),
///   where a map cannot reach past the end of a file opened for reading and
///   a mapped file can be neither truncated nor deleted. Used on Unix when
///   the extent-wide map is refused for want of address space (kernels with
///   a 39-bit address space: 512 GiB, some aarch64 configurations; qemu-user,
///   which books every guest page), or when `LOADERX_GROWING_MAPS=1` says
///   so ([`growing_only`]; checked on aarch64 under qemu-user).
#[derive(Debug)]
enum View {
    #[cfg(not(windows))]
    Extent(MmapRaw),
    Growing(std::sync::RwLock<Option<Arc<MmapRaw>>>),
}

impl View {
    fn new(file: &File, extent: u64, len: u64) -> io::Result<View> {
        #[cfg(not(windows))]
        if !growing_only() {
            let whole = memmap2::MmapOptions::new()
                .len(usize::try_from(extent).map_err(io::Error::other)?)
                .map_raw_read_only(file);
            match whole {
                Ok(map) => return Ok(View::Extent(map)),
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {}
                Err(e) => return Err(e),
            }
        }
        let _ = extent;
        let first = Self::map_len(file, len)?;
        Ok(View::Growing(std::sync::RwLock::new(Some(Arc::new(first)))))
    }

    /// A map of the first `len` bytes of `file`.
    fn map_len(file: &File, len: u64) -> io::Result<MmapRaw> {
        memmap2::MmapOptions::new()
            .len(usize::try_from(len).map_err(io::Error::other)?)
            .map_raw_read_only(file)
    }

    /// Calls `f` with the address of byte `offset` of the file, valid for
    /// `len` bytes while `f` runs; `None` (and `f` is not called) when the
    /// range lies outside what can be mapped (the extent, or the file's
    /// current length).
    // On Windows `Growing` is the only mode, so the match below is a `let`.
    #[cfg_attr(windows, allow(clippy::infallible_destructuring_match))]
    fn with_address<R>(
        &self,
        file: &File,
        offset: u64,
        len: usize,
        f: impl FnOnce(*const u8) -> R,
    ) -> Option<R> {
        let end = offset.checked_add(len as u64)?;
        let within = |map: &MmapRaw| -> Option<*const u8> {
            if end > map.len() as u64 {
                return None;
            }
            let at = usize::try_from(offset).ok()?;
            // SAFETY: `offset + len` is inside this mapping (checked above).
            Some(unsafe { map.as_ptr().add(at) })
        };
        let maps = match self {
            #[cfg(not(windows))]
            View::Extent(map) => return within(map).map(f),
            View::Growing(maps) => maps,
        };
        // The newest map if it covers the range, else a new one over the
        // file as long as it is now; either way held by this read.
        let covering = |slot: &Option<Arc<MmapRaw>>| {
            slot.as_ref()
                .filter(|map| within(map).is_some())
                .map(Arc::clone)
        };
        let newest = covering(
            &maps
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let held = if let Some(map) = newest {
            map
        } else {
            let mut slot = maps
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(map) = covering(&slot) {
                map
            } else {
                let now = file.metadata().ok()?.len();
                if end > now {
                    return None;
                }
                let map = Arc::new(Self::map_len(file, now).ok()?);
                *slot = Some(Arc::clone(&map));
                map
            }
        };
        // `held` keeps the map alive until `f` returns.
        within(&held).map(f)
    }

    /// Drops the growing map so the file can be truncated or removed
    /// (Windows refuses both while a map exists); the next read maps it
    /// again. Under `&mut`, so no read holds a map. An extent-wide map
    /// stays: Unix allows truncating a mapped file.
    fn reset(&mut self) {
        match self {
            #[cfg(not(windows))]
            View::Extent(_) => {}
            View::Growing(slot) => {
                *slot
                    .get_mut()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            }
        }
    }
}

/// Whether the environment variable `LOADERX_GROWING_MAPS` (read once) is
/// set to `1`: every file is then mapped over its length ([`View::Growing`])
/// even where the extent-wide map would be granted. For emulators:
/// qemu-user keeps bookkeeping for every page of every map it was ever
/// asked for, so a process that opens stores over and over (4 GiB of
/// address space per chunk file each time) ran out of memory under it,
/// although nothing was touched. `cargo xtask cross-test aarch64` sets it.
#[cfg(not(windows))]
fn growing_only() -> bool {
    static VALUE: OnceLock<bool> = OnceLock::new();
    *VALUE.get_or_init(|| std::env::var("LOADERX_GROWING_MAPS").is_ok_and(|v| v.trim() == "1"))
}

/// Writes all of `bytes` at `offset` of `file` with `pwrite`, which leaves
/// the file position alone. Checked on Linux.
#[cfg(unix)]
fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

/// Writes all of `bytes` at `offset` of `file` with `WriteFile` at an
/// offset, which also moves the handle's position; nothing here reads or
/// writes through that position. Checked under Wine.
#[cfg(windows)]
fn write_all_at(file: &File, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !bytes.is_empty() {
        match file.seek_write(bytes, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                bytes = &bytes[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes to a chunk file of at least this many bytes start their writeback
/// at once ([`start_writeback`]).
const EARLY_WRITEBACK_BYTES: usize = 1 << 20;

/// Asks the kernel to start writing `len` bytes at `offset` of `file` to the
/// device now, without waiting: a large append's data then goes to disk
/// while the next window is encoded and copied, and the `fsync` of its
/// commit waits only for what is still in flight, where otherwise all of it
/// would start there. Advice only: durability still comes from the commit's
/// sync, and a refusal (a file system without writeback, as tmpfs) changes
/// nothing. Linux (`sync_file_range`); elsewhere nothing. Checked on Linux.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: usize) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain system call on a descriptor `file` keeps open for the
    // call; it reads no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: usize) {}

/// Fills `buf` from `offset` of `file` with `pread`, which leaves the file
/// position alone. Checked on Linux.
#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Fills `buf` from `offset` of `file` with `ReadFile` at an offset, which
/// also moves the handle's position; nothing here reads or writes through
/// that position. Checked under Wine.
#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A store's files in a directory on the local file system.
///
/// Each file is mapped read-only and shared; on Unix over its whole possible
/// extent (4 GiB per chunk, the full size of `meta.zr`), so a growing file
/// never needs a remap, on Windows (and on Unix where that much address
/// space is refused) over its current length, remapped when a read goes
/// further. Writes go through positioned writes, which the page cache makes
/// visible to the maps on both.
///
/// # The mmap contract
/// A file changed underneath a mapping by another program (truncated,
/// rewritten, replaced) is undefined behaviour for every reader of that
/// mapping, and a read of a mapped page past the end of the file raises
/// `SIGBUS`. Users uphold their side by not modifying a store's files from
/// outside loaderx while it is open. The engine upholds its side and
/// contains what it can:
///
/// * [`with_bytes`](Storage::with_bytes) is only asked for ranges validated
///   against the file lengths the engine knows (measured at open, grown by
///   its own writes), and every gather, `lengths` call and append first
///   re-checks the lengths of `meta.zr` and of the chunk files it touches
///   with `fstat`, so a file cut short behind its back is reported as an
///   error rather than read past its end;
/// * its own writes touch only bytes no reader can reach (past the committed
///   frontier) until they are committed, and delete and compaction need
///   exclusive access (`&mut Store`);
/// * across processes every handle holds a shared lock on `meta.zr`, and
///   compaction, which moves bytes other processes may have mapped, runs only
///   once it holds that lock exclusively.
///
/// A rewrite in place that keeps a file's length cannot be detected.
#[derive(Debug)]
pub struct FileStorage {
    dir: PathBuf,
    read_only: bool,
    meta: OnceLock<Mapped>,
    undo: OnceLock<Mapped>,
    chunks: Slots<OnceLock<Mapped>>,
    chunk_extent: u64,
}

impl FileStorage {
    /// Storage for the store in `dir`, with chunk files of up to 4 GiB.
    /// Opens nothing yet.
    pub fn new(dir: impl Into<PathBuf>, read_only: bool) -> FileStorage {
        FileStorage::with_chunk_capacity(dir, read_only, CHUNK_CAPACITY)
    }

    /// Storage whose chunk files hold up to `chunk_capacity` bytes (the
    /// extent each is mapped over).
    pub fn with_chunk_capacity(
        dir: impl Into<PathBuf>,
        read_only: bool,
        chunk_capacity: u64,
    ) -> FileStorage {
        FileStorage {
            dir: dir.into(),
            read_only,
            meta: OnceLock::new(),
            undo: OnceLock::new(),
            chunks: Slots::new(),
            chunk_extent: chunk_capacity.min(CHUNK_CAPACITY),
        }
    }

    /// The slot of `file`, allocating it: only for files that exist (the
    /// caller opened them), so a chunk id a damaged table names allocates
    /// nothing.
    fn slot(&self, file: FileId) -> &OnceLock<Mapped> {
        match file {
            FileId::Meta => &self.meta,
            FileId::Undo => &self.undo,
            FileId::Chunk(id) => self.chunks.get(id),
        }
    }

    /// The slot of `file`, if it was ever allocated.
    fn find(&self, file: FileId) -> Option<&OnceLock<Mapped>> {
        match file {
            FileId::Meta => Some(&self.meta),
            FileId::Undo => Some(&self.undo),
            FileId::Chunk(id) => self.chunks.peek(id),
        }
    }

    fn slot_mut(&mut self, file: FileId) -> Option<&mut OnceLock<Mapped>> {
        match file {
            FileId::Meta => Some(&mut self.meta),
            FileId::Undo => Some(&mut self.undo),
            FileId::Chunk(id) => self.chunks.peek_mut(id),
        }
    }

    fn mapped(&self, file: FileId) -> io::Result<&Mapped> {
        self.find(file)
            .and_then(OnceLock::get)
            .ok_or_else(|| not_open(file))
    }

    fn extent(&self, file: FileId) -> u64 {
        match file {
            FileId::Meta | FileId::Undo => META_EXTENT,
            FileId::Chunk(_) => self.chunk_extent,
        }
    }
}

impl Storage for FileStorage {
    fn location(&self) -> &Path {
        &self.dir
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn open_file(&self, file: FileId, create: bool, create_len: u64) -> io::Result<Option<u64>> {
        if let Some(m) = self.find(file).and_then(OnceLock::get) {
            return m.file.metadata().map(|md| Some(md.len()));
        }
        let path = self.dir.join(file.file_name());
        let opened = OpenOptions::new()
            .read(true)
            .write(!self.read_only)
            .open(&path);
        let f = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create && !self.read_only => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)?;
                if create_len > 0 {
                    f.set_len(create_len)?;
                }
                f
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let md = f.metadata()?;
        if !md.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        // Only validated ranges are ever read through the map (see `View`
        // for how far it reaches on each platform).
        let len = md.len();
        let view = View::new(&f, self.extent(file), len)?;
        // Only the table and chunk files of read-only handles: a writer's
        // own appends would raise an event per write.
        #[cfg(target_os = "linux")]
        let watch = (self.read_only && matches!(file, FileId::Chunk(_) | FileId::Meta))
            .then(|| super::watch::Watch::new(&f))
            .flatten();
        let _ = self.slot(file).set(Mapped {
            file: f,
            view,
            #[cfg(target_os = "linux")]
            watch,
            #[cfg(target_os = "linux")]
            forked: std::sync::Mutex::new(None),
        });
        Ok(Some(len))
    }

    fn current_len(&self, file: FileId) -> io::Result<u64> {
        // `statx`, not a seek to the end: a seek costs half as much from
        // one thread, but takes a lock on the open file that the loader's
        // threads and forked workers would share (docs/ARCHITECTURE.md).
        Ok(self.mapped(file)?.file.metadata()?.len())
    }

    #[cfg(target_os = "linux")]
    fn current_len_since(&self, file: FileId, drained: &super::Drained) -> io::Result<u64> {
        let m = self.mapped(file)?;
        let checked = |watch: &super::watch::Watch| -> io::Result<u64> {
            if let Some(len) = watch.unchanged(drained) {
                return Ok(len);
            }
            let len = m.file.metadata()?.len();
            watch.record(drained, len);
            Ok(len)
        };
        match &m.watch {
            Some(watch) if watch.is_here() => checked(watch),
            // Watched by the process this one was forked from: watch it in
            // this one (once; where that fails, `statx` each time).
            Some(_) => {
                let Ok(mut forked) = m.forked.try_lock() else {
                    return Ok(m.file.metadata()?.len());
                };
                let here = crate::fork::generation();
                if forked.as_ref().is_none_or(|(made_in, _)| *made_in != here) {
                    *forked = Some((here, super::watch::Watch::new(&m.file)));
                }
                match forked.as_ref().and_then(|(_, watch)| watch.as_ref()) {
                    Some(watch) => checked(watch),
                    None => Ok(m.file.metadata()?.len()),
                }
            }
            None => Ok(m.file.metadata()?.len()),
        }
    }

    fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let m = self.mapped(file)?;
        let run = |start: *const u8| {
            // SAFETY: the range lies inside a mapping that stays alive while
            // this runs (`with_address` checked the range and holds the map).
            // The caller guarantees it lies inside the file's real length, so
            // no page of it is past EOF, and the engine never writes bytes
            // that a reader can reach (see the module docs), so they do not
            // change while borrowed.
            let bytes = unsafe { std::slice::from_raw_parts(start, len) };
            f(bytes)
        };
        m.view
            .with_address(&m.file, offset, len, run)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("range {offset}+{len} outside {}", file.file_name()),
                )
            })
    }

    fn copy_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        read_exact_at(&self.mapped(file)?.file, buf, offset)
    }

    fn write_at(&self, file: FileId, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if self.read_only {
            return Err(read_only_error());
        }
        let target = &self.mapped(file)?.file;
        write_all_at(target, bytes, offset)?;
        // Records only: table and header writes are small and rewritten.
        if matches!(file, FileId::Chunk(_)) && bytes.len() >= EARLY_WRITEBACK_BYTES {
            start_writeback(target, offset, bytes.len());
        }
        Ok(())
    }

    fn sync(&self, file: FileId) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        match self.find(file).and_then(OnceLock::get) {
            Some(m) => m.file.sync_data(),
            None => Ok(()),
        }
    }

    /// Syncs the files on several threads at once: the device queues their
    /// flushes together instead of waiting for each in turn (a commit of a
    /// store with write lanes syncs one chunk file per lane).
    fn sync_many(&self, files: &[FileId]) -> Result<(), (FileId, io::Error)> {
        const THREADS: usize = 8;
        if files.len() <= 1 {
            return files
                .iter()
                .try_for_each(|&file| self.sync(file).map_err(|e| (file, e)));
        }
        let threads = files.len().min(THREADS);
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || {
                        files
                            .iter()
                            .skip(t)
                            .step_by(threads)
                            .try_for_each(|&file| self.sync(file).map_err(|e| (file, e)))
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect::<Result<Vec<()>, _>>()
                .map(|_| ())
        })
    }

    fn sync_dir(&self) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        sync_dir(&self.dir)
    }

    fn create_meta(&self, head: &[u8], len: u64) -> io::Result<bool> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        if self.read_only {
            return Err(read_only_error());
        }
        let meta = self.dir.join(FileId::Meta.file_name());
        let temp = self.dir.join(format!(
            "{}.{}-{}.new",
            FileId::Meta.file_name(),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let made = (|| {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&temp)?;
            f.set_len(len)?;
            write_all_at(&f, head, 0)?;
            f.sync_all()?;
            // A hard link never replaces an existing name: of two creators,
            // exactly one wins, and the loser opens the winner's store.
            match fs::hard_link(&temp, &meta) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        })();
        let removed = fs::remove_file(&temp);
        let created = made?;
        removed?;
        sync_dir(&self.dir)?;
        Ok(created)
    }

    fn truncate(&mut self, file: FileId, len: u64) -> io::Result<()> {
        if self.read_only {
            return Err(read_only_error());
        }
        // Windows refuses to cut a mapped file: let go of the maps first
        // (`&mut self`: no slice into them is alive). Unix keeps its map.
        let mapped = self
            .slot_mut(file)
            .and_then(OnceLock::get_mut)
            .ok_or_else(|| not_open(file))?;
        mapped.view.reset();
        mapped.file.set_len(len)
    }

    fn exists(&self, file: FileId) -> io::Result<bool> {
        match fs::symlink_metadata(self.dir.join(file.file_name())) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn chunk_ids(&self) -> io::Result<Vec<u32>> {
        let mut ids = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".zr")) else {
                continue;
            };
            // Only canonical decimal names: "007.zr" is not chunk 7.
            if let Ok(id) = stem.parse::<u32>()
                && id.to_string() == stem
            {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    fn remove(&mut self, file: FileId) -> io::Result<()> {
        if self.read_only {
            return Err(read_only_error());
        }
        // The map and handle go first: Windows cannot delete a mapped file
        // (checked under Wine; on Unix the order does not matter).
        drop(self.slot_mut(file).and_then(OnceLock::take));
        match fs::remove_file(self.dir.join(file.file_name())) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn not_open(file: FileId) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} is not open", file.file_name()),
    )
}

/// Makes the entries of `dir` durable. Checked on Linux; on Windows a
/// directory cannot be opened as a file and NTFS journals its entries, so
/// there is nothing to do.
fn sync_dir(dir: &Path) -> io::Result<()> {
    if cfg!(unix) {
        File::open(dir)?.sync_all()
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_of(view: &View) -> Option<Arc<MmapRaw>> {
        match view {
            View::Growing(slot) => slot.read().unwrap().clone(),
            #[cfg(not(windows))]
            View::Extent(_) => panic!("not a growing view"),
        }
    }

    /// Reads bytes `offset..offset + len` through `view`, or `None`.
    fn read(view: &View, file: &File, offset: u64, len: usize) -> Option<Vec<u8>> {
        view.with_address(file, offset, len, |p| {
            // SAFETY: `with_address` holds a map covering the range.
            unsafe { std::slice::from_raw_parts(p, len) }.to_vec()
        })
    }

    #[test]
    fn a_growing_view_keeps_one_map_and_an_older_one_only_while_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, [1u8; 4096]).unwrap();
        let file = File::open(&path).unwrap();
        let view = View::Growing(std::sync::RwLock::new(Some(Arc::new(
            View::map_len(&file, 4096).unwrap(),
        ))));
        assert_eq!(read(&view, &file, 0, 4096), Some(vec![1u8; 4096]));
        assert_eq!(read(&view, &file, 4000, 200), None, "past the end");

        for step in 2..=20u8 {
            let mut f = OpenOptions::new().append(true).open(&path).unwrap();
            std::io::Write::write_all(&mut f, &[step; 4096]).unwrap();
            let len = u64::from(step) * 4096;
            // A read of the first page holds the map it went through while a
            // read of the new page (nested inside it) replaces that map.
            let nested = view.with_address(&file, 0, 4096, |first| {
                let new = read(&view, &file, len - 4096, 4096);
                // SAFETY: the outer read still holds the older map.
                let again = unsafe { std::slice::from_raw_parts(first, 4096) }.to_vec();
                (new, again)
            });
            assert_eq!(nested, Some((Some(vec![step; 4096]), vec![1u8; 4096])));
            // Afterwards the view holds one map, over the whole file, and
            // nothing else does.
            let map = slot_of(&view).unwrap();
            assert_eq!(map.len() as u64, len);
            assert_eq!(Arc::strong_count(&map), 2, "the view's and this one");
        }
    }
}
