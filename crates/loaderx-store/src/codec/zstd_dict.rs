//! zstd with a dictionary (trained, or raw content), one frame per record.
//!
//! A store that uses this codec owns one [`ZstdDictionary`]: the dictionary
//! bytes plus zstd's prepared forms of them (a `CDict` for compressing at
//! the plain zstd codec's level, `ZSTD_LEVEL` = 3; a `DDict` for
//! decompressing), built once when the store opens. A record of
//! `LARGE_RECORD` (128 KiB) or more is compressed with the dictionary loaded
//! afresh instead, at the parameters the level picks for the record's size
//! (see there). The compression and
//! decompression *contexts* are plain per-thread ones shared by every
//! dictionary, so many open stores with different dictionaries cost one
//! context pair per thread, and no record creates one.
//!
//! A frame made with a trained dictionary names its id (zstd writes it in
//! the frame header), and decoding refuses a frame that names another
//! dictionary, or none, before it touches the payload: a record compressed
//! with one dictionary and decoded with another would otherwise come out as
//! wrong bytes of the right size. A raw-content dictionary has no id, so
//! its frames name none and that guard cannot tell two raw dictionaries
//! apart; a store keeps its one dictionary under the schema block's
//! checksum, so its records meet no other.
//!
//! [`train_dictionary`] builds a dictionary from sample records with zstd's
//! own trainer (`ZDICT_trainFromBuffer`, the "fast cover" algorithm).

use std::cell::RefCell;
use std::fmt;
use std::sync::Mutex;

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use super::DecodeError;
#[cfg(test)]
use super::dict::DEFAULT_DICT_SIZE;
use super::dict::{
    DICT_MAGIC, MAX_DICT_SIZE, MAX_SAMPLE_BYTES, MIN_DICT_SIZE, MIN_SAMPLES, TrainError,
};
use super::zstd::ZSTD_LEVEL;

/// Records of at least this many bytes (128 KiB) are compressed with the
/// dictionary loaded for the record (`ZSTD_compress_usingDict`), not with
/// the prepared `CDict`. zstd compresses with a `CDict`'s own parameters,
/// chosen when it was built for an input of unknown size, unless the input
/// is at least 128 KiB *and* six times the dictionary; below that second
/// bound those parameters, chosen for small inputs, compress a large record
/// worse than no dictionary at all, while the dictionary loaded at the
/// level's parameters for the record's size compresses it at least as well
/// as plain zstd (a unit test below holds it to that; `docs/ARCHITECTURE.md`,
/// "Codecs", has the figures). The frames are the same kind (any decoder of this
/// codec reads both); the price is a slower write (the dictionary loaded
/// per record) and gather (more matches, some into the dictionary).
const LARGE_RECORD: usize = 128 * 1024;

thread_local! {
    static CCTX: RefCell<Option<CCtx<'static>>> = const { RefCell::new(None) };
    static DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

/// zstd's trainer writes a few C globals (its display level) while it runs,
/// so trainings take turns. Training is rare and slow; the lock costs nothing
/// that matters.
static TRAINING: Mutex<()> = Mutex::new(());

/// A zstd dictionary, prepared for compressing and decompressing records.
///
/// Cheap to share behind an `Arc`: it is `Send + Sync`, and encoding or
/// decoding only reads it.
pub struct ZstdDictionary {
    bytes: Box<[u8]>,
    id: u32,
    cdict: CDict<'static>,
    ddict: DDict<'static>,
}

impl fmt::Debug for ZstdDictionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZstdDictionary")
            .field("id", &self.id)
            .field("len", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl ZstdDictionary {
    /// Checks that `bytes` are a zstd dictionary, keeps a copy, and prepares
    /// it for compression at the plain zstd codec's level (`ZSTD_LEVEL`, 3)
    /// and for decompression.
    ///
    /// Bytes that start with the [`DICT_MAGIC`] are a dictionary as zstd's
    /// trainer makes it: a non-zero id and entropy tables zstd can load.
    /// Any other bytes, at least 8 of them, are a *raw-content* dictionary,
    /// as zstd (and loaderx 2.x) take them: content that records are likely
    /// to repeat, with no id ([`id`](Self::id) is 0) and no tables.
    ///
    /// # Errors
    /// When `bytes` are fewer than 8 (zstd ignores a shorter dictionary, so
    /// it would compress nothing), longer than [`MAX_DICT_SIZE`], or start
    /// with the magic and then carry id 0 or hold tables zstd cannot load.
    pub fn new(bytes: &[u8]) -> Result<ZstdDictionary, DecodeError> {
        if bytes.len() < 8 {
            return Err(DecodeError::new(format!(
                "zstd dictionary of {} bytes is too short: zstd ignores one under 8 bytes",
                bytes.len()
            )));
        }
        if bytes.len() > MAX_DICT_SIZE {
            return Err(DecodeError::new(format!(
                "zstd dictionary is {} bytes, more than the {MAX_DICT_SIZE}-byte limit",
                bytes.len()
            )));
        }
        let id = if bytes.starts_with(&DICT_MAGIC) {
            let Some(id) = zstd_safe::get_dict_id_from_dict(bytes) else {
                return Err(DecodeError::new(
                    "zstd dictionary has id 0, which zstd reserves for \"no dictionary\"",
                ));
            };
            id.get()
        } else {
            0
        };
        let corrupt = || {
            DecodeError::new(format!(
                "zstd could not load dictionary {id} ({} bytes): its entropy tables are corrupt",
                bytes.len()
            ))
        };
        // zstd tells the two kinds apart by the magic, as above.
        let cdict = CDict::try_create(bytes, ZSTD_LEVEL).ok_or_else(corrupt)?;
        let ddict = DDict::try_create(bytes).ok_or_else(corrupt)?;
        Ok(ZstdDictionary {
            bytes: bytes.into(),
            id,
            cdict,
            ddict,
        })
    }

    /// The dictionary as given to [`ZstdDictionary::new`].
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The dictionary id, which every frame made with it names; 0 for a
    /// raw-content dictionary, whose frames name none.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Encodes `src` into `dst` as one zstd frame made with this dictionary,
    /// returning the frame's length, or `None` when it does not fit in `dst`;
    /// the contract of [`Codec::encode`](super::Codec::encode).
    pub fn encode(&self, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        CCTX.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = CCtx::try_create();
            }
            let cctx = slot.as_mut()?;
            let written = if src.len() >= LARGE_RECORD {
                cctx.compress_using_dict(dst, src, &self.bytes, ZSTD_LEVEL)
            } else {
                cctx.compress_using_cdict(dst, src, &self.cdict)
            };
            written.ok().filter(|&n| n > 0 && n <= dst.len())
        })
    }

    /// Decodes one frame made with this dictionary into `dst`, which is
    /// exactly the record's logical size; the contract of
    /// [`Codec::decode`](super::Codec::decode).
    ///
    /// # Errors
    /// When `src` is not a zstd frame, names another dictionary or none (for
    /// a raw-content dictionary: names any),
    /// declares or decodes to a size other than `dst.len()`, or is corrupt.
    pub fn decode(&self, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
        match zstd_safe::get_frame_content_size(src) {
            Err(_) => {
                return Err(DecodeError::new(format!(
                    "not a zstd frame header ({} bytes)",
                    src.len()
                )));
            }
            Ok(Some(size)) if size != dst.len() as u64 => {
                return Err(DecodeError::new(format!(
                    "zstd frame declares {size} bytes, expected {}",
                    dst.len()
                )));
            }
            Ok(_) => {}
        }
        let named = zstd_safe::get_dict_id_from_frame(src).map_or(0, std::num::NonZero::get);
        if named != self.id {
            let name = |id: u32| match id {
                0 => "no dictionary (or raw content)".to_string(),
                id => format!("dictionary {id}"),
            };
            return Err(DecodeError::new(format!(
                "zstd frame names {}, this store's dictionary is {}",
                name(named),
                match self.id {
                    0 => "raw content".to_string(),
                    id => id.to_string(),
                }
            )));
        }
        DCTX.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = DCtx::try_create();
            }
            let Some(dctx) = slot.as_mut() else {
                return Err(DecodeError::new("zstd context: out of memory"));
            };
            match dctx.decompress_using_ddict(dst, src, &self.ddict) {
                Ok(n) if n == dst.len() => Ok(()),
                Ok(n) => Err(DecodeError::wrong_size(n, dst.len())),
                Err(code) => Err(DecodeError::new(format!(
                    "invalid zstd frame: {}",
                    zstd_safe::get_error_name(code)
                ))),
            }
        })
    }
}

/// Trains a zstd dictionary of at most `max_size` bytes from samples laid end
/// to end in `samples`, `sample_sizes[i]` bytes each (so they must add up to
/// `samples.len()`). The result loads with [`ZstdDictionary::new`].
///
/// Good samples are whole records, picked at random across the data, about
/// 100× `max_size` bytes in all and a few thousand of them; see
/// [`DEFAULT_DICT_SIZE`](super::DEFAULT_DICT_SIZE) and [`MAX_SAMPLE_BYTES`].
///
/// # Errors
/// When `max_size` is outside [`MIN_DICT_SIZE`]..=[`MAX_DICT_SIZE`], the
/// sizes do not add up, there are fewer than [`MIN_SAMPLES`] samples or more
/// than [`MAX_SAMPLE_BYTES`] bytes of them, or zstd's trainer fails (too
/// little or too uniform data for a dictionary to help).
pub fn train_dictionary(
    samples: &[u8],
    sample_sizes: &[usize],
    max_size: usize,
) -> Result<Vec<u8>, TrainError> {
    if !(MIN_DICT_SIZE..=MAX_DICT_SIZE).contains(&max_size) {
        return Err(TrainError::new(format!(
            "dictionary size {max_size} is outside {MIN_DICT_SIZE}..={MAX_DICT_SIZE} bytes"
        )));
    }
    let total = sample_sizes
        .iter()
        .try_fold(0usize, |total, &size| total.checked_add(size));
    if total != Some(samples.len()) {
        return Err(TrainError::new(format!(
            "{} sample sizes do not add up to the {} sample bytes given",
            sample_sizes.len(),
            samples.len()
        )));
    }
    if samples.len() > MAX_SAMPLE_BYTES {
        return Err(TrainError::new(format!(
            "{} sample bytes is more than the {MAX_SAMPLE_BYTES}-byte limit; train on a random subset",
            samples.len()
        )));
    }
    if sample_sizes.len() < MIN_SAMPLES {
        return Err(TrainError::new(format!(
            "{} samples are too few to train a zstd dictionary (at least {MIN_SAMPLES}, ideally thousands)",
            sample_sizes.len()
        )));
    }
    let trained = {
        let _turn = TRAINING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        zstd::dict::from_continuous(samples, sample_sizes, max_size)
    };
    let dict = trained.map_err(|e| {
        TrainError::new(format!(
            "zstd could not train a dictionary from {} samples ({} bytes): {e}; \
             too few, too small or too uniform samples make no useful dictionary",
            sample_sizes.len(),
            samples.len()
        ))
    })?;
    if dict.len() < 8 || dict[..4] != DICT_MAGIC {
        return Err(TrainError::new(
            "zstd's trainer returned bytes that are not a dictionary",
        ));
    }
    Ok(dict)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Codec, Zstd};
    use super::*;

    /// splitmix64: a small deterministic generator for test data.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// Zipf-like (log-uniform) id in 0..vocab: small ids are common.
        #[allow(clippy::cast_precision_loss, clippy::cast_sign_loss)]
        fn zipf(&mut self, vocab: u64) -> u64 {
            let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
            ((vocab as f64).powf(u) as u64 - 1).min(vocab - 1)
        }
    }

    /// Token records as a tokenizer would write them: little-endian i32 ids,
    /// 16–512 per record, Zipf-distributed, often in recurring phrases (the
    /// phrase book differs per `seed`, like two corpora).
    fn token_records(seed: u64, count: usize) -> Vec<Vec<u8>> {
        const VOCAB: u64 = 50_000;
        let mut rng = Rng(seed);
        let phrases: Vec<Vec<i32>> = (0..300)
            .map(|_| {
                let n = 3 + rng.below(10);
                (0..n).map(|_| rng.zipf(VOCAB) as i32).collect()
            })
            .collect();
        (0..count)
            .map(|_| {
                let n = 16 + rng.below(497) as usize;
                let mut tokens = vec![1i32]; // beginning of sequence
                while tokens.len() < n {
                    if rng.below(10) < 4 {
                        let p = &phrases[rng.zipf(phrases.len() as u64) as usize];
                        tokens.extend_from_slice(p);
                    } else {
                        tokens.push(rng.zipf(VOCAB) as i32);
                    }
                }
                tokens.truncate(n);
                tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
            })
            .collect()
    }

    /// `uint8(3, 224, 224)` image-like records (147 KiB): each channel a
    /// gradient of its own plus a little noise, which zstd shrinks only
    /// about 1.4×.
    fn image_records(seed: u64, count: usize) -> Vec<Vec<u8>> {
        const SIDE: u64 = 224;
        let mut rng = Rng(seed);
        (0..count)
            .map(|_| {
                let mut record = Vec::with_capacity(usize::try_from(3 * SIDE * SIDE).unwrap());
                for _ in 0..3 {
                    let (base, dx, dy) = (rng.below(128), rng.below(128), rng.below(128));
                    for y in 0..SIDE {
                        for x in 0..SIDE {
                            let v = base + dx * x / SIDE + dy * y / SIDE + rng.below(12);
                            record.push(u8::try_from(v.min(255)).unwrap());
                        }
                    }
                }
                record
            })
            .collect()
    }

    #[test]
    fn large_records_shrink_with_a_dictionary_at_least_as_much_as_without() {
        let dict = train_on(&image_records(1, 40), DEFAULT_DICT_SIZE);
        let (mut with_dict, mut plain) = (0, 0);
        for record in image_records(2, 8) {
            assert!(record.len() >= LARGE_RECORD);
            let packed = encode(&dict, &record).unwrap();
            let mut out = vec![0u8; record.len()];
            dict.decode(&packed, &mut out).unwrap();
            assert_eq!(out, record);
            with_dict += packed.len();
            plain += zstd::bulk::compress(&record, ZSTD_LEVEL).unwrap().len();
        }
        // Through the prepared CDict (its parameters chosen for small
        // inputs) these come out larger than with no dictionary: the rule
        // this holds the codec to is "never worse than plain zstd".
        assert!(
            with_dict * 100 <= plain * 101,
            "with the dictionary {with_dict} bytes, plain zstd {plain}"
        );
    }

    fn train_on(records: &[Vec<u8>], max_size: usize) -> ZstdDictionary {
        let samples: Vec<u8> = records.concat();
        let sizes: Vec<usize> = records.iter().map(Vec::len).collect();
        let dict = train_dictionary(&samples, &sizes, max_size).unwrap();
        assert!(dict.len() <= max_size);
        ZstdDictionary::new(&dict).unwrap()
    }

    fn encode(dict: &ZstdDictionary, record: &[u8]) -> Option<Vec<u8>> {
        let mut packed = vec![0u8; record.len() - 1];
        let n = dict.encode(record, &mut packed)?;
        packed.truncate(n);
        Some(packed)
    }

    #[test]
    fn token_records_round_trip_and_beat_plain_zstd() {
        let train = token_records(1, 3000);
        let dict = train_on(&train, DEFAULT_DICT_SIZE);
        assert_ne!(dict.id(), 0);
        assert!(format!("{dict:?}").len() < 100, "Debug must not dump bytes");

        let test = token_records(2, 600);
        // Sizes by record length in tokens: [raw, zstd-3, zstd-3 + dictionary].
        let mut buckets = [[0usize; 3]; 3];
        for record in &test {
            let packed = encode(&dict, record).expect("token records shrink with a dictionary");
            let mut out = vec![0u8; record.len()];
            dict.decode(&packed, &mut out).unwrap();
            assert_eq!(&out, record);
            // A destination one byte off is refused, never partly filled.
            let mut short = vec![0u8; record.len() - 1];
            assert!(dict.decode(&packed, &mut short).is_err());
            let mut long = vec![0u8; record.len() + 1];
            assert!(dict.decode(&packed, &mut long).is_err());

            let mut plain = vec![0u8; record.len() - 1];
            let plain = Zstd.encode(record, &mut plain).unwrap_or(record.len());
            let bucket = match record.len() / 4 {
                ..64 => 0,
                64..256 => 1,
                _ => 2,
            };
            for (sum, n) in buckets[bucket]
                .iter_mut()
                .zip([record.len(), plain, packed.len()])
            {
                *sum += n;
            }
        }
        let mut total = [0usize; 3];
        for (name, [raw, plain, with_dict]) in ["16-63", "64-255", "256-512"].iter().zip(buckets) {
            eprintln!(
                "{name} tokens: raw {raw} B, zstd-3 {plain} B, zstd-3 + {} B dictionary {with_dict} B",
                dict.bytes().len()
            );
            for (t, n) in total.iter_mut().zip([raw, plain, with_dict]) {
                *t += n;
            }
        }
        let [raw, plain, with_dict] = total;
        eprintln!(
            "all {} records: raw {raw} B, zstd-3 {plain} B, with dictionary {with_dict} B",
            test.len()
        );
        assert!(
            with_dict < plain,
            "dictionary {with_dict} bytes vs plain {plain}"
        );
    }

    #[test]
    fn another_dictionary_or_none_is_refused() {
        let a = train_on(&token_records(10, 1500), 16 * 1024);
        let b = train_on(&token_records(20, 1500), 16 * 1024);
        assert_ne!(a.id(), b.id());
        for record in token_records(30, 50) {
            // Room for frames that do not shrink: this is about refusing them.
            let mut packed = vec![0u8; record.len() + 64];
            let n = a.encode(&record, &mut packed).unwrap();
            packed.truncate(n);
            let mut out = vec![0u8; record.len()];
            let err = b.decode(&packed, &mut out).unwrap_err();
            assert!(
                err.reason.contains(&a.id().to_string())
                    && err.reason.contains(&b.id().to_string()),
                "{err}"
            );
            // A plain zstd frame names no dictionary.
            let plain = zstd::bulk::compress(&record, ZSTD_LEVEL).unwrap();
            let err = a.decode(&plain, &mut out).unwrap_err();
            assert!(err.reason.contains("names no dictionary"), "{err}");
        }
    }

    #[test]
    fn garbage_frames_are_errors() {
        let trained = train_on(&token_records(3, 1000), 8 * 1024);
        let raw = ZstdDictionary::new(&token_records(8, 20).concat()).unwrap();
        let record = &token_records(4, 1)[0];
        for dict in [&trained, &raw] {
            let packed = encode(dict, record).unwrap();
            let mut out = vec![0u8; record.len()];
            assert!(dict.decode(&[], &mut out).is_err());
            assert!(dict.decode(&[0xff; 64], &mut out).is_err());
            for cut in [1, 4, 6, packed.len() / 2, packed.len() - 1] {
                assert!(dict.decode(&packed[..cut], &mut out).is_err(), "cut {cut}");
            }
            let mut rng = Rng(5);
            for _ in 0..2000 {
                let len = rng.below(300) as usize;
                let mut src: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                if len >= 8 && rng.below(2) == 0 {
                    // A valid header start, so the payload decoder runs too.
                    src[..8].copy_from_slice(&packed[..8]);
                }
                let _ = dict.decode(&src, &mut out);
            }
        }
    }

    #[test]
    fn new_refuses_what_is_not_a_dictionary() {
        let good = train_dictionary(
            &token_records(6, 1000).concat(),
            &token_records(6, 1000)
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>(),
            8 * 1024,
        )
        .unwrap();
        let mut zero_id = good.clone();
        zero_id[4..8].fill(0);
        let mut bad_tables = good.clone();
        bad_tables[8..200].fill(0xff);
        let cases: [(&[u8], &str); 5] = [
            (&[], "too short"),
            (&good[..6], "too short"),
            (&zero_id, "id 0"),
            (&bad_tables, "corrupt"),
            (&good[..40], "corrupt"),
        ];
        for (bytes, why) in cases {
            let err = ZstdDictionary::new(bytes).unwrap_err();
            assert!(err.reason.contains(why), "{why}: {err}");
        }
        let huge = [&good[..], &vec![0u8; MAX_DICT_SIZE]].concat();
        assert!(
            ZstdDictionary::new(&huge)
                .unwrap_err()
                .reason
                .contains("limit")
        );
        let dict = ZstdDictionary::new(&good).unwrap();
        assert_eq!(dict.bytes(), &good[..]);
        // The id is the little-endian u32 after the magic.
        assert_eq!(
            dict.id(),
            u32::from_le_bytes(good[4..8].try_into().unwrap())
        );
    }

    /// Bytes without the magic are raw content, as zstd takes them: frames
    /// made with them name no dictionary, round-trip, and are refused by a
    /// trained dictionary (and the other way round).
    #[test]
    fn raw_content_dictionaries_round_trip_and_are_told_apart() {
        let content = token_records(40, 200).concat();
        let raw = ZstdDictionary::new(&content[..4096]).unwrap();
        assert_eq!(raw.id(), 0);
        assert_eq!(raw.bytes(), &content[..4096]);
        let tiny = ZstdDictionary::new(b"hello, world").unwrap();
        assert!(ZstdDictionary::new(b"7 bytes").is_err());
        let trained = train_on(&token_records(41, 1500), 16 * 1024);
        for record in token_records(42, 50) {
            for dict in [&raw, &tiny] {
                let mut packed = vec![0u8; record.len() + 64];
                let n = dict.encode(&record, &mut packed).unwrap();
                packed.truncate(n);
                assert!(zstd_safe::get_dict_id_from_frame(&packed).is_none());
                let mut out = vec![0u8; record.len()];
                dict.decode(&packed, &mut out).unwrap();
                assert_eq!(out, record);
                let err = trained.decode(&packed, &mut out).unwrap_err();
                assert!(err.reason.contains("names no dictionary"), "{err}");
            }
            let mut packed = vec![0u8; record.len() + 64];
            let n = trained.encode(&record, &mut packed).unwrap();
            packed.truncate(n);
            let mut out = vec![0u8; record.len()];
            let err = raw.decode(&packed, &mut out).unwrap_err();
            assert!(err.reason.contains("raw content"), "{err}");
            // A plain zstd frame names no dictionary either; with a raw
            // dictionary it decodes (the content is only a window prefix).
            let plain = zstd::bulk::compress(&record, ZSTD_LEVEL).unwrap();
            raw.decode(&plain, &mut out).unwrap();
            assert_eq!(out, record);
        }
    }

    #[test]
    fn training_refuses_bad_requests_without_panicking() {
        let records = token_records(7, 50);
        let samples = records.concat();
        let sizes: Vec<usize> = records.iter().map(Vec::len).collect();
        let refused = |samples: &[u8], sizes: &[usize], max: usize, why: &str| {
            let err = train_dictionary(samples, sizes, max).unwrap_err();
            assert!(err.reason.contains(why), "{why}: {err}");
        };
        refused(&samples, &sizes, 100, "outside");
        refused(&samples, &sizes, MAX_DICT_SIZE + 1, "outside");
        refused(&samples, &sizes[1..], 4096, "do not add up");
        refused(&samples, &[usize::MAX, 2], 4096, "do not add up");
        refused(
            &samples[..sizes[..3].iter().sum()],
            &sizes[..3],
            4096,
            "too few",
        );
        let big = vec![0u8; MAX_SAMPLE_BYTES + 1];
        refused(&big, &[big.len()], 4096, "limit");
        // Samples too small for zstd's trainer: its refusal is an error.
        // Uniform ones may or may not make a (useless) dictionary.
        refused(&[7u8; 7], &[1; 7], 4096, "could not train");
        let zeros = vec![0u8; 64 * 1000];
        match train_dictionary(&zeros, &[64; 1000], 4096) {
            Err(e) => assert!(e.reason.contains("could not train"), "{e}"),
            Ok(dict) => drop(ZstdDictionary::new(&dict).unwrap()),
        }
    }

    #[test]
    fn threads_share_contexts_across_dictionaries() {
        let dicts = [
            Arc::new(train_on(&token_records(40, 1000), 16 * 1024)),
            Arc::new(train_on(&token_records(50, 1000), 16 * 1024)),
        ];
        let records = token_records(60, 200);
        std::thread::scope(|s| {
            for t in 0..4usize {
                let dicts = dicts.clone();
                let records = &records;
                s.spawn(move || {
                    for (i, record) in records.iter().enumerate() {
                        let dict = &dicts[(i + t) % 2];
                        let other = &dicts[(i + t + 1) % 2];
                        let packed = encode(dict, record).unwrap();
                        let mut out = vec![0u8; record.len()];
                        dict.decode(&packed, &mut out).unwrap();
                        assert_eq!(&out, record);
                        assert!(other.decode(&packed, &mut out).is_err());
                    }
                });
            }
        });
    }
}
