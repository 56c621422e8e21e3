"""Append inputs through DLPack: any producer (NumPy, PyTorch, JAX, a
``DLTensor``) or a read-only CPU buffer, viewed as a NumPy array over its
own memory, never copied. Used by every generation's ``append``."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _native
from ..dtypes import ML_FLOATS


def as_array(producer: Any, what: str, dtype: np.dtype | None = None) -> np.ndarray:
    """`producer` as a NumPy array viewing its memory. With `dtype` an
    ``ml_dtypes`` float, the DLPack import is ours (NumPy cannot import
    bfloat16 or float8 tensors); otherwise NumPy's ``from_dlpack``."""
    if isinstance(producer, np.ndarray):
        return producer
    if hasattr(producer, "__dlpack__"):
        if dtype is not None and dtype.name in ML_FLOATS:
            return _native.import_dlpack(producer, dtype)
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
