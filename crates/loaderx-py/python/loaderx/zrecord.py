"""Typed containers, the loaderx 2.x API:
``from loaderx.zrecord import Dense, Ragged, ZrecordError``.

* :class:`Dense` holds records that are all one NumPy item of a fixed dtype
  and shape (``item_shape``; ``()`` for scalars). Reads come back stacked,
  ``(n, *item_shape)``.
* :class:`Ragged` holds records of a fixed dtype and rank (``ndim``), each
  with its own shape. A batch comes back as a list of arrays that are views
  into one allocation, or flat as ``(flat, offsets, shapes)``
  (:meth:`Ragged.gather_flat`).

``X.create(path, ...)`` makes a new store and returns a **writer** (append,
``len``, ``close``; ``close()`` publishes). ``X.open(path)`` returns a
**reader**; ``X.open(path, writable=True)`` a handle that reads, appends,
deletes and compacts. Reading from a writer or appending to a reader raises
:class:`ContainerModeError`, an :class:`io.UnsupportedOperation` (a
``ValueError``, as for a file opened in the other mode) that is also a
``RuntimeError`` (what loaderx 2.x raises); an operation on a closed
container raises :class:`ClosedError` (``ValueError`` and
``RuntimeError`` alike), and ``create`` on a path that holds a store or
other files :class:`ContainerExistsError` (``FileExistsError``, and
:class:`ZrecordError` -12 as in 2.x). An index out of range raises
:class:`ZrecordError` -3, which is also an ``IndexError``. Arguments of the
wrong type where 2.x raises ``ValueError`` raise
:class:`ArgumentTypeError`, a ``TypeError`` and a ``ValueError``.

Both are stored in format v2 (checksummed records, a schema block naming
dtype, shape and codec) by the Rust engine: the dtype names, codec names
and limits below come from it (``loaderx._native``).
"""

from __future__ import annotations

import operator
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Callable, TypeVar

import numpy as np

from . import _native
from ._handles import _OPEN, _Closing
from .errors import (
    _RECORD_SIZE,
    EXISTS,
    ArgumentTypeError,
    ClosedError,
    ContainerExistsError,
    ContainerModeError,
    ZrecordError,
    ZrecordIndexError,
)

#: The number element types a typed container stores, as NumPy
#: ``dtype.str``: bool, integers, floats and complex, in either byte order.
#: It also stores fixed-width bytes (``S``, ``V``) and Unicode (``U``) and
#: ``datetime64``/``timedelta64`` with a unit (:func:`stores_dtype`).
DTYPES: tuple[str, ...] = tuple(_native.DTYPES)


def stores_dtype(dtype: Any) -> bool:
    """Whether a typed container stores elements of `dtype` (anything
    ``np.dtype`` takes)."""
    try:
        _dtype(dtype)
    except (TypeError, ValueError):
        return False
    return True

#: Codec names a typed container accepts as ``codec=``, mapped to their tag.
CODECS: dict[str, int] = dict(_native.TYPED_CODECS)

#: Most dimensions of an item shape or of a ragged record.
MAX_NDIM: int = int(_native.MAX_NDIM)

#: Most ``data_shards`` (write lanes) a store may have.
MAX_SHARDS: int = int(_native.MAX_LANES)

#: Largest record, in bytes.
MAX_ITEM_LEN: int = int(_native.MAX_ITEM_LEN)

#: loaderx 2.x's names for :data:`MAX_SHARDS` and :data:`MAX_ITEM_LEN`
#: (the values are ours: at most 16 write lanes, records up to 2 GiB - 1).
MAX_DATA_SHARDS: int = MAX_SHARDS
MAX_RECORD_LEN: int = MAX_ITEM_LEN

#: Default bound on the source bytes handed to one append call (the rest of
#: a large array follows in further calls; packing of ragged records
#: overlaps with writing the previous block).
WRITE_CHUNK_BYTES = 64 << 20

#: A writer (from ``create``) of a compressing codec writes an append of at
#: least this many bytes behind its caller: the records are copied, the call
#: returns, and they are encoded and written on a helper thread while the
#: caller prepares the next ones. Smaller appends, raw and image stores, and
#: handles opened ``writable=True`` write before returning.
WRITE_BEHIND_AT_LEAST = 64 << 10

_T = TypeVar("_T", bound="_Container")


def _dtype(dtype: Any) -> np.dtype:
    """`dtype` as a stored element type, or ``ValueError``/``TypeError``
    naming why it cannot be one."""
    try:
        found = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype {dtype!r} is not a NumPy dtype: {exc}") from None
    if found.hasobject:
        raise ValueError(
            f"object dtypes cannot be stored (dtype {found} holds Python objects; a container "
            "stores plain numbers)"
        )
    if found.fields is not None:
        raise ValueError(
            f"structured dtypes are not supported (dtype {found}); store each field separately"
        )
    if found.subdtype is not None:
        raise ValueError(
            f"subarray dtypes are not supported (dtype {found}); put its dimensions in the shape"
        )
    if found.metadata:
        raise ValueError(f"dtype metadata is not supported (dtype {found} carries {found.metadata})")
    if found.itemsize == 0:
        raise ValueError(f"zero-itemsize dtypes cannot be stored (dtype {found.str})")
    if not _native.stores_dtype(found.str):
        why = (
            "a datetime64/timedelta64 needs a unit, e.g. datetime64[ns]"
            if found.kind in "mM"
            else f"a store holds numbers (one of {list(DTYPES)}), fixed-width bytes or text "
            "(S, V, U) and datetime64/timedelta64 with a unit"
        )
        raise ValueError(f"dtype {found.str} ({found}) cannot be stored: {why}")
    return found


def _shape(item_shape: Any) -> tuple[int, ...]:
    if isinstance(item_shape, (int, np.integer)) and not isinstance(item_shape, bool):
        item_shape = (item_shape,)
    try:
        given = tuple(item_shape)
    except TypeError:
        raise ArgumentTypeError(
            f"item_shape must be a tuple of integers, got {item_shape!r}"
        ) from None
    if any(isinstance(d, (bool, np.bool_)) for d in given):
        raise ArgumentTypeError(f"item_shape dimensions must be integers, got {given!r}")
    try:
        dims = tuple(operator.index(d) for d in given)
    except TypeError:
        raise ArgumentTypeError(f"item_shape dimensions must be integers, got {given!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"item_shape dimensions must be non-negative, got {dims}")
    if len(dims) > MAX_NDIM:
        raise ValueError(
            f"item_shape rank {len(dims)} is more than the {MAX_NDIM} dimensions a record may have"
        )
    return dims


def _codec(codec: Any) -> str:
    if not isinstance(codec, str) or codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}, expected one of {list(CODECS)}")
    return codec


def _dictionary(codec: str, dict_bytes: Any) -> bytes | None:
    needed = (
        "creating a zstd_dict store requires non-empty dict_bytes: train them with "
        "loaderx.utils.train_dict(sample_records)"
    )
    if dict_bytes is None:
        if codec == "zstd_dict":
            raise ValueError(needed)
        return None
    try:
        found = bytes(memoryview(dict_bytes))
    except TypeError:
        raise TypeError(f"dict_bytes must be bytes, got {type(dict_bytes).__name__}") from None
    if not found and codec == "zstd_dict":
        raise ValueError(f"{needed} (got 0 bytes)")
    return found


def _shards(data_shards: Any) -> int:
    if isinstance(data_shards, (bool, np.bool_)):
        raise ArgumentTypeError(f"data_shards must be an integer, got {data_shards!r}")
    try:
        count = operator.index(data_shards)
    except TypeError:
        raise ArgumentTypeError(f"data_shards must be an integer, got {data_shards!r}") from None
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"data_shards must be between 1 and {MAX_SHARDS}, got {count}")
    return count


#: Codecs whose records are encoded images (decoded to uint8 RGB on read).
IMAGE_CODECS: tuple[str, ...] = ("jpeg", "png")

#: JPEG quality used when none is given.
DEFAULT_QUALITY = 90


def _quality(quality: Any) -> int:
    if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)):
        raise TypeError(f"quality must be an integer between 1 and 100, got {quality!r}")
    if not 1 <= int(quality) <= 100:
        raise ValueError(f"quality must be between 1 and 100, got {int(quality)}")
    return int(quality)


def _size(resize: Any) -> tuple[int, int]:
    try:
        height, width = (operator.index(d) for d in resize)
    except (TypeError, ValueError):
        raise TypeError(f"resize must be (height, width), got {resize!r}") from None
    if not (1 <= height <= 65535 and 1 <= width <= 65535):
        raise ValueError(f"resize sides must be between 1 and 65535, got {(height, width)}")
    return height, width


def _pack_files(files: Iterable[Any]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Encoded files (bytes-like) in blocks of about ``WRITE_CHUNK_BYTES``:
    one buffer with the byte offset and length of each."""
    block: list[memoryview] = []
    size = 0

    def packed() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lens = np.fromiter((m.nbytes for m in block), dtype=np.uint64, count=len(block))
        offsets = np.zeros(len(block), dtype=np.uint64)
        np.cumsum(lens[:-1], out=offsets[1:])
        data = np.frombuffer(b"".join(block), dtype=np.uint8)
        return data, offsets, lens

    for pos, item in enumerate(files):
        if isinstance(item, str):
            raise TypeError(f"file {pos} is a str; pass the file's bytes (open(path, 'rb').read())")
        try:
            view = memoryview(item).cast("B")
        except TypeError:
            raise TypeError(
                f"file {pos} is a {type(item).__name__}, not bytes of a JPEG or PNG file"
            ) from None
        block.append(view)
        size += view.nbytes
        if size >= WRITE_CHUNK_BYTES:
            yield packed()
            block, size = [], 0
    if block:
        yield packed()


#: Largest dimension length of a ragged record (stored as a 32-bit length).
_MAX_DIM = 2**32 - 1


def _flat_dims(shapes: Any, n: int, ndim: int) -> np.ndarray:
    """`shapes` of :meth:`Ragged.append_flat` as an ``(n, ndim)`` int64
    array, every dimension within ``0..2^32 - 1``; ``ValueError`` naming
    the first that is not, checked on the values as given (a conversion
    could wrap them)."""
    # Not an array: its values as given (NumPy would make floats of
    # Python ints past int64 next to small ones).
    given = shapes if isinstance(shapes, np.ndarray) else np.array(shapes, dtype=object)
    if given.shape != (n, ndim):
        raise ValueError(f"shapes must be ({n}, {ndim}), found {given.shape}")
    values = given.reshape(-1)
    try:
        outside = np.flatnonzero((values < 0) | (values > _MAX_DIM))
    except TypeError:
        outside = np.zeros(0, dtype=np.intp)  # not numbers: the conversion names them
    if outside.size:
        record, axis = divmod(int(outside[0]), ndim)
        raise ValueError(
            f"record {record}: dimension {int(values[outside[0]])} (axis {axis}) is outside "
            f"0..{_MAX_DIM}, the largest length a dimension may have"
        )
    return np.asarray(given, dtype=np.int64)


def _pipelined(blocks: Iterator[Any], write: Callable[[Any], None]) -> None:
    """``write(block)`` for every block, in order, on a helper thread, while
    this thread produces the next block (packing ragged records overlaps with
    writing the previous ones; the writes release the GIL). The first error
    of either side is raised once the write in flight has finished."""
    failure: list[BaseException] = []

    def run(block: Any) -> None:
        try:
            write(block)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            failure.append(exc)

    worker: threading.Thread | None = None
    try:
        for block in blocks:
            if worker is not None:
                worker.join()
                worker = None
                if failure:
                    break
            worker = threading.Thread(target=run, args=(block,), name="loaderx-append")
            worker.start()
    finally:
        if worker is not None:
            worker.join()
    if failure:
        raise failure[0]


def _missing_dirs(path: str) -> list[str]:
    """`path` and those of its parents that do not exist, deepest first."""
    missing = []
    at = os.path.abspath(path)
    while not os.path.exists(at):
        missing.append(at)
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    return missing


def _remove_empty(dirs: list[str]) -> None:
    """Removes `dirs` (deepest first) while they are empty directories."""
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:
            return


def _reopen(cls: type[_T], path: str, check_raw: bool) -> _T:
    """Unpickles a reader."""
    return cls._open(path, False, check_raw)


def _memmap_of(array: np.ndarray) -> np.memmap | None:
    """The ``np.memmap`` that `array` is or views (following ``.base``:
    ``np.asarray`` of a map, or a slice of that, is a plain array), if any."""
    a: Any = array
    while isinstance(a, np.ndarray):
        if isinstance(a, np.memmap):
            return a
        a = a.base
    return None


#: Lets go of this process's pages of `block` once written, when `source`
#: is a memory-mapped file shared with the page cache (``np.load(...,
#: mmap_mode="r")``; see ``_native.release_mapped``).
_release_pages = _native.release_mapped


class _Container(_Closing):
    """What :class:`Dense` and :class:`Ragged` share: the handle, its mode,
    index parsing and maintenance."""

    _KIND = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Handles come from the class methods; loaderx 2.x refuses direct
        # construction with this TypeError.
        raise TypeError(f"use {type(self).__name__}.open(...) or {type(self).__name__}.create(...)")

    @classmethod
    def _make(
        cls: type[_T], store: _native.Store, path: str, readable: bool, writable: bool, editable: bool
    ) -> _T:
        """A handle on `store` (which it closes if `store` is not a `cls`)."""
        made = cls.__new__(cls)
        made._setup(store, path, readable, writable, editable)
        return made

    def _setup(
        self, store: _native.Store, path: str, readable: bool, writable: bool, editable: bool
    ) -> None:
        schema = store.schema()
        if schema is None or schema["kind"] != self._KIND:
            store.close()
            what = (
                "a format v1 byte store (use loaderx.Zrecord or Dataset)"
                if schema is None
                else (f"a {schema['kind']} container (use {schema['kind'].capitalize()}.open)")
            )
            raise ValueError(
                f"{path} holds {what}, not a {self._KIND} container: its schema fields do not "
                f"describe a {self._KIND} store"
            )
        self._store: _native.Store | None = store
        self.path = path
        self.dtype: np.dtype = np.dtype(schema["dtype"])
        self.codec: str = schema["codec"]
        #: Write lanes chosen at creation (``data_shards``), as in loaderx 2.x.
        self.data_shards: int = store.lanes()
        self._schema = schema
        self._readable = readable
        self._writable = writable
        self._editable = editable
        self._check_raw = False
        #: Whether records are encoded images (codec ``jpeg`` or ``png``).
        self.is_image: bool = self.codec in IMAGE_CODECS
        #: JPEG quality of appended arrays (``jpeg`` stores).
        self.quality: int = DEFAULT_QUALITY
        _OPEN.add(self)

    @classmethod
    def _open_with(
        cls,
        path: str | os.PathLike[str],
        writable: bool,
        check_raw: bool,
        quality: int,
        resize: tuple[int, int] | None,
        layout: str,
    ) -> Any:
        """What `Dense.open` and `Ragged.open` do: a reader or writer, or an
        :class:`Images` reader when `resize` is given."""
        if resize is not None:
            if writable:
                raise ValueError("resize gives a reader: it cannot be combined with writable=True")
            return cls._open(path, False, check_raw)._images(resize, layout)
        q = _quality(quality)
        opened = cls._open(path, writable, check_raw)
        opened.quality = q
        return opened

    @classmethod
    def _open(cls: type[_T], path: Any, writable: bool, check_raw: bool) -> _T:
        shown = os.fspath(path)
        if not isinstance(shown, str):
            shown = os.fsdecode(shown)
        if not os.path.isdir(shown) or not os.listdir(shown):
            raise FileNotFoundError(f"no {cls._KIND} container at {shown}")
        store = _native.Store.open_existing(shown, bool(writable), bool(check_raw))
        opened = cls._make(store, shown, True, bool(writable), bool(writable))
        opened._check_raw = bool(check_raw)
        return opened

    @classmethod
    def _create(
        cls: type[_T],
        path: Any,
        dtype: Any,
        shape: tuple[int, ...],
        ndim: int,
        codec: Any,
        dict_bytes: Any,
        data_shards: Any,
    ) -> _T:
        shown = os.fspath(path)
        if not isinstance(shown, str):
            shown = os.fsdecode(shown)
        codec = _codec(codec)
        found = _dtype(dtype)
        dictionary = _dictionary(codec, dict_bytes)
        lanes = _shards(data_shards)
        if (
            os.path.isdir(shown)
            and not os.path.exists(os.path.join(shown, "meta.zr"))
            and os.listdir(shown)
        ):
            raise ContainerExistsError(
                f"{shown} is a directory with other files in it: create a {cls.__name__} in a "
                f"new or empty directory"
            )
        made = _missing_dirs(shown)
        try:
            store = _native.Store.create_typed(
                shown, cls._KIND, found.str, list(shape), ndim, codec, dictionary, lanes
            )
        except FileExistsError as exc:
            raise ContainerExistsError(str(exc)) from None
        except BaseException:
            # A refused create leaves nothing behind: the directories it made.
            _remove_empty(made)
            raise
        return cls._make(store, shown, False, True, False)

    # --- the handle -------------------------------------------------------------------

    def _live(self) -> _native.Store:
        """The native store (which first waits for the write behind the last
        append, raising its error); :class:`ClosedError` once closed."""
        store = self._store
        if store is None:
            raise self._closed()
        return store

    def _closed(self) -> ClosedError:
        return ClosedError(f"operation on a closed {type(self).__name__} ({self.path})")

    def _reading(self) -> _native.Store:
        store = self._live()
        if not self._readable:
            raise ContainerModeError(
                f"this {type(self).__name__} at {self.path} is a writer: close it and read "
                f"with {type(self).__name__}.open(path)"
            )
        return store

    def _appending(self) -> _native.Store:
        store = self._live()
        if not self._writable:
            raise ContainerModeError(
                f"this {type(self).__name__} at {self.path} is a reader: append through the "
                f"writer from {type(self).__name__}.create, or open with writable=True"
            )
        return store

    def _editing(self, op: str) -> _native.Store:
        store = self._live()
        if not self._editable:
            raise ContainerModeError(
                f"cannot {op} {self.path}: open it with {type(self).__name__}.open(path, "
                f"writable=True) first"
            )
        return store

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._store is None

    @property
    def writer(self) -> bool:
        """Whether this handle only appends (made by ``create``)."""
        return not self._readable

    def __len__(self) -> int:
        return len(self._live())

    def __repr__(self) -> str:
        mode = "writer" if not self._readable else ("writable" if self._writable else "reader")
        state = "closed" if self._store is None else f"{len(self._store)} records"
        return (
            f"<{type(self).__name__} {mode} {self.path!r}: {self._describe()}, "
            f"codec={self.codec}, {state}>"
        )

    def _describe(self) -> str:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        """A reader pickles as its path (a PyTorch worker started by spawn
        reopens it there); writers do not pickle."""
        self._reading()
        if self._writable:
            raise TypeError(f"a writable {type(self).__name__} cannot be pickled; pickle a reader")
        return (_reopen, (type(self), self.path, self._check_raw))

    def close(self) -> None:
        """Publish what was appended and release the store. Idempotent;
        waits for the calls in flight. An append on another thread that
        races with it is either stored or raises :class:`ClosedError`."""
        store = getattr(self, "_store", None)
        if store is not None:
            self._store = None
            store.close()

    def sync(self) -> None:
        """Make everything appended so far durable and visible to handles
        opened from now on (``close()`` does it too)."""
        self._appending().sync()

    # --- write-behind -----------------------------------------------------------------

    def _writes_behind(self, nbytes: int) -> bool:
        """Whether an append of `nbytes` is written behind the caller."""
        return (
            not self._readable
            and self.codec != "raw"
            and not self.is_image
            and nbytes >= WRITE_BEHIND_AT_LEAST
        )

    def _owned(self, block: np.ndarray) -> np.ndarray:
        """A copy of `block` for a write behind the caller, into the buffer
        of a finished write when it is the same size (no fresh pages)."""
        spare = self._live().take_spare()
        if spare is not None and spare.nbytes == block.nbytes:
            out = spare.view(block.dtype).reshape(block.shape)
            np.copyto(out, block)
            return out
        return np.array(block, order="C", copy=True)

    # --- images -----------------------------------------------------------------------

    def _image_store(self, op: str) -> _native.Store:
        store = self._appending()
        if not self.is_image:
            raise ValueError(
                f"{op} needs an image store (codec 'jpeg' or 'png'); {self.path} has codec "
                f"{self.codec!r}"
            )
        return store

    def append_encoded(self, files: Iterable[Any]) -> None:
        """Add JPEG or PNG files as they are, no re-encoding: each item of
        `files` is one file's bytes. Each header is read (not the pixels)
        and checked: a :class:`Dense` store takes only images of its
        ``(H, W)``; a :class:`Ragged` store records each image's
        ``(h, w, 3)``. JPEG and PNG files may be mixed. Files are checked in
        blocks of about ``WRITE_CHUNK_BYTES``; a block with a bad file
        (``ZrecordError`` naming it) is not written."""
        store = self._image_store("append_encoded")
        if isinstance(files, (bytes, bytearray, memoryview, str)):
            raise TypeError("append_encoded takes an iterable of files (bytes), not one file")
        for data, offsets, lens in _pack_files(files):
            store.append_encoded(data, offsets, lens)

    def _images(self, resize: Any, layout: str) -> Images:
        if not self.is_image:
            self.close()
            raise ValueError(
                f"resize needs an image store (codec 'jpeg' or 'png'); {self.path} has codec "
                f"{self.codec!r}"
            )
        return Images(self, _size(resize), layout)

    # --- integrity and maintenance ----------------------------------------------------

    def verify(self) -> None:
        """Check every record and table entry against its checksum; raises
        ``ZrecordError`` (code -7) naming the first damaged record."""
        self._live().verify()

    def damaged(self) -> list[tuple[int, str]]:
        """Every damaged record as ``(index, reason)``; empty when healthy."""
        return [(int(i), str(why)) for i, why in self._live().damaged()]

    def delete(self, idxs: Any) -> None:
        """Remove records; the last records move into the holes so the
        indices stay ``0..len``. Needs ``open(path, writable=True)``."""
        self._editing("delete from").delete(idxs)

    def compact(self) -> None:
        """Reclaim the space deleted records left. Needs
        ``open(path, writable=True)``."""
        self._editing("compact").compact()

    def stats(self) -> dict[str, int]:
        """``records``, ``live_bytes``, ``chunk_bytes`` and ``reclaimable``."""
        records, live, chunk, reclaimable = self._live().stats()
        return {
            "records": records,
            "live_bytes": live,
            "chunk_bytes": chunk,
            "reclaimable": reclaimable,
        }

    def has_dict(self) -> bool:
        """Whether the store's records are compressed with a zstd dictionary
        (``codec="zstd_dict"``), as in loaderx 2.x."""
        return self.codec == "zstd_dict"

    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None:
        """How the native loader gathers this container (``DataLoader``);
        :class:`ContainerModeError` (a ``ValueError``) for a writer."""
        if not self._readable:
            raise ContainerModeError(
                f"stream {name!r} is a {type(self).__name__} writer ({self.path}); pass a reader "
                f"from {type(self).__name__}.open"
            )
        return None


class Dense(_Container):
    """Records that are each one item of ``dtype`` and ``item_shape``.

    ``Dense.create(path, dtype, item_shape, *, codec, ...)`` returns a
    writer; ``Dense.open(path)`` a reader: ``ds[i]`` is one record,
    ``ds[i, j, k]`` (several records), a list, an integer array, a slice
    or a boolean mask a stacked ``(n, *item_shape)`` array.
    """

    _KIND = "dense"

    def _setup(
        self, store: _native.Store, path: str, readable: bool, writable: bool, editable: bool
    ) -> None:
        super()._setup(store, path, readable, writable, editable)
        self.item_shape: tuple[int, ...] = tuple(int(d) for d in self._schema["shape"])
        #: The number of axes of a record (``len(item_shape)``), as in loaderx 2.x.
        self.ndim = len(self.item_shape)
        self._item_len = int(self._schema["item_len"])
        # What `_native.Store.get_dense` shapes and types a batch by.
        self._proto = np.empty((0, *self.item_shape), dtype=self.dtype)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dtype: Any,
        item_shape: Any,
        *,
        codec: str,
        dict_bytes: bytes | None = None,
        data_shards: int = 4,
        quality: int = DEFAULT_QUALITY,
    ) -> Dense:
        """A writer for a new store at `path`, a new or empty directory
        (:class:`ContainerExistsError`, a ``FileExistsError``, for a store
        or other files there). `codec` is ``"raw"``, ``"flate"``, ``"zstd"``,
        ``"lz4"`` or ``"zstd_dict"`` (with `dict_bytes` from
        :func:`loaderx.utils.train_dict`); `data_shards` write lanes.

        Images: with codec ``"jpeg"`` (at `quality`, 1-100) or ``"png"``,
        `dtype` is ``uint8`` and `item_shape` ``(H, W, 3)`` or ``(3, H, W)``;
        appended arrays are encoded (on the store's threads) and reads decode
        them back into that layout. :meth:`append_encoded` stores JPEG/PNG
        files as they are."""
        _codec(codec)
        q = _quality(quality)
        made = cls._create(path, dtype, _shape(item_shape), 0, codec, dict_bytes, data_shards)
        made.quality = q
        return made

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        writable: bool = False,
        *,
        check_raw: bool = False,
        quality: int = DEFAULT_QUALITY,
        resize: tuple[int, int] | None = None,
        layout: str = "hwc",
    ) -> Any:
        """A reader of the store at `path`; with ``writable=True`` it also
        appends, deletes and compacts. Reads check the checksum of every
        record of a store whose codec compresses (raw-kept records
        included); in a ``raw`` store ``check_raw=True`` checks raw records
        too (a second pass over their bytes). `quality`: JPEG quality of arrays
        appended through a writable handle.

        An image store opened with ``resize=(H, W)`` is an :class:`Images`
        reader instead: every image decoded, resized to cover ``H x W`` and
        centre-cropped to it, in `layout` (``"hwc"`` or ``"chw"``)."""
        return cls._open_with(path, writable, check_raw, quality, resize, layout)

    def _describe(self) -> str:
        return f"{self.dtype.str}{list(self.item_shape)}"

    def append(self, array: np.ndarray) -> None:
        """Add one record per slice of `array` along axis 0 (at least one:
        ``ValueError`` otherwise; a 0-d array on a scalar store is one); its
        dtype and ``shape[1:]`` must be ``dtype`` and ``item_shape`` exactly. The array
        is written from its own memory (no copy when C-contiguous), or, by a
        writer of a compressing codec, copied and written behind the call
        (``WRITE_BEHIND_AT_LEAST``): a write error is then raised by the next
        call on the writer (``append``, ``len``, ``sync`` or ``close``). An
        array that views a read-only memory map (``np.load(...,
        mmap_mode="r")``) is always written before the call returns, from
        the map."""
        store = self._appending()
        if not isinstance(array, np.ndarray):
            raise TypeError(f"append takes a NumPy array, got {type(array).__name__}")
        if array.ndim == 0 and self.item_shape == ():
            array = array.reshape(1)  # one scalar record, as loaderx 2.x takes it
        if array.dtype != self.dtype:
            raise ValueError(
                f"{self.path} holds {self.dtype.str} ({self.dtype}) records, found an array of "
                f"{array.dtype.str} ({array.dtype})"
            )
        if array.ndim != 1 + len(self.item_shape) or tuple(array.shape[1:]) != self.item_shape:
            expected = "".join(f", {d}" for d in self.item_shape)
            raise ValueError(
                f"{self.path} holds records of shape {self.item_shape}: expected an array of "
                f"shape (n{expected}), found {tuple(array.shape)}"
            )
        if array.shape[0] == 0:
            raise ValueError(
                f"append needs at least one record: found an array of shape {tuple(array.shape)}"
            )
        step = max(1, WRITE_CHUNK_BYTES // self._item_len)
        no_dims = np.zeros(0, dtype=np.uint32)
        mapped = _memmap_of(array)
        source = array if mapped is None else mapped
        # A read-only map (``np.load(..., mmap_mode="r")``) is written now,
        # from the map, never behind the call: behind it, the write would
        # need a copy (the file may change once append returns, and a file
        # cut short under a map is a SIGBUS), and the copy into fresh
        # memory costs more than the overlap saves (a 574 MiB zstd append
        # of 147 KiB records, until durable: 3.2 s with copies written
        # behind, 2.6 s written now from the map).
        read_only_map = mapped is not None and mapped.mode == "r"
        if self._writes_behind(array.nbytes) and not read_only_map:
            for start in range(0, array.shape[0], step):
                block = array[start : start + step]
                owned = self._owned(block)
                _release_pages(source, block)
                store.append_dense_behind(owned.reshape(-1).view(np.uint8), owned.shape[0])
            return
        for start in range(0, array.shape[0], step):
            block = array[start : start + step]
            if not block.flags.c_contiguous:
                block = np.ascontiguousarray(block)
            flat = block.reshape(-1).view(np.uint8)
            if self.is_image:
                n = block.shape[0]
                lens = np.full(n, self._item_len, dtype=np.uint64)
                offsets = np.arange(n, dtype=np.uint64) * np.uint64(self._item_len)
                store.append_images(flat, offsets, lens, no_dims, self.quality)
            else:
                store.append_dense(flat, block.shape[0])
            _release_pages(source, block)

    def __getitem__(self, idx: Any) -> Any:
        """One record for an integer (negative counts from the end); a
        stacked ``(n, *item_shape)`` array for anything else."""
        # What `_reading()` checks, inline for an open reader with no write
        # in flight (a batch of 256 labels costs about as much as these
        # calls did).
        store = self._store
        if store is None or not self._readable:
            store = self._reading()
        return store.get_dense(idx, self._proto)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        """The batch ``(n, *item_shape)`` at `idxs` (PyTorch's batch hook)."""
        return self._reading().get_dense(idxs, self._proto, True)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None:
        super().native_stream(name)
        return (name, self._reading(), self._item_len)

    def native_batch(self, data: np.ndarray, offsets: np.ndarray | None) -> np.ndarray:
        """A gathered column as ``(n, *item_shape)`` (no copy)."""
        return data.view(self.dtype).reshape((-1, *self.item_shape))


class Ragged(_Container):
    """Records of ``dtype`` and rank ``ndim``, each with its own shape.

    ``Ragged.create(path, dtype, ndim, *, codec, ...)`` returns a writer;
    ``Ragged.open(path)`` a reader: ``rg[i]`` is one array, any other index
    a list of arrays that are views into one allocation.
    """

    _KIND = "ragged"

    def _setup(
        self, store: _native.Store, path: str, readable: bool, writable: bool, editable: bool
    ) -> None:
        super()._setup(store, path, readable, writable, editable)
        self.ndim: int = int(self._schema["ndim"])

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dtype: Any,
        ndim: int,
        *,
        codec: str,
        dict_bytes: bytes | None = None,
        data_shards: int = 4,
        quality: int = DEFAULT_QUALITY,
    ) -> Ragged:
        """A writer for a new store at `path`, a new or empty directory
        (:class:`ContainerExistsError`, a ``FileExistsError``, for a store
        or other files there), of arrays of `dtype` with `ndim` axes.

        Images of varying size: codec ``"jpeg"`` (at `quality`) or ``"png"``,
        ``uint8``, ``ndim=3``; each record an ``(h, w, 3)`` RGB array, or a
        file added as it is with :meth:`append_encoded`."""
        _codec(codec)
        q = _quality(quality)
        if isinstance(ndim, (bool, np.bool_)):
            raise ArgumentTypeError(f"ndim must be an integer, got {ndim!r}")
        try:
            rank = operator.index(ndim)
        except TypeError:
            raise ArgumentTypeError(f"ndim must be an integer, got {ndim!r}") from None
        if not 1 <= rank <= MAX_NDIM:
            raise ValueError(f"ndim must be between 1 and {MAX_NDIM}, got {rank}")
        made = cls._create(path, dtype, (), rank, codec, dict_bytes, data_shards)
        made.quality = q
        return made

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        writable: bool = False,
        *,
        check_raw: bool = False,
        quality: int = DEFAULT_QUALITY,
        resize: tuple[int, int] | None = None,
        layout: str = "hwc",
    ) -> Any:
        """A reader of the store at `path`; with ``writable=True`` it also
        appends, deletes and compacts. Reads check the checksum of every
        record of a store whose codec compresses (raw-kept records
        included); in a ``raw`` store ``check_raw=True`` checks raw records
        too (a second pass over their bytes). `quality`: JPEG quality of arrays
        appended through a writable handle.

        An image store opened with ``resize=(H, W)`` is an :class:`Images`
        reader: a fixed-shape, stacked view where every image is decoded,
        resized to cover ``H x W`` and centre-cropped to it, in `layout`
        (``"hwc"`` or ``"chw"``)."""
        return cls._open_with(path, writable, check_raw, quality, resize, layout)

    def _describe(self) -> str:
        return f"{self.dtype.str}, ndim={self.ndim}"

    # --- writing ----------------------------------------------------------------------

    def _check(self, pos: int, record: Any, empty: bool) -> np.ndarray:
        if not isinstance(record, np.ndarray):
            raise TypeError(f"record {pos} is a {type(record).__name__}, not a NumPy array")
        if record.dtype != self.dtype:
            raise ValueError(
                f"record {pos}: {self.path} holds {self.dtype.str} ({self.dtype}) arrays, found "
                f"{record.dtype.str} ({record.dtype})"
            )
        if record.ndim != self.ndim:
            raise ValueError(
                f"record {pos}: {self.path} holds arrays of {self.ndim} dimensions, found "
                f"{record.ndim} (shape {tuple(record.shape)})"
            )
        if record.nbytes > MAX_ITEM_LEN:
            raise ZrecordError(
                _RECORD_SIZE,
                f"record {pos} is {record.nbytes} bytes, over the {MAX_ITEM_LEN}-byte record limit",
            )
        if record.size == 0 and not empty:
            raise ValueError(
                f"record {pos}: empty records are not stored — a record must be non-empty "
                f"(found shape {tuple(record.shape)}; append_flat stores empty records)"
            )
        return record

    def _blocks(
        self, records: Iterable[Any], checked: bool, empty: bool
    ) -> Iterator[list[np.ndarray]]:
        """Records (checked here unless `checked`) in blocks of about
        ``WRITE_CHUNK_BYTES``."""
        block: list[np.ndarray] = []
        size = 0
        pos = -1
        for pos, record in enumerate(records):
            if not checked:
                record = self._check(pos, record, empty)
            block.append(record)
            size += record.nbytes
            if size >= WRITE_CHUNK_BYTES:
                yield block
                block, size = [], 0
        if block:
            yield block
        if pos < 0 and not empty:
            raise ValueError("append needs at least one record: the iterable yielded none")

    def _pack(self, block: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        """One buffer holding `block` back to back, with the byte offset,
        length and dimensions of each record."""
        lens = np.fromiter((r.nbytes for r in block), dtype=np.uint64, count=len(block))
        offsets = np.zeros(len(block), dtype=np.uint64)
        np.cumsum(lens[:-1], out=offsets[1:])
        dims = np.array([r.shape for r in block], dtype=np.uint32).reshape(-1)
        data = np.empty(int(lens.sum()), dtype=np.uint8)
        items = data.view(self.dtype)
        at = 0
        for record in block:
            n = record.size
            np.copyto(items[at : at + n].reshape(record.shape), record)
            at += n
        return data, offsets, lens, dims

    def append(self, records: Iterable[np.ndarray]) -> None:
        """Add each array of `records` as one record: dtype ``dtype``, ``ndim``
        axes of any lengths, at least one element (an empty array is refused
        with ``ValueError``, as by loaderx 2.x; :meth:`append_flat` stores
        empty records). A NumPy array is the iterable of its rows (one
        record each), and a call with no records is a ``ValueError``.

        A list or tuple is checked whole before anything is written, so a bad
        record leaves the store unchanged; from any other iterable, records
        are checked block by block (about ``WRITE_CHUNK_BYTES`` each) and the
        blocks before a bad record stay appended.

        A writer of a compressing codec copies the records and writes them
        behind the call (``WRITE_BEHIND_AT_LEAST``): a write error is then
        raised by the next call on the writer (``append``, ``len``, ``sync``
        or ``close``)."""
        self._append(records, empty=False)

    def _append(self, records: Iterable[np.ndarray], empty: bool) -> None:
        """:meth:`append`; when `empty` (the converters, which keep row ``i``
        as record ``i``), empty records are stored and no records at all is
        no append."""
        store = self._appending()
        if isinstance(records, np.ndarray):
            if records.ndim == 0:
                raise TypeError(
                    "append takes an iterable of arrays (one per record), got a 0-d array"
                )
            # Its rows, one record each (1-D: 0-d rows, refused for their
            # rank; an object array: its items, checked as given).
            if records.ndim > 1 or records.dtype == np.object_:
                records = list(records)
            else:
                records = [np.asarray(r) for r in records]
        if (
            not empty
            and isinstance(records, Sequence)
            and not isinstance(records, (str, bytes))
            and len(records) == 0
        ):
            raise ValueError("append needs at least one record: found an empty sequence")
        behind = self._writes_behind(WRITE_BEHIND_AT_LEAST)
        if isinstance(records, (list, tuple)) and not self.is_image:
            # Every record a C-contiguous array of this dtype and rank, checked
            # in one native pass: a small list (or any, when not written
            # behind) is written now from the records' own memory; a list of
            # at most one block is copied into one buffer and written behind.
            # Else (None: nothing written) the checks below name the culprit;
            # a larger list is packed block by block.
            size = sum(r.nbytes for r in records if isinstance(r, np.ndarray)) if behind else 0
            if size < WRITE_BEHIND_AT_LEAST:
                args = (records, self.dtype, self.ndim, empty)
                if store.append_arrays(*args) is not None:
                    return
            elif behind and size <= WRITE_CHUNK_BYTES:
                packed = _native.Store.pack_arrays(records, self.dtype, self.ndim, empty)
                if packed is not None:
                    self._write_packed(store, packed, behind=True)
                    return
        if isinstance(records, (Sequence, np.ndarray)) and not isinstance(records, (str, bytes)):
            checked = [self._check(pos, r, empty) for pos, r in enumerate(records)]
            if sum(r.nbytes for r in checked) <= WRITE_CHUNK_BYTES:
                if checked:
                    self._write_packed(store, self._pack(checked))
                return
            blocks = self._blocks(checked, checked=True, empty=empty)
        else:
            blocks = self._blocks(records, checked=False, empty=empty)
        if behind:
            for block in blocks:
                self._write_packed(store, self._pack(block))
            return

        def write(packed: tuple[np.ndarray, ...]) -> None:
            self._write_shaped(store, packed)

        _pipelined((self._pack(b) for b in blocks), write)

    def _write_packed(
        self, store: _native.Store, packed: tuple[np.ndarray, ...], behind: bool | None = None
    ) -> None:
        """Writes records packed into arrays this handle owns: behind the
        call when `behind` (by default: when large enough, see
        `_writes_behind`), else now."""
        if behind is None:
            behind = self._writes_behind(packed[0].nbytes)
        if behind:
            store.append_shaped_behind(*packed)
        else:
            self._write_shaped(store, packed)

    def _write_shaped(self, store: _native.Store, packed: tuple[np.ndarray, ...]) -> None:
        if self.is_image:
            store.append_images(*packed, self.quality)
        else:
            store.append_shaped(*packed)

    def append_flat(
        self, flat: np.ndarray, offsets: Any, shapes: Any = None
    ) -> None:
        """Add records given back to back, the form :meth:`gather_flat`
        returns: record ``i`` is ``flat[offsets[i]:offsets[i + 1]]``
        reshaped to ``shapes[i]`` (`offsets`: ``n + 1`` non-decreasing
        element offsets into the 1-D ``dtype`` array `flat`; `shapes`:
        ``(n, ndim)``, may be left out when ``ndim == 1``). One native call
        for the whole batch, no per-record arrays: the fast path for Arrow
        list columns. Everything is checked before anything is written. A
        writer of a compressing codec copies the values and writes them
        behind the call, as :meth:`append` does."""
        store = self._appending()
        if not isinstance(flat, np.ndarray) or flat.ndim != 1:
            raise TypeError("flat must be a 1-D NumPy array")
        if flat.dtype != self.dtype:
            raise ValueError(
                f"{self.path} holds {self.dtype.str} ({self.dtype}) records, found flat "
                f"{flat.dtype.str} ({flat.dtype})"
            )
        bounds = np.asarray(offsets)
        if bounds.ndim != 1 or bounds.dtype.kind not in "iu":
            raise TypeError("offsets must be a 1-D integer array of n + 1 element offsets")
        if bounds.size == 0:
            raise ValueError(
                "offsets must hold n + 1 element offsets (at least one: where record 0 "
                "starts), found an empty array"
            )
        # Range first, on the values as given (a uint64 past int64 would
        # wrap to a negative one in the cast below).
        outside = np.flatnonzero((bounds < 0) | (bounds > flat.size))
        if outside.size:
            at = int(outside[0])
            raise ValueError(
                f"offsets must be non-decreasing within 0..{flat.size} (the length of flat), "
                f"found offsets[{at}] = {int(bounds[at])}, outside 0..{flat.size}"
            )
        bounds = bounds.astype(np.int64)
        n = bounds.size - 1
        if n == 0:
            return
        lens = np.diff(bounds)
        if (lens < 0).any():
            at = int(np.flatnonzero(lens < 0)[0])
            raise ValueError(
                f"offsets must be non-decreasing within 0..{flat.size}, found "
                f"offsets[{at + 1}] = {int(bounds[at + 1])} is below offsets[{at}] = "
                f"{int(bounds[at])}"
            )
        if shapes is None:
            if self.ndim != 1:
                raise ValueError(f"{self.path} holds {self.ndim}-axis records: pass shapes")
            dims = lens.reshape(n, 1)
        else:
            dims = _flat_dims(shapes, n, self.ndim)
            # The int64 product may wrap; the float one says when it could
            # have (a length is at most flat.size, far below 2^62).
            wrong = dims.prod(axis=1) != lens
            wrong |= dims.astype(np.float64).prod(axis=1) > 2.0**62
            if wrong.any():
                bad = int(np.flatnonzero(wrong)[0])
                raise ValueError(
                    f"record {bad}: shape {tuple(dims[bad].tolist())} does not hold its "
                    f"{int(lens[bad])} elements"
                )
        itemsize = self.dtype.itemsize
        if int(lens.max()) * itemsize > MAX_ITEM_LEN:
            big = int(np.argmax(lens))
            raise ZrecordError(
                _RECORD_SIZE,
                f"record {big} is {int(lens[big]) * itemsize} bytes, over the "
                f"{MAX_ITEM_LEN}-byte record limit",
            )
        start, stop = int(bounds[0]), int(bounds[-1])
        nbytes = (stop - start) * itemsize
        # Behind the call (at most one block, so the copy stays bounded): a
        # copy of the values, as the caller's buffer may change as soon as
        # this returns; the other arrays are new anyway.
        behind = self._writes_behind(nbytes) and nbytes <= WRITE_CHUNK_BYTES
        values = flat[start:stop]
        data = (np.array(values, copy=True) if behind else np.ascontiguousarray(values)).view(
            np.uint8
        )
        byte_offsets = ((bounds[:-1] - start) * itemsize).astype(np.uint64)
        byte_lens = (lens * itemsize).astype(np.uint64)
        packed = (data, byte_offsets, byte_lens, dims.astype(np.uint32).reshape(-1))
        self._write_packed(store, packed, behind)

    # --- reading ----------------------------------------------------------------------

    @staticmethod
    def _views(flat: np.ndarray, offsets: np.ndarray, shapes: np.ndarray) -> list[np.ndarray]:
        bounds = offsets.tolist()
        if shapes.shape[1] == 1:  # one axis: a slice is already the record
            return [flat[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
        return [
            flat[lo:hi].reshape(shape)
            for lo, hi, shape in zip(bounds, bounds[1:], map(tuple, shapes.tolist()))
        ]

    def gather_flat(self, idxs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The records at `idxs` as ``(flat, offsets, shapes)``: `flat` a 1-D
        ``dtype`` array holding them back to back, record ``i`` being
        ``flat[offsets[i]:offsets[i + 1]].reshape(shapes[i])`` (`offsets`
        int64, ``n + 1`` element offsets; `shapes` int64 ``(n, ndim)``)."""
        flat, offsets, shapes, _ = self._reading().get_ragged(idxs, self.dtype, True)
        return flat, offsets, shapes

    def shapes(self, idxs: Any) -> np.ndarray:
        """The shape of each record at `idxs`, ``(n, ndim)`` int64, without
        reading the records."""
        return self._reading().shapes(idxs)

    def __getitem__(self, idx: Any) -> Any:
        """One array for an integer (negative counts from the end); a list
        of arrays, views into one allocation, for anything else."""
        flat, offsets, shapes, one = self._reading().get_ragged(idx, self.dtype)
        views = self._views(flat, offsets, shapes)
        return views[0] if one else views

    def __getitems__(self, idxs: Any) -> list[np.ndarray]:
        """The records at `idxs`, a list of views into one allocation."""
        return self._views(*self.gather_flat(idxs))

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None:
        """``(name, native store, 0)``: the native loader gathers the
        records' bytes; :meth:`native_indexed_batch` gives them their
        shapes."""
        super().native_stream(name)
        return (name, self._reading(), 0)

    def native_indexed_batch(
        self, data: np.ndarray, offsets: np.ndarray | None, idxs: np.ndarray
    ) -> list[np.ndarray]:
        """A gathered column (records `idxs`, back to back in `data` at the
        byte `offsets`) as a list of views into its buffer, each of its
        record's shape. One-axis records are shaped by their length; others
        by their dimensions, read from the store (they cannot change while
        this reader is open: deletes need every other handle closed)."""
        assert offsets is not None  # the loader gives offsets for every ragged stream
        items = data.view(self.dtype)
        bounds = (offsets // self.dtype.itemsize).tolist()
        if self.ndim == 1:
            return [items[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
        shapes = self._reading().shapes(idxs).tolist()
        return [items[lo:hi].reshape(shape) for lo, hi, shape in zip(bounds, bounds[1:], shapes)]

    def flat(self) -> FlatRagged:
        """This reader as a ``DataLoader`` stream whose batches come in the
        flat form of :meth:`gather_flat`, ``(flat, offsets, shapes)``: no
        per-record array objects at all, for consumers that take packed
        sequences (attention masks from offsets, ``torch.nested``, ...)."""
        self._reading()
        return FlatRagged(self)

    def flat_batch(
        self, data: np.ndarray, offsets: np.ndarray | None, idxs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A gathered column (records `idxs` back to back in `data` at the
        byte `offsets`) in the flat form: ``(flat, offsets, shapes)``, with
        no copy of the records."""
        assert offsets is not None  # the loader gives offsets for every ragged stream
        flat = data.view(self.dtype)
        elements = (offsets // self.dtype.itemsize).astype(np.int64)
        if self.ndim == 1:
            shapes = np.diff(elements).reshape(-1, 1)
        else:
            shapes = self._reading().shapes(idxs)
        return flat, elements, shapes


class Images(_Closing):
    """Images of an image store (codec ``jpeg`` or ``png``, dense or
    ragged) read at one fixed size: ``Dense.open(path, resize=(H, W))`` or
    ``Ragged.open(path, resize=(H, W))``.

    Every image is decoded in the store's Rust threads (the GIL released),
    resized keeping its aspect ratio so it covers ``H x W`` (a triangle
    filter: bilinear when enlarging, an area-weighted average when
    shrinking), centre-cropped to ``H x W`` and written straight into the
    batch. ``im[i]`` is one ``uint8`` array of :attr:`item_shape`
    (``(H, W, 3)`` for ``layout="hwc"``, ``(3, H, W)`` for ``"chw"``); any
    other index a stacked ``(n, *item_shape)`` array. A ``DataLoader``
    stream like any other (batches through :meth:`__getitems__`)."""

    def __init__(self, source: _Container, size: tuple[int, int], layout: str) -> None:
        if layout not in ("hwc", "chw"):
            source.close()
            raise ValueError(f"layout must be 'hwc' or 'chw', got {layout!r}")
        self._source = source
        self.path = source.path
        self.height, self.width = size
        self.layout = layout
        self.dtype = np.dtype(np.uint8)
        self.item_shape: tuple[int, ...] = (
            (self.height, self.width, 3) if layout == "hwc" else (3, self.height, self.width)
        )
        _OPEN.add(self)

    def __len__(self) -> int:
        return len(self._source)

    def __repr__(self) -> str:
        return (
            f"<Images reader {self.path!r}: {self.layout} {list(self.item_shape)}, "
            f"codec={self._source.codec}, {'closed' if self.closed else f'{len(self)} records'}>"
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._source.closed

    def close(self) -> None:
        """Release the store. Idempotent."""
        source = getattr(self, "_source", None)
        if source is not None:
            source.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _reopen_images,
            (type(self._source), self.path, (self.height, self.width), self.layout),
        )

    def __getitem__(self, idx: Any) -> np.ndarray:
        store = self._source._reading()
        return store.get_images(idx, self.height, self.width, self.layout)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        """The batch ``(n, *item_shape)`` at `idxs`."""
        store = self._source._reading()
        return store.get_images(idxs, self.height, self.width, self.layout, True)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]


def _reopen_images(
    cls: type[_Container], path: str, size: tuple[int, int], layout: str
) -> Images:
    """Unpickles an :class:`Images` reader."""
    return cls._open(path, False, False)._images(size, layout)


class FlatRagged:
    """A :class:`Ragged` reader seen as a ``DataLoader`` stream of flat
    batches, ``(flat, offsets, shapes)`` (from :meth:`Ragged.flat`)."""

    def __init__(self, ragged: Ragged) -> None:
        self._ragged = ragged

    def __len__(self) -> int:
        return len(self._ragged)

    def __getitems__(self, idxs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._ragged.gather_flat(idxs)

    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None:
        return self._ragged.native_stream(name)

    def native_indexed_batch(
        self, data: np.ndarray, offsets: np.ndarray | None, idxs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._ragged.flat_batch(data, offsets, idxs)


__all__ = [
    "ArgumentTypeError",
    "CODECS",
    "ClosedError",
    "ContainerExistsError",
    "ContainerModeError",
    "DEFAULT_QUALITY",
    "DTYPES",
    "Dense",
    "EXISTS",
    "FlatRagged",
    "IMAGE_CODECS",
    "Images",
    "MAX_DATA_SHARDS",
    "MAX_ITEM_LEN",
    "MAX_NDIM",
    "MAX_RECORD_LEN",
    "MAX_SHARDS",
    "Ragged",
    "WRITE_BEHIND_AT_LEAST",
    "WRITE_CHUNK_BYTES",
    "ZrecordError",
    "ZrecordIndexError",
    "stores_dtype",
]
