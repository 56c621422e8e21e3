"""What the :class:`~loaderx.DataLoader` facade needs of an engine.

An engine produces ``{"data": ..., "label": ...}`` batches in sampler order
and knows where its stream stands. Three implement it: the native engine
(``_nativeengine``), the pure-Python engine for duck-typed datasets
(``_pyengine``), and the transform stage (``_transform``), which wraps the
native engine to run a ``transform`` off the consumer's thread. The facade
only ever calls these four methods, whichever it holds.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

#: Seconds between checks of a stop flag (and, in ``next()``, for Ctrl-C).
POLL = 0.1

FORKED_MESSAGE = (
    "this DataLoader was created in the parent of this forked process and its "
    "worker threads do not exist here; create a new DataLoader in this process"
)


class Engine(Protocol):
    def next(self) -> dict[str, Any]:
        """The next batch; ``StopIteration`` once closed; a failed batch
        raises its exception in its place."""

    def state(self) -> dict[str, int]:
        """The sampler state of the batch ``next()`` returns next."""

    def restore(self, state: dict[str, int]) -> None:
        """Drop prefetched batches and continue from `state`; on error, keep
        going from where it was."""

    def close(self) -> None:
        """Stop; idempotent; never hangs."""


def forked(pid: int) -> bool:
    """Whether this is a child forked after the threads of the process `pid`
    were started. There, their lock may have been held at the fork by a
    thread that does not exist here, so closing must not touch it (or join
    threads that are not there): the child just stops using the object."""
    return os.getpid() != pid
