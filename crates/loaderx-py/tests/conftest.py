"""Shared helpers for the loaderx test suite.

These tests run against the installed package (``maturin develop`` or
``pip install ./crates/loaderx-py``): the real native extension, never a stub.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from loaderx import DataLoader, Zrecord

REPO_ROOT = Path(__file__).resolve().parents[3]


def _load_fixture_script() -> ModuleType:
    """``make_fixtures.py`` of the 0.5.4 fixtures, whose sparse-file helper
    this suite shares (the script needs nothing beyond the standard library)."""
    path = REPO_ROOT / "crates/loaderx-store/tests/fixtures/loaderx-054/make_fixtures.py"
    spec = importlib.util.spec_from_file_location("loaderx_054_make_fixtures", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: ``data_extents(f)``: the [start, end) ranges of an open file that may hold
#: data; the rest are holes.
data_extents = _load_fixture_script().data_extents


def target_dir() -> Path:
    """Cargo's target directory, where scratch state that outlives a run goes."""
    env = os.environ.get("CARGO_TARGET_DIR")
    if env:
        path = Path(env)
        return path if path.is_absolute() else REPO_ROOT / path
    return REPO_ROOT / "target"


def fetch_sdist(requirement: str, filename: str, sha256: str) -> Path:
    """The source distribution `filename` of `requirement` (``name==version``)
    from PyPI, checked against its published SHA-256 and cached under the
    target directory; a test that needs it fails (never skips) saying why
    when it cannot be had."""
    import hashlib

    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    cache = target_dir() / f"{requirement.replace('==', '-').replace('.', '')}-sdist"
    sdist = cache / filename
    if sdist.is_file() and digest(sdist) == sha256:
        return sdist
    cache.mkdir(parents=True, exist_ok=True)
    sdist.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--disable-pip-version-check", "-d", str(cache), requirement],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if proc.returncode != 0 or not sdist.is_file():
        pytest.fail(
            f"could not download the {requirement} sdist from PyPI into {cache} (is PyPI "
            f"reachable?); pip exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}"
        )
    found = digest(sdist)
    if found != sha256:
        sdist.unlink()
        pytest.fail(f"{sdist} has SHA-256 {found}, PyPI published {sha256}")
    return sdist


def samples(n: int = 64) -> np.ndarray:
    """Small float32 images (3, 8, 8) with a compressible pattern."""
    return (np.arange(n * 3 * 8 * 8, dtype=np.float32).reshape(n, 3, 8, 8) % 17)


def tagged(n: int, width: int = 64, dtype: type = np.int32) -> np.ndarray:
    """Row `i` is filled with `i`, so each sample names itself."""
    return np.repeat(np.arange(n, dtype=dtype)[:, None], width, axis=1)


def tags(ds) -> list[int]:  # type: ignore[no-untyped-def]
    """Every live sample reduced to its identifying first element, sorted."""
    return sorted(int(row.flat[0]) for row in ds[np.arange(len(ds))])


def allocated_bytes(directory: Path | str, pattern: str = "*.zr") -> int:
    """Bytes actually allocated on disk (chunk files are sparse)."""
    return sum(p.stat().st_blocks * 512 for p in Path(directory).glob(pattern))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# --- the on-disk layout, damage and hardening helpers -------------------------------

HEADER = struct.Struct("<4sHHII")  # magic, version, tail_chunk, tail_offset, length
ENTRY = struct.Struct("<IIIHBB")  # offset, phys, logic, chunk_id, codec, reserved
OFFSET, PHYS, LOGIC, CHUNK, CODEC = range(5)

#: How long close() may take before the test calls it a hang. The promise is
#: "within a second"; the margin absorbs a loaded 2-core machine.
CLOSE_BOUND = 5.0

needs_proc = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="counts threads and fds through /proc"
)


def read_header(store: Path) -> list[Any]:
    with open(store / "meta.zr", "rb") as f:
        return list(HEADER.unpack(f.read(HEADER.size)))


def write_header(store: Path, fields: list[Any]) -> None:
    with open(store / "meta.zr", "r+b") as f:
        f.write(HEADER.pack(*fields))


def read_entry(store: Path, i: int) -> list[int]:
    with open(store / "meta.zr", "rb") as f:
        f.seek(HEADER.size + ENTRY.size * i)
        return list(ENTRY.unpack(f.read(ENTRY.size)))


def write_entry(store: Path, i: int, fields: list[int]) -> None:
    with open(store / "meta.zr", "r+b") as f:
        f.seek(HEADER.size + ENTRY.size * i)
        f.write(ENTRY.pack(*fields))


def ramps(n: int, item: int) -> np.ndarray:
    """Record i: bytes that depend on i and on the position (compressible)."""
    return ((np.arange(n)[:, None] * 7 + np.arange(item)[None, :] // 16) % 251).astype(np.uint8)


def make_store(path: Path, codec: str = "raw", n: int = 8, item: int = 100) -> np.ndarray:
    data = ramps(n, item)
    with Zrecord(path, codec=codec) as zr:
        zr.append(data, n, item)
        zr.sync()
    return data


BLOCK = 1 << 16


def image(directory: Path) -> dict[str, Any]:
    """Every file's size and contents, holes read as zeros: meta.zr is a
    268 MB sparse file, so only its data extents are read, in 64 KiB blocks,
    and all-zero blocks are left out."""
    out: dict[str, Any] = {}
    for p in sorted(directory.iterdir()):
        if p.is_dir():
            out[p.name] = "<dir>"
            continue
        with open(p, "rb") as f:
            blocks: dict[int, bytes] = {}
            for start, end in data_extents(f):
                at = start - start % BLOCK
                while at < end:
                    if at not in blocks:
                        f.seek(at)
                        block = f.read(BLOCK)
                        if block.count(0) != len(block):
                            blocks[at] = block
                    at += BLOCK
            out[p.name] = (os.fstat(f.fileno()).st_size, blocks)
    return out


def assert_same_image(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert sorted(before) == sorted(after), "files appeared or vanished"
    for name in before:
        if before[name] == after[name]:
            continue
        (size0, blocks0), (size1, blocks1) = before[name], after[name]
        assert size0 == size1, f"{name} changed size: {size0} -> {size1}"
        changed = sorted(k for k in set(blocks0) | set(blocks1) if blocks0.get(k) != blocks1.get(k))
        pytest.fail(f"{name} changed in the 64 KiB blocks at {changed[:5]}")


CHILD_PRELUDE = """
import json, os, sys
import numpy as np
from loaderx import DataLoader, Dataset, Zrecord, ZrecordError

def attempt(fn):
    try:
        value = fn()
    except Exception as exc:
        return {"ok": False, "type": type(exc).__name__, "code": getattr(exc, "code", None),
                "msg": str(exc)}
    return {"ok": True, "value": value}

def report(**results):
    print(json.dumps(results), flush=True)
"""


def run_child(code: str, *args: str) -> dict[str, Any]:
    """Runs `code` in a fresh interpreter and returns what it reported; fails
    (naming the signal) when the child crashes."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode < 0:
        import signal

        pytest.fail(f"the child died of {signal.Signals(-proc.returncode).name}:\n{proc.stderr}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def close_within(loader: DataLoader, seconds: float = CLOSE_BOUND) -> None:
    """close() on a helper thread: a hang fails the test instead of stalling it."""
    closer = threading.Thread(target=loader.close, name="test-closer")
    closer.start()
    closer.join(seconds)
    assert not closer.is_alive(), f"DataLoader.close() did not return within {seconds} s"


def eventually(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Table:
    """Duck-typed dataset (``__len__`` + ``__getitems__``): the Python engine.
    Optionally slow, or failing for batches that contain `fail_at`."""

    def __init__(self, values: np.ndarray, delay: float = 0.0, fail_at: int | None = None) -> None:
        self.values = values
        self.delay = delay
        self.fail_at = fail_at

    def __len__(self) -> int:
        return len(self.values)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        idxs = np.asarray(idxs, dtype=np.int64)
        if self.delay:
            time.sleep(self.delay)
        if self.fail_at is not None and self.fail_at in idxs:
            raise LookupError(f"table cannot serve index {self.fail_at}")
        return self.values[idxs]


# --- threads that call into a loader -------------------------------------------------


class Consumer(threading.Thread):
    """Calls ``next(loader)`` until ``StopIteration``, counting batches. Any
    other exception is kept in ``error`` for the test to assert on (pytest
    would only warn about it)."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(name="test-consumer", daemon=True)
        self.loader = loader
        self.batches = 0
        self.stopped = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                next(self.loader)
                self.batches += 1
        except StopIteration:
            self.stopped = True
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def asleep(thread: threading.Thread) -> bool:
    """Whether the OS thread behind `thread` is sleeping (Linux /proc): on a
    lock, a condition or the GIL, not running."""
    stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "S"


def wait_until_blocked_in_next(
    consumer: Consumer, batches: int | None, seconds: float = 60.0
) -> None:
    """Returns once `consumer` sits asleep in ``next()``, looking while this
    thread sleeps (so it is not merely waiting for the GIL).

    With `batches`, the test holds every worker after that many batches: the
    consumer must have exactly that many and stay asleep, with no batch more,
    through 5 looks 20 ms apart; next() can then only be waiting. With None
    (the native engine, whose workers run no Python code the test could
    hold), it must have had a batch and be asleep at one look: it loops on
    next() and does nothing else, so that is where it sleeps.
    """
    deadline = time.monotonic() + seconds
    streak = 0
    while streak < (1 if batches is None else 5):
        assert time.monotonic() < deadline, (
            f"the consumer never blocked in next(): {consumer.batches} batches, "
            f"error {consumer.error!r}"
        )
        assert consumer.is_alive() and consumer.error is None, consumer.error
        time.sleep(0.02)
        got = consumer.batches
        fed = got >= 1 if batches is None else got == batches
        streak = streak + 1 if fed and asleep(consumer) and consumer.batches == got else 0
    if batches is not None:
        assert consumer.batches == batches, f"{consumer.batches} batches, {batches} expected"


class Gate:
    """Lets the first `free` calls through and holds later ones until
    ``open()``; counts the calls it holds. (Never holds one longer than a
    minute, so a failing test cannot hang.)"""

    def __init__(self, free: int) -> None:
        self.free = free
        self.calls = 0
        self.held = 0
        self.lock = threading.Lock()
        self.opened = threading.Event()

    def __call__(self) -> None:
        with self.lock:
            self.calls += 1
            hold = self.calls > self.free
            self.held += hold
        if hold:
            self.opened.wait(60)

    def open(self) -> None:
        self.opened.set()


def check_in_forked_child(body: Callable[[], None]) -> None:
    """Runs `body` in a child forked from this process (no pytest machinery
    there: its outcome is the child's exit status) and asserts it passed."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            body()
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child's checks failed"


# ------------------------------------------------------- S3 on loopback


@pytest.fixture(scope="module")
def s3(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A boto3 client of an S3 server on loopback (moto in server mode),
    one per test module, with the module's ``BUCKET`` made; the client's
    ``endpoint`` is the server's URL."""
    from remote_servers import start_s3

    server, client = start_s3(request.module.BUCKET)
    yield client
    server.stop()


@pytest.fixture()
def proxy(s3: Any) -> Iterator[Any]:
    """A fault-injecting proxy (``remote_servers.FaultProxy``) in front of
    the module's S3 server."""
    from remote_servers import FaultProxy

    p = FaultProxy(s3.endpoint.removeprefix("http://"))
    yield p
    p.close()


def png_file(i: int) -> bytes:
    """A small PNG file: a (3 + i % 3, 4, 3) image of value `i`."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((3 + i % 3, 4, 3), i, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def blobs(n: int) -> list[bytes]:
    """`n` binary values that are not all images: random bytes of 0 to 299
    bytes, an empty one (value 5), and one PNG file (value 7)."""
    rng = np.random.default_rng(3)
    out = [rng.bytes(int(k)) for k in rng.integers(0, 300, n)]
    out[5] = b""
    out[7] = png_file(7)
    return out


def check_blobs(root: str, n: int) -> None:
    """The collection at `root` holds `blobs(n)` as ``uint8`` records of
    its column ``blob``, at the positions its column ``id`` names, each once."""
    from loaderx import collection

    col = collection.open(root)
    assert col.schema["blob"]["kind"] == "ragged"
    ids = col["id"][:]
    assert sorted(ids.tolist()) == list(range(n))
    want = blobs(n)
    for g, i in enumerate(ids.tolist()):
        got = col["blob"][g]
        assert got.dtype == np.uint8 and got.tobytes() == want[i], i
    col.close()


class KilledWhenRead:
    """A column of `n` records that kills the process reading them (an
    engine's worker, in the middle of writing a part: the part's other
    columns are already written under its temporary name)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        os._exit(1)
