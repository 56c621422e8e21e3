//! Store files kept in memory, for tests: crash simulation and fault injection.

use std::{
    borrow::Cow,
    collections::BTreeMap,
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard},
};

use super::{FileId, Storage, read_only_error};

/// Granularity of the power-loss model: a page of a file reaches the disk
/// whole or not at all, in any order with the file's other pages.
pub const PAGE: usize = 4096;

/// The bytes and length of a file, as the page cache or the disk holds them.
#[derive(Debug, Clone, Default)]
struct Image {
    /// Logical length; bytes past `data.len()` read as zeros (sparse).
    len: u64,
    data: Vec<u8>,
}

impl Image {
    fn page(&self, index: u64) -> Vec<u8> {
        let start = (index as usize * PAGE).min(self.data.len());
        let end = (start + PAGE).min(self.data.len());
        let mut page = self.data[start..end].to_vec();
        page.resize(PAGE, 0);
        page
    }

    fn put_page(&mut self, index: u64, page: &[u8]) {
        let start = index as usize * PAGE;
        if self.data.len() < start + PAGE {
            self.data.resize(start + PAGE, 0);
        }
        self.data[start..start + PAGE].copy_from_slice(page);
    }

    fn set_len(&mut self, len: u64) {
        self.len = len;
        self.data.truncate(len as usize);
    }
}

/// A change since the file's last `sync`, as the disk could receive it.
#[derive(Debug, Clone)]
enum Change {
    /// Page `index` as it was right after a write.
    Page { index: u64, bytes: Vec<u8> },
    /// The file's length right after a write or a truncation.
    Len(u64),
}

#[derive(Debug, Clone, Default)]
struct MemFile {
    /// What readers see (the page cache).
    now: Image,
    /// What the disk holds: the state at the last `sync`.
    disk: Image,
    /// Changes since the last `sync`, oldest first.
    pending: Vec<Change>,
    /// Changes a failed `sync` dropped: as on Linux, whose `fsync` marks
    /// the pages it could not write clean, no later `sync` writes them, but
    /// power loss may still find any of them on the disk.
    lost: Vec<Change>,
    /// Whether the file's directory entry is durable.
    named: bool,
}

impl MemFile {
    fn new(len: u64) -> MemFile {
        MemFile {
            now: Image {
                len,
                data: Vec::new(),
            },
            disk: Image::default(),
            pending: vec![Change::Len(len)],
            lost: Vec::new(),
            named: false,
        }
    }

    /// A file whose content `image` and name are both durable.
    fn durable(image: Image) -> MemFile {
        MemFile {
            now: image.clone(),
            disk: image,
            pending: Vec::new(),
            lost: Vec::new(),
            named: true,
        }
    }

    /// What the disk may hold after power loss, one `choose(n)` (an index
    /// in `0..n`, 0 being the durable state) per page changed and one for
    /// the length.
    fn survivor(&self, choose: &mut dyn FnMut(usize) -> usize) -> Image {
        let mut pages: BTreeMap<u64, Vec<&[u8]>> = BTreeMap::new();
        let mut lens = vec![self.disk.len];
        for change in self.lost.iter().chain(&self.pending) {
            match change {
                Change::Page { index, bytes } => pages.entry(*index).or_default().push(bytes),
                Change::Len(len) => lens.push(*len),
            }
        }
        let mut image = self.disk.clone();
        for (index, versions) in pages {
            let pick = choose(versions.len() + 1);
            if pick > 0 {
                image.put_page(index, versions[pick - 1]);
            }
        }
        let len = lens[choose(lens.len())];
        image.set_len(len);
        image
    }
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<FileId, MemFile>,
    /// Files removed since the last `sync_dir`, as the disk last held them:
    /// power loss may bring them back.
    ghosts: BTreeMap<FileId, Image>,
    /// Mutating operations left before every further one fails.
    fail_after: Option<u64>,
    /// Whether only that one operation fails (a transient error).
    fail_once: bool,
    /// Mutating operations performed so far.
    ops: u64,
}

/// In-memory storage. Clones share the same files, so a store can be dropped
/// and reopened on the same bytes.
#[derive(Debug, Clone)]
pub struct MemStorage {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    read_only: bool,
}

impl Default for MemStorage {
    fn default() -> Self {
        MemStorage::new()
    }
}

impl MemStorage {
    /// Empty storage.
    #[must_use]
    pub fn new() -> MemStorage {
        MemStorage {
            state: Arc::default(),
            path: PathBuf::from("<memory>"),
            read_only: false,
        }
    }

    /// A read-only handle on the same files.
    #[must_use]
    pub fn read_only(&self) -> MemStorage {
        MemStorage {
            read_only: true,
            ..self.clone()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes every mutating operation (write, sync, create, truncate, remove)
    /// fail once `ops` more of them have succeeded.
    pub fn fail_after(&self, ops: u64) {
        self.lock().fail_after = Some(ops);
    }

    /// Makes the one mutating operation after the next `ops` fail, and only it
    /// (a transient error: later operations succeed again).
    pub fn fail_once_after(&self, ops: u64) {
        let mut st = self.lock();
        st.fail_after = Some(ops);
        st.fail_once = true;
    }

    /// Stops injecting failures.
    pub fn clear_faults(&self) {
        let mut st = self.lock();
        st.fail_after = None;
        st.fail_once = false;
    }

    /// Mutating operations performed so far (to aim `fail_after`).
    #[must_use]
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Independent storage holding what a process crash would leave:
    /// everything written so far (the page cache survives).
    #[must_use]
    pub fn after_process_crash(&self) -> MemStorage {
        let files = self
            .lock()
            .files
            .iter()
            .map(|(id, f)| (*id, f.now.clone()))
            .collect();
        self.survivor(files)
    }

    /// Independent storage holding what power loss leaves when the disk got
    /// none of the unsynced changes: only what `sync` made durable, and only
    /// files whose directory entry `sync_dir` made durable.
    #[must_use]
    pub fn after_power_loss(&self) -> MemStorage {
        self.after_power_loss_with(&mut |_| 0)
    }

    /// Independent storage holding one of the states power loss may leave.
    /// Every page written since its file's last `sync` may or may not have
    /// reached the disk, in any version it had, independently of the others;
    /// so may each length change, and each creation or removal since the
    /// last `sync_dir`. `choose(n)` picks one of `n` possibilities (0 is
    /// always "nothing since the last sync survived"); calling this with
    /// every sequence of choices enumerates every state a real disk could
    /// leave, at page granularity.
    #[must_use]
    pub fn after_power_loss_with(&self, choose: &mut dyn FnMut(usize) -> usize) -> MemStorage {
        let st = self.lock();
        let mut files = BTreeMap::new();
        let ids: std::collections::BTreeSet<FileId> =
            st.files.keys().chain(st.ghosts.keys()).copied().collect();
        for id in ids {
            let ghost = st.ghosts.get(&id);
            let survivor = match st.files.get(&id) {
                Some(f) if f.named => Some(f.survivor(choose)),
                Some(f) => {
                    // The creation may be lost, bringing back what was
                    // removed before it, if anything.
                    match choose(2) {
                        0 => ghost.cloned(),
                        _ => Some(f.survivor(choose)),
                    }
                }
                None => match choose(2) {
                    0 => None,
                    _ => ghost.cloned(),
                },
            };
            if let Some(image) = survivor {
                files.insert(id, image);
            }
        }
        drop(st);
        self.survivor(files)
    }

    /// Independent, writable storage holding `files` (what survived a crash),
    /// all durable, with no faults armed.
    fn survivor(&self, files: BTreeMap<FileId, Image>) -> MemStorage {
        let files = files
            .into_iter()
            .map(|(id, image)| (id, MemFile::durable(image)))
            .collect();
        MemStorage {
            state: Arc::new(Mutex::new(State {
                files,
                ..State::default()
            })),
            path: self.path.clone(),
            read_only: false,
        }
    }

    /// The whole content of `file` (zeros for sparse parts), if it exists.
    #[must_use]
    pub fn contents(&self, file: FileId) -> Option<Vec<u8>> {
        let st = self.lock();
        let f = st.files.get(&file)?;
        let mut out = f.now.data.clone();
        out.resize(f.now.len as usize, 0);
        Some(out)
    }

    /// Replaces `file` with `bytes`, durably (for building damaged stores
    /// in tests).
    pub fn put(&self, file: FileId, bytes: &[u8]) {
        let image = Image {
            len: bytes.len() as u64,
            data: bytes.to_vec(),
        };
        self.lock().files.insert(file, MemFile::durable(image));
    }

    /// Counts a mutating operation, failing it if faults are due.
    fn mutate(&self, st: &mut State, what: &str) -> io::Result<()> {
        if self.read_only {
            return Err(read_only_error());
        }
        if let Some(left) = st.fail_after {
            if left == 0 {
                if st.fail_once {
                    st.fail_after = None;
                    st.fail_once = false;
                }
                return Err(io::Error::other(format!("injected failure on {what}")));
            }
            st.fail_after = Some(left - 1);
        }
        st.ops += 1;
        Ok(())
    }
}

/// `len` bytes of `file` at `offset` as it is now: borrowed, or zeros past
/// the bytes written (a file grown by its length alone).
fn lend(st: &State, file: FileId, offset: u64, len: usize) -> io::Result<Cow<'_, [u8]>> {
    let mf = &st.files.get(&file).ok_or_else(|| missing(file))?.now;
    let end = offset.saturating_add(len as u64);
    if end > mf.len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("read past the end of {}", file.file_name()),
        ));
    }
    let (start, end) = (offset as usize, end as usize);
    if end <= mf.data.len() {
        return Ok(Cow::Borrowed(&mf.data[start..end]));
    }
    let mut buf = vec![0u8; len];
    if start < mf.data.len() {
        let have = mf.data.len() - start;
        buf[..have].copy_from_slice(&mf.data[start..]);
    }
    Ok(Cow::Owned(buf))
}

fn missing(file: FileId) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} does not exist", file.file_name()),
    )
}

impl Storage for MemStorage {
    fn location(&self) -> &Path {
        &self.path
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn open_file(&self, file: FileId, create: bool, create_len: u64) -> io::Result<Option<u64>> {
        let mut st = self.lock();
        if let Some(f) = st.files.get(&file) {
            return Ok(Some(f.now.len));
        }
        if !create || self.read_only {
            return Ok(None);
        }
        self.mutate(&mut st, "create")?;
        st.files.insert(file, MemFile::new(create_len));
        Ok(Some(create_len))
    }

    fn current_len(&self, file: FileId) -> io::Result<u64> {
        let st = self.lock();
        st.files
            .get(&file)
            .map(|f| f.now.len)
            .ok_or_else(|| missing(file))
    }

    fn with_bytes<R>(
        &self,
        file: FileId,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let st = self.lock();
        Ok(f(&lend(&st, file, offset, len)?))
    }

    /// All ranges under one hold of the lock (`with_bytes` cannot be called
    /// while it lends: it holds the lock).
    fn with_many_bytes<R>(
        &self,
        ranges: &[(FileId, u64, usize)],
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Result<R, (FileId, io::Error)> {
        let st = self.lock();
        let lent = ranges
            .iter()
            .map(|&(file, offset, len)| lend(&st, file, offset, len).map_err(|e| (file, e)))
            .collect::<Result<Vec<_>, _>>()?;
        let slices: Vec<&[u8]> = lent.iter().map(|bytes| &**bytes).collect();
        Ok(f(&slices))
    }

    fn write_at(&self, file: FileId, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut st = self.lock();
        self.mutate(&mut st, "write")?;
        let mf = st.files.get_mut(&file).ok_or_else(|| missing(file))?;
        let end = offset as usize + bytes.len();
        if mf.now.data.len() < end {
            mf.now.data.resize(end, 0);
        }
        mf.now.data[offset as usize..end].copy_from_slice(bytes);
        if bytes.is_empty() {
            return Ok(());
        }
        let (first, last) = (offset / PAGE as u64, (end as u64 - 1) / PAGE as u64);
        for index in first..=last {
            let bytes = mf.now.page(index);
            mf.pending.push(Change::Page { index, bytes });
        }
        if end as u64 > mf.now.len {
            mf.now.len = end as u64;
            mf.pending.push(Change::Len(end as u64));
        }
        Ok(())
    }

    fn sync(&self, file: FileId) -> io::Result<()> {
        let mut st = self.lock();
        if self.read_only {
            return Ok(());
        }
        if let Err(e) = self.mutate(&mut st, "sync") {
            // Linux: the pages the failed fsync could not write are marked
            // clean; a retried fsync succeeds without writing them.
            if let Some(mf) = st.files.get_mut(&file) {
                let dropped = std::mem::take(&mut mf.pending);
                mf.lost.extend(dropped);
            }
            return Err(e);
        }
        let mf = st.files.get_mut(&file).ok_or_else(|| missing(file))?;
        if mf.lost.is_empty() {
            mf.disk = mf.now.clone();
        } else {
            // Only what was written since the failure reaches the disk.
            for change in &mf.pending {
                match change {
                    Change::Page { index, bytes } => mf.disk.put_page(*index, bytes),
                    Change::Len(len) => mf.disk.set_len(*len),
                }
            }
        }
        mf.pending.clear();
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut st = self.lock();
        if self.read_only {
            return Ok(());
        }
        self.mutate(&mut st, "sync directory")?;
        for f in st.files.values_mut() {
            f.named = true;
        }
        st.ghosts.clear();
        Ok(())
    }

    fn create_meta(&self, head: &[u8], len: u64) -> io::Result<bool> {
        let mut st = self.lock();
        if self.read_only {
            return Err(read_only_error());
        }
        self.mutate(&mut st, "create meta.zr")?;
        if st.files.contains_key(&FileId::Meta) {
            return Ok(false);
        }
        // Written and synced under a temporary name, linked, then the
        // directory synced: atomic and durable as a whole.
        let mut image = Image {
            len,
            data: head.to_vec(),
        };
        image.data.truncate(len as usize);
        st.files.insert(FileId::Meta, MemFile::durable(image));
        for f in st.files.values_mut() {
            f.named = true;
        }
        st.ghosts.clear();
        Ok(true)
    }

    fn truncate(&mut self, file: FileId, len: u64) -> io::Result<()> {
        let mut st = self.lock();
        self.mutate(&mut st, "truncate")?;
        let mf = st.files.get_mut(&file).ok_or_else(|| missing(file))?;
        mf.now.set_len(len);
        mf.pending.push(Change::Len(len));
        Ok(())
    }

    fn exists(&self, file: FileId) -> io::Result<bool> {
        Ok(self.lock().files.contains_key(&file))
    }

    fn chunk_ids(&self) -> io::Result<Vec<u32>> {
        Ok(self
            .lock()
            .files
            .keys()
            .filter_map(|f| match f {
                FileId::Chunk(id) => Some(*id),
                _ => None,
            })
            .collect())
    }

    fn remove(&mut self, file: FileId) -> io::Result<()> {
        let mut st = self.lock();
        self.mutate(&mut st, "remove")?;
        // A file whose creation was never made durable leaves no ghost of
        // its own (an older removed one may still come back).
        if let Some(f) = st.files.remove(&file)
            && f.named
        {
            st.ghosts.insert(file, f.disk);
        }
        Ok(())
    }
}
