"""Create/iterate/close cycles of the DataLoader leak no threads, file
descriptors or memory."""

from __future__ import annotations

import gc
import os
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Table, eventually, needs_proc, tagged

from loaderx import DataLoader, Dataset

ENGINES = ["native", "native+transform", "python"]


def _threads() -> tuple[int, int]:
    return len(threading.enumerate()), len(os.listdir("/proc/self/task"))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


#: Records of 64 KiB and batches of 4: one batch is 256 KiB of data, so a loader
#: that kept a single batch per cycle would grow by 250 MiB over the cycles.
RECORD_INTS, BATCH, CYCLES, WARM_UP = 16384, 4, 1000, 50
#: Resident growth allowed over all the cycles: allocator noise (arenas of
#: threads that come and go), not retention. A cycle legitimately keeps
#: nothing; 8 MiB is under 1/32 of a batch per cycle.
RSS_SLACK = 8 << 20


@needs_proc
@pytest.mark.parametrize("engine", ENGINES)
def test_create_iterate_close_cycles_leak_nothing(tmp_path: Path, engine: str) -> None:
    """1,000 create/iterate/close cycles after a warm-up of 50. In every
    cycle: while open, the same threads and file descriptors as in the first
    measured cycle; after close(), exactly the threads (Python ones at once,
    OS ones as soon as the exiting threads are reaped) and descriptors there
    were before; the loader and its batches are freed by reference counting
    alone. Over all cycles, resident memory stays within allocator noise."""
    values = tagged(200, RECORD_INTS)
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
        base: tuple[int, int, int] = (0, 0, 0)
        while_open: tuple[int, int, int] = (0, 0, 0)
        rss = 0
        for cycle in range(WARM_UP + CYCLES):
            measured = cycle >= WARM_UP
            if cycle == WARM_UP:
                gc.collect()
                base = (*_threads(), _fds())
                rss = _rss()
            loader = DataLoader(*sources, num_workers=2, batch_size=BATCH, prefetch_size=2, **extra)
            for _ in range(3):
                batch = next(loader)
            assert np.array_equal(batch["data"][:, 0], batch["label"])
            if cycle == WARM_UP:
                while_open = (*_threads(), _fds())
                assert while_open[0] > base[0] or while_open[1] > base[1], "no worker threads?"
            elif measured:
                assert (*_threads(), _fds()) == while_open, f"cycle {cycle}"
            loader.close()
            if measured:
                assert threading.active_count() == base[0], f"cycle {cycle}"
                assert eventually(lambda: _threads() == base[:2], 5.0), (cycle, _threads(), base)
                assert _fds() == base[2], f"cycle {cycle}: {_fds()} fds, {base[2]} before"
            gone = (weakref.ref(loader), weakref.ref(batch["data"]), weakref.ref(batch["label"]))
            del loader, batch
            assert all(ref() is None for ref in gone), f"cycle {cycle}: the loader or a batch outlived it"
        gc.collect()
        growth = _rss() - rss
        assert growth < RSS_SLACK, f"RSS grew by {growth / 2**20:.1f} MiB over {CYCLES} cycles"
