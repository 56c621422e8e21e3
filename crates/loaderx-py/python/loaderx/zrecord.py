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

from typing import Any

from .errors import (
    EXISTS,
    ArgumentTypeError,
    ClosedError,
    ContainerExistsError,
    ContainerModeError,
    ZrecordError,
    ZrecordIndexError,
)

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

# The containers read the two settings above from this module at each call.
from .containers.args import (  # noqa: E402
    CODECS,
    DEFAULT_QUALITY,
    DTYPES,
    IMAGE_CODECS,
    MAX_DATA_SHARDS,
    MAX_ITEM_LEN,
    MAX_NDIM,
    MAX_RECORD_LEN,
    MAX_SHARDS,
    stores_dtype,
)
from .containers.base import _reopen  # noqa: E402, F401 - pickles name it here
from .containers.dense import Dense  # noqa: E402
from .containers.images import Images, _reopen_images  # noqa: E402, F401
from .containers.ragged import FlatRagged, Ragged  # noqa: E402
# The loaderx 2.8 names (containers/views.py).
from .containers.views import (  # noqa: E402
    DenseStore,
    DenseView,
    DenseWriter,
    DLTensor,
    RaggedBatch,
    RaggedStore,
    RaggedView,
    RaggedWriter,
    train_dict,
)

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
    "DLTensor",
    "DenseStore",
    "DenseView",
    "DenseWriter",
    "RaggedBatch",
    "RaggedStore",
    "RaggedView",
    "RaggedWriter",
    "train_dict",
]
