"""Bad input to Zrecord: damaged stores, bad arguments and refused operations.

Every kind of damage to a store (truncated files, damaged header or table
entries, records that do not decode, files changed behind an open store) is
tested in the engine, ``crates/loaderx-store/tests/damage.rs``. Here one case
of each error kind checks what the Python layer adds: the error arrives as a
``ZrecordError`` with its code and a message naming the file, nothing is
written into the caller's array, and nothing crashes.

Anything that could die of a signal (reading a file that shrank behind the
store's back) runs in a child interpreter, so a SIGBUS fails one test instead
of killing the session.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from conftest import (
    CODEC,
    OFFSET,
    PHYS,
    assert_same_image,
    image,
    make_store,
    ramps,
    read_entry,
    run_child,
    write_entry,
)

import loaderx
from loaderx import MAX_RECORD_LEN, Dataset, Zrecord, ZrecordError, _native

# --- damaged stores reach Python as ZrecordError ----------------------------------------

UNOPENABLE = {
    "meta.zr shorter than the header": (
        lambda p: os.truncate(p / "meta.zr", 10),
        ["meta.zr", "truncated", "have 10"],
    ),
    "chunk file missing": (lambda p: os.remove(p / "0.zr"), ["0.zr", "missing"]),
}


@pytest.mark.parametrize("case", list(UNOPENABLE))
def test_a_store_that_cannot_be_opened_is_code_8_naming_it(tmp_path: Path, case: str) -> None:
    damage, fragments = UNOPENABLE[case]
    path = tmp_path / "z"
    make_store(path)
    damage(path)
    before = image(path)
    with pytest.raises(ZrecordError) as info:
        Zrecord(path)
    assert info.value.code == -8, info.value
    for fragment in [str(path), *fragments]:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert_same_image(before, image(path))  # a refused open repairs nothing


def _unknown_codec(path: Path) -> None:
    entry = read_entry(path, 1)
    entry[CODEC] = 9
    write_entry(path, 1, entry)


def _garbage_stream(path: Path) -> None:
    entry = read_entry(path, 1)
    with open(path / "0.zr", "r+b") as f:
        f.seek(entry[OFFSET])
        f.write(b"\xa5" * entry[PHYS])


#: damage, what the message says, and whether it is in the table entry (then
#: lengths() sees it too, and it is found before anything is written; bytes
#: that fail to decode are found while other records are being written)
BAD_RECORD = {
    "unknown codec tag": (_unknown_codec, "unknown codec tag 9", True),
    "zstd frame of garbage": (_garbage_stream, "invalid zstd frame", False),
}


@pytest.mark.parametrize("case", list(BAD_RECORD))
def test_a_damaged_record_is_code_7_naming_it(tmp_path: Path, case: str) -> None:
    """The store opens; every call touching the bad record fails naming it (a
    bad entry before anything is written); the other records still read."""
    damage, reason, in_entry = BAD_RECORD[case]
    path = tmp_path / "z"
    data = make_store(path, codec="zstd", n=4, item=100)
    damage(path)
    with Zrecord(path) as zr:
        dst = np.full((3, 100), 0xEE, np.uint8)
        calls = {
            "gather": lambda: zr.gather([0, 1, 3], dst, 100),
            "gather_var": lambda: zr.gather_var([3, 1], dst, [0, 100]),
        }
        if in_entry:
            calls["lengths"] = lambda: zr.lengths([1])
        else:
            assert zr.lengths([1]).tolist() == [100]
        for name, call in calls.items():
            with pytest.raises(ZrecordError) as info:
                call()
            assert info.value.code == -7, (name, info.value)
            message = str(info.value)
            assert "entry 1" in message and reason in message, (name, message)
            assert str(path) in message, (name, message)
        if in_entry:
            assert (dst == 0xEE).all()  # validated before anything was written
        zr.gather([3, 0, 2], dst, 100)
        assert np.array_equal(dst, data[[3, 0, 2]])


def _fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_a_read_only_open_after_a_killed_delete_asks_for_a_writable_open(
    tmp_path: Path,
) -> None:
    """What a delete killed after its undo log was made durable leaves
    (docs/FORMAT.md, "Delete"): a read-only open cannot roll it back, and
    says so (code -2, naming the log), instead of "not a loaderx store";
    one writable open rolls it back."""
    path = tmp_path / "z"
    data = make_store(path)
    header = (path / "meta.zr").read_bytes()[:16]
    log = b"ZRUNDO01" + header + struct.pack("<I", 0)
    (path / "meta.zr.undo").write_bytes(log + struct.pack("<Q", _fnv1a(log)))
    with pytest.raises(ZrecordError) as info:
        _native.Store.open_existing(str(path), False)
    message = str(info.value)
    assert info.value.code == -2, message
    assert str(path / "meta.zr.undo") in message and "open the store writable" in message
    assert "not a loaderx store" not in message
    Zrecord(path).close()  # a writable open recovers it
    assert not (path / "meta.zr.undo").exists()
    store = _native.Store.open_existing(str(path), False)
    try:
        assert len(store) == len(data)
    finally:
        store.close()


# --- files changed behind an open store -------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "flate"])
def test_chunk_truncated_after_open_errors_instead_of_sigbus(tmp_path: Path, codec: str) -> None:
    """Another process cuts 0.zr while a Dataset and a native DataLoader have
    it open: reads past the cut fail with -7 naming the file and entry
    (through ds[...] and through the loader), reads before it still work."""
    n, item = 64, 4096
    data = ramps(n, item)
    Dataset.write(tmp_path / "d", data, codec=codec).close()
    Dataset.write(tmp_path / "l", np.arange(n)).close()
    cut = os.path.getsize(tmp_path / "d" / "0.zr") // 2
    first_lost = next(i for i in range(n) if sum(read_entry(tmp_path / "d", i)[:2]) > cut)
    got = run_child(
        """
        d, l, cut = sys.argv[1], sys.argv[2], int(sys.argv[3])
        ds, ls = Dataset(d), Dataset(l)
        loader = DataLoader(ds, ls, num_workers=2, batch_size=16, prefetch_size=1, mode=0)
        first = next(loader)["label"].tolist()
        os.truncate(os.path.join(d, "0.zr"), cut)

        def loader_error():
            for _ in range(20):
                next(loader)

        report(
            first=first,
            head=attempt(lambda: int(ds[0:4].sum())),
            whole=attempt(lambda: ds[:].shape),
            loader=attempt(loader_error),
            emptied=attempt(lambda: (os.truncate(os.path.join(d, "0.zr"), 0), ds[0].tolist())),
        )
        loader.close()
        """,
        str(tmp_path / "d"),
        str(tmp_path / "l"),
        str(cut),
    )
    assert got["first"] == list(range(16))
    assert got["head"] == {"ok": True, "value": int(data[:4].astype(np.int64).sum())}
    for key, entry in (("whole", first_lost), ("loader", None), ("emptied", 0)):
        result = got[key]
        assert not result["ok"] and result["type"] == "ZrecordError", result
        assert result["code"] == -7, result
        assert "past the end of chunk file" in result["msg"], result
        if entry is not None:
            assert f"entry {entry}:" in result["msg"], result
    assert 'stream "data"' in got["loader"]["msg"]
    assert "0.zr entry 0:" in got["emptied"]["msg"] and "0.zr (0 bytes)" in got["emptied"]["msg"]


def test_append_after_the_tail_chunk_was_cut_is_refused_and_only_lost_records_fail(
    tmp_path: Path,
) -> None:
    """Another process cuts 0.zr to 250 bytes under an open store: records 0
    and 1 (bytes 0..200) are intact, 2..7 are lost. The append is refused
    (code -8 naming the file) and adds nothing; records 0 and 1 still read
    exactly; every lost record is a -7 error naming it, never bytes that were
    never written (zeros)."""
    path = tmp_path / "z"
    data = make_store(path, n=8, item=100)
    with Zrecord(path) as zr:
        os.truncate(path / "0.zr", 250)
        with pytest.raises(ZrecordError) as info:
            zr.append(np.full(100, 9, np.uint8), 1, 100)
        assert info.value.code == -8 and "0.zr" in str(info.value), info.value
        assert len(zr) == 8
        out = np.zeros((2, 100), np.uint8)
        zr.gather([0, 1], out, 100)
        assert np.array_equal(out, data[:2])
        for i in range(2, 8):
            one = np.full(100, 0xEE, np.uint8)
            with pytest.raises(ZrecordError) as info:
                zr.gather([i], one, 100)
            assert info.value.code == -7 and f"entry {i}" in str(info.value), info.value
            assert (one == 0xEE).all(), f"record {i}: bytes written before the error"


# --- bad arguments ---------------------------------------------------------------------


def test_index_lists_numpy_would_make_float_are_judged_item_by_item(tmp_path: Path) -> None:
    """NumPy turns [-1, 2**63] into float64; the error must still name the
    integer at fault, not complain about floats."""
    with Zrecord(tmp_path / "z", codec="raw") as zr:
        zr.append(np.arange(80, dtype=np.uint8), 10, 8)
        dst = np.zeros(16, np.uint8)
        with pytest.raises(ZrecordError, match=r"index -1 at position 0") as info:
            zr.gather([-1, 2**63], dst, 8)
        assert info.value.code == -3
        with pytest.raises(ZrecordError, match=str(2**63)) as info:
            zr.lengths([2**63, 3])
        assert info.value.code == -3
        with pytest.raises(TypeError, match="float at position 1"):
            zr.gather([2**63, 1.0], dst, 8)
        with pytest.raises(ZrecordError, match=str(2**64)):
            zr.delete([1, 2**64])
        assert len(zr) == 10 and (dst == 0).all()
    with Dataset.write(tmp_path / "d", np.arange(10)) as ds:
        assert ds[[-1, 3]].tolist() == [9, 3]
        with pytest.raises(ZrecordError, match=str(2**63)) as info:
            ds[[-1, 2**63]]  # -1 counts from the end; 2**63 is the one out of range
        assert info.value.code == -3
        with pytest.raises(ZrecordError, match="-11 at position 0") as info:
            ds[[-11, 2**63]]
        assert info.value.code == -3


def test_counts_and_strides_beyond_size_t_are_geometry_errors(tmp_path: Path) -> None:
    """Python ints of any size: the same clear codes as large-but-representable
    ones, never an OverflowError without a what or where."""
    with Zrecord(tmp_path / "z", codec="raw") as zr:
        zr.append(np.arange(64, dtype=np.uint8), 8, 8)
        dst = np.zeros(64, np.uint8)
        for stride in (2**63, 2**64, 2**80):
            with pytest.raises(ZrecordError, match="item 1") as info:
                zr.gather([0, 1], dst, stride)
            assert info.value.code == -6
        with pytest.raises(ZrecordError, match="destination for item 0") as info:
            zr.gather_var([0], dst, [2**64 - 1])
        assert info.value.code == -6
        with pytest.raises(ZrecordError, match="source for item 8") as info:
            zr.append(np.zeros(64, np.uint8), 2**64, 8)
        assert info.value.code == -6
        with pytest.raises(ZrecordError, match=str(2**64)) as info:
            zr.append(np.zeros(64, np.uint8), 1, 2**64)
        assert info.value.code == -4
        with pytest.raises(ZrecordError, match="items 0 and 1 overlap") as info:
            zr.gather_var([0, 1], dst, [0, 4])
        assert info.value.code == -6
        assert (dst == 0).all() and len(zr) == 8


def test_empty_path_is_refused_instead_of_using_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="empty"):
        Zrecord("")
    with pytest.raises(ValueError, match="empty"):
        loaderx._native.Store("")
    with pytest.raises((FileNotFoundError, ValueError)):
        Dataset("")
    assert list(tmp_path.iterdir()) == []


def test_path_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"precious")
    with pytest.raises(ZrecordError) as info:
        Zrecord(blocker)
    assert info.value.code == -8 and str(blocker) in str(info.value) and "file" in str(info.value)
    with pytest.raises(FileNotFoundError, match="is a file"):
        Dataset(blocker)
    with pytest.raises(OSError, match=re.escape(str(blocker))):
        Dataset.write(blocker, np.arange(4))
    assert blocker.read_bytes() == b"precious"


# --- refused operations change nothing --------------------------------------------------


def _other_handle(path: Path) -> Any:
    return Zrecord(path)


def _damage_entry_3(path: Path) -> None:
    entry = read_entry(path, 3)
    entry[CODEC] = 9
    write_entry(path, 3, entry)


REFUSED: dict[str, tuple[Callable[[Zrecord], Any], Any, int | None, list[str]]] = {
    "append a record over 1 MiB": (
        lambda zr: zr.append(np.zeros(MAX_RECORD_LEN + 1, np.uint8), 1, MAX_RECORD_LEN + 1),
        ZrecordError, -4, ["1048577", "1048576"],
    ),
    "append zero-length records": (
        lambda zr: zr.append(np.zeros(8, np.uint8), 4, 0), ZrecordError, -4, ["empty"],
    ),
    "append_var with an empty record mid-batch": (
        lambda zr: zr.append_var(np.arange(64, dtype=np.uint8), [0, 8, 16, 24], [8, 8, 0, 8]),
        ZrecordError, -4, ["record 2", "empty"],
    ),
    "append_var with an oversized record mid-batch": (
        lambda zr: zr.append_var(
            np.zeros(MAX_RECORD_LEN + 16, np.uint8), [0, 8, 8], [8, 8, MAX_RECORD_LEN + 1]
        ),
        ZrecordError, -4, ["record 2", "1048577"],
    ),
    "append from a source too short": (
        lambda zr: zr.append(np.zeros(100, np.uint8), 2, 64),
        ZrecordError, -6, ["source for item 1", "128", "100"],
    ),
    "append_var with an offset past the source": (
        lambda zr: zr.append_var(np.zeros(64, np.uint8), [0, 60], [8, 8]),
        ZrecordError, -6, ["source for item 1", "68", "64"],
    ),
    "append a count past size_t": (
        lambda zr: zr.append(np.zeros(64, np.uint8), 2**64, 8), ZrecordError, -6, ["item 8"],
    ),
    "append with an unknown codec": (
        lambda zr: zr.append(np.zeros(8, np.uint8), 1, 8, codec="snappy"),
        ValueError, None, ["snappy"],
    ),
    "append from a non-contiguous source": (
        lambda zr: zr.append(np.zeros((4, 16), np.uint8)[:, ::2], 4, 8),
        ValueError, None, ["contiguous"],
    ),
    "append_var with mismatched offsets and lens": (
        lambda zr: zr.append_var(np.zeros(64, np.uint8), [0, 8], [8]),
        ValueError, None, ["same length"],
    ),
    "delete with one index out of range after valid ones": (
        lambda zr: zr.delete([0, 1, len(zr)]), ZrecordError, -3, ["index 20", "out of range"],
    ),
    "delete with a negative index": (
        lambda zr: zr.delete([3, -1]), ZrecordError, -3, ["-1", "position 1"],
    ),
    "delete with a non-integer": (
        lambda zr: zr.delete([1, 2.5]), TypeError, None, ["position 1"],
    ),
    "compact while another handle has the store open": (
        lambda zr: zr.compact(), ZrecordError, -2, ["lock"],
    ),
    "compact a store with a damaged table entry": (
        lambda zr: zr.compact(), ZrecordError, -7, ["entry 3", "unknown codec tag 9"],
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_operation_leaves_every_byte_as_it_was(tmp_path: Path, case: str) -> None:
    op, exc_type, code, fragments = REFUSED[case]
    path = tmp_path / "z"
    with Zrecord(path, codec="flate") as zr:
        zr.append(ramps(12, 300), 12, 300)
        zr.append(ramps(12, 200), 12, 200, codec="raw")
        zr.delete([2, 5, 11, 20])  # leaves work for compact
        zr.sync()
    if "damaged" in case:
        _damage_entry_3(path)
    others = [_other_handle(path)] if "another handle" in case else []
    try:
        before = image(path)
        with Zrecord(path) as zr:
            with pytest.raises(exc_type) as info:
                op(zr)
            if code is not None:
                assert info.value.code == code, info.value
            for fragment in fragments:
                assert fragment in str(info.value), (fragment, str(info.value))
            assert len(zr) == 20
            after = image(path)
            if "damaged" not in case:
                # The handle is still good for work after the refusal.
                assert zr.append(np.full(50, 3, np.uint8), 1, 50) == 20
                out = np.zeros(50, np.uint8)
                zr.gather([20], out, 50)
                assert (out == 3).all()
    finally:
        for other in others:
            other.close()
    assert_same_image(before, after)
