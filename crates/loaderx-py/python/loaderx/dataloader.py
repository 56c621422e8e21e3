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

Either way batches arrive in sampler order, so a seed fixes the whole
stream; a failed batch raises its exception from ``next()`` in its place
and the loader goes on; ``close()`` never hangs (workers finish at most the
batch they are on, a consumer blocked in ``next()`` is woken with
``StopIteration``); and loaders still open at interpreter exit are closed.
"""

from __future__ import annotations

import atexit
import operator
import os
import threading
import weakref
from typing import Any, Callable

from . import _native
from ._sampler import Sampler
from ._zrecord import _Closing
from .dataset import Dataset

_POLL = 0.1  # seconds between checks of the stop flag / Ctrl-C

_LIVE: weakref.WeakSet[DataLoader] = weakref.WeakSet()


def _identity(x: Any) -> Any:
    return x


def _forked(pid: int) -> bool:
    """Whether this is a child forked after the threads of the process `pid`
    were started. There, their lock may have been held at the fork by a
    thread that does not exist here, so closing must not touch it (or join
    threads that are not there): the child just stops using the object."""
    return os.getpid() != pid


class _Pipeline:
    """The state the worker threads share. Deliberately holds no reference to
    the DataLoader, so dropping the loader runs its ``__del__``."""

    def __init__(
        self,
        dataset: Any,
        labelset: Any,
        sampler: Sampler,
        transform: Callable[[Any], Any],
        prefetch: int,
        workers: int,
    ) -> None:
        self.base_step = sampler.step
        self.pid = os.getpid()
        self.dataset = dataset
        self.labelset = labelset
        self.sampler = sampler
        self.transform = transform
        self.prefetch = prefetch
        self.cond = threading.Condition()
        self.stopped = False
        self.issued = 0  # sequence number of the next batch to draw
        self.delivered = 0  # sequence number the consumer waits for
        self.ready: dict[int, tuple[bool, Any]] = {}
        self.threads = [
            threading.Thread(target=self._work, name=f"loaderx-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self.threads:
            thread.start()

    def _work(self) -> None:
        cond = self.cond
        while True:
            with cond:
                while not self.stopped and self.issued >= self.delivered + self.prefetch:
                    cond.wait(_POLL)
                if self.stopped:
                    return
                seq = self.issued
                try:
                    idxs = self.sampler.next()
                except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                    self.issued += 1
                    self.ready[seq] = (False, exc)
                    cond.notify_all()
                    continue
                self.issued += 1
            try:
                data, label = self.transform(
                    (self.dataset.__getitems__(idxs), self.labelset.__getitems__(idxs))
                )
                item: tuple[bool, Any] = (True, {"data": data, "label": label})
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                item = (False, exc)
            with cond:
                if self.stopped:
                    return
                self.ready[seq] = item
                cond.notify_all()

    def next(self) -> Any:
        if os.getpid() != self.pid:
            raise RuntimeError(
                "this DataLoader was created in the parent of this forked process and its "
                "worker threads do not exist here; create a new DataLoader in this process"
            )
        cond = self.cond
        with cond:
            while True:
                if self.stopped:
                    raise StopIteration
                if self.delivered in self.ready:
                    ok, value = self.ready.pop(self.delivered)
                    self.delivered += 1
                    cond.notify_all()
                    break
                cond.wait(_POLL)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if _forked(self.pid):
            return
        with self.cond:
            self.stopped = True
            self.ready.clear()
            self.cond.notify_all()
        current = threading.current_thread()
        for thread in self.threads:
            if thread is not current:
                thread.join()


class _TransformStage:
    """Applies a non-identity ``transform`` to native batches on its own
    thread, keeping sampler order, so the consumer only pops ready batches.
    Holds no reference to the DataLoader."""

    def __init__(
        self,
        native: Any,
        views: list[tuple[Any, tuple[int, ...]]],
        transform: Callable[[Any], Any],
        prefetch: int,
        next_step: int,
    ) -> None:
        self.native = native
        self.views = views
        self.transform = transform
        self.prefetch = prefetch
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.items: list[tuple[int, bool, Any]] = []
        self.stopped = False
        self.next_step = next_step  # step of the batch next() returns next
        self.thread = threading.Thread(target=self._run, name="loaderx-transform", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        cond = self.cond
        while True:
            with cond:
                while not self.stopped and len(self.items) >= self.prefetch:
                    cond.wait(_POLL)
                if self.stopped:
                    return
            step = -1
            try:
                got = self.native.next()
                if got is None:  # the native loader was closed
                    return
                step, idxs, columns = got
                item: tuple[int, bool, Any] = (step, True, self.transform(_views(idxs, columns, self.views)))
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                item = (step, False, exc)
            with cond:
                if self.stopped:
                    return
                self.items.append(item)
                cond.notify_all()

    def next(self) -> Any:
        if os.getpid() != self.pid:
            raise RuntimeError(
                "this DataLoader was created in the parent of this forked process and its "
                "threads do not exist here; create a new DataLoader in this process"
            )
        cond = self.cond
        with cond:
            while not self.items:
                if self.stopped:
                    raise StopIteration
                cond.wait(_POLL)
            step, ok, value = self.items.pop(0)
            if step >= 0:
                self.next_step = step + 1
            cond.notify_all()
        if not ok:
            raise value
        data, label = value
        return {"data": data, "label": label}

    def close(self) -> None:
        if _forked(self.pid):
            return
        with self.cond:
            self.stopped = True
            self.items.clear()
            self.cond.notify_all()
        if self.thread is not threading.current_thread():
            self.thread.join()


def _views(idxs: Any, columns: Any, views: list[tuple[Any, tuple[int, ...]]]) -> tuple[Any, Any]:
    """The (data, label) arrays of a native batch, as zero-copy typed views."""
    n = idxs.shape[0]
    (data_bytes, _), (label_bytes, _) = columns
    (dtype, shape), (ldtype, lshape) = views
    return (
        data_bytes.view(dtype).reshape((n, *shape)),
        label_bytes.view(ldtype).reshape((n, *lshape)),
    )


@atexit.register
def _close_all() -> None:
    for loader in list(_LIVE):
        loader.close()


def _native_store(ds: Any) -> Any:
    """The native store behind a plain, open Dataset, else None."""
    if not isinstance(ds, Dataset) or type(ds).__getitems__ is not Dataset.__getitems__:
        return None
    zr = getattr(ds, "_store", None)
    return None if zr is None else getattr(zr, "_store", None)


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


_STATE_KEYS = ("seed", "mode", "length", "batch_size", "step", "rank", "world_size")


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
        self._transform = transform
        # Validates length, batch size, mode and seed for both engines.
        sampler = Sampler(len(dataset), batch_size, mode, seed)
        self._native: Any = None
        self._stage: _TransformStage | None = None
        self._pipeline: _Pipeline | None = None
        stores = (_native_store(dataset), _native_store(labelset))
        if stores[0] is not None and stores[1] is not None:
            self._views = [(dataset.dtype, dataset.shape), (labelset.dtype, labelset.shape)]
            self._native = _native.Loader(
                [
                    ("data", stores[0], dataset._itemsize),
                    ("label", stores[1], labelset._itemsize),
                ],
                sampler.length,
                batch_size,
                int(sampler.mode),
                sampler.seed,
                num_workers,
                prefetch_size,
            )
            self._start_stage()
        else:
            self._sampler = sampler
            self._start_pipeline()
        _LIVE.add(self)

    def _start_stage(self) -> None:
        if self._transform is not _identity:
            step = dict(zip(_STATE_KEYS, self._native.state()))["step"]
            self._stage = _TransformStage(
                self._native, self._views, self._transform, self.prefetch_size, step
            )

    def _start_pipeline(self) -> None:
        self._pipeline = _Pipeline(
            self.dataset,
            self.labelset,
            self._sampler,
            self._transform,
            self.prefetch_size,
            self.num_workers,
        )

    def __len__(self) -> int:
        raise TypeError("an endless DataLoader has no length")

    def __iter__(self) -> DataLoader:
        return self

    def __next__(self) -> dict[str, Any]:
        stage = self._stage
        if stage is not None:
            staged: dict[str, Any] = stage.next()
            return staged
        if self._native is not None:
            got = self._native.next()
            if got is None:
                raise StopIteration
            _step, idxs, columns = got
            data, label = _views(idxs, columns, self._views)
            return {"data": data, "label": label}
        pipeline = self._pipeline
        if pipeline is None:
            raise StopIteration
        result: dict[str, Any] = pipeline.next()
        return result

    def state_dict(self) -> dict[str, int]:
        """Where the stream stands: the sampler state of the batch ``next()``
        returns next. :meth:`load_state_dict` resumes from it."""
        if self._native is not None:
            state = dict(zip(_STATE_KEYS, self._native.state()))
            if self._stage is not None:
                with self._stage.cond:
                    state["step"] = self._stage.next_step
            return state
        pipeline = self._pipeline
        if pipeline is None:
            raise ValueError("state_dict() on a closed DataLoader")
        with pipeline.cond:
            state = self._sampler.state_dict()
            state["step"] = pipeline.base_step + pipeline.delivered
        return state

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from :meth:`state_dict`: prefetched batches are dropped
        and the next batch is the state's. Length, batch size and mode must
        match this loader's (``ValueError`` if not)."""
        try:
            values = [int(state[k]) for k in _STATE_KEYS]
        except KeyError as exc:
            raise ValueError(f"loader state has no {exc.args[0]!r} entry") from None
        if self._native is not None:
            stage, self._stage = self._stage, None
            if stage is not None:
                stage.close()
            try:
                self._native.restore(*values)
            finally:
                self._start_stage()
            return
        pipeline = self._pipeline
        if pipeline is None:
            raise ValueError("load_state_dict() on a closed DataLoader")
        current = self.state_dict()
        pipeline.close()
        try:
            self._sampler.load_state_dict(dict(zip(_STATE_KEYS, values)))
        except BaseException:
            self._sampler.load_state_dict(current)  # resume where we were
            raise
        finally:
            self._start_pipeline()

    def close(self) -> None:
        """Stop the workers and drop prefetched batches. Idempotent; never hangs
        on a full queue; waits at most for the batches being gathered."""
        stage = getattr(self, "_stage", None)
        native = getattr(self, "_native", None)
        if native is not None:
            native.close()  # wakes a stage thread blocked in native.next()
        if stage is not None:
            self._stage = None
            stage.close()
        pipeline = getattr(self, "_pipeline", None)
        if pipeline is not None:
            self._pipeline = None
            pipeline.close()
