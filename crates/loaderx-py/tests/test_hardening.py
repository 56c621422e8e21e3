"""Hardening: every bad input gets a clear error (saying what and where) and
changes nothing; delete/compact cannot tear a read; the loader surfaces
failures, closes promptly in every state and leaks nothing.

Cases the other files already cover are not repeated here: wrong magic or
version, a flate stream of garbage, a short destination, non-contiguous or
read-only buffers, negative / out-of-range / non-integer indices, zero-length
and oversized records, a missing or foreign schema, a mismatched
``Dataset.write``, delete during gathers, compact with another handle open in
this process (see test_zrecord.py, test_dataset.py, test_dataloader.py).

Anything that could die of a signal (reading a file that shrank behind the
store's back) runs in a child interpreter, so a SIGBUS fails one test instead
of killing the session.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import re
import select
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from conftest import tagged

import loaderx
from loaderx import MAX_RECORD_LEN, DataLoader, Dataset, Zrecord, ZrecordError

HEADER = struct.Struct("<4sHHII")  # magic, version, tail_chunk, tail_offset, length
ENTRY = struct.Struct("<IIIHBB")  # offset, phys, logic, chunk_id, codec, reserved
OFFSET, PHYS, LOGIC, CHUNK, CODEC = range(5)

#: How long close() may take before the test calls it a hang. The promise is
#: "within a second"; the margin absorbs a loaded 2-core machine.
CLOSE_BOUND = 5.0

needs_proc = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="counts threads and fds through /proc"
)


# --- helpers ---------------------------------------------------------------------


def read_header(store: Path) -> list[Any]:
    with open(store / "meta.zr", "rb") as f:
        return list(HEADER.unpack(f.read(HEADER.size)))


def write_header(store: Path, fields: list[Any]) -> None:
    with open(store / "meta.zr", "r+b") as f:
        f.write(HEADER.pack(*fields))


def read_entry(store: Path, i: int) -> list[int]:
    with open(store / "meta.zr", "rb") as f:
        f.seek(HEADER.size + ENTRY.size * i)
        return list(ENTRY.unpack(f.read(ENTRY.size)))


def write_entry(store: Path, i: int, fields: list[int]) -> None:
    with open(store / "meta.zr", "r+b") as f:
        f.seek(HEADER.size + ENTRY.size * i)
        f.write(ENTRY.pack(*fields))


def ramps(n: int, item: int) -> np.ndarray:
    """Record i: bytes that depend on i and on the position (compressible)."""
    return ((np.arange(n)[:, None] * 7 + np.arange(item)[None, :] // 16) % 251).astype(np.uint8)


def make_store(path: Path, codec: str = "raw", n: int = 8, item: int = 100) -> np.ndarray:
    data = ramps(n, item)
    with Zrecord(path, codec=codec) as zr:
        zr.append(data, n, item)
        zr.sync()
    return data


BLOCK = 1 << 16


def image(directory: Path) -> dict[str, Any]:
    """Every file's size and contents, holes read as zeros: meta.zr is a
    268 MB sparse file, so only its data extents are read, in 64 KiB blocks,
    and all-zero blocks are left out."""
    out: dict[str, Any] = {}
    for p in sorted(directory.iterdir()):
        if p.is_dir():
            out[p.name] = "<dir>"
            continue
        with open(p, "rb") as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            blocks: dict[int, bytes] = {}
            pos = 0
            while pos < size:
                try:
                    start = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # only a hole is left
                        break
                    raise
                end = os.lseek(fd, start, os.SEEK_HOLE)
                at = start - start % BLOCK
                while at < end:
                    f.seek(at)
                    block = f.read(BLOCK)
                    if block.count(0) != len(block):
                        blocks[at] = block
                    at += BLOCK
                pos = max(end, at)
            out[p.name] = (size, blocks)
    return out


def assert_same_image(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert sorted(before) == sorted(after), "files appeared or vanished"
    for name in before:
        if before[name] == after[name]:
            continue
        (size0, blocks0), (size1, blocks1) = before[name], after[name]
        assert size0 == size1, f"{name} changed size: {size0} -> {size1}"
        changed = sorted(k for k in set(blocks0) | set(blocks1) if blocks0.get(k) != blocks1.get(k))
        pytest.fail(f"{name} changed in the 64 KiB blocks at {changed[:5]}")


CHILD_PRELUDE = """
import json, os, sys
import numpy as np
from loaderx import DataLoader, Dataset, Zrecord, ZrecordError

def attempt(fn):
    try:
        value = fn()
    except Exception as exc:
        return {"ok": False, "type": type(exc).__name__, "code": getattr(exc, "code", None),
                "msg": str(exc)}
    return {"ok": True, "value": value}

def report(**results):
    print(json.dumps(results), flush=True)
"""


def run_child(code: str, *args: str) -> dict[str, Any]:
    """Runs `code` in a fresh interpreter and returns what it reported; fails
    (naming the signal) when the child crashes."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode < 0:
        import signal

        pytest.fail(f"the child died of {signal.Signals(-proc.returncode).name}:\n{proc.stderr}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def close_within(loader: DataLoader, seconds: float = CLOSE_BOUND) -> None:
    """close() on a helper thread: a hang fails the test instead of stalling it."""
    closer = threading.Thread(target=loader.close, name="test-closer")
    closer.start()
    closer.join(seconds)
    assert not closer.is_alive(), f"DataLoader.close() did not return within {seconds} s"


def eventually(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Table:
    """Duck-typed dataset (``__len__`` + ``__getitems__``): the Python engine.
    Optionally slow, or failing for batches that contain `fail_at`."""

    def __init__(self, values: np.ndarray, delay: float = 0.0, fail_at: int | None = None) -> None:
        self.values = values
        self.delay = delay
        self.fail_at = fail_at

    def __len__(self) -> int:
        return len(self.values)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        idxs = np.asarray(idxs, dtype=np.int64)
        if self.delay:
            time.sleep(self.delay)
        if self.fail_at is not None and self.fail_at in idxs:
            raise LookupError(f"table cannot serve index {self.fail_at}")
        return self.values[idxs]


# --- damaged stores: the header and the files --------------------------------------


def _header_field(i: int, value: int) -> Callable[[Path], None]:
    def damage(p: Path) -> None:
        fields = read_header(p)
        fields[i] = value
        write_header(p, fields)

    return damage


HEADER_DAMAGE = {
    "meta.zr empty": (
        lambda p: os.truncate(p / "meta.zr", 0),
        ["meta.zr", "truncated", "need 16", "have 0"],
    ),
    "meta.zr shorter than the header": (
        lambda p: os.truncate(p / "meta.zr", 10),
        ["meta.zr", "truncated", "need 16", "have 10"],
    ),
    "meta.zr shorter than its table": (
        lambda p: os.truncate(p / "meta.zr", 16 + 16 * 5),
        ["meta.zr", "truncated", f"need {16 + 16 * 8}", f"have {16 + 16 * 5}"],
    ),
    "length over 2^24": (_header_field(4, (1 << 24) + 1), ["meta.zr", "16777217", "16777216"]),
    "length of 2^32 - 1": (_header_field(4, (1 << 32) - 1), ["meta.zr", "4294967295", "16777216"]),
    "tail chunk over the limit": (
        _header_field(2, 4096),
        ["meta.zr", "tail_chunk 4096", "4096 chunks"],
    ),
    "tail chunk past the chunk files": (_header_field(2, 3), ["1.zr", "missing", "0..=3"]),
    "chunk file missing": (lambda p: os.remove(p / "0.zr"), ["0.zr", "missing"]),
}


@pytest.mark.parametrize("case", list(HEADER_DAMAGE))
def test_damaged_header_or_files_refuse_to_open_and_stay_untouched(
    tmp_path: Path, case: str
) -> None:
    damage, fragments = HEADER_DAMAGE[case]
    path = tmp_path / "z"
    make_store(path)
    damage(path)
    before = image(path)
    with pytest.raises(ZrecordError) as info:
        Zrecord(path)
    assert info.value.code == -8, info.value
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert str(path) in str(info.value)
    assert_same_image(before, image(path))  # a refused open repairs nothing


# --- damaged stores: table entries ---------------------------------------------


def _entry_field(i: int, value: Callable[[list[int]], int] | int) -> Callable[[list[int]], None]:
    def damage(entry: list[int]) -> None:
        entry[i] = value(entry) if callable(value) else value

    return damage


def _both_lengths(value: int) -> Callable[[list[int]], None]:
    def damage(entry: list[int]) -> None:
        entry[PHYS] = entry[LOGIC] = value

    return damage


ENTRY_DAMAGE = {
    "offset past the tail chunk's frontier": (
        _entry_field(OFFSET, 790),
        "past the tail chunk's frontier 800",
    ),
    "offset near the 4 GiB capacity": (
        _entry_field(OFFSET, 0xFFFFFFF0),
        "past the 4 GiB chunk capacity",
    ),
    "chunk id past the tail": (_entry_field(CHUNK, 1), "chunk 1 is past the tail chunk 0"),
    "unknown codec": (_entry_field(CODEC, 9), "unknown codec tag 9"),
    "zero length": (_both_lengths(0), "logical length 0"),
    "length over 1 MiB": (_both_lengths(MAX_RECORD_LEN + 1), "logical length 1048577"),
    "stored length over 1 MiB": (
        lambda e: (e.__setitem__(PHYS, MAX_RECORD_LEN + 1), e.__setitem__(CODEC, 1)),
        "stored length 1048577",
    ),
    "raw sizes disagree": (_entry_field(LOGIC, 99), "raw record stores 100 bytes but claims 99"),
}


@pytest.mark.parametrize("case", list(ENTRY_DAMAGE))
def test_damaged_table_entry_is_code_7_naming_the_entry(tmp_path: Path, case: str) -> None:
    """The store opens (entries are checked when touched); reading the bad
    entry fails before anything is written, naming meta.zr and the entry;
    the other records still read."""
    damage, reason = ENTRY_DAMAGE[case]
    path = tmp_path / "z"
    data = make_store(path, n=8, item=100)
    entry = read_entry(path, 5)
    damage(entry)
    write_entry(path, 5, entry)
    with Zrecord(path) as zr:
        dst = np.full((3, 100), 0xEE, np.uint8)
        for call in (lambda: zr.gather([0, 5, 7], dst, 100), lambda: zr.lengths([5])):
            with pytest.raises(ZrecordError) as info:
                call()
            assert info.value.code == -7
            message = str(info.value)
            assert "meta.zr entry 5" in message and reason in message, message
        assert (dst == 0xEE).all()  # validated before anything was written
        zr.gather([0, 4, 7], dst, 100)
        assert np.array_equal(dst, data[[0, 4, 7]])


def test_chunk_shorter_than_its_records_is_code_7(tmp_path: Path) -> None:
    """A chunk file cut short before the store was opened: the records past
    its real end fail, naming the entry and both lengths."""
    path = tmp_path / "z"
    data = make_store(path, n=8, item=100)
    os.truncate(path / "0.zr", 450)
    with Zrecord(path) as zr:
        dst = np.zeros((8, 100), np.uint8)
        with pytest.raises(ZrecordError) as info:
            zr.gather(np.arange(8), dst, 100)
        assert info.value.code == -7
        assert "entry 4" in str(info.value) and "past the end of chunk file 0.zr (450 bytes)" in str(info.value)
        zr.gather(np.arange(4), dst[:4], 100)
        assert np.array_equal(dst[:4], data[:4])


CODEC_DAMAGE = {
    # (codec, fault): entries and bytes are otherwise valid
    ("zstd", "garbage bytes"): "invalid zstd frame",
    ("lz4", "garbage bytes"): "invalid lz4 block",
    ("flate", "claims fewer bytes"): "flate record",
    ("zstd", "claims fewer bytes"): "zstd record",
    ("lz4", "claims fewer bytes"): "lz4 record",
    ("flate", "claims more bytes"): "decoded to 100 bytes, expected 150",
    ("zstd", "claims more bytes"): "expected 150",
    ("lz4", "claims more bytes"): "decoded to 100 bytes, expected 150",
    ("flate", "stored bytes cut short"): "flate record",
    ("zstd", "stored bytes cut short"): "zstd record",
    ("lz4", "stored bytes cut short"): "lz4 record",
}


@pytest.mark.parametrize("codec,fault", list(CODEC_DAMAGE))
def test_compressed_record_that_does_not_decode_exactly_is_code_7(
    tmp_path: Path, codec: str, fault: str
) -> None:
    path = tmp_path / "z"
    data = make_store(path, codec=codec, n=4, item=100)
    entry = read_entry(path, 1)
    assert entry[CODEC] == loaderx.CODECS[codec] and entry[PHYS] < 100  # really compressed
    if fault == "garbage bytes":
        with open(path / "0.zr", "r+b") as f:
            f.seek(entry[OFFSET])
            f.write(b"\xa5" * entry[PHYS])
    elif fault == "claims fewer bytes":
        entry[LOGIC] -= 1
    elif fault == "claims more bytes":
        entry[LOGIC] += 50
    else:
        entry[PHYS] -= 3
    write_entry(path, 1, entry)
    with Zrecord(path) as zr:
        dst = np.zeros((2, 200), np.uint8)
        with pytest.raises(ZrecordError) as info:
            zr.gather([0, 1], dst, 200)
        assert info.value.code == -7
        message = str(info.value)
        assert "0.zr entry 1" in message and CODEC_DAMAGE[codec, fault] in message, message
        out = np.zeros((2, 100), np.uint8)
        zr.gather([3, 0], out, 100)
        assert np.array_equal(out, data[[3, 0]])


# --- damaged after the store was opened (elsewhere) ----------------------------------


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


def test_chunk_deleted_after_open_still_reads_and_reopening_refuses(tmp_path: Path) -> None:
    """An open handle keeps the unlinked file's bytes (never a wrong answer);
    a new open names the missing file."""
    path = tmp_path / "z"
    data = make_store(path, n=16, item=256)
    with Zrecord(path) as zr:
        os.remove(path / "0.zr")
        out = np.zeros_like(data)
        zr.gather(np.arange(16), out, 256)
        assert np.array_equal(out, data)
        with pytest.raises(ZrecordError) as info:
            Zrecord(path)
        assert info.value.code == -8 and "0.zr" in str(info.value) and "missing" in str(info.value)


def test_meta_truncated_after_open_refuses_reads(tmp_path: Path) -> None:
    path = tmp_path / "z"
    make_store(path, n=4000, item=8)
    got = run_child(
        """
        zr = Zrecord(sys.argv[1])
        os.truncate(os.path.join(sys.argv[1], "meta.zr"), 8192)
        out = np.zeros((4000, 8), np.uint8)
        report(gather=attempt(lambda: zr.gather(np.arange(4000), out, 8)),
               lengths=attempt(lambda: zr.lengths([3999]).tolist()))
        """,
        str(path),
    )
    for result in got.values():
        assert result["type"] == "ZrecordError" and result["code"] == -8, result
        assert "meta.zr is truncated" in result["msg"] and "have 8192" in result["msg"], result


@pytest.mark.parametrize("op", ["stats", "delete", "compact"])
def test_meta_truncated_after_open_refuses_maintenance(tmp_path: Path, op: str) -> None:
    path = tmp_path / "z"
    make_store(path, n=4000, item=8)
    got = run_child(
        f"""
        zr = Zrecord(sys.argv[1])
        os.truncate(os.path.join(sys.argv[1], "meta.zr"), 8192)
        calls = dict(stats=zr.stats, delete=lambda: zr.delete([0, 1]), compact=zr.compact)
        report(result=attempt(calls[{op!r}]))
        """,
        str(path),
    )
    result = got["result"]
    assert result["type"] == "ZrecordError" and result["code"] in (-7, -8), result
    assert "meta.zr" in result["msg"], result


def test_chunk_truncated_after_open_refuses_compact(tmp_path: Path) -> None:
    path = tmp_path / "z"
    make_store(path, n=4000, item=512)
    got = run_child(
        """
        zr = Zrecord(sys.argv[1])
        zr.delete(list(range(0, 4000, 2)))
        os.truncate(os.path.join(sys.argv[1], "0.zr"), 100_000)
        report(result=attempt(zr.compact))
        """,
        str(path),
    )
    result = got["result"]
    assert result["type"] == "ZrecordError" and result["code"] == -7, result
    assert "0.zr" in result["msg"], result


def test_append_after_tail_chunk_was_cut_never_turns_lost_records_into_zeros(
    tmp_path: Path,
) -> None:
    path = tmp_path / "z"
    data = make_store(path, n=8, item=100)
    with Zrecord(path) as zr:
        os.truncate(path / "0.zr", 250)  # records 2.. lost, by another process
        try:
            zr.append(np.full(100, 9, np.uint8), 1, 100)
        except ZrecordError:
            pass  # refusing is one right answer
        wrong = []
        for i in range(8):
            out = np.zeros(100, np.uint8)
            try:
                zr.gather([i], out, 100)
            except ZrecordError:
                continue  # an error is the other
            if not np.array_equal(out, data[i]):
                wrong.append(i)
        assert not wrong, f"records {wrong} read back as bytes that were never written"


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


BAD_SCHEMAS: dict[str, tuple[Any, str]] = {
    "not JSON": (b"{not json", "not valid JSON"),
    "empty file": (b"", "not valid JSON"),
    "binary garbage": (b"\xff\xfe\x00", "not valid JSON"),
    "missing dtype": ({"dtype": None}, "no 'dtype' entry"),
    "missing shape": ({"shape": None}, "no 'shape' entry"),
    "missing codec": ({"codec": None}, "no 'codec' entry"),
    "dtype not understood": ({"dtype": "bogus"}, "'dtype' 'bogus' is not a NumPy dtype"),
    "dtype not a string": ({"dtype": 5}, "'dtype' must be a NumPy dtype string"),
    "dtype of objects": ({"dtype": "|O"}, "Python objects"),
    "shape not a list": ({"shape": 5}, "'shape' must be a list"),
    "shape negative": ({"shape": [-4, 4]}, "'shape' must be a list"),
    "shape of floats": ({"shape": [1.5]}, "'shape' must be a list"),
    "shape of bools": ({"shape": [True]}, "'shape' must be a list"),
    "zero-byte samples": ({"shape": [0]}, "is 0 bytes"),
    "samples over 1 MiB": ({"shape": [1 << 40]}, "outside 1..=1048576"),
    "unknown codec": ({"codec": "snappy"}, "unknown codec 'snappy'"),
    "other sample size (dtype)": ({"dtype": "<f8"}, "record 0 of the store is 64 bytes"),
    "other sample size (shape)": ({"shape": [8]}, "<i4[8] (32 bytes)"),
}


@pytest.mark.parametrize("case", list(BAD_SCHEMAS))
def test_unusable_schema_is_a_value_error_naming_the_file(tmp_path: Path, case: str) -> None:
    path = tmp_path / "d"
    Dataset.write(path, np.arange(64, dtype=np.int32).reshape(4, 16)).close()
    schema_path = path / "schema.json"
    change, fragment = BAD_SCHEMAS[case]
    if isinstance(change, bytes):
        schema_path.write_bytes(change)
    else:
        schema = json.loads(schema_path.read_text())
        for key, value in change.items():
            if value is None:
                del schema[key]
            else:
                schema[key] = value
        schema_path.write_text(json.dumps(schema))
    before = image(path)
    with pytest.raises(ValueError) as info:
        Dataset(path)
    assert not isinstance(info.value, ZrecordError)
    assert str(schema_path) in str(info.value) and fragment in str(info.value), str(info.value)
    with pytest.raises(ValueError):
        Dataset.write(path, np.arange(64, dtype=np.int32).reshape(4, 16))
    assert_same_image(before, image(path))


def test_records_of_another_size_are_refused_never_half_filled(tmp_path: Path) -> None:
    """A record appended behind the Dataset's back with another size: a
    batch holding it fails with -6 naming the record and the schema (never
    a row of uninitialised memory), through ds[...] and the native loader."""
    n = 40
    path = tmp_path / "d"
    rows = tagged(n, 16)
    Dataset.write(path, rows).close()
    with Zrecord(path, codec="raw") as zr:
        zr.append(np.full(32, 7, np.uint8), 1, 32)  # half a sample: index 40
        zr.append(np.full(128, 7, np.uint8), 1, 128)  # two samples: index 41
    Dataset.write(tmp_path / "l", np.arange(n + 2)).close()
    with Dataset(path) as ds, Dataset(tmp_path / "l") as ls:
        for idx in ([3, 40], [41], [-2]):
            with pytest.raises(ZrecordError) as info:
                ds[idx]
            assert info.value.code == -6
            message = str(info.value)
            assert "schema.json" in message and "<i4[16]" in message, message
            assert "is 32 bytes" in message or "is 128 bytes" in message, message
        assert np.array_equal(ds[:n], rows)
        with DataLoader(ds, ls, num_workers=1, batch_size=n + 2, mode=0) as loader:
            with pytest.raises(ZrecordError) as info:
                next(loader)
            assert info.value.code == -6 and "record 40 is 32 bytes" in str(info.value)


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


DATASET_REFUSED: dict[str, Callable[[Path], Any]] = {
    "write another dtype": lambda p: Dataset.write(p, np.zeros((4, 16), np.float32)),
    "write another shape": lambda p: Dataset.write(p, np.zeros((4, 4, 4), np.int32)),
    "write samples over 1 MiB": lambda p: Dataset.write(
        p, np.zeros((1, MAX_RECORD_LEN + 4), np.uint8)
    ),
    "write an unknown codec": lambda p: Dataset.write(p, np.zeros((4, 16), np.int32), codec="gzip"),
    "write a 0-d array": lambda p: Dataset.write(p, np.int32(3)),
    "delete out of range": lambda p: Dataset(p).delete([0, 40]),
    "delete a negative index": lambda p: Dataset(p).delete([0, -1]),
}


@pytest.mark.parametrize("case", list(DATASET_REFUSED))
def test_refused_dataset_operation_leaves_every_byte_as_it_was(tmp_path: Path, case: str) -> None:
    path = tmp_path / "d"
    Dataset.write(path, tagged(40, 16)).close()
    before = image(path)
    with pytest.raises((ValueError, ZrecordError)) as info:
        DATASET_REFUSED[case](path)
    if case.startswith("delete"):
        assert isinstance(info.value, ZrecordError) and info.value.code == -3
    else:
        assert not isinstance(info.value, ZrecordError)
    gc.collect()
    assert_same_image(before, image(path))
    with Dataset(path) as ds:
        assert np.array_equal(ds[:], tagged(40, 16))


# --- exclusive operations ----------------------------------------------------------------

K = 1_000_003  # tag multiplier: row[j] = tag * K + j * 7919 (mod 2**32)


def tag_rows(tags: np.ndarray, width: int) -> np.ndarray:
    tags = np.asarray(tags, dtype=np.uint64)
    cols = np.arange(width, dtype=np.uint64) * 7919
    return ((tags[:, None] * K + cols) % 2**32).astype(np.uint32)


def bad_rows(rows: np.ndarray, n: int, forbidden: frozenset[int] = frozenset()) -> list[str]:
    """Rows that are not exactly some live record (torn, foreign or deleted)."""
    tags = rows[:, 0].astype(np.uint64) // K
    good = (tags < n) & (rows[:, 0].astype(np.uint64) % K == 0)
    good &= (rows == tag_rows(np.where(good, tags, 0), rows.shape[1])).all(axis=1)
    problems = [f"row {i} is not any record" for i in np.flatnonzero(~good)[:3]]
    problems += [
        f"record {t} was read after its delete returned" for t in tags[good] if int(t) in forbidden
    ]
    return problems[:3]


def test_delete_and_compact_while_threads_and_a_loader_gather(tmp_path: Path) -> None:
    """Reader threads (ds[...]) and a native DataLoader gather from the same
    Dataset object while the main thread deletes and compacts it: every row
    is a whole, live record; a delete that returned is never undone; the
    store ends consistent."""
    n, width = 3000, 32
    ds = Dataset.write(tmp_path / "d", tag_rows(np.arange(n), width), codec="flate")
    ls = Dataset.write(tmp_path / "l", np.arange(n))
    state: dict[str, frozenset[int]] = {"gone": frozenset()}  # tags whose delete returned
    stop = threading.Event()
    errors: list[str] = []
    gathers = [0, 0, 0, 0]

    def reader(slot: int) -> None:
        rng = np.random.default_rng(slot)
        while not stop.is_set():
            gone = state["gone"]
            try:
                rows = ds[rng.integers(0, max(len(ds), 1), 64)]
            except ZrecordError as exc:
                if exc.code != -3:  # the store shrank between len() and the gather
                    errors.append(repr(exc))
                continue
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))
                continue
            errors.extend(bad_rows(rows, n, gone))
            gathers[slot] += 1

    def consumer(loader: DataLoader) -> None:
        while not stop.is_set():
            try:
                batch = next(loader)
            except StopIteration:
                return
            except ZrecordError as exc:
                if exc.code != -3:  # its sampler still draws from the old length
                    errors.append(repr(exc))
                continue
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))
                continue
            errors.extend(bad_rows(batch["data"], n))  # prefetched: may predate a delete
            gathers[3] += 1

    loader = DataLoader(ds, ls, num_workers=2, batch_size=64, prefetch_size=2, mode=1)
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=consumer, args=(loader,)))
    for t in threads:
        t.start()
    deleted: set[int] = set()
    rng = np.random.default_rng(99)
    try:
        assert eventually(lambda: min(gathers) > 0), "the gatherers never got going"
        during = sum(gathers)
        for step in range(60):
            victims = rng.choice(len(ds), 20, replace=False)
            tags_before = ds[victims][:, 0] // K
            ds.delete(victims)
            deleted.update(int(t) for t in tags_before)
            state["gone"] = frozenset(deleted)
            if step % 5 == 4:
                ds.compact()
        assert sum(gathers) > during, "no gather overlapped the deletes"
    finally:
        stop.set()
        close_within(loader, 60)
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:5]
    remaining = ds[:]
    assert not bad_rows(remaining, n, frozenset(deleted))
    assert sorted((remaining[:, 0] // K).tolist()) == sorted(set(range(n)) - deleted)
    ds.compact()
    assert ds.stats()["reclaimable"] == 0
    ds.close()
    ls.close()
    with Dataset(tmp_path / "d") as again:
        assert np.array_equal(again[:], remaining)


HOLDER = """
import sys
import numpy as np
from loaderx import Zrecord
zr = Zrecord(sys.argv[1])
print("open", len(zr), flush=True)
sys.stdin.readline()  # the parent tries to compact here
out = np.zeros((len(zr), 64), np.uint8)
zr.gather(np.arange(len(zr)), out, 64)
print("sum", int(out.astype(np.int64).sum()), flush=True)
zr.close()
"""


def _read_line(proc: subprocess.Popen[str], seconds: float = 60.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    assert ready, "the child said nothing"
    return proc.stdout.readline().strip()


def test_compact_refused_while_another_process_has_the_store_open(tmp_path: Path) -> None:
    path = tmp_path / "z"
    data = ramps(200, 64)
    with Zrecord(path, codec="raw") as zr:
        zr.append(data, 200, 64)
        zr.delete(list(range(0, 200, 2)))
        zr.sync()
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert _read_line(child) == "open 100"
        with Zrecord(path) as zr:
            expected = np.zeros((100, 64), np.uint8)
            zr.gather(np.arange(100), expected, 64)
            before = image(path)
            with pytest.raises(ZrecordError) as info:
                zr.compact()
            assert info.value.code == -2
            assert "lock" in str(info.value) and str(path) in str(info.value)
            assert_same_image(before, image(path))
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
            # The child still reads exactly what it had.
            assert _read_line(child) == f"sum {int(expected.astype(np.int64).sum())}"
            assert child.wait(60) == 0
            zr.compact()  # alone now
            assert zr.stats()["reclaimable"] == 0
            out = np.zeros_like(expected)
            zr.gather(np.arange(100), out, 64)
            assert np.array_equal(out, expected)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# --- loader robustness -----------------------------------------------------------------

ENGINES = ["native", "native+transform", "python"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Data (4 KB compressible records, so gathers take a moment) and labels,
    plus a copy of the data whose entry 0 is damaged."""
    root = tmp_path_factory.mktemp("pair")
    data = np.random.default_rng(0).integers(0, 4, (512, 1024), dtype=np.int32)
    for name in ("d", "bad"):
        Dataset.write(root / name, data).close()
    entry = read_entry(root / "bad", 0)
    entry[CODEC] = 9
    write_entry(root / "bad", 0, entry)
    Dataset.write(root / "l", np.arange(512)).close()
    with Dataset(root / "d") as ds, Dataset(root / "l") as ls, Dataset(root / "bad") as bad:
        yield ds, ls, bad


def _sleepy(batch: Any) -> Any:
    time.sleep(0.02)
    return batch


def _boom(batch: Any) -> Any:
    raise ArithmeticError("transform failed")


def make_loader(pair: Any, engine: str, failing: bool = False, **kwargs: Any) -> DataLoader:
    """The three engines; slow enough that a consumer really waits, and
    failing from the first batch when asked."""
    ds, ls, bad = pair
    kwargs = {"num_workers": 2, "batch_size": 128, "prefetch_size": 2, "mode": 0, **kwargs}
    if engine == "native":
        return DataLoader(bad if failing else ds, ls, **kwargs)
    if engine == "native+transform":
        return DataLoader(ds, ls, transform=_boom if failing else _sleepy, **kwargs)
    values = np.arange(512)
    data = Table(values, delay=0.02, fail_at=0 if failing else None)
    return DataLoader(data, Table(values), **kwargs)


@pytest.mark.parametrize("engine", ["native", "native+transform", "python+transform", "python"])
def test_a_failed_batch_raises_in_its_place_and_the_loader_goes_on(
    tmp_path: Path, engine: str
) -> None:
    """Batch 2 (indices 8..11) fails: by a damaged record (native), by the
    transform, or by ``__getitems__`` (python); batches 0, 1, 3, 4 arrive
    in order around the error."""
    ds = Dataset.write(tmp_path / "d", tagged(40, 8))
    ls = Dataset.write(tmp_path / "l", np.arange(40))
    kwargs: dict[str, Any] = {"num_workers": 2, "batch_size": 4, "mode": 0}

    def failing_transform(pair: tuple[Any, Any]) -> tuple[Any, Any]:
        if 9 in pair[1]:
            raise ArithmeticError("transform failed on label 9")
        return pair

    if engine == "native":
        ds.close()
        entry = read_entry(tmp_path / "d", 9)
        entry[CODEC] = 9
        write_entry(tmp_path / "d", 9, entry)
        ds = Dataset(tmp_path / "d")
        loader = DataLoader(ds, ls, **kwargs)
        expected: tuple[type[BaseException], str] = (ZrecordError, "meta.zr entry 9")
    elif engine.endswith("+transform"):
        data = ds if engine.startswith("native") else Table(ds[:])
        loader = DataLoader(data, ls, transform=failing_transform, **kwargs)
        expected = (ArithmeticError, "label 9")
    else:
        loader = DataLoader(Table(ds[:], fail_at=9), ls, **kwargs)
        expected = (LookupError, "index 9")
    try:
        assert next(loader)["label"].tolist() == [0, 1, 2, 3]
        assert next(loader)["label"].tolist() == [4, 5, 6, 7]
        with pytest.raises(expected[0], match=expected[1]) as info:
            next(loader)
        if isinstance(info.value, ZrecordError):
            assert info.value.code == -7 and 'stream "data", batch 2' in str(info.value)
        assert next(loader)["label"].tolist() == [12, 13, 14, 15]
        batch = next(loader)
        assert batch["label"].tolist() == [16, 17, 18, 19]
        assert np.array_equal(batch["data"][:, 0], batch["label"])
    finally:
        close_within(loader)
        ds.close()
        ls.close()


STATES = [
    "fresh",
    "full queue, no consumer",
    "mid-iteration",
    "consumer blocked in next()",
    "after an error",
]


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("engine", ENGINES)
def test_close_returns_promptly_in_every_state(pair: Any, engine: str, state: str) -> None:
    if state == "fresh":
        loader = make_loader(pair, engine)
        close_within(loader)
    elif state == "full queue, no consumer":
        loader = make_loader(pair, engine)
        next(loader)
        time.sleep(0.3)  # setup, not a measurement: let the workers fill the queue
        close_within(loader)
    elif state == "mid-iteration":
        loader = make_loader(pair, engine)
        seen = 0
        for seen, _batch in enumerate(loader, 1):
            if seen == 3:
                close_within(loader)  # from inside the loop
        assert seen == 3  # the loop ended with StopIteration right after
    elif state == "consumer blocked in next()":
        loader = make_loader(pair, engine, num_workers=1, prefetch_size=1)
        entered = threading.Event()
        outcome: list[str] = []

        def consume() -> None:
            try:
                while True:
                    entered.set()
                    next(loader)
            except StopIteration:
                outcome.append("stopped")
            except BaseException as exc:  # noqa: BLE001
                outcome.append(repr(exc))

        consumer = threading.Thread(target=consume, name="test-consumer")
        consumer.start()
        assert entered.wait(60)
        time.sleep(0.1)  # setup: let it get inside next()
        close_within(loader)
        consumer.join(CLOSE_BOUND)
        assert not consumer.is_alive(), "the blocked consumer was not woken"
        assert outcome == ["stopped"]
    else:
        loader = make_loader(pair, engine, failing=True)
        with pytest.raises((ZrecordError, ArithmeticError, LookupError)):
            next(loader)
        close_within(loader)
    with pytest.raises(StopIteration):
        next(loader)


def _threads() -> tuple[int, int]:
    return len(threading.enumerate()), len(os.listdir("/proc/self/task"))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@needs_proc
@pytest.mark.parametrize("engine", ENGINES)
def test_create_iterate_close_cycles_leak_nothing(tmp_path: Path, engine: str) -> None:
    """1,000 create/iterate/close cycles after a warm-up of 50: threads, file
    descriptors and resident memory come back to where they were."""
    values = tagged(200, 16)
    ds = Dataset.write(tmp_path / "d", values)
    ls = Dataset.write(tmp_path / "l", np.arange(200))
    with ds, ls:
        if engine == "python":
            sources: tuple[Any, Any] = (Table(values), Table(np.arange(200)))
        else:
            sources = (ds, ls)
        extra: dict[str, Any] = {}
        if engine == "native+transform":
            extra["transform"] = lambda batch: batch
        base: tuple[Any, ...] = ()
        for cycle in range(1050):
            if cycle == 50:
                gc.collect()
                base = (*_threads(), _fds(), _rss())
            loader = DataLoader(*sources, num_workers=2, batch_size=4, prefetch_size=2, **extra)
            for _ in range(3):
                batch = next(loader)
            assert np.array_equal(batch["data"][:, 0], batch["label"])
            loader.close()
            del loader
        gc.collect()
        assert eventually(lambda: _threads() == base[:2]), (_threads(), base)
        assert _fds() == base[2]
        growth = _rss() - base[3]
        assert growth < 64 << 20, f"RSS grew by {growth >> 20} MiB over 1,000 cycles"
