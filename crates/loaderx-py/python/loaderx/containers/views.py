"""The loaderx 2.8 API of the typed containers: writers that only create,
stores opened unbound, and placement views that read into DLPack results.

* ``DenseWriter(path, dtype, item_shape, *, codec, dict_bytes=None,
  data_shards=4)`` / ``RaggedWriter(path, dtype, ndim, *, codec, ...)``
  create a store at a new path; ``append`` takes a DLPack producer (NumPy,
  PyTorch, JAX, a ``DLTensor`` or ``RaggedBatch`` read from another store)
  or a read-only CPU buffer (a NumPy memory map), without copying it;
  ``close`` publishes. A writer cannot be read.
* ``DenseStore(path)`` / ``RaggedStore(path)`` open a store read-only and
  unbound: indexing one is refused; ``store.bind(allocator)`` returns a
  :class:`DenseView` / :class:`RaggedView` that owns the index API. Closing
  the store invalidates its views (their reads raise ``RuntimeError``);
  results already read stay valid (each keeps its own buffer alive).
* Reads return :class:`DLTensor` (``loaderx._native.DLTensor``: DLPack 1.x
  and legacy capsules, zero-copy into NumPy, PyTorch and JAX) and
  :class:`RaggedBatch` (``values``, ``int32`` ``cu_seqlens``, ``uint32``
  ``shapes``).

Built on the containers of :mod:`loaderx.zrecord` (``Dense``, ``Ragged``):
same engine, same stores.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import _native
from ..allocator import Allocation, Allocator
from ..dtypes import from_store_name
from .dense import Dense
from .dlpack_in import as_array
from .ragged import Ragged
from .ragged_batch import RaggedBatch

DLTensor = _native.DLTensor

#: Codecs of the 2.8 API.
CODECS_28 = ("raw", "zstd", "zstd_dict")


def _cpu_array(producer: Any, what: str, dtype: np.dtype | None = None) -> np.ndarray:
    return as_array(producer, what, dtype)


def _indices(idx: Any, length: int) -> tuple[np.ndarray, bool]:
    """The record positions `idx` selects and whether it is one integer."""
    if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
        idxs = np.array([int(idx)])
        one = True
    elif isinstance(idx, slice):
        return np.arange(*idx.indices(length), dtype=np.int64), False
    else:
        idxs = np.asarray(idx)
        one = False
        if idxs.dtype == np.bool_:
            if idxs.ndim != 1 or idxs.size != length:
                raise IndexError(f"boolean mask must be one-dimensional with length {length}")
            return np.flatnonzero(idxs), False
        if idxs.size and idxs.dtype.kind not in "iu":
            raise TypeError("indices must be integers or a bool mask")
        idxs = idxs.reshape(-1)
    if idxs.size and (int(idxs.min()) < 0 or int(idxs.max()) >= length):
        raise IndexError(f"record index out of range for container of length {length}")
    return idxs.astype(np.int64, copy=False), one


class _Writer:
    _container: type[Dense] | type[Ragged]

    def __init__(self) -> None:
        self._w: Any = None

    def _make(self, path: Any, dtype: Any, shape: Any, ndim: Any, codec: Any, dict_bytes: Any,
              data_shards: Any) -> None:  # fmt: skip
        if not isinstance(codec, str) or codec not in CODECS_28:
            raise ValueError(f"unknown codec {codec!r}, expected one of {sorted(CODECS_28)}")
        if codec == "zstd_dict" and not dict_bytes:
            raise ValueError(
                "creating a zstd_dict store requires non-empty dict_bytes from train_dict"
            )
        if codec != "zstd_dict" and dict_bytes is not None:
            raise ValueError("dict_bytes requires codec='zstd_dict'")
        self.path = os.fspath(path)
        if os.path.exists(self.path):
            raise FileExistsError(f"{self.path} exists: a writer creates a new store")
        if self._container is Dense:
            self._w = Dense.create(
                path, dtype, shape, codec=codec, dict_bytes=dict_bytes, data_shards=data_shards
            )
        else:
            self._w = Ragged.create(
                path, dtype, ndim, codec=codec, dict_bytes=dict_bytes, data_shards=data_shards
            )
        self.dtype: np.dtype = self._w.dtype
        self.codec = codec
        self.data_shards = self._w.data_shards

    def _live(self) -> Any:
        if self._w is None:
            raise RuntimeError(f"operation on a closed {type(self).__name__} ({self.path})")
        return self._w

    def __len__(self) -> int:
        return len(self._live())

    def __getitem__(self, idx: Any) -> Any:
        raise RuntimeError("read requires a Store, not a Writer")

    def __getitems__(self, idxs: Any) -> Any:
        raise RuntimeError("read requires a Store, not a Writer")

    def close(self) -> None:
        """Publishes the store (idempotent)."""
        w, self._w = self._w, None
        if w is not None:
            w.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DenseWriter(_Writer):
    """Creates a dense store (every record one ``item_shape`` array)."""

    _container = Dense

    def __init__(self, path: Any, dtype: Any, item_shape: Any, *, codec: str,
                 dict_bytes: bytes | None = None, data_shards: int = 4) -> None:  # fmt: skip
        super().__init__()
        self._make(path, dtype, item_shape, None, codec, dict_bytes, data_shards)
        self.item_shape: tuple[int, ...] = self._w.item_shape

    def append(self, batch: Any) -> None:
        """Appends ``batch``, shaped ``(n, *item_shape)`` of the store dtype,
        C-contiguous, from its own memory; returns once it is written."""
        w = self._live()
        array = _cpu_array(batch, "a dense batch", self.dtype)
        if array.dtype != self.dtype:
            raise ValueError(f"dense batch dtype {array.dtype} != store dtype {self.dtype}")
        if array.ndim != len(self.item_shape) + 1 or array.shape[1:] != self.item_shape:
            raise ValueError(
                f"dense batch shape {array.shape} != (batch_size, *{self.item_shape})"
            )
        if array.shape[0] == 0:
            raise ValueError("dense batch needs at least one record")
        if not array.flags.c_contiguous:
            raise ValueError("dense append requires a contiguous tensor batch")
        w.append(array)
        w.sync()


class RaggedWriter(_Writer):
    """Creates a ragged store (records of one dtype and rank ``ndim``)."""

    _container = Ragged

    def __init__(self, path: Any, dtype: Any, ndim: int, *, codec: str,
                 dict_bytes: bytes | None = None, data_shards: int = 4) -> None:  # fmt: skip
        if isinstance(ndim, bool) or operator.index(ndim) < 1:
            raise ValueError(f"a ragged store has ndim >= 1, got {ndim!r}")
        super().__init__()
        self._make(path, dtype, None, ndim, codec, dict_bytes, data_shards)
        self.ndim: int = self._w.ndim

    def append(self, batch: RaggedBatch) -> None:
        """Appends a :class:`RaggedBatch` (each field a DLPack producer, read
        in place); returns once it is written."""
        w = self._live()
        if not isinstance(batch, RaggedBatch):
            raise TypeError(
                f"RaggedWriter.append takes a RaggedBatch, got {type(batch).__name__} "
                "(RaggedBatch.from_records packs arrays)"
            )
        values = _cpu_array(batch.values, "values", self.dtype)
        cu = _cpu_array(batch.cu_seqlens, "cu_seqlens")
        shapes = _cpu_array(batch.shapes, "shapes")
        if values.ndim != 1 or values.dtype != self.dtype:
            raise ValueError(f"values must be 1-D {self.dtype}, got {values.dtype}{values.shape}")
        if cu.dtype != np.int32 or cu.ndim != 1 or cu.size < 2:
            raise ValueError("cu_seqlens must be int32[batch_size + 1] with batch_size >= 1")
        n = cu.size - 1
        if shapes.dtype != np.uint32 or shapes.shape != (n, self.ndim):
            raise ValueError(f"shapes must be uint32[{n}, {self.ndim}], got {shapes.dtype}{shapes.shape}")
        steps = np.diff(cu.astype(np.int64))
        if cu[0] != 0 or (steps <= 0).any() or int(cu[-1]) != values.size:
            raise ValueError(
                "cu_seqlens must start at 0, strictly increase and end at len(values)"
            )
        if (np.prod(shapes.astype(np.int64), axis=1) != steps).any():
            raise ValueError("a record's shape does not match its cu_seqlens span")
        w.append_flat(values, cu.astype(np.int64), shapes.astype(np.int64))
        w.sync()


class _Store:
    _container: type[Dense] | type[Ragged]
    _view: type

    def __init__(self, path: Any) -> None:
        self.path = os.fspath(path)
        self._r: Any = self._container.open(path)
        self.dtype: np.dtype = self._r.dtype
        self.codec: str = self._r.codec
        self.data_shards: int = self._r.data_shards

    def _live(self) -> Any:
        if self._r is None:
            raise RuntimeError("read requires an open Store")
        return self._r

    def __len__(self) -> int:
        return len(self._live())

    def __getitem__(self, idx: Any) -> Any:
        self._live()
        raise RuntimeError("Store is unbound; call store.bind(allocator) before indexing")

    def __getitems__(self, idxs: Any) -> Any:
        return self[idxs]

    def bind(self, allocator: Allocator) -> Any:
        """A placement view of this store on `allocator`."""
        if not isinstance(allocator, Allocator):
            raise TypeError("allocator must be an Allocator")
        self._live()
        return self._view(self, allocator)

    def close(self) -> None:
        """Releases the store; its views are refused from then on."""
        r, self._r = self._r, None
        if r is not None:
            r.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _View:
    def __init__(self, store: _Store, allocator: Allocator) -> None:
        self._store = store
        self._allocator = allocator

    def _reader(self) -> Any:
        r = self._store._r
        if r is None:
            raise RuntimeError("view's Store is closed")
        return r

    @property
    def path(self) -> str:
        self._reader()
        return self._store.path

    @property
    def dtype(self) -> np.dtype:
        self._reader()
        return self._store.dtype

    @property
    def device(self) -> tuple[int, int]:
        """The DLPack device pair of the view's allocator."""
        return self._allocator.device

    def __len__(self) -> int:
        return len(self._reader())

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __getitems__(self, idxs: Any) -> Any:
        r = self._reader()
        return self._gather(r, _indices(idxs, len(r))[0], False)

    def __getitem__(self, idx: Any) -> Any:
        r = self._reader()
        idxs, one = _indices(idx, len(r))
        return self._gather(r, idxs, one)

    def _gather(self, r: Any, idxs: np.ndarray, one: bool) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self)} records, device={self.device}>"


class DenseView(_View):
    """A dense store's index API: ``view[i]`` one record (no batch axis),
    any collection of indices or a slice a batch in that order."""

    @property
    def item_shape(self) -> tuple[int, ...]:
        return self._reader().item_shape

    def _gather(self, r: Any, idxs: np.ndarray, one: bool) -> Any:
        pool = self._allocator._live_pool()
        batch = r._reading().get_dense(idxs, r._proto, True, pool)
        return DLTensor._wrap(batch[0] if one else batch)


class RaggedView(_View):
    """A ragged store's index API; every read is a :class:`RaggedBatch`
    (one record for an integer index)."""

    @property
    def ndim(self) -> int:
        return int(self._reader().ndim)

    def _gather(self, r: Any, idxs: np.ndarray, one: bool) -> Any:
        pool = self._allocator._live_pool()
        flat, offsets, shapes, _ = r._reading().get_ragged(idxs, r.dtype, True, pool)
        return RaggedBatch(
            DLTensor._wrap(np.ascontiguousarray(flat)),
            DLTensor._wrap(offsets.astype(np.int32)),
            DLTensor._wrap(np.asarray(shapes, dtype=np.uint32).reshape(len(idxs), r.ndim)),
        )


#: What :func:`train_dict` trains on and aims at (2.8's sizes).
TRAIN_SAMPLE_BYTES = 4 << 20
TRAIN_DICT_SIZE = 32 << 10


def train_dict(source: DenseView | RaggedView, *, path: Any = None) -> bytes:
    """A zstd dictionary trained on records of a view (up to 4 MiB of
    them, picked across the store), for ``dict_bytes`` of a ``zstd_dict``
    writer; also written to the file `path` if given. ``TypeError`` for
    anything but a ``DenseView``/``RaggedView``, ``ValueError`` for an empty
    store or records zstd cannot train on."""
    if not isinstance(source, (DenseView, RaggedView)):
        raise TypeError("train_dict requires a DenseView or RaggedView")
    reader = source._reader()
    if len(reader) == 0:
        raise ValueError("cannot train a zstd dictionary on an empty store")
    from ..utils import train_dict as train

    return train(reader, TRAIN_DICT_SIZE, sample_bytes=TRAIN_SAMPLE_BYTES, path=path)


class DenseStore(_Store):
    """A dense store opened read-only and unbound (``bind`` to read)."""

    _container = Dense
    _view = DenseView

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.item_shape: tuple[int, ...] = self._r.item_shape


class RaggedStore(_Store):
    """A ragged store opened read-only and unbound (``bind`` to read)."""

    _container = Ragged
    _view = RaggedView

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.ndim: int = int(self._r.ndim)


__all__ = [
    "Allocation",
    "Allocator",
    "DLTensor",
    "DenseStore",
    "DenseView",
    "DenseWriter",
    "RaggedBatch",
    "RaggedStore",
    "RaggedView",
    "RaggedWriter",
    "from_store_name",
    "train_dict",
]
