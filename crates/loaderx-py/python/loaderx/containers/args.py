"""The arguments of the typed containers, checked, and the facts they are
checked against (dtype and codec names, limits), all from the engine
(``loaderx._native``); re-exported by :mod:`loaderx.zrecord`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _native

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

# The checks of the containers' arguments live in the binding (module
# ``args``): each returns the argument as the engine takes it, or raises
# what loaderx 2.x code expects.
_dtype = _native.check_dtype
_shape = _native.check_shape
_codec = _native.check_codec
_dictionary = _native.check_dictionary
_shards = _native.check_shards
_quality = _native.check_quality
_size = _native.check_size
_ndim = _native.check_ndim


#: Codecs whose records are encoded images (decoded to uint8 RGB on read).
IMAGE_CODECS: tuple[str, ...] = ("jpeg", "png")

#: JPEG quality used when none is given.
DEFAULT_QUALITY = 90


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
