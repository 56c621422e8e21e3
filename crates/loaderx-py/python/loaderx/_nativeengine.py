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


def fixed_view(dtype: np.dtype, shape: tuple[int, ...]) -> View:
    def view(data: np.ndarray, _offsets: np.ndarray | None, _idxs: np.ndarray) -> np.ndarray:
        return data.view(dtype).reshape((-1, *shape))

    return view


def ragged_view(dtype: np.dtype) -> View:
    def view(data: np.ndarray, offsets: np.ndarray | None, _idxs: np.ndarray) -> list[np.ndarray]:
        assert offsets is not None  # the loader gives offsets for every ragged stream
        items = data.view(dtype)
        bounds = (offsets // dtype.itemsize).tolist()
        return [items[lo:hi] for lo, hi in zip(bounds, bounds[1:])]

    return view


def native_plan(name: str, stream: Any) -> tuple[tuple[str, Any, int], View] | None:
    """How the native loader gathers `stream` and views its columns, or
    ``None`` when it cannot (the stream is then served by Python threads)."""
    hook = getattr(stream, "native_stream", None)
    spec = hook(name) if callable(hook) else None
    if spec is None:
        return None
    indexed = getattr(stream, "native_indexed_batch", None)
    if callable(indexed):
        return spec, indexed
    custom = getattr(stream, "native_batch", None)
    if callable(custom):
        return spec, lambda data, offsets, _idxs: custom(data, offsets)
    dtype = np.dtype(getattr(stream, "dtype", np.uint8))
    if spec[2] == 0:
        return spec, ragged_view(dtype)
    return spec, fixed_view(dtype, tuple(stream.shape))


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

    def next_columns(self) -> tuple[int, Any, Any] | None:
        """The next batch as the native loader hands it out, ``(step,
        indices, columns)``, or ``None`` once closed; a failed batch raises
        its error. Runs no user code."""
        got: tuple[int, Any, Any] | None = self.loader.next()
        return got

    def batch_of(self, got: tuple[int, Any, Any]) -> Any:
        """The batch of `got` (from ``next_columns``): each stream's view of
        its column, which may run a stream's own hook (user code)."""
        _step, idxs, columns = got
        return {
            name: view(data, offsets, idxs)
            for name, view, (data, offsets) in zip(self.names, self.views, columns)
        }

    def next_with_step(self) -> tuple[int, Any] | None:
        """``(step, batch)`` of the next batch, or ``None`` once closed; a
        failed batch raises its error."""
        got = self.next_columns()
        return None if got is None else (got[0], self.batch_of(got))

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
