"""Hugging Face ``datasets``: :func:`convert` and :func:`huggingface`."""

from __future__ import annotations

import os

from typing import Any, cast

import numpy as np

from ..errors import ConversionError
from ..zrecord import MAX_NDIM, Dense, Ragged
from .arrow import _arrow_column
from .output import (
    BATCH_BYTES,
    PathLike,
    Progress,
    _Output,
    _PageDropper,
    _rows_per_batch,
    _run,
    _storable,
    url_output,
)


# --- Hugging Face datasets -----------------------------------------------------------------


def _hf_layout(feature: Any, where: str) -> tuple[str, np.dtype, Any]:
    """``("dense", dtype, shape)``, ``("ragged", dtype, inner)`` (records
    of shape ``(k, *inner)``, `k` varying) or ``("image", uint8, None)``
    (decoded to ``(H, W[, C])``) for a ``datasets`` feature;
    ``ConversionError`` naming `where` otherwise."""
    import datasets  # type: ignore[import-untyped]

    kind = type(feature).__name__
    if isinstance(feature, datasets.Value):
        if feature.dtype in ("string", "large_string", "binary", "large_binary") or (
            feature.dtype.startswith(("timestamp", "date", "time", "duration", "decimal"))
        ):
            raise ConversionError(
                f"column {where!r} holds {feature.dtype} values, which a typed store cannot "
                f"hold losslessly; map it to numbers first (or remove it)"
            )
        name = {"float16": "float16", "bool": "bool"}.get(feature.dtype, feature.dtype)
        return ("dense", _storable(name, f"column {where!r}"), ())
    if isinstance(feature, datasets.ClassLabel):
        return ("dense", np.dtype(np.int64), ())
    if isinstance(feature, datasets.Image):
        return ("image", np.dtype(np.uint8), None)
    if kind in ("Array2D", "Array3D", "Array4D", "Array5D"):
        shape = tuple(feature.shape)
        dtype = _storable(feature.dtype, f"column {where!r}")
        if shape[0] is None:
            return ("ragged", dtype, tuple(shape[1:]))
        return ("dense", dtype, shape)
    inner = getattr(feature, "feature", None)
    if kind in ("Sequence", "List", "LargeList") and inner is not None:
        if isinstance(inner, dict):
            raise ConversionError(
                f"column {where!r} is a sequence of records (nested objects); store each field "
                f"as its own column first"
            )
        sub_kind, dtype, sub = _hf_layout(inner, where)
        if sub_kind != "dense":
            raise ConversionError(
                f"column {where!r} nests variable-shape values inside a sequence, which is not a "
                f"rectangular array per record"
            )
        length = getattr(feature, "length", -1)
        if length is not None and length >= 0:
            return ("dense", dtype, (length, *sub))
        if 1 + len(sub) > MAX_NDIM:
            raise ConversionError(f"column {where!r} has more than {MAX_NDIM} axes")
        return ("ragged", dtype, sub)
    if isinstance(feature, (dict, list)):
        raise ConversionError(
            f"column {where!r} holds nested objects; store each field as its own column first"
        )
    raise ConversionError(
        f"column {where!r} has feature type {kind}, which cannot be stored losslessly; map it to "
        f"numbers first"
    )


def _ragged_records(
    values: Any, dtype: np.dtype, ndim: int | None, where: str, first_row: int
) -> list[np.ndarray]:
    """The records of one batch of a ragged column as arrays of `dtype`
    (rank `ndim`, or the first record's when ``None``)."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        records: list[Any] = list(values)
    else:
        records = list(values)
    out = []
    for i, record in enumerate(records):
        arr = record if isinstance(record, np.ndarray) else np.asarray(record)
        if arr.dtype == object:
            raise ConversionError(
                f"column {where!r}, row {first_row + i}: the value is not a rectangular array "
                f"(its inner lengths differ)"
            )
        if arr.dtype != dtype:
            if not np.can_cast(arr.dtype, dtype, casting="safe"):
                raise ConversionError(
                    f"column {where!r}, row {first_row + i}: found {arr.dtype}, expected {dtype}"
                )
            arr = arr.astype(dtype)
        if ndim is not None and arr.ndim != ndim:
            raise ConversionError(
                f"column {where!r}, row {first_row + i}: found {arr.ndim} axes (shape "
                f"{arr.shape}), expected {ndim}"
            )
        out.append(arr)
    return out


def _hf_split(
    out: _Output,
    ds: Any,
    prefix: str,
    batch_bytes: int,
    progress: Progress | None,
    done: list[int],
    total: int | None,
) -> int:
    """Write one ``datasets.Dataset`` or ``IterableDataset`` (with known
    features) as stores ``prefix + column``: the columns' Arrow data batch
    by batch (dtypes exactly as stored), image columns decoded through
    ``datasets``' NumPy formatting. Returns the records every store of
    the split must hold: the dataset's length for a ``Dataset`` (so the
    commit checks the batches covered every row), the rows read for an
    ``IterableDataset``, whose length is known only once read."""
    layouts = {col: _hf_layout(feat, col) for col, feat in ds.features.items()}
    plain = [c for c, (k, _, _) in layouts.items() if k != "image"]
    images = [c for c, (k, _, _) in layouts.items() if k == "image"]
    if _is_iterable_dataset(ds):
        rows = _rows_per_batch(_iterable_row_bytes(ds), batch_bytes)
    else:
        n = len(ds)
        try:
            size = int(ds.data.nbytes)
        except Exception:  # noqa: BLE001 - only an estimate
            size = 0
        rows = _rows_per_batch(size / max(1, n) if n else 1.0, batch_bytes)
    for col in plain:
        kind, dtype, spec = layouts[col]
        assert dtype is not None
        if kind == "dense":
            out.dense(prefix + col, dtype, spec)
        else:
            out.ragged(prefix + col, dtype, 1 + len(spec))
    image_ranks: dict[str, int] = {}
    dropper = _PageDropper(f["filename"] for f in getattr(ds, "cache_files", []) or [])
    arrow_batches = ds.select_columns(plain).with_format("arrow").iter(batch_size=rows)
    image_batches = (
        ds.select_columns(images).with_format("numpy").iter(batch_size=rows) if images else None
    )
    row = 0
    while True:
        count = None
        if plain:
            table = next(arrow_batches, None)
            if table is None:
                break
            for col in plain:
                count = _arrow_column(out, prefix + col, table.column(col), layouts[col])
            dropper.drop(table)
        if image_batches is not None:
            batch = next(image_batches, None)
            if batch is None:
                break
            for col in images:
                ndim = image_ranks.get(col)
                records = _ragged_records(batch[col], np.dtype(np.uint8), ndim, col, row)
                if records and ndim is None:
                    ndim = image_ranks[col] = records[0].ndim
                    records = _ragged_records(records, np.dtype(np.uint8), ndim, col, row)
                if records:
                    out.ragged(prefix + col, np.dtype(np.uint8), int(ndim or 3)).append(records)
                count = len(records)
        if not count:
            break
        row += count
        done[0] += count
        if progress is not None:
            progress(done[0], total)
    # An image column of an empty split still gets its store.
    for col in images:
        if prefix + col not in out.writers:
            out.ragged(prefix + col, np.dtype(np.uint8), 3)
    return row if _is_iterable_dataset(ds) else len(ds)


def _is_iterable_dataset(ds: Any) -> bool:
    import datasets  # type: ignore[import-untyped]

    return isinstance(ds, datasets.IterableDataset)


#: Rows of an ``IterableDataset`` read ahead to estimate its row size.
_ITERABLE_PEEK_ROWS = 16


def _iterable_row_bytes(ds: Any) -> float:
    """The mean Arrow size of the first rows of an ``IterableDataset`` (a
    short read of its start; 1 when it is empty), to size its batches."""
    first = next(iter(ds.with_format("arrow").iter(batch_size=_ITERABLE_PEEK_ROWS)), None)
    if first is None or first.num_rows == 0:
        return 1.0
    return float(first.nbytes) / first.num_rows


def _with_features(ds: Any, where: str) -> Any:
    """`ds`, an ``IterableDataset``, with its features known: as declared,
    else inferred by ``datasets`` from its first rows."""
    if ds.features is not None:
        return ds
    resolve = getattr(ds, "_resolve_features", None)
    if resolve is None:
        raise ConversionError(
            f"{where}: the IterableDataset declares no features and this version of datasets "
            f"cannot infer them; pass features= when making it, or cast it"
        )
    resolved = resolve()
    if resolved.features is None:
        raise ConversionError(f"{where}: the IterableDataset's features could not be inferred")
    return resolved


@url_output
def convert(
    dataset: Any,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
    num_proc: int = 1,
    storage_options: dict[str, Any] | None = None,
    staging_dir: PathLike | None = None,
) -> dict[str, int]:
    """Write a Hugging Face ``Dataset`` or ``DatasetDict`` (or their
    streaming kinds, ``IterableDataset`` and ``IterableDatasetDict``) as
    typed stores.

    A ``Dataset`` becomes ``output/<column>``, a ``DatasetDict``
    ``output/<split>/<column>``: a :class:`~loaderx.zrecord.Dense` store
    for a column of one fixed shape (scalars, fixed-length sequences,
    ``ArrayND`` with a fixed shape, class labels), a
    :class:`~loaderx.zrecord.Ragged` one for varying shapes (sequences,
    ``ArrayND`` with a ``None`` first axis, decoded ``Image`` columns as
    ``uint8`` ``(H, W[, C])``). Dtypes and shapes are kept exactly; a
    column that cannot be (strings, nested objects) raises
    :class:`ConversionError` naming it. Rows are read in batches of about
    `batch_bytes`. An ``IterableDataset`` is read once from start to end
    (twice when it has image columns: the other columns and the images
    are read side by side), its features as declared or else inferred by
    ``datasets`` from its first rows, its batches sized from the first 16
    rows; progress reports no total for it. Returns ``{store path
    relative to output: records}``.

    With ``num_proc > 1`` a ``Dataset`` is converted by that many processes
    into a collection (``loaderx.collection.open(output)``; a
    ``DatasetDict`` into one collection per split, ``output/<split>``):
    contiguous shards, one part each, committed in order once all
    succeeded. Streaming datasets take ``num_proc=1`` only."""
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError(
            "converting a Hugging Face dataset needs the datasets package: "
            "pip install 'loaderx[converter]'"
        ) from None
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be an int >= 1, got {num_proc!r}")
    if num_proc > 1:
        from .parallel import convert_parallel

        if isinstance(dataset, datasets.DatasetDict):
            counts: dict[str, int] = {}
            for split, ds in dataset.items():
                part = convert_parallel(
                    ds, os.path.join(os.fspath(output), split), codec=codec,
                    batch_bytes=batch_bytes, num_proc=num_proc, progress=progress,
                )
                counts.update({f"{split}/{k}": v for k, v in part.items()})
            return counts
        if not isinstance(dataset, datasets.Dataset):
            raise TypeError(
                f"num_proc > 1 takes a datasets.Dataset or DatasetDict (it shards them); a "
                f"{type(dataset).__name__} is read once, in one process: use num_proc=1"
            )
        return convert_parallel(
            dataset, output, codec=codec, batch_bytes=batch_bytes, num_proc=num_proc,
            progress=progress,
        )
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        splits = dict(dataset.items())
        if not splits:
            raise ValueError(f"the {type(dataset).__name__} has no splits")
        prefixes = {name: f"{name}/" for name in splits}
    elif isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
        splits = {"": dataset}
        prefixes = {"": ""}
    else:
        raise TypeError(
            f"convert takes a datasets.Dataset, DatasetDict, IterableDataset or "
            f"IterableDatasetDict, got {type(dataset).__name__}"
        )
    for name, ds in splits.items():
        if _is_iterable_dataset(ds):
            ds = splits[name] = _with_features(ds, f"split {name!r}" if name else "the dataset")
        for col, feat in ds.features.items():
            _hf_layout(feat, f"{name}/{col}" if name else col)
    streaming = any(_is_iterable_dataset(ds) for ds in splits.values())
    total = None if streaming else sum(len(ds) for ds in splits.values())

    def body(out: _Output) -> dict[str, int]:
        done = [0]
        groups = {}
        for name, ds in splits.items():
            groups[name] = _hf_split(out, ds, prefixes[name], batch_bytes, progress, done, total)
        return groups

    return _run(output, codec, body)


def huggingface(
    repo_id: str,
    *,
    config: str | None = None,
    revision: str = "main",
    token: str | bool | None = None,
    **load_kwargs: Any,
) -> Any:
    """Load a dataset from the Hugging Face Hub (or a local dataset
    directory) through ``datasets.load_dataset``; pass the result to
    :func:`convert`. Further keyword arguments (``split=``,
    ``cache_dir=``, ...) go to ``load_dataset`` as they are. Needs
    ``pip install 'loaderx[converter]'``."""
    if not isinstance(repo_id, str) or not repo_id:
        raise ValueError(f"repo_id must be a non-empty string, got {repo_id!r}")
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError(
            "loaderx.converter.huggingface needs the datasets package: "
            "pip install 'loaderx[converter]'"
        ) from None
    return datasets.load_dataset(
        repo_id, config, revision=revision, token=token, **load_kwargs
    )
