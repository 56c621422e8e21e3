"""The ``loaderx`` command: ``convert``, ``info``, ``verify``, ``push``, ``compact``
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..zrecord import CODECS
from .bench import cmd_bench
from .progress import Progress
from .stores import (
    _is_collection,
    _open,
    _print_collection,
    _print_info,
    _size,
    _stores,
    describe,
    describe_collection,
    storage_options,
)

# --- commands ------------------------------------------------------------------------------


def _progress(args: argparse.Namespace, label: str, unit: str = "records") -> Progress:
    return Progress(
        label,
        sys.stderr,
        enabled=not (args.quiet or args.json),
        interval=args.progress_interval,
        unit=unit,
    )


def _url_options(args: argparse.Namespace) -> dict[str, Any]:
    """``storage_options`` and ``staging_dir`` of a convert to a URL (none
    for a local output, which refuses them)."""
    out: dict[str, Any] = {}
    if args.storage_option:
        out["storage_options"] = storage_options(args.storage_option)
    if args.staging_dir is not None:
        out["staging_dir"] = args.staging_dir
    return out


def cmd_convert(args: argparse.Namespace) -> int:
    from .. import convert

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
        parts=args.parts,
        **_url_options(args),
    )
    elapsed = progress.finish()
    # Stores in one directory hold the same records (the columns of one
    # split or part); directories hold different ones.
    by_dir: dict[str, int] = {}
    for name, n in counts.items():
        folder = os.path.dirname(name)
        by_dir[folder] = max(n, by_dir.get(folder, 0))
    records = sum(by_dir.values())
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
    options = storage_options(args.storage_option)
    if _is_collection(args.path, options):
        info = describe_collection(args.path, options)
        if args.json:
            json.dump(info, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            _print_collection(info, sys.stdout)
        return 0
    infos = [describe(p, options) for p in _stores(args.path)]
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
    options = storage_options(args.storage_option)
    if _is_collection(args.path, options):
        # Every column of every part; damaged records by global index.
        from .. import collection

        root = args.path
        col = collection.open(root, storage_options=options)
        handles = [(f"{root}[{name!r}]", col[name]) for name in col.columns]
    else:
        col = None
        handles = [(str(path), _open(path, False, options)) for path in _stores(args.path)]
    try:
        for shown, handle in handles:
            damaged = [(int(i), str(why)) for i, why in handle.damaged()]
            bad += len(damaged)
            report.append({"path": shown, "records": len(handle), "damaged": damaged})
    finally:
        for _shown, handle in handles:
            handle.close()
        if col is not None:
            col.close()
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


def cmd_push(args: argparse.Namespace) -> int:
    from ..remote import push

    objects = push(args.local, args.url, storage_options(args.storage_option))
    if args.json:
        json.dump({"url": args.url, "objects": objects}, sys.stdout)
        sys.stdout.write("\n")
    elif not args.quiet:
        sys.stdout.write(f"pushed {len(objects)} objects to {args.url}\n")
    return 0


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


def _interval(text: str) -> float:
    """``--progress-interval``: a finite number of seconds, 0 or more (0:
    every update is shown)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text!r}")
    return value


# --- the parser ----------------------------------------------------------------------------


def _storage_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage-option",
        "-o",
        action="append",
        metavar="KEY=VALUE",
        help="for a store URL: an object_store or loaderx key (docs/REMOTE.md); repeatable",
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", "-q", action="store_true", help="no progress, no summary")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="loaderx", description="Convert data into loaderx stores and look after them."
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from ..convert import SOURCES

    shown = [source.shown for source in SOURCES]

    p = sub.add_parser(
        "convert",
        help=f"convert {', '.join(shown[:-1])} or {shown[-1]}",
    )
    p.add_argument("src", type=Path, help="the source file or directory")
    # A string, not a Path: a Path collapses the `//` of a URL.
    p.add_argument(
        "dst",
        help="the output (must not exist); a URL (s3://bucket/prefix, ...) with nothing under "
        "it: converted locally, then published",
    )
    p.add_argument(
        "--parts",
        type=int,
        default=1,
        help="write a collection in this many processes (saved Hugging Face datasets, "
        ".npy, Parquet, image folders)",
    )
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
        type=_interval,
        default=None,
        help="seconds between progress updates (default 0.1 on a terminal, 5 otherwise)",
    )
    p.add_argument(
        "--staging-dir",
        default=None,
        help="for a URL output: where it is converted before it is published (default "
        "LOADERX_STAGING_DIR, else the system's temporary directory)",
    )
    _storage_option(p)
    _common(p)
    p.set_defaults(run=cmd_convert)

    p = sub.add_parser("info", help="what a store (or every store under a directory) holds")
    p.add_argument(
        "path", help="a store directory, a directory of stores, a collection, or a URL of either"
    )
    _storage_option(p)
    _common(p)
    p.set_defaults(run=cmd_info)

    p = sub.add_parser("verify", help="check every record; exit 1 and list the damaged ones")
    p.add_argument(
        "path", help="a store directory, a directory of stores, a collection, or a URL of either"
    )
    _storage_option(p)
    _common(p)
    p.set_defaults(run=cmd_verify)

    p = sub.add_parser("compact", help="reclaim the space of deleted records")
    p.add_argument("path", type=Path)
    _common(p)
    p.set_defaults(run=cmd_compact)

    p = sub.add_parser(
        "push", help="upload a closed v2 store (meta.zr last) or a collection (manifest last)"
    )
    p.add_argument(
        "local",
        type=Path,
        help="the store or collection directory, or a directory of them (a converted output)",
    )
    p.add_argument("url", help="where to put it: s3://bucket/prefix, gs://, az://, file://")
    _storage_option(p)
    _common(p)
    p.set_defaults(run=cmd_push)

    p = sub.add_parser("bench", help="gather throughput by batch size and worker count")
    p.add_argument(
        "path", help="a store directory, a directory of stores, a collection, or a URL of either"
    )
    _storage_option(p)
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
