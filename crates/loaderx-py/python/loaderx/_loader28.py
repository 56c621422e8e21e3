"""The loaderx 2.8 loader: ``loaderx.Loader(streams, sampler, *, workers=4,
prefetch=4, transform=...)``.

``streams`` maps names to lists of placement views (``store.bind(allocator)``),
every list of one length ``P``. Each step draws one global batch from
``sampler.next()``, splits it into ``P`` contiguous equal parts, and reads
part ``p`` through view ``p`` of every stream: a step is the list of ``P``
dicts ``{name: value}``, passed through ``transform``. The loader is endless
(no ``len``).

* ``workers=0`` runs sampler, gather and transform in ``next()``, in the
  caller's thread; an exception leaves the loader usable.
* ``workers >= 1``: batches are made ahead, up to ``prefetch`` of them. When
  the sampler is a :class:`loaderx.sampler.Sampler` and each stream's views
  are views of one store of this package, the native loader (the
  ``loaderx-loader`` crate) gathers them on ``workers`` threads with no GIL,
  from the sampler's step at construction on, and the sampler is moved to
  the step after each batch delivered; a non-identity ``transform`` runs on
  ``workers`` stage threads (``_transform.TransformStage``) off the
  consumer's, on as many batches at once (a transform that releases the GIL
  runs in parallel), which are still handed out in sampler order. Batches
  arrive in sampler order (2.8 promises only completion order for more than
  one worker; sampler order is one). Otherwise (another sampler, views of
  other kinds, one stream's views over several stores) the same stage
  threads draw each step from the sampler in turn (copying its indices),
  gather it through the views and transform it, several steps at once,
  and hand the steps out in sampler order; the sampler then stands up to
  ``prefetch + workers`` steps ahead of the consumer.
* With ``workers >= 1`` an exception (a failed read, a transform's error)
  is raised by ``next()`` and the loader is closed: later calls raise
  ``StopIteration``, as in 2.8.
* ``close()`` (and leaving ``with``) stops the workers and drops what was
  made ahead; it is idempotent and never hangs; ``next()`` then raises
  ``StopIteration``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from ._engine import Engine
from ._lib import checked_integer
from ._nativeengine import NativeEngine
from ._transform import TransformStage
from .containers.views import DenseView, DLTensor, RaggedBatch, RaggedView, _Store, _Writer
from .sampler import _NATIVE_MODE, _U64_MAX, Sampler


def _identity(shards: Any) -> Any:
    return shards


def _check_streams(streams: dict[str, Any]) -> None:
    """2.8's checks of a streams mapping, with its exception types."""
    if not streams:
        raise ValueError("need at least one stream")
    not_lists = [n for n, views in streams.items() if not isinstance(views, list) or not views]
    if not_lists:
        raise ValueError(f"streams must map names to nonempty view lists: {not_lists}")
    counts = {name: len(views) for name, views in streams.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"stream view lists must have matching lengths, got {counts}")
    not_views = [
        f"{name}[{pos}]"
        for name, views in streams.items()
        for pos, view in enumerate(views)
        if not (hasattr(view, "__getitems__") and hasattr(view, "__len__"))
        or isinstance(view, (_Store, _Writer))
        or getattr(view, "writer", False) is True
    ]
    if not_views:
        raise ValueError(f"streams must contain placement views: {not_views}")
    lengths = {
        f"{name}[{pos}]": len(view)
        for name, views in streams.items()
        for pos, view in enumerate(views)
    }
    if len(set(lengths.values())) != 1:
        raise ValueError(f"all streams must hold the same number of records, got {lengths}")
    if next(iter(lengths.values())) == 0:
        raise ValueError("stream length must be positive")


def _shard_count_error(count: int, parts: int) -> ValueError:
    return ValueError(
        f"sampled batch length {count} must be positive and divisible by the {parts} "
        "stream views"
    )


def _dense_shards(view: DenseView, parts: int) -> Callable[..., list[Any]]:
    dtype, item_shape = view.dtype, tuple(view.item_shape)

    def shards(data: np.ndarray, offsets: Any, idxs: np.ndarray) -> list[Any]:
        batch = data.view(dtype).reshape((-1, *item_shape))
        size = batch.shape[0] // parts
        return [DLTensor._wrap(batch[p * size : (p + 1) * size]) for p in range(parts)]

    return shards


def _ragged_shards(view: RaggedView, parts: int) -> Callable[..., list[Any]]:
    reader = view._reader()

    def shards(data: np.ndarray, offsets: Any, idxs: np.ndarray) -> list[Any]:
        flat, elements, shapes = reader.flat_batch(data, offsets, idxs)
        size = shapes.shape[0] // parts
        out = []
        for p in range(parts):
            lo, hi = p * size, (p + 1) * size
            first = int(elements[lo])
            out.append(
                RaggedBatch(
                    DLTensor._wrap(flat[first : int(elements[hi])]),
                    DLTensor._wrap((elements[lo : hi + 1] - first).astype(np.int32)),
                    DLTensor._wrap(np.ascontiguousarray(shapes[lo:hi], dtype=np.uint32)),
                )
            )
        return out

    return shards


class _ShardedNative(NativeEngine):
    """The native engine, each batch turned from ``{name: [shard, ...]}``
    into ``[{name: shard}, ...]``."""

    def batch_of(self, got: tuple[int, Any, Any]) -> Any:
        by_name = super().batch_of(got)
        parts = len(next(iter(by_name.values())))
        return [{name: by_name[name][p] for name in by_name} for p in range(parts)]


class _SamplerSteps:
    """The source of a :class:`TransformStage` where the native engine
    cannot serve (a sampler of another kind, views of other objects, one
    stream's views over several stores): each step's indices drawn from
    the sampler's ``next()``, one step at a time and copied (a sampler may
    lend one buffer for every step), and gathered through the views on the
    stage's threads, several steps at once."""

    def __init__(self, sampler: Any, gather: Callable[[Any], Any]) -> None:
        self.sampler = sampler
        self.gather = gather
        self.step = 0
        self.closed = False

    def state(self) -> dict[str, Any]:
        return {"step": self.step}

    def next_columns(self) -> tuple[int, np.ndarray] | None:
        if self.closed:
            return None
        idxs = np.array(self.sampler.next(), copy=True)
        step, self.step = self.step, self.step + 1
        return step, idxs

    def batch_of(self, got: tuple[int, np.ndarray]) -> Any:
        return self.gather(got[1])

    def close(self) -> None:
        self.closed = True


def _native_engine(
    streams: dict[str, list[Any]],
    sampler: Any,
    workers: int,
    prefetch: int,
    transform: Callable[[Any], Any],
) -> Engine | None:
    """The native engine serving these streams from `sampler`'s step, or
    ``None`` when it cannot (see the module docstring)."""
    if type(sampler) is not Sampler or sampler.step > _U64_MAX:
        return None
    parts = len(next(iter(streams.values())))
    plans: list[tuple[str, Any, int]] = []
    views: list[Callable[..., list[Any]]] = []
    for name, bound in streams.items():
        first = bound[0]
        if not isinstance(first, (DenseView, RaggedView)):
            return None
        if any(type(v) is not type(first) or v._store is not first._store for v in bound):
            return None
        if len(first) != sampler.length:
            return None
        spec = first._reader().native_stream(name)
        if spec is None:
            return None
        plans.append(spec)
        views.append(
            _dense_shards(first, parts)
            if isinstance(first, DenseView)
            else _ragged_shards(first, parts)
        )
    count = sampler._indices.size
    if count % parts:
        raise _shard_count_error(count, parts)
    spec = SimpleNamespace(
        length=sampler.length,
        batch_size=count,
        mode=_NATIVE_MODE[int(sampler.mode)],
        seed=sampler.seed,
        rank=0,
        world_size=1,
    )
    engine = _ShardedNative(plans, views, spec, workers, prefetch)  # type: ignore[arg-type]
    try:
        state = engine.state()
        state["step"] = sampler.step
        engine.restore(state)
        if transform is _identity:
            return engine
        return TransformStage(engine, transform, prefetch, threads=workers)
    except BaseException:
        engine.close()
        raise


class Loader:
    """Endless loader of sharded steps over placement views (see the module
    docstring)."""

    def __init__(
        self,
        streams: Any,
        sampler: Any,
        *,
        workers: int = 4,
        prefetch: int = 4,
        transform: Callable[[list[dict[str, Any]]], Any] = _identity,
    ) -> None:
        self._engine: Engine | None = None
        self._closed = False
        streams = dict(streams)
        _check_streams(streams)
        self.streams: dict[str, list[Any]] = {name: list(v) for name, v in streams.items()}
        self.shard_count = len(next(iter(self.streams.values())))
        self.sampler = sampler
        if not callable(transform):
            raise TypeError(f"transform must be callable, got {transform!r}")
        self.transform = transform
        self.workers = checked_integer(workers, "workers", 0, must_be="non-negative")
        self.prefetch = checked_integer(prefetch, "prefetch", 1, must_be="positive")
        #: Whether the engine draws from the sampler itself (ahead of the
        #: consumer), rather than the native engine moving it per batch.
        self._draws = False
        if self.workers:
            self._engine = _native_engine(
                self.streams, sampler, self.workers, self.prefetch, transform
            )
            if self._engine is None:
                source = _SamplerSteps(sampler, self._gather)
                self._engine = TransformStage(
                    source, transform, self.prefetch, threads=self.workers  # type: ignore[arg-type]
                )
                self._draws = True

    def _gather(self, idxs: Any) -> list[dict[str, Any]]:
        count = len(idxs)
        parts = self.shard_count
        if count == 0 or count % parts:
            raise _shard_count_error(count, parts)
        size = count // parts
        return [
            {name: views[p].__getitems__(idxs[p * size : (p + 1) * size])
             for name, views in self.streams.items()}
            for p in range(parts)
        ]  # fmt: skip

    def _step(self) -> Any:
        return self.transform(self._gather(self.sampler.next()))

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self.workers == 0:
            return self._step()
        try:
            if self._engine is None:
                return self._step()
            batch = self._engine.next()
            if not self._draws:
                self.sampler.seek(self._engine.state()["step"])
            return batch
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Loader:
        return self

    def __len__(self) -> int:
        raise TypeError("Eternal loader has no length.")

    def close(self) -> None:
        """Stops the workers and drops what was made ahead (idempotent)."""
        if self._closed:
            return
        self._closed = True
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        self.sampler = None

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except BaseException:  # noqa: BLE001 - nothing to report to at collection
            pass


__all__ = ["Loader"]
