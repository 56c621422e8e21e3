"""Writers of compressing codecs write large appends behind the call: the
records are copied, ``append`` returns, and they are encoded on a helper
thread. What the caller may rely on: the bytes stored are the ones passed
(even if the caller changes its arrays right after), ``len`` and ``close``
see every append, and a write that fails is raised by the next call on the
writer, with the store holding exactly the appends before it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from loaderx import zrecord
from loaderx.zrecord import Dense, Ragged

COMPRESSING = ["zstd", "lz4", "flate"]


def _big_enough(nbytes: int) -> None:
    assert nbytes >= zrecord.WRITE_BEHIND_AT_LEAST, "the test must take the write-behind path"


@pytest.mark.parametrize("codec", COMPRESSING)
def test_dense_appends_store_the_bytes_passed_even_when_the_caller_reuses_its_array(
    tmp_path, codec
):
    rng = np.random.default_rng(1)
    buf = np.empty((64, 32, 32), dtype=np.uint16)
    _big_enough(buf.nbytes)
    expected = []
    with Dense.create(tmp_path / "d", np.uint16, (32, 32), codec=codec) as w:
        for k in range(6):
            buf[:] = rng.integers(0, 50, buf.shape, dtype=np.uint16)
            expected.append(buf.copy())
            w.append(buf)
            # The caller reuses its buffer at once: the writer took a copy.
            buf[:] = 0xFFFF
            assert len(w) == 64 * (k + 1)
    with Dense.open(tmp_path / "d") as r:
        np.testing.assert_array_equal(r[:], np.concatenate(expected))


@pytest.mark.parametrize("codec", COMPRESSING)
def test_ragged_appends_store_the_bytes_passed_even_when_the_caller_changes_its_arrays(
    tmp_path, codec
):
    rng = np.random.default_rng(2)
    expected: list[np.ndarray] = []
    with Ragged.create(tmp_path / "r", np.int32, 1, codec=codec) as w:
        for k in range(5):
            batch = [
                rng.integers(0, 1000, int(rng.integers(16, 600)), dtype=np.int32)
                for _ in range(100)
            ]
            _big_enough(sum(a.nbytes for a in batch))
            expected.extend(a.copy() for a in batch)
            w.append(batch)
            for a in batch:
                a[:] = -1
            # A tuple and a generator take the same path.
            extra = tuple(rng.integers(0, 9, 300, dtype=np.int32) for _ in range(60))
            expected.extend(a.copy() for a in extra)
            w.append(extra if k % 2 else (a for a in extra))
            for a in extra:
                a[:] = -1
        assert len(w) == len(expected)
    with Ragged.open(tmp_path / "r") as r:
        got = r[:]
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            np.testing.assert_array_equal(g, e, err_msg=f"record {i}")


def test_a_bad_record_is_refused_by_its_own_call_with_the_store_unchanged(tmp_path):
    good = [np.arange(40_000, dtype=np.int32)]
    with Ragged.create(tmp_path / "r", np.int32, 1, codec="zstd") as w:
        w.append(good)
        with pytest.raises(ValueError, match="record 1"):
            w.append([np.arange(40_000, dtype=np.int32), np.zeros(5, dtype=np.float32)])
        assert len(w) == 1
    with Ragged.open(tmp_path / "r") as r:
        assert len(r) == 1
        np.testing.assert_array_equal(r[0], good[0])


FAILING_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    import numpy as np
    from loaderx.zrecord import Dense, Ragged, ZrecordError

    # Writes past a 384 KiB file-size limit fail with EFBIG (the signal that
    # would kill the process is ignored): a real I/O error, on the helper
    # thread. Each append is 256 KiB of incompressible records: the first
    # fits, the second fails.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    path, kind, by = sys.argv[1], sys.argv[2], sys.argv[3]
    if kind == "dense":
        w = Dense.create(path, np.uint8, (4096,), codec="zstd", data_shards=1)
        batch = lambda a: a
    else:
        w = Ragged.create(path, np.uint8, 1, codec="zstd", data_shards=1)
        batch = list
    resource.setrlimit(resource.RLIMIT_FSIZE, (384 << 10, resource.RLIM_INFINITY))
    rng = np.random.default_rng(0)
    w.append(batch(rng.integers(0, 256, (64, 4096), dtype=np.uint8)))
    w.append(batch(rng.integers(0, 256, (64, 4096), dtype=np.uint8)))
    if by == "exit":
        # Never closed: the interpreter's exit closes it, with no call
        # left to raise the error.
        sys.exit(0)
    try:
        if by == "append":
            w.append(batch(rng.integers(0, 256, (64, 4096), dtype=np.uint8)))
        elif by == "len":
            len(w)
        elif by == "sync":
            w.sync()
        else:
            w.close()
    except ZrecordError as exc:
        print("raised", exc.code, "|".join(getattr(exc, "__notes__", [])))
    else:
        print("raised nothing")
    # The error was raised once; the writer goes on and closes cleanly.
    w.close()
    """
)


def _first_records(kind: str, path) -> None:
    """The store at `path` holds the first append of FAILING_WRITER whole
    and nothing after it."""
    first = np.random.default_rng(0).integers(0, 256, (64, 4096), dtype=np.uint8)
    if kind == "dense":
        with Dense.open(path) as r:
            assert len(r) == 64
            np.testing.assert_array_equal(r[:], first)
    else:
        with Ragged.open(path) as r:
            assert len(r) == 64
            np.testing.assert_array_equal(np.stack(r[:]), first)


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("by", ["append", "len", "sync", "close"])
def test_a_failed_write_behind_is_raised_by_the_next_call_and_the_store_keeps_the_appends_before_it(
    tmp_path, kind, by
):
    path = tmp_path / "d"
    out = subprocess.run(
        [sys.executable, "-c", FAILING_WRITER, str(path), kind, by],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("raised "), out.stdout
    assert "written behind the call" in out.stdout, out.stdout
    assert "none of them was stored" in out.stdout, out.stdout
    _first_records(kind, path)


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_failed_write_behind_of_a_writer_never_closed_is_printed_at_exit(tmp_path):
    path = tmp_path / "d"
    out = subprocess.run(
        [sys.executable, "-c", FAILING_WRITER, str(path), "ragged", "exit"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "was not closed and a write behind its last append failed" in out.stderr, out.stderr
    assert str(path) in out.stderr
    _first_records("ragged", path)


def test_appends_of_every_size_land_in_order_while_blocks_are_in_flight(tmp_path, monkeypatch):
    # Blocks of 96 KiB: one append of many blocks recycles the buffers of
    # the writes before while later ones are in flight; small appends in
    # between are written at once, after the write in flight.
    monkeypatch.setattr(zrecord, "WRITE_CHUNK_BYTES", 96 << 10)
    rng = np.random.default_rng(3)
    expected = []
    with Dense.create(tmp_path / "d", np.int64, (64,), codec="zstd") as w:
        for n in (700, 3, 1000, 1, 260, 5, 999):
            a = rng.integers(0, 1000, (n, 64), dtype=np.int64)
            expected.append(a.copy())
            w.append(a)
            a[:] = -1
    with Dense.open(tmp_path / "d") as r:
        np.testing.assert_array_equal(r[:], np.concatenate(expected))

    expected_r: list[np.ndarray] = []
    with Ragged.create(tmp_path / "r", np.int64, 1, codec="lz4") as w:
        for n in (400, 2, 900, 1, 30):
            recs = [rng.integers(0, 99, int(rng.integers(1, 200)), dtype=np.int64) for _ in range(n)]
            expected_r.extend(x.copy() for x in recs)
            w.append(recs)
            for x in recs:
                x[:] = -1
    with Ragged.open(tmp_path / "r") as r:
        got = r[:]
        assert len(got) == len(expected_r)
        for i, (g, e) in enumerate(zip(got, expected_r)):
            np.testing.assert_array_equal(g, e, err_msg=f"record {i}")


def test_a_list_over_one_block_is_checked_whole_before_any_of_it_is_written(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(zrecord, "WRITE_CHUNK_BYTES", 128 << 10)
    recs = [np.full(1000, k, dtype=np.int32) for k in range(200)]
    with Ragged.create(tmp_path / "r", np.int32, 1, codec="zstd") as w:
        with pytest.raises(ValueError, match="record 199"):
            w.append(recs[:199] + [np.zeros((2, 2), dtype=np.int32)])
        assert len(w) == 0
        w.append(recs)
        assert len(w) == 200
    with Ragged.open(tmp_path / "r") as r:
        for k, rec in enumerate(r[:]):
            np.testing.assert_array_equal(rec, recs[k])


@pytest.mark.parametrize("codec", COMPRESSING)
def test_append_flat_stores_the_values_passed_even_when_the_caller_reuses_its_buffer(
    tmp_path, codec
):
    rng = np.random.default_rng(4)
    flat = np.empty(40_000, dtype=np.int32)
    expected: list[np.ndarray] = []
    with Ragged.create(tmp_path / "r", np.int32, 1, codec=codec) as w:
        for _ in range(4):
            flat[:] = rng.integers(0, 500, flat.size, dtype=np.int32)
            cuts = np.sort(rng.integers(0, flat.size, 99))
            offsets = np.concatenate([[0], cuts, [flat.size]])
            _big_enough(flat.nbytes)
            expected.extend(flat[a:b].copy() for a, b in zip(offsets, offsets[1:]))
            w.append_flat(flat, offsets)
            flat[:] = -1
            # A small list append in between lands after it, in order.
            small = [np.arange(3, dtype=np.int32)]
            expected.extend(x.copy() for x in small)
            w.append(small)
    with Ragged.open(tmp_path / "r") as r:
        got = r[:]
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            np.testing.assert_array_equal(g, e, err_msg=f"record {i}")


def test_a_read_only_map_is_written_from_the_map_and_a_writable_one_from_a_copy(
    tmp_path, monkeypatch
):
    # np.load(..., mmap_mode="r") is written before append returns, from
    # the map: no copy into fresh memory (which cost more than writing
    # behind the call saved). A map opened "r+" or "c" is an array the
    # caller may change, copied and written behind the call as any.
    monkeypatch.setattr(zrecord, "WRITE_CHUNK_BYTES", 96 << 10)
    rng = np.random.default_rng(4)
    data = rng.integers(0, 50, (900, 64), dtype=np.int64)
    _big_enough(data.nbytes)
    np.save(tmp_path / "src.npy", data)
    copies = []
    owned = Dense._owned

    def counting(self, block):
        copies.append(block.shape[0])
        return owned(self, block)

    monkeypatch.setattr(Dense, "_owned", counting)
    for k, (mode, view, copied) in enumerate(
        [("r", False, False), ("r", True, False), ("r+", False, True), ("c", False, True)]
    ):
        src = np.load(tmp_path / "src.npy", mmap_mode=mode)
        if view:
            src = np.asarray(src)[100:]  # a plain ndarray whose base is the map
            assert not isinstance(src, np.memmap)
        copies.clear()
        path = tmp_path / f"d{k}"
        with Dense.create(path, np.int64, (64,), codec="zstd") as w:
            w.append(src)
        assert bool(copies) == copied, (mode, view, copies)
        with Dense.open(path) as r:
            np.testing.assert_array_equal(r[:], data[100:] if view else data)
        del src


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_an_append_that_returned_survives_a_close_from_another_thread(tmp_path, kind):
    # A thread loops appends while the main thread closes the writer: every
    # append that returned is in the reopened store, and the one that lost
    # the race raises ClosedError (a write behind submitted after close()
    # looked for one in flight used to run against the closed store, its
    # error dropped).
    import threading

    from loaderx.zrecord import ClosedError

    for run in range(30):
        path = tmp_path / f"s{run}"
        if kind == "dense":
            w = Dense.create(path, np.int64, (64,), codec="zstd")
        else:
            w = Ragged.create(path, np.int64, 2, codec="zstd")
        returned = [0]
        failures: list[BaseException] = []
        first = threading.Event()

        def loop() -> None:
            try:
                while True:
                    if kind == "dense":
                        w.append(np.full((1000, 64), returned[0], np.int64))
                        returned[0] += 1000
                    else:
                        w.append([np.full((1000, 64), returned[0], np.int64)])
                        returned[0] += 1
                    first.set()
            except ClosedError:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
            finally:
                first.set()

        appender = threading.Thread(target=loop)
        appender.start()
        first.wait(60)
        w.close()
        appender.join(60)
        assert not appender.is_alive()
        assert not failures, failures
        opened = Dense.open(path) if kind == "dense" else Ragged.open(path)
        with opened as r:
            assert len(r) == returned[0], f"run {run}: {returned[0]} returned, {len(r)} stored"


FORK_DURING_WRITE_BEHIND = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from loaderx.zrecord import Dense, Ragged, ZrecordError

    path, kind = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    big = rng.integers(0, 50, (20000, 64), dtype=np.int64)  # 10 MiB: written behind
    if kind == "dense":
        w = Dense.create(path, np.int64, (64,), codec="zstd")
        w.append(big)
    else:
        w = Ragged.create(path, np.int64, 2, codec="zstd")
        w.append([big])
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for op in ("append", "sync", "len"):
                try:
                    if op == "append":
                        w.append(big[:10] if kind == "dense" else [big[:10]])
                    elif op == "sync":
                        w.sync()
                    else:
                        len(w)
                    print("child", op, "returned", flush=True)
                    code = 2
                except ZrecordError as exc:
                    if exc.code != -2 or "fork" not in str(exc) or path not in str(exc):
                        print("child", op, "raised", exc.code, exc, flush=True)
                        code = 3
            w.close()
            w.close()
        except BaseException as exc:
            print("child failed:", type(exc).__name__, exc, flush=True)
            code = 4
        os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("child hung", flush=True)
            sys.exit(1)
        time.sleep(0.05)
    # The parent's writer goes on: its appends are all stored.
    w.append(big[:5] if kind == "dense" else [big[:5]])
    n = len(w)
    w.close()
    r = Dense.open(path) if kind == "dense" else Ragged.open(path)
    stored = len(r)
    r.close()
    print("parent", os.waitstatus_to_exitcode(status), n, stored, flush=True)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_child_forked_during_a_write_behind_gets_the_fork_error_at_once(tmp_path, kind):
    # The child of a fork made while a write behind the call is in flight
    # has a copy of the writer whose helper thread does not exist there: its
    # append, sync and len raise ZrecordError -2 (a forked child cannot
    # write behind its parent's back) and its close returns, instead of
    # hanging on state the helper thread held at the fork.
    path = tmp_path / "s"
    out = subprocess.run(
        [sys.executable, "-c", FORK_DURING_WRITE_BEHIND, str(path), kind],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    expected = 20005 if kind == "dense" else 2
    assert out.stdout.strip().splitlines()[-1] == f"parent 0 {expected} {expected}", out.stdout
