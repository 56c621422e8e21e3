#!/usr/bin/env python3
"""loaderx side by side with the field: stores and loaders, one run.

``cargo xtask bench all`` runs this script (``bench smoke`` its tiny
version). Every contender is measured through the Python API its users
call (GIL, allocation and call overhead inside the timings), each in a
worker process of the virtualenv that holds it:

* ``ours``  - this checkout's loaderx (the project venv, this interpreter);
* ``v054``  - loaderx 0.5.4 from PyPI (``--v054-python``);
* ``v240``  - loaderx 2.4.0 from PyPI (``--v240-python``);
* ``v2819`` - loaderx 2.8.19 from PyPI (``--v2819-python``, e.g. the
  ``<target>/compat28-venv`` that ``cargo xtask test`` makes), through its
  2.8 API, against ours through the same API (``ours28``: writers, stores
  bound to an ``Allocator``, ``DLTensor``/``RaggedBatch`` results, and the
  2.8 ``Loader`` in the loader section);
* ``field`` - the bench venv (``--field-python``, made by
  ``benches/field_env.py`` from ``benches/field-requirements.txt``): NumPy
  memory maps, HDF5 (h5py), LMDB, Arrow IPC, Parquet, ArrayRecord, Lance,
  PyTorch, Grain, jax-dataloader, and the in-memory ceiling.

A contender that cannot be imported or installed is kept in the results as
missing, with the reason. The driver (this process) generates the workloads
once into ``<data-dir>/source`` (plain ``.npy`` files the workers map, so
every contender reads the same bytes whatever its NumPy), then:

* store section: every (workload, contender, codec) is written
  ``WRITE_ROUNDS`` times, the page cache dropped before each write
  (``sync; echo 3 > /proc/sys/vm/drop_caches``) with the source held in
  memory (every page touched through the worker's own map first, which
  the drop leaves alone), timed until the writer is
  closed and ``os.sync()`` has returned (durable, whatever the contender's
  own fsync policy); then gathered, workload by workload (one workload's
  stores fit in the page cache, all of them do not): batches of 256 random
  indices (the same sequence of index batches for everybody) from a warm
  page cache, each round at least 40 batches and at least 50 ms (a fast
  contender goes further along the sequence), each store read through and
  given one untimed round before its rounds, and read through again before
  each of its timed rounds, the contents of one batch checked against the
  source. Jobs are alternated
  round by round (order rotated each round) and the medians kept; p95 is
  over every batch of every round. The in-memory ceiling (the same batches
  gathered from an array in memory, split over every core) runs in the
  same rounds. Each timed gather also records the CPU time the other
  workers and the whole machine used meanwhile, and the hypervisor's
  steal, so a run shows whether anything ran beside the job it timed.
* loader section: every loader contender runs in a fresh process per
  round (batch 256, 4 workers, prefetch 4 where the loader has one), over
  the ``img224`` images with an ``int64`` label that is the record's index
  (one batch per run, taken before the clock starts and the memory
  sampling begins, is checked against the source at its labels). The
  driver samples ``/proc/<pid>/smaps_rollup`` of the process tree every
  20 ms: the peak of summed PSS and of summed RSS. The loader section
  starts once the store section's workers have ended and its stores are
  deleted, and records the kernel's reclaim during each loader run.

``--scale F`` multiplies the record counts (1.0: the publication run,
about 2 GiB of sources); ``--smoke`` is a tiny run that checks the script
and its tables work in seconds, one round, no page cache dropping: its
figures mean nothing.

Usage::

    .venv/bin/python benches/field.py --field-python target/bench-venv-*/bin/python \\
        --v054-python target/compat-venv/bin/python \\
        --v240-python target/compat24-venv/bin/python --json docs/bench/field.json
    python3 benches/tables.py docs/bench/field.json
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import platform
import shutil
import statistics
import struct
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from benchlib import MIB, Remote, allocated_bytes, bench_parser, drop_page_cache, fsync_tree, log
from benchlib import pss_rss_of, read_through, reply_channel, rotated, run_bench, run_sampled, send, send_last, serve

SCRIPT = Path(__file__).resolve()

GATHER_BATCH = 256
# Photos average about 1 MiB: a batch of 256 would be a quarter of a GiB
# (half the workload at full scale), so their gathers take 32.
GATHER_BATCH_OF = {"photos": 32}
LOADER_BATCH = 256
LOADER_WORKERS = 4
LOADER_PREFETCH = 4
GEN_VERSION = 1
# A gather round runs at least this long (and at least `gather_batches`
# batches): 40 batches of 256 labels take well under a millisecond, where a
# round's start (caches, the timer, a stray interrupt) decides more than
# the store does.
ROUND_MIN_S = 0.05
# The most batches a round gathers (a bound on the index batches a worker
# holds: 20,000 x 256 indices are 40 MiB).
ROUND_MAX_BATCHES = 20_000

# Settings of a run; scaled by configure().
CFG: dict[str, Any] = {}


def configure(scale: float, smoke: bool) -> None:
    def n(full: int, least: int) -> int:
        return max(least, int(full * scale))

    if smoke:
        CFG.update(
            img224=300, img64=400, photos_mib=4, tok512=600, tokens=1200, labels=5000,
            gather_batches=2, round_min_s=0.0, rounds=1, write_rounds=1, loader_rounds=1,
            loader_warmup=2, loader_batches=4, smoke=True, scale=0.0,
        )
        return
    CFG.update(
        img224=n(4000, 1000), img64=n(20000, 1000), photos_mib=max(16, int(512 * scale)),
        tok512=n(100_000, 2000), tokens=n(200_000, 4000), labels=n(1_000_000, 10_000),
        gather_batches=40 if scale >= 0.5 else 12, round_min_s=ROUND_MIN_S, rounds=7 if scale >= 0.5 else 3,
        write_rounds=3 if scale >= 0.5 else 1, loader_rounds=5 if scale >= 0.5 else 2,
        loader_warmup=10 if scale >= 0.5 else 4, loader_batches=100 if scale >= 0.5 else 20,
        smoke=False, scale=scale,
    )


# ----------------------------------------------------------------- workloads
#
# Dense workloads are one .npy of (n, *shape); ragged ones three: the
# records back to back (flat), element offsets (n + 1) and shapes (n, ndim).

WORKLOADS: dict[str, dict[str, Any]] = {
    "img224": {"kind": "dense", "dtype": "uint8", "shape": (3, 224, 224),
               "what": "uint8(3,224,224) smooth image-like, 147 KiB"},
    "img64": {"kind": "dense", "dtype": "uint8", "shape": (3, 64, 64),
              "what": "uint8(3,64,64) smooth image-like, 12 KiB"},
    "photos": {"kind": "ragged", "dtype": "uint8", "ndim": 3,
               "what": "ragged uint8(3,H,W), H and W 100-2600 px like photos"},
    "tok512": {"kind": "dense", "dtype": "int32", "shape": (512,),
               "what": "int32[512] token blocks (2 KiB), Zipf ids"},
    "tokens": {"kind": "ragged", "dtype": "int32", "ndim": 1,
               "what": "ragged int32 tokens, 16-512 long (median ~130), Zipf ids"},
    "labels": {"kind": "dense", "dtype": "int64", "shape": (),
               "what": "int64 scalar labels (8 B)"},
}


def smooth_images(rng: np.random.Generator, count: int, h: int, w: int) -> np.ndarray:
    """``count`` uint8 (3, h, w) images: a plane wave and a ramp per channel
    plus +-2 of noise (deflate shrinks them a little, like photos)."""
    out = np.empty((count, 3, h, w), dtype=np.uint8)
    y = np.arange(h, dtype=np.float32)[:, None]
    x = np.arange(w, dtype=np.float32)[None, :]
    for i in range(count):
        p = rng.random((3, 6), dtype=np.float32)
        for c in range(3):
            a, b, fy, fx, ph, base = p[c]
            v = (base * 160 + 40 + 50 * np.sin((fy * y / h + fx * x / w) * 12.0 + ph * 6.28)
                 + (a - 0.5) * 60 * (y / h) + (b - 0.5) * 60 * (x / w))
            v += rng.integers(-2, 3, size=(h, w)).astype(np.float32)
            out[i, c] = np.clip(v, 0, 255)
    return out


def zipf_ids(rng: np.random.Generator, n: int, vocab: int = 50_000, s: float = 1.05) -> np.ndarray:
    weights = np.arange(1, vocab + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), vocab - 1).astype(np.int32)


def photo_shapes(rng: np.random.Generator, budget: int) -> np.ndarray:
    """(n, 3) shapes whose bytes add up to at most ``budget``: the short
    side log-normal around 480 px, aspect ratios of cameras and phones,
    both sides clipped to 100..2600."""
    shapes = []
    total = 0
    aspects = np.array([4 / 3, 3 / 2, 16 / 9, 1.0, 3 / 4, 2 / 3, 9 / 16])
    while True:
        short = float(np.exp(rng.normal(np.log(480), 0.55)))
        a = float(aspects[rng.integers(len(aspects))])
        h, w = (short, short * a) if a >= 1 else (short / a, short)
        h, w = int(np.clip(round(h), 100, 2600)), int(np.clip(round(w), 100, 2600))
        if total + 3 * h * w > budget:
            break
        shapes.append((3, h, w))
        total += 3 * h * w
    return np.array(shapes, dtype=np.int64).reshape(-1, 3)


def generate(name: str, dest: Path) -> dict[str, Any]:
    """Write workload ``name`` under ``dest``; returns its manifest."""
    spec = WORKLOADS[name]
    rng = np.random.default_rng([GEN_VERSION, list(WORKLOADS).index(name)])
    if name in ("img224", "img64"):
        side = spec["shape"][1]
        count = CFG[name]
        arr = np.lib.format.open_memmap(dest / f"{name}.npy", mode="w+", dtype=np.uint8, shape=(count, 3, side, side))
        for start in range(0, count, 256):
            k = min(256, count - start)
            arr[start:start + k] = smooth_images(rng, k, side, side)
        arr.flush()
        del arr
    elif name == "tok512":
        arr = zipf_ids(rng, CFG[name] * 512).reshape(-1, 512)
        np.save(dest / f"{name}.npy", arr)
    elif name == "labels":
        np.save(dest / f"{name}.npy", rng.integers(0, 1000, size=CFG[name], dtype=np.int64))
    elif name == "tokens":
        n = CFG[name]
        lengths = np.exp(rng.normal(np.log(130), 0.75, size=n))
        lengths = np.clip(np.rint(lengths), 16, 512).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        np.save(dest / f"{name}.flat.npy", zipf_ids(rng, int(offsets[-1])))
        np.save(dest / f"{name}.offsets.npy", offsets)
        np.save(dest / f"{name}.shapes.npy", lengths.reshape(-1, 1))
    elif name == "photos":
        shapes = photo_shapes(rng, CFG["photos_mib"] * MIB)
        sizes = shapes.prod(axis=1)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        flat = np.lib.format.open_memmap(dest / f"{name}.flat.npy", mode="w+", dtype=np.uint8, shape=(int(offsets[-1]),))
        for i, (c, h, w) in enumerate(shapes.tolist()):
            flat[offsets[i]:offsets[i + 1]] = smooth_images(rng, 1, h, w).reshape(-1)
        flat.flush()
        del flat
        np.save(dest / f"{name}.offsets.npy", offsets)
        np.save(dest / f"{name}.shapes.npy", shapes)
    return manifest_of(name, dest)


def manifest_of(name: str, dest: Path) -> dict[str, Any]:
    w = Workload(name, dest)
    digest = hashlib.sha256()
    for f in sorted(dest.glob(f"{name}.*npy")):
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                digest.update(chunk)
    return {"records": w.n, "logical_bytes": w.logical_bytes, "sha256": digest.hexdigest(),
            "median_record_bytes": w.median_record_bytes}


class Workload:
    """A generated workload, memory-mapped from its .npy files."""

    def __init__(self, name: str, src: Path) -> None:
        spec = WORKLOADS[name]
        self.name = name
        self.kind: str = spec["kind"]
        self.dtype = np.dtype(spec["dtype"])
        if self.kind == "dense":
            self.arr = np.load(src / f"{name}.npy", mmap_mode="r")
            self.shape = tuple(self.arr.shape[1:])
            self.n = len(self.arr)
            self.logical_bytes = int(self.arr.nbytes)
            self.median_record_bytes = int(self.arr[0].nbytes) if self.n else 0
        else:
            self.flat = np.load(src / f"{name}.flat.npy", mmap_mode="r")
            self.offsets = np.load(src / f"{name}.offsets.npy")
            self.shapes = np.load(src / f"{name}.shapes.npy")
            self.ndim = self.shapes.shape[1]
            self.n = len(self.shapes)
            self.logical_bytes = int(self.offsets[-1]) * self.dtype.itemsize
            self.median_record_bytes = int(np.median(np.diff(self.offsets))) * self.dtype.itemsize

    def record(self, i: int) -> np.ndarray:
        if self.kind == "dense":
            return self.arr[i]
        return self.flat[self.offsets[i]:self.offsets[i + 1]].reshape(self.shapes[i])

    def records(self, start: int, stop: int) -> list[np.ndarray]:
        return [np.ascontiguousarray(self.record(i)) for i in range(start, stop)]

    def map_in(self) -> None:
        """Touches every page of the source through this process's map.
        Pages a process has mapped survive ``drop_caches``, so after this the
        write that follows reads its input from memory whoever wrote before
        it: without it only the first writer of each worker paid for reading
        the source from disk (and the other workers' writes then found it
        cached through their own maps)."""
        arr = self.arr if self.kind == "dense" else self.flat
        flat = arr.reshape(-1).view(np.uint8)
        int(flat[::4096].sum())

    def check(self, idx: np.ndarray, got: Any, who: str) -> None:
        """Raise unless ``got`` holds the records at ``idx``."""
        if self.kind == "dense":
            want = self.arr[idx.astype(np.intp)]
            got = np.asarray(got)
            if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
                raise ValueError(f"{who}: gathered wrong {self.name} records "
                                 f"({getattr(got, 'shape', '?')} {getattr(got, 'dtype', '?')})")
        else:
            if len(got) != len(idx):
                raise ValueError(f"{who}: {len(got)} records for {len(idx)} indices")
            for g, i in zip(got, idx.tolist()):
                w = self.record(i)
                if g.dtype != w.dtype or g.shape != w.shape or not np.array_equal(g, w):
                    raise ValueError(f"{who}: gathered a wrong {self.name} record ({i})")


class Batches:
    """A workload's index batches, the same sequence for every contender in
    every worker: drawn one after another from one seeded generator, as
    far as the fastest contender's rounds reach."""

    def __init__(self, w: Workload) -> None:
        self.n = w.n
        self.size = GATHER_BATCH_OF.get(w.name, GATHER_BATCH)
        self.rng = np.random.default_rng([7, list(WORKLOADS).index(w.name)])
        self.drawn: list[np.ndarray] = []

    def __getitem__(self, k: int) -> np.ndarray:
        while len(self.drawn) <= k:
            self.drawn.append(self.rng.integers(0, self.n, size=self.size).astype(np.int64))
        return self.drawn[k]


# ----------------------------------------------------------------- helpers


def encode_shape(a: np.ndarray) -> bytes:
    """Record bytes for stores that keep bytes only: the shape (int32 per
    axis) ahead of the data, for ragged records."""
    return struct.pack(f"<{a.ndim}i", *a.shape) + a.tobytes()


def decode_shape(b: Any, dtype: np.dtype, ndim: int) -> np.ndarray:
    shape = struct.unpack_from(f"<{ndim}i", b)
    return np.frombuffer(b, dtype=dtype, offset=4 * ndim).reshape(shape)


def from_bytes(values: list[Any], w: Workload) -> Any:
    """Records given as bytes-likes (``encode_shape``'s for ragged ones):
    dense ones stacked into one new array, ragged ones as a list of arrays."""
    if w.kind != "dense":
        return [decode_shape(v, w.dtype, w.ndim).copy() for v in values]
    out = np.empty((len(values), *w.shape), dtype=w.dtype)
    flat = out.reshape(len(values), -1).view(np.uint8)
    for k, v in enumerate(values):
        flat[k] = np.frombuffer(v, dtype=np.uint8)
    return out


# ----------------------------------------------------------------- contenders
#
# A contender: which workloads and codecs it stores, write(path) and
# open(path) -> gather(idx). Write takes the records from the workload's
# memory map as a user would take them from an array.


class Missing(Exception):
    pass


class Contender:
    name = "?"
    label = "?"
    codecs: tuple[str, ...] = ("raw",)
    kinds: tuple[str, ...] = ("dense", "ragged")
    # Workloads it is listed for at all (None: every one; a row of another
    # says "not measured" with the reason from `supports`).
    workloads: tuple[str, ...] | None = None
    single_file = False
    # The library it needs, imported into `lib` when it is made (a failed
    # import makes the contender missing, with the reason).
    library: str | None = None

    def __init__(self) -> None:
        self.lib: Any = importlib.import_module(self.library) if self.library else None

    def supports(self, w: Workload, codec: str) -> str | None:
        """None, or why this (workload, codec) is not measured."""
        if w.kind not in self.kinds:
            return f"no {w.kind} records"
        return None

    def write(self, path: Path, w: Workload, codec: str) -> None:
        raise NotImplementedError

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        raise NotImplementedError

    def as_checked(self, got: Any) -> Any:
        """A gather's result as :meth:`Workload.check` takes it (an array,
        or a list of arrays); untimed."""
        return got


class LoaderxTyped(Contender):
    """loaderx Dense/Ragged (ours, and 2.4.0 with the same API)."""

    def __init__(self, name: str, label: str, codecs: tuple[str, ...]) -> None:
        from loaderx.zrecord import Dense, Ragged

        self.Dense, self.Ragged = Dense, Ragged
        self.name, self.label, self.codecs = name, label, codecs
        self.handles: list[Any] = []

    def write(self, path: Path, w: Workload, codec: str) -> None:
        if w.kind == "dense":
            wr = self.Dense.create(path, w.dtype, w.shape, codec=codec)
            step = max(1, (64 * MIB) // max(1, w.median_record_bytes))
            for s in range(0, w.n, step):
                wr.append(np.ascontiguousarray(w.arr[s:s + step]))
        else:
            wr = self.Ragged.create(path, w.dtype, w.ndim, codec=codec)
            step = 8192
            for s in range(0, w.n, step):
                wr.append(w.records(s, min(w.n, s + step)))
        wr.close()

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        r = (self.Dense if w.kind == "dense" else self.Ragged).open(path)
        self.handles.append(r)
        return r.__getitem__


class LoaderxFlat(LoaderxTyped):
    """Ours writing the tokens with one ``Ragged.append_flat`` call from the
    flat values, offsets and shapes: the same input NumPy's ``.npy``
    contender writes in one call, where the Ragged row above builds an array
    per record first. Read as that row reads."""

    kinds = ("ragged",)
    workloads = ("tokens",)

    def write(self, path: Path, w: Workload, codec: str) -> None:
        wr = self.Ragged.create(path, w.dtype, w.ndim, codec=codec)
        wr.append_flat(w.flat, w.offsets, w.shapes)
        wr.close()


class Loaderx28(Contender):
    """loaderx through the 2.8 API (ours, and 2.8.19): ``DenseWriter``/
    ``RaggedWriter``, stores bound to a CPU ``Allocator``; a gather returns
    a ``DLTensor`` or a ``RaggedBatch``, as 2.8 users get it."""

    def __init__(self, name: str, label: str, codecs: tuple[str, ...]) -> None:
        from loaderx import Allocator
        from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

        self.DenseWriter, self.RaggedWriter, self.RaggedBatch = DenseWriter, RaggedWriter, RaggedBatch
        self.DenseStore, self.RaggedStore = DenseStore, RaggedStore
        self.allocator = Allocator("cpu")
        self.name, self.label, self.codecs = name, label, codecs
        self.handles: list[Any] = []

    def write(self, path: Path, w: Workload, codec: str) -> None:
        if w.kind == "dense":
            wr = self.DenseWriter(path, w.dtype, w.shape, codec=codec)
            step = max(1, (64 * MIB) // max(1, w.median_record_bytes))
            for s in range(0, w.n, step):
                wr.append(np.ascontiguousarray(w.arr[s:s + step]))
        else:
            wr = self.RaggedWriter(path, w.dtype, ndim=w.ndim, codec=codec)
            for s in range(0, w.n, 8192):
                wr.append(self.RaggedBatch.from_records(w.records(s, min(w.n, s + 8192))))
        wr.close()

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        store = (self.DenseStore if w.kind == "dense" else self.RaggedStore)(path)
        self.handles.append(store)
        return store.bind(self.allocator).__getitems__

    def as_checked(self, got: Any) -> Any:
        if hasattr(got, "to_tensors"):
            return [np.from_dlpack(t) for t in got.to_tensors()]
        return np.from_dlpack(got)


class Loaderx054(Contender):
    name, label, codecs, kinds = "v054", "loaderx 0.5.4 Dataset", ("raw", "flate"), ("dense",)

    def __init__(self) -> None:
        import loaderx

        self.lx = loaderx

    def supports(self, w: Workload, codec: str) -> str | None:
        if w.kind != "dense":
            return "0.5.4 has fixed-size records only"
        return None

    def write(self, path: Path, w: Workload, codec: str) -> None:
        self.lx.Dataset.write(path, np.ascontiguousarray(w.arr), codec=codec).close()

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        ds = self.lx.Dataset(path)
        return ds.__getitems__


class NpyMmap(Contender):
    name, label, single_file = "npy", "NumPy memory map (.npy)", False

    def write(self, path: Path, w: Workload, codec: str) -> None:
        path.mkdir(parents=True)
        if w.kind == "dense":
            np.save(path / "data.npy", w.arr)
        else:
            np.save(path / "flat.npy", w.flat)
            np.save(path / "offsets.npy", w.offsets)
            np.save(path / "shapes.npy", w.shapes)
        fsync_tree(path)

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        if w.kind == "dense":
            arr = np.load(path / "data.npy", mmap_mode="r")
            return lambda idx: arr[idx]
        flat = np.load(path / "flat.npy", mmap_mode="r")
        offsets = np.load(path / "offsets.npy")
        shapes = np.load(path / "shapes.npy")

        def gather(idx: np.ndarray) -> list[np.ndarray]:
            return [np.array(flat[offsets[i]:offsets[i + 1]]).reshape(shapes[i]) for i in idx.tolist()]

        return gather


class Hdf5(Contender):
    name, label, codecs = "h5py", "HDF5 (h5py)", ("raw", "gzip")
    library = "h5py"

    def write(self, path: Path, w: Workload, codec: str) -> None:
        comp = {"compression": "gzip", "compression_opts": 4} if codec == "gzip" else {}
        with self.lib.File(path, "w") as f:
            if w.kind == "dense":
                ds = f.create_dataset("data", shape=(w.n, *w.shape), dtype=w.dtype,
                                      chunks=(1, *w.shape) if w.shape else (min(w.n, 4096),), **comp)
                step = max(1, (64 * MIB) // max(1, w.median_record_bytes))
                for s in range(0, w.n, step):
                    ds[s:s + step] = w.arr[s:s + step]
            else:
                ds = f.create_dataset("data", shape=(w.n,), dtype=self.lib.vlen_dtype(w.dtype),
                                      chunks=(1,), **comp)
                f.create_dataset("shapes", data=w.shapes)
                for i in range(w.n):
                    ds[i] = w.record(i).reshape(-1)
        fsync_tree(path)

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        f = self.lib.File(path, "r")
        ds = f["data"]
        # One read per record: h5py's fancy selection (ds[sorted_unique])
        # builds a point selection and was 25x slower on these chunks.
        if w.kind == "dense":
            def gather(idx: np.ndarray) -> np.ndarray:
                out = np.empty((len(idx), *w.shape), dtype=w.dtype)
                for k, i in enumerate(idx.tolist()):
                    ds.read_direct(out, np.s_[i], np.s_[k])
                return out
            return gather
        shapes = f["shapes"][:]

        def gather_r(idx: np.ndarray) -> list[np.ndarray]:
            return [ds[i].reshape(shapes[i]) for i in idx.tolist()]

        return gather_r


class Lmdb(Contender):
    name, label = "lmdb", "LMDB"
    library = "lmdb"

    def write(self, path: Path, w: Workload, codec: str) -> None:
        # The map is only address space (the file grows as written), so be
        # generous: a value just over half a page (tok512's 2 KiB records)
        # takes a whole overflow page, doubling the logical size.
        size = int(w.logical_bytes * 4 + w.n * 256 + 256 * MIB)
        env = self.lib.open(str(path), map_size=size, subdir=True, sync=True)
        step = 4096
        for s in range(0, w.n, step):
            with env.begin(write=True) as txn:
                for i in range(s, min(w.n, s + step)):
                    r = w.record(i)
                    txn.put(struct.pack(">Q", i), r.tobytes() if w.kind == "dense" else encode_shape(r),
                            append=True)
        env.sync(True)
        env.close()

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        env = self.lib.open(str(path), readonly=True, lock=False, readahead=False)
        keys = [struct.pack(">Q", i) for i in range(w.n)]

        def gather(idx: np.ndarray) -> Any:
            with env.begin(buffers=True) as txn:
                return from_bytes([txn.get(keys[i]) for i in idx.tolist()], w)

        return gather


def arrow_table(w: Workload, start: int, stop: int) -> Any:
    import pyarrow as pa

    recs = w.records(start, stop)
    data = pa.array([r.tobytes() for r in recs], type=pa.large_binary())
    cols = {"data": data}
    if w.kind == "ragged":
        cols["shape"] = pa.array([list(r.shape) for r in recs], type=pa.list_(pa.int32()))
    return pa.table(cols)


def arrow_decode(tbl: Any, w: Workload) -> Any:
    """Records of an Arrow table's ``data`` column (large_binary), as a
    stacked array (dense) or a list of arrays (ragged)."""
    col = tbl.column("data").combine_chunks()
    _validity, offs_buf, data_buf = col.buffers()
    offs = np.frombuffer(offs_buf, dtype=np.int64)[col.offset:col.offset + len(col) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8)
    if w.kind == "dense":
        return data[offs[0]:offs[-1]].view(w.dtype).reshape(len(col), *w.shape).copy()
    shapes = tbl.column("shape").to_pylist()
    return [data[offs[k]:offs[k + 1]].view(w.dtype).reshape(shapes[k]) for k in range(len(col))]


class ArrowIpc(Contender):
    name, label, codecs = "arrow", "Arrow IPC file", ("raw", "zstd")
    library = "pyarrow"

    def write(self, path: Path, w: Workload, codec: str) -> None:
        pa = self.lib
        opts = pa.ipc.IpcWriteOptions(compression="zstd" if codec == "zstd" else None)
        writer = None
        with pa.OSFile(str(path), "wb") as sink:
            for s in range(0, w.n, 256):
                t = arrow_table(w, s, min(w.n, s + 256))
                if writer is None:
                    writer = pa.ipc.new_file(sink, t.schema, options=opts)
                writer.write_table(t, max_chunksize=256)
            if writer is not None:
                writer.close()
        fsync_tree(path)

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        pa = self.lib
        reader = pa.ipc.open_file(pa.memory_map(str(path)))

        def gather(idx: np.ndarray) -> Any:
            groups, inv = np.unique(idx // 256, return_inverse=True)
            batches = [reader.get_batch(int(g)) for g in groups]
            tbl = pa.Table.from_batches(batches)
            pos = (np.searchsorted(groups, idx // 256) * 256 + idx % 256).astype(np.int64)
            return arrow_decode(tbl.take(pa.array(pos)), w)

        return gather


class Parquet(Contender):
    name, label, codecs = "parquet", "Parquet (256-record row groups)", ("raw", "zstd")

    def __init__(self) -> None:
        self.pa, self.pq = importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")

    def write(self, path: Path, w: Workload, codec: str) -> None:
        writer = None
        for s in range(0, w.n, 256):
            t = arrow_table(w, s, min(w.n, s + 256))
            if writer is None:
                writer = self.pq.ParquetWriter(str(path), t.schema, compression="zstd" if codec == "zstd" else "none")
            writer.write_table(t, row_group_size=256)
        if writer is not None:
            writer.close()
        fsync_tree(path)

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        pf = self.pq.ParquetFile(str(path), memory_map=True)

        def gather(idx: np.ndarray) -> Any:
            groups = np.unique(idx // 256)
            tbl = pf.read_row_groups(groups.tolist())
            pos = (np.searchsorted(groups, idx // 256) * 256 + idx % 256).astype(np.int64)
            return arrow_decode(tbl.take(self.pa.array(pos)), w)

        return gather


class ArrayRecord(Contender):
    name, label = "arrayrecord", "ArrayRecord (group_size:1)"
    library = "array_record.python.array_record_module"

    def write(self, path: Path, w: Workload, codec: str) -> None:
        wr = self.lib.ArrayRecordWriter(str(path), "group_size:1")
        for i in range(w.n):
            r = w.record(i)
            wr.write(r.tobytes() if w.kind == "dense" else encode_shape(r))
        wr.close()
        fsync_tree(path)

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        rd = self.lib.ArrayRecordReader(str(path))

        return lambda idx: from_bytes(rd.read(idx.tolist()), w)


class Lance(Contender):
    name, label = "lance", "Lance (take)"

    def __init__(self) -> None:
        self.lance, self.pa = importlib.import_module("lance"), importlib.import_module("pyarrow")

    def write(self, path: Path, w: Workload, codec: str) -> None:
        def batches() -> Iterator[Any]:
            for s in range(0, w.n, 1024):
                yield from arrow_table(w, s, min(w.n, s + 1024)).to_batches()

        schema = arrow_table(w, 0, 1).schema
        reader = self.pa.RecordBatchReader.from_batches(schema, batches())
        self.lance.write_dataset(reader, str(path))
        fsync_tree(path)

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        ds = self.lance.dataset(str(path))
        cols = ["data"] if w.kind == "dense" else ["data", "shape"]
        return lambda idx: arrow_decode(ds.take(idx, columns=cols), w)


SPLIT_BYTES = 1 << 20  # the ceiling splits batches of at least this many bytes over the cores


class Ceiling(Contender):
    """The same rows gathered from an array in memory into an output buffer
    reused from batch to batch (warm pages, as a training loop's allocator
    gives them back): ``cores`` splits the batch over every core (NumPy's
    take releases the GIL), ``1thread`` does it on the calling thread; the
    ceiling is the faster of the two (on a shared machine a second thread
    may not get a core). Not a store."""

    name, label, codecs = "memory", "in-memory ceiling", ("cores", "1thread")

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.cores = len(os.sched_getaffinity(0))
        self.pool = ThreadPoolExecutor(self.cores)

    def write(self, path: Path, w: Workload, codec: str) -> None:
        raise Missing("not a store")

    def open(self, path: Path, w: Workload, codec: str) -> Callable[[np.ndarray], Any]:
        k = self.cores if codec == "cores" else 1
        if w.kind == "dense":
            arr = np.array(w.arr)
            outs: dict[int, np.ndarray] = {}

            def gather(idx: np.ndarray) -> np.ndarray:
                out = outs.get(len(idx))
                if out is None:
                    out = outs.setdefault(len(idx), np.empty((len(idx), *w.shape), dtype=w.dtype))
                # mode="clip": with the default "raise", take copies through
                # a temporary whenever `out` is given.
                if k == 1 or len(idx) * w.median_record_bytes < SPLIT_BYTES:
                    return np.take(arr, idx, axis=0, out=out, mode="clip")  # below SPLIT_BYTES, threads cost more than they save
                parts = np.array_split(np.arange(len(idx)), k)
                list(self.pool.map(lambda p: np.take(arr, idx[p], axis=0, out=out[p[0]:p[-1] + 1], mode="clip") if len(p) else None, parts))
                return out
            return gather
        flat = np.array(w.flat)
        offs, shapes = w.offsets, w.shapes
        bufs: list[np.ndarray] = [np.empty(0, dtype=w.dtype)]

        def gather_r(idx: np.ndarray) -> list[np.ndarray]:
            lens = offs[idx + 1] - offs[idx]
            bounds = np.concatenate([[0], np.cumsum(lens)])
            if bufs[0].size < bounds[-1]:
                bufs[0] = np.empty(int(bounds[-1]), dtype=w.dtype)
            buf = bufs[0]
            parts = np.array_split(np.arange(len(idx)), k if bounds[-1] * w.dtype.itemsize >= SPLIT_BYTES else 1)

            def copy(p: np.ndarray) -> None:
                for j in p.tolist():
                    i = idx[j]
                    buf[bounds[j]:bounds[j + 1]] = flat[offs[i]:offs[i + 1]]
            list(self.pool.map(copy, parts))
            return [buf[bounds[j]:bounds[j + 1]].reshape(shapes[i]) for j, i in enumerate(idx.tolist())]

        return gather_r


def field_contenders() -> tuple[list[Contender], dict[str, str]]:
    """The contenders of the bench venv, and why any is missing."""
    out: list[Contender] = [NpyMmap()]
    missing: dict[str, str] = {}
    for cls in (Hdf5, Lmdb, ArrowIpc, Parquet, ArrayRecord, Lance, Ceiling):
        try:
            out.append(cls())
        except Exception as e:  # noqa: BLE001 - any import failure makes it missing
            missing[cls.name] = f"{type(e).__name__}: {e}"
    return out, missing


# ----------------------------------------------------------------- worker


class Worker:
    def __init__(self, impl: str, data_dir: Path) -> None:
        self.impl = impl
        self.src = data_dir / "source"
        self.root = data_dir / "stores" / impl
        self.root.mkdir(parents=True, exist_ok=True)
        self.missing: dict[str, str] = {}
        if impl == "ours":
            self.contenders: list[Contender] = [
                LoaderxTyped("ours", "loaderx (this tree) Dense/Ragged", ("raw", "lz4", "zstd", "flate")),
                LoaderxFlat("ours-flat", "loaderx (this tree) Ragged.append_flat", ("raw", "zstd")),
                Loaderx28("ours28", "loaderx (this tree) through the 2.8 API", ("raw", "zstd")),
            ]
        elif impl == "v2819":
            self.contenders = [Loaderx28("v2819", "loaderx 2.8.19", ("raw", "zstd"))]
        elif impl == "v240":
            self.contenders = [LoaderxTyped("v240", "loaderx 2.4.0 Dense/Ragged", ("raw", "zstd"))]
        elif impl == "v054":
            self.contenders = [Loaderx054()]
        else:
            self.contenders, self.missing = field_contenders()
        self.by_name = {c.name: c for c in self.contenders}
        self.workloads: dict[str, Workload] = {}
        self.readers: dict[str, tuple[Callable[[np.ndarray], Any], Workload]] = {}
        self.batches: dict[str, Batches] = {}

    def wl(self, name: str) -> Workload:
        if name not in self.workloads:
            self.workloads[name] = Workload(name, self.src)
            self.batches[name] = Batches(self.workloads[name])
        return self.workloads[name]

    def hello(self) -> dict[str, Any]:
        versions: dict[str, str] = {"python": platform.python_version(), "numpy": np.__version__}
        try:
            from importlib import metadata

            for dist in ("loaderx", "h5py", "lmdb", "pyarrow", "array-record", "pylance", "torch",
                         "grain", "jax", "jax-dataloader"):
                try:
                    versions[dist] = metadata.version(dist)
                except metadata.PackageNotFoundError:
                    pass
        except ImportError:
            pass
        return {"impl": self.impl, "versions": versions, "missing": self.missing,
                "contenders": {c.name: {"label": c.label, "codecs": list(c.codecs)} for c in self.contenders}}

    def jobs(self, workloads: list[str]) -> list[dict[str, Any]]:
        out = []
        for wname in workloads:
            w = self.wl(wname)
            for c in self.contenders:
                if c.workloads is not None and wname not in c.workloads:
                    continue
                for codec in c.codecs:
                    out.append({"impl": self.impl, "contender": c.name, "codec": codec, "workload": wname,
                                "skip": c.supports(w, codec)})
        return out

    def store_path(self, contender: str, workload: str, codec: str) -> Path:
        return self.root / f"{workload}-{contender}-{codec}"

    def write(self, contender: str, workload: str, codec: str, drop_cache: bool) -> dict[str, Any]:
        c, w = self.by_name[contender], self.wl(workload)
        path = self.store_path(contender, workload, codec)
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        w.map_in()
        dropped = drop_page_cache() if drop_cache else False
        t0 = time.perf_counter()
        c.write(path, w, codec)
        t1 = time.perf_counter()
        os.sync()
        t2 = time.perf_counter()
        return {"close_s": t1 - t0, "durable_s": t2 - t0, "dropped": dropped,
                "on_disk_bytes": allocated_bytes(path)}

    def open_reader(self, contender: str, workload: str, codec: str) -> dict[str, Any]:
        c, w = self.by_name[contender], self.wl(workload)
        path = self.store_path(contender, workload, codec)
        if contender != "memory":
            read_through(path)
        gather = c.open(path, w, codec)
        self.readers[f"{contender}/{codec}/{workload}"] = (gather, w)
        self.gather(contender, workload, codec)  # one untimed round
        idx = self.batches[workload][0]
        w.check(idx, c.as_checked(gather(idx)), f"{self.impl}/{contender}/{codec}/{workload}")
        return {}

    def warm(self, contender: str, workload: str, codec: str) -> dict[str, Any]:
        """Reads the store through again, before each timed round: between
        two rounds of one store, other contenders' jobs (Parquet and Arrow
        decoding whole row groups) take gigabytes at their peaks, and the
        kernel makes room by evicting page cache, first the pages read
        through a file descriptor (ours, 2.4.0's, LMDB's) rather than those
        a process maps (NumPy's memory map). Left alone, later rounds
        measured partly cold reads for some contenders and not others."""
        if contender != "memory":
            read_through(self.store_path(contender, workload, codec))
        return {}

    def gather(self, contender: str, workload: str, codec: str) -> dict[str, Any]:
        """One round: the workload's batches from the first on, at least
        `gather_batches` of them and for at least `round_min_s`, so a
        fast contender gathers more of the same sequence than a slow one."""
        gather, w = self.readers[f"{contender}/{codec}/{workload}"]
        batches = self.batches[workload]
        times: list[float] = []
        total = 0.0
        while len(times) < ROUND_MAX_BATCHES and (
                len(times) < CFG["gather_batches"] or total < CFG["round_min_s"]):
            b = batches[len(times)]
            t0 = time.perf_counter()
            gather(b)
            times.append(time.perf_counter() - t0)
            total += times[-1]
        done = [batches[k] for k in range(len(times))]
        if w.kind == "dense":
            nbytes = batches.size * w.median_record_bytes * len(done)
        else:
            nbytes = sum(int((w.offsets[b + 1] - w.offsets[b]).sum()) for b in done) * w.dtype.itemsize
        return {"total_s": total, "batch_s": times, "bytes": nbytes,
                "records": batches.size * len(done)}

    def close_all(self) -> dict[str, Any]:
        self.readers.clear()
        return {}


# ----------------------------------------------------------------- loaders
#
# One loader per fresh process (`field.py loader-run NAME CODEC`), over the
# img224 images and an int64 label that is each record's index.


LOADERS: list[tuple[str, str, str]] = [
    # (name, codec, venv)
    ("loaderx", "raw", "ours"), ("loaderx", "lz4", "ours"), ("loaderx", "zstd", "ours"),
    ("loaderx", "flate", "ours"),
    # The same package through the 0.5.x two-stream call, on Dataset stores:
    # the baseline the named-stream loader must match.
    ("loaderx pair", "raw", "ours"), ("loaderx pair", "zstd", "ours"),
    ("loaderx 0.5.4", "raw", "v054"), ("loaderx 0.5.4", "flate", "v054"),
    ("loaderx 2.4.0", "raw", "v240"), ("loaderx 2.4.0", "zstd", "v240"),
    # The 2.8 API's Loader over placement views: ours and 2.8.19.
    ("loaderx 2.8 API", "raw", "ours"), ("loaderx 2.8 API", "zstd", "ours"),
    ("loaderx 2.8.19", "raw", "v2819"), ("loaderx 2.8.19", "zstd", "v2819"),
    ("torch fork", "raw", "field"), ("torch spawn", "raw", "field"),
    ("grain", "raw", "field"), ("jax-dataloader", "raw", "field"),
]


class TorchImages:
    """A map-style torch dataset over the memory-mapped .npy: one item is a
    whole batch (the sampler hands out lists of indices)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.arr: Any = None

    def __len__(self) -> int:
        return len(np.load(self.path, mmap_mode="r"))

    def __getitem__(self, idx: list[int]) -> Any:
        import torch

        if self.arr is None:
            self.arr = np.load(self.path, mmap_mode="r")
        i = np.asarray(idx, dtype=np.int64)
        return {"image": torch.from_numpy(self.arr[i]), "label": torch.from_numpy(i)}


class GrainParse:
    """Grain map: ArrayRecord bytes (8-byte index + image) -> arrays."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def map(self, rec: bytes) -> dict[str, np.ndarray]:
        label = np.frombuffer(rec, dtype=np.int64, count=1)[0]
        return {"image": np.frombuffer(rec, dtype=np.uint8, offset=8).reshape(self.shape), "label": label}


def made_once(path: Path, write: Callable[[Path], None]) -> None:
    """``write(path)``, unless an earlier run finished it (its ``done`` mark
    is there); what an unfinished one left is removed first."""
    if (path / "done").exists():
        return
    if path.exists():
        shutil.rmtree(path)
    write(path)
    (path / "done").write_text("")


def make_loader(name: str, codec: str, data_dir: Path) -> tuple[Callable[[], Any], Callable[[], None], Callable[[Any], tuple[np.ndarray, np.ndarray]]]:
    """(next batch, close, (batch -> images, labels)) for loader ``name``;
    stores it needs are made here when missing (untimed)."""
    src = data_dir / "source" / "img224.npy"
    images = np.load(src, mmap_mode="r")
    n = len(images)
    d = data_dir / "loader"
    d.mkdir(parents=True, exist_ok=True)
    idx_labels = np.arange(n, dtype=np.int64)
    as_np: Callable[[Any], tuple[np.ndarray, np.ndarray]] = lambda b: (np.asarray(b["image"]), np.asarray(b["label"]))

    if name in ("loaderx", "loaderx 2.4.0"):
        from loaderx.dataloader import DataLoader
        from loaderx.zrecord import Dense

        tag = "ours" if name == "loaderx" else "v240"
        ip, lp = d / f"{tag}-img224-{codec}", d / f"{tag}-labels"
        def write_dense(p: Path, arr: np.ndarray, c: str) -> None:
            wr = Dense.create(p, arr.dtype, arr.shape[1:], codec=c)
            for s in range(0, len(arr), 1024):
                wr.append(np.ascontiguousarray(arr[s:s + 1024]))
            wr.close()

        for p, arr, c in ((ip, images, codec), (lp, idx_labels, "raw")):
            made_once(p, partial(write_dense, arr=arr, c=c))
        read_through(ip)
        streams = {"image": Dense.open(ip), "label": Dense.open(lp)}
        if name == "loaderx":
            dl = DataLoader(streams, num_workers=LOADER_WORKERS, batch_size=LOADER_BATCH,
                            prefetch_size=LOADER_PREFETCH)
        else:
            dl = DataLoader(streams, transform_workers=LOADER_WORKERS, batch_size=LOADER_BATCH,
                            prefetch_size=LOADER_PREFETCH)
        it = iter(dl)
        return (lambda: next(it)), dl.close, as_np
    if name in ("loaderx 2.8 API", "loaderx 2.8.19"):
        from loaderx import Allocator, Loader
        from loaderx.sampler import Sampler
        from loaderx.zrecord import DenseStore, DenseWriter

        tag = "ours28" if name == "loaderx 2.8 API" else "v2819"
        ip, lp = d / f"{tag}-img224-{codec}", d / f"{tag}-labels"
        def write_dense28(p: Path, arr: np.ndarray, c: str) -> None:
            with DenseWriter(p, arr.dtype, arr.shape[1:], codec=c) as wr:
                for s in range(0, len(arr), 1024):
                    wr.append(np.ascontiguousarray(arr[s:s + 1024]))

        for p, arr, c in ((ip, images, codec), (lp, idx_labels, "raw")):
            made_once(p, partial(write_dense28, arr=arr, c=c))
        read_through(ip)
        allocator = Allocator("cpu")
        stores = [DenseStore(ip), DenseStore(lp)]
        streams = {"image": [stores[0].bind(allocator)], "label": [stores[1].bind(allocator)]}
        sampler = Sampler(n, LOADER_BATCH, Sampler.Mode.CYCLIC, seed=0)
        dl = Loader(streams, sampler, workers=LOADER_WORKERS, prefetch=LOADER_PREFETCH)
        it = iter(dl)

        def close28() -> None:
            dl.close()
            for store in stores:
                store.close()

        return (lambda: next(it)), close28, \
            (lambda b: (np.from_dlpack(b[0]["image"]), np.from_dlpack(b[0]["label"])))
    if name in ("loaderx 0.5.4", "loaderx pair"):
        import loaderx

        tag = "v054" if name == "loaderx 0.5.4" else "pair"
        ip, lp = d / f"{tag}-img224-{codec}", d / f"{tag}-labels"
        def write_v1(p: Path, arr: np.ndarray, c: str) -> None:
            loaderx.Dataset.write(p, np.ascontiguousarray(arr), codec=c).close()

        for p, arr, c in ((ip, images, codec), (lp, idx_labels, "raw")):
            made_once(p, partial(write_v1, arr=arr, c=c))
        read_through(ip)
        dl = loaderx.DataLoader(loaderx.Dataset(ip), loaderx.Dataset(lp), LOADER_WORKERS, LOADER_BATCH,
                                LOADER_PREFETCH)
        it = iter(dl)
        return (lambda: next(it)), getattr(dl, "close", lambda: None), \
            (lambda b: (np.asarray(b["data"]).reshape(-1, *images.shape[1:]), np.asarray(b["label"]).reshape(-1)))
    if name.startswith("torch"):
        import torch
        from torch.utils.data import BatchSampler, DataLoader as TorchLoader, RandomSampler

        read_through(src)
        ds = TorchImages(str(src))
        sampler = BatchSampler(RandomSampler(range(n), replacement=True, num_samples=1 << 30),
                               LOADER_BATCH, drop_last=True)
        ctx = "fork" if name == "torch fork" else "spawn"
        dl = TorchLoader(ds, batch_size=None, sampler=sampler, num_workers=LOADER_WORKERS,
                         multiprocessing_context=ctx, persistent_workers=True,
                         prefetch_factor=max(1, LOADER_PREFETCH // LOADER_WORKERS) or 1)
        it = iter(dl)
        del torch
        return (lambda: next(it)), (lambda: it._shutdown_workers()), \
            (lambda b: (b["image"].numpy(), b["label"].numpy()))
    if name == "grain":
        from absl import flags as absl_flags

        if not absl_flags.FLAGS.is_parsed():
            absl_flags.FLAGS.mark_as_parsed()  # grain reads absl flags; this is no absl app
        try:
            import grain.python as pygrain
        except ImportError:
            import grain as pygrain  # type: ignore[no-redef]
        from array_record.python import array_record_module as arm

        p = d / "grain-img224.array_record"
        if not Path(str(p) + ".done").exists():
            wr = arm.ArrayRecordWriter(str(p), "group_size:1")
            for i in range(n):
                wr.write(struct.pack("<q", i) + images[i].tobytes())
            wr.close()
            Path(str(p) + ".done").write_text("")
        read_through(p)
        source = pygrain.ArrayRecordDataSource([str(p)])
        sampler = pygrain.IndexSampler(num_records=n, shuffle=True, seed=42, num_epochs=None,
                                       shard_options=pygrain.NoSharding())
        parse = type("Parse", (pygrain.MapTransform,), {"map": GrainParse.map, "__init__": GrainParse.__init__})
        dl = pygrain.DataLoader(data_source=source, sampler=sampler,
                                operations=[parse(tuple(images.shape[1:])), pygrain.Batch(LOADER_BATCH, drop_remainder=True)],
                                worker_count=LOADER_WORKERS, worker_buffer_size=max(1, LOADER_PREFETCH // LOADER_WORKERS))
        it = iter(dl)
        return (lambda: next(it)), (lambda: None), as_np
    if name == "jax-dataloader":
        import jax_dataloader as jdl

        mem = np.array(images)
        ds = jdl.ArrayDataset(mem, idx_labels)
        dl = jdl.DataLoader(ds, backend="jax", batch_size=LOADER_BATCH, shuffle=True, drop_last=True)

        def forever() -> Iterator[Any]:
            while True:
                yield from dl

        it = forever()
        return (lambda: next(it)), (lambda: None), \
            (lambda b: (np.asarray(b[0]), np.asarray(b[1])))
    raise SystemExit(f"unknown loader {name}")


def check_batch(name: str, codec: str, data_dir: Path, shape: tuple[int, ...], img: np.ndarray,
                lab: np.ndarray) -> None:
    """Checks one batch's images against the source at its labels. Nothing
    of the check stays in the loader's process: the batch is the caller's
    to drop, and the source is mapped here only (its pages unmapped again
    when this returns), so the peak PSS is the loader's own."""
    images = np.load(data_dir / "source" / "img224.npy", mmap_mode="r")
    if img.shape != (LOADER_BATCH, *shape) or not np.array_equal(img, images[lab.astype(np.intp)]):
        raise SystemExit(f"{name} {codec}: a batch {img.shape} whose images are not the records at its labels")


def loader_run(name: str, codec: str, data_dir: Path) -> int:
    """One loader in this process: prints a JSON line on stdout."""
    out = reply_channel()
    shape = np.load(data_dir / "source" / "img224.npy", mmap_mode="r").shape[1:]
    try:
        nxt, close, split = make_loader(name, codec, data_dir)
    except Exception as e:  # noqa: BLE001 - the loader is missing, with the reason
        send(out, {"missing": f"{type(e).__name__}: {e}"})
        return 0
    # The process's own PSS once the loader is built and before its first
    # batch: the baseline of "PSS added by loader" (read after a batch it
    # would count the prefetched batches an in-process loader holds, and
    # not those a worker process holds).
    own_pss = pss_rss_of(os.getpid())[0]
    # One batch is checked before the memory sampling and the clock start:
    # inside the timed loop the check (the source mapped, 256 records
    # gathered from it and compared) took 0.03-0.6 s of a raw loader's
    # 0.3 s of batches, and its transient arrays (the batch, the source's
    # records, the comparison) could land in the sampled peak PSS.
    try:
        check_batch(name, codec, data_dir, shape, *split(nxt()))
    except BaseException as e:  # noqa: BLE001 - reported to the driver, which stops
        send(out, {"failed": f"{type(e).__name__}: {e}"})
        os._exit(1)
    send(out, {"ready": True, "pss_before": own_pss})
    for _ in range(CFG["loader_warmup"]):
        nxt()
    times = []
    t_all = time.perf_counter()
    for _ in range(CFG["loader_batches"]):
        t0 = time.perf_counter()
        nxt()
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - t_all
    send_last(out, {"total_s": total, "batch_s": times}, close, f"{name} {codec}")


def measure_loader(name: str, codec: str, python: str, data_dir: Path, smoke: bool, scale: float) -> dict[str, Any]:
    cmd = [python, str(SCRIPT), *(["--smoke"] if smoke else ["--scale", str(scale)]),
           "loader-run", name, codec, "--data-dir", str(data_dir)]
    return run_sampled(cmd, f"loader {name} {codec}")


# ----------------------------------------------------------------- driver


FIELD_HOLDS = ("NumPy mmap, HDF5, LMDB, Arrow IPC, Parquet, ArrayRecord, Lance, the in-memory ceiling, "
               "torch, Grain, jax-dataloader")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (0 where /proc has none)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal ...
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / tick, (v[7] if len(v) > 7 else 0) / tick


RECLAIM_COUNTERS = ("pgscan_kswapd", "pgscan_direct", "compact_stall", "workingset_refault_file")


def reclaim_counters() -> dict[str, int]:
    """Memory reclaim so far (``/proc/vmstat``): pages scanned by kswapd
    and by allocating processes, direct compactions, refaults of evicted
    file pages; and MemFree (KiB) now."""
    out = {k: 0 for k in RECLAIM_COUNTERS}
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k in out:
                    out[k] = int(v)
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemFree:"):
                    out["mem_free_kib"] = int(line.split()[1])
    except OSError:
        pass
    return out


def reclaim_since(before: dict[str, int]) -> dict[str, int]:
    """The reclaim counters' growth since ``before`` (a `reclaim_counters`
    snapshot), with MemFree as it was then."""
    now = reclaim_counters()
    return {**{k: now[k] - before[k] for k in RECLAIM_COUNTERS}, "mem_free_kib": before.get("mem_free_kib", 0)}


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def prepare_sources(data_dir: Path, names: tuple[str, ...] = tuple(WORKLOADS)) -> dict[str, Any]:
    """The workloads ``names`` generated into ``<data_dir>/source`` (kept
    from an earlier run of the same settings); their manifests."""
    src = data_dir / "source"
    src.mkdir(parents=True, exist_ok=True)
    key: dict[str, Any] = {k: CFG[k] for k in ("img224", "img64", "photos_mib", "tok512", "tokens", "labels")}
    key["version"] = GEN_VERSION
    if names != tuple(WORKLOADS):
        key["names"] = list(names)
    stamp = src / "manifest.json"
    try:
        old = json.loads(stamp.read_text())
        if old.get("key") == key:
            return old["workloads"]
    except (OSError, ValueError):
        pass
    log("[field] generating the workloads")
    for f in src.iterdir():
        f.unlink()
    shutil.rmtree(data_dir / "stores", ignore_errors=True)
    shutil.rmtree(data_dir / "loader", ignore_errors=True)
    manifests = {}
    for name in names:
        t0 = time.perf_counter()
        manifests[name] = {**generate(name, src), "what": WORKLOADS[name]["what"]}
        log(f"  {name}: {manifests[name]['records']} records, "
            f"{manifests[name]['logical_bytes'] / MIB:.1f} MiB ({time.perf_counter() - t0:.1f} s)")
    stamp.write_text(json.dumps({"key": key, "workloads": manifests}, indent=1) + "\n")
    return manifests


def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir: Path = args.data_dir
    argv = ["--smoke"] if args.smoke else ["--scale", str(args.scale)]
    env_missing: dict[str, str] = {}
    if args.field_env and Path(args.field_env).exists():
        for dist, info in json.loads(Path(args.field_env).read_text())["requirements"].items():
            if info.get("missing"):
                env_missing[dist] = info["missing"]
    pythons = {"ours": sys.executable, "v054": args.v054_python, "v240": args.v240_python,
               "v2819": args.v2819_python, "field": args.field_python}
    result: dict[str, Any] = {"kind": "field", "workloads": prepare_sources(data_dir),
                              "contenders": {}, "missing": {}, "install_missing": env_missing}
    workers: dict[str, Remote] = {}
    given = dict(m.split("=", 1) for m in args.missing)
    for impl, py in pythons.items():
        why = given.get(impl)
        if why is None and (not py or not Path(py).exists()):
            why = f"no interpreter given for {impl} (its venv does not exist)" if not py \
                else f"no interpreter for {impl} at {py}"
        if why is not None:
            result["missing"][impl] = why + (f" (so: {FIELD_HOLDS})" if impl == "field" else "")
            continue
        try:
            workers[impl] = Remote(impl, [str(py), str(SCRIPT), *argv, "worker", impl, "--data-dir", str(data_dir)])
        except RuntimeError as e:
            result["missing"][impl] = str(e)
            continue
        hello = workers[impl].hello
        result["contenders"][impl] = hello
        for name, why in hello["missing"].items():
            result["missing"][name] = why
    for impl, why in result["missing"].items():
        log(f"[field] MISSING {impl}: {why}")

    sections = set(args.sections)
    if "store" in sections:
        result.update(store_section(workers, args, result["workloads"]))
    # The workers go before the loaders, which run in processes of their
    # own: the bench venv's worker holds GiBs (the ceiling's copies, Arrow
    # and Parquet state) that the loaders need not compete with.
    for w in workers.values():
        w.quit()
    if not args.keep_stores:
        # The stores of a publication run take tens of GiB; the generated
        # sources (a few GiB) are what a rerun would reuse.
        shutil.rmtree(data_dir / "stores", ignore_errors=True)
    if "loader" in sections:
        result["loaders"] = loader_section(pythons, result["missing"], data_dir, args)
    if not args.keep_stores:
        shutil.rmtree(data_dir / "loader", ignore_errors=True)
    return result


def check_disk(data_dir: Path, write_jobs: list[dict[str, Any]],
               manifests: dict[str, Any]) -> None:
    """Refuse, before the first write, a data directory without room for
    the stores the section keeps until its gathers end (each about its
    records' logical size: a raw store takes that plus its table, a
    compressed one less), instead of failing half way with ENOSPC and
    measuring a fraction of the field."""
    need = sum(int(manifests[j["workload"]]["logical_bytes"]) for j in write_jobs)
    stores = data_dir / "stores"
    have = shutil.disk_usage(data_dir).free + allocated_bytes(stores)
    if have < need:
        raise SystemExit(
            f"field: the store section keeps every store it writes until its gathers end, "
            f"about {need / MIB / 1024:.1f} GiB under {stores}, but only {have / MIB / 1024:.1f} "
            f"GiB is free there; free some space or pass --data-dir on a larger disk")


def store_section(workers: dict[str, Remote], args: argparse.Namespace,
                  manifests: dict[str, Any]) -> dict[str, Any]:
    workloads = args.workloads or list(WORKLOADS)
    jobs: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for impl, w in workers.items():
        for j in w.call("jobs", workloads=workloads):
            (skipped if j["skip"] else jobs).append(j)
    # Contenders of one workload next to each other, told apart by codec
    # first, so that consecutive jobs alternate contenders (A B A B) and any
    # drift lands on all of a workload's contenders alike.
    order = {name: k for k, name in enumerate(workloads)}
    jobs.sort(key=lambda j: (order[j["workload"]], j["codec"] != "raw", j["codec"]))
    drop = not args.smoke
    write_jobs = [j for j in jobs if j["contender"] != "memory"]
    check_disk(args.data_dir, write_jobs, manifests)
    wsamples: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    dropped_all = drop
    failed: list[dict[str, Any]] = []
    for r in range(CFG["write_rounds"]):
        for j in rotated(write_jobs, r):
            key = (j["impl"], j["contender"], j["codec"], j["workload"])
            if any(f["key"] == list(key) for f in failed):
                continue
            try:
                res = workers[j["impl"]].call("write", contender=j["contender"], workload=j["workload"],
                                              codec=j["codec"], drop_cache=drop)
            except RuntimeError as e:
                failed.append({"key": list(key), "error": str(e)})
                log(f"  write {key} FAILED: {e}")
                continue
            dropped_all = dropped_all and res["dropped"]
            wsamples.setdefault(key, []).append(res)
        log(f"  write round {r + 1}/{CFG['write_rounds']} done")
    # Gathers run workload by workload: that workload's readers are opened
    # (each store read through and its batches gathered once, untimed), then
    # all its rounds run. One workload's stores fit in the page cache; every
    # workload's at once do not (about 24 GiB at scale 1), and rounds that
    # walked all of them read partly from disk.
    gsamples: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    opened = 0
    for workload in workloads:
        gjobs = []
        for j in jobs:
            key = (j["impl"], j["contender"], j["codec"], j["workload"])
            if j["workload"] != workload or (j["contender"] != "memory" and key not in wsamples):
                continue
            try:
                workers[j["impl"]].call("open_reader", contender=j["contender"], workload=j["workload"],
                                        codec=j["codec"])
                gjobs.append(j)
            except RuntimeError as e:
                failed.append({"key": list(key), "error": str(e)})
                log(f"  open {key} FAILED: {e}")
        opened += len(gjobs)
        for r in range(CFG["rounds"]):
            for j in rotated(gjobs, r):
                key = (j["impl"], j["contender"], j["codec"], j["workload"])
                workers[j["impl"]].call("warm", contender=j["contender"], workload=j["workload"],
                                        codec=j["codec"])
                others = [w.proc.pid for impl, w in workers.items() if impl != j["impl"]]
                busy0 = sum(cpu_seconds(pid) for pid in others)
                own0 = cpu_seconds(workers[j["impl"]].proc.pid)
                m0, st0 = machine_cpu()
                rc0 = reclaim_counters()
                res = workers[j["impl"]].call("gather", contender=j["contender"], workload=j["workload"],
                                              codec=j["codec"])
                m1, st1 = machine_cpu()
                res["reclaim"] = reclaim_since(rc0)
                res["others_cpu_s"] = sum(cpu_seconds(pid) for pid in others) - busy0
                res["own_cpu_s"] = cpu_seconds(workers[j["impl"]].proc.pid) - own0
                res["machine_busy_s"], res["steal_s"] = m1 - m0, st1 - st0
                gsamples.setdefault(key, []).append(res)
        for w in workers.values():
            w.call("close_all")
        log(f"  {workload}: {len(gjobs)} readers opened and checked, {CFG['rounds']} gather rounds done")
    log(f"  {opened} readers in all")
    rows = []
    for j in jobs:
        key = (j["impl"], j["contender"], j["codec"], j["workload"])
        row: dict[str, Any] = {"impl": j["impl"], "contender": j["contender"], "codec": j["codec"],
                               "workload": j["workload"]}
        ws = wsamples.get(key)
        if ws:
            row["write_durable_s"] = statistics.median(s["durable_s"] for s in ws)
            row["write_close_s"] = statistics.median(s["close_s"] for s in ws)
            row["on_disk_bytes"] = ws[-1]["on_disk_bytes"]
        gs = gsamples.get(key)
        if gs:
            per = [g["total_s"] / len(g["batch_s"]) for g in gs]
            row["gather_batch_s"] = statistics.median(per)
            row["gather_p95_s"] = p95([t for g in gs for t in g["batch_s"]])
            row["batch_bytes"] = gs[0]["bytes"] / len(gs[0]["batch_s"])
            row["batch_records"] = gs[0]["records"] / len(gs[0]["batch_s"])
            row["rounds_batch_s"] = per
            row["rounds_others_cpu_s"] = [g["others_cpu_s"] for g in gs]
            row["rounds_total_s"] = [g["total_s"] for g in gs]
            row["rounds_cpu"] = [[g["own_cpu_s"], g["machine_busy_s"], g["steal_s"]] for g in gs]
            row["rounds_reclaim"] = [g["reclaim"] for g in gs]
        err = next((f["error"] for f in failed if f["key"] == list(key)), None)
        if err:
            row["error"] = err
        rows.append(row)
    fatal = [f for f in failed if args.smoke or f["key"][0] == "ours"]
    if fatal:
        # Ours failing is a bug here, and so is anything failing in a smoke run
        # (which exists to catch the harness's own bugs); a contender failing
        # in a real run is reported in its table instead.
        raise SystemExit("field.py: " + "; ".join(f"{'/'.join(f['key'])}: {f['error']}" for f in fatal))
    return {"stores": rows, "skipped": skipped, "page_cache_before_writes":
            "not tried (smoke)" if not drop else "dropped" if dropped_all else "not permitted"}


def loader_section(pythons: dict[str, Any], missing: dict[str, str], data_dir: Path,
                   args: argparse.Namespace) -> list[dict[str, Any]]:
    runs = []
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for name, codec, venv in LOADERS:
        if venv in missing:
            rows[(name, codec)] = {"name": name, "codec": codec, "missing": missing[venv]}
        else:
            runs.append((name, codec, venv))
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(CFG["loader_rounds"]):
        for name, codec, venv in rotated(runs, r):
            if "missing" in rows.get((name, codec), {}):
                continue
            rc0 = reclaim_counters()
            res = measure_loader(name, codec, str(pythons[venv]), data_dir, args.smoke, args.scale)
            reclaim = reclaim_since(rc0)
            if "missing" in res:
                if venv == "ours" or (args.smoke and not res["missing"].startswith(("ImportError", "ModuleNotFound"))):
                    raise SystemExit(f"field.py: loader {name} {codec} failed: {res['missing']}")
                rows[(name, codec)] = {"name": name, "codec": codec, "missing": res["missing"]}
                log(f"  loader {name} {codec} MISSING: {res['missing']}")
                continue
            res["reclaim"] = reclaim
            samples.setdefault((name, codec), []).append(res)
        log(f"  loader round {r + 1}/{CFG['loader_rounds']} done")
    out = []
    for name, codec, _venv in LOADERS:
        key = (name, codec)
        if key in rows:
            out.append(rows[key])
            continue
        s = samples.get(key, [])
        if not s:
            continue
        per = [x["total_s"] / len(x["batch_s"]) for x in s]
        out.append({
            "name": name, "codec": codec, "batches_per_s": 1 / statistics.median(per),
            "p95_s": p95([t for x in s for t in x["batch_s"]]),
            "peak_pss": statistics.median(x["peak_pss"] for x in s),
            "peak_rss": statistics.median(x["peak_rss"] for x in s),
            "pss_before": statistics.median(x["pss_before"] for x in s),
            "procs": max(x["procs"] for x in s), "rounds_batch_s": per,
            "rounds_reclaim": [x["reclaim"] for x in s],
        })
    return out


def main(argv: list[str] | None = None) -> int:
    parser, sub = bench_parser(__doc__)
    w = sub.add_parser("worker", help=argparse.SUPPRESS)
    w.add_argument("impl", choices=["ours", "v054", "v240", "v2819", "field"])
    w.add_argument("--data-dir", type=Path, required=True)
    lr = sub.add_parser("loader-run", help=argparse.SUPPRESS)
    lr.add_argument("name")
    lr.add_argument("codec")
    lr.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--sections", nargs="+", default=["store", "loader"], choices=["store", "loader"])
    parser.add_argument("--field-python", default=None, help="interpreter of the bench venv")
    parser.add_argument("--field-env", default=None, help="its field-env.json (install failures)")
    parser.add_argument("--v054-python", default=None, help="interpreter with loaderx 0.5.4")
    parser.add_argument("--v240-python", default=None, help="interpreter with loaderx 2.4.0")
    parser.add_argument("--v2819-python", default=None,
                        help="interpreter with loaderx 2.8.19 (e.g. target/compat28-venv/bin/python)")
    parser.add_argument("--missing", action="append", default=[], metavar="IMPL=REASON",
                        help="a contender venv (field, v054, v240, v2819) that could not be made, and why")
    parser.add_argument("--keep-stores", action="store_true",
                        help="keep the stores written (tens of GiB at scale 1); the sources are always kept")
    parser.add_argument("--workloads", nargs="+", default=None, choices=list(WORKLOADS),
                        help="store section: only these workloads (a partial run, for looking into one)")
    args = parser.parse_args(argv)
    configure(args.scale, args.smoke)
    if args.mode == "worker":
        return serve(lambda: Worker(args.impl, args.data_dir))
    if args.mode == "loader-run":
        return loader_run(args.name, args.codec, args.data_dir)
    from tables import field_report

    return run_bench(args, "bench-field", run, dict(CFG), field_report)


if __name__ == "__main__":
    sys.exit(main())
