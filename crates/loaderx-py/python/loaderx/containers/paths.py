"""Where a typed container lives: a local directory or a URL, the
storage options the engine takes, and creation at either (a refused local
create leaves no directory behind; a store created at a URL is written in
a staging directory and published at close)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import _native, _staging
from ..errors import ContainerExistsError


def _missing_dirs(path: str) -> list[str]:
    """`path` and those of its parents that do not exist, deepest first."""
    missing = []
    at = os.path.abspath(path)
    while not os.path.exists(at):
        missing.append(at)
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    return missing


def _remove_empty(dirs: list[str]) -> None:
    """Removes `dirs` (deepest first) while they are empty directories."""
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:
            return


def _is_url(path: str) -> bool:
    """Whether `path` names a store by URL (``scheme://``; a scheme of two
    letters or more, so a Windows drive letter is a path)."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and len(scheme) >= 2 and all(c.isalnum() or c in "+-." for c in scheme)


def _options(storage_options: Any) -> list[tuple[str, str]] | None:
    """`storage_options` as the engine takes them: string keys, values
    turned to strings (``True`` -> ``"true"``)."""
    if storage_options is None:
        return None
    if not isinstance(storage_options, dict):
        raise TypeError(
            f"storage_options must be a dict of str to str, got {type(storage_options).__name__}"
        )
    out = []
    for key, value in storage_options.items():
        if not isinstance(key, str):
            raise TypeError(f"storage_options keys must be str, got {key!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append((key, str(value)))
    return out


def path_text(path: Any) -> str:
    """`path` (a string or path-like) as a string."""
    shown = os.fspath(path)
    return shown if isinstance(shown, str) else os.fsdecode(shown)


def create_local(
    path: str, options: list[tuple[str, str]] | None, staging_dir: Any, what: str, kind: str, dtype: np.dtype,
    shape: tuple[int, ...], ndim: int, codec: str, dictionary: Any, lanes: int,
) -> _native.Store:
    """A new `what` store of `kind` at the local `path`, made with its
    missing parents (which a refused create removes again); in a new or
    empty directory, or over a store it replaces."""
    if options:
        raise ValueError(f"{path} is a local path: storage_options apply to stores created at a URL")
    if staging_dir is not None:
        raise ValueError(f"{path} is a local path: staging_dir applies to stores created at a URL")
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "meta.zr")) and os.listdir(path):
        raise ContainerExistsError(
            f"{path} is a directory with other files in it: create a {what} in a new or empty directory"
        )
    made = _missing_dirs(path)
    try:
        return _native.Store.create_typed(
            path, kind, _native.dtype_name(dtype), list(shape), ndim, codec, dictionary, lanes
        )
    except FileExistsError as exc:
        raise ContainerExistsError(str(exc)) from None
    except BaseException:
        # A refused create leaves nothing behind: the directories it made.
        _remove_empty(made)
        raise


def create_staged(
    url: str, options: list[tuple[str, str]] | None, staging_dir: str | os.PathLike[str] | None, what: str,
    kind: str, dtype: np.dtype, shape: tuple[int, ...], ndim: int, codec: str, dictionary: Any, lanes: int,
) -> tuple[_native.Store, str, str]:
    """A new store for `url` (which must hold nothing yet), written in a
    local staging directory: the store, the staging directory and the
    store's path in it."""
    _staging.check_free(url, options, f"a new {what} store")
    staging = _staging.make_staging(staging_dir)
    local = os.path.join(staging, "store")
    try:
        store = _native.Store.create_typed(
            local, kind, _native.dtype_name(dtype), list(shape), ndim, codec, dictionary, lanes
        )
    except BaseException:
        _staging.discard(staging)
        raise
    return store, staging, local
