"""``RaggedBatch``, the 2.8 API's packed ragged records: one values
buffer, ``int32`` ``cu_seqlens`` (FlashAttention's varlen convention) and
``uint32`` shapes, each a DLPack producer."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .. import _native
from .dlpack_in import as_array

DLTensor = _native.DLTensor


class RaggedBatch:
    """Packed ragged records: ``values`` (1-D, the store dtype),
    ``cu_seqlens`` (``int32``, ``n + 1`` offsets from 0) and ``shapes``
    (``uint32``, ``(n, ndim)``); each field a DLPack producer."""

    def __init__(self, values: Any, cu_seqlens: Any, shapes: Any) -> None:
        self.values = values
        self.cu_seqlens = cu_seqlens
        self.shapes = shapes

    @classmethod
    def from_records(cls, records: Iterable[Any]) -> RaggedBatch:
        """Packs a finite iterable of arrays of one dtype and rank (each
        non-empty, at least one axis) into a new batch."""
        arrays = [np.asarray(r) for r in records]
        if not arrays:
            raise ValueError("from_records needs at least one record")
        dtype, ndim = arrays[0].dtype, arrays[0].ndim
        for pos, a in enumerate(arrays):
            if a.dtype != dtype or a.ndim != ndim:
                raise ValueError(
                    f"record {pos} is {a.dtype}[{a.ndim}-d], record 0 {dtype}[{ndim}-d]"
                )
            if ndim == 0 or a.size == 0:
                raise ValueError(f"record {pos}: records have at least one axis and one element")
        sizes = np.array([a.size for a in arrays], dtype=np.int64)
        cu = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(sizes, out=cu[1:])
        if cu[-1] > np.iinfo(np.int32).max:
            raise ValueError("a ragged batch holds at most 2**31 - 1 values")
        values = np.concatenate([a.reshape(-1) for a in arrays])
        shapes = np.array([a.shape for a in arrays], dtype=np.uint32).reshape(len(arrays), ndim)
        return cls(DLTensor._wrap(values), DLTensor._wrap(cu.astype(np.int32)), DLTensor._wrap(shapes))

    def __len__(self) -> int:
        return int(np.from_dlpack(self.shapes).shape[0])

    def to_tensors(self) -> list[Any]:
        """One zero-copy ``DLTensor`` per record, shaped as stored (of any
        store dtype: bfloat16 and float8 values are imported by loaderx,
        which NumPy's ``from_dlpack`` cannot)."""
        values = as_array(self.values, "values")
        cu = np.from_dlpack(self.cu_seqlens).tolist()
        shapes = np.from_dlpack(self.shapes).tolist()
        return [
            DLTensor._wrap(values[lo:hi].reshape(shape))
            for lo, hi, shape in zip(cu, cu[1:], shapes)
        ]

    def __repr__(self) -> str:
        return f"RaggedBatch({len(self)} records)"
