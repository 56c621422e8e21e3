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

Runs under either package; needs nothing beyond NumPy. Usage::

    .venv/bin/python benches/compare.py all
    .venv/bin/python benches/compare.py sampler store --json out.json
    target/compat-venv/bin/python benches/compare.py loader --impl original
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
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

# ----------------------------------------------------------------- workload

N_RECORDS = 20_000
SHAPE = (3, 64, 64)
DTYPE = np.dtype(np.uint8)
RECORD_BYTES = math.prod(SHAPE) * DTYPE.itemsize  # 12 KiB
DATA_SEED = 1234
GEN_CHUNK = 1000  # records per independently seeded generator block
GEN_VERSION = 1  # bump when generate() changes, to invalidate stored data

SAMPLER_SPACE = 1_000_000
SAMPLER_BATCHES = (256, 1024, 8192)

GATHER_BATCH = 256
GATHER_BATCHES = 200

LOADER_BATCH = 256
LOADER_WORKERS = 4
LOADER_PREFETCH = 4
LOADER_WARMUP = 20
LOADER_MEASURE = 300

MIB = 1 << 20

TARGETS = {
    "sampler": 2.0,  # Sampler vs default_rng at batch 256
    "store": 1.3,  # loaderx raw gather vs npy-mmap gather
    "loader": 1.0,  # ours vs loaderx 0.5.4, raw and flate (strictly greater)
}

REPO = Path(__file__).resolve().parent.parent


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
    return (np.arange(N_RECORDS) % 1000).astype(np.int64)


# ----------------------------------------------------------------- helpers


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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


def allocated_bytes(path: Path) -> int:
    """Blocks actually allocated (st_blocks * 512), so sparse files count
    for what they hold."""
    if path.is_file():
        return path.stat().st_blocks * 512
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


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


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_ratio(r: float | None, bold: bool = False) -> str:
    if r is None:
        return "—"
    text = f"{r:.2f}x"
    return f"**{text}**" if bold else text


def table(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    right = set(range(1, len(headers))) if right is None else right
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            out.append(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]))
        return "| " + " | ".join(out) + " |"

    sep = "|" + "|".join(
        ("-" * (w + 1) + ":") if i in right else ("-" * (w + 2)) for i, w in enumerate(widths)
    ) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def machine() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for raw in f:
                if raw.startswith("model name"):
                    model = raw.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {
        "nproc": usable,
        "cpu_model": model,
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "loaderx": loaderx.__version__,
        "load_1min": round(load, 2),
    }


def machine_line(m: dict[str, Any]) -> str:
    return (
        f"machine: {m['nproc']} CPUs (nproc), {m['cpu_model']}, {m['system']}; "
        f"Python {m['python']}, numpy {m['numpy']}, loaderx {m['loaderx']}; "
        f"1-min load at start {m['load_1min']}, at end {m.get('load_1min_end', '?')}"
    )


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


def sampler_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        ours = r["impl"] == "ours"
        body.append(
            [
                f"**{r['name']}**" if ours else r["name"],
                str(r["batch"]),
                fmt_time(r["per_batch_s"]),
                f"{r['indices_per_s'] / 1e6:.0f} M/s",
                fmt_ratio(r["vs_default_rng"], bold=ours),
            ]
        )
    return table(["sampler", "batch", "per batch", "indices", "vs default_rng"], body)


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


def read_through(path: Path) -> None:
    """Pull every file under ``path`` into the page cache."""
    files = [path] if path.is_file() else [Path(r) / n for r, _d, fs in os.walk(path) for n in fs]
    buf = bytearray(8 * MIB)
    for file in files:
        with open(file, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def bench_store(impl: str, data_dir: Path, rounds: int) -> list[dict[str, Any]]:
    stores = Stores(data_dir, impl)
    codecs = codecs_for(impl)
    logical = N_RECORDS * RECORD_BYTES

    log(f"  generating {N_RECORDS} records of {SHAPE} {DTYPE}")
    array = generate(0, N_RECORDS)
    if stores.manifest.exists():
        stores.manifest.unlink()
    write_s: dict[str, float] = {}
    for codec in codecs:
        write_s[f"loaderx-{codec}"] = stores.write(codec, array)
        log(f"  wrote {codec}: {logical / MIB / write_s[f'loaderx-{codec}']:.0f} MiB/s")
    stores.write_labels()
    stores.commit(codecs)
    have_npy = True
    if impl == "ours":
        write_s["npy-mmap"] = stores.write_npy(array)
    else:
        # The original's run reads the .npy our run wrote, for an in-run ratio.
        have_npy = stores.npy_valid()

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
            }
        )
    log("  store: done")
    return rows


def store_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        label = r["name"] if r["impl"] != "original" else f"{r['name']} (0.5.4)"
        body.append(
            [
                label,
                "—" if r["write_mib_s"] is None else f"{r['write_mib_s']:.0f} MiB/s",
                f"{r['gather_mib_s']:.0f} MiB/s",
                fmt_time(r["per_batch_s"]),
                fmt_ratio(r["gather_vs_npy"], bold=r["name"] == "loaderx-raw" and r["impl"] == "ours"),
                f"{r['on_disk_bytes'] / MIB:.0f} MiB",
                f"{r['size_ratio']:.2f}x",
            ]
        )
    return table(
        ["store", "write", "gather", "per batch", "gather vs npy", "on disk", "ratio"], body
    )


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
        assert batch["data"].shape == (LOADER_BATCH, *SHAPE), batch["data"].shape
        t0 = time.perf_counter()
        for _ in range(LOADER_MEASURE):
            batch = next(loader)
        dt = time.perf_counter() - t0
    finally:
        loader.close()
        data.close()
        labelset.close()
    return {"codec": codec, "seconds": dt}


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


def loader_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        ours = r["impl"] == "ours"
        body.append(
            [
                f"**{r['name']}**" if ours else r["name"],
                f"{r['batches_per_s']:.1f}",
                fmt_time(r["per_batch_s"]),
                f"{r['samples_per_s']:,.0f}",
                f"{r['mib_per_s']:.0f} MiB/s",
                fmt_ratio(r.get("vs_original"), bold=ours),
            ]
        )
    return table(
        ["loader", "batches/s", "per batch", "samples/s", "throughput", "vs 0.5.4"], body
    )


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


def targets_table(rows: list[dict[str, Any]]) -> str:
    body = [
        [
            r["target"],
            f"{r['measured']:.2f}x",
            f"{'>' if r['strict'] else '≥'} {r['goal']:.1f}x",
            "met" if r["met"] else "**missed**",
        ]
        for r in rows
    ]
    return table(["target", "measured", "goal", "result"], body, right={1, 2})


# ----------------------------------------------------------------- driver


def run_sections(args: argparse.Namespace, impl: str) -> dict[str, Any]:
    result: dict[str, Any] = {"impl": impl}
    if "sampler" in args.sections:
        log(f"[{impl}] sampler")
        result["sampler"] = bench_sampler(impl, args.rounds_sampler)
    if "store" in args.sections:
        log(f"[{impl}] store")
        result["store"] = bench_store(impl, args.data_dir, args.rounds)
    if "loader" in args.sections:
        log(f"[{impl}] loader")
        result["loader"] = bench_loader(impl, args.data_dir, args.rounds)
    return result


def original_cmd(args: argparse.Namespace, sections: list[str], rounds: int) -> list[str]:
    return [
        str(args.original_python),
        str(Path(__file__).resolve()),
        *sections,
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


def report(result: dict[str, Any]) -> str:
    parts = [machine_line(result["machine"])]
    if "original_machine" in result:
        m = result["original_machine"]
        parts[0] += f" (0.5.4 side: Python {m['python']}, numpy {m['numpy']})"
    if "sampler" in result:
        parts += [
            "",
            f"### Sampler — IID batches over {SAMPLER_SPACE:,} indices "
            "(median of interleaved rounds; 0.5.4's ratio is against default_rng in its own process)",
            "",
            sampler_table(result["sampler"]),
        ]
    if "store" in result:
        parts += [
            "",
            f"### Store — {N_RECORDS:,} records × {RECORD_BYTES // 1024} KiB uint8{SHAPE}, "
            f"gather of {GATHER_BATCH} random indices × {GATHER_BATCHES}, warm cache "
            "(write includes fsync; on disk = allocated blocks; ratio = logical / on disk)",
            "",
            store_table(result["store"]),
        ]
    if "loader" in result:
        parts += [
            "",
            f"### Loader — DataLoader end to end, batch {LOADER_BATCH}, {LOADER_WORKERS} workers, IID, "
            f"identity transform, {LOADER_MEASURE} batches after {LOADER_WARMUP} warm-up "
            "(median of rounds)",
            "",
            loader_table(result["loader"]),
        ]
    if result.get("targets"):
        parts += ["", "### Targets", "", targets_table(result["targets"])]
    return "\n".join(parts)


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
    parser.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    detected = detect_impl()
    impl = args.impl or detected
    if impl != detected:
        parser.error(f"--impl {impl}, but the imported loaderx is {loaderx.__version__} ({loaderx.__file__})")
    if args.data_dir is None:
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
        args.data_dir = target if target.is_absolute() else REPO / target
        args.data_dir = args.data_dir / "bench-data"
    args.data_dir = args.data_dir.resolve()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    if args.original_python is None:
        default = REPO / "target" / "compat-venv" / "bin" / "python"
        args.original_python = default if default.exists() else None
    args.rounds = max(1, args.rounds)
    args.rounds_sampler = max(1, args.rounds_sampler)

    started = time.perf_counter()
    info = machine()
    everything = "all" in args.sections
    if everything and impl == "ours":
        result = orchestrate(args)
    else:
        if everything:
            args.sections = ["sampler", "store", "loader"]
        result = run_sections(args, impl)
        if "loader" in result:
            with_loader_ratios(result["loader"])
    try:
        info["load_1min_end"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    result = {"machine": info, **result}
    result["targets"] = targets(result)
    result["seconds"] = round(time.perf_counter() - started, 1)

    text = report(result) + f"\n\n(total {result['seconds']:.0f} s)\n"
    if args.json_out == "-":
        if not args.no_report:
            sys.stderr.write(text)
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
