"""Every exception loaderx raises of its own, in one place (re-exported
where each API generation spells it: ``loaderx``, ``loaderx.zrecord``,
``loaderx.converter``).

Store failures are :class:`ZrecordError` with a stable negative ``code``;
the codes and their meanings are the engine's (``loaderx._native``), which
raises these classes itself.
"""

from __future__ import annotations

import io
from typing import Any

from . import _native

#: ``{code: (name, meaning)}`` for every stable error code, as the store
#: engine defines them (``loaderx._native.ERROR_CODES``).
ERROR_CODES: dict[int, tuple[str, str]] = dict(_native.ERROR_CODES)
_CODE_OF = {name: code for code, (name, _meaning) in ERROR_CODES.items()}

# The codes the Python layer raises itself, for inputs that cannot reach
# the engine.
_INDEX_OUT_OF_RANGE = _CODE_OF["INDEX_OUT_OF_RANGE"]
_RECORD_SIZE = _CODE_OF["RECORD_SIZE"]
_BUFFER_TOO_SMALL = _CODE_OF["BUFFER_TOO_SMALL"]
_IO = _CODE_OF["IO"]

#: :attr:`ZrecordError.code` of :class:`ContainerExistsError` (loaderx 2.x's
#: code for a store that already exists).
EXISTS: int = -12


class ZrecordError(RuntimeError):
    """A store operation failed.

    ``code`` is one of the stable negative codes of :data:`ERROR_CODES`
    (the table below is generated from it):

{table}
    """

    code: int

    def __new__(cls, code: int, message: str | None = None) -> ZrecordError:
        # An index out of range is also an IndexError (what loaderx 2.x and
        # Python sequences raise), whoever raises it.
        if cls is ZrecordError and int(code) == _INDEX_OUT_OF_RANGE:
            cls = ZrecordIndexError
        return super().__new__(cls, code, message)

    def __init__(self, code: int, message: str | None = None) -> None:
        code = int(code)
        known = ERROR_CODES.get(code)
        meaning = known[1] if known else f"unknown zrecord error {code}"
        super().__init__(meaning if message is None else message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, str(self)))


class ZrecordIndexError(ZrecordError, IndexError):
    """:class:`ZrecordError` -3, an index out of range: also an
    ``IndexError``. ``ZrecordError(-3, ...)`` makes one."""


class ClosedError(ValueError, RuntimeError):
    """An operation on a closed store, container, sampler or loader: a
    ``ValueError``, as for a closed file, and a ``RuntimeError``, as loaderx
    2.x raises."""


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type where loaderx 2.x raises ``ValueError``
    (``data_shards``, item shape dimensions, ``ndim``, dictionary training
    sources): a ``TypeError``, as Python raises for a wrong type, and that
    ``ValueError``."""


class ContainerModeError(io.UnsupportedOperation, RuntimeError):
    """Reading through a writer, or appending through a reader: an
    :class:`io.UnsupportedOperation` (a ``ValueError`` and an ``OSError``),
    as for a file opened in the other mode, and a ``RuntimeError``, as
    loaderx 2.x raises."""


class ContainerExistsError(FileExistsError, ZrecordError):
    """``create`` on a path that already holds a store, or a directory with
    other files in it: a ``FileExistsError``, and the :class:`ZrecordError`
    with code -12 (:data:`EXISTS`) that loaderx 2.x raises (so also a
    ``RuntimeError``). Nothing at the path is changed."""

    def __new__(cls, message: str) -> ContainerExistsError:
        return OSError.__new__(cls, message)

    def __init__(self, message: str) -> None:
        OSError.__init__(self, message)
        self.code = EXISTS

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self),))


class ConversionError(ValueError):
    """A source that cannot be stored losslessly; the message names the
    column (or file member) and why."""


def _code_table() -> str:
    width = max(len(meaning) for _name, meaning in ERROR_CODES.values())
    rule = f"    ==== {'=' * width}"
    rows = [
        f"    {code:<4} {meaning}"
        for code, (_name, meaning) in sorted(ERROR_CODES.items(), reverse=True)
    ]
    return "\n".join([rule, *rows, rule])


if ZrecordError.__doc__:
    ZrecordError.__doc__ = ZrecordError.__doc__.replace("{table}", _code_table())

__all__ = [
    "ArgumentTypeError",
    "ClosedError",
    "ContainerExistsError",
    "ContainerModeError",
    "ConversionError",
    "ERROR_CODES",
    "EXISTS",
    "ZrecordError",
    "ZrecordIndexError",
]
