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

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable, Protocol

#: Seconds between checks of a stop flag (and, in ``next()``, for Ctrl-C).
POLL = 0.1

#: Longest ``close()`` and ``load_state_dict()`` wait for threads to
#: finish the batch they are on. A thread still running user code (a
#: ``transform``, a duck-typed stream's ``__getitems__``, a stream's
#: ``native_batch`` hook) after that is not waited for: it is a daemon
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

    A subclass implements ``_run(gen)`` (the body of each thread of
    generation `gen`, which ends once ``_gone(gen)``), runs user code inside
    ``with self._user():`` and, called with the condition held, ``_ready``
    (is the next item there?), ``_pop`` (take it, as ``(ok, value)``) and
    ``_discard`` (drop all). Stopping never hangs: the threads finish at
    most the batch they are on, and a consumer waiting in ``_take`` gets
    ``StopIteration``. ``close()`` and a restart (``restore``) wait at most
    ``CLOSE_WAIT`` for a thread running user code: past that it is left
    behind (a daemon thread, which finds its generation gone when the user
    code returns, and drops what it made). A restart waits for a thread in
    the engine's own calls until it is out of them, so the new threads never
    race the old ones for the engine's state. In a child forked after the
    threads started, their condition may have been held at the fork by a
    thread that does not exist there, so stopping touches nothing (the child
    just stops using the engine) and taking raises ``RuntimeError``.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.stopped = False
        self.threads: list[threading.Thread] = []
        #: Bumped by each start: a thread of an older one ends at its next check.
        self.generation = 0
        #: Idents of the threads running user code now.
        self.in_user: set[int] = set()

    def _run(self, gen: int) -> None:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def _pop(self) -> tuple[bool, Any]:
        raise NotImplementedError

    def _discard(self) -> None:
        raise NotImplementedError

    def _spawn(self, names: list[str]) -> None:
        with self.cond:
            # The new generation first: a thread of the old one that takes
            # the lock now must already see itself gone.
            self.generation += 1
            gen = self.generation
            self.stopped = False
        self.threads = [
            threading.Thread(target=self._run, args=(gen,), name=n, daemon=True) for n in names
        ]
        for thread in self.threads:
            thread.start()

    def _gone(self, gen: int) -> bool:
        """Whether a thread of generation `gen` is to end (condition held):
        the engine stopped, or started again since."""
        return self.stopped or gen != self.generation

    @contextlib.contextmanager
    def _user(self) -> Iterator[None]:
        """Marks the calling thread as running user code, which touches
        none of the engine's state (a restart need not wait for it)."""
        me = threading.get_ident()
        with self.cond:
            self.in_user.add(me)
        try:
            yield
        finally:
            with self.cond:
                self.in_user.discard(me)

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

    def _stop(self, *, restart: bool = False) -> None:
        """Stops the threads and waits for them, at most ``CLOSE_WAIT``
        seconds in all for threads running user code. For a `restart` (a
        restore, which starts threads from a new position), a thread in the
        engine's own calls is waited for until it leaves them."""
        if os.getpid() != self.pid:
            return
        with self.cond:
            self.stopped = True
            self._discard()
            self.cond.notify_all()
        current = threading.current_thread()
        deadline = time.monotonic() + CLOSE_WAIT
        for thread in self.threads:
            if thread is current:
                continue
            while thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0 and (not restart or thread.ident in self.in_user):
                    break
                thread.join(POLL if restart else left)
