"""Locate the native extension.

loaderx 0.5.x shipped one shared library per component (``zrecord``,
``sampler``) and exposed their paths here; code and tests that print or check
those paths keep working. Every component now lives in one extension module,
``loaderx._native``, so every known stem resolves to that file.
"""

from __future__ import annotations

from pathlib import Path

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
