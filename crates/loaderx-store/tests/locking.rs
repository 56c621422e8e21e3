//! The locks between handles and processes (`docs/ARCHITECTURE.md`,
//! "Locking"): one writer, delete/compact/recovery only with the store to
//! themselves, locks that survive a refused compaction and a `fork()`.

use std::fs;

use loaderx_store::{
    Deflate, Error, Store,
    format::{Header, RecordLoc, UNDO_FILE, UndoLog, entry_offset},
};

fn filled(path: &std::path::Path, n: usize) -> Store<Deflate> {
    let store: Store<Deflate> = Store::open(path).unwrap();
    let recs: Vec<u8> = (0..n).flat_map(|i| vec![i as u8; 100]).collect();
    store.append_fixed(&recs, n, 100).unwrap();
    store.sync().unwrap();
    store
}

fn locked<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Locked { .. }))
}

#[test]
fn a_second_writer_is_refused_until_the_first_closes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let first = filled(&path, 4);
    let second: Store<Deflate> = Store::open(&path).unwrap();
    // Reading is fine; writing is not.
    let mut buf = vec![0u8; 100];
    second.gather(&[3], &mut buf, 100).unwrap();
    let err = second.append_fixed(&[1u8; 100], 1, 100).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert!(err.to_string().contains("this process"), "{err}");
    drop(first);
    second.append_fixed(&[1u8; 100], 1, 100).unwrap();
    second.sync().unwrap();
    assert_eq!(second.len(), 5);
}

#[test]
fn delete_and_compact_need_the_store_to_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut writer = filled(&path, 8);
    let reader: Store<Deflate> = Store::open_read_only(&path).unwrap();
    assert!(locked(writer.delete(&[1])));
    assert!(locked(writer.compact()));
    assert_eq!(writer.len(), 8);
    drop(reader);
    writer.delete(&[1]).unwrap();
    writer.compact().unwrap();
    assert_eq!(writer.len(), 7);
}

/// Finding: a refused compaction used to drop the handle's shared lock
/// (a failed `flock` conversion loses the lock held), so a later compaction
/// elsewhere moved bytes this handle still mapped.
#[test]
fn a_refused_compaction_keeps_its_handle_visible() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    {
        let mut writer = filled(&path, 8);
        writer.delete(&[0, 1, 2]).unwrap();
    }
    let mut a: Store<Deflate> = Store::open(&path).unwrap();
    let b: Store<Deflate> = Store::open(&path).unwrap();
    assert!(locked(a.compact()), "b has it open");
    drop(b);
    // `a` is still open (and reading), so another handle must not compact.
    let mut c: Store<Deflate> = Store::open(&path).unwrap();
    let err = c.compact().unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert!(err.to_string().contains("has the store open"), "{err}");
    let mut buf = vec![0u8; 100];
    a.gather(&[0], &mut buf, 100).unwrap();
    drop(a);
    c.compact().unwrap();
    assert_eq!(c.len(), 5);
}

/// Finding: an undo log found at open used to be rolled back before any
/// lock was taken, under the feet of handles reading the table.
#[test]
fn recovery_waits_for_the_store_to_be_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = filled(&path, 8);
    drop(store);
    // An interrupted delete of record 2 (the tail moved into its slot).
    let meta = path.join("meta.zr");
    let prefix = |m: &std::path::Path| -> Vec<u8> {
        let mut f = fs::File::open(m).unwrap();
        let mut buf = vec![0u8; entry_offset(8) as usize];
        std::io::Read::read_exact(&mut f, &mut buf).unwrap();
        buf
    };
    let mut bytes = prefix(&meta);
    let at = |i: u32| entry_offset(i) as usize;
    let old_header = Header::decode(&bytes[..16]).unwrap();
    let old2 = RecordLoc::decode(bytes[at(2)..at(3)].try_into().unwrap());
    let tail: [u8; 16] = bytes[at(7)..at(8)].try_into().unwrap();
    bytes[at(2)..at(3)].copy_from_slice(&tail);
    bytes[..16].copy_from_slice(
        &Header {
            length: 7,
            ..old_header
        }
        .encode(),
    );
    let log = UndoLog {
        header: old_header,
        entries: vec![(2, old2)],
    };
    // A reader opened before the log appeared (as if another process's
    // delete were in flight) keeps the store busy.
    let reader: Store<Deflate> = Store::open_read_only(&path).unwrap();
    // The start of meta.zr rewritten in place, as the interrupted delete left it.
    std::io::Write::write_all(
        &mut fs::OpenOptions::new().write(true).open(&meta).unwrap(),
        &bytes,
    )
    .unwrap();
    fs::write(path.join(UNDO_FILE), log.encode()).unwrap();
    let err = match Store::<Deflate>::open(&path) {
        Ok(_) => panic!("opened and recovered while another handle had the store open"),
        Err(e) => e,
    };
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert_eq!(prefix(&meta), bytes, "meta.zr rewritten");
    assert!(path.join(UNDO_FILE).exists());
    drop(reader);
    let store: Store<Deflate> = Store::open(&path).unwrap();
    assert_eq!(store.len(), 8, "rolled back");
    assert!(!path.join(UNDO_FILE).exists());
    let mut buf = vec![0u8; 100];
    store.gather(&[2], &mut buf, 100).unwrap();
    assert!(buf.iter().all(|&b| b == 2));
}

/// A handle opened before another handle appended and committed keeps the
/// header it read at open; when it later becomes the writer (the other
/// closed), it must catch up with the header on disk first, not append from
/// its stale frontier over the other's records.
#[test]
fn a_late_writer_does_not_overwrite_records_committed_since_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let first: Store<Deflate> = Store::open(&path).unwrap();
    let late: Store<Deflate> = Store::open(&path).unwrap();
    first.append_fixed(&[1u8; 400], 4, 100).unwrap();
    first.sync().unwrap();
    drop(first);
    // Refusing is a fix too; appending after the committed records is the other.
    let appended = late.append_fixed(&[2u8; 100], 1, 100).is_ok();
    drop(late);
    let store: Store<Deflate> = Store::open(&path).unwrap();
    assert_eq!(store.len(), if appended { 5 } else { 4 });
    let mut buf = vec![0u8; 400];
    store.gather(&[0, 1, 2, 3], &mut buf, 100).unwrap();
    assert!(buf.iter().all(|&b| b == 1), "committed records overwritten");
}

/// The same for a format v2 store with lanes, and for a delete by a handle
/// that was opened before the other's appends (it must delete from the
/// store as it is on disk).
#[test]
fn a_late_writer_catches_up_in_format_v2_and_before_a_delete() {
    use loaderx_store::{
        OpenOptions,
        format::{CodecTag, v2::Schema},
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2");
    // Small appends over every lane, so every lane's tail moves.
    let options = OpenOptions {
        lanes: 3,
        lane_bytes: 0,
        ..OpenOptions::default()
    };
    drop(
        Store::<Deflate>::create_v2(&path, &Schema::bytes(CodecTag::LZ4), options.clone()).unwrap(),
    );
    let first: Store<Deflate> = Store::open_with(&path, options.clone()).unwrap();
    let mut late: Store<Deflate> = Store::open_with(&path, options).unwrap();
    first.append_fixed(&[1u8; 600], 6, 100).unwrap();
    first.sync().unwrap();
    drop(first);
    late.delete(&[5]).unwrap();
    late.append_fixed(&[2u8; 100], 1, 100).unwrap();
    drop(late);
    let store: Store<Deflate> = Store::open(&path).unwrap();
    assert_eq!(store.len(), 6);
    assert_eq!(store.lanes(), 3);
    let mut buf = vec![0u8; 600];
    store.gather(&[0, 1, 2, 3, 4, 5], &mut buf, 100).unwrap();
    assert!(buf[..500].iter().all(|&b| b == 1));
    assert!(buf[500..].iter().all(|&b| b == 2));
    store.verify().unwrap();
}
