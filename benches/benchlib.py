"""What the benchmark scripts share: the host, the page cache, the worker
protocol and the memory sampling.

``compare.py``, ``typed.py``, ``field.py`` and ``images.py`` measure; this
module holds what each of them needs alike and nothing that decides a
figure's meaning:

* the host: ``machine`` (CPU, system, Python; saved with every run),
  ``target_dir`` and ``data_dir`` (where runs keep their stores), ``log``
  and ``save_json``;
* files and the page cache: ``allocated_bytes`` (what a store takes on
  disk), ``drop_page_cache`` (before a write), ``read_through`` (before a
  warm gather), ``fsync_tree``;
* the worker protocol: a contender runs in a process of its own venv
  (``serve`` there, ``Remote`` in the driver), one JSON line per command
  and per reply; ``rotated`` alternates the jobs round by round;
* memory: ``pss_rss_of`` and ``run_sampled``, the peak PSS and RSS of a
  loader's process tree.

Standard library only (NumPy is imported by the scripts that need it), so
the table generator and every contender's venv can import it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, TextIO

MIB = 1 << 20
REPO = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------- host

_STARTED = time.perf_counter()


def log(msg: str) -> None:
    """A progress line on stderr, stamped with the seconds since start."""
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {msg}", file=sys.stderr, flush=True)


def target_dir() -> Path:
    """Cargo's target directory (``CARGO_TARGET_DIR``, relative to the
    repository when relative), where the runs keep their data."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target if target.is_absolute() else REPO / target


def data_dir(given: Path | None, name: str) -> Path:
    """``given``, or ``<target>/NAME``; made, and absolute."""
    path = (given if given is not None else target_dir() / name).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_1min() -> float:
    """The 1-minute load average (NaN where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def cpu_model() -> str:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for raw in f:
                if raw.startswith("model name"):
                    return raw.split(":", 1)[1].strip()
    except OSError:
        pass
    return model


def memory_bytes() -> int:
    """Physical memory (0 where ``/proc/meminfo`` is missing)."""
    try:
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1]) * 1024
    except OSError:
        return 0


def machine(**extra: Any) -> dict[str, Any]:
    """The host of a run: the CPUs this process may use, their model, the
    system and Python, then ``extra`` (versions, the load at the start)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "nproc": usable,
        "cpu_model": cpu_model(),
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        **extra,
    }


def save_json(result: dict[str, Any], path: str | Path) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


def finish(result: dict[str, Any], started: float, render: Callable[[dict[str, Any]], str],
           json_out: str | None, quiet: bool = False) -> int:
    """The end of a run: its duration into ``result``, its tables
    (``render``) printed, the JSON saved to ``json_out``. ``json_out`` "-"
    writes the JSON to stdout and the tables to stderr (none if ``quiet``)."""
    result["seconds"] = round(time.perf_counter() - started, 1)
    text = render(result) + f"\n\n(total {result['seconds']:.0f} s)\n"
    if json_out == "-":
        if not quiet:
            sys.stderr.write(text)
        sys.stdout.write(json.dumps(result, indent=1) + "\n")
        return 0
    sys.stdout.write(text)
    if json_out:
        save_json(result, json_out)
    return 0


def bench_parser(doc: str) -> tuple[argparse.ArgumentParser, Any]:
    """The command line every scale-driven bench script shares (``--smoke``,
    ``--scale``, ``--data-dir``, ``--json``) and the slot for the modes it
    runs itself in as a child (workers, servers). Described by the first
    paragraph of ``doc``, the script's docstring."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny data, one round (figures mean nothing)")
    parser.add_argument("--scale", type=float, default=1.0, help="record counts x F (1.0: publication run)")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", dest="json_out", default=None)
    return parser, parser.add_subparsers(dest="mode")


def run_bench(args: argparse.Namespace, name: str, run: Callable[[argparse.Namespace], dict[str, Any]],
              config: dict[str, Any], render: Callable[[dict[str, Any]], str], **host: Any) -> int:
    """One run of a bench script: its data under ``<target>/NAME`` (or
    ``NAME-smoke``) unless ``--data-dir`` says otherwise, ``run(args)``'s
    result under the host (``machine`` plus ``host``, the load at start and
    end) and ``config``, then ``finish``."""
    args.data_dir = data_dir(args.data_dir, f"{name}-smoke" if args.smoke else name)
    started = time.perf_counter()
    info = machine(memory_bytes=memory_bytes(), **host, load_1min_start=load_1min())
    result = run(args)
    info["load_1min_end"] = load_1min()
    result = {"machine": info, "config": config, "smoke": args.smoke, **result}
    return finish(result, started, render, args.json_out)


# ----------------------------------------------------------------- files

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def files_under(path: Path) -> list[Path]:
    """``path`` itself when it is a file, else every file below it."""
    if path.is_file():
        return [path]
    return [Path(root) / name for root, _dirs, names in os.walk(path) for name in names]


def allocated_bytes(path: Path) -> int:
    """Blocks allocated to ``path`` (a file or a tree), ``st_blocks * 512``,
    so a sparse file counts for what it holds."""
    return sum(f.stat().st_blocks * 512 for f in files_under(path))


def drop_page_cache() -> bool:
    """``sync; echo 3 > /proc/sys/vm/drop_caches``: write back dirty pages and
    drop the clean ones, so a write starts from the same state whatever ran
    before it. False when the process may not (not root, /proc read-only)."""
    os.sync()
    try:
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


def read_through(path: Path) -> None:
    """Reads ``path`` (a file or a tree) into the page cache, into one small
    buffer: large reads into fresh ``bytes`` leave freed heap in the process
    (glibc raises its mmap threshold after the first is freed), which a
    loader process would then carry in its measured PSS."""
    buf = memoryview(bytearray(MIB))
    for file in files_under(path):
        with open(file, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def fsync_tree(path: Path) -> None:
    for file in files_under(path):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ----------------------------------------------------------------- workers
#
# A contender runs in a worker process of its own venv (every package under
# test is called `loaderx`). The driver sends one JSON object per line,
# {"op": NAME, **arguments}; the worker calls its method NAME and answers
# one line, {"ok": value} or {"error": "Type: message"}. The first line a
# worker writes answers its start: {"ok": worker.hello()}. {"op": "quit"}
# closes its readers and ends it.


def reply_channel() -> TextIO:
    """This process's stdout, kept for the JSON lines; from here on
    anything else it prints (its own or a library's) goes to stderr."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def send(out: TextIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def send_last(out: TextIO, message: dict[str, Any], close: Callable[[], None], what: str) -> None:
    """The end of a measuring child: ``message`` sent, then ``close`` (whose
    failure is only logged: the figures are in), then an exit that skips the
    interpreter's teardown (a loader's threads must not hold the exit up)."""
    send(out, message)
    try:
        close()
    except Exception as e:  # noqa: BLE001 - measured already; the process ends here
        log(f"{what}: close failed: {e}")
    sys.stderr.flush()
    os._exit(0)


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def serve(make_worker: Callable[[], Any]) -> int:
    """The worker side: builds the worker (its failure is the start's
    error reply), then answers commands until ``quit`` or end of input."""
    out = reply_channel()
    try:
        worker = make_worker()
        hello = worker.hello()
    except Exception as e:  # noqa: BLE001 - the whole contender is missing, with the reason
        send(out, {"error": error_text(e)})
        return 1
    send(out, {"ok": hello})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        if op == "quit":
            worker.close_all()
            break
        try:
            reply = {"ok": getattr(worker, op)(**cmd)}
        except Exception as e:  # noqa: BLE001 - reported to the driver, which decides
            reply = {"error": error_text(e)}
        send(out, reply)
    return 0


class Remote:
    """The driver side: a running worker process (``cmd`` ends in the
    script's worker mode). A failed command raises ``RuntimeError``."""

    def __init__(self, impl: str, cmd: list[str]) -> None:
        self.impl = impl
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self.reply("start")

    def reply(self, what: str) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.impl} worker exited during {what} (code {self.proc.wait()})")
        msg = json.loads(line)
        if "error" in msg:
            raise RuntimeError(f"{what}: {msg['error']}")
        return msg["ok"]

    def call(self, op: str, **kw: Any) -> Any:
        assert self.proc.stdin is not None
        t0 = time.perf_counter()
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        res = self.reply(op)
        if time.perf_counter() - t0 > 2.0:
            log(f"  slow: {self.impl} {op} {kw} took {time.perf_counter() - t0:.1f} s")
        return res

    def quit(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
        self.proc.wait()


def rotated(items: list[Any], r: int) -> list[Any]:
    """``items`` rotated by ``r``: round ``r``'s order of the jobs, so that
    no job always runs first (or right after the same neighbour)."""
    k = r % len(items) if items else 0
    return items[k:] + items[:k]


# ----------------------------------------------------------------- memory


def pss_rss_of(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of process ``pid`` in bytes (0, 0 once it has ended)."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss


def tree_of(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class TreeSampler(threading.Thread):
    """Samples the summed PSS and RSS of a process tree until stopped."""

    def __init__(self, root: int, period: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.root, self.period = root, period
        self.peak_pss = self.peak_rss = self.peak_procs = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pids = tree_of(self.root)
            pss = rss = 0
            for p in pids:
                a, b = pss_rss_of(p)
                pss += a
                rss += b
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_procs = max(self.peak_procs, len(pids))
            self.stop.wait(self.period)


def python_shared_memory() -> set[Path]:
    """Python's shared-memory blocks there are now: the regular files named
    ``psm_*`` in /dev/shm (none where the platform keeps them elsewhere)."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return set()
    paths = (Path("/dev/shm", name) for name in names if name.startswith("psm_"))
    return {path for path in paths if path.is_file()}


def run_sampled(cmd: list[str], what: str) -> dict[str, Any]:
    """Runs a loader process that prints one JSON line when it is ready
    (with ``pss_before``, or ``missing`` and why it cannot run) and one with
    its results, sampling the PSS and RSS of its process tree in between."""
    # In a process group of its own, killed whole once the loader process
    # has ended: a PyTorch spawn loader's workers can outlive it (their
    # shutdown aborts in some rounds) and would hold memory and CPU through
    # the rounds after.
    shm_before = python_shared_memory()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline() or '{"missing": "the loader process exited at start"}')
        if "missing" in first:
            proc.wait()
            return {"missing": first["missing"]}
        if "failed" in first:
            # A loader that runs but returns wrong batches stops the
            # benchmark: its figures would be of something else.
            raise SystemExit(f"{what}: its first batch failed the check: {first['failed']}")
        sampler = TreeSampler(proc.pid)
        sampler.start()
        line = proc.stdout.readline()
        sampler.stop.set()
        sampler.join()
        code = proc.wait()
    finally:
        if hasattr(os, "killpg"):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.wait()
        # Grain's workers leave their shared-memory batches behind when
        # killed (hundreds of MiB per run): RAM that would stay taken for
        # every run after it, and past the benchmark. Only Python's
        # shared-memory blocks (``psm_`` names, which Grain's batches use)
        # that are regular files: nothing else in /dev/shm is the loader's
        # to remove, and a block that cannot go is reported.
        for path in sorted(python_shared_memory() - shm_before):
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                log(f"{what}: could not remove the shared memory {path} it left: {e}")
    if not line:
        raise SystemExit(f"{what} exited with {code} before reporting")
    return {**json.loads(line), "peak_pss": sampler.peak_pss, "peak_rss": sampler.peak_rss,
            "procs": sampler.peak_procs, "pss_before": first["pss_before"]}
