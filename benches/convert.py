#!/usr/bin/env python3
"""Parallel conversion and collections (issue 41): one run.

``cargo xtask bench convert`` runs this script (``bench smoke`` its tiny
version). Two sections:

* **conversion**: the field bench's ``img224`` and ``tokens`` workloads
  (``field.generate``: the same records) converted with ``codec="zstd"``
  by

  - ``convert-1`` / ``convert-2``: our converter
    (``loaderx.converter.convert_npy`` for img224, ``convert_parquet`` for
    tokens) with ``num_proc=1`` (a store: the single-process baseline) and
    ``num_proc=2`` (a collection);
  - ``ray-1`` / ``ray-2``: Ray Data on ``ray.init(num_cpus=1|2)``: one
    read task per range of about 64 MiB of records (``map_batches`` over
    the ranges, reading the same source), written by ``loaderx.ray.write``;
  - ``spark-2``: Spark ``local[2]`` reading a Parquet file of the same
    records (``spark.read.parquet``), written by ``loaderx.spark.write``;
  - ``mds-2``: MosaicML Streaming's ``MDSWriter`` in 2 processes (one
    sub-directory each, MDS's own recipe for parallel writes) over the
    same sources, then ``merge_index``;
  - ``litdata-2``: LitData ``optimize(num_workers=2)``, its ``fn`` yielding
    the same records from the same sources.

  Sources: img224 is the field bench's ``.npy`` file (memory-mapped) for
  every contender but Spark, which has no ``.npy`` reader and reads
  ``img224.parquet``, the same bytes as a binary column (Spark has no
  unsigned byte type, so loaderx stores them as ``uint8`` Ragged records);
  tokens is ``tokens.parquet`` (``list<int32>``, 8,192 rows per row group,
  no compression codec, pyarrow's default dictionary encoding) for
  everybody, since our converter reads no ragged ``.npy`` triple. Every run is a fresh process; the page cache is dropped
  before it (``sync; echo 3 > drop_caches``) and the run's sources are
  then read back into it, so each starts with its input cached and no
  dirty pages. Inside the process two phases are timed: **start**
  (importing the engine and starting it: ``ray.init``, the Spark session
  and its JVM, then a warm-up job of one task per core that starts their
  worker processes (and Ray Data's actors); our converter, MDS and LitData
  only import) and **write**
  (the conversion until it returns, then an ``os.sync()``, so every
  contender's output is durable). records/s are of the write phase; the
  tables show both. Runs alternate round by round (order rotated), and
  the medians are kept. Bytes on disk are the output's allocated blocks.
  Outputs are checked: loaderx's are opened and spot-checked against the
  source, MDS's and LitData's indexes must count every record.

* **collection**: the field's ``img64`` records (12 KiB) written raw as
  one ``Dense`` store and as a collection of 1,000 parts
  (``collection.write_part`` in a loop, then ``commit``). ``open`` timed in
  this process (median) and in fresh processes (loaderx imported first;
  and once after dropping the page cache); random gathers of 256 indices
  (``field.Batches``, the same sequence for every reader) from a warm
  page cache, and a ``DataLoader`` (batch 256, 4 workers, prefetch 4),
  the single store against the collection with ``max_open_parts`` at its
  default (128: a batch touching most of the 1,000 parts closes and
  reopens part stores) and raised to the number of parts; rounds
  alternated, medians kept.

MDS and LitData run in a venv of their own (``--contender-python``, made
by ``benches/field_env.py`` from ``benches/convert-requirements.txt``);
without it, or when one cannot be imported, they are reported missing with
the reason, as are Ray and Spark when they cannot be imported or started
(Spark needs a Java runtime).

``--scale F`` multiplies the record counts (``field.configure``; 1.0: the
publication run); ``--smoke`` is a tiny run that checks the script and its
tables work (one round, both workloads through one engine start, no page
cache dropping): its figures mean nothing.

Usage::

    .venv/bin/python benches/convert.py --contender-python target/convert-venv-*/bin/python \\
        --json docs/bench/convert.json
    python3 benches/tables.py docs/bench/convert.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

import field
from benchlib import MIB, allocated_bytes, bench_parser, drop_page_cache, log, read_through, reply_channel, rotated
from benchlib import run_bench, send
from field import CFG, GEN_VERSION, Batches, Workload

SCRIPT = Path(__file__).resolve()
BENCHES = SCRIPT.parent

#: The workloads converted, and the one the collection section reads.
WORKLOADS = ("img224", "tokens")
COLLECTION_WORKLOAD = "img64"
#: Every conversion writes zstd (the collections' default codec; MDS and
#: LitData are asked for zstd too).
CODEC = "zstd"
#: A Ray read task's share of the records, and MDS's and LitData's shard or
#: chunk size: Ray's blocks and the other formats' files of about this size.
CHUNK_BYTES = 64 * MIB
#: tokens.parquet's row group: a slice of rows reads whole groups only.
TOKENS_ROW_GROUP = 8192
#: img224.parquet's row group (about 9 MiB of images).
IMAGES_ROW_GROUP = 64
#: Bumped when the derived sources (the Parquet files) change.
SOURCES_VERSION = 1

#: The conversion jobs: (name, engine, workers, venv).
JOBS: list[tuple[str, str, int, str]] = [
    ("convert-1", "convert", 1, "ours"),
    ("convert-2", "convert", 2, "ours"),
    ("ray-1", "ray", 1, "ours"),
    ("ray-2", "ray", 2, "ours"),
    ("spark-2", "spark", 2, "ours"),
    ("mds-2", "mds", 2, "contender"),
    ("litdata-2", "litdata", 2, "contender"),
]
#: The single-process baseline, and the others of the same parallelism.
BASELINE = "convert-1"
OTHERS = ("mds-2", "litdata-2")
#: Ours at 2 workers: judged against the baseline and the others.
OURS_AT_2 = ("ray-2", "spark-2", "convert-2")

#: The issue's targets.
TARGETS = {"vs_single": 1.8, "vs_others": 1.5, "gather_vs_store": 0.9, "loader_vs_store": 0.9, "open_ms": 50.0}

# Settings of the run beyond field.CFG's record counts; set by configure().
RUN: dict[str, Any] = {}


def configure(scale: float, smoke: bool) -> None:
    field.configure(scale, smoke)
    if smoke:
        RUN.update(rounds=1, parts=50, gather_rounds=1, gather_batches=2, loader_rounds=1,
                   loader_warmup=2, loader_batches=4, open_rounds=2, fresh_opens=1)
    else:
        RUN.update(rounds=3 if scale >= 0.5 else 2, parts=1000, gather_rounds=7, gather_batches=40,
                   loader_rounds=5, loader_warmup=10, loader_batches=100, open_rounds=9, fresh_opens=5)


# ----------------------------------------------------------------- sources


def ranges(n: int, k: int) -> list[tuple[int, int]]:
    """``0 .. n`` cut into ``k`` contiguous near-equal ranges (no empty one)."""
    k = max(1, min(k, n))
    bounds = np.linspace(0, n, k + 1).astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def chunks_of(w: Workload, workers: int) -> list[tuple[int, int]]:
    """The record ranges of about ``CHUNK_BYTES`` each, a multiple of
    ``workers`` of them (at least one per worker)."""
    per = max(1, -(-w.logical_bytes // (CHUNK_BYTES * workers)))
    return ranges(w.n, per * workers)


def write_parquet_sources(src: Path) -> None:
    """The Parquet forms of the sources: ``tokens.parquet`` (``tokens``:
    ``list<int32>``) and ``img224.parquet`` (``image``: the raw bytes as
    ``binary``), with no compression codec, from the field's ``.npy``
    files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tok = Workload("tokens", src)
    with pq.ParquetWriter(str(src / "tokens.parquet"), pa.schema([("tokens", pa.list_(pa.int32()))]),
                          compression="none") as out:
        for lo in range(0, tok.n, TOKENS_ROW_GROUP):
            hi = min(tok.n, lo + TOKENS_ROW_GROUP)
            offs = np.asarray(tok.offsets[lo:hi + 1] - tok.offsets[lo], dtype=np.int32)
            values = np.asarray(tok.flat[tok.offsets[lo]:tok.offsets[hi]])
            out.write_table(pa.table({"tokens": pa.ListArray.from_arrays(pa.array(offs), pa.array(values))}),
                            row_group_size=TOKENS_ROW_GROUP)
    img = Workload("img224", src)
    with pq.ParquetWriter(str(src / "img224.parquet"), pa.schema([("image", pa.binary())]),
                          compression="none") as out:
        for lo in range(0, img.n, IMAGES_ROW_GROUP):
            recs = [img.arr[i].tobytes() for i in range(lo, min(img.n, lo + IMAGES_ROW_GROUP))]
            out.write_table(pa.table({"image": pa.array(recs, type=pa.binary())}), row_group_size=IMAGES_ROW_GROUP)


def prepare_sources(data_dir: Path) -> dict[str, Any]:
    """The field's workloads this run needs, generated under
    ``<data-dir>/source`` (kept between runs of the same size), and their
    Parquet forms; returns their manifests."""
    src = data_dir / "source"
    src.mkdir(parents=True, exist_ok=True)
    names = (*WORKLOADS, COLLECTION_WORKLOAD)
    key = {**{k: CFG[k] for k in names}, "gen": GEN_VERSION, "sources": SOURCES_VERSION}
    stamp = src / "manifest.json"
    try:
        old = json.loads(stamp.read_text())
        if old.get("key") == key:
            return dict(old["workloads"])
    except (OSError, ValueError):
        pass
    log("[convert] generating the workloads")
    for f in src.iterdir():
        f.unlink()
    manifests = {}
    for name in names:
        t0 = time.perf_counter()
        manifests[name] = {**field.generate(name, src), "what": field.WORKLOADS[name]["what"]}
        log(f"  {name}: {manifests[name]['records']} records, "
            f"{manifests[name]['logical_bytes'] / MIB:.1f} MiB ({time.perf_counter() - t0:.1f} s)")
    write_parquet_sources(src)
    stamp.write_text(json.dumps({"key": key, "workloads": manifests}, indent=1) + "\n")
    return manifests


def source_files(src: Path, workload: str, engine: str) -> list[Path]:
    """The files a conversion of ``workload`` by ``engine`` reads."""
    if workload == "tokens":
        return [src / "tokens.parquet"]
    return [src / ("img224.parquet" if engine == "spark" else "img224.npy")]


def parquet_tokens(path: Path, lo: int, hi: int) -> Iterator[np.ndarray]:
    """Rows ``lo .. hi`` of ``tokens.parquet``, one int32 array each, read
    one row group at a time."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(str(path), pre_buffer=False)
    start = 0
    for g in range(pf.num_row_groups):
        end = start + pf.metadata.row_group(g).num_rows
        if end > lo and start < hi:
            col = pf.read_row_group(g).column(0).combine_chunks()
            offs = col.offsets.to_numpy().astype(np.int64)
            values = col.values.to_numpy()
            for i in range(max(lo, start), min(hi, end)):
                k = i - start
                yield values[offs[k]:offs[k + 1]]
        start = end


def records(src: Path, workload: str, lo: int, hi: int) -> Iterator[np.ndarray]:
    """Records ``lo .. hi`` of a workload's source, one array each."""
    if workload == "tokens":
        yield from parquet_tokens(src / "tokens.parquet", lo, hi)
        return
    arr = np.load(src / "img224.npy", mmap_mode="r")
    for i in range(lo, hi):
        yield np.ascontiguousarray(arr[i])


# ----------------------------------------------------------------- engines
#
# An engine converts a workload's source into `out` and says how many
# records it wrote; made (imported and started) in the timed start phase.


class Engine:
    """What a conversion run drives: ``convert`` in the write phase,
    ``close`` afterwards (untimed), ``versions`` for the tables."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def convert(self, src: Path, workload: str, n: int, out: Path) -> None:
        raise NotImplementedError

    def check(self, src: Path, workload: str, n: int, out: Path) -> None:
        """Raise unless ``out`` holds the ``n`` records (untimed)."""
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


class LoaderxEngine(Engine):
    """An engine whose output is ours: checked by opening it."""

    def check(self, src: Path, workload: str, n: int, out: Path) -> None:
        from loaderx import Dense, Ragged, collection

        if (out / collection.MANIFEST).exists():
            col = collection.open(out)
            reader = col[col.columns[0]]
        else:
            store = out if (out / "meta.zr").exists() else out / next(p.name for p in out.iterdir() if p.is_dir())
            reader = (Dense if workload == "img224" else Ragged).open(store)
        if len(reader) != n:
            raise ValueError(f"{out}: {len(reader)} records, want {n}")
        for i in sorted({0, n // 2, n - 1}):
            got = np.asarray(reader[i]).reshape(-1).view(np.uint8)
            want = next(records(src, workload, i, i + 1)).reshape(-1).view(np.uint8)
            if not np.array_equal(got, want):
                raise ValueError(f"{out}: record {i} differs from the source")

    def versions(self) -> dict[str, str]:
        import loaderx

        return {"loaderx": loaderx.__version__}


class Converter(LoaderxEngine):
    """``loaderx.converter``: ``convert_npy`` / ``convert_parquet`` with
    ``num_proc=workers``."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        from loaderx.converter import convert_npy, convert_parquet

        self.npy, self.parquet = convert_npy, convert_parquet

    def convert(self, src: Path, workload: str, n: int, out: Path) -> None:
        if workload == "img224":
            self.npy(src / "img224.npy", out, codec=CODEC, num_proc=self.workers)
        else:
            self.parquet(src / "tokens.parquet", out, codec=CODEC, num_proc=self.workers)


class ReadRange:
    """A Ray ``map_batches`` function: a batch of one ``(lo, hi)`` range
    becomes those records of the source, as a column."""

    def __init__(self, src: str, workload: str) -> None:
        self.src, self.workload = Path(src), workload

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        lo, hi = int(batch["lo"][0]), int(batch["hi"][0])
        if self.workload == "img224":
            arr = np.load(self.src / "img224.npy", mmap_mode="r")
            return {"image": np.ascontiguousarray(arr[lo:hi])}
        col = np.empty(hi - lo, dtype=object)
        for k, rec in enumerate(parquet_tokens(self.src / "tokens.parquet", lo, hi)):
            col[k] = rec
        return {"tokens": col}


def warm_worker() -> int:
    """An engine's warm-up task: imports what the write tasks import."""
    import pyarrow  # noqa: F401

    import loaderx  # noqa: F401

    return os.getpid()


def warm_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """Spark's warm-up ``mapInArrow`` function: ``warm_worker`` per task."""
    warm_worker()
    yield from batches


def warm_block(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Ray's warm-up ``map_batches`` function: ``warm_worker`` per task."""
    warm_worker()
    return batch


class RayEngine(LoaderxEngine):
    """Ray Data on ``num_cpus=workers``: ranges read by ``map_batches``,
    written by ``loaderx.ray.write``. Its start includes a warm-up Ray Data
    job of one task per CPU, so that starting the worker processes and
    Ray Data's own actors counts as the engine's start, not as the write."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        import ray
        import ray.data

        import loaderx.ray

        self.ray, self.lray = ray, loaderx.ray
        # Ray's workers import this script's module for ReadRange.
        path = os.pathsep.join(p for p in (str(BENCHES), os.environ.get("PYTHONPATH")) if p)
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
        ray.data.DataContext.get_current().enable_progress_bars = False
        ray.data.range(workers, override_num_blocks=workers).map_batches(warm_block).materialize()

    def convert(self, src: Path, workload: str, n: int, out: Path) -> None:
        w = Workload(workload, src)
        parts = chunks_of(w, 2)
        todo = self.ray.data.from_items([{"lo": a, "hi": b} for a, b in parts], override_num_blocks=len(parts))
        ds = todo.map_batches(ReadRange(str(src), workload), batch_size=None, batch_format="numpy")
        self.lray.write(ds, out, codec=CODEC)

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "ray": self.ray.__version__}

    def close(self) -> None:
        self.ray.shutdown()


class SparkEngine(LoaderxEngine):
    """Spark ``local[workers]`` reading the Parquet source, written by
    ``loaderx.spark.write``. Its start includes a warm-up job of one task
    per core, which starts the Python workers (Spark reuses them)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        import pyspark
        from pyspark.sql import SparkSession

        import loaderx.spark

        self.pyspark, self.lspark = pyspark, loaderx.spark
        os.environ["PYSPARK_PYTHON"] = sys.executable
        self.spark = (
            SparkSession.builder.master(f"local[{workers}]")
            .appName("loaderx-bench-convert")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "4g")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        self.spark.range(0, workers, numPartitions=workers).mapInArrow(warm_batches, "id long").collect()

    def convert(self, src: Path, workload: str, n: int, out: Path) -> None:
        w = Workload(workload, src)
        # Arrow batches of about 16 MiB: the default 10,000 rows of 147 KiB
        # images would be 1.4 GiB in the JVM at once.
        rows = max(1, min(10_000, (16 * MIB) // max(1, w.median_record_bytes)))
        self.spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(rows))
        df = self.spark.read.parquet(str(source_files(src, workload, "spark")[0]))
        self.lspark.write(df, str(out), codec=CODEC)

    def check(self, src: Path, workload: str, n: int, out: Path) -> None:
        if workload == "tokens":
            return super().check(src, workload, n, out)
        # img224 came as Spark binary: uint8 Ragged records of the same bytes.
        from loaderx import collection

        col = collection.open(out)
        reader = col["image"]
        if len(reader) != n:
            raise ValueError(f"{out}: {len(reader)} records, want {n}")
        # Spark's partitions are read in order: the records keep the file's.
        for i in sorted({0, n // 2, n - 1}):
            if not np.array_equal(np.asarray(reader[i]), next(records(src, workload, i, i + 1)).reshape(-1)):
                raise ValueError(f"{out}: record {i} differs from the source")

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "pyspark": self.pyspark.__version__}

    def close(self) -> None:
        self.spark.stop()


def mds_columns(workload: str) -> dict[str, str]:
    return {"image": "ndarray:uint8:3,224,224"} if workload == "img224" else {"tokens": "ndarray:int32"}


def mds_part(src: str, workload: str, lo: int, hi: int, out: str) -> int:
    """One MDS writer process: records ``lo .. hi`` into ``out``."""
    from streaming import MDSWriter

    name = "image" if workload == "img224" else "tokens"
    with MDSWriter(out=out, columns=mds_columns(workload), compression=CODEC, size_limit=CHUNK_BYTES) as wr:
        for rec in records(Path(src), workload, lo, hi):
            wr.write({name: rec})
    return hi - lo


class MdsEngine(Engine):
    """MosaicML Streaming: ``MDSWriter`` in ``workers`` processes (one
    sub-directory each), then ``merge_index``."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        import streaming
        from streaming.base.util import merge_index

        self.streaming, self.merge_index = streaming, merge_index

    def convert(self, src: Path, workload: str, n: int, out: Path) -> None:
        out.mkdir(parents=True)
        with ProcessPoolExecutor(self.workers) as pool:
            futures = [pool.submit(mds_part, str(src), workload, lo, hi, str(out / str(k)))
                       for k, (lo, hi) in enumerate(ranges(n, self.workers))]
            for f in futures:
                f.result()
        self.merge_index(str(out), keep_local=True)

    def check(self, src: Path, workload: str, n: int, out: Path) -> None:
        index = json.loads((out / "index.json").read_text())
        got = sum(s["samples"] for s in index["shards"])
        if got != n:
            raise ValueError(f"{out}: the MDS index counts {got} samples, want {n}")

    def versions(self) -> dict[str, str]:
        return {"mosaicml-streaming": self.streaming.__version__}


def litdata_rows(src: str, workload: str, rng: tuple[int, int]) -> Iterator[dict[str, np.ndarray]]:
    """LitData's ``fn``: the records of one input range, one sample each."""
    name = "image" if workload == "img224" else "tokens"
    for rec in records(Path(src), workload, rng[0], rng[1]):
        yield {name: rec}


class LitDataEngine(Engine):
    """LitData ``optimize(num_workers=workers)`` over ranges of records."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        import litdata

        self.litdata = litdata

    def convert(self, src: Path, workload: str, n: int, out: Path) -> None:
        w = Workload(workload, src)
        # Several inputs per worker, so LitData can share them out evenly.
        inputs = ranges(n, 8 * len(chunks_of(w, self.workers)))
        self.litdata.optimize(fn=functools.partial(litdata_rows, str(src), workload), inputs=inputs,
                              output_dir=str(out), num_workers=self.workers, chunk_bytes=CHUNK_BYTES,
                              compression=CODEC)

    def check(self, src: Path, workload: str, n: int, out: Path) -> None:
        index = json.loads((out / "index.json").read_text())
        got = sum(c["chunk_size"] for c in index["chunks"])
        if got != n:
            raise ValueError(f"{out}: the LitData index counts {got} samples, want {n}")

    def versions(self) -> dict[str, str]:
        return {"litdata": self.litdata.__version__}


ENGINES: dict[str, Callable[[int], Engine]] = {
    "convert": Converter, "ray": RayEngine, "spark": SparkEngine, "mds": MdsEngine, "litdata": LitDataEngine,
}


def run_conversion(engine: str, workers: int, workloads: list[str], data_dir: Path, out: Path) -> int:
    """One run in this process: the engine made (the start phase), then
    each workload converted into ``out/<workload>`` (the write phase, until
    durable) and checked; one JSON line on stdout."""
    t0 = time.perf_counter()
    reply = reply_channel()
    try:
        eng = ENGINES[engine](workers)
    except Exception as e:  # noqa: BLE001 - the contender is missing, with the reason
        send(reply, {"missing": f"{type(e).__name__}: {e}".splitlines()[0][:400]})
        return 0
    start_s = time.perf_counter() - t0
    src = data_dir / "source"
    result: dict[str, Any] = {"start_s": start_s, "versions": eng.versions(), "writes": {}}
    try:
        for workload in workloads:
            n = Workload(workload, src).n
            t1 = time.perf_counter()
            eng.convert(src, workload, n, out / workload)
            os.sync()
            write_s = time.perf_counter() - t1
            eng.check(src, workload, n, out / workload)
            result["writes"][workload] = {"write_s": write_s, "records": n}
    except Exception as e:  # noqa: BLE001 - reported to the driver, which decides
        result = {"error": f"{type(e).__name__}: {e}"[:2000]}
    try:
        eng.close()
    except Exception as e:  # noqa: BLE001 - measured already
        log(f"{engine}: close failed: {e}")
    send(reply, result)
    return 0


# ----------------------------------------------------------------- driver: conversion


def conversion(args: argparse.Namespace, manifests: dict[str, Any], pythons: dict[str, str | None],
               missing: dict[str, str]) -> dict[str, Any]:
    """Every job on every workload, alternated round by round; in a smoke
    run each job converts both workloads after one start."""
    data_dir: Path = args.data_dir
    src = data_dir / "source"
    logs = data_dir / "logs"
    logs.mkdir(exist_ok=True)
    jobs = [j for j in JOBS if j[0] in (args.jobs or [j[0] for j in JOBS]) and not (args.smoke and j[0] == "ray-1")]
    runs: list[tuple[tuple[str, str, int, str], list[str]]] = (
        [(j, list(WORKLOADS)) for j in jobs] if args.smoke else [(j, [w]) for w in WORKLOADS for j in jobs])
    drop = not args.smoke
    dropped_all = drop
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    # A job's versions, or why it is missing (its engine did not start);
    # errors by (job, workload): a failed conversion is not run again.
    info: dict[str, dict[str, Any]] = {}
    errors: dict[tuple[str, str], str] = {}
    argv = ["--smoke"] if args.smoke else ["--scale", str(args.scale)]
    Launched = tuple[str, list[str], Path, Path, "subprocess.Popen[str]"]

    def collect(launched: Launched) -> None:
        """A run's reply: its samples (and its output's size, then the
        output removed), or why it is missing or failed."""
        name, workloads, out, log_path, proc = launched
        stdout, _ = proc.communicate()
        lines = stdout.strip().splitlines()
        try:
            res: dict[str, Any] = json.loads(lines[-1]) if lines else \
                {"error": f"exited with {proc.returncode}, no reply"}
        except ValueError:
            res = {"error": f"exited with {proc.returncode}: {lines[-1][:400]}"}
        if "missing" in res or "error" in res:
            if "missing" in res:
                info[name] = res
            else:
                errors.update({(name, w): res["error"] for w in workloads})
            log(f"  {name} {'+'.join(workloads)}: {'MISSING' if 'missing' in res else 'FAILED'}: "
                f"{res.get('missing') or res.get('error')} (log: {log_path})")
        else:
            info.setdefault(name, {})["versions"] = res["versions"]
            for w, wres in res["writes"].items():
                samples.setdefault((name, w), []).append({
                    "start_s": res["start_s"], "write_s": wres["write_s"], "records": wres["records"],
                    "on_disk_bytes": allocated_bytes(out / w)})
                log(f"  {name} {w}: start {res['start_s']:.1f} s, write {wres['write_s']:.2f} s")
        shutil.rmtree(out, ignore_errors=True)

    for r in range(RUN["rounds"]):
        # A smoke run starts every job at once (its figures mean nothing,
        # and Ray's and Spark's starts would take most of a minute in turn);
        # a real run one after the other, each collected (its output
        # measured and removed) before the next starts.
        pending: list[Launched] = []
        for (name, engine, workers, venv), workloads in rotated(runs, r):
            if "missing" in info.get(name, {}) or any((name, w) in errors for w in workloads):
                continue
            python = pythons.get(venv)
            if not python:
                info[name] = {"missing": missing.get(venv, f"no interpreter for the {venv} venv")}
                continue
            out = data_dir / "out" / f"{name}-{'+'.join(workloads)}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            if drop:
                dropped_all = drop_page_cache() and dropped_all
                for w in workloads:
                    for f in source_files(src, w, engine):
                        read_through(f)
            cmd = [python, str(SCRIPT), *argv, "run", engine, str(workers), *workloads,
                   "--data-dir", str(data_dir), "--out", str(out)]
            log_path = logs / f"{name}-{'+'.join(workloads)}.log"
            with open(log_path, "w") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            if args.smoke:
                pending.append((name, workloads, out, log_path, proc))
            else:
                collect((name, workloads, out, log_path, proc))
        for launched in pending:
            collect(launched)
        log(f"  conversion round {r + 1}/{RUN['rounds']} done")
    rows = []
    for name, engine, workers, _venv in jobs:
        for w in WORKLOADS:
            row: dict[str, Any] = {"job": name, "engine": engine, "workers": workers, "workload": w}
            s = samples.get((name, w))
            if s:
                row.update(
                    start_s=statistics.median(x["start_s"] for x in s),
                    write_s=statistics.median(x["write_s"] for x in s),
                    total_s=statistics.median(x["start_s"] + x["write_s"] for x in s),
                    records=s[0]["records"], logical_bytes=manifests[w]["logical_bytes"],
                    on_disk_bytes=s[-1]["on_disk_bytes"], rounds_write_s=[x["write_s"] for x in s],
                    rounds_start_s=[x["start_s"] for x in s])
                row["records_per_s"] = row["records"] / row["write_s"]
            elif "missing" in info.get(name, {}):
                row["missing"] = info[name]["missing"]
            else:
                row["error"] = errors.get((name, w), "not run")
            rows.append(row)
    venv_of = {j[0]: j[3] for j in JOBS}
    fatal = [(f"{name} {w}", e) for (name, w), e in errors.items() if args.smoke or venv_of[name] == "ours"]
    if fatal:
        # Ours failing is a bug here, and so is anything failing in a smoke
        # run (which exists to catch the harness's own bugs); a contender
        # failing in a real run is reported in its table instead.
        raise SystemExit("convert.py: " + "; ".join(f"{n}: {e}" for n, e in fatal))
    versions = {name: i["versions"] for name, i in info.items() if "versions" in i}
    missing_jobs = {name: i["missing"] for name, i in info.items() if "missing" in i}
    return {"conversions": rows, "versions": versions, "missing": missing_jobs,
            "page_cache_before_writes": "not tried (smoke)" if not drop else
            "dropped" if dropped_all else "not permitted"}


# ----------------------------------------------------------------- driver: collection


def open_probe(root: Path) -> int:
    """In a fresh process: loaderx imported, then ``collection.open``
    timed; one JSON line."""
    reply = reply_channel()
    from loaderx import collection

    t0 = time.perf_counter()
    col = collection.open(root)
    open_s = time.perf_counter() - t0
    send(reply, {"open_s": open_s, "records": len(col)})
    return 0


def fresh_open(root: Path) -> float:
    proc = subprocess.run([sys.executable, str(SCRIPT), "open-probe", str(root)],
                          stdout=subprocess.PIPE, text=True, check=True)
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["open_s"])


def time_gathers(get: Callable[[np.ndarray], Any], batches: Batches) -> float:
    """Seconds per batch over the round's batches."""
    t0 = time.perf_counter()
    for k in range(RUN["gather_batches"]):
        get(batches[k])
    return (time.perf_counter() - t0) / RUN["gather_batches"]


def time_loader(make: Callable[[], Any]) -> float:
    """Seconds per batch of a fresh loader, after its warm-up batches."""
    loader = make()
    try:
        for _ in range(RUN["loader_warmup"]):
            next(loader)
        t0 = time.perf_counter()
        for _ in range(RUN["loader_batches"]):
            next(loader)
        return (time.perf_counter() - t0) / RUN["loader_batches"]
    finally:
        loader.close()


def collection_section(data_dir: Path) -> dict[str, Any]:
    """One store against a collection of ``RUN["parts"]`` parts holding the
    same records: build, open, random gathers and the DataLoader."""
    from loaderx import DataLoader, Dense, collection

    w = Workload(COLLECTION_WORKLOAD, data_dir / "source")
    parts = min(RUN["parts"], w.n)
    store_path, root = data_dir / "one-store", data_dir / "collection"
    shutil.rmtree(store_path, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    wr = Dense.create(store_path, w.dtype, w.shape, codec="raw")
    wr.append(np.ascontiguousarray(w.arr))
    wr.close()
    store_build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for p, (lo, hi) in enumerate(ranges(w.n, parts)):
        collection.write_part(root, p, {"image": np.ascontiguousarray(w.arr[lo:hi])}, codec="raw")
    collection.commit(root, list(range(parts)))
    col_build_s = time.perf_counter() - t0
    log(f"[collection] one store in {store_build_s:.1f} s, {parts} parts in {col_build_s:.1f} s")

    opens = []
    for _ in range(RUN["open_rounds"]):
        t0 = time.perf_counter()
        c = collection.open(root)
        opens.append(time.perf_counter() - t0)
        c.close()
    fresh = [fresh_open(root) for _ in range(RUN["fresh_opens"])]
    cold = None
    if not CFG["smoke"] and drop_page_cache():
        cold = fresh_open(root)
    # Part stores stay open: raise the descriptor limit as far as allowed.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    read_through(store_path)
    read_through(root)
    store = Dense.open(store_path)
    col = collection.open(root)
    col_all = collection.open(root, max_open_parts=parts)
    readers: dict[str, Any] = {"store": store, "collection": col["image"], "collection-all-open": col_all["image"]}
    batches = Batches(w)
    for name, reader in readers.items():
        w.check(batches[0], reader[batches[0]], name)
    gsamples: dict[str, list[float]] = {k: [] for k in readers}
    for r in range(RUN["gather_rounds"]):
        for name in rotated(list(readers), r):
            gsamples[name].append(time_gathers(readers[name].__getitem__, batches))
    makers: dict[str, Callable[[], Any]] = {
        "store": lambda: DataLoader({"image": store}, batch_size=256, num_workers=4, prefetch_size=4),
        # The stubs lack DataLoader's collection form (docs/API.md, "Collections").
        "collection": lambda: DataLoader(col, batch_size=256, num_workers=4,  # type: ignore[call-overload]
                                         prefetch_size=4),
        "collection-all-open": lambda: DataLoader(col_all, batch_size=256,  # type: ignore[call-overload]
                                                  num_workers=4, prefetch_size=4),
    }
    for name, make in makers.items():
        loader = make()
        shape = np.asarray(next(loader)["image"]).shape
        loader.close()
        if shape != (min(256, w.n), *w.shape):
            raise SystemExit(f"convert.py: the {name} loader gave a batch of {shape}")
    lsamples: dict[str, list[float]] = {k: [] for k in makers}
    for r in range(RUN["loader_rounds"]):
        for name in rotated(list(makers), r):
            lsamples[name].append(time_loader(makers[name]))
    for c in (col, col_all):
        c.close()
    rows = []
    for name in readers:
        g, ld = statistics.median(gsamples[name]), statistics.median(lsamples[name])
        rows.append({"reader": name, "gather_batch_s": g, "gather_records_per_s": 256 / g,
                     "loader_batch_s": ld, "loader_records_per_s": 256 / ld,
                     "rounds_gather_s": gsamples[name], "rounds_loader_s": lsamples[name]})
    out = {
        "workload": COLLECTION_WORKLOAD, "records": w.n, "parts": parts, "record_bytes": w.median_record_bytes,
        "store_build_s": store_build_s, "collection_build_s": col_build_s,
        "store_bytes": allocated_bytes(store_path), "collection_bytes": allocated_bytes(root),
        "open_s": statistics.median(opens), "open_rounds_s": opens,
        "fresh_open_s": statistics.median(fresh), "fresh_open_rounds_s": fresh,
        "cold_open_s": cold, "readers": rows,
    }
    shutil.rmtree(store_path, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    return out


# ----------------------------------------------------------------- targets


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target: measured, goal, met (``tables.typed_targets_table``'s
    form). A target whose contender is missing is listed as not measured,
    with the reason."""
    rows = {(r["job"], r["workload"]): r for r in result.get("conversions", [])}
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, why: str | None = None, *, goal: float, at_least: bool = True,
            unit: str = "x") -> None:
        out.append({
            "target": name, "measured": value, "goal": goal, "at_least": at_least, "unit": unit,
            "met": None if value is None else (value >= goal if at_least else value <= goal),
            "not_measured": why if value is None else None,
        })

    def vs(job: str, base: str, workload: str) -> tuple[float | None, str | None]:
        a, b = rows.get((job, workload), {}), rows.get((base, workload), {})
        if "records_per_s" in a and "records_per_s" in b:
            return a["records_per_s"] / b["records_per_s"], None
        bad = b if "records_per_s" not in b else a
        who = base if bad is b else job
        return None, f"{who}: {bad.get('missing') or bad.get('error') or 'not run'}"

    for workload in WORKLOADS:
        for job in OURS_AT_2:
            add(f"{workload}: {job} vs {BASELINE} (records/s, write)", *vs(job, BASELINE, workload),
                goal=TARGETS["vs_single"])
        for job in OURS_AT_2:
            for other in OTHERS:
                add(f"{workload}: {job} vs {other} (records/s, write)", *vs(job, other, workload),
                    goal=TARGETS["vs_others"])
    c = result.get("collection")
    if c:
        by = {r["reader"]: r for r in c["readers"]}
        for reader in ("collection", "collection-all-open"):
            label = "" if reader == "collection" else ", max_open_parts = parts"
            add(f"{c['parts']:,}-part collection gather vs one store{label}",
                by[reader]["gather_records_per_s"] / by["store"]["gather_records_per_s"],
                goal=TARGETS["gather_vs_store"])
            add(f"{c['parts']:,}-part collection DataLoader vs one store{label}",
                by[reader]["loader_records_per_s"] / by["store"]["loader_records_per_s"],
                goal=TARGETS["loader_vs_store"])
        for what, key in (("fresh process", "fresh_open_s"), ("fresh process, cold cache", "cold_open_s")):
            if c.get(key) is not None:
                add(f"open a {c['parts']:,}-part collection ({what})", c[key] * 1e3, goal=TARGETS["open_ms"],
                    at_least=False, unit="ms")
    return out


# ----------------------------------------------------------------- main


def contender_missing(python: str | None, env_json: str | None) -> str | None:
    """Why the contender venv cannot run MDS and LitData (None: it can)."""
    if not python:
        return "no contender venv given (cargo xtask bench convert makes it from benches/convert-requirements.txt)"
    if not Path(python).exists():
        return f"no interpreter at {python}"
    if env_json and Path(env_json).exists():
        failed = {d: i["missing"] for d, i in json.loads(Path(env_json).read_text())["requirements"].items()
                  if i.get("missing")}
        if failed:
            log(f"[convert] contender venv install failures: {failed}")
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The sections asked for, and the targets they measure."""
    manifests = prepare_sources(args.data_dir)
    missing: dict[str, str] = {}
    why = args.contender_missing or contender_missing(args.contender_python, args.contender_env)
    if why:
        missing["contender"] = why
    pythons = {"ours": sys.executable, "contender": None if why else args.contender_python}
    result: dict[str, Any] = {"kind": "convert", "workloads": manifests}
    if "conversion" in args.sections:
        result.update(conversion(args, manifests, pythons, missing))
    if "collection" in args.sections:
        result["collection"] = collection_section(args.data_dir)
    result["targets"] = targets(result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser, sub = bench_parser(__doc__)
    r = sub.add_parser("run", help=argparse.SUPPRESS)
    r.add_argument("engine", choices=list(ENGINES))
    r.add_argument("workers", type=int)
    r.add_argument("workloads", nargs="+", choices=list(WORKLOADS))
    r.add_argument("--data-dir", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("open-probe", help=argparse.SUPPRESS)
    p.add_argument("root", type=Path)
    parser.add_argument("--contender-python", default=None, help="interpreter of the MDS/LitData venv")
    parser.add_argument("--contender-env", default=None, help="its field-env.json (install failures)")
    parser.add_argument("--contender-missing", default=None, metavar="REASON",
                        help="the contender venv could not be made, and why")
    parser.add_argument("--sections", nargs="+", default=["conversion", "collection"],
                        choices=["conversion", "collection"])
    parser.add_argument("--jobs", nargs="+", default=None, choices=[j[0] for j in JOBS],
                        help="conversion: only these jobs (a partial run, for looking into one)")
    args = parser.parse_args(argv)
    configure(args.scale, args.smoke)
    if args.mode == "run":
        return run_conversion(args.engine, args.workers, args.workloads, args.data_dir, args.out)
    if args.mode == "open-probe":
        return open_probe(args.root)
    import loaderx
    from tables import convert_report

    return run_bench(args, "bench-convert", run, {**CFG, **RUN, "codec": CODEC}, convert_report,
                     numpy=np.__version__, loaderx=loaderx.__version__)


if __name__ == "__main__":
    sys.exit(main())
