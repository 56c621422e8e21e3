"""What every converter shares: the output (a temporary sibling renamed
into place), batch sizing, per-store zstd dictionaries, read errors named
by file, and letting go of memory-mapped source pages."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Callable, TypeVar, Union, cast

import numpy as np

from .. import _native
from ..errors import ConversionError
from ..zrecord import CODECS, Dense, Ragged, stores_dtype


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
            from ..utils import train_dict

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


# --- an output at a URL: staged locally, published at the end ------------------------------


_F = TypeVar("_F", bound=Callable[..., Any])


def url_output(convert: _F) -> _F:
    """Lets the converter `convert` (``convert(src, output, *, ...)``)
    write to a URL: it takes ``storage_options`` and ``staging_dir`` too.
    For a URL `output`, the URL's prefix must hold nothing (checked before
    converting: :class:`~loaderx.errors.ContainerExistsError`); the whole
    output is converted into a local staging directory, then published to
    the URL (every data object, then every store's ``meta.zr``, then
    collection marks and manifests) and the staging directory removed. A
    conversion that fails publishes nothing; a failed upload raises an
    error naming the URL and what was published, and keeps the staged
    output (the error says where, and how to push it)."""

    @functools.wraps(convert)
    def converting(
        src: Any,
        output: PathLike,
        *args: Any,
        storage_options: dict[str, Any] | None = None,
        staging_dir: PathLike | None = None,
        **kwargs: Any,
    ) -> Any:
        from .. import _staging
        from ..containers.base import _is_url, _options

        shown = _staging.shown(output)
        options = _options(storage_options)
        if not _is_url(shown):
            if options or staging_dir is not None:
                raise ValueError(
                    f"{shown} is a local path: storage_options and staging_dir apply to an "
                    f"output at a URL"
                )
            return convert(src, output, *args, **kwargs)
        _staging.check_free(shown, options, "a converted output")
        staging = _staging.make_staging(staging_dir)
        local = os.path.join(staging, "output")
        try:
            counts = convert(src, local, *args, **kwargs)
        except BaseException:
            _staging.discard(staging)
            raise
        _staging.publish(local, shown, options, staging)
        _staging.discard(staging)
        return counts

    return cast(_F, converting)


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


def shard_range(total: int, shard: tuple[int, int]) -> tuple[int, int]:
    """Records ``lo .. hi`` of slice ``shard = (i, n)``: the ``i``-th of `n`
    contiguous slices of `total` records, their sizes differing by 1 at most."""
    index, count = shard
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or not isinstance(index, int)
        or count < 1
        or not 0 <= index < count
    ):
        raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard!r}")
    return total * index // count, total * (index + 1) // count


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
