//! Collections: many stores read as one (`docs/FORMAT.md`, part III).
//!
//! A collection is a directory of parts, each holding one v2 store per
//! column, and a manifest ([`loaderx_format::manifest`]) that lists the
//! columns and the parts in index order. [`Collection::open`] reads the
//! manifest only; a part's store is opened the first time a read touches
//! it, so opening costs the same for 10 parts as for 100,000. Where parts
//! come from is a [`PartOpener`]: local directories here
//! ([`LocalParts`]), any other storage by implementing the trait.
//!
//! A read splits its global indices by part (a binary search over the
//! parts' first indices), gathers each part's records with that part's
//! store, the parts in parallel on the store's pool, into one output in
//! the order asked. A batch whose records of each part sit side by side
//! in the output (any sorted or sequential batch) is gathered straight
//! into it; any other goes through one scratch buffer and one copy.
//!
//! [`commit`] checks finished parts and publishes a manifest atomically.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use loaderx_format::manifest::{
    Column as ColumnDef, MANIFEST_FILE, Manifest, ManifestError, Part, check_name,
};
use loaderx_format::v2::{Kind, Schema};

use crate::codec::Codec;
use crate::storage::{FileStorage, Storage};
use crate::{Deflate, Error, OpenOptions, Result, Store, parallel};

/// Opens the store of one column of one part.
pub trait PartOpener<C: Codec, S: Storage>: Send + Sync + fmt::Debug {
    /// The store of column `column` in part `part`, opened read-only.
    ///
    /// # Errors
    /// Whatever opening the store fails with.
    fn open(&self, part: &str, column: &str) -> Result<Store<C, S>>;

    /// Where part `part`'s column `column` lives, for error messages.
    fn location(&self, part: &str, column: &str) -> PathBuf;
}

/// Parts in directories under a local root: `<root>/<part>/<column>/`.
#[derive(Debug, Clone)]
pub struct LocalParts {
    root: PathBuf,
    options: OpenOptions,
}

impl LocalParts {
    /// Parts under `root`, opened with `options` (made read-only).
    #[must_use]
    pub fn new(root: impl Into<PathBuf>, mut options: OpenOptions) -> LocalParts {
        options.read_only = true;
        options.create = false;
        LocalParts {
            root: root.into(),
            options,
        }
    }
}

impl<C: Codec + Default> PartOpener<C, FileStorage> for LocalParts {
    fn open(&self, part: &str, column: &str) -> Result<Store<C, FileStorage>> {
        Store::open_with(
            PartOpener::<C, FileStorage>::location(self, part, column),
            self.options.clone(),
        )
    }

    fn location(&self, part: &str, column: &str) -> PathBuf {
        self.root.join(part).join(column)
    }
}

/// How many part stores (one column of one part each) a collection keeps
/// open unless told otherwise where the descriptor limit cannot be read
/// (elsewhere: [`default_max_open_parts`]).
///
/// A local part store holds a few file descriptors (its table and chunk
/// files) and its table's pages; a remote one its table pages and the
/// objects' recorded `ETag`s. 128 stays well inside the usual limit of
/// 1,024 descriptors per process, with room for the rest of a training
/// process.
pub const DEFAULT_MAX_OPEN_PARTS: usize = 128;

/// The fewest part stores [`default_max_open_parts`] keeps open.
pub const MIN_DEFAULT_OPEN_PARTS: usize = 16;

/// The most part stores [`default_max_open_parts`] keeps open.
pub const MAX_DEFAULT_OPEN_PARTS: usize = 4096;

/// How many part stores a collection keeps open unless told otherwise
/// ([`Collection::with_max_open_parts`]): an eighth of the process's
/// descriptor limit (its soft `RLIMIT_NOFILE`); a local part store holds
/// three descriptors (its table, its presence lock, a chunk file), so
/// well over half the limit stays with the rest of the process (other
/// collections, a loader's reopened columns); at least
/// [`MIN_DEFAULT_OPEN_PARTS`] and at most [`MAX_DEFAULT_OPEN_PARTS`].
/// (A remote part store holds no descriptor; the cap bounds its table
/// pages in memory.) A random batch touches most parts of
/// a collection of small parts: closing and reopening part stores for
/// each batch costs far more than holding them. The limit is read, never
/// raised.
#[must_use]
pub fn default_max_open_parts() -> usize {
    #[cfg(unix)]
    {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        match limit.current {
            Some(soft) => usize::try_from(soft / 8)
                .unwrap_or(usize::MAX)
                .clamp(MIN_DEFAULT_OPEN_PARTS, MAX_DEFAULT_OPEN_PARTS),
            None => MAX_DEFAULT_OPEN_PARTS,
        }
    }
    #[cfg(not(unix))]
    {
        DEFAULT_MAX_OPEN_PARTS
    }
}

/// An open part store and when it was last used.
type Held<C, S> = (Arc<Store<C, S>>, u64);

/// The part stores held open, least recently used dropped first.
struct OpenParts<C: Codec, S: Storage> {
    /// `(column, part)` -> the store and when it was last used.
    held: HashMap<(usize, usize), Held<C, S>>,
    /// The clock of uses.
    tick: u64,
}

impl<C: Codec, S: Storage> OpenParts<C, S> {
    /// The store of `column` in `part` if held, marked as used now.
    fn get(&mut self, column: usize, part: usize) -> Option<Arc<Store<C, S>>> {
        self.tick += 1;
        let now = self.tick;
        let (store, used) = self.held.get_mut(&(column, part))?;
        *used = now;
        Some(Arc::clone(store))
    }

    /// Takes out the store used least recently.
    fn oldest(&mut self) -> Option<Arc<Store<C, S>>> {
        let key = self
            .held
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(key, _)| *key)?;
        self.held.remove(&key).map(|(store, _)| store)
    }
}

/// An open collection: the manifest, and the part stores read lately (at
/// most [`max_open_parts`](Collection::max_open_parts) of them, least
/// recently used closed first).
pub struct Collection<C: Codec = Deflate, S: Storage = FileStorage> {
    root: PathBuf,
    manifest: Manifest,
    /// `starts[p]` is part `p`'s first global index; `starts[parts]` the total.
    starts: Vec<u64>,
    opener: Box<dyn PartOpener<C, S>>,
    /// The part stores held open.
    open: Mutex<OpenParts<C, S>>,
    /// The most stores `open` holds.
    max_open: usize,
    /// The process (by its fork generation) whose threads may wait for
    /// `open`'s lock (see [`held`](Self::held)).
    owner: std::sync::atomic::AtomicU64,
}

impl<C: Codec, S: Storage> fmt::Debug for Collection<C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collection")
            .field("root", &self.root)
            .field("columns", &self.manifest.columns.len())
            .field("parts", &self.manifest.parts.len())
            .field("records", &self.len())
            .finish_non_exhaustive()
    }
}

fn manifest_error(path: &Path, err: &ManifestError) -> Error {
    Error::NotAStore {
        path: path.to_owned(),
        reason: err.to_string(),
    }
}

impl<C: Codec + Default> Collection<C, FileStorage> {
    /// Opens the collection at `root`: reads and checks its manifest, and
    /// no part (each is opened when a read first touches it).
    ///
    /// # Errors
    /// [`Error::NotAStore`] (code -8) when there is no manifest or it is
    /// damaged or inconsistent, naming the field; [`Error::Io`] when it
    /// cannot be read.
    pub fn open(root: impl AsRef<Path>, options: OpenOptions) -> Result<Self> {
        let root = root.as_ref();
        let bytes = read_manifest(root)?;
        Self::from_manifest(root, &bytes, Box::new(LocalParts::new(root, options)))
    }
}

/// The error for a collection root that has no manifest.
#[must_use]
pub fn no_manifest(root: &Path) -> Error {
    Error::NotAStore {
        path: root.to_owned(),
        reason: format!(
            "no {MANIFEST_FILE}: not a collection, or one whose parts were never committed"
        ),
    }
}

/// The bytes of the manifest of the local collection at `root`.
///
/// # Errors
/// [`Error::NotAStore`] when there is none; [`Error::Io`] when it cannot
/// be read.
pub fn read_manifest(root: &Path) -> Result<Vec<u8>> {
    let path = root.join(MANIFEST_FILE);
    match fs::read(&path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(no_manifest(root)),
        Err(source) => Err(Error::Io {
            path,
            op: "read",
            source,
        }),
    }
}

impl<C: Codec, S: Storage> Collection<C, S> {
    /// A collection from its manifest's bytes, its parts opened by
    /// `opener`; `root` names it in errors.
    ///
    /// # Errors
    /// [`Error::NotAStore`] for a damaged or inconsistent manifest.
    pub fn from_manifest(
        root: impl Into<PathBuf>,
        manifest: &[u8],
        opener: Box<dyn PartOpener<C, S>>,
    ) -> Result<Self> {
        let root = root.into();
        let manifest = Manifest::decode(manifest)
            .map_err(|e| manifest_error(&root.join(MANIFEST_FILE), &e))?;
        let starts = manifest.starts();
        Ok(Collection {
            root,
            manifest,
            starts,
            opener,
            open: Mutex::new(OpenParts {
                held: HashMap::new(),
                tick: 0,
            }),
            max_open: default_max_open_parts(),
            owner: std::sync::atomic::AtomicU64::new(crate::process_generation()),
        })
    }

    /// Keeps at most `max` part stores open (at least 1;
    /// [`default_max_open_parts`] unless set): past it, the store used
    /// least recently is closed, and opened again when a read needs it.
    /// A store a read is using stays open until that read ends, so the
    /// stores open at one instant are at most `max` plus the parts being
    /// gathered at that instant (one per thread of the store's pool).
    #[must_use]
    pub fn with_max_open_parts(mut self, max: usize) -> Self {
        self.max_open = max.max(1);
        self
    }

    /// The most part stores held open.
    #[must_use]
    pub fn max_open_parts(&self) -> usize {
        self.max_open
    }

    /// The collection's root.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The manifest.
    #[must_use]
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Records in the collection: indices are `0 .. len()`.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// Whether the collection holds no records.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The global index of part `part`'s first record (`parts()` gives the total).
    #[must_use]
    pub fn start(&self, part: usize) -> Option<u64> {
        self.starts.get(part).copied()
    }

    /// Part stores held open now, over every column (at most
    /// [`max_open_parts`](Self::max_open_parts); 0 in a forked process
    /// that cannot take the set's lock: a thread of its parent held it at
    /// the fork).
    #[must_use]
    pub fn opened_parts(&self) -> usize {
        self.held().map_or(0, |open| open.held.len())
    }

    /// Column `name`, to read from.
    ///
    /// # Errors
    /// [`Error::Collection`] naming the columns there are.
    pub fn column(self: &Arc<Self>, name: &str) -> Result<Column<C, S>> {
        match self.manifest.column(name) {
            Some((index, _)) => Ok(Column {
                coll: Arc::clone(self),
                index,
            }),
            None => Err(Error::Collection {
                path: self.root.clone(),
                reason: format!(
                    "no column {name:?}; the collection has {:?}",
                    self.manifest
                        .columns
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                ),
            }),
        }
    }

    /// The part holding global index `idx`, and the index within it.
    fn locate(&self, idx: u64) -> Result<(usize, u64)> {
        if idx >= self.len() {
            return Err(Error::IndexOutOfRange {
                index: idx,
                len: self.len(),
            });
        }
        // First part whose end is past `idx` (skips empty parts).
        let part = self.starts[1..].partition_point(|&end| end <= idx);
        Ok((part, idx - self.starts[part]))
    }

    /// The open part stores, locked. In a process forked since the
    /// collection was opened (a `PyTorch` worker), `None` when a thread of
    /// the parent held the lock at the fork: that thread does not exist
    /// here, so the lock is never released, and the caller reads without
    /// the set (a part opened for the read and closed after it). The
    /// child's own threads wait for the lock as usual once one of them
    /// took it.
    fn held(&self) -> Option<std::sync::MutexGuard<'_, OpenParts<C, S>>> {
        let here = crate::process_generation();
        if self.owner.load(std::sync::atomic::Ordering::Acquire) == here {
            return Some(
                self.open
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
        }
        let guard = match self.open.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        self.owner.store(here, std::sync::atomic::Ordering::Release);
        Some(guard)
    }

    /// The store of `column` in `part`: held, or opened (and checked
    /// against the manifest), then held in place of the one used least
    /// recently when `max_open` are held already.
    fn store(&self, column: usize, part: usize) -> Result<Arc<Store<C, S>>> {
        let held = self.held().and_then(|mut open| open.get(column, part));
        match held {
            Some(store) => Ok(store),
            None => self.open_part(column, part),
        }
    }

    /// The stores of `column` in the parts `split` touches, by group:
    /// those held found under one lock (a batch touches many parts), the
    /// rest opened when a worker asks for them. A batch over more parts
    /// than are held open looks each up when its turn comes, so that no
    /// more than the cap and the parts being read are open at one instant.
    fn stores(&self, column: usize, split: &Split) -> PartStores<'_, C, S> {
        let parts: Vec<usize> = split.groups.iter().map(|g| g.part).collect();
        let held = match self.held() {
            Some(mut open) if parts.len() <= self.max_open => {
                parts.iter().map(|&part| open.get(column, part)).collect()
            }
            _ => Vec::new(),
        };
        PartStores {
            held,
            from: Some((self, column, parts)),
        }
    }

    /// Opens the store of `column` in `part`, checks it against the
    /// manifest and holds it (see [`store`](Self::store)).
    fn open_part(&self, column: usize, part: usize) -> Result<Arc<Store<C, S>>> {
        let def = &self.manifest.columns[column];
        let p = &self.manifest.parts[part];
        let store = self.opener.open(&p.name, &def.name)?;
        let at = || self.opener.location(&p.name, &def.name);
        match store.schema() {
            Some(schema) if same_schema(schema, &def.schema) => {}
            found => {
                return Err(Error::NotAStore {
                    path: at(),
                    reason: format!(
                        "part {part} ({:?}) of column {:?} holds {}; the manifest says {}",
                        p.name,
                        def.name,
                        found.map_or_else(|| "untyped records".to_owned(), ToString::to_string),
                        def.schema
                    ),
                });
            }
        }
        if store.len() != p.records {
            return Err(Error::NotAStore {
                path: at(),
                reason: format!(
                    "part {part} ({:?}) of column {:?} holds {} records; the manifest says {}",
                    p.name,
                    def.name,
                    store.len(),
                    p.records
                ),
            });
        }
        let store = Arc::new(store);
        // Opened without the lock held (it may take requests); another
        // thread may have opened it meanwhile: either copy will do.
        let Some(mut open) = self.held() else {
            return Ok(store);
        };
        if let Some(held) = open.get(column, part) {
            return Ok(held);
        }
        let evicted = if open.held.len() >= self.max_open {
            open.oldest()
        } else {
            None
        };
        let now = open.tick;
        open.held.insert((column, part), (Arc::clone(&store), now));
        drop(open);
        // Closed (when no read holds it) outside the lock.
        drop(evicted);
        Ok(store)
    }

    /// Splits `idxs` by part: one group per part touched, in the order of
    /// the parts, each with its positions in `idxs` (increasing) and its
    /// local indices.
    fn split(&self, idxs: &[u64]) -> Result<Split> {
        let mut order: Vec<(usize, usize, u64)> = Vec::new();
        order
            .try_reserve_exact(idxs.len())
            .map_err(|_| Error::OutOfMemory {
                bytes: (idxs.len() * std::mem::size_of::<(usize, usize, u64)>()) as u64,
            })?;
        for (pos, &idx) in idxs.iter().enumerate() {
            let (part, local) = self.locate(idx)?;
            order.push((part, pos, local));
        }
        if !order.is_sorted_by_key(|&(part, ..)| part) {
            order.sort_unstable_by_key(|&(part, pos, _)| (part, pos));
        }
        let mut groups: Vec<Group> = Vec::new();
        for (k, &(part, ..)) in order.iter().enumerate() {
            match groups.last_mut() {
                Some(g) if g.part == part => g.range.end = k + 1,
                _ => groups.push(Group {
                    part,
                    range: k..k + 1,
                }),
            }
        }
        let positions: Vec<usize> = order.iter().map(|&(_, pos, _)| pos).collect();
        let local = order.iter().map(|&(.., local)| local).collect();
        let contiguous = groups.iter().all(|g| {
            let mine = &positions[g.range.clone()];
            mine[mine.len() - 1] + 1 - mine[0] == mine.len()
        });
        Ok(Split {
            groups,
            positions,
            local,
            contiguous,
        })
    }

    /// Checks that `dst` holds `idxs.len()` slots of `slot` elements and
    /// splits `idxs` by part: the split and `dst` cut to the batch, or
    /// `None` for an empty batch.
    fn prepared<'d, T>(
        &self,
        idxs: &[u64],
        dst: &'d mut [T],
        slot: usize,
        what: &'static str,
    ) -> Result<Option<(Split, &'d mut [T])>> {
        let need = idxs
            .len()
            .checked_mul(slot)
            .ok_or(Error::OutOfMemory { bytes: u64::MAX })?;
        if dst.len() < need {
            return Err(Error::BufferTooSmall {
                what,
                position: 0,
                need: need as u64,
                have: dst.len() as u64,
            });
        }
        if idxs.is_empty() {
            return Ok(None);
        }
        Ok(Some((self.split(idxs)?, &mut dst[..need])))
    }

    /// Runs `f(store, local indices, out)` for every part a batch of
    /// `idxs.len()` slots of `slot` elements touches, `out` being that
    /// part's slots in order; the parts in parallel; results land in
    /// `dst[i · slot ..][.. slot]` for record `i`.
    fn fixed<T, F>(
        &self,
        column: usize,
        idxs: &[u64],
        dst: &mut [T],
        slot: usize,
        what: &'static str,
        f: F,
    ) -> Result<()>
    where
        T: Copy + Default + Send + Sync,
        F: Fn(&Store<C, S>, &[u64], &mut [T]) -> Result<()> + Sync,
    {
        match self.prepared(idxs, dst, slot, what)? {
            Some((split, dst)) => {
                Self::fixed_split(&self.stores(column, &split), &split, dst, slot, f)
            }
            None => Ok(()),
        }
    }

    /// [`fixed`](Self::fixed) of a batch split already, `dst` its slots,
    /// from `stores`, the split's part stores.
    fn fixed_split<T, F>(
        stores: &PartStores<'_, C, S>,
        split: &Split,
        dst: &mut [T],
        slot: usize,
        f: F,
    ) -> Result<()>
    where
        T: Copy + Default + Send + Sync,
        F: Fn(&Store<C, S>, &[u64], &mut [T]) -> Result<()> + Sync,
    {
        let need = dst.len();
        let bytes = std::mem::size_of_val(dst) as u64;
        if split.groups.len() == 1 {
            return f(&*stores.get(0)?, split.local(0), dst);
        }
        if split.contiguous {
            // Each part's slots are one run of `dst`: gather in place.
            let mut order: Vec<usize> = (0..split.groups.len()).collect();
            order.sort_by_key(|&n| split.positions(n)[0]);
            let mut jobs = Vec::with_capacity(order.len());
            let mut rest = dst;
            for n in order {
                let (mine, tail) = rest.split_at_mut(split.local(n).len() * slot);
                rest = tail;
                jobs.push((n, mine));
            }
            return run_jobs(jobs, bytes, |n, out| {
                f(&*stores.get(n)?, split.local(n), out)
            });
        }
        // Scattered: each part gathers into its run of a scratch buffer,
        // then every slot is copied to its place.
        let mut scratch = Vec::new();
        scratch
            .try_reserve_exact(need)
            .map_err(|_| Error::OutOfMemory { bytes })?;
        scratch.resize(need, T::default());
        let mut jobs = Vec::with_capacity(split.groups.len());
        let mut rest = scratch.as_mut_slice();
        for (n, g) in split.groups.iter().enumerate() {
            let (mine, tail) = rest.split_at_mut(g.range.len() * slot);
            rest = tail;
            jobs.push((n, mine));
        }
        run_jobs(jobs, bytes, |n, out| {
            f(&*stores.get(n)?, split.local(n), out)
        })?;
        for (&pos, from) in split.positions.iter().zip(scratch.chunks_exact(slot)) {
            dst[pos * slot..][..slot].copy_from_slice(from);
        }
        Ok(())
    }
}

/// The part stores of one column a batch reads, by group of its split
/// ([`Collection::stores`]).
pub(crate) struct PartStores<'c, C: Codec, S: Storage> {
    /// Each group's store, when it was held as the batch began.
    held: Vec<Option<Arc<Store<C, S>>>>,
    /// Where the others come from: the collection, the column and each
    /// group's part.
    from: Option<(&'c Collection<C, S>, usize, Vec<usize>)>,
}

impl<C: Codec, S: Storage> PartStores<'_, C, S> {
    /// Stores given outright, group `n`'s at `n`.
    #[cfg(test)]
    pub(crate) fn given(stores: Vec<Arc<Store<C, S>>>) -> Self {
        PartStores {
            held: stores.into_iter().map(Some).collect(),
            from: None,
        }
    }

    /// Group `n`'s store (opened now if it was not held).
    pub(crate) fn get(&self, n: usize) -> Result<Arc<Store<C, S>>> {
        if let Some(Some(store)) = self.held.get(n) {
            return Ok(Arc::clone(store));
        }
        match &self.from {
            Some((coll, column, parts)) => coll.store(*column, parts[n]),
            None => Err(Error::LengthMismatch {
                what: "part stores of a batch",
                expected: n + 1,
                found: self.held.len(),
            }),
        }
    }
}

/// Advice for a column that is images in one part and bytes in another:
/// parts written apart tell a binary column's kind by its values, so a
/// part of only JPEG or PNG files made an image column.
fn binary_hint(a: &Schema, b: &Schema, column: &str) -> String {
    let images = |s: &Schema| matches!(s.codec.name(), Some("jpeg" | "png"));
    let bytes = |s: &Schema| s.kind == Kind::Ragged && s.dtype.name() == "|u1" && s.ndim == 1;
    if (images(a) && bytes(b)) || (bytes(a) && images(b)) {
        format!(
            " (a binary column whose values are image files in some parts only: write it with \
             codec={{{column:?}: \"zstd\"}} to keep every value as bytes)"
        )
    } else {
        String::new()
    }
}

/// Whether a part's store schema is the manifest's column schema (the
/// dictionary aside: columns never have one).
fn same_schema(store: &Schema, column: &Schema) -> bool {
    store.kind == column.kind
        && store.dtype == column.dtype
        && store.shape == column.shape
        && store.ndim == column.ndim
        && store.codec == column.codec
        && store.codecs == column.codecs
}

/// The records of a batch in one part: `Split`'s entries `range`.
struct Group {
    part: usize,
    range: std::ops::Range<usize>,
}

/// A batch split by part.
struct Split {
    /// The parts touched, ascending.
    groups: Vec<Group>,
    /// Each record's position in the batch, grouped by part, increasing
    /// within a group.
    positions: Vec<usize>,
    /// Each record's index within its part, in the order of `positions`.
    local: Vec<u64>,
    /// Whether each group's positions are one run.
    contiguous: bool,
}

impl Split {
    /// Group `n`'s positions in the batch.
    fn positions(&self, n: usize) -> &[usize] {
        &self.positions[self.groups[n].range.clone()]
    }

    /// Group `n`'s indices within its part.
    fn local(&self, n: usize) -> &[u64] {
        &self.local[self.groups[n].range.clone()]
    }
}

/// Runs `work(n, out)` on every `(n, out)` job (`n` a group of the split),
/// in parallel when worth it; the error of the lowest `n` that failed.
fn run_jobs<T: Send, F>(jobs: Vec<(usize, &mut [T])>, bytes: u64, work: F) -> Result<()>
where
    F: Fn(usize, &mut [T]) -> Result<()> + Sync,
{
    let errors: Mutex<Vec<(usize, Error)>> = Mutex::new(Vec::new());
    parallel::for_each_part(jobs, bytes, |(n, out)| {
        if let Err(e) = work(n, out) {
            errors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((n, e));
        }
    });
    let errors = errors
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match errors.into_iter().min_by_key(|(n, _)| *n) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// One column of a collection, read over global indices, with the read
/// calls of a single [`Store`].
pub struct Column<C: Codec = Deflate, S: Storage = FileStorage> {
    coll: Arc<Collection<C, S>>,
    index: usize,
}

impl<C: Codec, S: Storage> Clone for Column<C, S> {
    fn clone(&self) -> Self {
        Column {
            coll: Arc::clone(&self.coll),
            index: self.index,
        }
    }
}

impl<C: Codec, S: Storage> fmt::Debug for Column<C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Column")
            .field("root", &self.coll.root)
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl<C: Codec, S: Storage> Column<C, S> {
    /// The collection.
    #[must_use]
    pub fn collection(&self) -> &Arc<Collection<C, S>> {
        &self.coll
    }

    /// The column's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.coll.manifest.columns[self.index].name
    }

    /// The schema of the column's store in every part.
    #[must_use]
    pub fn schema(&self) -> &Schema {
        &self.coll.manifest.columns[self.index].schema
    }

    /// Records in the collection.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.coll.len()
    }

    /// Whether the collection holds no records.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.coll.is_empty()
    }

    /// As [`Store::gather`], over global indices: record `idxs[i]` at
    /// `dst[i · stride ..]`; `dst` must hold `idxs.len() · stride` bytes.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] (nothing read), [`Error::BufferTooSmall`],
    /// and the errors of the parts' gathers, naming the part's store (other
    /// parts' records may have been written then).
    pub fn gather(&self, idxs: &[u64], dst: &mut [u8], stride: usize) -> Result<()> {
        self.coll
            .fixed(self.index, idxs, dst, stride, "destination", |s, l, out| {
                s.gather(l, out, stride)
            })
    }

    /// As [`Store::gather_exact`], over global indices.
    ///
    /// # Errors
    /// As [`gather`](Self::gather), plus [`Error::RecordLength`].
    pub fn gather_exact(&self, idxs: &[u64], dst: &mut [u8], item_len: usize) -> Result<()> {
        let coll = &self.coll;
        let Some((split, dst)) = coll.prepared(idxs, dst, item_len, "destination")? else {
            return Ok(());
        };
        if split.groups.len() == 1 || item_len == 0 {
            let stores = coll.stores(self.index, &split);
            return Collection::fixed_split(&stores, &split, dst, item_len, |s, l, out| {
                s.gather_exact(l, out, item_len)
            });
        }
        // Each part writes its slots in place, interleaved or not (a random
        // batch over many parts is mostly one record per part: a run each),
        // its files checked against one drain of the watches for all.
        let groups: Vec<(&[usize], &[u64])> = (0..split.groups.len())
            .map(|n| (split.positions(n), split.local(n)))
            .collect();
        let stores = coll.stores(self.index, &split);
        crate::gather::gather_exact_spread(dst, item_len, &groups, &stores)
    }

    /// As [`Store::lengths`], over global indices.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`], [`Error::IndexOutOfRange`], a damaged entry.
    pub fn lengths(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        Error::check_len("out", idxs.len(), out.len())?;
        let drained = crate::storage::Drained::now();
        self.coll
            .fixed(self.index, idxs, out, 1, "out", |s, l, out| {
                s.lengths_in(l, out, Some(&drained))
            })
    }

    /// As [`Store::dims`], over global indices (ragged columns).
    ///
    /// # Errors
    /// As [`Store::dims`].
    pub fn dims(&self, idxs: &[u64], out: &mut [u32]) -> Result<()> {
        let ndim = usize::from(self.schema().ndim);
        if self.schema().kind != Kind::Ragged {
            return Err(Error::Schema {
                path: self.coll.root.clone(),
                reason: format!(
                    "column {:?} is not ragged: its records have no dimensions of their own",
                    self.name()
                ),
            });
        }
        Error::check_len("out", idxs.len() * ndim, out.len())?;
        let drained = crate::storage::Drained::now();
        self.coll
            .fixed(self.index, idxs, out, ndim, "out", |s, l, out| {
                s.dims_in(l, out, Some(&drained))
            })
    }

    /// As [`Store::gather_ragged`], over global indices: record `idxs[i]`
    /// at `dst[offsets[i] ..]`.
    ///
    /// # Errors
    /// As [`Store::gather_ragged`]: indices, ranges outside `dst` and
    /// overlapping ranges are refused before anything is written; an error
    /// of one part's read (a damaged record, a file cut behind the
    /// store's back) names that part's store, and other parts' records
    /// may have been written then.
    pub fn gather_ragged(&self, idxs: &[u64], dst: &mut [u8], offsets: &[u64]) -> Result<()> {
        Error::check_len("offsets", idxs.len(), offsets.len())?;
        if idxs.is_empty() {
            return Ok(());
        }
        let split = self.coll.split(idxs)?;
        let stores = self.coll.stores(self.index, &split);
        if split.groups.len() == 1 {
            return stores.get(0)?.gather_ragged(split.local(0), dst, offsets);
        }
        // One drain of the file watches for every part's length checks.
        let drained = crate::storage::Drained::now();
        let mut lens = vec![0u32; idxs.len()];
        Collection::fixed_split(&stores, &split, &mut lens, 1, |s, l, out| {
            s.lengths_in(l, out, Some(&drained))
        })?;
        let groups: Vec<(&[usize], &[u64])> = (0..split.groups.len())
            .map(|n| (split.positions(n), split.local(n)))
            .collect();
        crate::gather::gather_ragged_spread(dst, offsets, &lens, &groups, &stores, &drained)
    }

    /// As `Store::gather_images` (the `image` feature), over global indices.
    ///
    /// # Errors
    /// As `Store::gather_images`.
    #[cfg(feature = "image")]
    pub fn gather_images(
        &self,
        idxs: &[u64],
        dst: &mut [u8],
        height: u32,
        width: u32,
        layout: crate::ImageLayout,
    ) -> Result<()> {
        let item = height as usize * width as usize * 3;
        if item == 0 || dst.len() as u64 != idxs.len() as u64 * item as u64 {
            return Err(Error::BufferTooSmall {
                what: "destination (images × height × width × 3)",
                position: 0,
                need: idxs.len() as u64 * item as u64,
                have: dst.len() as u64,
            });
        }
        self.coll
            .fixed(self.index, idxs, dst, item, "destination", |s, l, out| {
                s.gather_images(l, out, height, width, layout)
            })
    }

    /// Checks every part's store of this column ([`Store::verify`]), in
    /// part order; the first problem, naming the part's store.
    ///
    /// # Errors
    /// The first problem found.
    pub fn verify(&self) -> Result<()> {
        for part in 0..self.coll.manifest.parts.len() {
            self.coll.store(self.index, part)?.verify()?;
        }
        Ok(())
    }

    /// Every damaged record of the column as `(global index, reason)`.
    ///
    /// # Errors
    /// A part that cannot be opened.
    pub fn damaged(&self) -> Result<Vec<(u64, String)>> {
        let mut out = Vec::new();
        for part in 0..self.coll.manifest.parts.len() {
            let start = self.coll.starts[part];
            for (i, why) in self.coll.store(self.index, part)?.damaged()? {
                out.push((start + i, why));
            }
        }
        Ok(out)
    }
}

/// What [`commit`] published.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The manifest written.
    pub manifest: Manifest,
    /// Entries of the root that are not in it: unfinished writes (names
    /// starting with `.`) and, when the parts were given, parts not named.
    pub ignored: Vec<String>,
}

/// Where [`commit_to`] finds parts and publishes a manifest: a local
/// directory ([`LocalTarget`]), or any other storage implementing it.
pub trait CommitTarget {
    /// The collection's root, naming it in errors.
    fn root(&self) -> &Path;

    /// The entries directly under the root that could be parts (local
    /// directories, object prefixes), the manifest aside, in any order.
    ///
    /// # Errors
    /// A listing that fails.
    fn entries(&self) -> Result<Vec<String>>;

    /// Whether entry `name` (a valid part name) is a finished part.
    ///
    /// # Errors
    /// A check that fails.
    fn finished(&self, name: &str) -> Result<bool>;

    /// The column names of part `part` (its entries), in any order.
    ///
    /// # Errors
    /// A listing that fails.
    fn columns(&self, part: &str) -> Result<Vec<String>>;

    /// The schema (`None` for a format v1 store) and record count of the
    /// store of column `column` in part `part`.
    ///
    /// # Errors
    /// Opening the store fails.
    fn column(&self, part: &str, column: &str) -> Result<(Option<Schema>, u64)>;

    /// Publishes `manifest` as [`MANIFEST_FILE`] in one step: a reader sees
    /// the previous manifest or this one, never a part of one.
    ///
    /// # Errors
    /// Writing fails (nothing is published then).
    fn publish(&self, manifest: &[u8]) -> Result<()>;
}

/// Parts in directories under a local root; the manifest written to a
/// temporary file, synced and renamed into place.
#[derive(Debug, Clone)]
pub struct LocalTarget {
    root: PathBuf,
    options: OpenOptions,
}

impl LocalTarget {
    /// The local collection at `root`, its stores opened with `options`
    /// (made read-only).
    #[must_use]
    pub fn new(root: impl Into<PathBuf>, options: &OpenOptions) -> LocalTarget {
        let mut options = options.clone();
        options.read_only = true;
        options.create = false;
        LocalTarget {
            root: root.into(),
            options,
        }
    }
}

/// The names of the directories in `dir`.
fn subdirectories(dir: &Path) -> Result<Vec<String>> {
    let io = |source| Error::Io {
        path: dir.to_owned(),
        op: "list",
        source,
    };
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.path().is_dir() {
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    Ok(out)
}

impl CommitTarget for LocalTarget {
    fn root(&self) -> &Path {
        &self.root
    }

    fn entries(&self) -> Result<Vec<String>> {
        subdirectories(&self.root)
    }

    fn finished(&self, _name: &str) -> Result<bool> {
        // A part directory under its own name was renamed there complete.
        Ok(true)
    }

    fn columns(&self, part: &str) -> Result<Vec<String>> {
        subdirectories(&self.root.join(part))
    }

    fn column(&self, part: &str, column: &str) -> Result<(Option<Schema>, u64)> {
        let store: Store<Deflate> =
            Store::open_with(self.root.join(part).join(column), self.options.clone())?;
        Ok((store.schema().cloned(), store.len()))
    }

    fn publish(&self, manifest: &[u8]) -> Result<()> {
        write_atomically(&self.root, manifest)
    }
}

/// Checks parts under `root` and publishes them as a collection: writes
/// the manifest under a temporary name, syncs it, renames it over
/// [`MANIFEST_FILE`] and syncs the directory, so a reader sees the old
/// manifest or the new one, never a part of one. [`commit_to`] with a
/// [`LocalTarget`].
///
/// # Errors
/// As [`commit_to`].
pub fn commit(root: &Path, parts: Option<&[String]>, options: &OpenOptions) -> Result<Committed> {
    commit_to(&LocalTarget::new(root, options), parts)
}

/// Checks the parts `target` holds and publishes them as a collection.
///
/// `parts` names the parts, in index order (what an engine reports as
/// written); `None` takes every finished entry of the root whose name is
/// a valid part name, in name order. Every part must hold the same
/// columns, each a v2 store of the same schema across parts, and every
/// column of a part the same number of records.
///
/// # Errors
/// [`Error::Collection`] naming the part and column that breaks a
/// rule (nothing is written then); errors opening a part's store;
/// errors publishing the manifest.
pub fn commit_to(target: &dyn CommitTarget, parts: Option<&[String]>) -> Result<Committed> {
    let root = target.root();
    let invalid = |reason: String| Error::Collection {
        path: root.to_owned(),
        reason,
    };
    let mut entries: Vec<String> = target
        .entries()?
        .into_iter()
        .filter(|n| n != MANIFEST_FILE)
        .collect();
    entries.sort();
    let chosen: Vec<String> = if let Some(list) = parts {
        for name in list {
            check_name(name).map_err(|why| invalid(format!("part {why}")))?;
            if !entries.contains(name) || !target.finished(name)? {
                return Err(invalid(format!(
                    "part {name:?} is not a finished part under {}",
                    root.display()
                )));
            }
        }
        list.to_vec()
    } else {
        let mut chosen = Vec::new();
        for name in &entries {
            if check_name(name).is_ok() && target.finished(name)? {
                chosen.push(name.clone());
            }
        }
        chosen
    };
    if chosen.is_empty() {
        return Err(invalid(format!(
            "no finished parts to commit under {}",
            root.display()
        )));
    }
    let ignored = entries
        .iter()
        .filter(|n| !chosen.contains(n))
        .cloned()
        .collect();
    let mut columns: Option<Vec<ColumnDef>> = None;
    let mut list = Vec::with_capacity(chosen.len());
    for (p, name) in chosen.iter().enumerate() {
        let (defs, count) = read_part(target, p, name)?;
        if defs.is_empty() {
            return Err(invalid(format!("part {p} ({name:?}) holds no column")));
        }
        match &columns {
            None => columns = Some(defs),
            Some(first) => {
                let names = |d: &[ColumnDef]| d.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
                if names(first) != names(&defs) {
                    return Err(invalid(format!(
                        "part {p} ({name:?}) has columns {:?}; part 0 ({:?}) has {:?}",
                        names(&defs),
                        chosen[0],
                        names(first)
                    )));
                }
                for (a, b) in first.iter().zip(&defs) {
                    if !same_schema(&a.schema, &b.schema) {
                        return Err(invalid(format!(
                            "part {p} ({name:?}) column {:?} holds {}; part 0 ({:?}) holds {}{}",
                            b.name,
                            b.schema,
                            chosen[0],
                            a.schema,
                            binary_hint(&a.schema, &b.schema, &b.name)
                        )));
                    }
                }
            }
        }
        list.push(Part {
            name: name.clone(),
            records: count,
        });
    }
    let manifest = Manifest {
        columns: columns.unwrap_or_default(),
        parts: list,
    };
    let bytes = manifest.encode().map_err(|e| invalid(e.to_string()))?;
    target.publish(&bytes)?;
    Ok(Committed { manifest, ignored })
}

/// The columns of part `p` (`name`) with their schemas, and its record
/// count, checked: every column a v2 store, all of one length.
fn read_part(target: &dyn CommitTarget, p: usize, name: &str) -> Result<(Vec<ColumnDef>, u64)> {
    let invalid = |reason: String| Error::Collection {
        path: target.root().to_owned(),
        reason,
    };
    let mut cols = target.columns(name)?;
    cols.sort();
    let mut defs = Vec::with_capacity(cols.len());
    let mut count: Option<u64> = None;
    for col in &cols {
        check_name(col).map_err(|why| invalid(format!("part {p} ({name:?}): column {why}")))?;
        let (schema, len) = target.column(name, col)?;
        let Some(schema) = schema else {
            return Err(invalid(format!(
                "part {p} ({name:?}) column {col:?} is a format v1 store; a collection holds v2 stores"
            )));
        };
        match count {
            None => count = Some(len),
            Some(n) if n != len => {
                return Err(invalid(format!(
                    "part {p} ({name:?}): column {col:?} holds {len} records, column {:?} holds {n}",
                    cols[0]
                )));
            }
            Some(_) => {}
        }
        defs.push(ColumnDef {
            name: col.clone(),
            schema,
        });
    }
    Ok((defs, count.unwrap_or(0)))
}

/// Writes `bytes` as `root/MANIFEST_FILE`: a temporary file, synced,
/// renamed over the name, then the directory synced.
fn write_atomically(root: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = root.join(format!(".{MANIFEST_FILE}.{}.tmp", std::process::id()));
    let path = root.join(MANIFEST_FILE);
    let io = |path: &Path, op: &'static str| {
        let path = path.to_owned();
        move |source| Error::Io { path, op, source }
    };
    let written = (|| {
        let mut f = fs::File::create(&tmp).map_err(io(&tmp, "create"))?;
        f.write_all(bytes).map_err(io(&tmp, "write"))?;
        f.sync_all().map_err(io(&tmp, "sync"))?;
        fs::rename(&tmp, &path).map_err(io(&path, "rename to"))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    #[cfg(unix)]
    fs::File::open(root)
        .and_then(|d| d.sync_all())
        .map_err(io(root, "sync"))?;
    Ok(())
}
