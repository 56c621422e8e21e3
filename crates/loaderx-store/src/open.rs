//! Opening a store: creating an empty one, recovering from an interrupted
//! delete, reading and checking the header, and measuring the chunk files.

use std::{fs, marker::PhantomData, path::Path, sync::Mutex};

use loaderx_format::{
    CHUNK_CAPACITY, FormatError, HEADER_LEN, Head, Header, MAX_LANES, META_LEN,
    v2::{self, HeaderV2, Schema},
};

use crate::{
    Codec, CodecId, CodecRegistry, Error, Result, Store, ZstdDictionary,
    files::Files,
    frontier::{ChunkLens, Frontier},
    layout::Layout,
    lock::StoreLock,
    storage::{FileId, FileStorage, Storage},
    undo,
};

/// How to open a store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Refuse every write, and never create or modify anything on disk.
    pub read_only: bool,
    /// Create the directory and an empty store when absent (ignored when read-only).
    pub create: bool,
    /// Bytes a chunk file holds before appends roll over to the next one.
    /// Always 4 GiB in real stores; smaller values exist so tests can exercise
    /// rollover without writing gigabytes.
    pub chunk_capacity: u64,
    /// Write lanes of a store created by [`Store::create_v2`] (`1..=16`):
    /// appends spread their bytes over up to this many chunk files,
    /// written at once (see [`lane_bytes`](Self::lane_bytes)). Ignored
    /// when opening an existing store (it keeps its own).
    pub lanes: u8,
    /// Stored bytes an append puts in a write lane before it spreads over
    /// the next: an append of fewer than `lanes × lane_bytes` bytes uses
    /// only as many lanes as it fills, from lane 0 ([`LANE_BYTES`] by
    /// default; 0 spreads every append over every lane). An append larger
    /// than the 64 MiB encode window is placed a window at a time, so its
    /// last window may use fewer lanes. Small appends gain little from
    /// writing several files at once, and every chunk file a gather
    /// touches costs it a length check and a map.
    pub lane_bytes: u64,
    /// Check the CRC32C of raw records on every gather too (format v2).
    /// Compressed records are always checked, and so is every record of a
    /// store whose schema codec is not `raw` (its records kept raw because
    /// they did not shrink included). In a raw store the check costs a
    /// second pass over bytes that are otherwise only copied, so there it
    /// is off by default (`docs/FORMAT.md`, "Checksums").
    pub check_raw: bool,
    /// The codecs past the built-ins the handle can use: the image codecs
    /// and codecs defined outside loaderx. Opening a store whose schema
    /// lists a codec missing here fails with [`Error::CodecUnavailable`].
    /// Built-ins only by default.
    pub codecs: CodecRegistry,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            create: true,
            chunk_capacity: CHUNK_CAPACITY,
            lanes: 1,
            lane_bytes: LANE_BYTES,
            check_raw: false,
            codecs: CodecRegistry::new(),
        }
    }
}

impl OpenOptions {
    /// These options with `codecs` as the registry.
    #[must_use]
    pub fn with_codecs(mut self, codecs: CodecRegistry) -> OpenOptions {
        self.codecs = codecs;
        self
    }
}

/// [`OpenOptions::lane_bytes`]'s default: 8 MiB, so 1,000,000 8-byte
/// labels written in one append land in one chunk file, and an append of
/// the 64 MiB blocks the Python writers hand over still spreads over four
/// lanes.
pub const LANE_BYTES: u64 = 8 << 20;

impl OpenOptions {
    /// Options for a read-only open.
    #[must_use]
    pub fn read_only() -> OpenOptions {
        OpenOptions {
            read_only: true,
            create: false,
            ..OpenOptions::default()
        }
    }
}

impl<C: Codec + Default> Store<C, FileStorage> {
    /// Opens the store at `path`, creating the directory and an empty store
    /// when absent.
    ///
    /// # The memory-map rule
    /// Records are read through shared memory maps of the store's files
    /// ([`FileStorage`]). A store file changed by another program while it is
    /// open here — rewritten, truncated, replaced — is undefined behaviour
    /// for the readers of those maps: do not modify a store's files from
    /// outside loaderx while it is open. What loaderx does to contain the
    /// damage when someone does anyway:
    ///
    /// * every read stays inside the file lengths the handle knows (measured
    ///   at open, grown only by its own writes), and each gather, `lengths`
    ///   call and append re-checks the lengths of `meta.zr` and of the chunk
    ///   files it touches against the file system first, so a file cut short
    ///   behind its back gives an error ([`Error::Corrupt`] or
    ///   [`Error::NotAStore`]) instead of a `SIGBUS`;
    /// * its own writes never touch bytes a reader can reach: appends write
    ///   past the committed frontier, and `delete`/`compact` need `&mut self`;
    /// * across processes, every handle holds a shared advisory lock on
    ///   `meta.zr`, and `compact`, which moves bytes others may have mapped,
    ///   runs only once it gets the lock exclusively ([`Error::Locked`]
    ///   otherwise).
    ///
    /// A concurrent rewrite in place (same length, different bytes) cannot
    /// be detected; it may surface as a decode error or as wrong bytes.
    ///
    /// # Errors
    /// [`Error::NotAStore`] when `path` is a file, holds chunk files but no
    /// `meta.zr`, or holds a damaged header; [`Error::Io`] when a file cannot
    /// be created, opened or read; [`Error::Locked`] while another handle
    /// compacts the store.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Opens an existing store for reading only: nothing on disk is created
    /// or modified, so this works on read-only media. The memory-map rule of
    /// [`open`](Self::open) applies.
    ///
    /// # Errors
    /// As [`open`](Self::open); a missing store is [`Error::NotAStore`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::read_only())
    }

    /// Opens the store at `path` with `options`. The memory-map rule of
    /// [`open`](Self::open) applies.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(path: impl AsRef<Path>, options: OpenOptions) -> Result<Self> {
        Self::open_path_in(path, options, |files| files)
    }

    /// Creates a new format v2 store at `path` holding records of `schema`
    /// (the directory is created when absent), and opens it.
    ///
    /// # Errors
    /// [`Error::Exists`] when `path` already holds a store,
    /// [`Error::InvalidArgument`] naming the argument for a schema that
    /// breaks the format's rules or a bad lane count or dictionary (nothing
    /// is created), [`Error::CodecUnavailable`] for a codec this handle
    /// lacks, [`Error::Io`] when a file cannot be created.
    pub fn create_v2(
        path: impl AsRef<Path>,
        schema: &Schema,
        options: OpenOptions,
    ) -> Result<Self> {
        Self::create_v2_path_in(path, schema, options, |files| files)
    }

    /// [`create_v2`](Store::create_v2), with a run table (`docs/FORMAT.md`,
    /// §9.5): appends describe each run of raw records of one size once,
    /// so small fixed-size records (labels, token blocks) cost little more
    /// than their bytes. Bytes and dense stores only. Readers older than
    /// run tables refuse the store (its header has a feature bit they do
    /// not know). `delete` splits the runs it cuts and `compact` keeps runs
    /// that move together; a damaged byte fails the reads of its whole
    /// block (up to 4 KiB of records) when CRCs are checked.
    ///
    /// # Errors
    /// As [`create_v2`](Store::create_v2), and [`Error::InvalidArgument`]
    /// naming `runs` for a ragged schema.
    pub fn create_v2_runs(
        path: impl AsRef<Path>,
        schema: &Schema,
        options: OpenOptions,
    ) -> Result<Self> {
        Self::create_v2_path_features(path, schema, options, |files| files, v2::runs::FEATURE_RUNS)
    }
}

impl<C: Codec + Default, S: Storage> Store<C, S> {
    /// [`open_with`](Store::open_with) on the directory `path`, its
    /// [`FileStorage`] wrapped by `wrap` (a storage that can hold either a
    /// local store or another kind, such as one in object storage), with
    /// the same locks between handles. The memory-map rule of
    /// [`open`](Store::open) applies.
    ///
    /// # Errors
    /// As [`open`](Store::open).
    pub fn open_path_in(
        path: impl AsRef<Path>,
        options: OpenOptions,
        wrap: impl FnOnce(FileStorage) -> S,
    ) -> Result<Self> {
        let path = path.as_ref();
        match fs::metadata(path) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(Error::NotAStore {
                    path: path.to_owned(),
                    reason: "the path is a file, not a store directory".into(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if options.read_only || !options.create {
                    return Err(Error::NotAStore {
                        path: path.to_owned(),
                        reason: "no such directory".into(),
                    });
                }
                fs::create_dir_all(path).map_err(|e| Error::io(path, "create directory", e))?;
            }
            Err(e) => return Err(Error::io(path, "stat", e)),
        }
        Self::open_locked(
            wrap(FileStorage::with_chunk_capacity(
                path,
                options.read_only,
                options.chunk_capacity,
            )),
            options,
            Some(path),
            None,
        )
    }

    /// [`create_v2`](Store::create_v2) on the directory `path`, its
    /// [`FileStorage`] wrapped by `wrap`, as in
    /// [`open_path_in`](Store::open_path_in).
    ///
    /// # Errors
    /// As [`create_v2`](Store::create_v2).
    pub fn create_v2_path_in(
        path: impl AsRef<Path>,
        schema: &Schema,
        options: OpenOptions,
        wrap: impl FnOnce(FileStorage) -> S,
    ) -> Result<Self> {
        Self::create_v2_path_features(path, schema, options, wrap, 0)
    }

    /// [`create_v2_runs`](Store::create_v2_runs) on the directory `path`,
    /// its [`FileStorage`] wrapped by `wrap`, as in
    /// [`open_path_in`](Store::open_path_in).
    ///
    /// # Errors
    /// As [`create_v2_runs`](Store::create_v2_runs).
    pub fn create_v2_runs_path_in(
        path: impl AsRef<Path>,
        schema: &Schema,
        options: OpenOptions,
        wrap: impl FnOnce(FileStorage) -> S,
    ) -> Result<Self> {
        Self::create_v2_path_features(path, schema, options, wrap, v2::runs::FEATURE_RUNS)
    }

    fn create_v2_path_features(
        path: impl AsRef<Path>,
        schema: &Schema,
        options: OpenOptions,
        wrap: impl FnOnce(FileStorage) -> S,
        features: u8,
    ) -> Result<Self> {
        let path = path.as_ref();
        if features & v2::runs::FEATURE_RUNS != 0 && schema.entry_dims() != 0 {
            return Err(Error::InvalidArgument {
                path: path.to_owned(),
                argument: "runs",
                reason: "a run table is for bytes and dense stores; a ragged store keeps one entry per record".into(),
            });
        }
        if options.read_only {
            return Err(Error::ReadOnly {
                path: path.to_owned(),
                op: "create",
            });
        }
        // A bad argument, or a codec the handle lacks, refuses the creation
        // before anything, the directory included, is made.
        let listed = with_codec_table(schema, &options.codecs).map_err(|e| e.at(path))?;
        // A codec this build lacks first: its arguments (a zstd dictionary)
        // cannot be judged without it.
        check_codecs(&listed, &options.codecs).map_err(|e| e.at(path))?;
        check_creation(path, &listed, options.lanes)?;
        match fs::metadata(path) {
            Ok(md) if !md.is_dir() => {
                return Err(Error::NotAStore {
                    path: path.to_owned(),
                    reason: "the path is a file, not a store directory".into(),
                });
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(path).map_err(|e| Error::io(path, "create directory", e))?;
            }
            Err(e) => return Err(Error::io(path, "stat", e)),
        }
        Self::open_locked(
            wrap(FileStorage::with_chunk_capacity(
                path,
                false,
                options.chunk_capacity,
            )),
            options,
            Some(path),
            Some((schema, features)),
        )
    }
}

impl<C: Codec + Default, S: Storage> Store<C, S> {
    /// Opens the store held by `storage`. O(1) in the number of records:
    /// only the header is read; table entries are checked when touched.
    ///
    /// A complete undo log left by an interrupted delete is rolled back here
    /// when the open is writable, and refuses a read-only open.
    ///
    /// # Errors
    /// [`Error::NotAStore`] for a bad chunk capacity, a missing or damaged
    /// `meta.zr` or a missing chunk file; [`Error::NeedsRecovery`] for a
    /// pending undo log on a read-only open; [`Error::Io`] when the storage
    /// fails.
    pub fn open_in(storage: S, options: OpenOptions) -> Result<Self> {
        Self::open_locked(storage, options, None, None)
    }

    /// [`create_v2`](Store::create_v2) on `storage`.
    ///
    /// # Errors
    /// As [`create_v2`](Store::create_v2).
    pub fn create_v2_in(storage: S, schema: &Schema, options: OpenOptions) -> Result<Self> {
        Self::open_locked(storage, options, None, Some((schema, 0)))
    }

    /// [`create_v2_runs`](Store::create_v2_runs) on `storage`.
    ///
    /// # Errors
    /// As [`create_v2_runs`](Store::create_v2_runs).
    pub fn create_v2_runs_in(storage: S, schema: &Schema, options: OpenOptions) -> Result<Self> {
        Self::open_locked(
            storage,
            options,
            None,
            Some((schema, v2::runs::FEATURE_RUNS)),
        )
    }

    /// Opens (or creates) the store, taking the locks between handles on
    /// the files in `lock_dir` when given.
    fn open_locked(
        storage: S,
        options: OpenOptions,
        lock_dir: Option<&Path>,
        new: Option<(&Schema, u8)>,
    ) -> Result<Self> {
        let mut files = Files::new(storage);
        let read_only = options.read_only || files.is_read_only();
        if options.chunk_capacity == 0 || options.chunk_capacity > CHUNK_CAPACITY {
            return Err(Error::NotAStore {
                path: files.dir().to_owned(),
                reason: format!(
                    "chunk capacity {} is outside 1..=2^32",
                    options.chunk_capacity
                ),
            });
        }
        if let Some((schema, features)) = new {
            let schema = &with_codec_table(schema, &options.codecs)
                .and_then(|s| check_codecs(&s, &options.codecs).map(|()| s))
                .map_err(|e| e.at(files.dir()))?;
            // Atomic on its own: no lock needed (and none can be taken on a
            // file that does not exist yet).
            if files.exists(FileId::Meta)? || !create_v2(&files, schema, options.lanes, features)? {
                return Err(Error::Exists {
                    path: files.dir().to_owned(),
                });
            }
        } else if !files.exists(FileId::Meta)? {
            if !options.create || read_only {
                return Err(Error::NotAStore {
                    path: files.dir().to_owned(),
                    reason: "meta.zr is missing".into(),
                });
            }
            create(&files)?;
        }
        let lock = match lock_dir {
            Some(dir) => StoreLock::acquire(dir)?,
            None => None,
        };
        if files.open(FileId::Meta)?.is_none() {
            return Err(Error::NotAStore {
                path: files.dir().to_owned(),
                reason: "meta.zr is missing".into(),
            });
        }
        // The schema never changes once created: read it (and so the
        // table's layout) before recovery, which needs the layout.
        let schema = read_layout(&mut files)?;
        // Only the codecs the schema lists are reachable from this handle.
        let codecs = match &schema {
            Some(schema) => {
                check_codecs(schema, &options.codecs).map_err(|e| e.at(files.dir()))?;
                options.codecs.only(schema.codecs.iter().map(|c| c.tag))
            }
            None => options.codecs.only([]),
        };
        let dictionary = match schema.as_ref().and_then(|s| s.dictionary.as_deref()) {
            Some(bytes) => Some(ZstdDictionary::new(bytes).map_err(|e| Error::NotAStore {
                path: files.path(FileId::Meta),
                reason: format!("damaged zstd dictionary in the schema block: {e}"),
            })?),
            None => None,
        };
        undo::recover(&mut files, read_only, lock.as_ref())?;
        let meta_len = files.current_len(FileId::Meta, None)?;
        let head = read_head(&mut files, meta_len)?;
        let chunk_lens = ChunkLens::new();
        open_eager_chunks(&files, &head, &chunk_lens)?;
        // A store whose schema codec compresses checks every record, the
        // ones kept raw (that did not shrink) included: who chose a
        // compressed codec gets its checks on all of them.
        let check_raw = options.check_raw || schema.as_ref().is_some_and(Schema::compresses);
        files.set_check_blocks(check_raw);
        Ok(Store {
            files,
            capacity: options.chunk_capacity,
            frontier: Frontier::new(&head),
            committed: Mutex::new(head),
            schema,
            check_raw,
            lane_bytes: options.lane_bytes,
            dictionary,
            owner: std::process::id(),
            chunk_lens,
            raw_runs: std::sync::RwLock::default(),
            append_lock: Mutex::new(()),
            append_arena: Mutex::new(Vec::new()),
            poisoned: std::sync::OnceLock::new(),
            lock,
            codecs,
            default_codec: C::default().id(),
            _codec: PhantomData,
        })
    }
}

/// Opens the chunk files an open measures at once: every one in format v1
/// (at most 4096), the lanes' tails in v2 (the rest on first touch). Each
/// is opened before anything is kept for it: a header may name any chunk
/// id, and only a file that exists justifies memory for it.
fn open_eager_chunks<S: Storage>(
    files: &Files<S>,
    head: &Head,
    chunk_lens: &ChunkLens,
) -> Result<()> {
    let eager: Vec<(Option<usize>, u32)> = match files.layout() {
        Layout::V1 => head.chunks().map(|id| (None, id)).collect(),
        Layout::V2 { .. } => head
            .lane_tails()
            .iter()
            .enumerate()
            .map(|(lane, t)| (Some(lane), t.chunk))
            .collect(),
    };
    for (lane, id) in eager {
        let file = FileId::Chunk(id);
        let Some(len) = files.open(file)? else {
            let says = match lane {
                None => format!("the header says chunks 0..={} exist", head.tails[0].chunk),
                Some(lane) => format!("the header's lane {lane} tail_chunk {id} names it"),
            };
            return Err(Error::NotAStore {
                path: files.path(file),
                reason: format!("chunk file {id}.zr is missing ({says})"),
            });
        };
        chunk_lens.set(id, len);
    }
    Ok(())
}

/// Why a store's codecs are not usable, before the store's path is known.
struct Unavailable {
    tag: u8,
    name: String,
    version: u32,
    reason: String,
}

impl Unavailable {
    fn at(self, path: &Path) -> Error {
        Error::CodecUnavailable {
            path: path.to_owned(),
            tag: self.tag,
            name: self.name,
            version: self.version,
            reason: self.reason,
        }
    }
}

/// `schema`, with the codec table listing its default codec when that is
/// one found through `codecs` and the caller did not list it.
fn with_codec_table(
    schema: &Schema,
    codecs: &CodecRegistry,
) -> std::result::Result<Schema, Unavailable> {
    let mut schema = schema.clone();
    let id = CodecId::from_tag(schema.codec);
    if cfg!(feature = "image") && schema.codec.is_image() {
        crate::codec::image::list_codecs(&mut schema);
        return Ok(schema);
    }
    if let Some(id) = id.filter(|c| !c.is_builtin())
        && schema.codec_ref(schema.codec).is_none()
    {
        let Some(codec) = codecs.registered(schema.codec) else {
            return Err(unregistered(id, schema.codec.name().unwrap_or("?"), 0));
        };
        schema.codecs.push(CodecRegistry::codec_ref(codec));
        schema.codecs.sort_by_key(|c| c.tag);
    }
    Ok(schema)
}

fn unregistered(id: CodecId, name: &str, version: u32) -> Unavailable {
    let reason = match id.missing_feature() {
        Some(feature) => format!(
            "this build has no {id} codec: enable cargo feature `{feature}` of loaderx-store (or register a {id} codec in OpenOptions::codecs)"
        ),
        None => "it is not registered in OpenOptions::codecs".to_owned(),
    };
    Unavailable {
        tag: id.tag().0,
        name: name.to_owned(),
        version,
        reason,
    }
}

/// Checks that every codec `schema` lists is registered in `codecs`, under
/// the same name, at the same or a later version.
fn check_codecs(schema: &Schema, codecs: &CodecRegistry) -> std::result::Result<(), Unavailable> {
    for c in &schema.codecs {
        let id = CodecId::from_tag(c.tag).expect("a checked codec table names valid tags");
        if cfg!(feature = "image") && c.tag.is_image() {
            // Built in, ahead of the registry.
            if c.version > crate::codec::image::VERSION {
                return Err(Unavailable {
                    tag: c.tag.0,
                    name: c.name.clone(),
                    version: c.version,
                    reason: format!(
                        "the store's {:?} is version {}, this build's is {}",
                        c.name,
                        c.version,
                        crate::codec::image::VERSION
                    ),
                });
            }
            continue;
        }
        let Some(have) = codecs.registered(c.tag) else {
            return Err(unregistered(id, &c.name, c.version));
        };
        let refuse = |reason: String| {
            Err(Unavailable {
                tag: c.tag.0,
                name: c.name.clone(),
                version: c.version,
                reason,
            })
        };
        if have.name() != c.name {
            return refuse(format!(
                "tag {} is registered to codec {:?}, a different codec",
                c.tag.0,
                have.name()
            ));
        }
        if have.version() < c.version {
            return refuse(format!(
                "the registered {:?} is version {}, older than the store's",
                c.name,
                have.version()
            ));
        }
    }
    // The default codec, when it is a built-in this build lacks.
    if let Some(feature) = CodecId::from_tag(schema.codec)
        .filter(|c| c.is_builtin())
        .and_then(CodecId::missing_feature)
    {
        return Err(Unavailable {
            tag: schema.codec.0,
            name: schema.codec.name().unwrap_or("?").to_owned(),
            version: 1,
            reason: format!(
                "this build of loaderx-store lacks it: enable cargo feature `{feature}`"
            ),
        });
    }
    Ok(())
}

/// Creates an empty store: chunk 0, then `meta.zr` at its full (sparse)
/// size with an empty header, published atomically (`Storage::create_meta`).
/// A crash at any point leaves either no store — at worst an empty `0.zr`,
/// which the next creation reuses — or a complete empty one; two processes
/// creating the same store at once both end up opening the one that won.
fn create<S: Storage>(files: &Files<S>) -> Result<()> {
    // Chunk files holding bytes without a meta.zr are a damaged store, not an
    // empty directory: creating over them would lose their bytes. Empty ones
    // are what an interrupted creation leaves.
    for id in files.chunk_ids()? {
        let file = FileId::Chunk(id);
        if files.open(file)?.unwrap_or(0) > 0 {
            // Another creator may have won the race since we looked, and
            // its writer appended already: open its store.
            if files.exists(FileId::Meta)? {
                return Ok(());
            }
            return Err(Error::NotAStore {
                path: files.dir().to_owned(),
                reason: format!(
                    "meta.zr is missing but chunk file {id}.zr holds bytes; refusing to create a new store over it"
                ),
            });
        }
    }
    files.create(FileId::Chunk(0), 0)?;
    files.sync(FileId::Chunk(0))?;
    // Chunk 0's name is made durable with meta.zr's (create_meta syncs the
    // directory after linking).
    files.create_meta(&Header::default().encode(), META_LEN)?;
    Ok(())
}

/// Refuses the bad arguments of a creation at `path` before anything is
/// made: a schema that breaks the format's rules, a lane count out of
/// range, a dictionary zstd cannot use.
fn check_creation(path: &Path, schema: &Schema, lanes: u8) -> Result<()> {
    let invalid = |argument, reason| Error::InvalidArgument {
        path: path.to_owned(),
        argument,
        reason,
    };
    schema.check().map_err(|e| invalid(e.argument, e.reason))?;
    if lanes == 0 || usize::from(lanes) > MAX_LANES {
        return Err(invalid(
            "lanes",
            format!("{lanes} write lanes is outside 1..={MAX_LANES}"),
        ));
    }
    if let Some(d) = &schema.dictionary {
        ZstdDictionary::new(d).map_err(|e| {
            invalid(
                "dictionary",
                format!("zstd cannot use it as a dictionary: {e}"),
            )
        })?;
    }
    Ok(())
}

/// Creates an empty format v2 store: chunks `0..lanes`, then `meta.zr`
/// (header slot 0, the schema block) published atomically. Whether this
/// call created it (`false`: another creator got there first).
fn create_v2<S: Storage>(
    files: &Files<S>,
    schema: &Schema,
    lanes: u8,
    features: u8,
) -> Result<bool> {
    let refuse = |reason: String| Error::NotAStore {
        path: files.dir().to_owned(),
        reason,
    };
    check_creation(files.dir(), schema, lanes)?;
    if features & v2::runs::FEATURE_RUNS != 0 && schema.entry_dims() != 0 {
        return Err(Error::InvalidArgument {
            path: files.dir().to_owned(),
            argument: "runs",
            reason: "a run table is for bytes and dense stores; a ragged store keeps one entry per record".into(),
        });
    }
    for id in files.chunk_ids()? {
        if files.open(FileId::Chunk(id))?.unwrap_or(0) > 0 {
            if files.exists(FileId::Meta)? {
                return Ok(false);
            }
            return Err(refuse(format!(
                "meta.zr is missing but chunk file {id}.zr holds bytes; refusing to create a new store over it"
            )));
        }
    }
    for id in 0..u32::from(lanes) {
        files.create(FileId::Chunk(id), 0)?;
    }
    files.sync_all((0..u32::from(lanes)).map(FileId::Chunk))?;
    let block = schema.encode();
    let schema_len =
        u32::try_from(block.len()).map_err(|_| refuse("schema block too large".into()))?;
    let header = HeaderV2 {
        sequence: 0,
        head: Head::empty(lanes),
        schema_len,
        schema_crc: v2::crc32c(&block),
        entry_len: v2::entry_len(schema.entry_dims()) as u16,
        features,
    };
    let table = v2::table_offset(schema_len);
    let mut image = vec![0u8; table as usize];
    image[..v2::HEADER_V2_LEN].copy_from_slice(&header.encode());
    image[v2::SCHEMA_OFFSET as usize..][..block.len()].copy_from_slice(&block);
    files.create_meta(&image, table)
}

/// Reads which format `meta.zr` holds and, for v2, its schema block, and
/// sets the table layout; returns the schema (`None` for v1).
fn read_layout<S: Storage>(files: &mut Files<S>) -> Result<Option<Schema>> {
    let meta = files.path(FileId::Meta);
    let refuse = |e| Error::format(files.path(FileId::Meta), e);
    let meta_len = files.current_len(FileId::Meta, None)?;
    if meta_len < 6 {
        return Err(refuse(FormatError::Truncated {
            need: HEADER_LEN as u64,
            have: meta_len,
        }));
    }
    let mut start = [0u8; 6];
    files.read(FileId::Meta, 0, &mut start, "read header")?;
    if u16::from_le_bytes([start[4], start[5]]) != v2::VERSION_V2 && !slot1_is_v2(files, meta_len)?
    {
        return Ok(None);
    }
    let header = pick_slots(files, meta_len).map_err(|e| match e {
        Error::NotAStore { path, reason } => Error::NotAStore {
            path,
            reason: format!(
                "a format version 2 header, but neither header slot is valid: {reason}"
            ),
        },
        other => other,
    })?;
    let table = v2::table_offset(header.schema_len);
    if meta_len < table {
        return Err(refuse(FormatError::Truncated {
            need: table,
            have: meta_len,
        }));
    }
    let mut block = vec![0u8; header.schema_len as usize];
    files.read(FileId::Meta, v2::SCHEMA_OFFSET, &mut block, "read schema")?;
    let schema = Schema::decode(&block, header.schema_crc).map_err(|e| Error::NotAStore {
        path: meta.clone(),
        reason: e.to_string(),
    })?;
    let ndim = schema.entry_dims();
    if usize::from(header.entry_len) != v2::entry_len(ndim) {
        return Err(Error::NotAStore {
            path: meta,
            reason: format!(
                "header says table entries are {} bytes; the schema needs {}",
                header.entry_len,
                v2::entry_len(ndim)
            ),
        });
    }
    let runs = header.features & v2::runs::FEATURE_RUNS != 0;
    if runs && ndim != 0 {
        return Err(Error::NotAStore {
            path: meta,
            reason: "a run table in a ragged store (run tables are for bytes and dense stores)"
                .into(),
        });
    }
    files.set_layout(
        Layout::V2 {
            runs,
            table,
            entry_len: usize::from(header.entry_len),
            ndim,
            schema_len: header.schema_len,
            schema_crc: header.schema_crc,
        },
        header.sequence,
    );
    Ok(Some(schema))
}

/// Whether header slot 1 holds a valid v2 header: a v2 store whose slot 0
/// was damaged is still one (a v1 table entry cannot pass its checksum).
fn slot1_is_v2<S: Storage>(files: &Files<S>, meta_len: u64) -> Result<bool> {
    if meta_len < v2::SLOT_LEN + v2::HEADER_V2_LEN as u64 {
        return Ok(false);
    }
    let mut slot = [0u8; v2::HEADER_V2_LEN];
    files.read(FileId::Meta, v2::SLOT_LEN, &mut slot, "read header")?;
    Ok(HeaderV2::decode(&slot).is_ok())
}

/// The v2 header to trust: the valid slot with the larger sequence.
fn pick_slots<S: Storage>(files: &Files<S>, _meta_len: u64) -> Result<HeaderV2> {
    files.read_header_v2()
}

/// Reads the head of an existing `meta.zr` of `meta_len` bytes and checks
/// it: magic, version, limits, checksums (v2), and that the file holds the
/// table it claims.
fn read_head<S: Storage>(files: &mut Files<S>, meta_len: u64) -> Result<Head> {
    let meta = files.path(FileId::Meta);
    let refuse = |e| Error::format(meta.clone(), e);
    let head = match files.layout() {
        Layout::V1 => {
            if meta_len < HEADER_LEN as u64 {
                return Err(refuse(FormatError::Truncated {
                    need: HEADER_LEN as u64,
                    have: meta_len,
                }));
            }
            let header = Header::decode(&files.read_header_bytes()?).map_err(refuse)?;
            header.check_limits().map_err(refuse)?;
            Head::from(header)
        }
        Layout::V2 { .. } => {
            let header = pick_slots(files, meta_len)?;
            let layout = files.layout();
            files.set_layout(layout, header.sequence);
            header.head
        }
    };
    let need = files.table_end(head.length)?;
    // A writer in another process may have committed since `meta_len` was
    // measured; it writes a commit's entries before its header, so the
    // length measured after reading the header covers what it says. (Seen
    // under Wine, where the two reads are far enough apart to race; on Linux
    // the window is just narrower.)
    let have = if meta_len < need {
        files.current_len(FileId::Meta, None)?
    } else {
        meta_len
    };
    if have < need {
        return Err(refuse(FormatError::Truncated { need, have }));
    }
    Ok(head)
}
