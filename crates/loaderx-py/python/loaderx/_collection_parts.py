"""Writing a collection: :func:`write_part` and :func:`commit`, with the
names and locations they share with the reader (re-exported by
:mod:`loaderx.collection`, where users find them)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np

from . import _native
from .containers.dense import Dense
from .containers.ragged import Ragged

#: The manifest's file name inside a collection.
MANIFEST = "manifest.zc"

#: The codec :func:`write_part` uses unless told otherwise.
DEFAULT_CODEC = "zstd"

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")

Column = Union[np.ndarray, Sequence[Any]]


def part_name(part: int | str) -> str:
    """The directory name of part `part`: ``part-%05d`` for an int, a given
    name as it is (1-64 ASCII letters, digits, ``_``, ``-``, ``.``, not
    starting with ``.``)."""
    if isinstance(part, (int, np.integer)) and not isinstance(part, bool):
        if part < 0:
            raise ValueError(f"part must be >= 0, got {part}")
        return f"part-{int(part):05d}"
    if isinstance(part, str):
        _check_name("part", part)
        return part
    raise TypeError(f"part must be an int or a str, got {type(part).__name__}")


def _check_name(what: str, name: str) -> None:
    if not _NAME.fullmatch(name) or name == MANIFEST:
        raise ValueError(
            f"{what} name {name!r} must be 1-64 ASCII letters, digits, '_', '-' or '.', "
            f"not start with '.', and not be {MANIFEST!r}"
        )


def _location(root: Any, storage_options: Any) -> tuple[str, bool, list[tuple[str, str]] | None]:
    """`root` as a string, whether it is a URL, and `storage_options` as
    the engine takes them (a local path takes none)."""
    from .containers.base import _is_url, _options

    if isinstance(root, str):
        path = root
    else:
        path = os.fspath(root)
        if not isinstance(path, str):
            path = os.fsdecode(path)
    url = _is_url(path)
    options = _options(storage_options)
    if options and not url:
        raise ValueError(
            f"{path} is a local path; storage_options apply only to collections at a URL"
        )
    return path, url, options


def _codec_of(codec: str | Mapping[str, str], column: str) -> str:
    if isinstance(codec, Mapping):
        return str(codec.get(column, DEFAULT_CODEC))
    return str(codec)


def _write_column(
    path: str, name: str, values: Column, codec: str, rows: int, chosen: bool = False
) -> None:
    """Writes one column store at `path`: an ndarray as a Dense store of
    its ``shape[1:]``, a sequence of arrays as a Ragged store of their
    rank, a sequence of ``bytes`` as encoded images (codec ``jpeg`` or
    ``png``, or every value a JPEG or PNG file unless the column's codec
    was `chosen` by name) or ``uint8`` Ragged records."""
    if codec == "zstd_dict":
        raise ValueError(
            f"column {name!r}: codec 'zstd_dict' trains a dictionary per store; a collection's "
            f"parts cannot share one (use 'zstd')"
        )
    if isinstance(values, np.ndarray):
        if values.ndim == 0:
            raise ValueError(f"column {name!r}: a 0-d array is not a column of records")
        if values.dtype.kind in "OUS":
            raise TypeError(f"column {name!r}: dtype {values.dtype} is not stored (strings)")
        dense = Dense.create(path, values.dtype, values.shape[1:], codec=codec, data_shards=1)
        try:
            if len(values):
                dense.append(np.ascontiguousarray(values))
        finally:
            dense.close()
        return
    items = list(values)
    if items and all(isinstance(v, (bytes, bytearray, memoryview)) for v in items):
        kinds = {_image_kind(bytes(v[:8])) for v in items}
        if None not in kinds and not chosen and codec not in ("jpeg", "png"):
            # Encoded images, kept as they are (JPEG and PNG may mix).
            codec = "jpeg" if "jpeg" in kinds else "png"
        if codec in ("jpeg", "png"):
            images = Ragged.create(path, np.uint8, 3, codec=codec, data_shards=1)
            try:
                images.append_encoded(items)
            finally:
                images.close()
            return
        arrays = [np.frombuffer(bytes(v), dtype=np.uint8) for v in items]
    else:
        arrays = [np.asarray(v) for v in items]
    if not arrays:
        raise ValueError(f"column {name!r}: an empty list gives no dtype; pass an empty ndarray")
    first = arrays[0]
    if first.dtype.kind in "OUS":
        raise TypeError(f"column {name!r}: dtype {first.dtype} is not stored (strings)")
    for i, a in enumerate(arrays):
        if a.dtype != first.dtype or a.ndim != first.ndim or a.ndim == 0:
            raise ValueError(
                f"column {name!r}: record {i} is {a.dtype} of rank {a.ndim}; record 0 is "
                f"{first.dtype} of rank {first.ndim} (ragged records share dtype and rank >= 1)"
            )
    flat = np.concatenate([a.reshape(-1) for a in arrays]) if rows else first.reshape(-1)[:0]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([a.size for a in arrays], out=offsets[1:])
    shapes = np.array([a.shape for a in arrays], dtype=np.int64).reshape(len(arrays), first.ndim)
    ragged = Ragged.create(path, first.dtype, first.ndim, codec=codec, data_shards=1)
    try:
        ragged.append_flat(np.ascontiguousarray(flat), offsets, shapes)
    finally:
        ragged.close()


def _image_kind(head: bytes) -> str | None:
    """``"jpeg"`` or ``"png"`` by a file's first bytes, else ``None``."""
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    return None


def _fsync_dir(path: str) -> None:
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_part(
    root: str | os.PathLike[str],
    part: int | str,
    columns: Mapping[str, Column],
    codec: str | Mapping[str, str] = DEFAULT_CODEC,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Write part `part` of the collection at `root` and return its name.

    `columns` maps each column name to its records: a NumPy array (a
    :class:`~loaderx.Dense` column of its ``shape[1:]``; ``(n,)`` gives
    scalars), or a list of arrays of one dtype and rank (a
    :class:`~loaderx.Ragged` column), or a list of ``bytes``: JPEG or PNG
    files (told by their first bytes, or any bytes under codec ``"jpeg"``/
    ``"png"``) make an image column keeping the files as they are, other
    bytes ``uint8`` Ragged records; a codec given for the column by name
    (``{"blob": "zstd"}``) other than ``"jpeg"``/``"png"`` keeps its values
    bytes, whatever they hold (parts written apart then agree, where one
    part of only image files would otherwise be an image column). Every
    column holds the same number of records. `codec` is one codec for all
    columns or ``{column: codec}`` (default ``"zstd"``).

    The part is written under a temporary name (starting with ``.``, which
    :func:`commit` ignores) and renamed into place when complete; a part of
    the same name is replaced, so a retried task never duplicates records.

    `root` may be a URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
    ``file://``; `storage_options` as for ``Dense.open``): the part is
    written in a local temporary directory (``TMPDIR``), then uploaded in
    place of whatever the URL held under its name, its stores first and
    its completion mark (``<part>/.complete``) last; a part without the
    mark is unfinished and :func:`commit` ignores it.
    """
    base, url, options = _location(root, storage_options)
    name = part_name(part)
    if not isinstance(columns, Mapping) or not columns:
        raise ValueError("columns must be a non-empty dict of column name -> records")
    rows: int | None = None
    for col, values in columns.items():
        if not isinstance(col, str):
            raise TypeError(f"column names must be str, got {col!r}")
        _check_name("column", col)
        n = len(values)
        if rows is None:
            rows = n
        elif n != rows:
            first = next(iter(columns))
            raise ValueError(f"column {col!r} has {n} records; column {first!r} has {rows}")
    if not url:
        _write_local_part(base, name, columns, codec, rows or 0)
        return name
    # Object storage: staged whole in a local directory, then uploaded
    # (stores first, the part's completion mark last).
    staging = tempfile.mkdtemp(prefix=f"loaderx-{name}-")
    try:
        _write_local_part(staging, name, columns, codec, rows or 0)
        _native.collection_upload_part(os.path.join(staging, name), base, name, options)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return name


def _write_local_part(
    base: str,
    name: str,
    columns: Mapping[str, Column],
    codec: str | Mapping[str, str],
    rows: int,
) -> None:
    """Writes part `name` under the local directory `base`: under a
    temporary name, then renamed into place (replacing a part of that name)."""
    os.makedirs(base, exist_ok=True)
    tmp = os.path.join(base, f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(tmp)
        for col, values in columns.items():
            chosen = isinstance(codec, Mapping) and col in codec
            _write_column(os.path.join(tmp, col), col, values, _codec_of(codec, col), rows, chosen)
        _fsync_dir(tmp)
        final = os.path.join(base, name)
        while True:
            try:
                os.rename(tmp, final)
                break
            except OSError:
                if not os.path.exists(final):
                    raise
                # A finished part of that name (an earlier attempt of this
                # task): move it aside, then take its place.
                old = os.path.join(base, f".{name}.old-{uuid.uuid4().hex[:8]}")
                try:
                    os.rename(final, old)
                except FileNotFoundError:
                    continue
                shutil.rmtree(old, ignore_errors=True)
        _fsync_dir(base)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def commit(
    root: str | os.PathLike[str],
    parts: Sequence[int | str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Publish the collection at `root`; returns the entries it ignored.

    With `parts` (what an engine reports as written, in order; ints or
    names), exactly those parts are published in that order; without, every
    finished part directory, in name order. The parts must have the same
    columns with the same schemas, and every column of a part the same
    number of records; otherwise ``ZrecordError`` (code -8) names the part
    and column and nothing is written. The manifest is written under a
    temporary name, synced and renamed over ``manifest.zc``: readers see
    the previous commit or this one. Ignored are unfinished writes (names
    starting with ``.``) and finished parts not in `parts`.
    """
    base, _url, options = _location(root, storage_options)
    names = None if parts is None else [part_name(p) for p in parts]
    _parts, _records, ignored = _native.collection_commit(base, names, options)
    return list(ignored)
