"""``Ragged``: records of a fixed dtype and rank, each with its own shape;
and :class:`FlatRagged`, a reader's batches in flat form."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import _native
from .. import zrecord as _settings
from ..errors import _RECORD_SIZE, ZrecordError
from .args import DEFAULT_QUALITY, MAX_ITEM_LEN, _codec, _ndim, _quality
from .base import _Container
from .dlpack_in import as_array, is_producer
from .writing import Packed, _blocks, _flat_records, _pack, _pipelined


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
        storage_options: dict[str, Any] | None = None,
        staging_dir: str | os.PathLike[str] | None = None,
    ) -> Ragged:
        """A writer for a new store at `path`, a new or empty directory
        (:class:`ContainerExistsError`, a ``FileExistsError``, for a store
        or other files there), of arrays of `dtype` with `ndim` axes.

        Images of varying size: codec ``"jpeg"`` (at `quality`) or ``"png"``,
        ``uint8``, ``ndim=3``; each record an ``(h, w, 3)`` RGB array, or a
        file added as it is with :meth:`append_encoded`.

        `path` may be a URL whose prefix holds nothing yet: the store is
        staged locally and published at :meth:`close`, as
        :meth:`Dense.create` describes (`storage_options`, `staging_dir`)."""
        _codec(codec)
        q = _quality(quality)
        rank = _ndim(ndim)
        made = cls._create(
            path, dtype, (), rank, codec, dict_bytes, data_shards, storage_options, staging_dir
        )
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
        storage_options: dict[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
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
        (``"hwc"`` or ``"chw"``).

        `path` may be a URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
        ``abfs://``, ``http(s)://``, ``file://``): a read-only reader of a
        store in object storage, every record checked against its checksum,
        configured by `storage_options` (object_store's keys such as
        ``aws_endpoint``, and loaderx's ``timeout``, ``max_retries``,
        ``concurrency``, ...; see docs/REMOTE.md). `cache_dir` (or the
        environment variable ``LOADERX_CACHE_DIR``) keeps fetched blocks in a
        local directory several processes may share, at most `cache_bytes`
        (least recently used evicted first)."""
        return cls._open_with(
            path, writable, check_raw, quality, resize, layout, storage_options, cache_dir,
            cache_bytes,
        )

    def _describe(self) -> str:
        return f"{self.dtype.str}, ndim={self.ndim}"

    # --- writing ----------------------------------------------------------------------

    def _check(self, pos: int, record: Any, empty: bool) -> np.ndarray:
        if is_producer(record):
            record = as_array(record, f"record {pos}", self.dtype)
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
        # DLPack producers (PyTorch, JAX, DLTensor), whole or as records,
        # are viewed in place as NumPy arrays.
        if is_producer(records):
            records = as_array(records, "append's records", self.dtype)
        elif isinstance(records, (list, tuple)):
            records = [
                as_array(r, f"record {pos}", self.dtype) if is_producer(r) else r
                for pos, r in enumerate(records)
            ]
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
        behind = self._writes_behind(_settings.WRITE_BEHIND_AT_LEAST)
        if isinstance(records, (list, tuple)) and not self.is_image:
            # Every record a C-contiguous array of this dtype and rank, checked
            # in one native pass: a small list (or any, when not written
            # behind) is written now from the records' own memory; a list of
            # at most one block is copied into one buffer and written behind.
            # Else (None: nothing written) the checks below name the culprit;
            # a larger list is packed block by block.
            size = sum(r.nbytes for r in records if isinstance(r, np.ndarray)) if behind else 0
            if size < _settings.WRITE_BEHIND_AT_LEAST:
                args = (records, self.dtype, self.ndim, empty)
                if store.append_arrays(*args) is not None:
                    return
            elif behind and size <= _settings.WRITE_CHUNK_BYTES:
                packed = _native.Store.pack_arrays(records, self.dtype, self.ndim, empty)
                if packed is not None:
                    self._write_packed(store, packed, behind=True)
                    return
        if isinstance(records, (Sequence, np.ndarray)) and not isinstance(records, (str, bytes)):
            checked = [self._check(pos, r, empty) for pos, r in enumerate(records)]
            if sum(r.nbytes for r in checked) <= _settings.WRITE_CHUNK_BYTES:
                if checked:
                    self._write_packed(store, _pack(checked, self.dtype))
                return
            blocks = _blocks(checked, None, empty)
        else:
            blocks = _blocks(records, self._check, empty)
        if behind:
            for block in blocks:
                self._write_packed(store, _pack(block, self.dtype))
            return

        def write(packed: Packed) -> None:
            self._write_shaped(store, packed)

        _pipelined((_pack(b, self.dtype) for b in blocks), write)

    def _write_packed(
        self, store: _native.Store, packed: Packed, behind: bool | None = None
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

    def _write_shaped(self, store: _native.Store, packed: Packed) -> None:
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
        made = _flat_records(
            flat, offsets, shapes, self.dtype, self.ndim, self.path, self._writes_behind
        )
        if made is not None:
            self._write_packed(store, *made)

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
