"""Write a Spark ``DataFrame`` as a loaderx collection.

``loaderx.spark.write(df, root)`` runs one task per partition through
``DataFrame.mapInArrow``: each writes its rows as one part
(:func:`loaderx.collection.write_part`, named after the partition, so an
attempt Spark retries replaces its own part) and returns the part's name;
the driver then commits exactly the parts the job returned. A job that
fails publishes nothing.

Columns map from their Arrow form: numbers and booleans are
:class:`~loaderx.Dense` scalar columns; arrays are :class:`~loaderx.Ragged`
columns of rank 1, or :class:`~loaderx.Dense` columns of a given item shape
when named in `shapes` (Spark has no fixed-size array type, and a task
sees only its partition); binary columns of JPEG or PNG files are image
columns (the files kept as they are), other binary columns ``uint8``
Ragged records. Strings, maps, structs, nested variable arrays and nulls
are refused with an error naming the column.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from . import collection

__all__ = ["write"]

#: What writes one part: ``(root, part, columns, codec)``.
PartWriter = Callable[[str, int, Mapping[str, Any], Any], str]


def _default_writer(
    root: str,
    part: int,
    columns: Mapping[str, Any],
    codec: Any,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    return collection.write_part(root, part, columns, codec=codec, storage_options=storage_options)


def _column(name: str, arr: pa.ChunkedArray | pa.Array, shape: tuple[int, ...] | None) -> Any:
    """One Arrow column in the form ``write_part`` takes."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if arr.null_count:
        raise ValueError(f"column {name!r} holds {arr.null_count} nulls, which loaderx does not store")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        raise TypeError(f"column {name!r} holds strings, which loaderx does not store")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if shape is not None:
            raise TypeError(f"column {name!r} is binary: shapes= applies to array columns")
        return arr.to_pylist()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = t.value_type
        if not (pa.types.is_integer(inner) or pa.types.is_floating(inner) or pa.types.is_boolean(inner)):
            raise TypeError(
                f"column {name!r} is an array of {inner}: loaderx stores arrays of numbers"
            )
        flat = arr.flatten()
        if flat.null_count:
            raise ValueError(f"column {name!r} holds null array elements")
        values = flat.to_numpy(zero_copy_only=False)
        if pa.types.is_fixed_size_list(t):
            offsets = np.arange(len(arr) + 1, dtype=np.int64) * t.list_size
        else:
            offsets = arr.offsets.to_numpy().astype(np.int64) - int(arr.offsets[0].as_py())
        if shape is not None:
            size = int(np.prod(shape))
            lens = np.diff(offsets)
            bad = np.nonzero(lens != size)[0]
            if len(bad):
                raise ValueError(
                    f"column {name!r}: shapes says {tuple(shape)} ({size} values); row {bad[0]} of "
                    f"this partition holds {lens[bad[0]]}"
                )
            return values.reshape((len(arr), *shape))
        return np.split(values, offsets[1:-1]) if len(arr) else []
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        if shape is not None:
            raise TypeError(f"column {name!r} is a scalar column: shapes= applies to arrays")
        return arr.to_numpy(zero_copy_only=False)
    raise TypeError(f"column {name!r} has Arrow type {t}, which loaderx does not store")


def _columns(table: pa.Table, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    return {
        name: _column(name, table.column(name), tuple(shapes[name]) if name in shapes else None)
        for name in table.column_names
    }


def write(
    df: Any,
    root: str | os.PathLike[str],
    codec: str | Mapping[str, str] = collection.DEFAULT_CODEC,
    storage_options: Mapping[str, Any] | None = None,
    *,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    part_writer: PartWriter | None = None,
) -> list[str]:
    """Write `df` as a loaderx collection at `root` (a path every executor
    and the driver see, or a URL with `storage_options`, as for
    :func:`loaderx.collection.write_part`) and commit it; returns the entries the commit
    ignored. `codec` is one codec or ``{column: codec}``; `shapes` maps
    array columns to the item shape that makes them Dense. `part_writer`
    replaces what writes one part (``write_part``; for fault injection)."""
    base, url, _ = collection._location(root, storage_options)
    options = None if storage_options is None else dict(storage_options)
    if not url:
        os.makedirs(base, exist_ok=True)
    fixed = {k: tuple(int(d) for d in v) for k, v in (shapes or {}).items()}
    unknown = sorted(set(fixed) - set(df.columns))
    if unknown:
        raise ValueError(f"shapes names columns {unknown} that the DataFrame does not have")
    writer = part_writer or functools.partial(_default_writer, storage_options=options)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        got = list(batches)
        rows = sum(b.num_rows for b in got)
        if rows:
            table = pa.Table.from_batches(got)
            ctx = TaskContext.get()
            if ctx is None:
                raise RuntimeError("loaderx.spark: the part writer runs outside a Spark task")
            part = ctx.partitionId()
            name = writer(base, part, _columns(table, fixed), codec)
            yield pa.RecordBatch.from_pydict(
                {"part": [name], "records": [rows]},
                schema=pa.schema([("part", pa.string()), ("records", pa.int64())]),
            )

    done = df.mapInArrow(task, "part string, records long").collect()
    parts = sorted(row["part"] for row in done)
    if not parts:
        raise ValueError(f"the DataFrame written to {base} holds no rows: nothing to commit")
    return collection.commit(base, parts, storage_options=options)
