"""``loaderx bench``: the ``DataLoader`` over a store, a directory of
stores or a collection, at each batch size and worker count asked for."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..zrecord import Dense, Ragged
from .stores import _is_collection, _open, _stores, storage_options


def _parse_ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"loaderx bench: {what} must be comma-separated integers, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise SystemExit(f"loaderx bench: {what} must be positive integers, got {text!r}")
    return values


def cmd_bench(args: argparse.Namespace) -> int:
    from ..compat05.dataloader import DataLoader

    batch_sizes = _parse_ints(args.batch_sizes, "--batch-sizes")
    workers = _parse_ints(args.workers, "--workers")
    options = storage_options(args.storage_option)
    readers: dict[str, Dense | Ragged] = {}
    col = None
    if _is_collection(args.path, options):
        # Every column of the collection, over its global indices.
        from .. import collection

        col = collection.open(args.path, storage_options=options)
        paths: list[Any] = []
        readers.update(col.loader_streams())
    else:
        paths = _stores(args.path)
    try:
        for p in paths:
            handle = _open(p, False, options)
            if not isinstance(handle, (Dense, Ragged)):
                handle.close()
                raise SystemExit(f"loaderx bench: {p} is not a typed (Dense/Ragged) store")
            if isinstance(p, str):
                readers[p.rstrip("/").rsplit("/", 1)[-1]] = handle
            else:
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
        if col is not None:
            col.close()
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0
