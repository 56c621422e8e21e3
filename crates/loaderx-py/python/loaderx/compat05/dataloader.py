"""Endless, prefetching batch loader.

Two call shapes, told apart by the first argument:

* ``DataLoader(dataset, labelset, num_workers=4, batch_size=256,
  prefetch_size=4, mode=1, seed=42, transform=...)`` (loaderx 0.5.x): two
  sets, batches ``{"data": ..., "label": ...}``, ``transform((data, label))``
  returns the pair, IID by default, one host unless ``rank``/``world_size``
  are given.
* ``DataLoader({"image": a, "label": b, ...}, transform_workers=4,
  batch_size=256, prefetch_size=4, mode=2, seed=42, transform=...)``
  (loaderx 2.x, named streams): a dict of streams, batches with the same
  keys, ``transform(batch_dict)`` returns the batch handed out, shuffle
  (``CYCLIC``) by default, and the rank and world size the running job
  reports (torch.distributed, JAX) unless given.

Two engines behind one class:

* When every stream can be gathered natively (a :class:`~loaderx.Dataset`,
  or any object whose ``native_stream(name)`` hook says how), the native
  loader (``loaderx._native.Loader``, the ``loaderx-loader`` crate) runs: its
  worker threads compute each step's indices, gather all streams straight
  from the stores with no GIL, and park finished batches in a reorder window
  of ``prefetch_size`` slots; the buffers reach NumPy without a copy. With
  the default (identity) transform no Python code runs per batch but
  ``__next__``; any other ``transform`` runs on a stage thread off the
  consumer's, ``prefetch_size`` batches ahead, and an exception it raises
  comes out of ``next()`` in that batch's place.
* Otherwise (any object with ``__len__`` and ``__getitems__``: the slower
  path) Python worker threads call ``__getitems__`` and ``transform`` and
  deliver in the same order.

The engines live in ``_nativeengine``, ``_pyengine`` and ``_transform`` (the
stage that runs a transform off the consumer's thread) behind one small
interface (``_engine.Engine``); this module is the facade that picks one.

Over stores read by URL (object storage), the native loader also requests
the records of the ``lookahead`` batches after each one a worker starts
(default 4; 0 turns it off), so they are on their way while earlier batches
are gathered and consumed; what each store holds ahead is bounded by its
``lookahead_bytes`` storage option. Local stores ignore it.

Either way batches arrive in sampler order, so a seed fixes the whole
stream; a failed batch raises its exception from ``next()`` in its place
and the loader goes on (a ``StopIteration`` from a transform or a stream
fails its batch as a ``RuntimeError`` naming it, as PEP 479 does for
generators); ``close()`` never hangs (workers finish at most the batch they
are on, threads running user code are waited for at most a second and then
left behind as daemon threads, a consumer blocked in ``next()`` is woken
with ``StopIteration``); and loaders still open at interpreter exit are
closed.

A stream plugs into the native loader through two methods: ``native_stream(
name)`` returns ``(name, native store, bytes per record)`` (0 bytes: ragged
records) or ``None``; ``native_batch(data, offsets)``, if present, turns the
gathered ``uint8`` buffer (and, for a ragged stream, its ``n + 1`` byte
offsets) into the batch's value. A stream that needs the batch's record
indices too (a multi-axis ``Ragged`` reads its records' shapes) has
``native_indexed_batch(data, offsets, idxs)`` instead. Without either, a fixed-size
stream is viewed as ``(n, *stream.shape)`` of ``stream.dtype``, and a ragged
one as a list of 1-D ``stream.dtype`` arrays that are views into one buffer.
"""

from __future__ import annotations

import atexit
import inspect
import operator
import weakref
from collections.abc import Mapping
from typing import Any, Callable

from .._engine import Engine
from .._engine import name_of as _engine_name_of
from .._handles import _Closing
from .._nativeengine import NativeEngine, native_plan
from .._pyengine import PyEngine
from .._transform import TransformStage
from ..errors import ClosedError, ContainerModeError
from .sampler import Sampler, resolve_world

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


def _check_lookahead(value: Any) -> int:
    """`lookahead` as a count of batches (0 or more), or the error naming it."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"lookahead must be a whole number of batches, got {value!r}") from None
    if number < 0:
        raise ValueError(f"lookahead must be 0 or more batches, got {number}")
    return number


def _pair_call(
    dataset: Any,
    labelset: Any,
    num_workers: int = 4,
    batch_size: int = 256,
    prefetch_size: int = 4,
    mode: int = 1,
    seed: int = 42,
    transform: Callable[[Any], Any] = _identity,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    lookahead: int = 4,
) -> None:
    """The loaderx 0.5.x call shape (its signature is what is used)."""


def _named_call(
    streams: Any,
    transform_workers: int | None = None,
    batch_size: int = 256,
    prefetch_size: int = 4,
    mode: int = 2,
    seed: int = 42,
    transform: Callable[[Any], Any] = _identity,
    *,
    num_workers: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    lookahead: int = 4,
) -> None:
    """The named-stream call shape (loaderx 2.x; ``num_workers`` is accepted
    as another name for ``transform_workers``)."""


_PAIR_CALL = inspect.signature(_pair_call)
_NAMED_CALL = inspect.signature(_named_call)


class _PairTransform:
    """A 0.5.x ``transform((data, label)) -> (data, label)`` as a transform
    of the batch dict."""

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform
        # Errors name the user's transform (`_engine.name_of`).
        self.__qualname__ = _engine_name_of(transform)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        data, label = self.transform((batch["data"], batch["label"]))
        return {"data": data, "label": label}


def _check_streams(streams: Mapping[Any, Any]) -> int:
    """The common length of `streams`; ``ValueError`` naming what is wrong."""
    if not streams:
        raise ValueError("DataLoader needs at least one stream, got an empty dict")
    bad_names = [name for name in streams if not isinstance(name, str)]
    if bad_names:
        raise ValueError(f"stream names must be str, got {bad_names!r}")
    not_streams = {
        name: type(value).__name__
        for name, value in streams.items()
        if not (hasattr(value, "__len__") and hasattr(value, "__getitems__"))
    }
    if not_streams:
        raise ValueError(
            f"not streams (a stream is a Dataset or any object with __len__ and "
            f"__getitems__): {not_streams}"
        )
    closed = [name for name, value in streams.items() if getattr(value, "closed", False) is True]
    if closed:
        raise ClosedError(f"DataLoader streams must be opened for reading: {closed} are closed")
    writers = [name for name, value in streams.items() if getattr(value, "writer", False) is True]
    if writers:
        raise ContainerModeError(
            f"DataLoader streams must be opened for reading: {writers} are writers (from "
            f"create); close them and pass readers from open"
        )
    lengths = {name: len(value) for name, value in streams.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"streams must have the same length, got {lengths}")
    return next(iter(lengths.values()))


def _check_not_empty(streams: Mapping[str, Any], length: int) -> None:
    """``ValueError`` naming the streams (and where they are) when they hold
    no records: an endless loader has nothing to draw from."""
    if length == 0:
        where = ", ".join(
            f"{name!r} at {value.path}" if getattr(value, "path", None) else repr(name)
            for name, value in streams.items()
        )
        raise ValueError(
            f"DataLoader streams {list(streams)} hold no records ({where}): their length is 0, "
            f"and an endless loader needs at least one"
        )


class DataLoader(_Closing):
    """Endless iterator of batches, one value per stream.

    ``DataLoader(dataset, labelset, ...)`` (0.5.x) yields ``{"data": ...,
    "label": ...}`` after ``transform((data, label))``, which returns the
    pair; ``mode`` defaults to 1 (IID). ``DataLoader({"name": stream, ...},
    ...)`` (named streams, 2.x) yields a dict with those names after
    ``transform(batch_dict)``; ``mode`` defaults to 2 (shuffle) and
    ``transform_workers`` names the worker count. ``mode`` 0 is sequential,
    1 IID (with replacement), 2 shuffle (without replacement).

    ``batch_size`` is the global batch: with ``rank``/``world_size`` (or, for
    named streams, what torch.distributed or JAX report) each rank gets its
    disjoint ``batch_size // world_size`` of every global batch. Any object
    with ``__len__`` and ``__getitems__`` can stand in for a
    :class:`~loaderx.Dataset` (served by Python threads: slower).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        first = args[0] if args else kwargs.get("streams", kwargs.get("dataset"))
        # A collection streams every column, named after it.
        hook = getattr(first, "loader_streams", None)
        if callable(hook) and not isinstance(first, Mapping):
            first = hook()
            if args:
                args = (first, *args[1:])
            else:
                kwargs["streams"] = first
        named = isinstance(first, Mapping)
        call = _NAMED_CALL if named else _PAIR_CALL
        try:
            bound = call.bind(*args, **kwargs)
        except TypeError as exc:
            shape = "streams_dict, ..." if named else "dataset, labelset, ..."
            raise TypeError(f"DataLoader({shape}): {exc}") from None
        bound.apply_defaults()
        opts = bound.arguments
        transform = opts["transform"]
        if not callable(transform):
            raise TypeError(f"transform must be callable, got {transform!r}")
        if named:
            given = [n for n in ("transform_workers", "num_workers") if opts[n] is not None]
            if len(given) > 1:
                raise TypeError("give transform_workers or num_workers, not both")
            workers = opts[given[0]] if given else 4
            workers_name = given[0] if given else "transform_workers"
            self.streams: dict[str, Any] = dict(opts["streams"])
            length = _check_streams(self.streams)
            _check_not_empty(self.streams, length)
            rank, world_size = resolve_world(opts["rank"], opts["world_size"])
        else:
            workers = opts["num_workers"]
            workers_name = "num_workers"
            dataset, labelset = opts["dataset"], opts["labelset"]
            if len(dataset) != len(labelset):
                raise ValueError(
                    f"dataset and labelset must have the same length, got {len(dataset)} "
                    f"and {len(labelset)}"
                )
            self.dataset = dataset
            self.labelset = labelset
            self.streams = {"data": dataset, "label": labelset}
            length = len(dataset)
            _check_not_empty(self.streams, length)
            # The 0.5.x shape stays single-host unless told otherwise.
            if opts["rank"] is None and opts["world_size"] is None:
                rank, world_size = 0, 1
            else:
                rank, world_size = resolve_world(opts["rank"], opts["world_size"])
            if transform is not _identity:
                transform = _PairTransform(transform)
        self.num_workers = _check_positive(workers_name, workers)
        self.batch_size = _check_positive("batch_size", opts["batch_size"])
        self.prefetch_size = _check_positive("prefetch_size", opts["prefetch_size"])
        self.lookahead = _check_lookahead(opts["lookahead"])
        # Validates length, batch size, mode, seed, rank and world size for
        # both engines.
        sampler = Sampler(
            length, self.batch_size, opts["mode"], opts["seed"], rank=rank, world_size=world_size
        )
        self.rank = sampler.rank
        self.world_size = sampler.world_size
        #: Records per stream in each batch this rank receives.
        self.local_batch_size = sampler.local_batch_size
        plans = [native_plan(name, stream) for name, stream in self.streams.items()]
        self._engine: Engine | None
        if all(plan is not None for plan in plans):
            native = NativeEngine(
                [plan[0] for plan in plans if plan is not None],
                [plan[1] for plan in plans if plan is not None],
                sampler,
                self.num_workers,
                self.prefetch_size,
                self.lookahead,
            )
            self._engine = (
                native
                if transform is _identity
                else TransformStage(native, transform, self.prefetch_size)
            )
        else:
            self._engine = PyEngine(
                self.streams, sampler, transform, self.prefetch_size, self.num_workers
            )
        _LIVE.add(self)

    def _live(self, op: str) -> Engine:
        engine = self._engine
        if engine is None:
            raise ClosedError(f"{op} on a closed DataLoader")
        return engine

    def __len__(self) -> int:
        raise TypeError("an endless DataLoader has no length")

    def __iter__(self) -> DataLoader:
        return self

    def __next__(self) -> Any:
        engine = self._engine
        if engine is None:
            raise StopIteration
        return engine.next()

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands: a small JSON-serialisable dict (the
        sampler state of the batch ``next()`` returns next, with
        ``version`` and the stream names). :meth:`load_state_dict` resumes
        from it."""
        return self._live("state_dict()").state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`: prefetched batches are dropped
        and the next batch is the state's, bit for bit, whatever the number
        of workers before and after. Length, batch size, mode and stream
        names must match this loader's (``ValueError`` naming the mismatch);
        rank and world size may differ (the same global stream goes on)."""
        self._live("load_state_dict()").restore(state)

    def close(self) -> None:
        """Stop the workers and drop prefetched batches. Idempotent; never hangs
        on a full queue; waits for the batches being gathered, and at most a
        second for a thread running user code (a ``transform``, a duck-typed
        stream's ``__getitems__``), which is then left to finish on its own
        (a daemon thread; its batch is dropped)."""
        engine = getattr(self, "_engine", None)
        if engine is not None:
            self._engine = None
            engine.close()
