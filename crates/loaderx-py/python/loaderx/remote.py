"""Stores in object storage: uploading one (:func:`push`). Reading is
``Dense.open(url, storage_options=...)`` (docs/REMOTE.md)."""

from __future__ import annotations

import os
from typing import Any

from . import _native

__all__ = ["push"]


def push(
    local: str | os.PathLike[str], url: str, storage_options: dict[str, Any] | None = None
) -> list[str]:
    """Upload the closed format v2 store at `local` to `url`
    (``s3://bucket/prefix``, ``gs://``, ``az://``, ``abfs://``, ``file://``):
    every chunk file by multipart upload, then ``meta.zr`` last, so a reader
    opening `url` meanwhile finds no store or a whole one. Do not write the
    store while it is pushed. `storage_options` as for ``Dense.open``.
    Returns the names of the objects written, ``meta.zr`` last.

    A committed collection (a directory with ``manifest.zc``) is uploaded
    part by part (each part's stores, then its ``.complete`` mark), then
    its manifest, last: a reader opening `url` meanwhile finds no
    collection or the whole one.

    Any other directory holding stores (a converter's output: a store per
    column, collections, ``classes.txt``) is uploaded whole: every data
    object, then every ``meta.zr``, then part marks and manifests. This
    also finishes a publish of ``Dense.create(url)`` or a converter that
    failed (their error names the staged copy).

    ``FileExistsError`` when `url` already holds a store (or a
    collection, or for a directory a ``meta.zr`` or manifest where one
    would go); ``ValueError`` for a URL or option not understood;
    ``ZrecordError`` when `local` is not a v2 store or a collection and
    holds none, or an upload fails (no store whose ``meta.zr`` had not
    gone up is published then)."""
    from .containers.base import _options

    path = os.fspath(local)
    if not isinstance(path, str):
        path = os.fsdecode(path)
    objects, _ = _native.push(path, url, _options(storage_options))
    return list(objects)
