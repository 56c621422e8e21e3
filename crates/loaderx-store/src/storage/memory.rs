//! Store files kept in memory, for tests: crash simulation and fault injection.

use std::{
    collections::BTreeMap,
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard},
};

use super::{FileId, Storage, read_only_error};

#[derive(Debug, Clone, Default)]
struct MemFile {
    /// Logical length; bytes past `data.len()` read as zeros (sparse).
    len: u64,
    data: Vec<u8>,
    /// What the last `sync` made durable; `None` if never synced.
    durable: Option<(u64, Vec<u8>)>,
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<FileId, MemFile>,
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
    /// everything written so far.
    #[must_use]
    pub fn after_process_crash(&self) -> MemStorage {
        let files = self.lock().files.clone();
        self.survivor(files)
    }

    /// Independent storage holding what power loss would leave: only what
    /// `sync` made durable (a file never synced is gone).
    #[must_use]
    pub fn after_power_loss(&self) -> MemStorage {
        let files = self
            .lock()
            .files
            .iter()
            .filter_map(|(id, f)| {
                let (len, data) = f.durable.clone()?;
                Some((
                    *id,
                    MemFile {
                        len,
                        data: data.clone(),
                        durable: Some((len, data)),
                    },
                ))
            })
            .collect();
        self.survivor(files)
    }

    /// Independent, writable storage holding `files` (what survived a crash),
    /// with no faults armed.
    fn survivor(&self, files: BTreeMap<FileId, MemFile>) -> MemStorage {
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
        let mut out = f.data.clone();
        out.resize(f.len as usize, 0);
        Some(out)
    }

    /// Replaces `file` with `bytes` (for building damaged stores in tests).
    pub fn put(&self, file: FileId, bytes: &[u8]) {
        self.lock().files.insert(
            file,
            MemFile {
                len: bytes.len() as u64,
                data: bytes.to_vec(),
                durable: None,
            },
        );
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
            return Ok(Some(f.len));
        }
        if !create || self.read_only {
            return Ok(None);
        }
        self.mutate(&mut st, "create")?;
        st.files.insert(
            file,
            MemFile {
                len: create_len,
                ..MemFile::default()
            },
        );
        Ok(Some(create_len))
    }

    fn current_len(&self, file: FileId) -> io::Result<u64> {
        let st = self.lock();
        st.files
            .get(&file)
            .map(|f| f.len)
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
        let mf = st.files.get(&file).ok_or_else(|| missing(file))?;
        let end = offset.saturating_add(len as u64);
        if end > mf.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read past the end of {}", file.file_name()),
            ));
        }
        let (start, end) = (offset as usize, end as usize);
        if end <= mf.data.len() {
            return Ok(f(&mf.data[start..end]));
        }
        let mut buf = vec![0u8; len];
        if start < mf.data.len() {
            let have = mf.data.len() - start;
            buf[..have].copy_from_slice(&mf.data[start..]);
        }
        Ok(f(&buf))
    }

    fn write_at(&self, file: FileId, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut st = self.lock();
        self.mutate(&mut st, "write")?;
        let mf = st.files.get_mut(&file).ok_or_else(|| missing(file))?;
        let end = offset as usize + bytes.len();
        if mf.data.len() < end {
            mf.data.resize(end, 0);
        }
        mf.data[offset as usize..end].copy_from_slice(bytes);
        mf.len = mf.len.max(end as u64);
        Ok(())
    }

    fn sync(&self, file: FileId) -> io::Result<()> {
        let mut st = self.lock();
        if self.read_only {
            return Ok(());
        }
        self.mutate(&mut st, "sync")?;
        let mf = st.files.get_mut(&file).ok_or_else(|| missing(file))?;
        mf.durable = Some((mf.len, mf.data.clone()));
        Ok(())
    }

    fn truncate(&mut self, file: FileId, len: u64) -> io::Result<()> {
        let mut st = self.lock();
        self.mutate(&mut st, "truncate")?;
        let mf = st.files.get_mut(&file).ok_or_else(|| missing(file))?;
        mf.len = len;
        mf.data.truncate(len as usize);
        Ok(())
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
        st.files.remove(&file);
        Ok(())
    }
}
