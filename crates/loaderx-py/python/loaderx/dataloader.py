"""Endless, prefetching batch loader.

Two engines behind one class:

* When both sets are :class:`~loaderx.Dataset` objects (the usual case), the
  native loader (``loaderx._native.Loader``, the ``loaderx-loader`` crate)
  runs: its worker threads compute each step's indices, gather data and
  labels straight from the stores with no GIL, and park finished batches in
  a reorder window of ``prefetch_size`` slots; the buffers reach NumPy
  without a copy. With the default (identity) transform no Python code runs
  per batch but ``__next__``; any other ``transform`` runs on a stage thread
  off the consumer's, ``prefetch_size`` batches ahead, and an exception it
  raises comes out of ``next()`` in that batch's place.
* Any other object with ``__len__`` and ``__getitems__`` (the slower path)
  is served by Python worker threads that call ``__getitems__`` and
  ``transform`` and deliver in the same order.

The engines live in ``_nativeengine``, ``_pyengine`` and ``_transform`` (the
stage that runs a transform off the consumer's thread) behind one small
interface (``_engine.Engine``); this module is the facade that picks one.

Either way batches arrive in sampler order, so a seed fixes the whole
stream; a failed batch raises its exception from ``next()`` in its place
and the loader goes on; ``close()`` never hangs (workers finish at most the
batch they are on, a consumer blocked in ``next()`` is woken with
``StopIteration``); and loaders still open at interpreter exit are closed.
"""

from __future__ import annotations

import atexit
import operator
import weakref
from typing import Any, Callable

from ._engine import Engine
from ._nativeengine import NativeEngine
from ._pyengine import PyEngine
from ._sampler import Sampler
from ._transform import TransformStage
from ._zrecord import _Closing
from .dataset import Dataset

_LIVE: weakref.WeakSet[DataLoader] = weakref.WeakSet()


def _identity(x: Any) -> Any:
    return x


@atexit.register
def _close_all() -> None:
    for loader in list(_LIVE):
        loader.close()


def _check_positive(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a positive integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a positive integer, got {value!r}") from None
    if number < 1:
        raise ValueError(f"{name} must be a positive integer, got {number}")
    return number


def _native_stream(ds: Any, name: str) -> Any:
    """What the native loader gathers `ds` from, or None when it cannot."""
    return ds.native_stream(name) if isinstance(ds, Dataset) else None


class DataLoader(_Closing):
    """Endless iterator of ``{"data": ..., "label": ...}`` batches.

    Each ``next()`` returns the two sets gathered at the same indices, after
    ``transform((data, label))``, which returns the ``(data, label)`` pair.
    ``mode`` 0 is sequential, 1 IID (with replacement), 2 shuffle (without
    replacement). Any object with ``__len__`` and ``__getitems__`` can stand
    in for a :class:`~loaderx.Dataset` (served by Python threads: slower).
    """

    def __init__(
        self,
        dataset: Any,
        labelset: Any,
        num_workers: int = 4,
        batch_size: int = 256,
        prefetch_size: int = 4,
        mode: int = 1,
        seed: int = 42,
        transform: Callable[[Any], Any] = _identity,
    ) -> None:
        num_workers = _check_positive("num_workers", num_workers)
        batch_size = _check_positive("batch_size", batch_size)
        prefetch_size = _check_positive("prefetch_size", prefetch_size)
        if len(dataset) != len(labelset):
            raise ValueError(
                f"dataset and labelset must have the same length, got {len(dataset)} "
                f"and {len(labelset)}"
            )
        if not callable(transform):
            raise TypeError(f"transform must be callable, got {transform!r}")
        self.dataset = dataset
        self.labelset = labelset
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.prefetch_size = prefetch_size
        # Validates length, batch size, mode and seed for both engines.
        sampler = Sampler(len(dataset), batch_size, mode, seed)
        streams = (_native_stream(dataset, "data"), _native_stream(labelset, "label"))
        self._engine: Engine | None
        if streams[0] is not None and streams[1] is not None:
            native = NativeEngine(
                list(streams),
                [(dataset.dtype, dataset.shape), (labelset.dtype, labelset.shape)],
                sampler,
                num_workers,
                prefetch_size,
            )
            self._engine = (
                native
                if transform is _identity
                else TransformStage(native, transform, prefetch_size)
            )
        else:
            self._engine = PyEngine(
                dataset, labelset, sampler, transform, prefetch_size, num_workers
            )
        _LIVE.add(self)

    def _live(self, op: str) -> Engine:
        engine = self._engine
        if engine is None:
            raise ValueError(f"{op} on a closed DataLoader")
        return engine

    def __len__(self) -> int:
        raise TypeError("an endless DataLoader has no length")

    def __iter__(self) -> DataLoader:
        return self

    def __next__(self) -> dict[str, Any]:
        engine = self._engine
        if engine is None:
            raise StopIteration
        return engine.next()

    def state_dict(self) -> dict[str, int]:
        """Where the stream stands: the sampler state of the batch ``next()``
        returns next. :meth:`load_state_dict` resumes from it."""
        return self._live("state_dict()").state()

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from :meth:`state_dict`: prefetched batches are dropped
        and the next batch is the state's. Length, batch size and mode must
        match this loader's (``ValueError`` if not)."""
        self._live("load_state_dict()").restore(state)

    def close(self) -> None:
        """Stop the workers and drop prefetched batches. Idempotent; never hangs
        on a full queue; waits at most for the batches being gathered."""
        engine = getattr(self, "_engine", None)
        if engine is not None:
            self._engine = None
            engine.close()
