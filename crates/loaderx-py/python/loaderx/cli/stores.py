"""Finding, opening and describing the stores a ``loaderx`` command is
pointed at."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .. import _native
from ..zrecord import Dense, Ragged

def is_url(path: Any) -> bool:
    """Whether `path` names a store by URL (``s3://...``)."""
    from ..containers.base import _is_url

    return isinstance(path, str) and _is_url(path)


def storage_options(pairs: list[str] | None) -> dict[str, str] | None:
    """``--storage-option KEY=VALUE`` arguments as a dict."""
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"loaderx: --storage-option takes KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def _is_collection(path: Any, options: dict[str, str] | None = None) -> bool:
    """Whether `path` (a directory or a URL) is a committed collection (it
    has a manifest)."""
    if is_url(path):
        from ..containers.base import _options

        return bool(_native.collection_at_url(path, _options(options)))
    return (Path(path) / "manifest.zc").is_file()


def describe_collection(path: Any, options: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``loaderx info`` reports for a collection: its records, parts
    and columns, from the manifest alone (no part is opened)."""
    from .. import collection

    col = collection.open(path, storage_options=options)
    try:
        columns = {}
        for name, schema in col.schema.items():
            entry: dict[str, Any] = {"kind": schema["kind"], "dtype": np.dtype(schema["dtype"]).name}
            if schema["kind"] == "dense":
                entry["shape"] = list(schema["shape"])
            else:
                entry["ndim"] = int(schema["ndim"])
            entry["codec"] = schema["codec"]
            columns[name] = entry
        parts = col.parts
        return {
            "path": str(path),
            "kind": "collection",
            "records": len(col),
            "parts": len(parts),
            "largest_part": max(n for _, n in parts),
            "columns": columns,
        }
    finally:
        col.close()


def _print_collection(info: dict[str, Any], out: TextIO) -> None:
    out.write(
        f"{info['path']}\n  collection        {info['records']:,} records in {info['parts']:,} "
        f"parts (largest {info['largest_part']:,})\n"
    )
    for name, c in info["columns"].items():
        what = f"{c['kind']} {c['dtype']} " + (
            str(tuple(c["shape"])) if c["kind"] == "dense" else f"ndim={c['ndim']}"
        )
        out.write(f"  column {name:<11}{what}, codec {c['codec']}\n")


def _stores(path: Any) -> list[Any]:
    """The store at `path` (a URL names one store), or every store under
    it (a converted output holds one per column and split), in name
    order."""
    if is_url(path):
        return [path]
    path = Path(path)
    if (path / "meta.zr").is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no loaderx store at {path}")
    found = sorted(p.parent for p in path.rglob("meta.zr") if p.is_file())
    if not found:
        raise FileNotFoundError(f"no loaderx store at or under {path}")
    return found


def _open(path: Any, writable: bool = False, options: dict[str, str] | None = None) -> Any:
    """A typed handle (``Dense``/``Ragged``) for a v2 typed store, else the
    native handle of a byte store."""
    pairs = list(options.items()) if options else None
    store = _native.Store.open_existing(str(path), writable, False, pairs)
    schema = store.schema()
    if schema is None:
        return store
    store.close()
    cls = Dense if schema["kind"] == "dense" else Ragged
    return cls.open(path, writable, storage_options=options)


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


def describe(path: Any, options: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``loaderx info`` reports for one store (by path or URL; a
    store by URL reports its chunk bytes as its bytes on disk)."""
    remote = is_url(path)
    undo = False if remote else (path / "meta.zr.undo").exists()
    files = [] if remote else [p for p in path.iterdir() if p.is_file()]
    on_disk = sum(p.stat().st_size for p in files)
    data_files = [p for p in files if p.name.endswith(".zr") and p.name[:-3].isdigit()]
    pairs = list(options.items()) if options else None
    native = _native.Store.open_existing(str(path), False, False, pairs)
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
    handle = _open(path, False, options)
    try:
        records, live, chunk, reclaimable = _stats(handle)
        logical = _logical_bytes(handle, records)
    finally:
        handle.close()
    if remote:
        on_disk = chunk
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


