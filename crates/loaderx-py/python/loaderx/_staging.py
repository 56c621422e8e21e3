"""Writing to a URL: what is written is staged in a local directory and
published when it is finished (``Dense.create(url)``, the converters'
``output``). See docs/REMOTE.md, "Getting a store there"."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from . import _native
from .errors import ContainerExistsError, ZrecordError


def staging_root(staging_dir: str | os.PathLike[str] | None) -> str:
    """The directory staging directories are made in: `staging_dir`, else
    ``LOADERX_STAGING_DIR``, else the system's temporary directory."""
    if staging_dir is not None:
        root = os.fsdecode(os.fspath(staging_dir))
    else:
        root = os.environ.get("LOADERX_STAGING_DIR") or tempfile.gettempdir()
    if not os.path.isdir(root):
        raise FileNotFoundError(f"the staging directory {root} does not exist")
    return root


def make_staging(staging_dir: str | os.PathLike[str] | None) -> str:
    """A new, private directory to stage a write in."""
    return tempfile.mkdtemp(prefix="loaderx-staging-", dir=staging_root(staging_dir))


def check_free(url: str, options: list[tuple[str, str]] | None, what: str) -> None:
    """Refuses `url` when its prefix already holds any object: `what` (a
    store, a converted output) is written to a new prefix only."""
    found = _native.first_object(url, options)
    if found is not None:
        raise ContainerExistsError(
            f"{url} already holds objects ({url.rstrip('/')}/{found}, ...): {what} is "
            f"written to a new, empty prefix only; nothing was written"
        )


def publish(local: str, url: str, options: list[tuple[str, str]] | None, kept: str) -> list[str]:
    """Uploads the staged `local` to `url` (data first, every ``meta.zr``
    after it, manifests last) and returns the objects written. On failure
    raises an error naming `url` and saying that the staged copy is kept
    at `kept` and how to publish it."""
    failed: ZrecordError
    try:
        objects, _ = _native.publish(local, url, options)
        return list(objects)
    except ZrecordError as exc:
        failed = ZrecordError(
            exc.code, f"{url}: publishing failed ({exc}). {_kept(local, url, kept)}"
        )
        cause: BaseException = exc
    except FileExistsError as exc:
        failed = ContainerExistsError(
            f"{url}: {exc} (it appeared after the write began). {_kept(local, url, kept)}"
        )
        cause = exc
    #: Where the staged copy is (reported on stderr when the publish ran in
    #: a finalizer or at exit).
    failed.staged = kept  # type: ignore[attr-defined]
    raise failed from cause


def _kept(local: str, url: str, kept: str) -> str:
    return (
        f"The staged copy is kept at {kept}: publish it with `loaderx push {local} {url}` "
        f"(or remove it)"
    )


def discard(staging: str) -> None:
    """Removes a staging directory and what it holds."""
    shutil.rmtree(staging, ignore_errors=True)


def shown(path: Any) -> str:
    """`path` as text (a URL stays as given: no ``Path`` that collapses
    ``//``)."""
    out = os.fspath(path)
    return out if isinstance(out, str) else os.fsdecode(out)
