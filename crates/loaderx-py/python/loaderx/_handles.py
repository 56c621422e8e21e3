"""The lifecycle every handle shares (stores, containers, loaders): a
context manager and finalizer around an idempotent ``close()``, and the
set of open handles closed (their pending appends committed) when the
interpreter exits."""

from __future__ import annotations

import atexit
import sys
import weakref
from typing import TypeVar

from . import _native

_C = TypeVar("_C", bound="_Closing")


class _Closing:
    """Context manager and finalizer for objects with an idempotent ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception as exc:  # noqa: BLE001 - nothing useful to do in a finalizer
            _report_unraised(self, exc)


# Open handles (Zrecord and the typed containers), closed (so their pending
# appends are committed) when the interpreter exits: finalizers are not
# guaranteed to run then.
_OPEN: weakref.WeakSet[_Closing] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for handle in list(_OPEN):
        try:
            handle.close()
        except Exception as exc:  # noqa: BLE001 - exiting anyway
            _report_unraised(handle, exc)


def _report_unraised(handle: object, exc: BaseException) -> None:
    """Says on stderr that a write made behind an append failed when no
    call was left to raise it (the writer was never closed explicitly):
    the records of that append are not in the store."""
    if getattr(exc, "staged", None):
        # A writer created at a URL whose publish at exit failed.
        sys.stderr.write(f"loaderx: {type(exc).__name__}: {exc}\n")
        return
    notes = getattr(exc, "__notes__", None) or []
    if any(_BEHIND_NOTE in note for note in notes):
        where = getattr(handle, "path", "?")
        sys.stderr.write(
            f"loaderx: the writer of {where} was not closed and a write behind its last "
            f"append failed: {type(exc).__name__}: {exc} ({notes[-1]})\n"
        )


#: Part of the note added to an error raised by a write made behind an
#: append (``loaderx._native``, module ``writer``), by which it is recognised.
_BEHIND_NOTE: str = _native.BEHIND_NOTE
