"""loaderx 0.5.x's path of :mod:`loaderx.compat05.zrecord` (raw byte records)."""

from ._handles import _OPEN, _Closing  # noqa: F401
from .compat05.zrecord import *  # noqa: F401,F403
from .compat05.zrecord import (  # noqa: F401
    _BUFFER_TOO_SMALL,
    _INDEX_OUT_OF_RANGE,
    _IO,
    _RECORD_SIZE,
    _as_indices,
    _check_codec,
)
