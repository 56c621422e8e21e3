"""The transform stage: runs a non-identity ``transform`` on the native
engine's batches on threads of its own (one, or as many as the loader's
workers), ``prefetch`` batches ahead, and hands them out in sampler order,
so the consumer only pops ready batches. A transform that releases the GIL
(NumPy, PyTorch) runs on several batches at once. An exception the
transform raises is handed out by ``next()`` in that batch's place.

The stage is itself an engine (``next``/``state``/``restore``/``close``)
wrapping the native one; it holds no reference to the DataLoader.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ._engine import POLL, Threaded, call_user, name_of
from ._nativeengine import NativeEngine


class TransformStage(Threaded):
    """``transform`` applied to a native engine's batches on `threads`
    stage threads. Each thread takes the source's next batch (one at a
    time, so a batch's number is its place in sampler order), transforms
    it and files it under that number; ``next()`` takes them in order."""

    def __init__(
        self,
        source: NativeEngine,
        transform: Callable[[Any], Any],
        prefetch: int,
        threads: int = 1,
    ) -> None:
        super().__init__()
        self.source = source
        self.transform = transform
        self.what = f"the transform {name_of(transform)}"
        self.prefetch = prefetch
        self.stage_threads = max(1, threads)
        #: Held while taking a batch from the source and numbering it.
        self.pull = threading.Lock()
        self._start()

    def _start(self) -> None:
        #: Batch number -> (step, ok, value), filed as transforms finish.
        self.items: dict[int, tuple[int, bool, Any]] = {}
        self.reserved = 0  # batches taken or being taken from the source
        self.numbered = 0  # batches taken from the source
        self.handed = 0  # batches next() handed out
        self.next_step = self.source.state()["step"]  # of the batch next() returns next
        self._spawn([f"loaderx-transform-{i}" for i in range(self.stage_threads)])

    def _ready(self) -> bool:
        return self.handed in self.items

    def _pop(self) -> tuple[bool, Any]:
        step, ok, value = self.items.pop(self.handed)
        self.handed += 1
        if step >= 0:
            self.next_step = step + 1
        return ok, value

    def _discard(self) -> None:
        self.items.clear()

    def _run(self, gen: int) -> None:
        cond = self.cond
        # At most `prefetch` batches made ahead of the consumer, plus one
        # per thread: finished, or in a thread's hands.
        bound = self.prefetch + self.stage_threads
        while True:
            with cond:
                while not self._gone(gen) and self.reserved - self.handed >= bound:
                    cond.wait(POLL)
                if self._gone(gen):
                    return
                self.reserved += 1
            step = -1
            number = -1
            try:
                with self.pull:
                    with cond:
                        if self._gone(gen):
                            return
                        number = self.numbered
                        self.numbered += 1
                    got = self.source.next_columns()
                if got is None:  # the native loader was closed
                    return
                step = got[0]
                with self._user():  # the streams' hooks and the transform
                    batch = self.source.batch_of(got)
                    item: tuple[int, bool, Any] = (
                        step,
                        True,
                        call_user(self.transform, batch, self.what),
                    )
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                item = (step, False, exc)
            with cond:
                if self._gone(gen):
                    return
                self.items[number] = item
                cond.notify_all()

    def next(self) -> Any:
        return self._take()

    def state(self) -> dict[str, Any]:
        state = self.source.state()
        with self.cond:
            state["step"] = self.next_step
        return state

    def restore(self, state: dict[str, Any]) -> None:
        current = self.state()
        self._stop(restart=True)
        try:
            self.source.restore(state)
        except BaseException:
            # The source ran ahead by what this stage had prefetched: rewind
            # it to the consumer's position so no batch is skipped.
            self.source.restore(current)
            raise
        finally:
            self._start()

    def close(self) -> None:
        self.source.close()  # wakes the stage thread if it waits in the source
        self._stop()  # at most CLOSE_WAIT: the stage thread runs the transform
