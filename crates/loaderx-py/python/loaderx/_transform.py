"""The transform stage: runs a non-identity ``transform`` on the native
engine's batches on its own thread, ``prefetch`` batches ahead and in
sampler order, so the consumer only pops ready batches. An exception the
transform raises is handed out by ``next()`` in that batch's place.

The stage is itself an engine (``next``/``state``/``restore``/``close``)
wrapping the native one; it holds no reference to the DataLoader.
"""

from __future__ import annotations

from typing import Any, Callable

from ._engine import POLL, Threaded, call_user, name_of
from ._nativeengine import NativeEngine


class TransformStage(Threaded):
    """``transform`` applied to a native engine's batches on a stage thread."""

    def __init__(
        self, source: NativeEngine, transform: Callable[[Any], Any], prefetch: int
    ) -> None:
        super().__init__()
        self.source = source
        self.transform = transform
        self.what = f"the transform {name_of(transform)}"
        self.prefetch = prefetch
        self._start()

    def _start(self) -> None:
        self.items: list[tuple[int, bool, Any]] = []
        self.next_step = self.source.state()["step"]  # of the batch next() returns next
        self._spawn(["loaderx-transform"])

    def _ready(self) -> bool:
        return bool(self.items)

    def _pop(self) -> tuple[bool, Any]:
        step, ok, value = self.items.pop(0)
        if step >= 0:
            self.next_step = step + 1
        return ok, value

    def _discard(self) -> None:
        self.items.clear()

    def _run(self, gen: int) -> None:
        cond = self.cond
        while True:
            with cond:
                while not self._gone(gen) and len(self.items) >= self.prefetch:
                    cond.wait(POLL)
                if self._gone(gen):
                    return
            step = -1
            try:
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
                self.items.append(item)
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
