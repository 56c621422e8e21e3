"""Where the 2.8 API's reads put their batches: :class:`Allocator` (a
device and a pool of batch buffers that views bound to it share) and
:class:`Allocation` (one region of that pool, from ``Allocator.acquire``),
as ``loaderx.allocator`` of loaderx 2.8 has them. This build places on the
CPU only.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import _native
from ._lib import checked_integer

#: The DLPack device type of the CPU (``kDLCPU``).
DL_CPU = 1

#: What ``Allocator(pool_size=None)`` takes: 2.8's default for the CPU.
DEFAULT_POOL_SIZE = 256 << 20


def _size(value: Any, name: str) -> int:
    return checked_integer(value, name, 0, must_be="non-negative")


def _power_of_two(value: Any, name: str) -> int:
    value = checked_integer(value, name)
    if value < 1 or value & (value - 1):
        raise ValueError(f"{name} must be a positive power of two")
    return value


class Allocation:
    """One region of an :class:`Allocator`'s pool, from ``acquire``: ``size``
    bytes (the size class asked for) at an address that is a multiple of
    ``alignment``, on ``device``. ``view(dtype, shape, offset=0)`` is a NumPy
    array over part of it (writable, no copy). ``close()`` (or leaving a
    ``with`` block) ends the allocation: ``view`` is then ``RuntimeError``;
    its memory goes back to the pool once no array made by ``view`` is
    alive, so closing never pulls memory from under an array.
    """

    def __init__(self, raw: np.ndarray, size: int, alignment: int, device: tuple[int, int]) -> None:
        start = (-raw.ctypes.data) % alignment
        self._buffer: np.ndarray | None = raw[start:start + size]
        self._address = raw.ctypes.data + start
        self._size = size
        self._alignment = alignment
        self._device = device

    @property
    def size(self) -> int:
        """The region's bytes: the size class of the request."""
        return self._size

    @property
    def alignment(self) -> int:
        return self._alignment

    @property
    def device(self) -> tuple[int, int]:
        """The DLPack device pair, ``(1, 0)`` for the CPU."""
        return self._device

    @property
    def device_pointer(self) -> int:
        """The device-side address: 0 on the CPU, where ``owner_base_ptr``
        is the region's address."""
        return 0

    @property
    def owner_base_ptr(self) -> int:
        """The address of the region's first byte."""
        return self._address

    def view(self, dtype: Any, shape: Any, offset: int = 0) -> np.ndarray:
        """A ``dtype`` array of ``shape`` over the region's bytes from
        ``offset``; ``ValueError`` if they do not fit in the region."""
        if self._buffer is None:
            raise RuntimeError("allocation is released")
        dtype = _native.check_dtype(dtype)
        shape = (operator.index(shape),) if np.ndim(shape) == 0 else tuple(operator.index(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"shape {shape} has a negative dimension")
        offset = _size(offset, "offset")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        needed = count * dtype.itemsize
        if offset + needed > self._size:
            raise ValueError(f"region holds {self._size} bytes, view at offset {offset} needs {needed}")
        return np.frombuffer(self._buffer, dtype=dtype, count=count, offset=offset).reshape(shape)

    def close(self) -> None:
        """Ends the allocation (idempotent)."""
        self._buffer = None

    def __enter__(self) -> Allocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "released" if self._buffer is None else f"{self._size} bytes"
        return f"Allocation({state}, alignment={self._alignment})"


class Allocator:
    """Where views materialise their batches: ``Allocator("cpu")`` (the only
    device type this build has; another is ``ValueError``), device id 0.

    ``device`` is the DLPack device pair, ``(1, 0)`` for the CPU, as
    ``DLTensor.__dlpack_device__()`` reports it. The allocator owns a pool
    of batch buffers shared by every view bound to it: a read of at least
    ``_native.POOLED_OUTPUT_BYTES`` is gathered into one of its buffers,
    which returns to the pool once the consumer has dropped every array and
    DLPack capsule of that batch, and the next read of a size it fits reuses
    it; ``pool_size`` (bytes, default 256 MiB as in 2.8) bounds the idle
    buffers kept (``cached_bytes``), the longest idle freed first; smaller
    reads are plain allocations. ``close()`` frees the idle buffers; reads
    through its views are then ``RuntimeError``, and results already read
    stay valid.
    """

    def __init__(
        self,
        device_type: str = "cpu",
        device_id: int = 0,
        *,
        minimum_size: int | None = None,
        pool_size: int | None = None,
    ) -> None:
        if not isinstance(device_type, str):
            raise TypeError("device_type must be a string")
        device_type = device_type.lower()
        if not device_type:
            raise ValueError("device_type must be non-empty")
        if device_type != "cpu":
            raise ValueError(f"unsupported device_type {device_type!r}; this build has 'cpu'")
        device_id = _size(device_id, "device_id")
        if device_id != 0:
            raise ValueError("CPU device_id must be 0")
        self._device_type = device_type
        self._device_id = device_id
        self._minimum_size = 1 if minimum_size is None else _size(minimum_size, "size")
        self._pool_size = DEFAULT_POOL_SIZE if pool_size is None else _size(pool_size, "size")
        self._pool = _native.OutputPool(self._pool_size)

    @property
    def device_type(self) -> str:
        return self._device_type

    @property
    def device_id(self) -> int:
        return self._device_id

    @property
    def device(self) -> tuple[int, int]:
        """The DLPack device pair: ``(1, 0)``, the CPU."""
        return (DL_CPU, self._device_id)

    @property
    def pool_size(self) -> int:
        """The most bytes of idle batch buffers the pool keeps."""
        return self._pool_size

    @property
    def cached_bytes(self) -> int:
        """The bytes of idle batch buffers the pool holds now."""
        return int(self._pool.cached_bytes)

    @property
    def minimum_size(self) -> int:
        """The smallest allocation 2.8's size classes start from."""
        return self._minimum_size

    def size_class(self, size: int) -> int:
        """2.8's size class of a request of `size` bytes: the power of two
        at or above ``max(size, minimum_size)``."""
        size = max(_size(size, "size"), self._minimum_size)
        return 1 << (size - 1).bit_length()

    def acquire(self, size: int, alignment: int = 16) -> Allocation:
        """A region of at least ``size`` bytes, starting at a multiple of
        ``alignment`` (a power of two): an :class:`Allocation` of the size
        class of ``size``. It comes from the pool when an idle buffer fits
        and returns to it once the allocation is closed and every array
        viewing it is gone. ``RuntimeError`` once the allocator is closed."""
        size = _size(size, "size")
        alignment = _power_of_two(alignment, "alignment")
        capacity = self.size_class(size)
        raw = self._live_pool().acquire(capacity + alignment - 1)
        return Allocation(raw, capacity, alignment, self.device)

    def close(self) -> None:
        """Frees the idle buffers and refuses reads through the views
        (idempotent); results already read stay valid."""
        self._pool.close()

    def _live_pool(self) -> Any:
        if self._pool.closed:
            raise RuntimeError("allocator is closed")
        return self._pool

    def __enter__(self) -> Allocator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Allocator({self._device_type!r}, {self._device_id})"
