"""Deterministic batches of indices, drawn by the native sampler.

``Sampler(length, batch_size, mode, seed)`` yields uint64 arrays of
``batch_size`` indices into ``0..length``:

* ``Mode.SEQUENTIAL`` (0): batch ``k`` is ``(k * batch_size + j) % length``, a
  sliding window over a circular index space, so the tail never truncates.
* ``Mode.IID`` (1): uniform with replacement, unbiased.
* ``Mode.SHUFFLE`` (2): without replacement; every ``length`` consecutive
  draws are a fresh permutation of ``0..length``. A ``batch_size`` above
  ``length`` is taken as ``length``: each batch is one whole permutation.

The stream depends only on ``(length, batch_size, mode, seed)``.

Additions over loaderx 0.5.x: sharding for multi-host training (rank ``r``
of ``world_size`` ranks draws positions ``[r*B/W, (r+1)*B/W)`` of every
global batch, identical on every host for the same seed) and
``state_dict()``/``load_state_dict()`` to resume exactly where a checkpoint
left off.
"""

from __future__ import annotations

import enum
import operator
import sys
from typing import Any

import numpy as np

from .. import _native


def _integer(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not low <= number < 1 << 64:
        raise ValueError(f"{name} must be in {low}..2^64-1, got {number}")
    return number


def resolve_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``(rank, world_size)``: the pair given, else the one the running job
    reports: ``torch.distributed`` when it is initialised, else JAX when more
    than one JAX process runs, else ``(0, 1)``.

    Neither framework is imported here: one the program has not imported
    cannot have been initialised.
    """
    if rank is not None and world_size is not None:
        return rank, world_size
    if rank is not None or world_size is not None:
        raise TypeError(
            f"give both rank and world_size or neither, got rank={rank!r}, "
            f"world_size={world_size!r}"
        )
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    jax = sys.modules.get("jax")
    if jax is not None:
        count = int(jax.process_count())
        if count > 1:
            return int(jax.process_index()), count
    return 0, 1


class Sampler:
    """Endless iterator of index batches (see the module docstring)."""

    class Mode(enum.IntEnum):
        SEQUENTIAL = 0
        IID = 1
        SHUFFLE = 2

    def __init__(
        self,
        length: int,
        batch_size: int,
        mode: int,
        seed: int = 42,
        *,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.length = _integer("length", length, 1)
        self.batch_size = _integer("batch_size", batch_size, 1)
        try:
            self.mode = type(self).Mode(_integer("mode", mode, 0))
        except ValueError:
            modes = type(self).Mode
            raise ValueError(
                f"mode must be one of {[int(m) for m in modes]} "
                f"({', '.join(m.name for m in modes)}), got {mode!r}"
            ) from None
        if self.mode == 2 and self.batch_size > self.length:
            # Without replacement a batch holds each record at most once: a
            # batch asked to be larger is one whole permutation (loaderx 2.x).
            self.batch_size = self.length
        self.seed = _integer("seed", seed, 0)
        self.rank = _integer("rank", rank, 0)
        self.world_size = _integer("world_size", world_size, 1)
        self._native = _native.Sampler(
            self.length, self.batch_size, int(self.mode), self.seed, self.rank, self.world_size
        )
        #: Indices per ``next()``: ``batch_size // world_size``.
        self.local_batch_size: int = self._native.local_batch_size

    def next(self) -> np.ndarray:
        """This rank's share of the next batch: a fresh uint64 array the caller may keep."""
        try:
            out = np.empty(self.local_batch_size, dtype=np.uint64)
        except MemoryError:
            raise MemoryError(
                f"out of memory: batch_size {self.local_batch_size} (this rank's share) needs "
                f"{8 * self.local_batch_size} bytes for the indices of a batch, which cannot be "
                f"allocated"
            ) from None
        self._native.fill(out)
        return out

    def seek(self, step: int) -> None:
        """Position the stream at global batch `step` (forwards or backwards):
        the next ``next()`` returns that batch."""
        self._native.seek(_integer("step", step, 0))

    @property
    def step(self) -> int:
        """Number of batches drawn so far (the next batch's global step)."""
        return int(self._native.step)

    def state_dict(self) -> dict[str, int]:
        """A small dict of ints that :meth:`load_state_dict` resumes from:
        ``version``, ``seed``, ``mode``, ``length``, ``batch_size``, ``step``,
        ``rank`` and ``world_size`` (JSON-serialisable as it is)."""
        state: dict[str, int] = self._native.state()
        return state

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume from :meth:`state_dict`: takes its seed and step. Its length,
        batch size and mode must match this sampler's (``ValueError`` if not,
        or if an entry is missing); its rank and world size may differ: the
        same global stream goes on, split over this sampler's ranks."""
        self._native.restore(state)
        self.seed = self._native.state()["seed"]

    def __iter__(self) -> Sampler:
        return self

    def __next__(self) -> np.ndarray:
        return self.next()

    def __repr__(self) -> str:
        return (
            f"Sampler(length={self.length}, batch_size={self.batch_size}, "
            f"mode={type(self).__name__}.Mode.{self.mode.name}, seed={self.seed}, "
            f"rank={self.rank}, world_size={self.world_size})"
        )
