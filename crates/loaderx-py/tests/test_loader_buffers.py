"""The native loader reuses its batch buffers once the NumPy arrays viewing
them are gone, and never while one still points into them."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import check_in_forked_child, needs_proc

from loaderx import DataLoader
from loaderx.zrecord import Dense, Ragged

#: 64 records of 128 KiB; batches of 32 records are 4 MiB, big enough for
#: the loader's mapped (huge-page) buffers on Linux.
N, RECORD, BATCH = 64, 128 << 10, 32


def stamp(n: int) -> np.ndarray:
    """Record `i` is `RECORD` bytes of a pattern that names `i`."""
    base = np.arange(RECORD, dtype=np.uint32) * 2654435761
    return np.stack([((base + i * 97) >> 7).astype(np.uint8) for i in range(n)])


def ragged_records(n: int) -> list[np.ndarray]:
    return [np.full(1 + (i * 37) % 200, i, dtype=np.int32) for i in range(n)]


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path, Path]:
    paths = tmp_path / "img", tmp_path / "lab", tmp_path / "rag"
    with Dense.create(paths[0], np.uint8, (RECORD,), codec="raw") as w:
        w.append(stamp(N))
    with Dense.create(paths[1], np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    with Ragged.create(paths[2], np.int32, 1, codec="raw") as w:
        w.append(ragged_records(N))
    return paths


def loader(paths: tuple[Path, Path, Path], **kw: int) -> DataLoader:
    streams = {
        "image": Dense.open(paths[0]),
        "label": Dense.open(paths[1]),
        "rag": Ragged.open(paths[2]).flat(),
    }
    return DataLoader(streams, batch_size=BATCH, num_workers=2, prefetch_size=3, **kw)


def check(batch: dict, images: np.ndarray, records: list[np.ndarray]) -> None:
    labels = batch["label"]
    np.testing.assert_array_equal(batch["image"], images[labels])
    flat, offsets, _shapes = batch["rag"]
    for k, i in enumerate(labels):
        np.testing.assert_array_equal(flat[offsets[k] : offsets[k + 1]], records[i])


def test_kept_batches_are_never_reused(stores: tuple[Path, Path, Path]) -> None:
    """Batches (and views of them) a user keeps stay intact while the loader
    goes on for 50 steps, and after it is closed and freed."""
    images, records = stamp(N), ragged_records(N)
    dl = loader(stores)
    it = iter(dl)
    kept = next(it)
    image_view = kept["image"][3:5]  # a view only: its base must keep the buffer
    view_rows = kept["label"][3:5].copy()
    flat_only = next(it)["rag"][0]
    flat_only_copy = flat_only.copy()
    several = [next(it) for _ in range(10)]  # more than the pool keeps idle
    for _ in range(50):
        check(next(it), images, records)
    check(kept, images, records)
    for batch in several:
        check(batch, images, records)
    np.testing.assert_array_equal(flat_only, flat_only_copy)
    del kept, several
    gc.collect()
    for _ in range(20):
        next(it)
    np.testing.assert_array_equal(image_view, images[view_rows])
    last = next(it)
    dl.close()
    del dl, it
    gc.collect()
    check(last, images, records)
    np.testing.assert_array_equal(image_view, images[view_rows])
    np.testing.assert_array_equal(flat_only, flat_only_copy)


def test_batch_arrays_are_writable_and_private(stores: tuple[Path, Path, Path]) -> None:
    """A batch's arrays may be written in place (as before); the writes
    touch neither the store nor a later batch."""
    images, records = stamp(N), ragged_records(N)
    with loader(stores) as dl:
        it = iter(dl)
        first = next(it)
        first["image"][:] = 0
        del first
        gc.collect()
        for _ in range(20):
            check(next(it), images, records)


def _minor_faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@needs_proc
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts page faults (Linux)")
def test_dropped_batches_are_recycled(stores: tuple[Path, Path, Path]) -> None:
    """Once warm, a loader whose batches are dropped as it goes reuses their
    buffers: 100 more steps fault in far fewer pages than fresh buffers
    would (each 4 MiB image column alone is at least two huge pages or 1,024
    small ones), and resident memory does not grow."""
    with loader(stores) as dl:
        it = iter(dl)
        # Warm up: every record's file page mapped, the pool filled.
        for _ in range(3 * N // BATCH + 10):
            next(it)
        gc.collect()
        faults, rss = _minor_faults(), _rss()
        steps = 100
        for _ in range(steps):
            batch = next(it)
            assert batch["image"].shape == (BATCH, RECORD)
        del batch
        faults = _minor_faults() - faults
        grown = _rss() - rss
    fresh = steps * 2  # the fewest faults fresh image buffers alone would take
    assert faults < fresh // 2, f"{faults} page faults in {steps} steps: buffers are not reused"
    assert grown < 4 * BATCH * RECORD, f"resident memory grew by {grown} bytes in {steps} steps"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_may_drop_inherited_batches(stores: tuple[Path, Path, Path]) -> None:
    """A child forked while workers run reads and drops the batches it
    inherited (their buffers are freed there, never pooled) and exits; the
    parent's loader and batches are unaffected."""
    images, records = stamp(N), ragged_records(N)
    with loader(stores) as dl:
        it = iter(dl)
        kept = [next(it) for _ in range(4)]

        def child() -> None:
            for batch in kept:
                check(batch, images, records)
            kept.clear()
            gc.collect()

        check_in_forked_child(child)
        for batch in kept:
            check(batch, images, records)
        del kept
        for _ in range(20):
            check(next(it), images, records)
