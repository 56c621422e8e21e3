"""Arrow data: Parquet and Arrow IPC (Feather) files, column by column."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..errors import ConversionError
from ..zrecord import Dense, Ragged
from .parallel import check_num_proc, convert_file_parallel
from .output import (
    BATCH_BYTES,
    PathLike,
    Progress,
    _check_columns,
    _Output,
    _read_each,
    _reading,
    _rows_per_batch,
    _run,
    _storable,
    shard_range,
    url_output,
)


# --- Arrow: Parquet and IPC files ----------------------------------------------------------


def _arrow_layout(field: Any, where: str) -> tuple[str, np.dtype, Any]:
    import pyarrow as pa  # type: ignore[import-untyped]

    t = field.type
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return ("dense", _storable(t.to_pandas_dtype(), where), ())
    if pa.types.is_fixed_size_list(t):
        kind, dtype, sub = _arrow_layout(pa.field("item", t.value_type), where)
        if kind != "dense":
            raise ConversionError(f"column {where!r}: a fixed-size list of variable-size values")
        return ("dense", dtype, (t.list_size, *sub))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kind, dtype, sub = _arrow_layout(pa.field("item", t.value_type), where)
        if kind != "dense":
            raise ConversionError(
                f"column {where!r}: lists of variable-length lists are not a rectangular array "
                f"per record"
            )
        return ("ragged", dtype, sub)
    raise ConversionError(
        f"column {where!r} has Arrow type {t}, which cannot be stored losslessly; supported: "
        f"integers, floats, booleans and (fixed-size) lists of them"
    )


def _arrow_values(array: Any, dtype: np.dtype, where: str) -> np.ndarray:
    """The flat values of a primitive Arrow array (no nulls allowed)."""
    if array.null_count:
        raise ConversionError(f"column {where!r} has null values; fill them first")
    values = array.to_numpy(zero_copy_only=False)
    if values.dtype != dtype:
        values = values.astype(dtype)
    return values


def _flatten_fixed(array: Any, depth: int, where: str) -> Any:
    for _ in range(depth):
        if array.null_count:
            raise ConversionError(f"column {where!r} has null values; fill them first")
        array = array.flatten()
    return array


def _arrow_column(
    out: _Output, name: str, column: Any, layout: tuple[str, np.dtype, Any]
) -> int:
    import pyarrow as pa  # type: ignore[import-untyped]

    kind, dtype, spec = layout
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    n = len(column)
    if kind == "dense":
        flat = _flatten_fixed(column, len(spec), name)
        values = _arrow_values(flat, dtype, name)
        dense = out.dense(name, dtype, spec)
        if n:  # an empty record batch (legal in Arrow IPC and Parquet) appends nothing
            dense.append(values.reshape((n, *spec)))
        return n
    if column.null_count:
        raise ConversionError(f"column {name!r} has null rows; fill or drop them first")
    offsets = column.offsets.to_numpy()
    inner = _flatten_fixed(column.values, len(spec), name)
    values = _arrow_values(inner, dtype, name)
    writer = out.ragged(name, dtype, 1 + len(spec))
    bounds = np.asarray(offsets, dtype=np.int64)
    if not spec:
        writer.append_flat(values, bounds)
    else:
        # Row i holds rows bounds[i]..bounds[i + 1] of fixed-shape items;
        # a row with none is an empty record (row i stays record i).
        per_item = int(np.prod(spec, dtype=np.int64))
        shapes = np.empty((n, 1 + len(spec)), dtype=np.int64)
        shapes[:, 0] = np.diff(bounds)
        shapes[:, 1:] = spec
        writer.append_flat(values, bounds * per_item, shapes)
    return n


def _fixed_inner(t: Any) -> tuple[int, ...]:
    import pyarrow as pa  # type: ignore[import-untyped]

    dims = []
    while pa.types.is_fixed_size_list(t):
        dims.append(t.list_size)
        t = t.value_type
    return tuple(dims)


def _convert_batches(
    out: _Output,
    schema: Any,
    batches: Iterable[Any],
    total: int | None,
    progress: Progress | None,
) -> None:
    layouts = {f.name: _arrow_layout(f, f.name) for f in schema}
    for name, (kind, dtype, spec) in layouts.items():
        if kind == "dense":
            out.dense(name, dtype, spec)
        else:
            out.ragged(name, dtype, 1 + len(spec))
    row = 0
    for batch in batches:
        for name in layouts:
            _arrow_column(out, name, batch.column(name), layouts[name])
        row += batch.num_rows
        if progress is not None:
            progress(row, total)


@url_output
def convert_parquet(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
    num_proc: int = 1,
    shard: tuple[int, int] | None = None,
    storage_options: dict[str, Any] | None = None,
    staging_dir: PathLike | None = None,
) -> dict[str, int]:
    """A Parquet file as one store per column (``output/<column>``), read
    batch by batch: numbers and fixed-size lists become ``Dense``, lists
    ``Ragged`` (one native append per batch).

    With ``num_proc > 1``, `output` is a collection written by that many
    processes, one part per slice of the rows (``loaderx.collection``; see
    ``convert(..., num_proc=)``); progress is reported as each part ends.
    ``shard=(i, n)`` converts the ``i``-th of `n` contiguous, near-equal
    slices of the rows only (what each of those processes runs)."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    # Without pre-buffering, and one row group at a time: pyarrow otherwise
    # keeps the column chunks of every row group read so far (a 2 GiB file
    # held ~1.8 GiB resident when measured).
    path = os.fspath(src)
    with _reading(path, "a Parquet file"):
        pf = pq.ParquetFile(path, pre_buffer=False)
        meta = pf.metadata
        total = meta.num_rows
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        schema = pf.schema_arrow
    rows = _rows_per_batch(size / max(1, total), batch_bytes)
    _check_columns(schema.names, path)
    for f in schema:
        _arrow_layout(f, f.name)

    if check_num_proc(num_proc) > 1:
        if shard is not None:
            raise ValueError("num_proc > 1 converts every slice: pass it or shard=, not both")
        return convert_file_parallel(
            "parquet", src, output, total, num_proc, progress, codec=codec, batch_bytes=batch_bytes
        )
    lo, hi = (0, total) if shard is None else shard_range(total, shard)

    def sliced() -> Iterator[Any]:
        """The batches of rows ``lo .. hi``, one row group at a time."""
        start = 0
        for group in range(pf.num_row_groups):
            end = start + meta.row_group(group).num_rows
            if end > lo and start < hi:
                at = start
                for batch in pf.iter_batches(batch_size=rows, row_groups=[group]):
                    a, b = max(lo, at), min(hi, at + batch.num_rows)
                    if a < b:
                        yield batch.slice(a - at, b - a)
                    at += batch.num_rows
            start = end

    def body(out: _Output) -> None:
        read = _read_each(sliced(), path, "a Parquet file")
        _convert_batches(out, schema, read, hi - lo, progress)

    return _run(output, codec, body)


@url_output
def convert_arrow(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
    storage_options: dict[str, Any] | None = None,
    staging_dir: PathLike | None = None,
) -> dict[str, int]:
    """An Arrow IPC file (or stream) as one store per column, read record
    batch by record batch."""
    import pyarrow as pa  # type: ignore[import-untyped]

    path = os.fspath(src)
    # Read, not memory-mapped: a map's pages stay resident as the
    # conversion goes (a 2 GB file held 2 GB); a read batch is freed once
    # written.
    with _reading(path, "an Arrow IPC file"):
        source = pa.OSFile(path, "rb")
    try:
        with _reading(path, "an Arrow IPC file"):
            try:
                reader: Any = pa.ipc.open_file(source)
                total: int | None = (
                    int(reader.count_rows()) if hasattr(reader, "count_rows") else None
                )
                batches: Iterable[Any] = (
                    reader.get_batch(i) for i in range(reader.num_record_batches)
                )
            except pa.ArrowInvalid:
                source.seek(0)
                reader = pa.ipc.open_stream(source)
                total = None
                batches = reader
            schema = reader.schema
        _check_columns(schema.names, path)
        for f in schema:
            _arrow_layout(f, f.name)
    except BaseException:
        source.close()
        raise

    def body(out: _Output) -> None:
        read = _read_each(batches, path, "an Arrow IPC file")
        _convert_batches(out, schema, read, total, progress)

    try:
        return _run(output, codec, body)
    finally:
        source.close()
