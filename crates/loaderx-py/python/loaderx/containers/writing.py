"""How the typed containers write: records packed into blocks, blocks
written while the next is packed, files of an image store, and the pages
of a memory-mapped source let go once written.

``WRITE_CHUNK_BYTES`` is read from :mod:`loaderx.zrecord` at each call
(where users and tests set it)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any, Callable

import numpy as np

from .. import _native
from .. import zrecord as _settings
from ..errors import _RECORD_SIZE, ZrecordError
from .args import MAX_ITEM_LEN, _flat_dims

#: Records packed for ``append_shaped``: their bytes back to back, the
#: byte offset and length of each, and their dimensions.
Packed = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

def _pack_files(files: Iterable[Any]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Encoded files (bytes-like) in blocks of about ``WRITE_CHUNK_BYTES``:
    one buffer with the byte offset and length of each."""
    block: list[memoryview] = []
    size = 0

    def packed() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lens = np.fromiter((m.nbytes for m in block), dtype=np.uint64, count=len(block))
        offsets = np.zeros(len(block), dtype=np.uint64)
        np.cumsum(lens[:-1], out=offsets[1:])
        data = np.frombuffer(b"".join(block), dtype=np.uint8)
        return data, offsets, lens

    for pos, item in enumerate(files):
        if isinstance(item, str):
            raise TypeError(f"file {pos} is a str; pass the file's bytes (open(path, 'rb').read())")
        try:
            view = memoryview(item).cast("B")
        except TypeError:
            raise TypeError(
                f"file {pos} is a {type(item).__name__}, not bytes of a JPEG or PNG file"
            ) from None
        block.append(view)
        size += view.nbytes
        if size >= _settings.WRITE_CHUNK_BYTES:
            yield packed()
            block, size = [], 0
    if block:
        yield packed()


def _pipelined(blocks: Iterator[Any], write: Callable[[Any], None]) -> None:
    """``write(block)`` for every block, in order, on a helper thread, while
    this thread produces the next block (packing ragged records overlaps with
    writing the previous ones; the writes release the GIL). The first error
    of either side is raised once the write in flight has finished."""
    failure: list[BaseException] = []

    def run(block: Any) -> None:
        try:
            write(block)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            failure.append(exc)

    worker: threading.Thread | None = None
    try:
        for block in blocks:
            if worker is not None:
                worker.join()
                worker = None
                if failure:
                    break
            worker = threading.Thread(target=run, args=(block,), name="loaderx-append")
            worker.start()
    finally:
        if worker is not None:
            worker.join()
    if failure:
        raise failure[0]


def _memmap_of(array: np.ndarray) -> np.memmap | None:
    """The ``np.memmap`` that `array` is or views (following ``.base``:
    ``np.asarray`` of a map, or a slice of that, is a plain array), if any."""
    a: Any = array
    while isinstance(a, np.ndarray):
        if isinstance(a, np.memmap):
            return a
        a = a.base
    return None


#: Lets go of this process's pages of `block` once written, when `source`
#: is a memory-mapped file shared with the page cache (``np.load(...,
#: mmap_mode="r")``; see ``_native.release_mapped``).
_release_pages = _native.release_mapped


def _blocks(
    records: Iterable[Any], check: Callable[[int, Any, bool], np.ndarray] | None, empty: bool
) -> Iterator[list[np.ndarray]]:
    """Records (each checked by `check`, if given) in blocks of about
    ``WRITE_CHUNK_BYTES``."""
    block: list[np.ndarray] = []
    size = 0
    pos = -1
    for pos, record in enumerate(records):
        if check is not None:
            record = check(pos, record, empty)
        block.append(record)
        size += record.nbytes
        if size >= _settings.WRITE_CHUNK_BYTES:
            yield block
            block, size = [], 0
    if block:
        yield block
    if pos < 0 and not empty:
        raise ValueError("append needs at least one record: the iterable yielded none")



def _pack(block: list[np.ndarray], dtype: np.dtype) -> Packed:
    """One buffer holding `block` back to back, with the byte offset,
    length and dimensions of each record."""
    lens = np.fromiter((r.nbytes for r in block), dtype=np.uint64, count=len(block))
    offsets = np.zeros(len(block), dtype=np.uint64)
    np.cumsum(lens[:-1], out=offsets[1:])
    dims = np.array([r.shape for r in block], dtype=np.uint32).reshape(-1)
    data = np.empty(int(lens.sum()), dtype=np.uint8)
    items = data.view(dtype)
    at = 0
    for record in block:
        n = record.size
        np.copyto(items[at : at + n].reshape(record.shape), record)
        at += n
    return data, offsets, lens, dims



def _flat_records(
    flat: np.ndarray,
    offsets: Any,
    shapes: Any,
    dtype: np.dtype,
    ndim: int,
    path: str,
    writes_behind: Callable[[int], bool],
) -> tuple[Packed, bool] | None:
    """What :meth:`Ragged.append_flat` writes, checked: the packed records
    (``(data, offsets, lens, dims)`` as ``append_shaped`` takes them) and
    whether they are written behind the call (then `data` is a copy);
    ``None`` for no records."""
    if not isinstance(flat, np.ndarray) or flat.ndim != 1:
        raise TypeError("flat must be a 1-D NumPy array")
    if flat.dtype != dtype:
        raise ValueError(
            f"{path} holds {dtype.str} ({dtype}) records, found flat "
            f"{flat.dtype.str} ({flat.dtype})"
        )
    bounds = np.asarray(offsets)
    if bounds.ndim != 1 or bounds.dtype.kind not in "iu":
        raise TypeError("offsets must be a 1-D integer array of n + 1 element offsets")
    if bounds.size == 0:
        raise ValueError(
            "offsets must hold n + 1 element offsets (at least one: where record 0 "
            "starts), found an empty array"
        )
    # Range first, on the values as given (a uint64 past int64 would
    # wrap to a negative one in the cast below).
    outside = np.flatnonzero((bounds < 0) | (bounds > flat.size))
    if outside.size:
        at = int(outside[0])
        raise ValueError(
            f"offsets must be non-decreasing within 0..{flat.size} (the length of flat), "
            f"found offsets[{at}] = {int(bounds[at])}, outside 0..{flat.size}"
        )
    bounds = bounds.astype(np.int64)
    n = bounds.size - 1
    if n == 0:
        return None
    lens = np.diff(bounds)
    if (lens < 0).any():
        at = int(np.flatnonzero(lens < 0)[0])
        raise ValueError(
            f"offsets must be non-decreasing within 0..{flat.size}, found "
            f"offsets[{at + 1}] = {int(bounds[at + 1])} is below offsets[{at}] = "
            f"{int(bounds[at])}"
        )
    if shapes is None:
        if ndim != 1:
            raise ValueError(f"{path} holds {ndim}-axis records: pass shapes")
        dims = lens.reshape(n, 1)
    else:
        dims = _flat_dims(shapes, n, ndim)
        # The int64 product may wrap; the float one says when it could
        # have (a length is at most flat.size, far below 2^62).
        wrong = dims.prod(axis=1) != lens
        wrong |= dims.astype(np.float64).prod(axis=1) > 2.0**62
        if wrong.any():
            bad = int(np.flatnonzero(wrong)[0])
            raise ValueError(
                f"record {bad}: shape {tuple(dims[bad].tolist())} does not hold its "
                f"{int(lens[bad])} elements"
            )
    itemsize = dtype.itemsize
    if int(lens.max()) * itemsize > MAX_ITEM_LEN:
        big = int(np.argmax(lens))
        raise ZrecordError(
            _RECORD_SIZE,
            f"record {big} is {int(lens[big]) * itemsize} bytes, over the "
            f"{MAX_ITEM_LEN}-byte record limit",
        )
    start, stop = int(bounds[0]), int(bounds[-1])
    nbytes = (stop - start) * itemsize
    # Behind the call (at most one block, so the copy stays bounded): a
    # copy of the values, as the caller's buffer may change as soon as
    # this returns; the other arrays are new anyway.
    behind = writes_behind(nbytes) and nbytes <= _settings.WRITE_CHUNK_BYTES
    values = flat[start:stop]
    data = (np.array(values, copy=True) if behind else np.ascontiguousarray(values)).view(
        np.uint8
    )
    byte_offsets = ((bounds[:-1] - start) * itemsize).astype(np.uint64)
    byte_lens = (lens * itemsize).astype(np.uint64)
    packed = (data, byte_offsets, byte_lens, dims.astype(np.uint32).reshape(-1))
    return packed, behind
