"""The pure-Python engine: serves any object with ``__len__`` and
``__getitems__`` (the slower path of :class:`~loaderx.DataLoader`).

Python worker threads draw each step's indices from the :class:`Sampler`,
call ``__getitems__`` on every stream and ``transform`` on the batch dict, and park
the result in a window of ``prefetch`` batches; ``next()`` hands them out in
sampler order. The engine holds no reference to the DataLoader, so dropping
the loader runs its finalizer.
"""

from __future__ import annotations

from typing import Any, Callable

from . import _native
from ._engine import POLL, Threaded, call_user, name_of
from .compat05.sampler import Sampler


class PyEngine(Threaded):
    """Worker threads over duck-typed datasets; see the module docstring."""

    def __init__(
        self,
        streams: dict[str, Any],
        sampler: Sampler,
        transform: Callable[[Any], Any],
        prefetch: int,
        workers: int,
    ) -> None:
        super().__init__()
        self.streams = streams
        self.names = list(streams)
        self.sampler = sampler
        self.transform = transform
        self.prefetch = prefetch
        # At most `prefetch` batches are in the making at once: more
        # threads would only wait.
        self.workers = min(workers, prefetch)
        self.transform_what = f"the transform {name_of(transform)}"
        self.stream_what = {
            name: f"__getitems__ of stream {name!r} ({type(s).__name__})"
            for name, s in streams.items()
        }
        self._start()

    def _start(self) -> None:
        """Start workers from the sampler's current step."""
        self.base_step = self.sampler.step
        self.issued = 0  # sequence number of the next batch to draw
        self.delivered = 0  # sequence number the consumer waits for
        self.ready: dict[int, tuple[bool, Any]] = {}
        self._spawn([f"loaderx-worker-{i}" for i in range(self.workers)])

    def _ready(self) -> bool:
        return self.delivered in self.ready

    def _pop(self) -> tuple[bool, Any]:
        item = self.ready.pop(self.delivered)
        self.delivered += 1
        return item

    def _discard(self) -> None:
        self.ready.clear()

    def _run(self, gen: int) -> None:
        cond = self.cond
        while True:
            with cond:
                while not self._gone(gen) and self.issued >= self.delivered + self.prefetch:
                    cond.wait(POLL)
                if self._gone(gen):
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
                with self._user():
                    batch = {
                        name: call_user(s.__getitems__, idxs, self.stream_what[name])
                        for name, s in self.streams.items()
                    }
                    item: tuple[bool, Any] = (
                        True,
                        call_user(self.transform, batch, self.transform_what),
                    )
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                item = (False, exc)
            with cond:
                if self._gone(gen):
                    return
                self.ready[seq] = item
                cond.notify_all()

    def next(self) -> Any:
        return self._take()

    def state(self) -> dict[str, Any]:
        with self.cond:
            state = self.sampler.state_dict()
            state["step"] = self.base_step + self.delivered
        return _native.loader_state(state, self.names)

    def restore(self, state: dict[str, Any]) -> None:
        current = self.state()
        self._stop(restart=True)
        try:
            self.sampler.load_state_dict(_native.sampler_state_of(state, self.names))
        except BaseException:
            self.sampler.load_state_dict(_native.sampler_state_of(current, self.names))
            raise
        finally:
            self._start()

    def close(self) -> None:
        self._stop()  # at most CLOSE_WAIT: the workers run user code
