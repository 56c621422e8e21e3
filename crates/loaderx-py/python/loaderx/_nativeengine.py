"""The native engine: two plain :class:`~loaderx.Dataset` objects served by
``loaderx._native.Loader`` (the ``loaderx-loader`` crate).

Its worker threads compute each step's indices and gather both stores with
no GIL, parking finished batches in a reorder window; each buffer reaches
NumPy without a copy, and this adapter only views it with the dataset's
dtype and shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _native
from ._sampler import Sampler


class NativeEngine:
    """Batches from the native loader, as typed NumPy views."""

    def __init__(
        self,
        streams: list[tuple[str, _native.Store, int]],
        views: list[tuple[np.dtype, tuple[int, ...]]],
        sampler: Sampler,
        workers: int,
        prefetch: int,
    ) -> None:
        self.views = views
        self.loader = _native.Loader(
            streams,
            sampler.length,
            sampler.batch_size,
            int(sampler.mode),
            sampler.seed,
            workers,
            prefetch,
        )

    def next_with_step(self) -> tuple[int, tuple[Any, Any]] | None:
        """``(step, (data, label))`` of the next batch, or ``None`` once
        closed; a failed batch raises its error."""
        got = self.loader.next()
        if got is None:
            return None
        step, idxs, columns = got
        n = idxs.shape[0]
        (data_bytes, _), (label_bytes, _) = columns
        (dtype, shape), (ldtype, lshape) = self.views
        pair = (
            data_bytes.view(dtype).reshape((n, *shape)),
            label_bytes.view(ldtype).reshape((n, *lshape)),
        )
        return step, pair

    def next(self) -> dict[str, Any]:
        got = self.next_with_step()
        if got is None:
            raise StopIteration
        _step, (data, label) = got
        return {"data": data, "label": label}

    def state(self) -> dict[str, int]:
        return self.loader.state()

    def restore(self, state: dict[str, int]) -> None:
        self.loader.restore(state)

    def close(self) -> None:
        self.loader.close()
