"""Collections: many stores read as one, written in parallel.

A collection is a directory of *parts* (``part-00000/``, ...), each holding
one typed store per column (``part-00000/image/``, ``part-00000/label/``),
and a manifest, ``manifest.zc``, written last by :func:`commit`. Any number
of processes on any number of hosts write parts with :func:`write_part`;
one process commits them; readers see the records of the committed parts,
in manifest order, as one index space ``0 .. len``.

* :func:`write_part` writes one part under a temporary name and renames it
  into place, so a half-written part is never taken for a finished one, and
  a retried task replaces its own part instead of adding a second.
* :func:`commit` checks the finished parts (same columns and schemas, every
  column the same length) and writes the manifest atomically.
* :func:`open` returns a :class:`Collection`: ``col["image"]`` is a
  :class:`~loaderx.Dense` or :class:`~loaderx.Ragged` reader over global
  indices, ``col[idx]`` a dict of batches, and ``DataLoader(col, ...)``
  streams every column.

The format is in ``docs/FORMAT.md`` (part III); the reader (lazy part
opening, index split, parallel gathers) is native.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from . import _native
from ._collection_parts import (  # noqa: F401 - DEFAULT_CODEC and _check_name: for loaderx.ray, .spark, .convert
    DEFAULT_CODEC,
    MANIFEST,
    _check_name,
    _location,
    commit,
    part_name,
    write_part,
)
from ._handles import _Closing
from .containers.dense import Dense
from .containers.ragged import Ragged
from .errors import ClosedError

__all__ = ["MANIFEST", "Collection", "commit", "open", "part_name", "write_part"]


def open(  # noqa: A001 - the module's verb, as in loaderx.collection.open
    root: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    max_open_parts: int | None = None,
) -> Collection:
    """The committed collection at `root`, a directory or a URL
    (``s3://bucket/prefix``, ``gs://``, ``az://``, ``http(s)://``,
    ``file://``; `storage_options` as for ``Dense.open``). Opening reads
    the manifest only; each part store is opened when a read first touches
    it. At most `max_open_parts` part stores (one column of one part each;
    by default an eighth of the process's descriptor limit, 16 to 4096,
    and 128 where it cannot be read) are held open: past that, the least recently used is
    closed, and reopened when a read needs it again."""
    if max_open_parts is not None and (
        isinstance(max_open_parts, bool) or not isinstance(max_open_parts, int)
    ):
        raise TypeError(f"max_open_parts must be an int, got {type(max_open_parts).__name__}")
    if max_open_parts is not None and max_open_parts < 1:
        raise ValueError(f"max_open_parts must be >= 1, got {max_open_parts}")
    base, _url, _options = _location(root, storage_options)
    return Collection._open(
        base, None if storage_options is None else dict(storage_options), max_open_parts
    )


def _reopen_column(
    root: str,
    name: str,
    storage_options: dict[str, Any] | None = None,
    max_open_parts: int | None = None,
) -> Any:
    """Unpickles a column reader: the collection reopened, its column."""
    return open(root, storage_options, max_open_parts).column(name)


class _ColumnDense(Dense):
    """A :class:`~loaderx.Dense` reader of a collection's column; pickles
    as its collection and name (a spawned worker reopens it)."""

    _origin: tuple[str, str, dict[str, Any] | None, int | None]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_column, self._origin)


class _ColumnRagged(Ragged):
    """A :class:`~loaderx.Ragged` reader of a collection's column; pickles
    as its collection and name."""

    _origin: tuple[str, str, dict[str, Any] | None, int | None]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen_column, self._origin)


class Collection(_Closing):
    """A committed collection: ``len(col)`` records in every column.

    * ``col["image"]``: that column as a :class:`~loaderx.Dense` or
      :class:`~loaderx.Ragged` reader over global indices (every index form
      they take: ints, negatives, slices, masks, arrays, lists).
    * ``col[idx]``: ``{column: col[column][idx]}``.
    * ``DataLoader(col, batch_size=...)``: one stream per column, named
      after it, natively gathered, sharded and resumable as for stores.
    """

    path: str
    _native: Any
    _readers: dict[str, Any]
    _storage_options: dict[str, Any] | None
    _max_open_parts: int | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use loaderx.collection.open(root)")

    @classmethod
    def _open(
        cls,
        path: str,
        storage_options: dict[str, Any] | None = None,
        max_open_parts: int | None = None,
    ) -> Collection:
        from .containers.base import _options

        native = _native.Collection.open(path, _options(storage_options), max_open_parts)
        made = cls.__new__(cls)
        made.path = path
        made._native = native
        made._readers = {}
        made._storage_options = storage_options
        made._max_open_parts = max_open_parts
        return made

    def _live(self) -> Any:
        native = getattr(self, "_native", None)
        if native is None:
            raise ClosedError(f"operation on a closed Collection ({self.path})")
        return native

    def __len__(self) -> int:
        return len(self._live())

    @property
    def columns(self) -> list[str]:
        """The column names, in manifest order."""
        return list(self._live().columns())

    @property
    def schema(self) -> dict[str, dict[str, Any]]:
        """``{column: {"kind", "dtype", "shape", "ndim", "codec", ...}}``."""
        return dict(self._live().schemas())

    @property
    def max_open_parts(self) -> int:
        """The most part stores held open at once."""
        return int(self._live().max_open_parts())

    @property
    def parts(self) -> list[tuple[str, int]]:
        """``[(part name, records)]`` in index order."""
        return [(str(n), int(c)) for n, c in self._live().parts()]

    def column(self, name: str) -> Any:
        """The reader of column `name` (``KeyError`` naming the columns)."""
        native = self._live()
        reader = self._readers.get(name)
        if reader is None:
            handle = native.column(name)
            kind = handle.schema()["kind"]
            cls: type[_ColumnDense] | type[_ColumnRagged] = (
                _ColumnDense if kind == "dense" else _ColumnRagged
            )
            reader = cls._make(handle, f"{self.path}[{name!r}]", True, False, False)
            reader._origin = (self.path, name, self._storage_options, self._max_open_parts)
            self._readers[name] = reader
        return reader

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self.column(key)
        return {name: self.column(name)[key] for name in self.columns}

    def __getitems__(self, idxs: Any) -> dict[str, Any]:
        """The batch at `idxs`: ``{column: batch}``."""
        return {name: self.column(name).__getitems__(idxs) for name in self.columns}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def loader_streams(self) -> dict[str, Any]:
        """``{column: reader}``: what ``DataLoader(col, ...)`` streams."""
        return {name: self.column(name) for name in self.columns}

    def verify(self) -> None:
        """Check every record of every part; raises the first problem."""
        for name in self.columns:
            self.column(name).verify()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its root (a spawned worker reopens it)."""
        self._live()
        return (open, (self.path, self._storage_options, self._max_open_parts))

    def __del__(self) -> None:
        # A reader taken from a collection (``open(root)["x"]``) outlives
        # it: it holds the native collection itself. Only close() closes.
        pass

    def close(self) -> None:
        """Release the collection and the readers it handed out. Idempotent."""
        readers = getattr(self, "_readers", {})
        for reader in readers.values():
            reader.close()
        readers.clear()
        self._native = None

    def __repr__(self) -> str:
        native = getattr(self, "_native", None)
        if native is None:
            return f"<Collection {self.path!r}: closed>"
        return (
            f"<Collection {self.path!r}: {len(native)} records, {len(native.parts())} parts, "
            f"columns {native.columns()}>"
        )
