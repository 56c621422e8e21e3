"""Raw byte records: the Python face of the native store.

`Zrecord` validates its arguments here, where it is cheapest, and hands flat
byte views to `loaderx._native.Store`, which does the work with the GIL
released. Failures inside the store arrive as `ZrecordError` with a stable
negative `.code` (see the table below) and a message saying what and where.
"""

from __future__ import annotations

import operator
import os
import sys
from typing import Any

import numpy as np

from .. import _native
from .._handles import _OPEN, _Closing

MAX_RECORD_LEN: int = int(_native.MAX_RECORD_LEN)

# Largest count, length or stride the native layer takes (a C `size_t`).
_SIZE_MAX = sys.maxsize * 2 + 1

#: Codec names accepted as ``codec=``, mapped to the tag stored in each record.
#: ``raw`` and ``flate`` are readable by loaderx 0.5.x; ``zstd`` and ``lz4`` are ours.
CODECS: dict[str, int] = dict(_native.CODECS)

from ..errors import (  # noqa: F401 - the 0.5.x module's names
    _BUFFER_TOO_SMALL,
    _INDEX_OUT_OF_RANGE,
    _IO,
    _RECORD_SIZE,
    ERROR_CODES,
    ArgumentTypeError,
    ClosedError,
    ZrecordError,
    ZrecordIndexError,
)


def _open_store(path: str, codec: str, format: int) -> _native.Store:
    """Open `path`, creating a store of `format` (1 or 2) when none is there."""
    if format not in (1, 2):
        raise ValueError(f"format must be 1 or 2, got {format!r}")
    if format == 2 and not os.path.exists(os.path.join(path, "meta.zr")):
        try:
            return _native.Store.create_v2_bytes(path, codec)
        except FileExistsError:
            pass  # another creator won the race: open its store
    return _native.Store(path)


def _check_codec(codec: str) -> str:
    if not isinstance(codec, str) or codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}, expected one of {sorted(CODECS)}")
    return codec


#: Any integer array-like as a flat, C-contiguous uint64 array; negative
#: entries raise ``ZrecordError(-3)`` naming the first one, unless `wrap`
#: is given (then they count from the end of `wrap` records); anything not
#: integral raises ``TypeError`` (the index rule lives in the binding,
#: ``loaderx._native.as_indices``).
_as_indices = _native.as_indices


def _as_u64(values: Any, what: str) -> np.ndarray:
    """Byte offsets: non-negative integers as a flat uint64 array."""
    try:
        return _as_indices(values, what, noun="value")
    except ZrecordError as exc:
        raise ValueError(str(exc)) from None


def _as_array(buf: Any, what: str) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return buf
    if hasattr(buf, "__dlpack__"):
        # A DLPack producer (PyTorch, JAX, DLTensor): viewed in place.
        from ..containers.dlpack_in import as_array

        return as_array(buf, what)
    try:
        return np.asarray(memoryview(buf))
    except TypeError:
        raise TypeError(
            f"{what} must be a NumPy array or a buffer, got {type(buf).__name__}"
        ) from None


def _byte_view(buf: Any, what: str, writable: bool) -> np.ndarray:
    """A flat uint8 view of `buf`'s memory; never a copy."""
    arr = _as_array(buf, what)
    if not arr.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{what} must be writable")
    if arr.dtype.hasobject:
        raise TypeError(f"{what} must hold plain data, not Python objects ({arr.dtype})")
    flat = arr.reshape(-1)
    if flat.dtype != np.uint8:
        flat = flat.view(np.uint8)
    return flat


def _count(value: Any, what: str) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}") from None
    if value < 0:
        raise ValueError(f"{what} must be non-negative, got {value}")
    return value


class Zrecord(_Closing):
    """A store of byte records, densely indexed ``0..len(zr)``.

    Appends assign consecutive indices. ``delete`` keeps the index space dense
    by moving the tail into each hole, so indices are stable only while
    nothing is deleted.
    """

    def __init__(
        self, path: str | os.PathLike[str], codec: str = "flate", *, format: int = 1
    ) -> None:
        """Open the store at `path`, creating the directory and an empty store
        when absent. `codec` is the default for appends.

        `format` picks the on-disk format of a store created here: 1 (the
        default; loaderx 0.5.x reads it) or 2 (no 2^24-record or 1 MiB
        ceilings, checksums; 0.5.x cannot read it). An existing store is
        opened in whatever format it has.
        """
        self.codec = _check_codec(codec)
        self.path = os.fspath(path)
        self._store: _native.Store | None = _open_store(self.path, codec, format)
        _OPEN.add(self)

    def _live(self) -> _native.Store:
        store = self._store
        if store is None:
            raise ClosedError(f"operation on a closed Zrecord ({self.path})")
        return store

    def __len__(self) -> int:
        return len(self._live())

    def __repr__(self) -> str:
        state = "closed" if self._store is None else f"{len(self._store)} records"
        return f"Zrecord({self.path!r}, codec={self.codec!r}) <{state}>"

    def sync(self) -> None:
        """Commit everything appended so far: durable, and visible to handles
        opened from now on (``close()`` commits too)."""
        self._live().sync()

    def lengths(self, idxs: Any) -> np.ndarray:
        """The logical (decoded) size in bytes of each record, as uint32."""
        idxs = _as_indices(idxs)
        out = np.empty(idxs.size, dtype=np.uint32)
        self._live().lengths(idxs, out)
        return out

    def gather(self, idxs: Any, dst: Any, stride: int) -> None:
        """Decode record ``idxs[i]`` into `dst` at byte ``i * stride``, in place."""
        idxs = _as_indices(idxs)
        view = _byte_view(dst, "dst", writable=True)
        # A stride past size_t fails exactly like the largest one: item 1 of
        # the batch lands past any buffer (and item 0 fits either way).
        stride = min(_count(stride, "stride"), _SIZE_MAX)
        self._live().gather(idxs, view, stride)

    def gather_exact(self, idxs: Any, dst: Any, item_len: int) -> None:
        """Like :meth:`gather` with ``stride=item_len``, but every record must
        be exactly `item_len` bytes: otherwise ``ZrecordError`` with code -6
        naming the record, and nothing is written."""
        idxs = _as_indices(idxs)
        view = _byte_view(dst, "dst", writable=True)
        item_len = min(_count(item_len, "item_len"), _SIZE_MAX)
        self._live().gather_exact(idxs, view, item_len)

    def native_store(self) -> _native.Store:
        """The native store this handle wraps (``ValueError`` once closed):
        what a native loader gathers from, through the same lock."""
        return self._live()

    def gather_var(self, idxs: Any, dst: Any, offsets: Any) -> None:
        """Decode record ``idxs[i]`` into `dst` at byte ``offsets[i]``, in place."""
        idxs = _as_indices(idxs)
        offsets = _as_u64(offsets, "offsets")
        if offsets.size != idxs.size:
            raise ValueError(
                f"offsets must have one entry per index, got {offsets.size} for {idxs.size}"
            )
        view = _byte_view(dst, "dst", writable=True)
        self._live().gather_var(idxs, view, offsets)

    def append(self, src: Any, n: int, item_len: int, codec: str | None = None) -> int:
        """Append `n` records of `item_len` bytes from `src`; returns the first new index."""
        codec = _check_codec(self.codec if codec is None else codec)
        view = _byte_view(src, "src", writable=False)
        n = _count(n, "n")
        item_len = _count(item_len, "item_len")
        if n and item_len > _SIZE_MAX:
            raise ZrecordError(
                _RECORD_SIZE,
                f"record 0 of the batch is {item_len} bytes, over the {MAX_RECORD_LEN} byte limit",
            )
        # `n` past size_t cannot fit any source: the engine finds the first
        # record that does not fit (or is empty) long before the last one.
        return self._live().append(view, min(n, _SIZE_MAX), item_len, codec)

    def append_var(self, src: Any, offsets: Any, lens: Any, codec: str | None = None) -> int:
        """Append ragged records ``src[offsets[i]:][:lens[i]]``; returns the first new index."""
        codec = _check_codec(self.codec if codec is None else codec)
        view = _byte_view(src, "src", writable=False)
        offsets = _as_u64(offsets, "offsets")
        lens64 = _as_u64(lens, "lens")
        if offsets.size != lens64.size:
            raise ValueError(
                f"offsets and lens must have the same length, got {offsets.size} and {lens64.size}"
            )
        return self._live().append_var(view, offsets, lens64, codec)

    def delete(self, idxs: Any) -> None:
        """Remove records; the tail moves into each hole so ``0..len`` stays dense.

        Waits for in-flight gathers on this store to finish first."""
        self._live().delete(_as_indices(idxs))

    def compact(self) -> None:
        """Reclaim the space left behind by ``delete``, in place."""
        self._live().compact()

    def stats(self) -> dict[str, int]:
        """``records``, ``live_bytes``, ``chunk_bytes`` and ``reclaimable``."""
        records, live, chunk, reclaimable = self._live().stats()
        return {
            "records": records,
            "live_bytes": live,
            "chunk_bytes": chunk,
            "reclaimable": reclaimable,
        }

    def close(self) -> None:
        """Release the store. Idempotent; waits for in-flight calls to finish."""
        store = getattr(self, "_store", None)
        if store is not None:
            self._store = None
            store.close()
