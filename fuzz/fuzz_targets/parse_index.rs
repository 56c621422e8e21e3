//! Arbitrary bytes as store metadata, through the format crate's parsers and
//! validators, both format versions. They must never panic, overflow, loop
//! or allocate by an untrusted size; whatever they accept must re-encode to
//! the bytes it came from.
//!
//! Input: `[mode: u8][n_chunks: u8][n_chunks × u64 LE chunk lengths][rest…]`,
//! where `mode % 4` picks what `rest` is:
//!
//! * 0 — a format v1 `meta.zr` image, through `parse_index` and
//!   `Index::parse_header`;
//! * 1 — a format v2 `meta.zr` image with the padding squeezed out: header
//!   slot 0 (172 bytes), slot 1 (172 bytes), the schema block (as long as
//!   the chosen slot's `schema_len`), then the table. The slots go through
//!   `pick_header`, the block through `Schema::decode` with the header's
//!   checksum, and each entry below `length` that the bytes hold through
//!   `decode_entry` and `entry_fault` (`Rules::V2`); a slot with the run
//!   table feature bit makes the table a run table (§9.5), walked piece by
//!   piece through `decode_piece`, `decode_crcs`, `decode_entry`,
//!   `entry_fault` and `run_fault`, every accepted unit re-encoding to its
//!   bytes;
//! * 2 — the same, but the harness first recomputes every checksum (the
//!   schema's in both slots, both slots', every entry's), so mutations get
//!   past them to the checks behind;
//! * 3 — a v2 undo log: `[entry_len: u16 LE][log…]` through `UndoLogV2::decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loaderx_format::{
    CHUNK_CAPACITY, CodecTag, EntryFault, FormatError, Header, Index, Rules, entry_fault,
    parse_index,
    v2::{
        self, HEADER_V2_LEN, HeaderV2, MAX_RECORD_LEN_V2, Schema, UndoLogV2, decode_entry, dims_of,
        encode_entry, pick_header,
        runs::{self, FEATURE_RUNS, Piece, UNIT_LEN},
    },
    validate_entry,
};
use loaderx_fuzz::fix_v2_checksums;

fn v1(image: &[u8], lens: &[u64]) {
    let full = parse_index(image, lens);
    let header_only = Index::parse_header(image, lens);
    // Whatever the whole parse says, the header check agrees on the header.
    if let Ok(index) = &full {
        let header = header_only.expect("a valid image has a valid header");
        assert_eq!(header.header, index.header);
        for i in 0..index.header.length {
            assert!(index.entry(i).is_some());
        }
        assert_eq!(Header::decode(image).unwrap(), index.header);
    }
}

/// Splits a squeezed v2 image into its slots and the rest.
fn slots(rest: &[u8]) -> (&[u8], &[u8], &[u8]) {
    let (slot0, rest) = rest.split_at(rest.len().min(HEADER_V2_LEN));
    let (slot1, rest) = rest.split_at(rest.len().min(HEADER_V2_LEN));
    (slot0, slot1, rest)
}

fn v2_meta(image: &[u8], lens: &[u64], fixed: bool) {
    let (slot0, slot1, rest) = slots(image);
    let picked = pick_header(slot0, slot1);
    let decoded = [HeaderV2::decode(slot0), HeaderV2::decode(slot1)];
    let Ok(header) = picked else {
        assert!(
            decoded.iter().all(Result::is_err),
            "pick_header refused a valid slot"
        );
        return;
    };
    // The picked slot is a valid one with the largest sequence, and a valid
    // slot re-encodes to exactly its bytes (no field is ignored on read).
    assert!(decoded.iter().any(|d| d.as_ref() == Ok(&header)));
    for (d, bytes) in decoded.iter().zip([slot0, slot1]) {
        if let Ok(d) = d {
            assert!(d.sequence <= header.sequence);
            assert_eq!(
                &d.encode()[..],
                bytes,
                "a valid slot does not re-encode to its bytes"
            );
        }
    }
    let head = header.head;
    assert!(head.lanes >= 1 && usize::from(head.lanes) <= loaderx_format::MAX_LANES);
    for (l, t) in head.lane_tails().iter().enumerate() {
        assert_eq!(
            head.lane_of(t.chunk),
            l,
            "a lane's tail chunk belongs to it"
        );
    }

    let Some(block) = rest.get(..header.schema_len as usize) else {
        return; // the image ends inside the schema block: truncated
    };
    let table = &rest[block.len()..];
    // In a fixed-up image whose slot 0 won, every checksum matches.
    let all_fixed = fixed && slot0_is(&header, slot0);
    let schema = match Schema::decode(block, header.schema_crc) {
        Ok(s) => s,
        Err(e) => {
            let checksum =
                matches!(&e, FormatError::BadSchema(why) if why.starts_with("schema checksum"));
            assert!(!(all_fixed && checksum), "{e}");
            return;
        }
    };
    schema
        .check()
        .expect("a decoded schema passes its own check");
    let again = schema.encode();
    assert_eq!(again.len(), block.len());
    assert_eq!(
        Schema::decode(&again, v2::crc32c(&again)).as_ref(),
        Ok(&schema)
    );
    let ndim = schema.entry_dims();
    if usize::from(header.entry_len) != v2::entry_len(ndim) {
        return; // the engine refuses the store: the table layout is unknown
    }

    if header.features & FEATURE_RUNS != 0 {
        if ndim != 0 {
            return; // the engine refuses a run table in a ragged store (§9.5)
        }
        run_table(table, &head, lens, all_fixed);
        return;
    }
    // Entries below `length` that the bytes hold: the loop is bounded by
    // the input, never by the untrusted `length`.
    let entry_len = usize::from(header.entry_len);
    let held = (table.len() / entry_len) as u64;
    let mut dims = [0u32; v2::MAX_NDIM];
    let mut out = vec![0u8; entry_len];
    for i in 0..head.length.min(held) {
        let bytes = &table[i as usize * entry_len..][..entry_len];
        let loc = match decode_entry(i, bytes) {
            Ok(loc) => loc,
            Err(fault) => {
                assert!(
                    !(all_fixed && fault == EntryFault::EntryChecksum),
                    "entry {i}: {fault}"
                );
                continue;
            }
        };
        dims_of(bytes, &mut dims[..ndim]);
        encode_entry(i, &loc, &dims[..ndim], &mut out);
        assert_eq!(&out[..], bytes, "entry {i} does not re-encode to its bytes");
        let file_len = lens.get(loc.chunk_id as usize).copied().unwrap_or(0);
        let fault = entry_fault(&loc, &head, file_len, Rules::V2);
        assert_eq!(
            validate_entry(i, &loc, &head, file_len, Rules::V2)
                .err()
                .is_some(),
            fault.is_some()
        );
        if fault.is_none() {
            assert!(loc.codec.is_allowed_v2());
            assert!(loc.logic_length <= MAX_RECORD_LEN_V2);
            assert!(loc.logic_length >= 1 || loc.codec == CodecTag::RAW);
            assert!(loc.phys_length <= MAX_RECORD_LEN_V2);
            assert!(loc.codec != CodecTag::RAW || loc.phys_length == loc.logic_length);
            assert!(head.has_chunk(loc.chunk_id));
            assert!(loc.end() <= CHUNK_CAPACITY && loc.end() <= file_len);
            let tail = head.tails[head.lane_of(loc.chunk_id)];
            assert!(loc.chunk_id != tail.chunk || loc.end() <= u64::from(tail.offset));
        }
    }
}

/// A run table (§9.5): pieces from unit 0 on until `length` records are
/// covered or the bytes end; bounded by the input, never by `length`.
fn run_table(table: &[u8], head: &loaderx_format::Head, lens: &[u64], all_fixed: bool) {
    let unit_at = |u: u64| {
        usize::try_from(u)
            .ok()
            .and_then(|u| u.checked_mul(UNIT_LEN))
            .and_then(|at| table.get(at..at.checked_add(UNIT_LEN)?))
    };
    let (mut unit, mut records) = (0u64, 0u64);
    while records < head.length {
        let Some(bytes) = unit_at(unit) else {
            return;
        };
        let piece = match runs::decode_piece(unit, bytes) {
            Ok(p) => p,
            Err(fault) => {
                assert!(
                    !(all_fixed && fault == EntryFault::EntryChecksum),
                    "unit {unit}: {fault}"
                );
                return;
            }
        };
        assert!(piece.records() >= 1 && piece.units() >= 2);
        match piece {
            Piece::Group { count } => {
                assert_eq!(&runs::encode_group(unit, count)[..], bytes);
                // Entries the bytes hold, at most `count`.
                let mut out = [0u8; UNIT_LEN];
                for k in 0..count {
                    let u = unit + 1 + k;
                    let Some(e) = unit_at(u) else {
                        return;
                    };
                    let Ok(loc) = decode_entry(u, e) else {
                        continue;
                    };
                    encode_entry(u, &loc, &[], &mut out);
                    assert_eq!(&out[..], e, "entry unit {u} does not re-encode");
                    let file_len = lens.get(loc.chunk_id as usize).copied().unwrap_or(0);
                    if entry_fault(&loc, head, file_len, Rules::V2).is_none() {
                        assert!(loc.end() <= file_len);
                    }
                }
            }
            Piece::Run(run) => {
                assert_eq!(&runs::encode_run(unit, &run)[..], bytes);
                assert!(run.stride >= 1 && run.stride <= MAX_RECORD_LEN_V2 && run.count >= 1);
                let file_len = lens.get(run.chunk as usize).copied().unwrap_or(0);
                if runs::run_fault(&run, head, file_len).is_none() {
                    // Every record of an accepted run is a valid raw record.
                    for k in [0, run.count - 1] {
                        let loc = run.loc(k, 0);
                        assert_eq!(entry_fault(&loc, head, file_len, Rules::V2), None);
                    }
                    assert!(run.end() <= file_len);
                }
                for c in 0..run.units() - 1 {
                    let u = unit + 1 + c;
                    let Some(b) = unit_at(u) else {
                        return;
                    };
                    if let Ok(crcs) = runs::decode_crcs(u, b) {
                        assert_eq!(&runs::encode_crcs(u, &crcs)[..], b);
                    }
                }
            }
        }
        records = records.saturating_add(piece.records());
        unit = unit.saturating_add(piece.units());
    }
}

/// Whether `header` was decoded from `slot0` (the slot whose `entry_len`
/// and `schema_len` the checksum fix-up used).
fn slot0_is(header: &HeaderV2, slot0: &[u8]) -> bool {
    HeaderV2::decode(slot0).is_ok_and(|h| h == *header)
}

fn v2_undo(rest: &[u8]) {
    let Some((len, log)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let entry_len = u16::from_le_bytes(*len);
    if let Some(decoded) = UndoLogV2::decode(log, entry_len) {
        assert_eq!(decoded.entry_len, entry_len);
        assert!(decoded.entries.len() as u64 <= decoded.length);
        for (slot, bytes) in &decoded.entries {
            assert!(*slot < decoded.length);
            assert_eq!(bytes.len(), usize::from(entry_len));
        }
        assert_eq!(decoded.encode(), log, "a valid log re-encodes to its bytes");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&[mode, n], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let n = usize::from(n % 8);
    if rest.len() < n * 8 {
        return;
    }
    let (lens, rest) = rest.split_at(n * 8);
    let lens: Vec<u64> = lens
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    match mode % 4 {
        0 => v1(rest, &lens),
        1 => v2_meta(rest, &lens, false),
        2 => {
            let mut image = rest.to_vec();
            fix_v2_checksums(&mut image);
            v2_meta(&image, &lens, true);
        }
        _ => v2_undo(rest),
    }
});
