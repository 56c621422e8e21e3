"""Write a Ray Data ``Dataset`` as a loaderx collection.

``loaderx.ray.write(dataset, root)`` runs a :class:`CollectionDatasink`:
each Ray write task writes its blocks as one part
(:func:`loaderx.collection.write_part`, named after the task's index, so a
task Ray retries replaces its own part); ``on_write_complete`` commits
exactly the parts the tasks reported; ``on_write_failed`` publishes
nothing (parts already written stay, unread, until a new commit).

Columns map as the blocks' NumPy form says: a fixed-shape tensor column is
a :class:`~loaderx.Dense` column of its item shape, a scalar column a
Dense ``()`` column, a variable-shaped tensor column a
:class:`~loaderx.Ragged` column, a binary column of JPEG or PNG files an
image column (the files kept as they are), any other binary column
``uint8`` Ragged records. String columns are refused, by name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import ray.data
from ray.data.block import BlockAccessor
from ray.data.datasource.datasink import Datasink, WriteResult

from . import collection

__all__ = ["CollectionDatasink", "write"]


def _column_values(name: str, chunks: list[np.ndarray]) -> Any:
    """One column's values over a task's blocks, in the form
    :func:`loaderx.collection.write_part` takes."""
    dtypes = {c.dtype for c in chunks}
    if any(d.kind in "US" for d in dtypes):
        raise TypeError(f"column {name!r} holds strings, which loaderx does not store")
    if all(c.dtype != object for c in chunks) and len({c.shape[1:] for c in chunks}) == 1:
        return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    items: list[Any] = []
    for c in chunks:
        items.extend(c if c.dtype == object else list(c))
    for i, v in enumerate(items):
        if isinstance(v, str):
            raise TypeError(
                f"column {name!r} holds strings (record {i}: {v[:20]!r}), which loaderx does "
                f"not store"
            )
    return items


def _write_columns(blocks: Iterable[Any]) -> dict[str, Any] | None:
    """The columns of a task's blocks (``None`` when they hold no rows)."""
    chunks: dict[str, list[np.ndarray]] = {}
    rows = 0
    for block in blocks:
        acc = BlockAccessor.for_block(block)
        if acc.num_rows() == 0:
            continue
        rows += acc.num_rows()
        arrays = acc.to_numpy()
        if not isinstance(arrays, Mapping):
            arrays = {"data": arrays}
        for name, values in arrays.items():
            chunks.setdefault(name, []).append(np.asarray(values))
    if rows == 0:
        return None
    return {name: _column_values(name, parts) for name, parts in chunks.items()}


class CollectionDatasink(Datasink):
    """A Ray Data ``Datasink`` writing a loaderx collection at `root`."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        codec: str | Mapping[str, str] = collection.DEFAULT_CODEC,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.root, self.url, _ = collection._location(root, storage_options)
        self.codec = codec
        self.storage_options = None if storage_options is None else dict(storage_options)
        #: The entries the commit ignored (set by ``on_write_complete``).
        self.ignored: list[str] = []

    def on_write_start(self, schema: Any = None) -> None:
        if not self.url:
            os.makedirs(self.root, exist_ok=True)

    def _write_part(self, name: str, columns: Mapping[str, Any]) -> None:
        """Writes one part (a seam for tests that fail a task on purpose)."""
        collection.write_part(
            self.root, name, columns, codec=self.codec, storage_options=self.storage_options
        )

    def write(self, blocks: Iterable[Any], ctx: Any) -> str | None:
        """Writes this task's blocks as part ``part-<task index>``; returns
        its name, or ``None`` when the blocks hold no rows."""
        columns = _write_columns(blocks)
        if columns is None:
            return None
        name = collection.part_name(int(ctx.task_idx))
        self._write_part(name, columns)
        return name

    def on_write_complete(self, write_result: WriteResult[str | None]) -> None:
        """Commits exactly the parts the tasks reported, in part order."""
        parts = sorted(p for p in write_result.write_returns if p is not None)
        if not parts:
            raise ValueError(f"the dataset written to {self.root} holds no rows: nothing to commit")
        self.ignored = collection.commit(self.root, parts, storage_options=self.storage_options)

    def on_write_failed(self, error: Exception) -> None:
        """Publishes nothing: without a commit the parts are not read."""

    def get_name(self) -> str:
        return "LoaderxCollection"


def write(
    dataset: ray.data.Dataset,
    root: str | os.PathLike[str],
    codec: str | Mapping[str, str] = collection.DEFAULT_CODEC,
    storage_options: Mapping[str, Any] | None = None,
    *,
    ray_remote_args: dict[str, Any] | None = None,
    concurrency: int | None = None,
) -> list[str]:
    """Write `dataset` as a loaderx collection at `root` and commit it;
    returns the entries the commit ignored. `codec` is one codec or
    ``{column: codec}``; `ray_remote_args` and `concurrency` go to
    ``Dataset.write_datasink``."""
    sink = CollectionDatasink(root, codec=codec, storage_options=storage_options)
    dataset.write_datasink(sink, ray_remote_args=ray_remote_args, concurrency=concurrency)
    return sink.ignored
