"""The ``loaderx`` command: ``convert``, ``info``, ``verify``, ``compact``
and ``bench`` (see ``loaderx --help`` and docs/CLI.md).

Results go to standard output (one JSON document with ``--json``);
progress and errors to standard error. Exit status: 0 done, 1 a damaged
store (``verify``) or a failed operation, 2 bad usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from . import _native
from .zrecord import CODECS, Dense, Ragged

# --- progress ------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Reports ``(done, total)`` of a long operation on `stream`: a bar
    redrawn in place with rate and ETA when `stream` is a terminal, else
    one plain line every `interval` seconds (and one at the end)."""

    def __init__(
        self,
        label: str,
        stream: TextIO,
        *,
        enabled: bool = True,
        tty: bool | None = None,
        interval: float | None = None,
        unit: str = "records",
    ) -> None:
        self.label = label
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty() if tty is None else tty
        self.interval = interval if interval is not None else (0.1 if self.tty else 5.0)
        self.unit = unit
        self.start = time.monotonic()
        self.last = -float("inf")
        self.done = 0
        self.total: int | None = None
        self.drawn = False

    def __call__(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total
        now = time.monotonic()
        if self.enabled and now - self.last >= self.interval:
            self.last = now
            self._show(now)

    def _rate(self, now: float) -> float:
        elapsed = now - self.start
        return self.done / elapsed if elapsed > 0 else 0.0

    def _show(self, now: float) -> None:
        rate = self._rate(now)
        total = self.total
        if total:
            frac = min(1.0, self.done / total)
            eta = _duration((total - self.done) / rate) if rate > 0 else "?"
            counts = f"{self.done:,}/{total:,} {self.unit}"
        else:
            frac, eta = None, "?"
            counts = f"{self.done:,} {self.unit}"
        if self.tty:
            width = 30
            if frac is None:
                bar = ""
            else:
                filled = int(frac * width)
                bar = f"[{'#' * filled}{'.' * (width - filled)}] {frac * 100:5.1f}% "
            line = f"\r{self.label}: {bar}{counts} {rate:,.0f}/s ETA {eta}\x1b[K"
            self.stream.write(line)
            self.drawn = True
        else:
            pct = "" if frac is None else f" ({frac * 100:.1f}%)"
            self.stream.write(
                f"{self.label}: {counts}{pct}, {rate:,.0f} {self.unit}/s, ETA {eta}\n"
            )
        self.stream.flush()

    def finish(self) -> float:
        """Ends the display (a last line); returns the seconds taken."""
        now = time.monotonic()
        elapsed = now - self.start
        if self.enabled:
            if self.tty and self.drawn:
                self.stream.write("\r\x1b[K")
            rate = self._rate(now)
            self.stream.write(
                f"{self.label}: {self.done:,} {self.unit} in {elapsed:.2f}s "
                f"({rate:,.0f} {self.unit}/s)\n"
            )
            self.stream.flush()
        return elapsed


# --- finding and describing stores ---------------------------------------------------------


def _stores(path: Path) -> list[Path]:
    """The store at `path`, or every store under it (a converted output
    holds one per column and split), in name order."""
    if (path / "meta.zr").is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no loaderx store at {path}")
    found = sorted(p.parent for p in path.rglob("meta.zr") if p.is_file())
    if not found:
        raise FileNotFoundError(f"no loaderx store at or under {path}")
    return found


def _open(path: Path, writable: bool = False) -> Any:
    """A typed handle (``Dense``/``Ragged``) for a v2 typed store, else the
    native handle of a byte store."""
    store = _native.Store.open_existing(str(path), writable)
    schema = store.schema()
    if schema is None:
        return store
    store.close()
    cls = Dense if schema["kind"] == "dense" else Ragged
    return cls.open(path, writable)


def _logical_bytes(handle: Any, records: int) -> int | None:
    """The records' uncompressed size, where the API can tell it."""
    step = 1 << 20
    if isinstance(handle, Dense):
        return records * handle.dtype.itemsize * int(np.prod(handle.item_shape, dtype=np.int64))
    if isinstance(handle, Ragged):
        total = 0
        for start in range(0, records, step):
            shapes = handle.shapes(np.arange(start, min(records, start + step)))
            total += int(shapes.prod(axis=1).sum()) * handle.dtype.itemsize
        return total
    try:
        out = np.zeros(min(records, step), dtype=np.uint32)
        total = 0
        for start in range(0, records, step):
            idx = np.arange(start, min(records, start + step), dtype=np.uint64)
            handle.lengths(idx, out[: idx.size])
            total += int(out[: idx.size].sum(dtype=np.int64))
        return total
    except Exception:  # noqa: BLE001 - not every store tells
        return None


def _stats(handle: Any) -> tuple[int, int, int, int]:
    stats = handle.stats()
    if isinstance(stats, dict):
        return (stats["records"], stats["live_bytes"], stats["chunk_bytes"], stats["reclaimable"])
    return tuple(int(v) for v in stats)  # type: ignore[return-value]


def describe(path: Path) -> dict[str, Any]:
    """What ``loaderx info`` reports for one store."""
    undo = (path / "meta.zr.undo").exists()
    files = [p for p in path.iterdir() if p.is_file()]
    on_disk = sum(p.stat().st_size for p in files)
    data_files = [p for p in files if p.name.endswith(".zr") and p.name[:-3].isdigit()]
    native = _native.Store.open_existing(str(path), False)
    try:
        version = int(native.format_version())
        schema = native.schema()
    finally:
        native.close()
    info: dict[str, Any] = {"path": str(path), "format": version}
    if schema is None:
        info["kind"] = "bytes"
    else:
        info["kind"] = schema["kind"]
        info["dtype"] = np.dtype(schema["dtype"]).name
        if schema["kind"] == "dense":
            info["shape"] = list(schema["shape"])
        else:
            info["ndim"] = int(schema["ndim"])
        info["codec"] = schema["codec"]
    handle = _open(path)
    try:
        records, live, chunk, reclaimable = _stats(handle)
        logical = _logical_bytes(handle, records)
    finally:
        handle.close()
    info.update(
        {
            "records": records,
            "bytes_on_disk": on_disk,
            "stored_bytes": live,
            "logical_bytes": logical,
            "ratio": (logical / live) if logical and live else None,
            "data_files": len(data_files),
            "chunk_bytes": chunk,
            "reclaimable_bytes": reclaimable,
            "pending_undo_log": undo,
        }
    )
    return info


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _print_info(info: dict[str, Any], out: TextIO) -> None:
    if info["kind"] == "dense":
        what = f"dense {info['dtype']} {tuple(info['shape'])}"
    elif info["kind"] == "ragged":
        what = f"ragged {info['dtype']} ndim={info['ndim']}"
    else:
        what = "byte records (format v1 or untyped)"
    ratio = f"{info['ratio']:.2f}x" if info["ratio"] else "?"
    lines = [
        f"{info['path']}",
        f"  format            v{info['format']}",
        f"  kind              {what}",
        f"  codec             {info.get('codec', 'per record')}",
        f"  records           {info['records']:,}",
        f"  bytes on disk     {_size(info['bytes_on_disk'])} ({info['bytes_on_disk']:,})",
        f"  stored / logical  {_size(info['stored_bytes'])} / {_size(info['logical_bytes'])} "
        f"(ratio {ratio})",
        f"  data files        {info['data_files']}",
        f"  reclaimable       {_size(info['reclaimable_bytes'])} (loaderx compact frees it)",
        f"  pending undo log  {'yes (a delete was interrupted)' if info['pending_undo_log'] else 'no'}",
    ]
    out.write("\n".join(lines) + "\n")


# --- commands ------------------------------------------------------------------------------


def _progress(args: argparse.Namespace, label: str, unit: str = "records") -> Progress:
    return Progress(
        label,
        sys.stderr,
        enabled=not (args.quiet or args.json),
        interval=args.progress_interval,
        unit=unit,
    )


def cmd_convert(args: argparse.Namespace) -> int:
    from . import convert

    size = None
    if args.size is not None:
        try:
            height, width = (int(v) for v in args.size.lower().split("x"))
        except ValueError:
            raise SystemExit(f"loaderx convert: --size must be HEIGHTxWIDTH, got {args.size!r}")
        size = (height, width)
    progress = _progress(args, "convert")
    counts = convert.convert_path(
        args.src,
        args.dst,
        codec=args.codec,
        workers=args.workers,
        size=size,
        progress=progress,
        keep_encoded=args.keep_encoded,
    )
    elapsed = progress.finish()
    records = max(counts.values()) if counts else 0
    if args.json:
        result = {"output": str(args.dst), "stores": counts, "seconds": elapsed}
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    elif not args.quiet:
        for name, n in counts.items():
            sys.stdout.write(f"{os.path.join(str(args.dst), name) if name else args.dst}: {n:,}\n")
        sys.stdout.write(f"converted {records:,} records into {args.dst}\n")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    infos = [describe(p) for p in _stores(Path(args.path))]
    if args.json:
        json.dump(infos if len(infos) > 1 else infos[0], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for info in infos:
            _print_info(info, sys.stdout)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    report: list[dict[str, Any]] = []
    bad = 0
    for path in _stores(Path(args.path)):
        handle = _open(path)
        try:
            damaged = [(int(i), str(why)) for i, why in handle.damaged()]
            records = len(handle)
        finally:
            handle.close()
        bad += len(damaged)
        report.append({"path": str(path), "records": records, "damaged": damaged})
    if args.json:
        json.dump(report if len(report) > 1 else report[0], sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif not args.quiet or bad:
        for entry in report:
            if entry["damaged"]:
                sys.stdout.write(
                    f"{entry['path']}: {len(entry['damaged'])} of {entry['records']:,} records "
                    f"damaged\n"
                )
                for index, why in entry["damaged"]:
                    sys.stdout.write(f"  record {index}: {why}\n")
            elif not args.quiet:
                sys.stdout.write(f"{entry['path']}: ok ({entry['records']:,} records)\n")
    return 1 if bad else 0


def cmd_compact(args: argparse.Namespace) -> int:
    results = []
    for path in _stores(Path(args.path)):
        before = describe(path)
        handle = _open(path, writable=True)
        try:
            handle.compact()
        finally:
            handle.close()
        after = describe(path)
        freed = before["bytes_on_disk"] - after["bytes_on_disk"]
        results.append(
            {
                "path": str(path),
                "bytes_before": before["bytes_on_disk"],
                "bytes_after": after["bytes_on_disk"],
                "freed": freed,
            }
        )
    if args.json:
        json.dump(results if len(results) > 1 else results[0], sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif not args.quiet:
        for r in results:
            sys.stdout.write(
                f"{r['path']}: {_size(r['bytes_before'])} -> {_size(r['bytes_after'])} "
                f"(freed {_size(r['freed'])})\n"
            )
    return 0


def _parse_ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"loaderx bench: {what} must be comma-separated integers, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise SystemExit(f"loaderx bench: {what} must be positive integers, got {text!r}")
    return values


def _seconds(text: str) -> float:
    """``--seconds``: a positive, finite number (with nan no run ever ends:
    no time is ``>=`` it)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def cmd_bench(args: argparse.Namespace) -> int:
    from .compat05.dataloader import DataLoader

    batch_sizes = _parse_ints(args.batch_sizes, "--batch-sizes")
    workers = _parse_ints(args.workers, "--workers")
    paths = _stores(Path(args.path))
    readers: dict[str, Dense | Ragged] = {}
    try:
        for p in paths:
            handle = _open(p)
            if not isinstance(handle, (Dense, Ragged)):
                handle.close()
                raise SystemExit(f"loaderx bench: {p} is not a typed (Dense/Ragged) store")
            readers[str(p.relative_to(args.path)) if p != Path(args.path) else p.name] = handle
        lengths = {len(r) for r in readers.values()}
        if len(lengths) != 1 or 0 in lengths:
            raise SystemExit(
                f"loaderx bench: the stores under {args.path} differ in length or are empty: "
                f"{ {k: len(r) for k, r in readers.items()} }; bench one store"
            )
        rows = []
        for w in workers:
            for b in batch_sizes:
                loader = DataLoader(readers, transform_workers=w, batch_size=b, mode=1, seed=0)
                try:
                    batches = records = 0
                    start = time.monotonic()
                    while True:
                        next(loader)
                        batches += 1
                        records += b
                        elapsed = time.monotonic() - start
                        if elapsed >= args.seconds and batches >= 2:
                            break
                finally:
                    loader.close()
                row = {
                    "workers": w,
                    "batch_size": b,
                    "batches": batches,
                    "records_per_s": records / elapsed,
                    "ms_per_batch": 1000 * elapsed / batches,
                }
                rows.append(row)
                if not args.json and not args.quiet:
                    sys.stdout.write(
                        f"workers {w:>2}  batch {b:>6}  {row['records_per_s']:>12,.0f} records/s  "
                        f"{row['ms_per_batch']:>8.2f} ms/batch\n"
                    )
                    sys.stdout.flush()
    finally:
        for r in readers.values():
            r.close()
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


# --- the parser ----------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", "-q", action="store_true", help="no progress, no summary")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="loaderx", description="Convert data into loaderx stores and look after them."
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from .convert import SOURCES

    shown = [source.shown for source in SOURCES]

    p = sub.add_parser(
        "convert",
        help=f"convert {', '.join(shown[:-1])} or {shown[-1]}",
    )
    p.add_argument("src", type=Path, help="the source file or directory")
    p.add_argument("dst", type=Path, help="the output (must not exist)")
    p.add_argument(
        "--codec",
        default="zstd",
        choices=sorted(CODECS),
        help="(default zstd; zstd_dict trains a dictionary per store on its first batch)",
    )
    p.add_argument(
        "--workers", type=int, default=4, help="decode threads for image folders (default 4)"
    )
    p.add_argument(
        "--size", default=None, help="image folders: decode to HEIGHTxWIDTH RGB (else raw bytes)"
    )
    p.add_argument(
        "--keep-encoded",
        action="store_true",
        help="image folders: keep the JPEG/PNG files as they are in an image store "
        "(decoded on gather; choose a size when reading)",
    )
    p.add_argument(
        "--progress-interval",
        type=float,
        default=None,
        help="seconds between progress updates (default 0.1 on a terminal, 5 otherwise)",
    )
    _common(p)
    p.set_defaults(run=cmd_convert)

    p = sub.add_parser("info", help="what a store (or every store under a directory) holds")
    p.add_argument("path", type=Path)
    _common(p)
    p.set_defaults(run=cmd_info)

    p = sub.add_parser("verify", help="check every record; exit 1 and list the damaged ones")
    p.add_argument("path", type=Path)
    _common(p)
    p.set_defaults(run=cmd_verify)

    p = sub.add_parser("compact", help="reclaim the space of deleted records")
    p.add_argument("path", type=Path)
    _common(p)
    p.set_defaults(run=cmd_compact)

    p = sub.add_parser("bench", help="gather throughput by batch size and worker count")
    p.add_argument("path", type=Path)
    p.add_argument("--batch-sizes", default="32,256,1024", help="(default 32,256,1024)")
    p.add_argument("--workers", default="1,2,4", help="transform workers (default 1,2,4)")
    p.add_argument("--seconds", type=_seconds, default=1.0, help="per configuration (default 1)")
    _common(p)
    p.set_defaults(run=cmd_bench)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loaderx`` console script."""
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except BrokenPipeError:
        # The reader of our output went away (`loaderx info x | head`).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("\nloaderx: interrupted; nothing half-written was left behind\n")
        return 130
    except (OSError, ValueError, RuntimeError, TypeError, ImportError) as exc:
        sys.stderr.write(f"loaderx {args.command}: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
