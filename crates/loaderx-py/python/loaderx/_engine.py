"""What the :class:`~loaderx.DataLoader` facade needs of an engine, and the
thread machinery the two Python-thread engines share.

An engine produces batches (a dict of named streams, or what the
``transform`` made of one) in sampler order and knows where its stream
stands. Three implement it: the native engine
(``_nativeengine``), the pure-Python engine for duck-typed datasets
(``_pyengine``), and the transform stage (``_transform``), which wraps the
native engine to run a ``transform`` off the consumer's thread. The facade
only ever calls these four methods, whichever it holds.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Protocol

#: Seconds between checks of a stop flag (and, in ``next()``, for Ctrl-C).
POLL = 0.1

#: Longest ``close()`` waits for threads to finish the batch they are on.
#: A thread still running user code (a ``transform``, a duck-typed
#: stream's ``__getitems__``) after that is not waited for: it is a daemon
#: thread, and what it produces is dropped.
CLOSE_WAIT = 1.0


def name_of(fn: Any) -> str:
    """How an error names the user's callable `fn`."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name if isinstance(name, str) else repr(fn)


def call_user(fn: Callable[[Any], Any], arg: Any, what: str) -> Any:
    """``fn(arg)``, with a StopIteration it raises turned into a
    RuntimeError naming `what` (as PEP 479 does for generators): a
    StopIteration handed out by ``next()`` would end a ``for`` loop over
    the endless loader silently."""
    try:
        return fn(arg)
    except StopIteration as exc:
        raise RuntimeError(
            f"{what} raised StopIteration, which would silently end a for loop over the "
            f"loader; raise another exception to fail the batch"
        ) from exc

FORKED_MESSAGE = (
    "this DataLoader was created in the parent of this forked process and its "
    "worker threads do not exist here; create a new DataLoader in this process"
)


class Engine(Protocol):
    def next(self) -> Any:
        """The next batch; ``StopIteration`` once closed; a failed batch
        raises its exception in its place."""

    def state(self) -> dict[str, Any]:
        """The loader state (built in Rust: the sampler state plus the stream
        names) of the batch ``next()`` returns next."""

    def restore(self, state: dict[str, Any]) -> None:
        """Drop prefetched batches and continue from `state`; on error, keep
        going from where it was."""

    def close(self) -> None:
        """Stop; idempotent; never hangs."""


class Threaded:
    """Threads producing batches under one condition, for an engine that
    hands them out in order.

    A subclass implements ``_run`` (the body of each thread) and, called
    with the condition held, ``_ready`` (is the next item there?), ``_pop``
    (take it, as ``(ok, value)``) and ``_discard`` (drop all). Stopping never
    hangs: the threads finish at most the batch they are on, and a consumer
    waiting in ``_take`` gets ``StopIteration``. ``close()`` waits at most
    ``CLOSE_WAIT`` for the threads: one still running user code is left
    behind (a daemon thread, which finds the engine stopped when the user
    code returns). In a child forked after the
    threads started, their condition may have been held at the fork by a
    thread that does not exist there, so stopping touches nothing (the child
    just stops using the engine) and taking raises ``RuntimeError``.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.stopped = False
        self.threads: list[threading.Thread] = []

    def _run(self) -> None:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def _pop(self) -> tuple[bool, Any]:
        raise NotImplementedError

    def _discard(self) -> None:
        raise NotImplementedError

    def _spawn(self, names: list[str]) -> None:
        self.stopped = False
        self.threads = [threading.Thread(target=self._run, name=n, daemon=True) for n in names]
        for thread in self.threads:
            thread.start()

    def _take(self) -> Any:
        """The next item, once there: its value, or the exception it failed
        with, raised."""
        if os.getpid() != self.pid:
            raise RuntimeError(FORKED_MESSAGE)
        with self.cond:
            while True:
                if self.stopped:
                    raise StopIteration
                if self._ready():
                    break
                self.cond.wait(POLL)
            ok, value = self._pop()
            self.cond.notify_all()
        if not ok:
            raise value
        return value

    def _stop(self, wait: float | None = None) -> None:
        """Stops the threads and waits for them: until they end (a restore,
        which restarts them from a new position, must not race with them),
        or at most `wait` seconds in all (``close``)."""
        if os.getpid() != self.pid:
            return
        with self.cond:
            self.stopped = True
            self._discard()
            self.cond.notify_all()
        current = threading.current_thread()
        deadline = None if wait is None else time.monotonic() + wait
        for thread in self.threads:
            if thread is not current:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
