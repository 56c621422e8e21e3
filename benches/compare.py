#!/usr/bin/env python3
"""Side-by-side throughput of loaderx through its Python binding.

Every number here goes through the API a user calls (GIL, call overhead and
NumPy allocation included), and every ratio is taken between contenders
measured in the same run, interleaved round by round so that a noisy
neighbour slows them alike.

Sections:

* ``sampler`` - ``loaderx.Sampler`` IID batches over 1,000,000 indices
  against ``numpy.random.default_rng().integers`` and the legacy
  ``numpy.random.randint``.
* ``store``   - ``Dataset.write`` per codec and a ``.npy`` file: write speed,
  random-batch gather speed (``Dataset.__getitems__`` against fancy indexing
  of ``np.load(path, mmap_mode="r")``) and allocated size on disk.
* ``loader``  - ``DataLoader`` batches per second end to end.

``all`` runs the three for this interpreter's loaderx and, given the
interpreter of a venv holding loaderx 0.5.4 (``--original-python``; default
``target/compat-venv/bin/python`` when it exists), runs the same script there
as a subprocess (``--impl original --json -``), alternating the loader rounds
between the two, and prints one set of tables with ratios against 0.5.4.

Writes are measured interleaved too (every contender once per round), with
the page cache written back and dropped before each write
(``sync; echo 3 > /proc/sys/vm/drop_caches``) when the process may; when it
may not, a note says so and the JSON records it. The loader section checks
the contents of its batches against direct reads of the stores, not only
their shapes.

``--smoke`` shrinks everything (2,000 records, one short round, no page
cache dropping) to check in seconds that the script and the tables work;
its figures mean nothing.

The tables are rendered by ``benches/tables.py`` from the JSON alone
(``--json``); ``--criterion-dir`` adds the criterion estimates of the Rust
benches to that JSON. ``cargo xtask bench`` keeps its run in
``docs/bench/latest.json`` and regenerates the docs' tables from it with
``tables.py --write``.

Runs under either package; needs nothing beyond NumPy. Usage::

    .venv/bin/python benches/compare.py all
    .venv/bin/python benches/compare.py sampler store --json out.json
    .venv/bin/python benches/compare.py all --smoke
    target/compat-venv/bin/python benches/compare.py loader --impl original
    python3 benches/tables.py docs/bench/latest.json --write
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

import loaderx
from benchlib import MIB, allocated_bytes, data_dir, drop_page_cache, finish, load_1min, log
from benchlib import machine, read_through, target_dir
from tables import collect_criterion, compare_report

# ----------------------------------------------------------------- workload

N_RECORDS = 20_000
SHAPE = (3, 64, 64)
DTYPE = np.dtype(np.uint8)
RECORD_BYTES = math.prod(SHAPE) * DTYPE.itemsize  # 12 KiB
DATA_SEED = 1234
GEN_CHUNK = 1000  # records per independently seeded generator block
GEN_VERSION = 1  # bump when generate() changes, to invalidate stored data

SAMPLER_SPACE = 1_000_000
SAMPLER_BATCHES: tuple[int, ...] = (256, 1024, 8192)

GATHER_BATCH = 256
GATHER_BATCHES = 200

LOADER_BATCH = 256
LOADER_WORKERS = 4
LOADER_PREFETCH = 4
LOADER_WARMUP = 20
LOADER_MEASURE = 300

TARGETS = {
    "sampler": 2.0,  # Sampler vs default_rng at batch 256
    "store": 1.3,  # loaderx raw gather vs npy-mmap gather
    "loader": 1.0,  # ours vs loaderx 0.5.4, raw and flate (strictly greater)
}


def generate(start: int, count: int) -> np.ndarray:
    """Records ``start .. start+count`` of the smooth image-like data set.

    Each record is three channels of a random plane wave plus a linear ramp
    and +-2 of uniform noise: deflate shrinks it by about 1.2x, like real
    photos. Deterministic, and block-seeded so any record can be rebuilt
    without generating the ones before it.
    """
    out = np.empty((count, *SHAPE), dtype=DTYPE)
    y = np.arange(SHAPE[1], dtype=np.float32)[:, None]
    x = np.arange(SHAPE[2], dtype=np.float32)[None, :]
    first_block = start // GEN_CHUNK
    last_block = (start + count - 1) // GEN_CHUNK
    for block in range(first_block, last_block + 1):
        rng = np.random.default_rng([DATA_SEED, GEN_VERSION, block])
        p = rng.random((GEN_CHUNK, SHAPE[0], 6), dtype=np.float32)[..., None, None]
        angle = p[:, :, 0] * np.float32(2 * np.pi)
        freq = 0.02 + 0.12 * p[:, :, 1]
        amp = 40 + 80 * p[:, :, 3]
        img = 128 + amp * np.sin(
            freq * (np.cos(angle) * x + np.sin(angle) * y) + np.float32(2 * np.pi) * p[:, :, 4]
        )
        img += (x + y) * (p[:, :, 5] - 0.5)
        img += rng.integers(-2, 3, size=img.shape, dtype=np.int16)
        pixels = np.clip(img, 0, 255).astype(DTYPE)
        lo = max(start, block * GEN_CHUNK)
        hi = min(start + count, (block + 1) * GEN_CHUNK)
        out[lo - start : hi - start] = pixels[lo - block * GEN_CHUNK : hi - block * GEN_CHUNK]
    return out


def labels() -> np.ndarray:
    """Each record's label is its own index, so a batch's labels say which
    records its data must hold."""
    return np.arange(N_RECORDS, dtype=np.int64)


def workload() -> dict[str, Any]:
    """The sizes in force (``--smoke`` shrinks them), saved with the run."""
    return {
        "records": N_RECORDS,
        "shape": list(SHAPE),
        "record_bytes": RECORD_BYTES,
        "sampler_space": SAMPLER_SPACE,
        "sampler_batches": list(SAMPLER_BATCHES),
        "gather_batch": GATHER_BATCH,
        "gather_batches": GATHER_BATCHES,
        "loader_batch": LOADER_BATCH,
        "loader_workers": LOADER_WORKERS,
        "loader_prefetch": LOADER_PREFETCH,
        "loader_warmup": LOADER_WARMUP,
        "loader_measure": LOADER_MEASURE,
    }


def shrink_for_smoke() -> None:
    """``--smoke``: small enough to run in seconds."""
    global N_RECORDS, SAMPLER_BATCHES, GATHER_BATCHES, LOADER_WARMUP, LOADER_MEASURE
    N_RECORDS = 2 * GEN_CHUNK
    SAMPLER_BATCHES = (256,)
    GATHER_BATCHES = 8
    LOADER_WARMUP = 3
    LOADER_MEASURE = 10


# ----------------------------------------------------------------- helpers


def impl_name(impl: str) -> str:
    return f"loaderx {loaderx.__version__}" if impl == "ours" else "loaderx 0.5.4"


def detect_impl() -> str:
    return "original" if loaderx.__version__.startswith("0.5.") else "ours"


def sampler_class() -> Any:
    # 0.5.4 does not export Sampler at the top level.
    sampler = getattr(loaderx, "Sampler", None)
    if sampler is None:
        from loaderx._sampler import Sampler as sampler
    return sampler


def codecs_for(impl: str) -> list[str]:
    wanted = ["raw", "flate", "zstd", "lz4"]
    available = getattr(loaderx, "CODECS", None)
    if available is None:  # 0.5.4 does not export it at the top level
        from loaderx import _zrecord

        available = _zrecord.CODECS
    return [c for c in wanted if c in available]


def calls_per_round(fn: Callable[[], Any], seconds: float) -> int:
    """How many back-to-back calls of ``fn`` take about ``seconds``."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= seconds / 10 or n >= 1 << 24:
            return max(1, int(n * seconds / max(dt, 1e-9)))
        n *= 4


def time_calls(fn: Callable[[], Any], n: int) -> float:
    """Seconds per call over ``n`` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


# ----------------------------------------------------------------- sampler


def bench_sampler(impl: str, rounds: int) -> list[dict[str, Any]]:
    seconds = 0.08
    rows: list[dict[str, Any]] = []
    for batch in SAMPLER_BATCHES:
        sampler = sampler_class()(SAMPLER_SPACE, batch, 1, 42)
        rng = np.random.default_rng(42)
        np.random.seed(42)
        contenders: dict[str, Callable[[], Any]] = {
            "numpy randint": partial(np.random.randint, 0, SAMPLER_SPACE, size=batch, dtype=np.uint64),
            "numpy default_rng": partial(rng.integers, 0, SAMPLER_SPACE, size=batch, dtype=np.uint64),
            f"{impl_name(impl)} Sampler": sampler.next,
        }
        out = sampler.next()
        assert out.dtype == np.uint64 and out.shape == (batch,), (out.dtype, out.shape)
        counts = {name: calls_per_round(fn, seconds) for name, fn in contenders.items()}
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(rounds):
            for name, fn in contenders.items():
                samples[name].append(time_calls(fn, counts[name]))
        base = statistics.median(samples["numpy default_rng"])
        for name in contenders:
            t = statistics.median(samples[name])
            rows.append(
                {
                    "impl": impl if "Sampler" in name else "numpy",
                    "name": name,
                    "batch": batch,
                    "per_batch_s": t,
                    "indices_per_s": batch / t,
                    "vs_default_rng": base / t,
                    "rounds_s": samples[name],
                }
            )
        log(f"  sampler batch {batch}: done")
    return rows


# ----------------------------------------------------------------- stores


class Stores:
    """The on-disk data of one implementation under ``<data>/<impl>/``, plus
    the shared ``<data>/images.npy``."""

    def __init__(self, data_dir: Path, impl: str) -> None:
        self.root = data_dir / impl
        self.npy = data_dir / "images.npy"
        self.manifest = self.root / "manifest.json"
        self.impl = impl

    def path(self, codec: str) -> Path:
        return self.root / codec

    def labels_path(self) -> Path:
        return self.root / "labels"

    def expected_manifest(self, codecs: list[str]) -> dict[str, Any]:
        return {
            "records": N_RECORDS,
            "shape": list(SHAPE),
            "dtype": DTYPE.str,
            "data_seed": DATA_SEED,
            "gen_version": GEN_VERSION,
            "labels": "record index",
            "loaderx": loaderx.__version__,
            "codecs": sorted(codecs),
        }

    def valid(self, codecs: list[str]) -> bool:
        """True when every store in ``codecs`` (and the labels) was written
        by this script's current workload and still reads back right."""
        try:
            found = json.loads(self.manifest.read_text())
        except (OSError, ValueError):
            return False
        if not set(codecs) <= set(found.get("codecs", [])):
            return False
        if {k: v for k, v in found.items() if k != "codecs"} != {
            k: v for k, v in self.expected_manifest(codecs).items() if k != "codecs"
        }:
            return False
        probe = np.array([0, N_RECORDS - 1], dtype=np.uint64)
        want = np.concatenate([generate(0, 1), generate(N_RECORDS - 1, 1)])
        try:
            for codec in codecs:
                with loaderx.Dataset(self.path(codec)) as ds:
                    if len(ds) != N_RECORDS or not np.array_equal(ds.__getitems__(probe), want):
                        return False
            with loaderx.Dataset(self.labels_path()) as ds:
                if len(ds) != N_RECORDS:
                    return False
        except Exception:  # noqa: BLE001 - anything unreadable is simply invalid
            return False
        return True

    def npy_valid(self) -> bool:
        try:
            arr = np.load(self.npy, mmap_mode="r")
        except (OSError, ValueError):
            return False
        return (
            arr.shape == (N_RECORDS, *SHAPE)
            and arr.dtype == DTYPE
            and np.array_equal(arr[N_RECORDS - 1], generate(N_RECORDS - 1, 1)[0])
        )

    def write(self, codec: str, array: np.ndarray) -> float:
        """Write one store from scratch; returns the seconds ``Dataset.write``
        took (the store is synced before it returns)."""
        path = self.path(codec)
        if path.exists():
            shutil.rmtree(path)  # Dataset.write would append otherwise
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        ds = loaderx.Dataset.write(path, array, codec=codec)
        dt = time.perf_counter() - t0
        ds.close()
        return dt

    def write_labels(self) -> None:
        path = self.labels_path()
        if path.exists():
            shutil.rmtree(path)
        loaderx.Dataset.write(path, labels(), codec="raw").close()

    def write_npy(self, array: np.ndarray) -> float:
        """``np.save`` plus fsync, to match ``Dataset.write``'s sync."""
        self.npy.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.npy.with_suffix(".tmp.npy")
        t0 = time.perf_counter()
        with open(tmp, "wb") as f:
            np.save(f, array)
            f.flush()
            os.fsync(f.fileno())
        dt = time.perf_counter() - t0
        os.replace(tmp, self.npy)
        return dt

    def commit(self, codecs: list[str]) -> None:
        self.manifest.write_text(json.dumps(self.expected_manifest(codecs), indent=2) + "\n")

    def ensure(self, codecs: list[str]) -> None:
        """Make the stores the loader needs, reusing valid ones."""
        if self.valid(codecs):
            log(f"  reusing stores in {self.root}")
            return
        log(f"  writing stores {codecs} + labels into {self.root}")
        if self.manifest.exists():
            self.manifest.unlink()
        array = generate(0, N_RECORDS)
        for codec in codecs:
            self.write(codec, array)
        self.write_labels()
        self.commit(codecs)


def bench_store(impl: str, data_dir: Path, rounds: int, drop_cache: bool) -> tuple[list[dict[str, Any]], str]:
    """The store section; also says what was done to the page cache before
    each write: "dropped", "not permitted" or "not tried" (``--smoke``)."""
    stores = Stores(data_dir, impl)
    codecs = codecs_for(impl)
    logical = N_RECORDS * RECORD_BYTES

    log(f"  generating {N_RECORDS} records of {SHAPE} {DTYPE}")
    array = generate(0, N_RECORDS)
    if stores.manifest.exists():
        stores.manifest.unlink()
    # Writes interleaved: every contender once per round, each after a sync
    # and a dropped page cache. The .npy is written by our run only; the
    # original's run reads the one ours wrote, for an in-run gather ratio.
    writers: dict[str, Callable[[], float]] = {
        f"loaderx-{codec}": partial(stores.write, codec, array) for codec in codecs
    }
    if impl == "ours":
        writers["npy-mmap"] = partial(stores.write_npy, array)
    dropped = drop_cache
    write_samples: dict[str, list[float]] = {name: [] for name in writers}
    for _ in range(rounds):
        for name, write in writers.items():
            if drop_cache:
                dropped = drop_page_cache() and dropped
            write_samples[name].append(write())
    if drop_cache and not dropped:
        log("  note: could not drop the page cache (not permitted here); writes ran without it")
    page_cache = "not tried" if not drop_cache else "dropped" if dropped else "not permitted"
    write_s = {name: statistics.median(v) for name, v in write_samples.items()}
    for name, secs in write_s.items():
        log(f"  wrote {name}: {logical / MIB / secs:.0f} MiB/s")
    stores.write_labels()
    stores.commit(codecs)
    have_npy = impl == "ours" or stores.npy_valid()

    # Open everything, warm the page cache and check the contenders agree.
    readers: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
    datasets = []
    for codec in codecs:
        read_through(stores.path(codec))
        ds = loaderx.Dataset(stores.path(codec))
        datasets.append(ds)
        readers[f"loaderx-{codec}"] = ds.__getitems__
    if have_npy:
        read_through(stores.npy)
        mm = np.load(stores.npy, mmap_mode="r")
        readers["npy-mmap"] = mm.__getitem__

    rng = np.random.default_rng(7)
    batches = [
        rng.integers(0, N_RECORDS, size=GATHER_BATCH, dtype=np.uint64) for _ in range(GATHER_BATCHES)
    ]
    # NumPy gets the index type it prefers; loaderx the one its sampler emits.
    batches_for = {
        name: [b.astype(np.intp) for b in batches] if name == "npy-mmap" else batches
        for name in readers
    }
    sweep = np.arange(N_RECORDS, dtype=np.uint64)
    for name, read in readers.items():
        for start in range(0, N_RECORDS, 1024):  # fault in every page once
            read(sweep[start : start + 1024].astype(batches_for[name][0].dtype))
        got = read(batches_for[name][0])
        if not np.array_equal(got, array[batches[0].astype(np.intp)]):
            raise SystemExit(f"store: {name} returned wrong data")

    samples: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, read in readers.items():
            idx = batches_for[name]
            t0 = time.perf_counter()
            for b in idx:
                read(b)
            samples[name].append((time.perf_counter() - t0) / GATHER_BATCHES)
    for ds in datasets:
        ds.close()

    per_batch = {name: statistics.median(v) for name, v in samples.items()}
    npy_t = per_batch.get("npy-mmap")
    batch_bytes = GATHER_BATCH * RECORD_BYTES
    rows = []
    for name in readers:
        path = stores.npy if name == "npy-mmap" else stores.path(name.split("-", 1)[1])
        disk = allocated_bytes(path)
        mine = name.startswith("loaderx")
        rows.append(
            {
                "impl": impl if mine else "numpy",
                "name": name,
                "write_mib_s": logical / MIB / write_s[name] if name in write_s else None,
                "gather_mib_s": batch_bytes / MIB / per_batch[name],
                "per_batch_s": per_batch[name],
                "on_disk_bytes": disk,
                "size_ratio": logical / disk,
                "gather_vs_npy": (npy_t / per_batch[name]) if npy_t else None,
                "rounds_s": samples[name],
                "write_rounds_s": write_samples.get(name),
            }
        )
    log("  store: done")
    return rows, page_cache


# ----------------------------------------------------------------- loader


def measure_loader(stores: Stores, codec: str) -> dict[str, Any]:
    data = loaderx.Dataset(stores.path(codec))
    labelset = loaderx.Dataset(stores.labels_path())
    loader = loaderx.DataLoader(
        data,
        labelset,
        num_workers=LOADER_WORKERS,
        batch_size=LOADER_BATCH,
        prefetch_size=LOADER_PREFETCH,
        mode=1,
        seed=42,
    )
    try:
        for _ in range(LOADER_WARMUP):
            batch = next(loader)
            check_batch(batch, data, codec)
        t0 = time.perf_counter()
        for _ in range(LOADER_MEASURE):
            batch = next(loader)
        dt = time.perf_counter() - t0
        check_batch(batch, data, codec)
    finally:
        loader.close()
        data.close()
        labelset.close()
    return {"codec": codec, "seconds": dt}


def check_batch(batch: dict[str, np.ndarray], data: Any, codec: str) -> None:
    """A loader batch holds, row by row, the records its labels name (each
    label is its record's index), read back directly from the store."""
    images, idx = batch["data"], batch["label"]
    if images.shape != (LOADER_BATCH, *SHAPE) or idx.shape[0] != LOADER_BATCH:
        raise SystemExit(f"loader {codec}: batch of shape {images.shape} with {idx.shape[0]} labels")
    idx = np.asarray(idx).reshape(LOADER_BATCH).astype(np.uint64)
    if idx.max() >= N_RECORDS:
        raise SystemExit(f"loader {codec}: label {idx.max()} is not a record index below {N_RECORDS}")
    want = np.asarray(data.__getitems__(idx)).reshape(images.shape)
    if not np.array_equal(images, want):
        bad = int(np.flatnonzero((images != want).reshape(LOADER_BATCH, -1).any(axis=1))[0])
        raise SystemExit(f"loader {codec}: row {bad} is not record {idx[bad]}")


LOADER_CODECS = ("raw", "flate")


def loader_round(impl: str, data_dir: Path) -> dict[str, float]:
    stores = Stores(data_dir, impl)
    return {c: measure_loader(stores, c)["seconds"] for c in LOADER_CODECS}


def loader_rows(impl: str, samples: dict[str, list[float]]) -> list[dict[str, Any]]:
    rows = []
    for codec in LOADER_CODECS:
        secs = statistics.median(samples[codec])
        per_batch = secs / LOADER_MEASURE
        rows.append(
            {
                "impl": impl,
                "name": f"{impl_name(impl) if impl == 'ours' else 'loaderx 0.5.4'} {codec}",
                "codec": codec,
                "batches_per_s": 1 / per_batch,
                "per_batch_s": per_batch,
                "samples_per_s": LOADER_BATCH / per_batch,
                "mib_per_s": LOADER_BATCH * RECORD_BYTES / MIB / per_batch,
                "rounds_batches_per_s": [LOADER_MEASURE / s for s in samples[codec]],
            }
        )
    return rows


def bench_loader(impl: str, data_dir: Path, rounds: int) -> list[dict[str, Any]]:
    Stores(data_dir, impl).ensure(list(LOADER_CODECS))
    samples: dict[str, list[float]] = {c: [] for c in LOADER_CODECS}
    for _ in range(rounds):
        for codec, secs in loader_round(impl, data_dir).items():
            samples[codec].append(secs)
    log("  loader: done")
    return loader_rows(impl, samples)


def with_loader_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = {r["codec"]: r["batches_per_s"] for r in rows if r["impl"] == "original"}
    for r in rows:
        r["vs_original"] = r["batches_per_s"] / base[r["codec"]] if r["codec"] in base else None
    return rows


# ----------------------------------------------------------------- targets


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in result.get("sampler", []):
        if r["impl"] == "ours" and r["batch"] == 256:
            out.append(("Sampler vs default_rng, batch 256", r["vs_default_rng"], TARGETS["sampler"], False))
    for r in result.get("store", []):
        if r["impl"] == "ours" and r["name"] == "loaderx-raw" and r["gather_vs_npy"]:
            out.append(("raw gather vs npy-mmap", r["gather_vs_npy"], TARGETS["store"], False))
    for r in result.get("loader", []):
        if r["impl"] == "ours" and r.get("vs_original") is not None:
            out.append((f"DataLoader {r['codec']} vs 0.5.4", r["vs_original"], TARGETS["loader"], True))
    return [
        {
            "target": name,
            "measured": value,
            "goal": goal,
            "strict": strict,
            "met": value > goal if strict else value >= goal,
        }
        for name, value, goal, strict in out
    ]


# ----------------------------------------------------------------- driver


def run_sections(args: argparse.Namespace, impl: str) -> dict[str, Any]:
    result: dict[str, Any] = {"impl": impl}
    if "sampler" in args.sections:
        log(f"[{impl}] sampler")
        result["sampler"] = bench_sampler(impl, args.rounds_sampler)
    if "store" in args.sections:
        log(f"[{impl}] store")
        result["store"], result["page_cache_before_writes"] = bench_store(
            impl, args.data_dir, args.rounds, drop_cache=not args.smoke
        )
    if "loader" in args.sections:
        log(f"[{impl}] loader")
        result["loader"] = bench_loader(impl, args.data_dir, args.rounds)
    return result


def original_cmd(args: argparse.Namespace, sections: list[str], rounds: int) -> list[str]:
    return [
        str(args.original_python),
        str(Path(__file__).resolve()),
        *sections,
        *(["--smoke"] if args.smoke else []),
        "--impl",
        "original",
        "--data-dir",
        str(args.data_dir),
        "--rounds",
        str(rounds),
        "--json",
        "-",
        "--no-report",
    ]


def run_original(args: argparse.Namespace, sections: list[str], rounds: int) -> dict[str, Any]:
    cmd = original_cmd(args, sections, rounds)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"original ({' '.join(cmd)}) failed with exit code {proc.returncode}")
    return json.loads(proc.stdout)


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    """``all``: this interpreter's loaderx, then loaderx 0.5.4 in a subprocess,
    loader rounds alternating between the two."""
    args.sections = ["sampler", "store"]
    result = run_sections(args, "ours")
    orig_py = args.original_python
    if orig_py is None or not Path(orig_py).exists():
        log(f"no interpreter with loaderx 0.5.4 ({orig_py}); comparing without the original")
        args.sections = ["loader"]
        result["loader"] = run_sections(args, "ours")["loader"]
        return result

    log(f"[original] sampler + store, via {orig_py}")
    orig = run_original(args, ["sampler", "store"], args.rounds)
    result["original_machine"] = orig["machine"]
    result["original_page_cache_before_writes"] = orig.get("page_cache_before_writes")
    result["sampler"] += [r for r in orig["sampler"] if r["impl"] == "original"]
    result["store"] += [r for r in orig["store"] if r["impl"] == "original"]

    log("[ours + original] loader, rounds alternating")
    Stores(args.data_dir, "ours").ensure(list(LOADER_CODECS))
    ours: dict[str, list[float]] = {c: [] for c in LOADER_CODECS}
    theirs: dict[str, list[float]] = {c: [] for c in LOADER_CODECS}
    for i in range(args.rounds):
        for codec, secs in loader_round("ours", args.data_dir).items():
            ours[codec].append(secs)
        for r in run_original(args, ["loader"], 1)["loader"]:
            theirs[r["codec"]].append(LOADER_MEASURE / r["rounds_batches_per_s"][0])
        log(f"  loader round {i + 1}/{args.rounds}: done")
    result["loader"] = with_loader_ratios(loader_rows("ours", ours) + loader_rows("original", theirs))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sections",
        nargs="*",
        default=["all"],
        choices=["all", "sampler", "store", "loader"],
        help="what to measure (default: all)",
    )
    parser.add_argument(
        "--impl",
        choices=["ours", "original"],
        default=None,
        help="which loaderx the imported package is (default: detected from its version)",
    )
    parser.add_argument(
        "--original-python",
        type=Path,
        default=None,
        help="interpreter with loaderx 0.5.4, for `all` "
        "(default: target/compat-venv/bin/python if it exists)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where stores are written (default: <target>/bench-data)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds for store and loader (median)")
    parser.add_argument("--rounds-sampler", type=int, default=7, help="rounds for the sampler (median)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write JSON here ('-' = stdout, tables to stderr)")
    parser.add_argument(
        "--criterion-dir",
        type=Path,
        default=None,
        help="criterion's output directory (<target>/criterion): add its estimates to the JSON",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny data and one short round, to check the script in seconds (figures mean nothing)",
    )
    parser.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        shrink_for_smoke()

    detected = detect_impl()
    impl = args.impl or detected
    if impl != detected:
        parser.error(f"--impl {impl}, but the imported loaderx is {loaderx.__version__} ({loaderx.__file__})")
    args.data_dir = data_dir(args.data_dir, "bench-smoke" if args.smoke else "bench-data")
    if args.original_python is None:
        default = target_dir() / "compat-venv" / "bin" / "python"
        args.original_python = default if default.exists() else None
    args.rounds = 1 if args.smoke else max(1, args.rounds)
    args.rounds_sampler = 1 if args.smoke else max(1, args.rounds_sampler)

    started = time.perf_counter()
    info = machine(numpy=np.__version__, loaderx=loaderx.__version__, load_1min=load_1min())
    everything = "all" in args.sections
    if everything and impl == "ours":
        result = orchestrate(args)
    else:
        if everything:
            args.sections = ["sampler", "store", "loader"]
        result = run_sections(args, impl)
        if "loader" in result:
            with_loader_ratios(result["loader"])
    info["load_1min_end"] = load_1min()
    result = {"machine": info, "workload": workload(), "smoke": args.smoke, **result}
    result["targets"] = targets(result)
    if args.criterion_dir is not None:
        result["criterion"] = collect_criterion(args.criterion_dir)
    return finish(result, started, compare_report, args.json_out, quiet=args.no_report)


if __name__ == "__main__":
    sys.exit(main())
