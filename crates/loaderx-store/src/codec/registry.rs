//! The codec registry: which codecs past the built-ins a store can use.

use std::{fmt, sync::Arc};

use loaderx_format::{CodecTag, v2::CodecRef};

use super::{Codec, CodecId};

/// The codecs a store is opened with: the built-ins, always (`raw`,
/// `flate`, `zstd`, `lz4`, `zstd_dict`, as far as this build has them),
/// plus whatever was [`register`](CodecRegistry::register)ed — codecs
/// defined outside loaderx (tags `128 ..= 255`) and, in a build without the
/// cargo feature `image`, the image codecs (tags 5 and 6).
///
/// Cheap to clone (one shared table); a clone is a snapshot that later
/// registrations on the original do not change. Built-ins are not looked
/// up here on the read path: the store dispatches them statically.
///
/// ```
/// use loaderx_store::{Codec, CodecId, CodecRegistry, DecodeError};
///
/// #[derive(Debug)]
/// struct Reverse;
/// impl Codec for Reverse {
///     fn id(&self) -> CodecId { CodecId::external(200).unwrap() }
///     fn name(&self) -> &str { "reverse" }
///     fn encode(&self, _src: &[u8], _dst: &mut [u8]) -> Option<usize> { None }
///     fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
///         if src.len() != dst.len() {
///             return Err(DecodeError::wrong_size(src.len(), dst.len()));
///         }
///         dst.iter_mut().zip(src.iter().rev()).for_each(|(d, s)| *d = *s);
///         Ok(())
///     }
/// }
///
/// let mut codecs = CodecRegistry::new();
/// codecs.register(Reverse).unwrap();
/// assert!(codecs.register(Reverse).is_err()); // tag 200 is taken
/// assert_eq!(codecs.get(CodecId::external(200).unwrap()).unwrap().name(), "reverse");
/// ```
#[derive(Clone, Default)]
pub struct CodecRegistry {
    /// Indexed by tag; `None` where nothing is registered. Empty until the
    /// first registration.
    slots: Arc<Vec<Option<Arc<dyn Codec>>>>,
}

/// Why [`CodecRegistry::register`] refused a codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterError {
    /// The codec's tag.
    pub tag: u8,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot register codec tag {}: {}", self.tag, self.reason)
    }
}

impl std::error::Error for RegisterError {}

impl fmt::Debug for CodecRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.slots
                    .iter()
                    .enumerate()
                    .filter_map(|(t, c)| Some((t, c.as_ref()?.name()))),
            )
            .finish()
    }
}

impl CodecRegistry {
    /// The built-in codecs only.
    #[must_use]
    pub fn new() -> CodecRegistry {
        CodecRegistry::default()
    }

    /// Adds `codec` under its [`id`](Codec::id).
    ///
    /// # Errors
    /// When its id is a built-in one (`0 ..= 4`: those are not replaceable),
    /// its tag is already taken, its name is not `1 ..= 64` printable ASCII
    /// bytes, or it claims tag 5 or 6 under another name than `jpeg`/`png`
    /// or in a build with the cargo feature `image` (which has them built in).
    pub fn register(&mut self, codec: impl Codec) -> Result<(), RegisterError> {
        self.register_arc(Arc::new(codec))
    }

    /// [`register`](Self::register) for a codec already shared.
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub fn register_arc(&mut self, codec: Arc<dyn Codec>) -> Result<(), RegisterError> {
        let id = codec.id();
        let tag = id.tag().0;
        let refuse = |reason: String| Err(RegisterError { tag, reason });
        if id.is_builtin() {
            return refuse(format!(
                "{id} is a built-in codec; external codecs take tags 128..=255"
            ));
        }
        if cfg!(feature = "image") && id.tag().is_image() {
            return refuse(format!(
                "{id} is built into this build (cargo feature `image`); external codecs take tags 128..=255"
            ));
        }
        let entry = CodecRef {
            tag: id.tag(),
            name: codec.name().to_owned(),
            version: codec.version(),
        };
        // The same rules as the schema's codec table, which records it.
        let probe = loaderx_format::v2::Schema {
            codecs: vec![entry],
            ..loaderx_format::v2::Schema::bytes(CodecTag::RAW)
        };
        if let Err(e) = probe.check() {
            return refuse(e.to_string());
        }
        if let Some(Some(old)) = self.slots.get(usize::from(tag)) {
            return refuse(format!(
                "already registered to codec {:?} (version {})",
                old.name(),
                old.version()
            ));
        }
        let slots = Arc::make_mut(&mut self.slots);
        if slots.is_empty() {
            slots.resize(256, None);
        }
        slots[usize::from(tag)] = Some(codec);
        Ok(())
    }

    /// The codec for `id`: a built-in (except `zstd_dict`, which needs its
    /// store's dictionary) when this build has it, else what was registered
    /// under its tag.
    #[must_use]
    pub fn get(&self, id: CodecId) -> Option<&dyn Codec> {
        if id.is_builtin() {
            return builtin(id).filter(|_| id.missing_feature().is_none());
        }
        self.registered(id.tag())
    }

    /// What was registered under `tag` (never a built-in).
    #[inline]
    pub(crate) fn registered(&self, tag: CodecTag) -> Option<&dyn Codec> {
        self.slots.get(usize::from(tag.0))?.as_deref()
    }

    /// The registry with only the codecs of `tags` kept.
    pub(crate) fn only(self, tags: impl IntoIterator<Item = CodecTag>) -> CodecRegistry {
        let mut kept = CodecRegistry::new();
        for tag in tags {
            if let Some(codec) = self.slots.get(usize::from(tag.0)).and_then(Clone::clone) {
                kept.register_arc(codec)
                    .expect("a registered codec registers again");
            }
        }
        kept
    }

    /// The table entry a store created with `codec` records for it.
    pub(crate) fn codec_ref(codec: &dyn Codec) -> CodecRef {
        CodecRef {
            tag: codec.id().tag(),
            name: codec.name().to_owned(),
            version: codec.version(),
        }
    }
}

/// The built-in codec `id`, when this build has it.
fn builtin(id: CodecId) -> Option<&'static dyn Codec> {
    match id {
        CodecId::Raw => Some(&super::Raw),
        CodecId::Deflate => Some(&super::Deflate),
        CodecId::Zstd => Some(&super::Zstd),
        CodecId::Lz4 => Some(&super::Lz4),
        _ => None,
    }
}
