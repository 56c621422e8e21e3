"""NumPy view over a store: one record per sample, typed by ``schema.json``.

The store keeps opaque bytes; ``schema.json`` in the store directory records
the per-sample dtype and shape::

    {"format": "loaderx-zrecord", "version": 1, "dtype": "<f4", "shape": [3, 8, 8], "codec": "flate"}

Reads allocate the output array once and the store decodes straight into it.
"""

from __future__ import annotations

import json
import math
import operator
import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import _native
from .zrecord import (
    _BUFFER_TOO_SMALL,
    _INDEX_OUT_OF_RANGE,
    CODECS,
    ClosedError,
    MAX_RECORD_LEN,
    Zrecord,
    ZrecordError,
    _as_indices,
    _check_codec,
)
from .._handles import _Closing
from ..dtypes import from_store_name, store_name

SCHEMA = "schema.json"
FORMAT = "loaderx-zrecord"
SCHEMA_VERSION = 1

#: Default bound on the bytes of source data handed to one append call.
WRITE_CHUNK_BYTES = 64 << 20


def _read_schema(path: Path) -> dict[str, Any]:
    schema_path = path / SCHEMA
    if not schema_path.is_file():
        if path.is_file():
            raise FileNotFoundError(f"{path} is a file, not a loaderx dataset directory")
        raise FileNotFoundError(f"{schema_path} not found; {path} is not a loaderx dataset")
    try:
        schema = json.loads(schema_path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{schema_path} is not valid JSON: {exc}") from None
    if not isinstance(schema, dict) or schema.get("format") != FORMAT:
        raise ValueError(f"{schema_path} is not a {FORMAT} schema")
    for key in ("dtype", "shape", "codec"):
        if key not in schema:
            raise ValueError(f"{schema_path} has no {key!r} entry")
    return schema


def _sample_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.hasobject:
        raise ValueError(f"cannot store Python objects (dtype {dtype})")
    if dtype.fields is not None:
        raise ValueError(f"structured dtypes are not supported (dtype {dtype})")
    return dtype


def _parse_schema(path: Path, schema: dict[str, Any]) -> tuple[np.dtype, tuple[int, ...], str]:
    """The sample dtype, shape and codec a schema describes; ``ValueError``
    naming the file and the entry when any of them is unusable."""
    where = path / SCHEMA
    raw_dtype, raw_shape, codec = schema["dtype"], schema["shape"], schema["codec"]
    if not isinstance(raw_dtype, str):
        raise ValueError(f"{where}: 'dtype' must be a NumPy dtype string, got {raw_dtype!r}")
    try:
        dtype = from_store_name(raw_dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: 'dtype' {raw_dtype!r} is not a NumPy dtype: {exc}") from None
    try:
        dtype = _sample_dtype(dtype)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not isinstance(raw_shape, list) or not all(
        type(d) is int and d >= 0 for d in raw_shape
    ):
        raise ValueError(
            f"{where}: 'shape' must be a list of non-negative integers, got {raw_shape!r}"
        )
    shape = tuple(raw_shape)
    itemsize = math.prod(shape) * dtype.itemsize
    # Format 2 stores hold samples past format 1's limit; the store itself
    # refuses what its format cannot hold.
    if not 1 <= itemsize <= _native.MAX_ITEM_LEN:
        raise ValueError(
            f"{where}: a sample of {dtype.str}{list(shape)} is {itemsize} bytes, outside "
            f"1..={_native.MAX_ITEM_LEN}"
        )
    if not isinstance(codec, str) or codec not in CODECS:
        raise ValueError(
            f"{where}: unknown codec {codec!r}, expected one of {sorted(CODECS)}"
        )
    return dtype, shape, codec


class Dataset(_Closing):
    """A typed, indexable view over a store written by :meth:`Dataset.write`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open the dataset at `path`.

        Raises:
            FileNotFoundError: `path` holds no ``schema.json``.
            ValueError: the schema is not a loaderx one, is unusable (bad JSON,
                dtype, shape or codec), or describes samples of another size
                than the store's records.
        """
        self.path = Path(path)
        self.dtype: np.dtype
        self.shape: tuple[int, ...]
        self.codec: str
        self.dtype, self.shape, self.codec = _parse_schema(self.path, _read_schema(self.path))
        self._itemsize = math.prod(self.shape) * self.dtype.itemsize
        self._store: Zrecord | None = Zrecord(self.path, codec=self.codec)
        self._check_schema_fits()

    def _check_schema_fits(self) -> None:
        """Refuses a schema describing samples of another size than the
        records (a schema copied from, or edited for, another dataset)."""
        store = self._live()
        if len(store) == 0:
            return
        try:
            found = int(store.lengths([0])[0])
        except ZrecordError:
            # A damaged entry 0 is the store's problem, reported when read;
            # every read also checks each record's size.
            return
        if found != self._itemsize:
            self.close()
            raise ValueError(
                f"{self.path / SCHEMA} describes samples of {self.dtype.str}{list(self.shape)} "
                f"({self._itemsize} bytes), but record 0 of the store is {found} bytes"
            )

    def _live(self) -> Zrecord:
        store = self._store
        if store is None:
            raise ClosedError(f"operation on a closed Dataset ({self.path})")
        return store

    def __len__(self) -> int:
        return len(self._live())

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its path: unpickling (e.g. in a PyTorch worker started
        by spawn) reopens the dataset there."""
        self._live()
        return (type(self), (str(self.path),))

    def __repr__(self) -> str:
        size = "closed" if self._store is None else f"{len(self._store)} samples"
        return (
            f"Dataset({str(self.path)!r}) <{size} of {self.dtype.str}{list(self.shape)}, "
            f"codec={self.codec}>"
        )

    # reading

    def __getitem__(self, idx: Any) -> np.ndarray:
        """``ds[i]`` is one sample (negative `i` counts from the end); a slice,
        an integer list or array, or a boolean mask gives a stacked batch.
        A tuple indexes the batch further: ``ds[i, 0]`` is ``ds[i][0]``."""
        if isinstance(idx, tuple):
            if not idx:
                return self[np.arange(len(self))]
            head, rest = idx[0], idx[1:]
            picked = self[head]
            if self._is_scalar_index(head):
                return picked[rest] if rest else picked
            return picked[(slice(None), *rest)] if rest else picked
        if self._is_scalar_index(idx):
            i = operator.index(idx)
            n = len(self)
            if i < 0:
                if i + n < 0:
                    raise ZrecordError(
                        _INDEX_OUT_OF_RANGE,
                        f"index {i} is out of range for a dataset of {n} samples",
                    )
                i += n
            return self.__getitems__(np.array([i], dtype=np.uint64))[0]
        if isinstance(idx, slice):
            return self.__getitems__(np.arange(*idx.indices(len(self)), dtype=np.int64))
        if idx is Ellipsis:
            return self[np.arange(len(self))]
        if isinstance(idx, np.ndarray) and idx.dtype == np.bool_ and idx.ndim == 1:
            if idx.shape[0] != len(self):
                raise IndexError(
                    f"boolean mask of length {idx.shape[0]} does not match a dataset of "
                    f"{len(self)} samples"
                )
        return self.__getitems__(idx)

    @staticmethod
    def _is_scalar_index(idx: Any) -> bool:
        if isinstance(idx, (bool, np.bool_)):
            return False
        return isinstance(idx, (int, np.integer)) or (
            isinstance(idx, np.ndarray) and idx.ndim == 0 and idx.dtype.kind in "iu"
        )

    def __getitems__(self, idxs: Any) -> np.ndarray:
        """A batch ``(k, *shape)`` for `k` indices (integers or a boolean mask).

        Negative indices count from the end. This is also the batch hook
        PyTorch's DataLoader calls."""
        store = self._live()
        arr = idxs if isinstance(idxs, np.ndarray) else np.asarray(idxs)
        kind = arr.dtype.kind
        if kind == "b":
            idx64 = _as_indices(np.flatnonzero(arr))
        else:
            # Negative indices count from the end (the length is only asked
            # for when there are any); a list NumPy made float is re-read
            # item by item.
            negative = kind in "fO" or (kind == "i" and arr.size > 0 and int(arr.min()) < 0)
            wrap = len(store) if negative else None
            idx64 = _as_indices(idxs if kind == "f" else arr, wrap=wrap)
        out = np.empty((idx64.size, *self.shape), dtype=self.dtype)
        try:
            # Every record must be exactly one sample: never a half-filled row.
            store.gather_exact(idx64, out.reshape(-1).view(np.uint8), self._itemsize)
        except ZrecordError as exc:
            if exc.code != _BUFFER_TOO_SMALL:
                raise
            raise ZrecordError(
                exc.code, f"{exc}; {self.path / SCHEMA} describes samples of "
                f"{self.dtype.str}{list(self.shape)}"
            ) from None
        return out

    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None:
        """``(name, native store, bytes per sample)`` for the native loader to
        gather this dataset's samples itself, or ``None`` when it cannot: a
        subclass overriding :meth:`__getitems__` (its batches must come from
        that method), or a closed dataset."""
        if type(self).__getitems__ is not Dataset.__getitems__ or self._store is None:
            return None
        return (name, self._store.native_store(), self._itemsize)

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self[i]

    # writing

    @classmethod
    def write(
        cls,
        path: str | os.PathLike[str],
        array: Any,
        codec: str = "flate",
        chunk_bytes: int = WRITE_CHUNK_BYTES,
        *,
        format: int = 1,
    ) -> Dataset:
        """Store `array` as a dataset, one record per slice along axis 0.

        `format` is the on-disk format of a new store (1, readable by loaderx
        0.5.x, or 2: no 1 MiB sample or 2^24-sample ceilings, checksums); an
        existing dataset keeps its own.

        A 1-D array becomes a dataset of scalars (what a label set usually is).
        The array is streamed in blocks of at most `chunk_bytes` (at least one
        sample), so ``np.load(..., mmap_mode="r")`` input is never read whole.
        When `path` already holds a dataset of the same dtype and shape, the
        samples are appended and the existing dataset's codec is kept.

        Returns:
            The dataset at `path`, open for reading.

        Raises:
            ValueError: unknown codec, a 0-d array, a sample over
                ``MAX_RECORD_LEN`` bytes or of zero bytes, an unsupported dtype,
                or `path` holding a dataset of a different dtype or shape.
        """
        _check_codec(codec)
        chunk_bytes = operator.index(chunk_bytes)
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
        if not isinstance(array, np.ndarray) and hasattr(array, "__dlpack__"):
            # A DLPack producer (PyTorch, JAX, DLTensor): viewed in place.
            from ..containers.dlpack_in import as_array

            array = as_array(array, "array")
        array = np.asanyarray(array)
        if array.ndim < 1:
            raise ValueError("array must have a sample axis (got a 0-d array)")

        dtype = _sample_dtype(np.dtype(array.dtype))
        shape = tuple(int(d) for d in array.shape[1:])
        itemsize = math.prod(shape) * dtype.itemsize
        if format not in (1, 2):
            raise ValueError(f"format must be 1 or 2, got {format!r}")
        if itemsize == 0:
            raise ValueError(f"a sample of shape {shape} and dtype {dtype} has zero bytes")

        path = Path(path)
        schema_path = path / SCHEMA
        if (path / "meta.zr").is_file():  # an existing store keeps its format
            with Zrecord(path) as existing:
                format = existing.native_store().format_version()
        limit = MAX_RECORD_LEN if format == 1 else _native.MAX_ITEM_LEN
        if itemsize > limit:
            raise ValueError(
                f"a sample of shape {shape} and dtype {dtype} is {itemsize} bytes, over the "
                f"{limit} byte record limit of format {format}"
            )
        if schema_path.is_file():
            found_dtype, found_shape, codec = _parse_schema(path, _read_schema(path))
            if (found_dtype, found_shape) != (dtype, shape):
                raise ValueError(
                    f"{path} holds {found_dtype.str}{list(found_shape)} samples, cannot append "
                    f"{dtype.str}{list(shape)}"
                )
        else:
            path.mkdir(parents=True, exist_ok=True)
            schema = {
                "format": FORMAT,
                "version": SCHEMA_VERSION,
                "dtype": store_name(dtype),
                "shape": list(shape),
                "codec": codec,
            }
            tmp = path / (SCHEMA + ".tmp")
            tmp.write_text(json.dumps(schema) + "\n")
            os.replace(tmp, schema_path)

        step = max(1, chunk_bytes // itemsize)
        with Zrecord(path, codec=codec, format=format) as store:
            for start in range(0, len(array), step):
                block = np.ascontiguousarray(array[start : start + step], dtype=dtype)
                store.append(block, len(block), itemsize)
            store.sync()
        return cls(path)

    # maintenance

    def delete(self, idxs: Any) -> None:
        """Remove samples; the tail moves into each hole so ``0..len`` stays dense.

        Surviving samples may change index. Waits for in-flight reads."""
        self._live().delete(idxs)

    def compact(self) -> None:
        """Reclaim the space left behind by :meth:`delete`."""
        self._live().compact()

    def stats(self) -> dict[str, int]:
        """Storage usage; see :meth:`loaderx.Zrecord.stats`."""
        return self._live().stats()

    def close(self) -> None:
        """Release the store. Idempotent."""
        store = getattr(self, "_store", None)
        if store is not None:
            self._store = None
            store.close()


__all__ = ["Dataset", "CODECS", "MAX_RECORD_LEN", "SCHEMA", "FORMAT", "WRITE_CHUNK_BYTES"]
