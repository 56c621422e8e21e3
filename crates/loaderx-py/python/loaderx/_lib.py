"""Locate the native extension; check the integer arguments of the pure-Python
2.8 classes.

loaderx 0.5.x shipped one shared library per component (``zrecord``,
``sampler``) and exposed their paths here; code and tests that print or check
those paths keep working. Every component now lives in one extension module,
``loaderx._native``, so every known stem resolves to that file.

:func:`checked_integer` is the one integer check of ``Allocator``,
``Allocation``, ``Loader`` and ``Sampler``, with the error types and messages
their tests pin (2.8's and ours).
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

import numpy as np

#: Directory holding the extension module.
LIB_DIR = Path(__file__).resolve().parent

_STEMS = ("zrecord", "sampler", "native", "_native")


def path(stem: str) -> str:
    """Absolute path of the native library that provides `stem`.

    Args:
        stem: Component name without prefix or extension, e.g. ``"zrecord"``.

    Raises:
        ImportError: If `stem` names no loaderx component, or the extension
            is missing (a source tree that was never built).
    """
    if stem not in _STEMS:
        raise ImportError(f"loaderx has no native component {stem!r}; known: {list(_STEMS[:2])}")
    from . import _native

    found = getattr(_native, "__file__", None)
    if not found or not Path(found).is_file():
        raise ImportError(
            f"loaderx._native has no file on disk (found {found!r}); build it with "
            "`maturin develop --release` in crates/loaderx-py or `pip install ./crates/loaderx-py`"
        )
    return str(Path(found).resolve())


def checked_integer(
    value: Any,
    name: str,
    low: int | None = None,
    high: int | None = None,
    *,
    must_be: str = "",
    strict: bool = True,
) -> int:
    """`value` as an int (by ``operator.index``) within ``low..high``, both
    inclusive, ``None`` leaving that side open.

    Args:
        value: The argument as given.
        name: The argument's name, first word of every message.
        low, high: The bounds.
        must_be: What an argument outside the bounds should have been: the
            message is ``f"{name} must be {must_be}"``.
        strict: ``True`` refuses a bool (NumPy's too) and turns every
            refusal of ``operator.index`` into ``f"{name} must be an
            integer"``. ``False`` takes what ``operator.index`` takes
            (``True`` is 1) and lets its own ``TypeError`` through, as
            :class:`loaderx.sampler.Sampler` does.

    Raises:
        TypeError: `value` is not an integer.
        ValueError: `value` is outside the bounds.
    """
    if not strict:
        number = operator.index(value)
    elif isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer")
    else:
        try:
            number = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an integer") from None
    if (low is not None and number < low) or (high is not None and number > high):
        raise ValueError(f"{name} must be {must_be}")
    return number
