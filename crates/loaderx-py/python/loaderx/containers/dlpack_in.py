"""Append inputs through DLPack: any producer (NumPy, PyTorch, JAX, a
``DLTensor``) or a read-only CPU buffer, viewed as a NumPy array over its
own memory, never copied. Used by every generation's ``append``."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _native
from ..dtypes import ML_FLOATS


def _ml_float_of(producer: Any) -> np.dtype | None:
    """The ``ml_dtypes`` dtype a producer says it holds, by the name of its
    ``dtype`` (``torch.bfloat16``, a NumPy/JAX ``bfloat16``, a DLTensor's),
    or ``None``."""
    name = str(getattr(producer, "dtype", "")).rpartition(".")[2]
    if name not in ML_FLOATS:
        return None
    from .. import dtypes

    return np.dtype(getattr(dtypes, name))


def is_producer(value: Any) -> bool:
    """Whether `value` is a DLPack producer that is not a NumPy array."""
    return not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__")


def as_array(producer: Any, what: str, dtype: np.dtype | None = None) -> np.ndarray:
    """`producer` as a NumPy array viewing its memory. For an ``ml_dtypes``
    float (`dtype`, or else the producer's own ``dtype``) the DLPack import
    is ours (NumPy cannot import bfloat16 or float8 tensors); otherwise
    NumPy's ``from_dlpack``."""
    if isinstance(producer, np.ndarray):
        return producer
    if hasattr(producer, "__dlpack__"):
        ml = dtype if dtype is not None and dtype.name in ML_FLOATS else _ml_float_of(producer)
        if ml is not None:
            return _native.import_dlpack(producer, ml)
        return np.from_dlpack(producer, copy=False)
    try:
        view = memoryview(producer)
    except TypeError:
        raise TypeError(
            f"{what} must be a DLPack producer (NumPy, PyTorch, JAX, DLTensor) or a read-only "
            f"buffer, got {type(producer).__name__}"
        ) from None
    if not view.readonly:
        raise TypeError(f"{what}: a writable buffer without DLPack is refused; pass a DLPack tensor")
    return np.asarray(view)
