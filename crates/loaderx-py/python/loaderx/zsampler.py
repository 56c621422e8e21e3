"""The loaderx 2.x sampler spelling: ``from loaderx.zsampler import Sampler``.

The same native sampler as :class:`loaderx.Sampler`, with the 2.x names and
behaviour:

* ``Sampler.Mode.SEQUENTIAL`` (0), ``Sampler.Mode.IID`` (1) and
  ``Sampler.Mode.CYCLIC`` (2, also spelled ``SHUFFLE``): without
  replacement, each cycle of ``length`` draws a fresh permutation, and every
  batch full (a batch straddling two cycles takes the end of one and the
  start of the next); a ``batch_size`` above ``length`` is taken as
  ``length``, so a batch never holds a record twice.
* ``seek(step)``, ``close()`` and ``with``; ``next()`` on a closed sampler
  raises ``ValueError``.
* ``rank``/``world_size`` default to what the running job reports
  (``torch.distributed`` when initialised, else JAX with more than one
  process, else one host); ``batch_size`` is the global batch, of which this
  rank draws ``batch_size // world_size``.
"""

from __future__ import annotations

import enum
from types import TracebackType

import numpy as np

from .compat05 import sampler as _sampler
from .compat05.sampler import resolve_world
from .errors import ClosedError


class Sampler(_sampler.Sampler):
    """Endless iterator of index batches, 2.x spelling (see the module docstring)."""

    class Mode(enum.IntEnum):
        SEQUENTIAL = 0
        IID = 1
        CYCLIC = 2
        SHUFFLE = 2  # the same mode under loaderx.Sampler's name

    def __init__(
        self,
        length: int,
        batch_size: int,
        mode: int,
        seed: int = 42,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        rank, world_size = resolve_world(rank, world_size)
        super().__init__(length, batch_size, mode, seed, rank=rank, world_size=world_size)
        self.closed = False

    def _check_open(self, op: str) -> None:
        if self.closed:
            raise ClosedError(f"{op} on a closed Sampler")

    def next(self) -> np.ndarray:
        """This rank's share of the next batch: a fresh uint64 array."""
        self._check_open("next()")
        return super().next()

    def seek(self, step: int) -> None:
        """Position the stream at global batch `step`."""
        self._check_open("seek()")
        super().seek(step)

    def close(self) -> None:
        """Mark the sampler closed (it holds no OS resources). Idempotent."""
        self.closed = True

    def __enter__(self) -> Sampler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["Sampler"]
