"""Raw byte records: the Python face of the native store.

`Zrecord` validates its arguments here, where it is cheapest, and hands flat
byte views to `loaderx._native.Store`, which does the work with the GIL
released. Failures inside the store arrive as `ZrecordError` with a stable
negative `.code` (see the table below) and a message saying what and where.
"""

from __future__ import annotations

import atexit
import operator
import os
import sys
import weakref
from typing import Any, TypeVar

import numpy as np

from . import _native

MAX_RECORD_LEN: int = int(_native.MAX_RECORD_LEN)

# Largest count, length or stride the native layer takes (a C `size_t`).
_SIZE_MAX = sys.maxsize * 2 + 1

#: Codec names accepted as ``codec=``, mapped to the tag stored in each record.
#: ``raw`` and ``flate`` are readable by loaderx 0.5.x; ``zstd`` and ``lz4`` are ours.
CODECS: dict[str, int] = dict(_native.CODECS)

#: ``{code: (name, meaning)}`` for every stable error code, as the store
#: engine defines them (``loaderx._native.ERROR_CODES``).
ERROR_CODES: dict[int, tuple[str, str]] = dict(_native.ERROR_CODES)
_CODE_OF = {name: code for code, (name, _meaning) in ERROR_CODES.items()}

# The codes this layer raises itself, for inputs that cannot reach the
# engine (negative or oversized Python integers).
_INDEX_OUT_OF_RANGE = _CODE_OF["INDEX_OUT_OF_RANGE"]
_RECORD_SIZE = _CODE_OF["RECORD_SIZE"]
# The code of a gather that met a record of the wrong size.
_BUFFER_TOO_SMALL = _CODE_OF["BUFFER_TOO_SMALL"]
# The code of a write refused because another process holds the store (a
# forked child writing through its parent's writer).
_IO = _CODE_OF["IO"]


_C = TypeVar("_C", bound="_Closing")


class _Closing:
    """Context manager and finalizer for objects with an idempotent ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception as exc:  # noqa: BLE001 - nothing useful to do in a finalizer
            _report_unraised(self, exc)


# Open handles (Zrecord and the typed containers), closed (so their pending
# appends are committed) when the interpreter exits: finalizers are not
# guaranteed to run then.
_OPEN: weakref.WeakSet[_Closing] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for handle in list(_OPEN):
        try:
            handle.close()
        except Exception as exc:  # noqa: BLE001 - exiting anyway
            _report_unraised(handle, exc)


def _report_unraised(handle: object, exc: BaseException) -> None:
    """Says on stderr that a write made behind an append failed when no
    call was left to raise it (the writer was never closed explicitly):
    the records of that append are not in the store."""
    notes = getattr(exc, "__notes__", None) or []
    if any(_BEHIND_NOTE in note for note in notes):
        where = getattr(handle, "path", "?")
        sys.stderr.write(
            f"loaderx: the writer of {where} was not closed and a write behind its last "
            f"append failed: {type(exc).__name__}: {exc} ({notes[-1]})\n"
        )


#: Part of the note added to an error raised by a write made behind an
#: append (`zrecord`), by which it is recognised.
_BEHIND_NOTE: str = _native.BEHIND_NOTE


class ZrecordError(RuntimeError):
    """A store operation failed.

    ``code`` is one of the stable negative codes of :data:`ERROR_CODES`
    (the table below is generated from it):

{table}
    """

    code: int

    def __new__(cls, code: int, message: str | None = None) -> ZrecordError:
        # An index out of range is also an IndexError (what loaderx 2.x and
        # Python sequences raise), whoever raises it.
        if cls is ZrecordError and int(code) == _INDEX_OUT_OF_RANGE:
            cls = ZrecordIndexError
        return super().__new__(cls, code, message)

    def __init__(self, code: int, message: str | None = None) -> None:
        code = int(code)
        known = ERROR_CODES.get(code)
        meaning = known[1] if known else f"unknown zrecord error {code}"
        super().__init__(meaning if message is None else message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, str(self)))


class ClosedError(ValueError, RuntimeError):
    """An operation on a closed store, container, sampler or loader: a
    ``ValueError``, as for a closed file, and a ``RuntimeError``, as loaderx
    2.x raises."""


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type where loaderx 2.x raises ``ValueError``
    (``data_shards``, item shape dimensions, ``ndim``, dictionary training
    sources): a ``TypeError``, as Python raises for a wrong type, and that
    ``ValueError``."""


class ZrecordIndexError(ZrecordError, IndexError):
    """:class:`ZrecordError` -3, an index out of range: also an
    ``IndexError``. ``ZrecordError(-3, ...)`` makes one."""


def _code_table() -> str:
    width = max(len(meaning) for _name, meaning in ERROR_CODES.values())
    rule = f"    ==== {'=' * width}"
    rows = [
        f"    {code:<4} {meaning}"
        for code, (_name, meaning) in sorted(ERROR_CODES.items(), reverse=True)
    ]
    return "\n".join([rule, *rows, rule])


if ZrecordError.__doc__:
    ZrecordError.__doc__ = ZrecordError.__doc__.replace("{table}", _code_table())


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


def _as_indices(
    idxs: Any, what: str = "idxs", noun: str = "index", wrap: int | None = None
) -> np.ndarray:
    """Turn any integer array-like into a flat, C-contiguous uint64 array.

    Negative entries raise ``ZrecordError(-3)`` naming the first one, unless
    `wrap` is given: then they count from the end of `wrap` records (and only
    those still negative are refused). Anything that is not integral raises
    ``TypeError``.
    """
    if isinstance(idxs, np.ndarray):
        arr = idxs
    elif isinstance(idxs, (int, np.integer)) and not isinstance(idxs, (bool, np.bool_)):
        arr = np.asarray([idxs])
    else:
        try:
            arr = np.asarray(idxs)
            if arr.dtype.kind == "f" and arr.size:
                # NumPy turns a list mixing negative and >= 2**63 integers into
                # float64: look at the items themselves (integers are checked
                # one by one, floats are refused with their position).
                arr = np.asarray(idxs, dtype=object)
        except (ValueError, OverflowError) as exc:
            raise TypeError(f"{what} must be an integer array-like: {exc}") from None
    arr = arr.reshape(-1)
    kind = arr.dtype.kind
    if kind == "u":
        return np.ascontiguousarray(arr, dtype=np.uint64)
    if kind == "i":
        if arr.size and int(arr.min()) < 0:
            wrapped = arr if wrap is None else np.where(arr < 0, arr.astype(np.int64) + wrap, arr)
            if int(wrapped.min()) >= 0:
                return np.ascontiguousarray(wrapped, dtype=np.uint64)
            pos = int(np.flatnonzero(wrapped < 0)[0])
            raise _negative(int(arr[pos]), pos, what, noun, wrap)
        return np.ascontiguousarray(arr, dtype=np.uint64)
    if arr.size == 0 and kind in "fO":
        # `[]` comes out of NumPy as float64; an empty batch is still valid.
        return np.empty(0, dtype=np.uint64)
    if kind == "O":
        values = []
        for pos, item in enumerate(arr.tolist()):
            if isinstance(item, bool):
                raise TypeError(f"{what} must hold integers, got a bool at position {pos}")
            try:
                value = operator.index(item)
            except TypeError:
                raise TypeError(
                    f"{what} must hold integers, got {type(item).__name__} at position {pos}"
                ) from None
            if value < 0:
                if wrap is None or value + wrap < 0:
                    raise _negative(value, pos, what, noun, wrap)
                value += wrap
            if value >= 1 << 64:
                raise ZrecordError(
                    _INDEX_OUT_OF_RANGE,
                    f"{noun} {value} at position {pos} of {what} is out of range",
                )
            values.append(value)
        return np.array(values, dtype=np.uint64)
    raise TypeError(f"{what} must be integers, got an array of dtype {arr.dtype}")


def _negative(value: int, pos: int, what: str, noun: str, wrap: int | None) -> ZrecordError:
    if wrap is None:
        return ZrecordError(
            _INDEX_OUT_OF_RANGE, f"{noun} {value} at position {pos} of {what} is negative"
        )
    return ZrecordError(
        _INDEX_OUT_OF_RANGE,
        f"{noun} {value} at position {pos} of {what} is out of range for {wrap} records",
    )


def _as_u64(values: Any, what: str) -> np.ndarray:
    """Byte offsets: non-negative integers as a flat uint64 array."""
    try:
        return _as_indices(values, what, noun="value")
    except ZrecordError as exc:
        raise ValueError(str(exc)) from None


def _as_array(buf: Any, what: str) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return buf
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
