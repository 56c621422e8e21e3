"""The loaderx 2.8 sampler: ``from loaderx.sampler import Sampler``.

``Sampler(length, batch_size, mode, seed=42)`` draws batches of indices into
``0..length`` as a pure function of ``(seed, step)``:

* ``Sampler.Mode.SEQUENTIAL`` (0): batch ``k`` is ``(k * batch_size + j) %
  length``, wrapping round the index space.
* ``Sampler.Mode.IID`` (1): uniform with replacement.
* ``Sampler.Mode.CYCLIC`` (2): without replacement, whole batches per epoch:
  an epoch is ``length // batch_size`` batches from one fresh permutation
  (the ``length % batch_size`` left over are skipped that epoch, so no batch
  holds a record twice); a ``batch_size`` above ``length`` gives batches of
  ``length`` indices, each a fresh permutation.

``next()`` (and iteration) returns a *borrowed* ``uint64`` array: the same
array every call, overwritten by the next draw (``copy()`` it to keep it).
``seek(step)`` moves to any step in O(1). The stream is computed by the
native sampler (the ``loaderx-sampler`` crate, mode ``cyclic`` for
``CYCLIC``); the same seed gives the same indices on every machine, but not
the indices loaderx 2.8.19 draws (its generator is its own).

This is not :class:`loaderx.Sampler` (0.5.x) nor ``loaderx.zsampler.Sampler``
(2.4, whose ``CYCLIC`` lets a batch straddle two epochs): each keeps its own
meaning.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from . import _native
from ._lib import checked_integer

_U64_MAX = (1 << 64) - 1

#: The native mode of each 2.8 mode (the crate's ``Mode`` discriminants).
_NATIVE_MODE = {0: 0, 1: 1, 2: 3}


def _bounded(name: str, value: Any, low: int) -> int:
    # Not strict: bools pass as 0 and 1; a non-integer is operator.index's TypeError.
    return checked_integer(value, name, low, _U64_MAX, must_be=f"in {low}..2^64-1", strict=False)


class Sampler:
    """Endless batches of ``uint64`` indices into ``0..length`` (see the
    module docstring)."""

    class Mode(enum.IntEnum):
        SEQUENTIAL = 0
        IID = 1
        CYCLIC = 2  # without replacement, whole batches per epoch

    __slots__ = ("_length", "_batch_size", "_mode", "_seed", "_native", "_indices", "_spent")

    def __init__(self, length: int, batch_size: int, mode: int, seed: int = 42) -> None:
        length = _bounded("length", length, 1)
        batch_size = _bounded("batch_size", batch_size, 1)
        modes = "Sampler.Mode.SEQUENTIAL, IID, or CYCLIC"
        mode = checked_integer(mode, "mode", 0, 2, must_be=modes, strict=False)
        seed = _bounded("seed", seed, 0)
        self._length = length
        self._batch_size = batch_size
        self._mode = Sampler.Mode(mode)
        self._seed = seed
        count = min(length, batch_size) if mode == Sampler.Mode.CYCLIC else batch_size
        # Allocated first: a batch size beyond memory is a MemoryError here.
        self._indices = np.empty(count, dtype=np.uint64)
        self._native = _native.Sampler(length, count, _NATIVE_MODE[mode], seed)
        # Set once step 2^64 - 1 has been drawn: the step space is spent.
        self._spent = False

    @property
    def length(self) -> int:
        """Indices are drawn from ``0..length``."""
        return self._length

    @property
    def batch_size(self) -> int:
        """The batch size asked for (``CYCLIC`` draws at most ``length``)."""
        return self._batch_size

    @property
    def mode(self) -> Sampler.Mode:
        return self._mode

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def step(self) -> int:
        """The step ``next()`` draws next."""
        return _U64_MAX + 1 if self._spent else int(self._native.step)

    def next(self) -> np.ndarray:
        """The indices of the current step, then advances. The array is
        borrowed: the next draw overwrites it (``copy()`` to keep it)."""
        if self._spent:
            raise OverflowError("sampler exhausted the uint64 step space")
        last = self._native.step == _U64_MAX
        self._native.fill(self._indices)
        self._spent = last
        return self._indices

    def seek(self, step: int) -> None:
        """Moves to `step` (0-based), forwards or backwards, in O(1): the
        stream is a function of ``(seed, step)``, so resuming is exact."""
        step = _bounded("step", step, 0)
        self._native.seek(step)
        self._spent = False

    def __iter__(self) -> Sampler:
        return self

    def __next__(self) -> np.ndarray:
        return self.next()

    def __repr__(self) -> str:
        return (
            f"Sampler(length={self._length}, batch_size={self._batch_size}, "
            f"mode=Sampler.Mode.{self._mode.name}, seed={self._seed})"
        )


__all__ = ["Sampler"]
