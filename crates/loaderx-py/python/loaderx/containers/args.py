"""The arguments of the typed containers, checked, and the facts they are
checked against (dtype and codec names, limits), all from the engine
(``loaderx._native``); re-exported by :mod:`loaderx.zrecord`."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import _native
from ..errors import ArgumentTypeError

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
