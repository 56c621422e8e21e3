"""Direct reads (`Dense[idx]`, ragged gathers, decoded images) of large
batches gather into buffers their store handle recycles once the NumPy
arrays are gone, and never while one still points into them."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import check_in_forked_child, needs_proc

from loaderx import _native
from loaderx.zrecord import Dense, Ragged, ZrecordError

#: 64 records of 128 KiB: a batch of 32 is 4 MiB, above the pooling size.
N, RECORD, BATCH = 64, 128 << 10, 32


def stamp(n: int) -> np.ndarray:
    """Record `i` is `RECORD` bytes of a pattern that names `i`."""
    base = np.arange(RECORD, dtype=np.uint32) * 2654435761
    return np.stack([((base + i * 97) >> 7).astype(np.uint8) for i in range(n)])


def address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


@pytest.fixture
def images(tmp_path: Path) -> Path:
    with Dense.create(tmp_path / "img", np.uint8, (RECORD,), codec="raw") as w:
        w.append(stamp(N))
    return tmp_path / "img"


def test_the_batch_size_crosses_the_pooling_size() -> None:
    assert BATCH * RECORD >= _native.POOLED_OUTPUT_BYTES > 8 * RECORD


def test_large_batches_reuse_a_dropped_buffer_and_never_a_live_one(images: Path) -> None:
    data = stamp(N)
    rng = np.random.default_rng(3)
    with Dense.open(images) as r:
        first = r[np.arange(BATCH)]
        kept_view = first[5:7]  # a view: its base must keep the buffer alive
        at = address(first)
        second = r[np.arange(BATCH, 2 * BATCH)]
        assert address(second) != at  # `first` is alive: not reused
        del first
        gc.collect()
        third = r[rng.integers(0, N, BATCH)]
        assert address(third) != at  # a view of it is alive still
        np.testing.assert_array_equal(kept_view, data[5:7])
        del kept_view, second, third
        gc.collect()
        seen = set()
        for _ in range(20):
            idx = rng.integers(0, N, BATCH)
            batch = r[idx]
            np.testing.assert_array_equal(batch, data[idx])
            seen.add(address(batch))
            del batch
        assert len(seen) <= 2, f"{len(seen)} distinct buffers for 20 dropped batches"


def test_batches_are_writable_private_and_outlive_the_store(images: Path) -> None:
    data = stamp(N)
    r = Dense.open(images)
    batch = r[np.arange(BATCH)]
    assert batch.flags.writeable and batch.flags.c_contiguous and batch.flags.aligned
    batch[:] = 7  # a user may write a batch in place
    del batch
    gc.collect()
    again = r[np.arange(BATCH)]  # may reuse that buffer: the bytes are fresh
    np.testing.assert_array_equal(again, data[:BATCH])
    kept = r[np.arange(BATCH - 1, -1, -1)]
    r.close()
    del r
    gc.collect()
    np.testing.assert_array_equal(kept, data[BATCH - 1 :: -1])
    np.testing.assert_array_equal(again, data[:BATCH])
    with Dense.open(images) as r2:
        np.testing.assert_array_equal(r2[np.arange(N)], data)


def test_typed_dense_batches_keep_their_dtype_and_shape(tmp_path: Path) -> None:
    rows = np.random.default_rng(5).standard_normal((200, 64, 64)).astype(np.float32)
    with Dense.create(tmp_path / "f", np.float32, (64, 64), codec="lz4") as w:
        w.append(rows)
    with Dense.open(tmp_path / "f") as r:
        idx = np.arange(199, -1, -1)
        got = r[idx]
        assert got.nbytes >= _native.POOLED_OUTPUT_BYTES
        assert got.dtype == np.float32 and got.shape == (200, 64, 64)
        np.testing.assert_array_equal(got, rows[idx])


def test_a_failed_gather_leaves_earlier_batches_intact(images: Path) -> None:
    data = stamp(N)
    with Dense.open(images) as r:
        batch = r[np.arange(BATCH)]
        with pytest.raises(ZrecordError, match="out of range"):
            r[np.arange(BATCH) + N]
        np.testing.assert_array_equal(batch, data[:BATCH])
        del batch
        gc.collect()
        np.testing.assert_array_equal(r[np.arange(BATCH)], data[:BATCH])


def test_ragged_batches_reuse_buffers_too(tmp_path: Path) -> None:
    records = [np.full(20_000 + 97 * i, i, dtype=np.int32) for i in range(64)]
    with Ragged.create(tmp_path / "rag", np.int32, 1, codec="raw") as w:
        w.append(records)
    with Ragged.open(tmp_path / "rag") as r:
        seen = set()
        rng = np.random.default_rng(1)
        for _ in range(10):
            idx = rng.integers(0, 64, 40)
            got = r[idx]
            assert sum(a.nbytes for a in got) >= _native.POOLED_OUTPUT_BYTES
            for k, i in enumerate(idx):
                np.testing.assert_array_equal(got[k], records[i])
            seen.add(address(got[0]))
            del got
        assert len(seen) <= 4, f"{len(seen)} distinct buffers for 10 dropped batches"


@needs_proc
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts page faults (Linux)")
def test_a_gather_loop_faults_in_no_fresh_pages(tmp_path: Path) -> None:
    """Once warm, dropped 40 MiB batches fault in far fewer pages than fresh
    buffers would (each at least 20 huge pages or 10,240 small ones). Past
    32 MiB the system allocator hands out fresh pages for every new array,
    so this fails unless the handle recycles its buffers."""
    import resource

    big, n, batch = 1 << 20, 48, 40
    rows = np.random.default_rng(4).integers(0, 255, (n, big), dtype=np.uint8)
    with Dense.create(tmp_path / "big", np.uint8, (big,), codec="raw") as w:
        w.append(rows)
    rng = np.random.default_rng(2)
    with Dense.open(tmp_path / "big") as r:
        np.testing.assert_array_equal(r[np.arange(n)], rows)  # maps every page
        for _ in range(3):
            r[rng.integers(0, n, batch)]
        gc.collect()
        steps = 30
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(steps):
            r[rng.integers(0, n, batch)]
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    fresh = steps * 20
    assert faults < fresh // 2, f"{faults} page faults in {steps} gathers: buffers are not reused"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_may_drop_inherited_batches(images: Path) -> None:
    data = stamp(N)
    with Dense.open(images) as r:
        kept = [r[np.arange(BATCH)] for _ in range(3)]

        def child() -> None:
            for batch in kept:
                np.testing.assert_array_equal(batch, data[:BATCH])
            kept.clear()
            gc.collect()
            np.testing.assert_array_equal(r[np.arange(BATCH)], data[:BATCH])

        check_in_forked_child(child)
        for batch in kept:
            np.testing.assert_array_equal(batch, data[:BATCH])


def _rss_file() -> int:
    """Resident file-backed memory of this process (mapped file pages)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile in /proc/self/status")


@needs_proc
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_reading_large_records_does_not_map_the_store(tmp_path: Path, codec: str) -> None:
    """Records of 64 KiB and more are read with a positioned read (raw ones
    into the batch, compressed ones into a scratch buffer they are decoded
    from), so streaming through a 64 MiB store leaves its pages in the page
    cache only, not in the process's resident memory (through the map,
    every page read would stay resident here)."""
    big, n = 256 << 10, 256
    rows = np.random.default_rng(6).integers(0, 255, (n, big), dtype=np.uint8)
    with Dense.create(tmp_path / "s", np.uint8, (big,), codec=codec) as w:
        w.append(rows)
    with Dense.open(tmp_path / "s") as r:
        before = _rss_file()
        for start in range(0, n, 16):
            idx = np.arange(start, start + 16)
            np.testing.assert_array_equal(r[idx], rows[idx])
        grown = _rss_file() - before
    assert grown < (n * big) // 8, f"file-backed resident memory grew by {grown} bytes"


def test_small_batches_read_alike_whatever_holds_the_indices(tmp_path: Path) -> None:
    """`Dense[idx]` answers a small batch of 64-bit indices in one native
    call (`gather_like`); every other index form takes the general path.
    Both give NumPy's answer, in a new array of the records' dtype."""
    rows = np.random.default_rng(9).standard_normal((500, 2, 3)).astype(np.float32)
    labels = np.arange(500, dtype=np.int64) * 7 - 3
    with Dense.create(tmp_path / "f", np.float32, (2, 3), codec="raw") as w:
        w.append(rows)
    with Dense.create(tmp_path / "l", np.int64, (), codec="zstd") as w:
        w.append(labels)
    rng = np.random.default_rng(2)
    base = rng.integers(0, 500, 64)
    forms = {
        "int64": base.astype(np.int64),
        "uint64": base.astype(np.uint64),
        "int32": base.astype(np.int32),
        "big-endian int64": base.astype(">i8"),
        "strided int64": np.repeat(base, 2).astype(np.int64)[::2],
        "negative int64": base.astype(np.int64) - 500,
        "empty int64": np.zeros(0, dtype=np.int64),
        "list": base.tolist(),
    }
    with Dense.open(tmp_path / "f") as f, Dense.open(tmp_path / "l") as lab:
        for name, idx in forms.items():
            for reader, source in ((f, rows), (lab, labels)):
                got = reader[idx]
                want = source[np.asarray(idx, dtype=np.int64)]
                assert got.dtype == source.dtype and got.shape == want.shape, name
                assert got.flags.c_contiguous and got.flags.writeable, name
                np.testing.assert_array_equal(got, want, err_msg=name)
        for idx in (np.array([3, 500], dtype=np.int64), np.array([-501], dtype=np.int64)):
            with pytest.raises(IndexError, match="out of range"):
                f[idx]
        # Batches are new arrays: writing one leaves the next read alone.
        first = lab[forms["int64"]]
        first[:] = 0
        np.testing.assert_array_equal(lab[forms["int64"]], labels[base])
    # Image stores decode on this path too (PNG: lossless).
    pictures = rng.integers(0, 256, (20, 8, 8, 3), dtype=np.uint8)
    with Dense.create(tmp_path / "png", np.uint8, (8, 8, 3), codec="png") as w:
        w.append(pictures)
    with Dense.open(tmp_path / "png") as png:
        idx = np.array([19, 0, 7, 7], dtype=np.int64)
        np.testing.assert_array_equal(png[idx], pictures[idx])
        np.testing.assert_array_equal(png[idx.tolist()], pictures[idx])


def test_gather_like_declines_what_it_does_not_handle(tmp_path: Path) -> None:
    """The one-call path answers `None` (the caller's general path then
    runs) for any index array but a C-contiguous 1-D array of native
    64-bit integers, and for batches the output pool takes."""
    rows = np.arange(4096 * 1024, dtype=np.uint8).reshape(4096, 1024)
    with Dense.create(tmp_path / "d", np.uint8, (1024,), codec="raw") as w:
        w.append(rows)
    store = _native.Store.open_existing(str(tmp_path / "d"), False)
    try:
        proto = np.empty((0, 1024), dtype=np.uint8)
        idx = np.array([5, 0, 4095], dtype=np.int64)
        got = store.gather_like(idx, proto)
        assert got is not None and got.shape == (3, 1024) and got.dtype == np.uint8
        np.testing.assert_array_equal(got, rows[idx])
        declined = [
            idx.astype(np.int32),
            idx.astype(">u8"),
            np.stack([idx, idx]),
            np.repeat(idx, 2)[::2],
            idx.tolist(),
            np.arange(_native.POOLED_OUTPUT_BYTES // 1024, dtype=np.int64) % 4096,
        ]
        for bad in declined:
            assert store.gather_like(bad, proto) is None
        assert store.gather_like(idx, np.empty((1, 1024), dtype=np.uint8)) is None
        # Stored bytes never become Python object pointers.
        protos_of_objects = [
            np.empty((0, 128), dtype=object),
            np.empty((0, 64), dtype=[("a", object), ("b", np.int64)]),
        ]
        strings = getattr(getattr(np, "dtypes", None), "StringDType", None)
        if strings is not None:  # NumPy 2: items that point to their strings
            protos_of_objects.append(np.empty((0, 64), dtype=strings()))
        for proto_of_objects in protos_of_objects:
            assert store.gather_like(idx, proto_of_objects) is None
        # A record that is not exactly one item of the prototype is refused.
        with pytest.raises(ZrecordError):
            store.gather_like(idx, np.empty((0, 512), dtype=np.uint8))
    finally:
        store.close()


#: Run in a child. With a switch interval of 1,000 s set before any other
#: thread exists, a second thread waits for the GIL (then spins in Python,
#: never letting go of it) while the main thread reads 16 labels 1,000
#: times. Had a read let go of the GIL, the waiting thread would take it (it
#: does on a good part of such reads) and keep it for the whole interval,
#: and the child would not print before the test's timeout.
INLINE_READ = """
import sys, threading
import numpy as np
from loaderx.zrecord import Dense
reader = Dense.open(sys.argv[1])
idx = np.array([7, 3, 900, 0, 5, 1, 2, 4, 8, 9, 10, 11, 12, 13, 14, 999])
assert (reader[idx] == idx).all()  # warm: chunk files and tables open
sys.setswitchinterval(1000.0)
gate = threading.Lock()
gate.acquire()
stop = False
def spin():
    with gate:
        pass
    while not stop:
        pass
spinner = threading.Thread(target=spin)
spinner.start()
gate.release()
for _ in range(1000):
    got = reader[idx]
stop = True
sys.setswitchinterval(0.005)
spinner.join()
print("read", int(got.sum()))
"""


def test_a_small_local_read_keeps_the_gil(tmp_path: Path) -> None:
    """A gather of a few labels runs with the GIL held: a thread waiting
    for the GIL cannot take it mid-read and keep it for a switch interval
    (docs/ARCHITECTURE.md, "The GIL")."""

    with Dense.create(tmp_path / "labels", np.int64, (), codec="raw") as w:
        w.append(np.arange(1000, dtype=np.int64))
    try:
        out = subprocess.run(
            [sys.executable, "-c", INLINE_READ, str(tmp_path / "labels")],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a 128-byte read let go of the GIL: a spinning thread kept it")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["read", "1998"]  # the 16 labels' sum
