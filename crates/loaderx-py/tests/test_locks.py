"""Exclusive operations: delete and compact against concurrent readers in this
process (threads and a loader), and compact refused while another process
has the store open."""

from __future__ import annotations

import select
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_same_image, close_within, eventually, image, ramps

from loaderx import DataLoader, Dataset, Zrecord, ZrecordError


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
