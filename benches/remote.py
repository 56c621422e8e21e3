#!/usr/bin/env python3
"""loaderx reading from S3 on loopback, side by side with the field's
remote readers (issue 40).

``cargo xtask bench remote`` (a step of ``bench all``, after the field)
runs this script; ``bench smoke`` its tiny version. The field bench's
``img224`` (147 KiB records) and ``tokens`` workloads (``field.generate``)
are served by S3 servers this script starts on loopback:

* ``s3s-fs`` (the crate's binary, ``--s3s-fs``), a Rust server over a
  directory: the fast one, for throughput;
* moto's ``ThreadedMotoServer`` (in a process of its own), a Python
  in-memory server that copies a whole object for every ranged read: it
  holds only the first ``moto_records`` records, and its rows are labelled.

Each server is reached directly and through the latency proxy of the
remote tests (``crates/loaderx-py/tests/remote_servers.py``, each proxy in
a process of its own) delaying every request by 0 ms and by 25 ms (a
typical in-region S3 first byte). Measured, in one run:

* ceiling: parallel whole-object GETs (``CEILING_CONCURRENCY`` at once) of
  ``ceiling_objects`` objects of 8 MiB, directly and through each proxy,
  the server's throughput limit seen by a Rust client (obstore; boto3 where
  the bench venv is missing);
* gathers: batches of 256 random records (the same index batches for every
  contender), each contender in a worker process of its venv: ours
  (``Dense``/``Ragged.open("s3://...")``, each record's CRC32C checked);
  boto3 ``get_object(Range=...)`` per record on a 32-thread pool; s3fs
  ``cat_ranges``; obstore ``get_ranges``; Lance ``take`` over S3. boto3,
  s3fs and obstore read the ``.npy`` sources as objects, at offsets the
  worker knows (nothing decoded, nothing checked); Lance its own dataset
  written to the server from the same data. The first batch of each
  contender is checked against the source, untimed; jobs are alternated
  round by round (``benchlib.rotated``) and the medians kept;
* loaders: batch 256 of img224 images with an int64 label, 4 workers, in a
  fresh process per run (``benchlib.run_sampled``: peak PSS of the process
  tree), at 0 and 25 ms: ours over the server (``lookahead=4``, no block
  cache), ours from the local disk (the same stores, page cache warm),
  MosaicML Streaming (MDS) and LitData ``StreamingDataset`` over the same
  server with their formats written from the same data (their own shard
  caches on the local disk). Each run reports the time to its first batch
  (from opening the stores), the batches after ``loader_warmup`` until
  ``loader_batches`` or the end of the first epoch (after one epoch MDS and
  LitData read their shard caches, not the server), and the bytes its
  local cache holds at the end;
* time to first batch of ours over a store of 0.5 GiB and one of 4 GiB
  (the same records repeated: real objects on the server) at 25 ms.

``--scale F`` multiplies the record counts (``LOADERX_BENCH_SCALE``);
``--smoke`` is a tiny run that checks the script and its tables, one round:
its figures mean nothing. A contender (or a server) that cannot be had is
reported missing, with the reason.

Usage::

    .venv/bin/python benches/remote.py --s3s-fs target/s3s-fs/bin/s3s-fs \\
        --field-python target/remote-venv-*/bin/python --json docs/bench/remote.json
    python3 benches/tables.py docs/bench/*.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

import field
from benchlib import MIB, Remote, allocated_bytes, bench_parser, log, pss_rss_of, read_through, reply_channel
from benchlib import rotated, run_bench, run_sampled, send, send_last, serve
from field import CFG, Workload, p95

SCRIPT = Path(__file__).resolve()
# One copy of the loopback servers: the remote tests' module.
sys.path.insert(0, str(SCRIPT.parent.parent / "crates" / "loaderx-py" / "tests"))

from remote_servers import FaultProxy, free_port, s3_options  # noqa: E402

BUCKET = "bench"
WORKLOADS = ("img224", "tokens")
LATENCIES_MS = (0, 25)
GATHER_BATCH = 256
BOTO3_THREADS = 32
CEILING_OBJECT = 8 * MIB
CEILING_CONCURRENCY = 16
LOADER_BATCH = field.LOADER_BATCH
LOADER_WORKERS = field.LOADER_WORKERS
LOADER_PREFETCH = field.LOADER_PREFETCH
LOOKAHEAD = 4
# The most batches a loader run times (a bound on a fast local run that
# goes on for `loader_min_s`).
MAX_LOADER_BATCHES = 5000
# Records per MDS / LitData shard file: 64 MiB of img224 records.
SHARD_BYTES = 64 * MIB
# The extra settings of this script (field.configure sets the counts).
RCFG: dict[str, Any] = {}


def configure(scale: float, smoke: bool) -> None:
    field.configure(scale, smoke)
    if smoke:
        CFG.update(img224=300, tokens=2000)
        RCFG.update(moto_records=32, big_bytes=48 * MIB, ceiling_objects=2, ceiling_object=MIB, rounds=1,
                    batches=1, ceiling_rounds=1, loader_rounds=1, loader_warmup=0, loader_batches=2, loader_min_s=0.0,
                    moto_rounds=1, moto_batches=1, moto_batch=8, loader_batch=16, loader_latencies=(25,))
        return
    # moto answers a few dozen requests a second and copies a whole object
    # for each ranged read: it holds 64 records (9 MiB objects) and its
    # gathers take 32, which keeps a batch of single-record reads to seconds.
    RCFG.update(moto_records=64, big_bytes=int(4 * 1024 * MIB * min(1.0, scale)),
                ceiling_objects=max(4, int(16 * min(1.0, scale))), ceiling_object=CEILING_OBJECT,
                rounds=3, batches=3, ceiling_rounds=3, loader_rounds=2,
                loader_warmup=2, loader_batches=30, loader_min_s=2.0, moto_rounds=2, moto_batches=2, moto_batch=32,
                loader_batch=LOADER_BATCH, loader_latencies=LATENCIES_MS)


def options(endpoint: str, **ours: Any) -> dict[str, Any]:
    """loaderx's storage options for the server at ``endpoint``."""
    return s3_options(endpoint, **ours)


def lance_options(endpoint: str) -> dict[str, str]:
    """Lance's storage options (object_store's keys, as strings)."""
    return {"aws_endpoint": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
            "aws_region": "us-east-1", "allow_http": "true"}


def boto3_client(endpoint: str, pool: int = BOTO3_THREADS) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                        region_name="us-east-1",
                        config=Config(max_pool_connections=pool, retries={"max_attempts": 3},
                                      request_checksum_calculation="when_required",
                                      response_checksum_validation="when_required"))


class IndexBatches:
    """The index batches of a workload of ``n`` records: the same sequence
    for every contender, drawn from one seeded generator."""

    def __init__(self, n: int, seed: int, size: int) -> None:
        self.rng = np.random.default_rng([40, seed, n])
        self.n, self.size = n, size
        self.drawn: list[np.ndarray] = []

    def __getitem__(self, k: int) -> np.ndarray:
        while len(self.drawn) <= k:
            self.drawn.append(self.rng.integers(0, self.n, size=self.size).astype(np.int64))
        return self.drawn[k]


# ----------------------------------------------------------------- servers


class Process:
    """A server or proxy in a process of its own, ended (its process group
    killed) by :meth:`stop`."""

    def __init__(self, cmd: list[str], what: str, ready: Callable[[subprocess.Popen[str]], str],
                 **kw: Any) -> None:
        self.what = what
        self.proc = subprocess.Popen(cmd, text=True, start_new_session=True, **kw)
        self.endpoint = ready(self.proc)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def wait_listening(endpoint: str, proc: subprocess.Popen[str], what: str, timeout: float = 30.0) -> str:
    import socket

    host, port = endpoint.removeprefix("http://").split(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} at start")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return endpoint
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {endpoint} within {timeout:.0f} s")


def start_s3s_fs(binary: str, root: Path) -> Process:
    """s3s-fs serving ``root`` (one directory per bucket)."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    root.mkdir(parents=True, exist_ok=True)
    cmd = [binary, "--host", "127.0.0.1", "--port", str(port), "--access-key", "test", "--secret-key", "test",
           str(root)]
    return Process(cmd, "s3s-fs", lambda p: wait_listening(endpoint, p, "s3s-fs"), stdout=subprocess.DEVNULL,
                   env={**os.environ, "RUST_LOG": "error"})


def first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"exited with {proc.wait()} before saying where it listens")
    return line


def start_moto() -> Process:
    """moto's ThreadedMotoServer in a process of its own (this script's
    ``moto`` mode), so that its GIL is not the driver's."""
    return Process([sys.executable, str(SCRIPT), "moto"], "moto", first_line, stdout=subprocess.PIPE,
                   stderr=subprocess.DEVNULL)


def start_proxy(upstream: str, delay_ms: int) -> Process:
    """The tests' latency proxy in a process of its own (``proxy`` mode),
    every request delayed by ``delay_ms``."""
    return Process([sys.executable, str(SCRIPT), "proxy", upstream.removeprefix("http://"), str(delay_ms)],
                   f"proxy {delay_ms} ms", first_line, stdout=subprocess.PIPE)


def serve_moto() -> int:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    print(f"http://{host}:{port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()
    return 0


def serve_proxy(upstream: str, delay_ms: int) -> int:
    proxy = FaultProxy(upstream)
    if delay_ms:
        proxy.arm("latency", None, delay=delay_ms / 1000, method="ANY")
    # The proxy records every ranged GET for the tests; here that list
    # would only grow.
    proxy.ranged_gets = _Discard()
    print(proxy.endpoint, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    proxy.close()
    return 0


class _Discard(list):  # type: ignore[type-arg]
    def append(self, _item: Any) -> None:
        pass


# ----------------------------------------------------------------- data


def stores_dir(data_dir: Path) -> Path:
    return data_dir / "stores"


def write_local_stores(data_dir: Path, manifests: dict[str, Any]) -> dict[str, Path]:
    """Our stores of the workloads (raw), the loader's labels, the moto
    subset, and the big store for the time to first batch (written, pushed
    and removed by :func:`populate`): name -> local path."""
    from loaderx.zrecord import Dense, Ragged

    src = data_dir / "source"
    out = stores_dir(data_dir)
    out.mkdir(parents=True, exist_ok=True)
    img = Workload("img224", src)
    tok = Workload("tokens", src)
    paths = {"img224": out / "img224", "tokens": out / "tokens", "labels": out / "labels",
             "img224-moto": out / "img224-moto", "labels-moto": out / "labels-moto"}

    def dense(path: Path, arr: np.ndarray) -> None:
        with Dense.create(path, arr.dtype, arr.shape[1:], codec="raw") as wr:
            for s in range(0, len(arr), 256):
                wr.append(np.ascontiguousarray(arr[s:s + 256]))

    def ragged(path: Path) -> None:
        with Ragged.create(path, tok.dtype, tok.ndim, codec="raw") as wr:
            wr.append_flat(tok.flat, tok.offsets, tok.shapes)

    field.made_once(paths["img224"], lambda p: dense(p, img.arr))
    field.made_once(paths["tokens"], ragged)
    field.made_once(paths["labels"], lambda p: dense(p, np.arange(img.n, dtype=np.int64)))
    field.made_once(paths["img224-moto"], lambda p: dense(p, img.arr[:RCFG["moto_records"]]))
    field.made_once(paths["labels-moto"], lambda p: dense(p, np.arange(RCFG["moto_records"], dtype=np.int64)))
    return paths


def write_big_store(path: Path, img: Workload, total: int) -> int:
    """A Dense store of about ``total`` bytes: the img224 records over and
    over (their labels in ``path``-labels); its record count."""
    from loaderx.zrecord import Dense

    per = img.median_record_bytes
    n = max(img.n, total // per)
    with Dense.create(path, img.dtype, img.shape, codec="raw") as wr:
        for s in range(0, n, 256):
            k = min(256, n - s)
            idx = np.arange(s, s + k) % img.n
            wr.append(np.ascontiguousarray(img.arr[idx]))
    with Dense.create(Path(f"{path}-labels"), np.int64, (), codec="raw") as wr:
        wr.append(np.arange(n, dtype=np.int64))
    return n


def upload_file(client: Any, path: Path, key: str) -> None:
    from boto3.s3.transfer import TransferConfig

    client.upload_file(str(path), BUCKET, key, Config=TransferConfig(multipart_threshold=1 << 40))


def push_store(endpoint: str, local: Path, prefix: str) -> None:
    """Our store at ``local`` uploaded under ``prefix`` by ``loaderx.push``
    (the chunk files, then ``meta.zr`` last)."""
    import loaderx

    loaderx.push(local, f"s3://{BUCKET}/{prefix}", storage_options=options(endpoint))


def populate(server: str, endpoint: str, data_dir: Path, paths: dict[str, Path],
             field_worker: Remote | None) -> dict[str, Any]:
    """The server's bucket filled: our stores (``push_store``), the
    ``.npy`` sources the byte-range readers read, the ceiling's objects,
    and (through the bench venv's worker) the MDS, LitData and Lance
    datasets; on s3s-fs also the big store. Returns what it holds."""
    client = boto3_client(endpoint)
    client.create_bucket(Bucket=BUCKET)
    src = data_dir / "source"
    held: dict[str, Any] = {}
    t0 = time.perf_counter()
    if server == "moto":
        n = RCFG["moto_records"]
        push_store(endpoint, paths["img224-moto"], "ours/img224")
        push_store(endpoint, paths["labels-moto"], "ours/labels")
        small = data_dir / "moto-img224.npy"
        if not small.exists():
            np.save(small, np.load(src / "img224.npy", mmap_mode="r")[:n])
        upload_file(client, small, "npy/img224.npy")
        held["img224"] = n
    else:
        for name in ("img224", "tokens", "labels"):
            push_store(endpoint, paths[name], f"ours/{name}")
        for f in sorted(src.glob("img224.npy")) + sorted(src.glob("tokens.*.npy")):
            upload_file(client, f, f"npy/{f.name}")
        held["img224"] = int(np.load(src / "img224.npy", mmap_mode="r").shape[0])
        held["tokens"] = int(np.load(src / "tokens.shapes.npy", mmap_mode="r").shape[0])
    # The ceiling's objects: whole 8 MiB slices of the img224 source.
    raw = np.load(src / "img224.npy", mmap_mode="r").reshape(-1).view(np.uint8)
    size = RCFG["ceiling_object"]
    for k in range(RCFG["ceiling_objects"]):
        start = (k * size) % max(1, raw.size - size)
        client.put_object(Bucket=BUCKET, Key=f"ceiling/{k:04d}", Body=raw[start:start + size].tobytes())
    held["ceiling_objects"] = RCFG["ceiling_objects"]
    held["ceiling_object_bytes"] = size
    if server == "s3s-fs":
        img = Workload("img224", src)
        big = stores_dir(data_dir) / "big"
        shutil.rmtree(big, ignore_errors=True)
        shutil.rmtree(f"{big}-labels", ignore_errors=True)
        n_big = write_big_store(big, img, RCFG["big_bytes"])
        held["big_records"] = n_big
        held["big_bytes"] = allocated_bytes(big)
        push_store(endpoint, big, "ours/big")
        push_store(endpoint, Path(f"{big}-labels"), "ours/big-labels")
        shutil.rmtree(big)
        shutil.rmtree(f"{big}-labels")
    held["small_bytes"] = allocated_bytes(paths["img224"])
    if field_worker is not None:
        held["formats"] = field_worker.call("populate", server=server, endpoint=endpoint,
                                            records={w: held[w] for w in WORKLOADS if w in held})
    log(f"[remote] {server}: filled in {time.perf_counter() - t0:.1f} s")
    return held


# ----------------------------------------------------------------- contenders
#
# A gather contender: open(server, endpoint, workload, records) -> a gather
# function (index array -> records), in the worker of its venv.


class Missing(Exception):
    pass


def npy_data_offset(client: Any, key: str) -> int:
    """Where the data of the ``.npy`` object ``key`` starts (its header's
    length, read from the object's first bytes)."""
    head = client.get_object(Bucket=BUCKET, Key=key, Range="bytes=0-127")["Body"].read()
    major = head[6]
    hlen = int.from_bytes(head[8:10], "little") if major == 1 else int.from_bytes(head[8:12], "little")
    return (10 if major == 1 else 12) + hlen


class Ranges:
    """The byte range of each record in the ``.npy`` objects: what boto3,
    s3fs and obstore fetch."""

    def __init__(self, w: Workload, endpoint: str, workload: str) -> None:
        client = boto3_client(endpoint)
        self.w = w
        if w.kind == "dense":
            self.key = f"npy/{workload}.npy"
            base = npy_data_offset(client, self.key)
            size = w.median_record_bytes
            self.starts = base + np.arange(w.n, dtype=np.int64) * size
            self.ends = self.starts + size
        else:
            self.key = f"npy/{workload}.flat.npy"
            base = npy_data_offset(client, self.key)
            self.starts = base + w.offsets[:-1] * w.dtype.itemsize
            self.ends = base + w.offsets[1:] * w.dtype.itemsize

    def decode(self, values: list[Any], idx: np.ndarray) -> Any:
        """The records from their bytes: a stacked array (dense) or a list
        of arrays (ragged), as a reader's user would take them."""
        w = self.w
        if w.kind == "dense":
            out = np.empty((len(values), *w.shape), dtype=w.dtype)
            flat = out.reshape(len(values), -1).view(np.uint8)
            for k, v in enumerate(values):
                flat[k] = np.frombuffer(v, dtype=np.uint8)
            return out
        return [np.frombuffer(v, dtype=w.dtype).reshape(w.shapes[i]) for v, i in zip(values, idx.tolist())]


class Ours:
    name, label = "loaderx", "loaderx (this tree)"

    def __init__(self) -> None:
        from loaderx.zrecord import Dense, Ragged

        self.Dense, self.Ragged = Dense, Ragged
        self.handles: list[Any] = []

    def open(self, server: str, endpoint: str, w: Workload) -> Callable[[np.ndarray], Any]:
        cls = self.Dense if w.kind == "dense" else self.Ragged
        r = cls.open(f"s3://{BUCKET}/ours/{w.name}", storage_options=options(endpoint))
        self.handles.append(r)
        return r.__getitem__

    def close(self) -> None:
        for h in self.handles:
            h.close()
        self.handles.clear()


class Boto3Pool:
    name, label = "boto3", f"boto3 get_object(Range) x{BOTO3_THREADS} threads"

    def __init__(self) -> None:
        import boto3  # noqa: F401 - missing here means missing contender

        self.pools: list[ThreadPoolExecutor] = []

    def open(self, server: str, endpoint: str, w: Workload) -> Callable[[np.ndarray], Any]:
        ranges = Ranges(w, endpoint, w.name)
        client = boto3_client(endpoint)
        pool = ThreadPoolExecutor(BOTO3_THREADS)
        self.pools.append(pool)

        def one(i: int) -> bytes:
            rng = f"bytes={ranges.starts[i]}-{ranges.ends[i] - 1}"
            return client.get_object(Bucket=BUCKET, Key=ranges.key, Range=rng)["Body"].read()

        def gather(idx: np.ndarray) -> Any:
            return ranges.decode(list(pool.map(one, idx.tolist())), idx)

        return gather

    def close(self) -> None:
        for p in self.pools:
            p.shutdown()
        self.pools.clear()


class S3fsCatRanges:
    name, label = "s3fs", "s3fs cat_ranges"

    def __init__(self) -> None:
        import s3fs

        self.s3fs = s3fs

    def open(self, server: str, endpoint: str, w: Workload) -> Callable[[np.ndarray], Any]:
        ranges = Ranges(w, endpoint, w.name)
        fs = self.s3fs.S3FileSystem(key="test", secret="test", endpoint_url=endpoint,
                                    client_kwargs={"region_name": "us-east-1"}, skip_instance_cache=True)
        path = f"{BUCKET}/{ranges.key}"

        def gather(idx: np.ndarray) -> Any:
            got = fs.cat_ranges([path] * len(idx), ranges.starts[idx].tolist(), ranges.ends[idx].tolist())
            return ranges.decode(got, idx)

        return gather

    def close(self) -> None:
        pass


class ObstoreGetRanges:
    name, label = "obstore", "obstore get_ranges"

    def __init__(self) -> None:
        import obstore
        from obstore.store import S3Store

        self.obstore, self.S3Store = obstore, S3Store

    def store(self, endpoint: str) -> Any:
        return self.S3Store(BUCKET, endpoint=endpoint, access_key_id="test", secret_access_key="test",
                            region="us-east-1", client_options={"allow_http": True})

    def open(self, server: str, endpoint: str, w: Workload) -> Callable[[np.ndarray], Any]:
        ranges = Ranges(w, endpoint, w.name)
        store = self.store(endpoint)

        def gather(idx: np.ndarray) -> Any:
            got = self.obstore.get_ranges(store, ranges.key, starts=ranges.starts[idx].tolist(),
                                          ends=ranges.ends[idx].tolist())
            return ranges.decode([memoryview(b) for b in got], idx)

        return gather

    def close(self) -> None:
        pass


class LanceTake:
    name, label = "lance", "Lance take (S3)"

    def __init__(self) -> None:
        import lance
        import pyarrow

        self.lance, self.pa = lance, pyarrow

    def write(self, endpoint: str, w: Workload) -> None:
        def batches() -> Iterator[Any]:
            for s in range(0, w.n, 1024):
                yield from field.arrow_table(w, s, min(w.n, s + 1024)).to_batches()

        schema = field.arrow_table(w, 0, 1).schema
        reader = self.pa.RecordBatchReader.from_batches(schema, batches())
        self.lance.write_dataset(reader, f"s3://{BUCKET}/lance/{w.name}", storage_options=lance_options(endpoint))

    def open(self, server: str, endpoint: str, w: Workload) -> Callable[[np.ndarray], Any]:
        ds = self.lance.dataset(f"s3://{BUCKET}/lance/{w.name}", storage_options=lance_options(endpoint))
        cols = ["data"] if w.kind == "dense" else ["data", "shape"]
        return lambda idx: field.arrow_decode(ds.take(idx, columns=cols), w)

    def close(self) -> None:
        pass


GATHERERS: dict[str, list[type]] = {"ours": [Ours], "field": [Boto3Pool, S3fsCatRanges, ObstoreGetRanges, LanceTake]}
GATHER_LABELS = {c.name: c.label for cs in GATHERERS.values() for c in cs}


def versions(names: tuple[str, ...]) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    return out


class Worker:
    """A venv's contenders (``ours`` or ``field``), driven over the
    benchlib worker protocol."""

    def __init__(self, impl: str, data_dir: Path) -> None:
        self.impl = impl
        self.data_dir = data_dir
        self.contenders: dict[str, Any] = {}
        self.missing: dict[str, str] = {}
        for cls in GATHERERS[impl]:
            try:
                self.contenders[cls.name] = cls()
            except Exception as e:  # noqa: BLE001 - the contender is missing, with the reason
                self.missing[cls.name] = f"{type(e).__name__}: {e}"
        self.workloads = {name: Workload(name, data_dir / "source") for name in WORKLOADS}
        self.gathers: dict[tuple[str, str, int, str], Callable[[np.ndarray], Any]] = {}
        self.batches: dict[tuple[str, str], IndexBatches] = {}

    def hello(self) -> dict[str, Any]:
        if self.impl == "ours":
            import loaderx

            found = {"loaderx": loaderx.__version__, **versions(("numpy",))}
        else:
            found = versions(("numpy", "boto3", "s3fs", "fsspec", "obstore", "pylance", "mosaicml-streaming",
                              "litdata", "torch"))
        return {"impl": self.impl, "contenders": list(self.contenders), "missing": self.missing,
                "versions": found}

    def populate(self, server: str, endpoint: str, records: dict[str, int]) -> dict[str, Any]:
        """The bench venv's formats written to the server: Lance (each
        workload), MDS and LitData (img224 with labels, for the loaders)."""
        out: dict[str, Any] = {}
        if "lance" in self.contenders:
            for name, count in records.items():
                try:
                    self.contenders["lance"].write(endpoint, self.subset(name, count))
                    out[f"lance/{name}"] = "written"
                except Exception as e:  # noqa: BLE001 - reported in the tables, the others go on
                    out[f"lance/{name}"] = f"{type(e).__name__}: {e}"
        if server != "moto":
            for fmt, write in (("mds", write_mds), ("litdata", write_litdata)):
                try:
                    local = self.data_dir / f"{fmt}-img224"
                    write(local, self.workloads["img224"])
                    upload_tree(boto3_client(endpoint), local, f"{fmt}/img224")
                    out[fmt] = "written"
                except Exception as e:  # noqa: BLE001 - that loader is then missing, with the reason
                    out[fmt] = f"{type(e).__name__}: {e}"
        return out

    def subset(self, name: str, records: int) -> Workload:
        w = self.workloads[name]
        if records >= w.n:
            return w
        sub = Workload(name, self.data_dir / "source")
        sub.arr = w.arr[:records]
        sub.n = records
        return sub

    def open(self, contender: str, server: str, latency: int, endpoint: str, workload: str,
             records: int) -> dict[str, Any]:
        w = self.subset(workload, records)
        gather = self.contenders[contender].open(server, endpoint, w)
        key = (contender, server, latency, workload)
        self.gathers[key] = gather
        idx = self.batch(server, workload, records)[0]
        self.workloads[workload].check(idx, gather(idx), f"{contender} over {server} at {latency} ms")
        return {"checked": True}

    def batch(self, server: str, workload: str, records: int) -> IndexBatches:
        if (server, workload) not in self.batches:
            size = RCFG["moto_batch"] if server == "moto" else GATHER_BATCH
            self.batches[(server, workload)] = IndexBatches(records, WORKLOADS.index(workload), size)
        return self.batches[(server, workload)]

    def gather(self, contender: str, server: str, latency: int, workload: str, records: int, start: int,
               count: int) -> dict[str, Any]:
        """Times ``count`` batches of the sequence from ``start``."""
        g = self.gathers[(contender, server, latency, workload)]
        seq = self.batch(server, workload, records)
        times, nbytes = [], 0
        for k in range(start, start + count):
            idx = seq[k]
            t0 = time.perf_counter()
            got = g(idx)
            times.append(time.perf_counter() - t0)
            nbytes += got.nbytes if isinstance(got, np.ndarray) else sum(a.nbytes for a in got)
            del got
        return {"batch_s": times, "bytes": nbytes}

    def ceiling(self, endpoint: str, count: int) -> dict[str, Any]:
        """Whole-object GETs of the ``count`` ceiling objects,
        ``CEILING_CONCURRENCY`` at a time: seconds and bytes."""
        keys = [f"ceiling/{k:04d}" for k in range(count)]
        if "obstore" in self.contenders:
            ob = self.contenders["obstore"]
            store = ob.store(endpoint)
            sem_n = CEILING_CONCURRENCY

            async def run() -> int:
                sem = asyncio.Semaphore(sem_n)

                async def one(key: str) -> int:
                    async with sem:
                        res = await ob.obstore.get_async(store, key)
                        return len(await res.bytes_async())

                return sum(await asyncio.gather(*(one(k) for k in keys)))

            t0 = time.perf_counter()
            total = asyncio.run(run())
            return {"s": time.perf_counter() - t0, "bytes": total, "client": "obstore"}
        client = boto3_client(endpoint, CEILING_CONCURRENCY)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(CEILING_CONCURRENCY) as pool:
            total = sum(pool.map(lambda k: len(client.get_object(Bucket=BUCKET, Key=k)["Body"].read()), keys))
        return {"s": time.perf_counter() - t0, "bytes": total, "client": "boto3"}

    def close_all(self) -> dict[str, Any]:
        for c in self.contenders.values():
            c.close()
        self.gathers.clear()
        return {}


def upload_tree(client: Any, local: Path, prefix: str) -> None:
    for f in sorted(local.rglob("*")):
        if f.is_file():
            upload_file(client, f, f"{prefix}/{f.relative_to(local).as_posix()}")


def write_mds(local: Path, w: Workload) -> None:
    """The img224 records with their index as label, as MDS shards."""
    from streaming import MDSWriter

    shutil.rmtree(local, ignore_errors=True)
    cols = {"image": f"ndarray:uint8:{','.join(map(str, w.shape))}", "label": "int64"}
    with MDSWriter(out=str(local), columns=cols, compression=None, size_limit=SHARD_BYTES) as out:
        for i in range(w.n):
            out.write({"image": np.ascontiguousarray(w.arr[i]), "label": np.int64(i)})


def litdata_item(args: tuple[str, int]) -> dict[str, Any]:
    """One LitData item: the img224 record ``i`` of the source at ``path``."""
    path, i = args
    arr = np.load(path, mmap_mode="r")
    return {"image": np.ascontiguousarray(arr[i]), "label": i}


def write_litdata(local: Path, w: Workload) -> None:
    """The img224 records with their index as label, as LitData chunks."""
    from litdata import optimize

    shutil.rmtree(local, ignore_errors=True)
    src = str(w.arr.filename) if hasattr(w.arr, "filename") else ""
    optimize(fn=litdata_item, inputs=[(src, i) for i in range(w.n)], output_dir=str(local),
             chunk_bytes=SHARD_BYTES, num_workers=1, mode="overwrite")


# ----------------------------------------------------------------- loaders
#
# (name, venv, server reached or None for the local disk). Each runs in a
# fresh process of its venv (`loader-run` mode).

LOADERS: list[tuple[str, str]] = [("loaderx", "ours"), ("mds", "field"), ("litdata", "field")]
# What each loader imports, before its clock starts: the time to first
# batch is the loader's, not the interpreter's imports.
LOADER_IMPORTS = {"loaderx": ("loaderx.dataloader", "loaderx.zrecord"), "mds": ("torch", "streaming"),
                  "litdata": ("torch", "litdata")}


def loader_run(name: str, store: str, endpoint: str, data_dir: Path, cache: Path) -> int:
    """One loader in this process: a ready line (time to first batch, PSS
    before its first batch), then the timed batches."""
    out = reply_channel()
    src = data_dir / "source" / "img224.npy"
    images = np.load(src, mmap_mode="r")
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    try:
        for module in LOADER_IMPORTS[name]:
            importlib.import_module(module)
        t0 = time.perf_counter()
        nxt, close, epoch = make_loader(name, store, endpoint, data_dir, cache)
        own_pss = pss_rss_of(os.getpid())[0]
        img, lab = nxt()
        ttfb = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - the loader is missing, with the reason
        send(out, {"missing": f"{type(e).__name__}: {e}"})
        return 0
    img, lab = np.asarray(img), np.asarray(lab).reshape(-1).astype(np.int64)
    if img.shape != (RCFG["loader_batch"], *images.shape[1:]) or not np.array_equal(img, images[lab % len(images)]):
        send(out, {"failed": f"{name}: a batch {img.shape} whose images are not the records at its labels"})
        os._exit(1)
    del img, lab
    send(out, {"ready": True, "pss_before": own_pss})
    warm = RCFG["loader_warmup"]
    # MDS and LitData are timed within their first epoch (after it they
    # read their shard cache); ours, which keeps nothing, for at least
    # `loader_min_s` too, so that the memory sampling sees a fast run.
    caches = name != "loaderx"
    count = max(1, min(RCFG["loader_batches"], epoch - 1 - warm)) if caches else RCFG["loader_batches"]
    least = 0.0 if caches else RCFG["loader_min_s"]
    for _ in range(warm):
        nxt()
    times: list[float] = []
    t_all = time.perf_counter()
    while len(times) < count or (time.perf_counter() - t_all < least and len(times) < MAX_LOADER_BATCHES):
        t = time.perf_counter()
        nxt()
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - t_all
    send_last(out, {"total_s": total, "batch_s": times, "ttfb_s": ttfb, "disk_bytes": allocated_bytes(cache)}, close,
              name)


def make_loader(name: str, store: str, endpoint: str, data_dir: Path, cache: Path) \
        -> tuple[Callable[[], tuple[Any, Any]], Callable[[], None], int]:
    """(next batch as (images, labels), close, batches in an epoch) for
    loader ``name`` over ``store`` (img224 or big) at ``endpoint`` ("local":
    the local stores)."""
    batch = RCFG["loader_batch"]
    if name == "loaderx":
        from loaderx.dataloader import DataLoader
        from loaderx.zrecord import Dense

        if endpoint == "local":
            ip, lp = stores_dir(data_dir) / "img224", stores_dir(data_dir) / "labels"
            read_through(ip)
            streams = {"image": Dense.open(ip), "label": Dense.open(lp)}
        else:
            opts = options(endpoint)
            labels = "labels" if store == "img224" else f"{store}-labels"
            streams = {"image": Dense.open(f"s3://{BUCKET}/ours/{store}", storage_options=opts),
                       "label": Dense.open(f"s3://{BUCKET}/ours/{labels}", storage_options=opts)}
        n = len(streams["image"])
        dl = DataLoader(streams, num_workers=LOADER_WORKERS, batch_size=batch,
                        prefetch_size=LOADER_PREFETCH, lookahead=LOOKAHEAD)
        it = iter(dl)

        def nxt() -> tuple[Any, Any]:
            b = next(it)
            return b["image"], b["label"]

        return nxt, dl.close, n // batch
    # Where their S3 clients find the server: MDS's boto3 through
    # S3_ENDPOINT_URL, LitData's obstore downloads through the AWS_
    # variables (AWS_ALLOW_HTTP: the loopback server speaks plain HTTP).
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_REGION": "us-east-1", "S3_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL": endpoint,
           "AWS_ALLOW_HTTP": "true"}
    os.environ.update(env)
    import torch  # noqa: F401 - both loaders are torch loaders

    if name == "mds":
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory
        from torch.utils.data import DataLoader as TorchLoader

        clean_stale_shared_memory()
        ds = StreamingDataset(remote=f"s3://{BUCKET}/mds/img224", local=str(cache), shuffle=True, shuffle_seed=7,
                              batch_size=batch)
        dl = TorchLoader(ds, batch_size=batch, num_workers=LOADER_WORKERS, drop_last=True,
                         prefetch_factor=max(1, LOADER_PREFETCH // LOADER_WORKERS), persistent_workers=True)
        it = forever(dl)

        def nxt_mds() -> tuple[Any, Any]:
            b = next(it)
            return b["image"].numpy(), b["label"].numpy()

        return nxt_mds, (lambda: None), len(ds) // batch
    if name == "litdata":
        import litdata.streaming.downloader as lit_downloader
        from litdata import StreamingDataLoader, StreamingDataset as LitDataset

        # LitData downloads through obstore when it is installed (it is:
        # a gather contender here), with client options of its own that
        # refuse plain HTTP; without it, through boto3, which takes the
        # loopback endpoint. Its boto3 path then.
        lit_downloader._OBSTORE_AVAILABLE = False  # type: ignore[attr-defined]

        ds = LitDataset(f"s3://{BUCKET}/litdata/img224", cache_dir=str(cache), shuffle=True, seed=7,
                        storage_options={"endpoint_url": endpoint, "aws_access_key_id": "test",
                                         "aws_secret_access_key": "test", "region_name": "us-east-1"})
        dl = StreamingDataLoader(ds, batch_size=batch, num_workers=LOADER_WORKERS, drop_last=True,
                                 prefetch_factor=max(1, LOADER_PREFETCH // LOADER_WORKERS))
        it = forever(dl)

        def nxt_lit() -> tuple[Any, Any]:
            b = next(it)
            return np.asarray(b["image"]), np.asarray(b["label"])

        return nxt_lit, (lambda: None), len(ds) // batch
    raise SystemExit(f"unknown loader {name}")


def forever(loader: Any) -> Iterator[Any]:
    """A torch-style loader's batches, epoch after epoch."""
    while True:
        yield from loader


def measure_loader(name: str, store: str, endpoint: str, python: str, data_dir: Path, args: argparse.Namespace,
                   tag: str) -> dict[str, Any]:
    cache = data_dir / "cache" / tag.replace(" ", "-")
    cmd = [python, str(SCRIPT), *scale_args(args), "loader-run", name, store, endpoint, "--data-dir", str(data_dir),
           "--cache", str(cache)]
    try:
        return run_sampled(cmd, f"loader {tag}")
    except SystemExit as e:
        # A contender's wrong first batch is its row's result (its figures
        # would be of something else); ours failing stops the run.
        if name == "loaderx":
            raise
        return {"missing": f"failed: {e}"}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


# ----------------------------------------------------------------- driver


def scale_args(args: argparse.Namespace) -> list[str]:
    return ["--smoke"] if args.smoke else ["--scale", str(args.scale)]


def ceiling_section(servers: dict[str, dict[str, Any]], worker: Remote) -> list[dict[str, Any]]:
    """Every endpoint's ceiling, endpoints alternated round by round."""
    jobs = [(s, via) for s, info in servers.items() for via in info["endpoints"]]
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(RCFG["ceiling_rounds"]):
        for s, via in rotated(jobs, r):
            res = worker.call("ceiling", endpoint=servers[s]["endpoints"][via],
                              count=servers[s]["held"]["ceiling_objects"])
            samples.setdefault((s, via), []).append(res)
    rows = []
    for (s, via), xs in samples.items():
        rates = [x["bytes"] / x["s"] for x in xs]
        rows.append({"server": s, "via": via, "client": xs[0]["client"], "bytes_per_s": statistics.median(rates),
                     "rounds_bytes_per_s": rates, "objects": servers[s]["held"]["ceiling_objects"],
                     "object_bytes": servers[s]["held"]["ceiling_object_bytes"]})
    log("[remote] ceilings: " + ", ".join(f"{r['server']}/{r['via']} {r['bytes_per_s'] / MIB:.0f} MiB/s"
                                          for r in rows))
    return rows


def gather_section(servers: dict[str, dict[str, Any]], workers: dict[str, Remote],
                   smoke: bool) -> list[dict[str, Any]]:
    """Every (server, latency, workload, contender): its readers opened and
    checked, then rounds of ``batches`` batches, jobs rotated."""
    rows: list[dict[str, Any]] = []
    for s, info in servers.items():
        for latency in LATENCIES_MS:
            endpoint = info["endpoints"][f"{latency} ms"]
            for workload in WORKLOADS:
                records = info["held"].get(workload)
                if not records:
                    continue
                jobs = []
                for impl, w in workers.items():
                    for c in w.hello["contenders"]:
                        if c == "lance" and info["held"].get("formats", {}).get(f"lance/{workload}") != "written":
                            why = info["held"].get("formats", {}).get(f"lance/{workload}", "not written")
                            rows.append({"server": s, "latency_ms": latency, "workload": workload,
                                         "contender": c, "error": f"Lance dataset: {why}"})
                            continue
                        try:
                            w.call("open", contender=c, server=s, latency=latency, endpoint=endpoint,
                                   workload=workload, records=records)
                            jobs.append((impl, c))
                        except RuntimeError as e:
                            if smoke and impl == "ours":
                                raise SystemExit(f"remote.py: ours over {s}: {e}") from e
                            rows.append({"server": s, "latency_ms": latency, "workload": workload,
                                         "contender": c, "error": str(e)})
                            log(f"  open {c} {s} {latency} ms {workload} FAILED: {e}")
                rounds = RCFG["moto_rounds"] if s == "moto" else RCFG["rounds"]
                per = RCFG["moto_batches"] if s == "moto" else RCFG["batches"]
                samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
                for r in range(rounds):
                    for impl, c in rotated(jobs, r):
                        try:
                            res = workers[impl].call("gather", contender=c, server=s, latency=latency,
                                                     workload=workload, records=records, start=1 + r * per,
                                                     count=per)
                        except RuntimeError as e:
                            if impl == "ours":
                                raise SystemExit(f"remote.py: ours over {s}: {e}") from e
                            rows.append({"server": s, "latency_ms": latency, "workload": workload,
                                         "contender": c, "error": str(e)})
                            jobs.remove((impl, c))
                            continue
                        samples.setdefault((impl, c), []).append(res)
                for (impl, c), xs in samples.items():
                    per_batch = [sum(x["batch_s"]) / len(x["batch_s"]) for x in xs]
                    med = statistics.median(per_batch)
                    batch_bytes = xs[0]["bytes"] / len(xs[0]["batch_s"])
                    rows.append({"server": s, "latency_ms": latency, "workload": workload, "contender": c,
                                 "batch_s": med, "p95_s": p95([t for x in xs for t in x["batch_s"]]),
                                 "batch_bytes": batch_bytes, "bytes_per_s": batch_bytes / med,
                                 "rounds_batch_s": per_batch})
                log(f"  {s} {latency} ms {workload}: " + ", ".join(
                    f"{r['contender']} {r['bytes_per_s'] / MIB:.0f} MiB/s" for r in rows
                    if r["server"] == s and r["latency_ms"] == latency and r["workload"] == workload
                    and "bytes_per_s" in r))
    for w in workers.values():
        w.call("close_all")
    return rows


def loader_section(servers: dict[str, dict[str, Any]], pythons: dict[str, str | None],
                   missing: dict[str, str], data_dir: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every loader on the fast server at each latency, ours from the local
    disk, and ours over the big store: fresh processes, rotated."""
    fast = "s3s-fs" if "s3s-fs" in servers else next(iter(servers))
    runs: list[dict[str, Any]] = [{"name": "loaderx", "venv": "ours", "server": "local disk", "latency_ms": None,
                                   "store": "img224", "endpoint": "local"}]
    formats = servers[fast]["held"].get("formats", {})
    for latency in RCFG["loader_latencies"]:
        for name, venv in LOADERS:
            runs.append({"name": name, "venv": venv, "server": fast, "latency_ms": latency, "store": "img224",
                         "endpoint": servers[fast]["endpoints"][f"{latency} ms"]})
    if fast == "s3s-fs":
        runs.append({"name": "loaderx", "venv": "ours", "server": fast, "latency_ms": 25, "store": "big",
                     "endpoint": servers[fast]["endpoints"]["25 ms"]})
    rows: dict[int, dict[str, Any]] = {}
    for k, run in enumerate(runs):
        if pythons.get(run["venv"]) is None:
            rows[k] = {**run, "missing": missing.get(run["venv"], f"no {run['venv']} venv")}
        elif run["name"] in ("mds", "litdata") and formats.get(run["name"]) != "written":
            rows[k] = {**run, "missing": f"{run['name']} dataset: {formats.get(run['name'], 'not written')}"}
    samples: dict[int, list[dict[str, Any]]] = {}
    live = [k for k in range(len(runs)) if k not in rows]
    for r in range(RCFG["loader_rounds"]):
        for k in rotated(live, r):
            if k in rows:
                continue
            run = runs[k]
            tag = f"{run['name']} {run['store']} {run['server']} {run['latency_ms']}"
            res = measure_loader(run["name"], run["store"], run["endpoint"], str(pythons[run["venv"]]), data_dir,
                                 args, tag)
            if "missing" in res:
                if run["venv"] == "ours":
                    raise SystemExit(f"remote.py: loader {tag} failed: {res['missing']}")
                rows[k] = {**run, "missing": res["missing"]}
                log(f"  loader {tag} MISSING: {res['missing']}")
                continue
            samples.setdefault(k, []).append(res)
        log(f"  loader round {r + 1}/{RCFG['loader_rounds']} done")
    out = []
    for k, run in enumerate(runs):
        base = {key: v for key, v in run.items() if key not in ("endpoint", "venv")}
        if k in rows:
            out.append({**base, "missing": rows[k]["missing"]})
            continue
        xs = samples[k]
        per = [x["total_s"] / len(x["batch_s"]) for x in xs]
        out.append({**base, "batches_per_s": 1 / statistics.median(per),
                    "p95_s": p95([t for x in xs for t in x["batch_s"]]),
                    "ttfb_s": statistics.median(x["ttfb_s"] for x in xs),
                    "rounds_ttfb_s": [x["ttfb_s"] for x in xs],
                    "disk_bytes": max(x["disk_bytes"] for x in xs),
                    "peak_pss": statistics.median(x["peak_pss"] for x in xs),
                    "pss_before": statistics.median(x["pss_before"] for x in xs),
                    "procs": max(x["procs"] for x in xs), "batches": len(xs[0]["batch_s"]),
                    "rounds_batch_s": per})
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir: Path = args.data_dir
    manifests = field.prepare_sources(data_dir, WORKLOADS)
    paths = write_local_stores(data_dir, manifests)
    result: dict[str, Any] = {"kind": "remote", "workloads": manifests, "servers": {}, "missing": {},
                              "install_missing": {}, "contenders": {}}
    if args.field_env and Path(args.field_env).exists():
        for dist, info in json.loads(Path(args.field_env).read_text())["requirements"].items():
            if info.get("missing"):
                result["install_missing"][dist] = info["missing"]
    pythons: dict[str, str | None] = {"ours": sys.executable, "field": args.field_python}
    workers: dict[str, Remote] = {}
    for impl, py in pythons.items():
        why = args.field_missing if impl == "field" else None
        if why is None and (not py or not Path(py).exists()):
            why = f"no bench venv interpreter{f' at {py}' if py else ' given'}"
        if why is None:
            try:
                workers[impl] = Remote(impl, [str(py), str(SCRIPT), *scale_args(args), "worker", impl,
                                              "--data-dir", str(data_dir)])
            except RuntimeError as e:
                why = str(e)
        if why is not None:
            pythons[impl] = None
            result["missing"][impl] = why
            for cls in GATHERERS[impl]:
                result["missing"][cls.name] = f"the bench venv: {why}"
            for name, venv in LOADERS:
                if venv == impl:
                    result["missing"][name] = f"the bench venv: {why}"
            continue
        hello = workers[impl].hello
        result["contenders"][impl] = hello
        result["missing"].update(hello["missing"])
    for name, why in result["missing"].items():
        log(f"[remote] MISSING {name}: {why}")

    procs: list[Process] = []
    try:
        servers: dict[str, dict[str, Any]] = {}
        starters: dict[str, Callable[[], Process]] = {}
        if args.s3s_fs and Path(args.s3s_fs).exists():
            root = data_dir / "s3s-fs"
            shutil.rmtree(root, ignore_errors=True)
            starters["s3s-fs"] = lambda: start_s3s_fs(args.s3s_fs, root)
        else:
            result["servers"]["s3s-fs"] = {"missing": args.s3s_fs_missing or
                                           f"no s3s-fs binary{f' at {args.s3s_fs}' if args.s3s_fs else ' given'}"}
        starters["moto"] = start_moto
        for name, start in starters.items():
            try:
                server = start()
            except RuntimeError as e:
                result["servers"][name] = {"missing": str(e)}
                continue
            procs.append(server)
            endpoints = {"direct": server.endpoint}
            for latency in LATENCIES_MS:
                proxy = start_proxy(server.endpoint, latency)
                procs.append(proxy)
                endpoints[f"{latency} ms"] = proxy.endpoint
            held = populate(name, server.endpoint, data_dir, paths, workers.get("field"))
            servers[name] = {"endpoints": endpoints, "held": held}
            result["servers"][name] = {"held": held}
        for name, info in result["servers"].items():
            if "missing" in info:
                log(f"[remote] MISSING server {name}: {info['missing']}")
        if not servers:
            raise SystemExit("remote.py: no S3 server could be started")
        ceiling_worker = workers.get("field") or workers["ours"]
        result["ceiling"] = ceiling_section(servers, ceiling_worker)
        result["gathers"] = gather_section(servers, workers, args.smoke)
        for w in workers.values():
            w.quit()
        result["loaders"] = loader_section(servers, pythons, result["missing"], data_dir, args)
    finally:
        for w in workers.values():
            if w.proc.poll() is None:
                w.quit()
        for p in reversed(procs):
            p.stop()
        if not args.keep:
            shutil.rmtree(data_dir / "s3s-fs", ignore_errors=True)
            shutil.rmtree(data_dir / "cache", ignore_errors=True)
            for f in ("mds-img224", "litdata-img224"):
                shutil.rmtree(data_dir / f, ignore_errors=True)
    result["lookahead_bytes"] = LOOKAHEAD * RCFG["loader_batch"] * manifests["img224"]["median_record_bytes"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser, sub = bench_parser(__doc__)
    w = sub.add_parser("worker", help=argparse.SUPPRESS)
    w.add_argument("impl", choices=list(GATHERERS))
    w.add_argument("--data-dir", type=Path, required=True)
    lr = sub.add_parser("loader-run", help=argparse.SUPPRESS)
    lr.add_argument("name")
    lr.add_argument("store")
    lr.add_argument("endpoint")
    lr.add_argument("--data-dir", type=Path, required=True)
    lr.add_argument("--cache", type=Path, required=True)
    sub.add_parser("moto", help=argparse.SUPPRESS)
    px = sub.add_parser("proxy", help=argparse.SUPPRESS)
    px.add_argument("upstream")
    px.add_argument("delay_ms", type=int)
    parser.add_argument("--s3s-fs", default=None, help="the s3s-fs binary (missing: moto only)")
    parser.add_argument("--s3s-fs-missing", default=None, help="why there is no s3s-fs binary")
    parser.add_argument("--field-python", default=None, help="interpreter of the remote bench venv")
    parser.add_argument("--field-env", default=None, help="its field-env.json (install failures)")
    parser.add_argument("--field-missing", default=None, help="why there is no bench venv")
    parser.add_argument("--keep", action="store_true", help="keep the servers' directory and the caches")
    args = parser.parse_args(argv)
    configure(args.scale, args.smoke)
    if args.mode == "moto":
        return serve_moto()
    if args.mode == "proxy":
        return serve_proxy(args.upstream, args.delay_ms)
    if args.mode == "worker":
        return serve(lambda: Worker(args.impl, args.data_dir))
    if args.mode == "loader-run":
        return loader_run(args.name, args.store, args.endpoint, args.data_dir, args.cache)
    from tables import remote_report

    return run_bench(args, "bench-remote", run, {**CFG, **RCFG}, remote_report)


if __name__ == "__main__":
    sys.exit(main())
