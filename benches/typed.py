#!/usr/bin/env python3
"""Typed containers (format v2) side by side with loaderx 2.4.0.

The original project's 2.x releases store typed records (``Dense``,
``Ragged``); ours store them in format v2 (checksummed records, a schema
block). This script measures both through that public API, each in its own
process and its own venv (both packages are called ``loaderx``):

* ``ours``     - this interpreter's loaderx (the project venv),
* ``original`` - loaderx 2.4.0 from PyPI (``--original-python``, default
  ``<target>/compat24-venv/bin/python``; ``cargo xtask bench`` creates it).
* ``ours28``   - this interpreter's loaderx through the loaderx 2.8 API
  (``DenseWriter``/``RaggedWriter``, ``DenseStore``/``RaggedStore`` bound
  to an ``Allocator``, ``DLTensor``/``RaggedBatch`` results, 2.8's
  ``train_dict(view)``),
* ``original28`` - loaderx 2.8.19 from PyPI through the same calls
  (``--original28-python``, default ``<target>/compat28-venv/bin/python``,
  the venv ``cargo xtask test`` makes for the 2.8 API tests).

The driver (this process) measures nothing itself: it starts one long-lived
worker per contender (``typed.py worker``), sends each a command per
measurement as a JSON line and reads back one JSON line, alternating the
contenders round by round (the order of the contenders rotates every round)
so that a noisy neighbour slows them alike. Medians of the rounds are kept.

Workloads, generated deterministically in each worker (the driver refuses a
run whose two workers generated different bytes):

* images: ``uint8(3, 64, 64)`` image-like records (12 KiB), the generator of
  ``compare.py``;
* tokens: ragged ``int32`` sequences of 16-512 tokens (log-normal lengths,
  median 130), token ids Zipf-distributed over a 50,000-word vocabulary.

Measurements:

* writes (dense raw, dense zstd, tokens zstd): ``create`` + ``append`` +
  ``close``, after ``sync; echo 3 > /proc/sys/vm/drop_caches``; timed until
  ``close`` returns and until ``os.sync()`` after it returns (durable).
  2.4.0 never fsyncs, ours fsyncs in ``close``; the second figure puts both
  on disk.
* gathers of 256 random indices through ``reader[indices]`` (warm page
  cache, every record read once before timing, contents checked against the
  generated data): dense raw and zstd; our ``Dense`` with ``check_raw=True``;
  our 0.5.x ``Dataset`` (format v1, no checksums) on the same images; tokens
  raw, zstd and zstd_dict.
* the first compressed write of a process, as a converter makes it: in a
  fresh process per round and contender, a raw store of the images written
  first (untimed), then the page cache dropped and a ``zstd`` store of the
  same images written (``create`` + one ``append`` + ``close``, through the
  2.x API or the 2.8 API's ``DenseWriter``), timed until ``os.sync()``.
* allocated bytes on disk of every store (zstd_dict against zstd).
* opening a format-v2 store of 100,000,000 one-byte records (ours only):
  time and resident memory added, in a fresh process per round (the store is
  built once and kept under the data directory).

``--smoke`` shrinks everything (tiny data, one round, no page cache
dropping) to check in seconds that the script works; its figures mean
nothing. Without a 2.4.0 interpreter the run goes on with ours alone and the
JSON and tables say why 2.4.0 is missing.

Usage::

    .venv/bin/python benches/typed.py --json docs/bench/typed.json
    .venv/bin/python benches/typed.py --smoke
    python3 benches/tables.py docs/bench/latest.json docs/bench/typed.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import loaderx
from benchlib import MIB, Remote, allocated_bytes, data_dir, drop_page_cache, finish, load_1min, log
from benchlib import machine, read_through, rotated, serve, target_dir
from compare import (
    DTYPE as IMAGE_DTYPE,
    RECORD_BYTES as IMAGE_BYTES,
    SHAPE as IMAGE_SHAPE,
    generate as generate_images,
)
from field import zipf_ids

# ----------------------------------------------------------------- workload

N_IMAGES = 20_000
N_TOKENS = 100_000
TOKEN_VOCAB = 50_000
TOKEN_ZIPF = 1.05  # P(rank k) ~ k^-s
TOKEN_MEDIAN = 130
TOKEN_SIGMA = 0.75  # of the log of the length
TOKEN_MIN, TOKEN_MAX = 16, 512
TOKEN_SEED = 4321
TOKEN_VERSION = 1
TOKEN_APPEND = 8192  # records per Ragged.append call

GATHER_BATCH = 256
GATHER_BATCHES = 200  # per round, per contender
ROUNDS = 9
WRITE_ROUNDS = 5
OPEN_RECORDS = 100_000_000
OPEN_ROUNDS = 7
OPEN_CHUNK = 1 << 23  # records per append while building the open store

SCRIPT = Path(__file__).resolve()

TARGETS = {
    "dense_vs_original": 1.5,
    "dense_vs_dataset": 0.95,
    "ragged_vs_original": 2.0,
    "write_vs_original": 1.0,
    "dense_vs_original28": 2.0,
    "ragged_vs_original28": 2.0,
    "write_vs_original28": 1.0,
    "first_write": 1.0,
    "disk_vs_original28": 1.0,
    "dict_gather_vs_zstd": 1.0,
    "open_ms": 5.0,
    "open_rss_mib": 4.0,
    "checksum_overhead": 0.10,
}


def shrink_for_smoke() -> None:
    global N_IMAGES, N_TOKENS, GATHER_BATCHES, ROUNDS, WRITE_ROUNDS, OPEN_RECORDS, OPEN_ROUNDS
    N_IMAGES = 2_000
    N_TOKENS = 5_000
    GATHER_BATCHES = 8
    ROUNDS = 1
    WRITE_ROUNDS = 1
    OPEN_RECORDS = 200_000
    OPEN_ROUNDS = 1


def workload() -> dict[str, Any]:
    """The sizes in force (``--smoke`` shrinks them), saved with the run."""
    return {
        "images": N_IMAGES, "image_shape": list(IMAGE_SHAPE), "image_bytes": IMAGE_BYTES,
        "tokens": N_TOKENS, "token_vocab": TOKEN_VOCAB, "token_zipf": TOKEN_ZIPF,
        "token_median": TOKEN_MEDIAN, "token_range": [TOKEN_MIN, TOKEN_MAX], "token_append": TOKEN_APPEND,
        "gather_batch": GATHER_BATCH, "gather_batches": GATHER_BATCHES,
        "rounds": ROUNDS, "write_rounds": WRITE_ROUNDS,
        "open_records": OPEN_RECORDS, "open_rounds": OPEN_ROUNDS,
    }


def generate_tokens(count: int) -> list[np.ndarray]:
    """``count`` token sequences: int32 ids, Zipf over the vocabulary,
    lengths log-normal around ``TOKEN_MEDIAN`` clipped to 16..512."""
    rng = np.random.default_rng([TOKEN_SEED, TOKEN_VERSION])
    lengths = np.exp(rng.normal(np.log(TOKEN_MEDIAN), TOKEN_SIGMA, size=count))
    lengths = np.clip(np.rint(lengths), TOKEN_MIN, TOKEN_MAX).astype(np.int64)
    ids = zipf_ids(rng, int(lengths.sum()), TOKEN_VOCAB, TOKEN_ZIPF)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [ids[bounds[i] : bounds[i + 1]] for i in range(count)]


# ----------------------------------------------------------------- worker
#
# One per contender, importing that contender's loaderx; driven over
# benchlib's worker protocol.


class Worker:
    """The 2.x API (``Dense``/``Ragged``): ``ours`` and ``original``."""

    def __init__(self, impl: str, data_dir: Path) -> None:
        self.loaderx = loaderx
        if impl not in API28:  # loaderx 2.8.19 has neither
            from loaderx.utils import train_dict
            from loaderx.zrecord import Dense, Ragged

            self.Dense, self.Ragged, self.train_dict = Dense, Ragged, train_dict
        self.impl = impl
        self.root = data_dir / impl
        self.root.mkdir(parents=True, exist_ok=True)
        self.images = generate_images(0, N_IMAGES)
        self.tokens = generate_tokens(N_TOKENS)
        self.token_bytes = sum(t.nbytes for t in self.tokens)
        self.readers: dict[str, tuple[Any, Callable[[np.ndarray], Any]]] = {}
        rng = np.random.default_rng(7)
        self.batches = {
            kind: [rng.integers(0, n, size=GATHER_BATCH, dtype=np.uint64) for _ in range(GATHER_BATCHES)]
            for kind, n in (("images", N_IMAGES), ("tokens", N_TOKENS))
        }

    # --- commands

    def hello(self) -> dict[str, Any]:
        digest = hashlib.sha256(self.images.tobytes())
        for t in self.tokens:
            digest.update(t.tobytes())
        return {
            "impl": self.impl,
            "loaderx": self.loaderx.__version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "data_sha256": digest.hexdigest(),
            "token_bytes": self.token_bytes,
            "token_lengths": [int(np.min([t.size for t in self.tokens])),
                              int(np.median([t.size for t in self.tokens])),
                              int(np.max([t.size for t in self.tokens]))],
        }

    def path(self, name: str) -> Path:
        return self.root / name

    def fresh(self, name: str) -> Path:
        path = self.path(name)
        if path.exists():
            shutil.rmtree(path)
        return path

    def write_store(self, name: str) -> None:
        """Write store ``name`` (``dense-raw``, ``tokens-zstd_dict``, ...,
        ``v1-raw``); untimed, or timed by :meth:`write`."""
        kind, codec = name.split("-", 1)
        path = self.fresh(name)
        w: Any
        if kind == "dense":
            w = self.Dense.create(path, IMAGE_DTYPE, IMAGE_SHAPE, codec=codec)
            w.append(self.images)
            w.close()
        elif kind == "tokens":
            extra: dict[str, Any] = {}
            if codec == "zstd_dict":
                extra["dict_bytes"] = self.dictionary
            w = self.Ragged.create(path, np.int32, 1, codec=codec, **extra)
            for start in range(0, N_TOKENS, TOKEN_APPEND):
                w.append(self.tokens[start : start + TOKEN_APPEND])
            w.close()
        elif kind == "v1":
            self.loaderx.Dataset.write(path, self.images, codec=codec).close()
        else:
            raise ValueError(f"unknown store {name}")

    def write(self, name: str, drop_cache: bool) -> dict[str, Any]:
        path = self.path(name)
        if path.exists():
            shutil.rmtree(path)
        dropped = drop_page_cache() if drop_cache else False
        t0 = time.perf_counter()
        self.write_store(name)
        t1 = time.perf_counter()
        os.sync()
        t2 = time.perf_counter()
        return {"close_s": t1 - t0, "durable_s": t2 - t0, "dropped": dropped}

    def train(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.dictionary = self.train_dict(self.tokens)
        return {"train_s": time.perf_counter() - t0, "dict_len": len(self.dictionary)}

    def sizes(self, names: list[str]) -> dict[str, int]:
        return {n: allocated_bytes(self.path(n)) for n in names}

    def open_reader(self, name: str, check_raw: bool) -> None:
        """Open store ``name``, read every record once, check a batch."""
        kind, codec = name.split("-", 1)
        path = self.path(name)
        read_through(path)
        reader: Any
        read: Callable[[np.ndarray], Any]
        if kind == "v1":
            reader = self.loaderx.Dataset(path)
            read = reader.__getitems__
        else:
            cls = self.Dense if kind == "dense" else self.Ragged
            reader = cls.open(path, check_raw=True) if check_raw else cls.open(path)
            read = reader.__getitem__
        data = "tokens" if kind == "tokens" else "images"
        n = N_TOKENS if data == "tokens" else N_IMAGES
        sweep = np.arange(n, dtype=np.uint64)
        for start in range(0, n, 1024):
            read(sweep[start : start + 1024])
        idx = self.batches[data][0]
        got = read(idx)
        if data == "images":
            if not np.array_equal(got, self.images[idx.astype(np.intp)]):
                raise SystemExit(f"{self.impl} {name}: gathered wrong images")
        else:
            want = [self.tokens[i] for i in idx.tolist()]
            if len(got) != len(want) or not all(
                g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want)
            ):
                raise SystemExit(f"{self.impl} {name}: gathered wrong token records")
        key = name + ("+check_raw" if check_raw else "")
        self.readers[key] = (reader, read)

    def flat_reader(self, name: str) -> None:
        """Our ``Ragged.gather_flat`` on an already open reader."""
        reader, _ = self.readers[name]
        self.readers[name + "+flat"] = (reader, reader.gather_flat)

    def gather(self, key: str) -> float:
        """Seconds per batch over ``GATHER_BATCHES`` batches."""
        _, read = self.readers[key]
        data = "tokens" if key.startswith("tokens") else "images"
        batches = self.batches[data]
        t0 = time.perf_counter()
        for b in batches:
            read(b)
        return (time.perf_counter() - t0) / len(batches)

    def build_open_store(self, path: str) -> dict[str, Any]:
        """The store of ``OPEN_RECORDS`` one-byte records, built here."""
        t0 = time.perf_counter()
        w = self.Dense.create(path, np.int8, (), codec="raw")
        chunk = (np.arange(OPEN_CHUNK, dtype=np.int64) % 251 - 125).astype(np.int8)
        for start in range(0, OPEN_RECORDS, OPEN_CHUNK):
            w.append(chunk[: min(OPEN_CHUNK, OPEN_RECORDS - start)])
        w.close()
        return {"build_s": time.perf_counter() - t0}

    def close_all(self) -> None:
        for reader, _ in self.readers.values():
            reader.close()
        self.readers.clear()


class Worker28(Worker):
    """The same commands through the loaderx 2.8 API: ``ours28`` and
    ``original28``. Reads return what 2.8 returns (``DLTensor``,
    ``RaggedBatch``), consumed by no one: the timed work is the gather."""

    def __init__(self, impl: str, data_dir: Path) -> None:
        super().__init__(impl, data_dir)
        from loaderx import Allocator
        from loaderx.zrecord import (
            DenseStore,
            DenseWriter,
            RaggedBatch,
            RaggedStore,
            RaggedWriter,
            train_dict,
        )

        self.DenseWriter, self.RaggedWriter, self.RaggedBatch = DenseWriter, RaggedWriter, RaggedBatch
        self.DenseStore, self.RaggedStore, self.train_dict28 = DenseStore, RaggedStore, train_dict
        self.allocator = Allocator("cpu")
        self.stores: list[Any] = []

    def write_store(self, name: str) -> None:
        kind, codec = name.split("-", 1)
        path = self.fresh(name)
        w: Any
        if kind == "dense":
            w = self.DenseWriter(path, IMAGE_DTYPE, IMAGE_SHAPE, codec=codec)
            w.append(self.images)
            w.close()
        elif kind == "tokens":
            extra: dict[str, Any] = {}
            if codec == "zstd_dict":
                extra["dict_bytes"] = self.dictionary
            w = self.RaggedWriter(path, np.int32, ndim=1, codec=codec, **extra)
            for start in range(0, N_TOKENS, TOKEN_APPEND):
                w.append(self.RaggedBatch.from_records(self.tokens[start : start + TOKEN_APPEND]))
            w.close()
        else:
            raise ValueError(f"unknown store {name} for the 2.8 API")

    def train(self) -> dict[str, Any]:
        """2.8 trains on a view: of the ``tokens-zstd`` store the timed
        writes left (written here if they did not run)."""
        if not (self.path("tokens-zstd")).exists():
            self.write_store("tokens-zstd")
        with self.RaggedStore(self.path("tokens-zstd")) as store:
            t0 = time.perf_counter()
            self.dictionary = self.train_dict28(store.bind(self.allocator))
            dt = time.perf_counter() - t0
        return {"train_s": dt, "dict_len": len(self.dictionary)}

    def open_reader(self, name: str, check_raw: bool) -> None:
        if check_raw:
            raise ValueError("the 2.8 API has no check_raw")
        kind, _codec = name.split("-", 1)
        path = self.path(name)
        read_through(path)
        store = (self.DenseStore if kind == "dense" else self.RaggedStore)(path)
        self.stores.append(store)
        view = store.bind(self.allocator)
        read = view.__getitems__
        n = N_TOKENS if kind == "tokens" else N_IMAGES
        sweep = np.arange(n, dtype=np.uint64)
        for start in range(0, n, 1024):
            read(sweep[start : start + 1024])
        idx = self.batches["tokens" if kind == "tokens" else "images"][0]
        got = read(idx)
        if kind == "dense":
            if not np.array_equal(np.from_dlpack(got), self.images[idx.astype(np.intp)]):
                raise SystemExit(f"{self.impl} {name}: gathered wrong images")
        else:
            records = [np.from_dlpack(t) for t in got.to_tensors()]
            want = [self.tokens[i] for i in idx.tolist()]
            if len(records) != len(want) or not all(
                g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(records, want)
            ):
                raise SystemExit(f"{self.impl} {name}: gathered wrong token records")
        self.readers[name] = (view, read)

    def close_all(self) -> None:
        for store in self.stores:
            store.close()
        self.stores.clear()
        self.readers.clear()


def open_probe(path: Path, warmup: Path) -> int:
    """One fresh process: open a tiny store first (the library's one-time
    costs), then time ``Dense.open`` of ``path`` and the resident memory it
    adds. Prints one JSON line."""
    from loaderx.zrecord import Dense

    Dense.open(warmup).close()
    page = resource.getpagesize()

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    before = rss()
    t0 = time.perf_counter()
    ds = Dense.open(path)
    dt = time.perf_counter() - t0
    after = rss()
    n = len(ds)
    last = int(ds[n - 1])
    ds.close()
    print(json.dumps({"open_s": dt, "rss_added": after - before, "records": n, "last": last}))
    return 0


def first_write_probe(impl: str, root: Path, drop: bool) -> int:
    """One fresh process: a raw store of the images (untimed), then (after
    dropping the page cache when `drop`) the process's first ``zstd``
    write of them, timed until ``close`` returns and until ``os.sync()``
    after it. Prints one JSON line."""
    images = generate_images(0, N_IMAGES)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)

    def write(path: Path, codec: str) -> None:
        w: Any
        if impl in API28:
            from loaderx.zrecord import DenseWriter

            w = DenseWriter(path, IMAGE_DTYPE, IMAGE_SHAPE, codec=codec)
        else:
            from loaderx.zrecord import Dense

            w = Dense.create(path, IMAGE_DTYPE, IMAGE_SHAPE, codec=codec)
        w.append(images)
        w.close()

    try:
        write(root / "raw", "raw")
        os.sync()
        dropped = drop_page_cache() if drop else False
        t0 = time.perf_counter()
        write(root / "zstd", "zstd")
        t1 = time.perf_counter()
        os.sync()
        t2 = time.perf_counter()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"close_s": t1 - t0, "durable_s": t2 - t0, "dropped": dropped}))
    return 0


# ----------------------------------------------------------------- driver


def start(impl: str, python: str, data_dir: Path, smoke: bool) -> Remote:
    """The worker of contender ``impl`` (``python`` imports its loaderx)."""
    return Remote(impl, [python, str(SCRIPT), *(["--smoke"] if smoke else []), "worker", impl,
                         "--data-dir", str(data_dir)])


def probe_original(python: Path | None, version: str) -> str | None:
    """Why the interpreter `python` cannot be the loaderx `version`
    contender, or ``None`` when it can."""
    if python is None or not Path(python).exists():
        return f"no interpreter with loaderx {version} at {python}"
    probe = subprocess.run(
        [str(python), "-c", "import loaderx; print(loaderx.__version__)"],
        capture_output=True, text=True, check=False,
    )
    found = probe.stdout.strip()
    if probe.returncode != 0 or found != version:
        return f"{python} imports loaderx {found or '(none)'}, not {version}"
    return None


WRITES = ("dense-raw", "dense-zstd", "tokens-zstd")
PREPARED = ("tokens-raw", "tokens-zstd_dict")
PREPARED_OURS = ("v1-raw", "v1-zstd")
# Every contender, and the one each is compared with (``vs`` columns).
IMPLS = ("ours", "original", "ours28", "original28")
BASELINE = {"ours": "original", "ours28": "original28"}
# The contenders of the 2.8 API.
API28 = ("ours28", "original28")
ALL = IMPLS
# (row name, store, check_raw, gather_flat) per contender; which impls run it.
GATHERS: list[tuple[str, str, bool, bool, tuple[str, ...]]] = [
    ("dense raw", "dense-raw", False, False, ALL),
    ("dense raw, check_raw=True", "dense-raw", True, False, ("ours",)),
    ("Dataset raw (format v1)", "v1-raw", False, False, ("ours",)),
    ("dense zstd", "dense-zstd", False, False, ALL),
    ("Dataset zstd (format v1)", "v1-zstd", False, False, ("ours",)),
    ("tokens raw", "tokens-raw", False, False, ALL),
    ("tokens zstd", "tokens-zstd", False, False, ALL),
    ("tokens zstd_dict", "tokens-zstd_dict", False, False, ALL),
    ("tokens zstd, gather_flat", "tokens-zstd", False, True, ("ours",)),
]


def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir: Path = args.data_dir
    contenders: dict[str, Remote] = {}
    missing: str | None = args.original_missing
    log(f"[typed] starting workers (data in {data_dir})")
    contenders["ours"] = start("ours", sys.executable, data_dir, args.smoke)
    contenders["ours28"] = start("ours28", sys.executable, data_dir, args.smoke)
    missing28 = args.original28_missing or probe_original(args.original28_python, "2.8.19")
    if missing is None:
        py = args.original_python
        if py is None or not Path(py).exists():
            missing = f"no interpreter with loaderx 2.4.0 at {py} (`cargo xtask bench typed` creates it)"
        else:
            probe = subprocess.run(
                [str(py), "-c", "import loaderx; print(loaderx.__version__)"],
                capture_output=True, text=True, check=False,
            )
            found = probe.stdout.strip()
            if probe.returncode != 0 or found != "2.4.0":
                missing = f"{py} imports loaderx {found or '(none)'}, not 2.4.0"
    if missing is None:
        contenders["original"] = start("original", str(args.original_python), data_dir, args.smoke)
        a, b = contenders["ours"].hello, contenders["original"].hello
        if a["data_sha256"] != b["data_sha256"]:
            raise SystemExit("the two workers generated different data (numpy versions?)")
    else:
        log(f"[typed] loaderx 2.4.0 MISSING: {missing}; measuring ours alone")
    if missing28 is None:
        contenders["original28"] = start("original28", str(args.original28_python), data_dir, args.smoke)
        if contenders["original28"].hello["data_sha256"] != contenders["ours"].hello["data_sha256"]:
            raise SystemExit("the 2.8.19 worker generated different data (numpy versions?)")
    else:
        log(f"[typed] loaderx 2.8.19 MISSING: {missing28}; the 2.8 API measured for ours alone")
    impls = list(contenders)
    c = contenders["ours"]
    info = c.hello
    log(f"[typed] tokens: {info['token_bytes'] / MIB:.0f} MiB, lengths min/median/max {info['token_lengths']}")

    result: dict[str, Any] = {
        "kind": "typed",
        "contenders": {k: v.hello for k, v in contenders.items()},
        "original_missing": missing,
        "original28_missing": missing28,
    }

    # Writes: rounds, every (store, impl) once per round, order rotated.
    drop = not args.smoke
    jobs = [(name, impl) for name in WRITES for impl in impls]
    write_samples: dict[tuple[str, str], list[dict[str, Any]]] = {j: [] for j in jobs}
    all_dropped = drop
    for r in range(WRITE_ROUNDS):
        for name, impl in rotated(jobs, r):
            res = contenders[impl].call("write", name=name, drop_cache=drop)
            all_dropped = all_dropped and res["dropped"]
            write_samples[(name, impl)].append(res)
        log(f"  write round {r + 1}/{WRITE_ROUNDS}: done")
    result["page_cache_before_writes"] = "not tried" if not drop else "dropped" if all_dropped else "not permitted"
    result["first_writes"] = measure_first_writes(args, impls, data_dir)

    # The other stores, untimed; then the dictionary's effect on size.
    train = {impl: contenders[impl].call("train") for impl in impls}
    for impl in impls:
        contenders[impl].call("write_store", name="tokens-zstd_dict")
        contenders[impl].call("write_store", name="tokens-raw")
    for name in PREPARED_OURS:
        c.call("write_store", name=name)
    stores = {impl: contenders[impl].call("sizes", names=list(WRITES + PREPARED + (PREPARED_OURS if impl == "ours" else ()))) for impl in impls}

    logical = {"dense": N_IMAGES * IMAGE_BYTES, "tokens": info["token_bytes"], "v1": N_IMAGES * IMAGE_BYTES}
    result["writes"] = []
    for (name, impl), samples in write_samples.items():
        close = [s["close_s"] for s in samples]
        durable = [s["durable_s"] for s in samples]
        size = logical[name.split("-")[0]]
        result["writes"].append({
            "impl": impl, "name": name, "logical_bytes": size,
            "close_s": statistics.median(close), "durable_s": statistics.median(durable),
            "close_mib_s": size / MIB / statistics.median(close),
            "durable_mib_s": size / MIB / statistics.median(durable),
            "rounds_close_s": close, "rounds_durable_s": durable,
        })
    result["stores"] = [
        {"impl": impl, "name": name, "logical_bytes": logical[name.split("-")[0]], "on_disk_bytes": size,
         **({"dict_len": train[impl]["dict_len"], "train_s": train[impl]["train_s"]} if name.endswith("zstd_dict") else {})}
        for impl in impls for name, size in stores[impl].items()
    ]

    # Gathers.
    gjobs = []
    for row, store, check_raw, flat, who in GATHERS:
        for impl in who:
            if impl not in contenders:
                continue
            key = store + ("+check_raw" if check_raw else "") + ("+flat" if flat else "")
            if flat:
                contenders[impl].call("flat_reader", name=store)
            else:
                contenders[impl].call("open_reader", name=store, check_raw=check_raw)
            gjobs.append((row, impl, key))
    log(f"  readers open and checked: {len(gjobs)}")
    gsamples: dict[tuple[str, str, str], list[float]] = {j: [] for j in gjobs}
    for r in range(ROUNDS):
        for job in rotated(gjobs, r):
            gsamples[job].append(contenders[job[1]].call("gather", key=job[2]))
        log(f"  gather round {r + 1}/{ROUNDS}: done")
    result["gathers"] = []
    for (row, impl, key), times in gsamples.items():
        per = statistics.median(times)
        data = "tokens" if key.startswith("tokens") else "images"
        per_record = info["token_bytes"] / N_TOKENS if data == "tokens" else IMAGE_BYTES
        result["gathers"].append({
            "impl": impl, "name": row, "data": data, "per_batch_s": per,
            "records_per_s": GATHER_BATCH / per,
            "mib_s": GATHER_BATCH * per_record / MIB / per,
            "rounds_s": times,
        })
    for impl in impls:
        contenders[impl].call("close_all")

    # Open a store of OPEN_RECORDS records (ours only).
    result["open"] = measure_open(c, data_dir, args.smoke)
    for impl in impls:
        contenders[impl].quit()
    return result


def measure_first_writes(args: argparse.Namespace, impls: list[str], data_dir: Path) -> list[dict[str, Any]]:
    """The first zstd write of a fresh process (``first_write_probe``), per
    contender, rounds alternated (the order rotated every round)."""
    python = {"ours": sys.executable, "ours28": sys.executable,
              "original": str(args.original_python), "original28": str(args.original28_python)}
    samples: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for r in range(WRITE_ROUNDS):
        for impl in rotated(impls, r):
            cmd = [python[impl], str(SCRIPT), *(["--smoke"] if args.smoke else []), "first-write", impl,
                   str(data_dir / impl / "first-write"), *([] if args.smoke else ["--drop"])]
            out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
            samples[impl].append(json.loads(out.strip().splitlines()[-1]))
        log(f"  first-write round {r + 1}/{WRITE_ROUNDS}: done")
    size = N_IMAGES * IMAGE_BYTES
    out = []
    for impl, rounds in samples.items():
        durable = statistics.median(s["durable_s"] for s in rounds)
        close = statistics.median(s["close_s"] for s in rounds)
        out.append({"impl": impl, "name": "dense-zstd", "logical_bytes": size, "close_s": close,
                    "durable_s": durable, "durable_mib_s": size / MIB / durable,
                    "dropped": all(s["dropped"] for s in rounds), "rounds": rounds})
    return out


def measure_open(c: Remote, data_dir: Path, smoke: bool) -> dict[str, Any]:
    path = data_dir / f"open-int8-{OPEN_RECORDS}"
    manifest = data_dir / f"open-int8-{OPEN_RECORDS}.json"
    tiny = data_dir / "ours" / "dense-raw"
    try:
        built = json.loads(manifest.read_text())
    except (OSError, ValueError):
        built = None
    if built is None or built.get("records") != OPEN_RECORDS or not path.exists():
        if path.exists():
            shutil.rmtree(path)
        log(f"  building the store of {OPEN_RECORDS:,} records (once; kept in {path})")
        built = {"records": OPEN_RECORDS, **c.call("build_open_store", path=str(path)),
                 "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        manifest.write_text(json.dumps(built) + "\n")
        log(f"  built in {built['build_s']:.0f} s")
    rounds = []

    def probe() -> dict[str, Any]:
        cmd = [sys.executable, str(SCRIPT), "open-probe", str(path), "--warmup", str(tiny)]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
        res = json.loads(out)
        if res["records"] != OPEN_RECORDS:
            raise SystemExit(f"open probe: {res['records']} records, expected {OPEN_RECORDS}")
        return res

    for _ in range(OPEN_ROUNDS):
        rounds.append(probe())
    cold = None
    if not smoke and drop_page_cache():
        cold = probe()
    return {
        "records": OPEN_RECORDS,
        "build_s": built["build_s"],
        "meta_bytes": allocated_bytes(path / "meta.zr") if (path / "meta.zr").exists() else None,
        "store_bytes": allocated_bytes(path),
        "open_s": statistics.median(r["open_s"] for r in rounds),
        "rss_added": statistics.median(r["rss_added"] for r in rounds),
        "rounds": rounds,
        "cold": cold,
    }


# ----------------------------------------------------------------- targets


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target: measured, goal, met. A target whose contender is
    missing is listed as not measured, with the reason."""
    g = {(r["impl"], r["name"]): r for r in result.get("gathers", [])}
    w = {(r["impl"], r["name"]): r for r in result.get("writes", [])}
    s = {(r["impl"], r["name"]): r for r in result.get("stores", [])}
    missing = result.get("original_missing")
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: float, at_least: bool, unit: str, why: str | None = None) -> None:
        out.append({
            "target": name, "measured": value, "goal": goal, "at_least": at_least, "unit": unit,
            "met": None if value is None else (value >= goal if at_least else value <= goal),
            "not_measured": why if value is None else None,
        })

    def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> float | None:
        return None if a is None or b is None else a[key] / b[key]

    def vs_orig(name: str, row: str, goal: float) -> None:
        add(name, ratio(g.get(("ours", row)), g.get(("original", row)), "records_per_s"), goal, True, "x",
            "2.4.0 missing, see above" if missing else None)

    vs_orig("Dense raw gather vs 2.4.0", "dense raw", TARGETS["dense_vs_original"])
    add("Dense raw gather vs our Dataset (v1)",
        ratio(g.get(("ours", "dense raw")), g.get(("ours", "Dataset raw (format v1)")), "records_per_s"),
        TARGETS["dense_vs_dataset"], True, "x")
    for codec in ("zstd", "raw"):
        vs_orig(f"Ragged tokens {codec} gather vs 2.4.0", f"tokens {codec}", TARGETS["ragged_vs_original"])
    for name in WRITES:
        for when in ("close", "durable"):
            add(f"write {name.replace('-', ' ')} vs 2.4.0, until {when}",
                ratio(w.get(("ours", name)), w.get(("original", name)), f"{when}_mib_s"),
                TARGETS["write_vs_original"], True, "x", "2.4.0 missing, see above" if missing else None)
    missing28 = result.get("original28_missing")
    why28 = "2.8.19 missing, see above" if missing28 else None
    first = {r["impl"]: r for r in result.get("first_writes", [])}
    add("first zstd write of a process vs 2.4.0, until durable",
        ratio(first.get("ours"), first.get("original"), "durable_mib_s"),
        TARGETS["first_write"], True, "x", "2.4.0 missing, see above" if missing else None)
    add("first zstd write of a process vs 2.8.19 (2.8 API), until durable",
        ratio(first.get("ours28"), first.get("original28"), "durable_mib_s"),
        TARGETS["first_write"], True, "x", why28)
    add("Dense raw gather vs 2.8.19 (2.8 API)",
        ratio(g.get(("ours28", "dense raw")), g.get(("original28", "dense raw")), "records_per_s"),
        TARGETS["dense_vs_original28"], True, "x", why28)
    for codec in ("zstd", "raw"):
        add(f"Ragged tokens {codec} gather vs 2.8.19 (2.8 API)",
            ratio(g.get(("ours28", f"tokens {codec}")), g.get(("original28", f"tokens {codec}")), "records_per_s"),
            TARGETS["ragged_vs_original28"], True, "x", why28)
    for name in WRITES:
        add(f"write {name.replace('-', ' ')} vs 2.8.19 (2.8 API), until durable",
            ratio(w.get(("ours28", name)), w.get(("original28", name)), "durable_mib_s"),
            TARGETS["write_vs_original28"], True, "x", why28)
    for name in WRITES + PREPARED:
        add(f"{name.replace('-', ' ')} on disk vs 2.8.19 (2.8 API)",
            ratio(s.get(("ours28", name)), s.get(("original28", name)), "on_disk_bytes"),
            TARGETS["disk_vs_original28"], False, "x", why28)
    add("tokens zstd_dict on disk vs zstd (ours)",
        ratio(s.get(("ours", "tokens-zstd_dict")), s.get(("ours", "tokens-zstd")), "on_disk_bytes"), 1.0, False, "x")
    add("tokens zstd_dict gather vs zstd (ours)",
        ratio(g.get(("ours", "tokens zstd_dict")), g.get(("ours", "tokens zstd")), "records_per_s"),
        TARGETS["dict_gather_vs_zstd"], True, "x")
    op = result.get("open")
    rec = f"{op['records']:,}" if op else "?"
    add(f"open a v2 store of {rec} records", op and op["open_s"] * 1e3, TARGETS["open_ms"], False, "ms")
    add("RSS added by that open", op and op["rss_added"] / MIB, TARGETS["open_rss_mib"], False, "MiB")
    zstd2, zstd1 = g.get(("ours", "dense zstd")), g.get(("ours", "Dataset zstd (format v1)"))
    add("checksums' cost on a zstd gather (v2 vs v1 time − 1)",
        None if zstd2 is None or zstd1 is None else zstd2["per_batch_s"] / zstd1["per_batch_s"] - 1,
        TARGETS["checksum_overhead"], False, "%")
    for t in out:  # strict "smaller" for the size target
        if t["target"].startswith("tokens zstd_dict on disk") and t["measured"] is not None:
            t["met"] = t["measured"] < 1.0
    return out


# ----------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny data, one round (figures mean nothing)")
    sub = parser.add_subparsers(dest="mode")
    w = sub.add_parser("worker", help=argparse.SUPPRESS)
    w.add_argument("impl", choices=list(IMPLS))
    w.add_argument("--data-dir", type=Path, required=True)
    f = sub.add_parser("first-write", help=argparse.SUPPRESS)
    f.add_argument("impl", choices=list(IMPLS))
    f.add_argument("root", type=Path)
    f.add_argument("--drop", action="store_true", help="drop the page cache before the timed write")
    p = sub.add_parser("open-probe", help=argparse.SUPPRESS)
    p.add_argument("path", type=Path)
    p.add_argument("--warmup", type=Path, required=True)
    parser.add_argument("--original-python", type=Path, default=None,
                        help="interpreter with loaderx 2.4.0 (default: <target>/compat24-venv/bin/python)")
    parser.add_argument("--original-missing", default=None, metavar="REASON",
                        help="do not run 2.4.0; record REASON in the results instead")
    parser.add_argument("--original28-python", type=Path, default=None,
                        help="interpreter with loaderx 2.8.19 (default: <target>/compat28-venv/bin/python)")
    parser.add_argument("--original28-missing", default=None, metavar="REASON",
                        help="do not run 2.8.19; record REASON in the results instead")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where stores are written (default: <target>/bench-typed)")
    parser.add_argument("--keep-stores", action="store_true",
                        help="keep the stores each contender wrote (several GiB at full size)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the run's JSON here")
    args = parser.parse_args(argv)
    if args.smoke:
        shrink_for_smoke()
    if args.mode == "worker":
        worker = Worker28 if args.impl in API28 else Worker
        return serve(lambda: worker(args.impl, args.data_dir))
    if args.mode == "open-probe":
        return open_probe(args.path, args.warmup)
    if args.mode == "first-write":
        return first_write_probe(args.impl, args.root, args.drop)

    args.data_dir = data_dir(args.data_dir, "bench-typed-smoke" if args.smoke else "bench-typed")
    if args.original_python is None:
        args.original_python = target_dir() / "compat24-venv" / "bin" / "python"
    if args.original28_python is None:
        args.original28_python = target_dir() / "compat28-venv" / "bin" / "python"

    started = time.perf_counter()
    info = machine(numpy=np.__version__, loaderx=loaderx.__version__, load_1min=load_1min())
    try:
        result = run(args)
    except RuntimeError as e:  # a worker failed: the run is void
        raise SystemExit(f"typed.py: {e}") from None
    finally:
        if not args.keep_stores:
            # The open-time store is built once and kept (it is slow to build).
            for impl in IMPLS:
                shutil.rmtree(args.data_dir / impl, ignore_errors=True)
    info["load_1min_end"] = load_1min()
    result = {"machine": info, "workload": workload(), "smoke": args.smoke, **result}
    result["targets"] = targets(result)
    from tables import typed_report

    return finish(result, started, typed_report, args.json_out)


if __name__ == "__main__":
    sys.exit(main())
