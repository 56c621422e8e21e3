"""The native engine: streams the ``loaderx-loader`` crate gathers itself,
served by ``loaderx._native.Loader``.

Its worker threads compute each step's indices and gather every stream with
no GIL, parking finished batches in a reorder window; each column's buffer
reaches NumPy without a copy, and this adapter only hands it to the stream's
view (a typed reshape for a dense stream, views into the one buffer for a
ragged one).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import _native
from .compat05.sampler import Sampler

#: Turns one gathered column, ``(bytes, offsets or None, indices)``, into
#: the value a batch holds for that stream (`indices`: the records the
#: batch was gathered at, in batch order).
View = Callable[[np.ndarray, "np.ndarray | None", np.ndarray], Any]


class NativeEngine:
    """Batches from the native loader, as dicts of stream views."""

    def __init__(
        self,
        streams: list[tuple[str, _native.Store, int]],
        views: list[View],
        sampler: Sampler,
        workers: int,
        prefetch: int,
        lookahead: int = 0,
    ) -> None:
        self.names = [name for name, _store, _item_len in streams]
        self.views = views
        self.loader = _native.Loader(
            streams,
            sampler.length,
            sampler.batch_size,
            int(sampler.mode),
            sampler.seed,
            workers,
            prefetch,
            sampler.rank,
            sampler.world_size,
            lookahead,
        )

    def next_with_step(self) -> tuple[int, dict[str, Any]] | None:
        """``(step, batch)`` of the next batch, or ``None`` once closed; a
        failed batch raises its error."""
        got = self.loader.next()
        if got is None:
            return None
        step, idxs, columns = got
        batch = {
            name: view(data, offsets, idxs)
            for name, view, (data, offsets) in zip(self.names, self.views, columns)
        }
        return step, batch

    def next(self) -> dict[str, Any]:
        got = self.next_with_step()
        if got is None:
            raise StopIteration
        return got[1]

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.loader.state()
        return state

    def restore(self, state: dict[str, Any]) -> None:
        self.loader.restore(state)

    def close(self) -> None:
        self.loader.close()
