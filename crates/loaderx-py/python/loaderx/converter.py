"""Getting data in: converters from common sources to typed containers.

``from loaderx.converter import convert, huggingface``

* :func:`convert` writes a Hugging Face ``Dataset`` (or ``DatasetDict``) as
  one typed store per numeric column (one directory per split).
* :func:`convert_npy`, :func:`convert_npz`, :func:`convert_parquet`,
  :func:`convert_arrow`, :func:`convert_image_folder` and
  :func:`convert_webdataset` convert files; :func:`convert_path` picks one
  by what `src` is (the ``loaderx convert`` command).

Every converter writes under a temporary sibling of `output`
(``.<name>.tmp-<pid>-<random>``) and renames it into place only once every
store is closed and all agree on the record count; on any error (or
Ctrl-C) the temporary directory is removed and `output` never appears.
Memory stays bounded: sources are read in batches of about
``batch_bytes`` (memory-mapped where the format allows it).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
import shutil
import tarfile
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Union, cast

import numpy as np

from . import _native
from .errors import ConversionError
from .zrecord import CODECS, MAX_NDIM, Dense, Ragged, ZrecordError, stores_dtype

#: Default bound on the source bytes read per batch.
BATCH_BYTES = 16 << 20

PathLike = Union[str, "os.PathLike[str]"]

#: ``progress(done, total)`` callback: records written so far and the total
#: when known (else ``None``).
Progress = Callable[[int, Union[int, None]], None]




def _storable(dtype: Any, where: str) -> np.dtype:
    try:
        found = np.dtype(dtype)
    except TypeError:
        raise ConversionError(
            f"{where}: values of type {dtype} cannot be stored losslessly; map the column to "
            f"numbers first"
        ) from None
    if not stores_dtype(found):
        raise ConversionError(
            f"{where}: dtype {found} ({found.str}) cannot be stored losslessly (a store holds "
            f"numbers, fixed-width bytes or text and datetime64/timedelta64 with a unit); map "
            f"the column to numbers first"
        )
    return found


# What NumPy, zipfile and pyarrow raise for a file they cannot read
# (pyarrow's errors subclass ValueError, OSError or KeyError).
_READ_ERRORS = (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


@contextlib.contextmanager
def _reading(path: Any, what: str) -> Iterator[None]:
    """Turns an error reading `path` as `what` (a truncated or damaged file)
    into a :class:`ConversionError` naming the file; errors of this module
    pass as they are."""
    try:
        yield
    except ConversionError:
        raise
    except _READ_ERRORS as exc:
        raise ConversionError(
            f"{path}: cannot read it as {what}: {type(exc).__name__}: {exc}"
        ) from exc


def _read_each(items: Iterable[Any], path: Any, what: str) -> Iterator[Any]:
    """The items of `items`, with an error producing one turned into a
    :class:`ConversionError` naming `path` (see `_reading`); errors of the
    code consuming them are left alone."""
    it = iter(items)
    while True:
        with _reading(path, what):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


def _check_columns(names: list[str], path: Any) -> None:
    """One store per column: refuses a file with no columns, or a column
    name twice, naming the file."""
    if not names:
        raise ConversionError(f"{path} has no columns: there is nothing to convert")
    twice = {name: n for name, n in Counter(names).items() if n > 1}
    if twice:
        name, n = next(iter(twice.items()))
        raise ConversionError(
            f"{path}: column {name!r} appears {n} times; each column becomes a store named "
            f"after it, so column names must be unique (repeated: {sorted(twice)})"
        )


# --- zstd_dict: a dictionary per store, trained on its first batch ---------------------------

#: Records a ``zstd_dict`` store's dictionary is trained on, at most (from
#: the store's first batch).
DICT_TRAIN_RECORDS = 20_000


class _DictTrained:
    """A writer for ``codec="zstd_dict"``: the store is created on the first
    append, with a dictionary trained on that batch's records. A store whose
    first batch is too small to train on (``train_dict`` needs at least 7
    records), or that gets no records at all, is written with plain
    ``zstd`` instead: a dictionary learned from so few records would not pay
    for its own bytes."""

    def __init__(self, create: Callable[[str, Union[bytes, None]], Union[Dense, Ragged]]) -> None:
        self._create = create
        self._writer: Dense | Ragged | None = None

    def _open(self, sample: list[np.ndarray] | np.ndarray) -> Dense | Ragged:
        if self._writer is None:
            from .utils import train_dict

            picked = sample[:DICT_TRAIN_RECORDS]
            if not isinstance(picked, np.ndarray):
                picked = [r for r in picked if r.size]
            try:
                trained: bytes | None = train_dict(picked)
            except ValueError:
                trained = None
            codec = "zstd" if trained is None else "zstd_dict"
            self._writer = self._create(codec, trained)
        return self._writer

    def append(self, records: Any) -> None:
        if isinstance(records, np.ndarray):
            writer = self._open(records)
            if records.shape[0]:  # an empty batch still creates the store
                writer.append(records)
            return
        records = list(records)
        # Row i stays record i: an empty list is an empty record.
        cast(Ragged, self._open(records))._append(records, empty=True)

    def append_flat(self, flat: np.ndarray, offsets: Any, shapes: Any = None) -> None:
        bounds = np.asarray(offsets, dtype=np.int64)
        ends = bounds[: DICT_TRAIN_RECORDS + 1].tolist()
        sample = [flat[a:b] for a, b in zip(ends[:-1], ends[1:]) if 0 <= a <= b <= flat.size]
        cast(Ragged, self._open(sample)).append_flat(flat, offsets, shapes)

    def __len__(self) -> int:
        return 0 if self._writer is None else len(self._writer)

    def close(self) -> None:
        self._open([]).close()


# --- the output: a temporary sibling renamed into place ------------------------------------


class _Output:
    """The stores of one conversion, written under a temporary sibling of
    `final` and renamed into place by :meth:`commit`."""

    def __init__(self, final: PathLike, codec: str) -> None:
        self.final = Path(os.fspath(final))
        if self.final.exists():
            raise FileExistsError(f"{self.final} already exists; convert into a new path")
        parent = self.final.parent
        if not parent.is_dir():
            raise FileNotFoundError(f"{parent} (the parent of {self.final}) is not a directory")
        if not isinstance(codec, str) or codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}, expected one of {list(CODECS)}")
        self.codec = codec
        self.tmp = parent / f".{self.final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        self.tmp.mkdir()
        self.writers: dict[str, Dense | Ragged] = {}

    def _path(self, name: str) -> Path:
        """Where store `name` goes: a relative path of plain names (a column
        called ``..`` or ``/x`` would otherwise land outside the output)."""
        parts = name.split("/")
        if any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
            raise ConversionError(
                f"{name!r} cannot name a store (it must be a relative path of plain names); "
                f"rename it first"
            )
        return self.tmp / name

    def create_dense(self, path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> Dense:
        """A new `Dense` writer at `path` with the output's codec."""

        def create(codec: str, trained: bytes | None) -> Dense:
            return Dense.create(path, dtype, shape, codec=codec, dict_bytes=trained)

        if self.codec == "zstd_dict":
            return cast(Dense, _DictTrained(create))
        return create(self.codec, None)

    def dense(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> Dense:
        writer = self.writers.get(name)
        if writer is None:
            path = self._path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = self.create_dense(path, dtype, shape)
            self.writers[name] = writer
        return cast(Dense, writer)

    def ragged(
        self, name: str, dtype: np.dtype, ndim: int, codec: str | None = None
    ) -> Ragged:
        writer = self.writers.get(name)
        if writer is None:
            path = self._path(name)
            path.parent.mkdir(parents=True, exist_ok=True)

            def create(codec: str, trained: bytes | None) -> Ragged:
                return Ragged.create(path, dtype, ndim, codec=codec, dict_bytes=trained)

            if codec is not None:
                # An image codec the caller picked (keep_encoded).
                writer = create(codec, None)
            elif self.codec == "zstd_dict":
                writer = cast(Ragged, _DictTrained(create))
            else:
                writer = create(self.codec, None)
            self.writers[name] = writer
        return cast(Ragged, writer)

    def commit(self, groups: Mapping[str, int] | None = None) -> dict[str, int]:
        """Close every store, check the counts agree (within each group of
        stores sharing a directory: one split) and rename into place.
        Returns ``{store: records}``."""
        counts = {name: len(w) for name, w in self.writers.items()}
        for writer in self.writers.values():
            writer.close()
        by_dir: dict[str, dict[str, int]] = {}
        for name, n in counts.items():
            by_dir.setdefault(os.path.dirname(name), {})[name] = n
        for folder, found in by_dir.items():
            expected = None if groups is None else groups.get(folder)
            if len(set(found.values())) > 1 or (
                expected is not None and set(found.values()) != {expected}
            ):
                where = folder or "the output"
                want = "" if expected is None else f" (expected {expected})"
                raise ConversionError(
                    f"stores of {where} disagree on the record count{want}: {found}"
                )
        if self.final.exists():
            raise FileExistsError(f"{self.final} appeared while converting; not replacing it")
        os.rename(self.tmp, self.final)
        _fsync_dir(self.final.parent)
        return counts

    def abort(self) -> None:
        for writer in self.writers.values():
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - removing it anyway
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _run(
    output: PathLike,
    codec: str,
    body: Callable[[_Output], Mapping[str, int] | None],
) -> dict[str, int]:
    out = _Output(output, codec)
    try:
        groups = body(out)
        return out.commit(groups)
    except BaseException:
        out.abort()
        raise


def _rows_per_batch(row_bytes: float, batch_bytes: int) -> int:
    return max(1, min(1 << 20, int(batch_bytes // max(1.0, row_bytes))))


# --- letting go of memory-mapped source pages ----------------------------------------------

class _PageDropper:
    """Drops this process's pages of memory-mapped, read-only source files
    once a batch read from them is written: otherwise every page of a
    memory-mapped Hugging Face dataset read so far stays resident, and a
    2 GB dataset holds 2 GB (``_native.release_pages``: only ranges inside
    read-only file mappings are touched, never anonymous memory)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.maps = _native.file_maps(list(paths))

    def drop(self, table: Any) -> None:
        if self.maps:
            spans = [
                (buf.address, buf.size)
                for column in table.columns
                for chunk in column.chunks
                for buf in chunk.buffers()
                if buf is not None and buf.size
            ]
            _native.release_pages(spans, self.maps)


# --- Hugging Face datasets -----------------------------------------------------------------


def _hf_layout(feature: Any, where: str) -> tuple[str, np.dtype, Any]:
    """``("dense", dtype, shape)``, ``("ragged", dtype, inner)`` (records
    of shape ``(k, *inner)``, `k` varying) or ``("image", uint8, None)``
    (decoded to ``(H, W[, C])``) for a ``datasets`` feature;
    ``ConversionError`` naming `where` otherwise."""
    import datasets  # type: ignore[import-untyped]

    kind = type(feature).__name__
    if isinstance(feature, datasets.Value):
        if feature.dtype in ("string", "large_string", "binary", "large_binary") or (
            feature.dtype.startswith(("timestamp", "date", "time", "duration", "decimal"))
        ):
            raise ConversionError(
                f"column {where!r} holds {feature.dtype} values, which a typed store cannot "
                f"hold losslessly; map it to numbers first (or remove it)"
            )
        name = {"float16": "float16", "bool": "bool"}.get(feature.dtype, feature.dtype)
        return ("dense", _storable(name, f"column {where!r}"), ())
    if isinstance(feature, datasets.ClassLabel):
        return ("dense", np.dtype(np.int64), ())
    if isinstance(feature, datasets.Image):
        return ("image", np.dtype(np.uint8), None)
    if kind in ("Array2D", "Array3D", "Array4D", "Array5D"):
        shape = tuple(feature.shape)
        dtype = _storable(feature.dtype, f"column {where!r}")
        if shape[0] is None:
            return ("ragged", dtype, tuple(shape[1:]))
        return ("dense", dtype, shape)
    inner = getattr(feature, "feature", None)
    if kind in ("Sequence", "List", "LargeList") and inner is not None:
        if isinstance(inner, dict):
            raise ConversionError(
                f"column {where!r} is a sequence of records (nested objects); store each field "
                f"as its own column first"
            )
        sub_kind, dtype, sub = _hf_layout(inner, where)
        if sub_kind != "dense":
            raise ConversionError(
                f"column {where!r} nests variable-shape values inside a sequence, which is not a "
                f"rectangular array per record"
            )
        length = getattr(feature, "length", -1)
        if length is not None and length >= 0:
            return ("dense", dtype, (length, *sub))
        if 1 + len(sub) > MAX_NDIM:
            raise ConversionError(f"column {where!r} has more than {MAX_NDIM} axes")
        return ("ragged", dtype, sub)
    if isinstance(feature, (dict, list)):
        raise ConversionError(
            f"column {where!r} holds nested objects; store each field as its own column first"
        )
    raise ConversionError(
        f"column {where!r} has feature type {kind}, which cannot be stored losslessly; map it to "
        f"numbers first"
    )


def _ragged_records(
    values: Any, dtype: np.dtype, ndim: int | None, where: str, first_row: int
) -> list[np.ndarray]:
    """The records of one batch of a ragged column as arrays of `dtype`
    (rank `ndim`, or the first record's when ``None``)."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        records: list[Any] = list(values)
    else:
        records = list(values)
    out = []
    for i, record in enumerate(records):
        arr = record if isinstance(record, np.ndarray) else np.asarray(record)
        if arr.dtype == object:
            raise ConversionError(
                f"column {where!r}, row {first_row + i}: the value is not a rectangular array "
                f"(its inner lengths differ)"
            )
        if arr.dtype != dtype:
            if not np.can_cast(arr.dtype, dtype, casting="safe"):
                raise ConversionError(
                    f"column {where!r}, row {first_row + i}: found {arr.dtype}, expected {dtype}"
                )
            arr = arr.astype(dtype)
        if ndim is not None and arr.ndim != ndim:
            raise ConversionError(
                f"column {where!r}, row {first_row + i}: found {arr.ndim} axes (shape "
                f"{arr.shape}), expected {ndim}"
            )
        out.append(arr)
    return out


def _hf_split(
    out: _Output,
    ds: Any,
    prefix: str,
    batch_bytes: int,
    progress: Progress | None,
    done: list[int],
    total: int | None,
) -> int:
    """Write one ``datasets.Dataset`` or ``IterableDataset`` (with known
    features) as stores ``prefix + column``: the columns' Arrow data batch
    by batch (dtypes exactly as stored), image columns decoded through
    ``datasets``' NumPy formatting. Returns the records every store of
    the split must hold: the dataset's length for a ``Dataset`` (so the
    commit checks the batches covered every row), the rows read for an
    ``IterableDataset``, whose length is known only once read."""
    layouts = {col: _hf_layout(feat, col) for col, feat in ds.features.items()}
    plain = [c for c, (k, _, _) in layouts.items() if k != "image"]
    images = [c for c, (k, _, _) in layouts.items() if k == "image"]
    if _is_iterable_dataset(ds):
        rows = _rows_per_batch(_iterable_row_bytes(ds), batch_bytes)
    else:
        n = len(ds)
        try:
            size = int(ds.data.nbytes)
        except Exception:  # noqa: BLE001 - only an estimate
            size = 0
        rows = _rows_per_batch(size / max(1, n) if n else 1.0, batch_bytes)
    for col in plain:
        kind, dtype, spec = layouts[col]
        assert dtype is not None
        if kind == "dense":
            out.dense(prefix + col, dtype, spec)
        else:
            out.ragged(prefix + col, dtype, 1 + len(spec))
    image_ranks: dict[str, int] = {}
    dropper = _PageDropper(f["filename"] for f in getattr(ds, "cache_files", []) or [])
    arrow_batches = ds.select_columns(plain).with_format("arrow").iter(batch_size=rows)
    image_batches = (
        ds.select_columns(images).with_format("numpy").iter(batch_size=rows) if images else None
    )
    row = 0
    while True:
        count = None
        if plain:
            table = next(arrow_batches, None)
            if table is None:
                break
            for col in plain:
                count = _arrow_column(out, prefix + col, table.column(col), layouts[col])
            dropper.drop(table)
        if image_batches is not None:
            batch = next(image_batches, None)
            if batch is None:
                break
            for col in images:
                ndim = image_ranks.get(col)
                records = _ragged_records(batch[col], np.dtype(np.uint8), ndim, col, row)
                if records and ndim is None:
                    ndim = image_ranks[col] = records[0].ndim
                    records = _ragged_records(records, np.dtype(np.uint8), ndim, col, row)
                if records:
                    out.ragged(prefix + col, np.dtype(np.uint8), int(ndim or 3)).append(records)
                count = len(records)
        if not count:
            break
        row += count
        done[0] += count
        if progress is not None:
            progress(done[0], total)
    # An image column of an empty split still gets its store.
    for col in images:
        if prefix + col not in out.writers:
            out.ragged(prefix + col, np.dtype(np.uint8), 3)
    return row if _is_iterable_dataset(ds) else len(ds)


def _is_iterable_dataset(ds: Any) -> bool:
    import datasets  # type: ignore[import-untyped]

    return isinstance(ds, datasets.IterableDataset)


#: Rows of an ``IterableDataset`` read ahead to estimate its row size.
_ITERABLE_PEEK_ROWS = 16


def _iterable_row_bytes(ds: Any) -> float:
    """The mean Arrow size of the first rows of an ``IterableDataset`` (a
    short read of its start; 1 when it is empty), to size its batches."""
    first = next(iter(ds.with_format("arrow").iter(batch_size=_ITERABLE_PEEK_ROWS)), None)
    if first is None or first.num_rows == 0:
        return 1.0
    return float(first.nbytes) / first.num_rows


def _with_features(ds: Any, where: str) -> Any:
    """`ds`, an ``IterableDataset``, with its features known: as declared,
    else inferred by ``datasets`` from its first rows."""
    if ds.features is not None:
        return ds
    resolve = getattr(ds, "_resolve_features", None)
    if resolve is None:
        raise ConversionError(
            f"{where}: the IterableDataset declares no features and this version of datasets "
            f"cannot infer them; pass features= when making it, or cast it"
        )
    resolved = resolve()
    if resolved.features is None:
        raise ConversionError(f"{where}: the IterableDataset's features could not be inferred")
    return resolved


def convert(
    dataset: Any,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Write a Hugging Face ``Dataset`` or ``DatasetDict`` (or their
    streaming kinds, ``IterableDataset`` and ``IterableDatasetDict``) as
    typed stores.

    A ``Dataset`` becomes ``output/<column>``, a ``DatasetDict``
    ``output/<split>/<column>``: a :class:`~loaderx.zrecord.Dense` store
    for a column of one fixed shape (scalars, fixed-length sequences,
    ``ArrayND`` with a fixed shape, class labels), a
    :class:`~loaderx.zrecord.Ragged` one for varying shapes (sequences,
    ``ArrayND`` with a ``None`` first axis, decoded ``Image`` columns as
    ``uint8`` ``(H, W[, C])``). Dtypes and shapes are kept exactly; a
    column that cannot be (strings, nested objects) raises
    :class:`ConversionError` naming it. Rows are read in batches of about
    `batch_bytes`. An ``IterableDataset`` is read once from start to end
    (twice when it has image columns: the other columns and the images
    are read side by side), its features as declared or else inferred by
    ``datasets`` from its first rows, its batches sized from the first 16
    rows; progress reports no total for it. Returns ``{store path
    relative to output: records}``."""
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError(
            "converting a Hugging Face dataset needs the datasets package: "
            "pip install 'loaderx[converter]'"
        ) from None
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        splits = dict(dataset.items())
        if not splits:
            raise ValueError(f"the {type(dataset).__name__} has no splits")
        prefixes = {name: f"{name}/" for name in splits}
    elif isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
        splits = {"": dataset}
        prefixes = {"": ""}
    else:
        raise TypeError(
            f"convert takes a datasets.Dataset, DatasetDict, IterableDataset or "
            f"IterableDatasetDict, got {type(dataset).__name__}"
        )
    for name, ds in splits.items():
        if _is_iterable_dataset(ds):
            ds = splits[name] = _with_features(ds, f"split {name!r}" if name else "the dataset")
        for col, feat in ds.features.items():
            _hf_layout(feat, f"{name}/{col}" if name else col)
    streaming = any(_is_iterable_dataset(ds) for ds in splits.values())
    total = None if streaming else sum(len(ds) for ds in splits.values())

    def body(out: _Output) -> dict[str, int]:
        done = [0]
        groups = {}
        for name, ds in splits.items():
            groups[name] = _hf_split(out, ds, prefixes[name], batch_bytes, progress, done, total)
        return groups

    return _run(output, codec, body)


def huggingface(
    repo_id: str,
    *,
    config: str | None = None,
    revision: str = "main",
    token: str | bool | None = None,
    **load_kwargs: Any,
) -> Any:
    """Load a dataset from the Hugging Face Hub (or a local dataset
    directory) through ``datasets.load_dataset``; pass the result to
    :func:`convert`. Further keyword arguments (``split=``,
    ``cache_dir=``, ...) go to ``load_dataset`` as they are. Needs
    ``pip install 'loaderx[converter]'``."""
    if not isinstance(repo_id, str) or not repo_id:
        raise ValueError(f"repo_id must be a non-empty string, got {repo_id!r}")
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError(
            "loaderx.converter.huggingface needs the datasets package: "
            "pip install 'loaderx[converter]'"
        ) from None
    return datasets.load_dataset(
        repo_id, config, revision=revision, token=token, **load_kwargs
    )


# --- NumPy files ---------------------------------------------------------------------------


def _append_dense_chunks(
    writer: Dense,
    array: np.ndarray,
    batch_bytes: int,
    progress: Progress | None,
    done: list[int],
    total: int | None,
) -> None:
    row = max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
    step = _rows_per_batch(row, batch_bytes)
    for start in range(0, array.shape[0], step):
        block = array[start : start + step]
        writer.append(block)
        done[0] += block.shape[0]
        if progress is not None:
            progress(done[0], total)


def _npy_header(fh: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` from the header of the ``.npy``
    data `fh` is at."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    return tuple(shape), bool(fortran), dtype


def _check_array(array: np.ndarray, where: str) -> np.dtype:
    if array.ndim == 0:
        raise ConversionError(f"{where}: a 0-d array has no records (axis 0)")
    return _storable(array.dtype, where)


def convert_npy(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
) -> dict[str, int]:
    """A ``.npy`` file (memory-mapped) as one ``Dense`` store at `output`:
    one record per slice along axis 0."""
    path = os.fspath(src)
    with _reading(path, "a .npy file"):
        with open(path, "rb") as fh:
            _shape, _fortran, found = _npy_header(fh)
        if found.hasobject:
            raise ConversionError(
                f"{path} holds Python objects (dtype {found}), which cannot be stored; "
                f"save the values as numbers"
            )
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    dtype = _check_array(array, str(src))

    def body(out: _Output) -> None:
        # A store directly at `output`: the temporary directory is the store.
        out.tmp.rmdir()
        writer = out.create_dense(out.tmp, dtype, array.shape[1:])
        out.writers[""] = writer
        _append_dense_chunks(writer, array, batch_bytes, progress, [0], array.shape[0])

    return _run(output, codec, body)


class _NpzMember:
    """One array of an ``.npz``: its header, and its rows block by block,
    memory-mapped when stored uncompressed, else streamed through the
    decompressor (bounded memory; a Fortran-order compressed member is
    read whole, as its rows are not contiguous in the stream)."""

    def __init__(self, path: str, info: zipfile.ZipInfo) -> None:
        self.path = path
        self.info = info
        self.name = info.filename[: -len(".npy")]
        with zipfile.ZipFile(path) as zf, zf.open(info) as member:
            self.shape, self.fortran, self.dtype = self._header(member)

    def _header(self, fh: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
        shape, fortran, dtype = _npy_header(fh)
        if dtype.hasobject:
            raise ConversionError(f"{self.path}: member {self.name!r} holds Python objects")
        return shape, fortran, dtype

    def _mapped(self) -> np.ndarray:
        with open(self.path, "rb") as fh:
            fh.seek(self.info.header_offset)
            local = fh.read(30)
            if local[:4] != b"PK\x03\x04":
                raise ConversionError(f"{self.path}: member {self.info.filename} has a bad header")
            name_len = int.from_bytes(local[26:28], "little")
            extra_len = int.from_bytes(local[28:30], "little")
            fh.seek(self.info.header_offset + 30 + name_len + extra_len)
            self._header(fh)
            offset = fh.tell()
        return np.memmap(
            self.path,
            dtype=self.dtype,
            mode="r",
            offset=offset,
            shape=self.shape,
            order="F" if self.fortran else "C",
        )

    def blocks(self, rows: int) -> Iterator[np.ndarray]:
        if self.info.compress_type == zipfile.ZIP_STORED:
            array = self._mapped()
            for start in range(0, self.shape[0], rows):
                yield array[start : start + rows]
            return
        with zipfile.ZipFile(self.path) as zf, zf.open(self.info) as opened:
            member: Any = opened
            if self.fortran:
                array = np.lib.format.read_array(member, allow_pickle=False)
                for start in range(0, self.shape[0], rows):
                    yield array[start : start + rows]
                return
            self._header(member)
            row_shape = self.shape[1:]
            row_bytes = self.dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
            left = self.shape[0]
            while left:
                n = min(rows, left)
                block = np.empty((n, *row_shape), dtype=self.dtype)
                view = memoryview(cast(Any, block.reshape(-1).view(np.uint8)))
                got = 0
                while got < n * row_bytes:
                    read = member.readinto(view[got:])
                    if not read:
                        raise ConversionError(
                            f"{self.path}: member {self.name!r} ends early (truncated archive)"
                        )
                    got += read
                left -= n
                yield block


def _npz_members(path: str) -> list[_NpzMember]:
    with zipfile.ZipFile(path) as zf:
        infos = [i for i in zf.infolist() if i.filename.endswith(".npy")]
    return [_NpzMember(path, info) for info in infos]


def convert_npz(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
) -> dict[str, int]:
    """An ``.npz`` archive as one ``Dense`` store per array
    (``output/<name>``); all arrays must have the same length along axis
    0. Uncompressed members (``np.savez``) are memory-mapped, compressed
    ones (``np.savez_compressed``) streamed through the decompressor."""
    path = os.fspath(src)
    with _reading(path, "a .npz archive"):
        members = _npz_members(path)
    if not members:
        raise ConversionError(f"{path} holds no arrays")
    for m in members:
        if not m.shape:
            raise ConversionError(f"{path}: member {m.name!r}: a 0-d array has no records (axis 0)")
        _storable(m.dtype, f"{path}: member {m.name!r}")
    lengths = {m.name: m.shape[0] for m in members}
    if len(set(lengths.values())) > 1:
        raise ConversionError(f"{path}: the arrays differ in length along axis 0: {lengths}")
    total = sum(lengths.values())

    def body(out: _Output) -> None:
        done = [0]
        for m in members:
            writer = out.dense(m.name, m.dtype, m.shape[1:])
            row = max(1, m.dtype.itemsize * int(np.prod(m.shape[1:], dtype=np.int64)))
            rows = _rows_per_batch(row, batch_bytes)
            for block in _read_each(m.blocks(rows), path, f"a .npz archive (member {m.name!r})"):
                writer.append(block)
                done[0] += block.shape[0]
                if progress is not None:
                    progress(done[0], total)

    return _run(output, codec, body)


# --- Arrow: Parquet and IPC files ----------------------------------------------------------


def _arrow_layout(field: Any, where: str) -> tuple[str, np.dtype, Any]:
    import pyarrow as pa  # type: ignore[import-untyped]

    t = field.type
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return ("dense", _storable(t.to_pandas_dtype(), where), ())
    if pa.types.is_fixed_size_list(t):
        kind, dtype, sub = _arrow_layout(pa.field("item", t.value_type), where)
        if kind != "dense":
            raise ConversionError(f"column {where!r}: a fixed-size list of variable-size values")
        return ("dense", dtype, (t.list_size, *sub))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kind, dtype, sub = _arrow_layout(pa.field("item", t.value_type), where)
        if kind != "dense":
            raise ConversionError(
                f"column {where!r}: lists of variable-length lists are not a rectangular array "
                f"per record"
            )
        return ("ragged", dtype, sub)
    raise ConversionError(
        f"column {where!r} has Arrow type {t}, which cannot be stored losslessly; supported: "
        f"integers, floats, booleans and (fixed-size) lists of them"
    )


def _arrow_values(array: Any, dtype: np.dtype, where: str) -> np.ndarray:
    """The flat values of a primitive Arrow array (no nulls allowed)."""
    if array.null_count:
        raise ConversionError(f"column {where!r} has null values; fill them first")
    values = array.to_numpy(zero_copy_only=False)
    if values.dtype != dtype:
        values = values.astype(dtype)
    return values


def _flatten_fixed(array: Any, depth: int, where: str) -> Any:
    for _ in range(depth):
        if array.null_count:
            raise ConversionError(f"column {where!r} has null values; fill them first")
        array = array.flatten()
    return array


def _arrow_column(
    out: _Output, name: str, column: Any, layout: tuple[str, np.dtype, Any]
) -> int:
    import pyarrow as pa  # type: ignore[import-untyped]

    kind, dtype, spec = layout
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    n = len(column)
    if kind == "dense":
        flat = _flatten_fixed(column, len(spec), name)
        values = _arrow_values(flat, dtype, name)
        dense = out.dense(name, dtype, spec)
        if n:  # an empty record batch (legal in Arrow IPC and Parquet) appends nothing
            dense.append(values.reshape((n, *spec)))
        return n
    if column.null_count:
        raise ConversionError(f"column {name!r} has null rows; fill or drop them first")
    offsets = column.offsets.to_numpy()
    inner = _flatten_fixed(column.values, len(spec), name)
    values = _arrow_values(inner, dtype, name)
    writer = out.ragged(name, dtype, 1 + len(spec))
    bounds = np.asarray(offsets, dtype=np.int64)
    if not spec:
        writer.append_flat(values, bounds)
    else:
        # Row i holds rows bounds[i]..bounds[i + 1] of fixed-shape items;
        # a row with none is an empty record (row i stays record i).
        per_item = int(np.prod(spec, dtype=np.int64))
        shapes = np.empty((n, 1 + len(spec)), dtype=np.int64)
        shapes[:, 0] = np.diff(bounds)
        shapes[:, 1:] = spec
        writer.append_flat(values, bounds * per_item, shapes)
    return n


def _fixed_inner(t: Any) -> tuple[int, ...]:
    import pyarrow as pa  # type: ignore[import-untyped]

    dims = []
    while pa.types.is_fixed_size_list(t):
        dims.append(t.list_size)
        t = t.value_type
    return tuple(dims)


def _convert_batches(
    out: _Output,
    schema: Any,
    batches: Iterable[Any],
    total: int | None,
    progress: Progress | None,
) -> None:
    layouts = {f.name: _arrow_layout(f, f.name) for f in schema}
    for name, (kind, dtype, spec) in layouts.items():
        if kind == "dense":
            out.dense(name, dtype, spec)
        else:
            out.ragged(name, dtype, 1 + len(spec))
    row = 0
    for batch in batches:
        for name in layouts:
            _arrow_column(out, name, batch.column(name), layouts[name])
        row += batch.num_rows
        if progress is not None:
            progress(row, total)


def convert_parquet(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
) -> dict[str, int]:
    """A Parquet file as one store per column (``output/<column>``), read
    batch by batch: numbers and fixed-size lists become ``Dense``, lists
    ``Ragged`` (one native append per batch)."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    # Without pre-buffering, and one row group at a time: pyarrow otherwise
    # keeps the column chunks of every row group read so far (a 2 GiB file
    # held ~1.8 GiB resident when measured).
    path = os.fspath(src)
    with _reading(path, "a Parquet file"):
        pf = pq.ParquetFile(path, pre_buffer=False)
        meta = pf.metadata
        total = meta.num_rows
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        schema = pf.schema_arrow
    rows = _rows_per_batch(size / max(1, total), batch_bytes)
    _check_columns(schema.names, path)
    for f in schema:
        _arrow_layout(f, f.name)

    def body(out: _Output) -> None:
        batches = (
            batch
            for group in range(pf.num_row_groups)
            for batch in pf.iter_batches(batch_size=rows, row_groups=[group])
        )
        read = _read_each(batches, path, "a Parquet file")
        _convert_batches(out, schema, read, total, progress)

    return _run(output, codec, body)


def convert_arrow(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
) -> dict[str, int]:
    """An Arrow IPC file (or stream) as one store per column, read record
    batch by record batch."""
    import pyarrow as pa  # type: ignore[import-untyped]

    path = os.fspath(src)
    # Read, not memory-mapped: a map's pages stay resident as the
    # conversion goes (a 2 GB file held 2 GB); a read batch is freed once
    # written.
    with _reading(path, "an Arrow IPC file"):
        source = pa.OSFile(path, "rb")
    try:
        with _reading(path, "an Arrow IPC file"):
            try:
                reader: Any = pa.ipc.open_file(source)
                total: int | None = (
                    int(reader.count_rows()) if hasattr(reader, "count_rows") else None
                )
                batches: Iterable[Any] = (
                    reader.get_batch(i) for i in range(reader.num_record_batches)
                )
            except pa.ArrowInvalid:
                source.seek(0)
                reader = pa.ipc.open_stream(source)
                total = None
                batches = reader
            schema = reader.schema
        _check_columns(schema.names, path)
        for f in schema:
            _arrow_layout(f, f.name)
    except BaseException:
        source.close()
        raise

    def body(out: _Output) -> None:
        read = _read_each(batches, path, "an Arrow IPC file")
        _convert_batches(out, schema, read, total, progress)

    try:
        return _run(output, codec, body)
    finally:
        source.close()


# --- image folders -------------------------------------------------------------------------

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def _image_files(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise ConversionError(f"{root} has no class folders (expected root/<class>/*.jpg|png)")
    files = []
    for label, name in enumerate(classes):
        for p in sorted((root / name).iterdir()):
            if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES:
                files.append((p, label))
    if not files:
        raise ConversionError(f"{root} holds no .jpg/.jpeg/.png files under its class folders")
    return classes, files


def convert_image_folder(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    size: tuple[int, int] | None = None,
    workers: int = 4,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
    keep_encoded: bool = False,
) -> dict[str, int]:
    """An image folder ``root/<class>/*.jpg|png`` as ``output/label``
    (``Dense`` int64, classes numbered in sorted name order, listed in
    ``output/classes.txt``) and ``output/image``: the encoded file bytes
    (``Ragged`` uint8, one axis), or with ``size=(height, width)`` the
    images decoded to RGB and resized to that shape (``Dense`` uint8
    ``(height, width, 3)``), decoded on `workers` threads (Pillow).

    With ``keep_encoded=True`` ``output/image`` is an image store instead
    (``Ragged`` uint8 ``(h, w, 3)``, codec ``jpeg``): every file kept as
    the JPEG/PNG bytes it is, its header read for its shape, and decoded
    on gather by ``Ragged.open(path)`` (each image at its own size) or
    ``Ragged.open(path, resize=(H, W))`` (stacked, resized and
    centre-cropped). `codec` then applies to the labels only."""
    if keep_encoded and size is not None:
        raise ValueError(
            "keep_encoded stores the files as they are; choose the size when reading "
            "(Ragged.open(path, resize=(height, width))), not with size="
        )
    root = Path(os.fspath(src))
    classes, files = _image_files(root)
    total = len(files)
    labels = np.array([label for _, label in files], dtype=np.int64)

    def decode(path: Path) -> np.ndarray:
        from PIL import Image

        assert size is not None
        try:
            with Image.open(path) as img:
                rgb = img.convert("RGB")
                if rgb.size != (size[1], size[0]):
                    rgb = rgb.resize((size[1], size[0]), Image.Resampling.BILINEAR)
                return np.asarray(rgb, dtype=np.uint8)
        except Exception as exc:  # noqa: BLE001 - re-raised naming the file
            raise ConversionError(f"{path}: cannot decode the image: {exc}") from exc

    def body(out: _Output) -> None:
        (out.tmp / "classes.txt").write_text("".join(f"{c}\n" for c in classes))
        label_writer = out.dense("label", np.dtype(np.int64), ())
        done = 0
        if keep_encoded:
            images = out.ragged("image", np.dtype(np.uint8), 3, codec="jpeg")
            pending: list[tuple[Path, bytes]] = []
            pending_bytes = 0
            for i, (path, _) in enumerate(files):
                content = path.read_bytes()
                pending.append((path, content))
                pending_bytes += len(content)
                if pending_bytes >= batch_bytes or i == total - 1:
                    try:
                        images.append_encoded([d for _, d in pending])
                    except ZrecordError as exc:
                        bad = re.search(r"record (\d+) \(of this append\)", str(exc))
                        where = pending[int(bad.group(1))][0] if bad else root
                        raise ConversionError(f"{where}: {exc}") from exc
                    label_writer.append(labels[done : done + len(pending)])
                    done += len(pending)
                    pending, pending_bytes = [], 0
                    if progress is not None:
                        progress(done, total)
        elif size is None:
            writer = out.ragged("image", np.dtype(np.uint8), 1)
            block: list[np.ndarray] = []
            block_bytes = 0
            for i, (path, _) in enumerate(files):
                data = np.fromfile(path, dtype=np.uint8)
                if data.size == 0:
                    raise ConversionError(f"{path} is empty")
                block.append(data)
                block_bytes += data.size
                if block_bytes >= batch_bytes or i == total - 1:
                    writer.append(block)
                    label_writer.append(labels[done : done + len(block)])
                    done += len(block)
                    block, block_bytes = [], 0
                    if progress is not None:
                        progress(done, total)
        else:
            height, width = size
            dense = out.dense("image", np.dtype(np.uint8), (height, width, 3))
            step = _rows_per_batch(height * width * 3, batch_bytes)
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                for start in range(0, total, step):
                    chunk = [p for p, _ in files[start : start + step]]
                    arrays = list(pool.map(decode, chunk))
                    dense.append(np.stack(arrays))
                    label_writer.append(labels[start : start + len(chunk)])
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)

    return _run(output, codec, body)


# --- WebDataset tar shards -----------------------------------------------------------------


def _shards(src: Path) -> list[Path]:
    if src.is_dir():
        shards = sorted(p for p in src.iterdir() if p.name.endswith(".tar"))
    else:
        shards = [src]
    if not shards:
        raise ConversionError(f"{src} holds no .tar shards")
    return shards


def _split_name(name: str) -> tuple[str, str]:
    """WebDataset's key/extension split: the key is everything up to the
    first dot of the base name."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot or not stem:
        raise ConversionError(f"tar member {name!r} has no extension (expected <key>.<ext>)")
    return (f"{folder}/{stem}" if folder else stem), ext


def convert_webdataset(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
) -> dict[str, int]:
    """WebDataset tar shards (one ``.tar`` or a directory of them, in name
    order) as one ``Ragged`` uint8 store per extension (``output/<ext>``,
    the members' bytes as they are). Every sample must have the same set of
    extensions; its key order is kept."""
    shards = _shards(Path(os.fspath(src)))

    def body(out: _Output) -> None:
        exts: list[str] | None = None
        pending: dict[str, list[np.ndarray]] = {}
        pending_bytes = 0
        done = 0

        def flush() -> None:
            nonlocal pending, pending_bytes
            for ext, records in pending.items():
                if records:
                    out.ragged(ext, np.dtype(np.uint8), 1).append(records)
            pending = {ext: [] for ext in pending}
            pending_bytes = 0

        def finish(key: str | None, sample: dict[str, bytes], where: str) -> None:
            nonlocal exts, pending_bytes, done
            if key is None:
                return
            found = sorted(sample)
            if exts is None:
                exts = found
                pending.update({ext: [] for ext in exts})
                for ext in exts:
                    out.ragged(ext, np.dtype(np.uint8), 1)
            elif found != exts:
                raise ConversionError(
                    f"{where}: sample {key!r} has extensions {found}, the first sample {exts}"
                )
            for ext, data in sample.items():
                if not data:
                    raise ConversionError(f"{where}: {key}.{ext} is empty")
                pending[ext].append(np.frombuffer(data, dtype=np.uint8))
                pending_bytes += len(data)
            done += 1
            if pending_bytes >= batch_bytes:
                flush()
                if progress is not None:
                    progress(done, None)

        for shard in shards:
            key: str | None = None
            sample: dict[str, bytes] = {}
            with tarfile.open(shard, "r|*") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    k, ext = _split_name(member.name)
                    if k != key:
                        finish(key, sample, str(shard))
                        key, sample = k, {}
                    if ext in sample:
                        raise ConversionError(f"{shard}: {member.name} appears twice")
                    fh = tar.extractfile(member)
                    assert fh is not None
                    sample[ext] = fh.read()
            finish(key, sample, str(shard))
        flush()
        if progress is not None:
            progress(done, done)
        if exts is None:
            raise ConversionError(f"{src} holds no samples")

    return _run(output, codec, body)


# --- picking a converter by the source -----------------------------------------------------


def source_kind(src: PathLike) -> str:
    """What :func:`convert_path` takes `src` for: ``"npy"``, ``"npz"``,
    ``"parquet"``, ``"arrow"``, ``"images"``, ``"webdataset"`` or
    ``"hf"`` (a ``save_to_disk`` directory)."""
    path = Path(os.fspath(src))
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    suffix = path.suffix.lower()
    if not path.is_dir():  # a file, or a pipe streaming one
        kinds = {
            ".npy": "npy",
            ".npz": "npz",
            ".parquet": "parquet",
            ".arrow": "arrow",
            ".feather": "arrow",
            ".ipc": "arrow",
            ".tar": "webdataset",
        }
        if suffix in kinds:
            return kinds[suffix]
        raise ConversionError(
            f"{path}: unknown source type {suffix or '(no suffix)'}; expected .npy, .npz, "
            f".parquet, .arrow/.feather, .tar, an image folder or a datasets save_to_disk folder"
        )
    if (path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file():
        return "hf"
    if any(p.name.endswith(".tar") for p in path.iterdir()):
        return "webdataset"
    return "images"


def convert_path(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    workers: int = 4,
    size: tuple[int, int] | None = None,
    progress: Progress | None = None,
    keep_encoded: bool = False,
) -> dict[str, int]:
    """Convert whatever `src` is (see :func:`source_kind`) into `output`
    (`size` and `keep_encoded`: image folders, see
    :func:`convert_image_folder`)."""
    kind = source_kind(src)
    if kind == "npy":
        return convert_npy(src, output, codec=codec, progress=progress)
    if kind == "npz":
        return convert_npz(src, output, codec=codec, progress=progress)
    if kind == "parquet":
        return convert_parquet(src, output, codec=codec, progress=progress)
    if kind == "arrow":
        return convert_arrow(src, output, codec=codec, progress=progress)
    if kind == "webdataset":
        return convert_webdataset(src, output, codec=codec, progress=progress)
    if kind == "hf":
        import datasets  # type: ignore[import-untyped]

        return convert(
            datasets.load_from_disk(os.fspath(src)), output, codec=codec, progress=progress
        )
    return convert_image_folder(
        src,
        output,
        codec=codec,
        size=size,
        workers=workers,
        progress=progress,
        keep_encoded=keep_encoded,
    )


__all__ = [
    "BATCH_BYTES",
    "ConversionError",
    "convert",
    "convert_arrow",
    "convert_image_folder",
    "convert_npy",
    "convert_npz",
    "convert_parquet",
    "convert_path",
    "convert_webdataset",
    "huggingface",
    "source_kind",
]
