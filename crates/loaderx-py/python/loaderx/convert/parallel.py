"""``num_proc=N`` (``loaderx convert --parts N``): a source converted by N
processes into a collection (``loaderx.collection``).

The source's records are cut into N contiguous slices; process ``i``
converts slice ``i`` into part ``part-%05d`` of the output (one typed
store per column: exactly a collection's part), and once every process
succeeded the parts are committed, in slice order, so the collection's
records are the source's, in its order. If any process fails, the output
is removed and nothing is published. Hugging Face datasets are sliced with
``Dataset.shard``; ``.npy`` files, Parquet files and image folders by
record range (the converters' ``shard=`` argument).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable

from .output import PathLike, Progress


def _convert_shard(
    dataset: Any, shard: int, shards: int, root: str, codec: str, batch_bytes: int
) -> dict[str, int]:
    """Runs in a worker process: shard `shard` of `shards` into its part."""
    from .. import collection
    from .hf import convert

    part = collection.part_name(shard)
    piece = dataset.shard(num_shards=shards, index=shard, contiguous=True)
    counts = convert(piece, os.path.join(root, part), codec=codec, batch_bytes=batch_bytes)
    return {f"{part}/{name}": n for name, n in counts.items()}


def convert_parallel(
    dataset: Any,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int,
    num_proc: int,
    progress: Progress | None = None,
) -> dict[str, int]:
    """A ``datasets.Dataset`` into the collection `output`, by `num_proc`
    processes; returns ``{part/column: records}``."""
    shards = max(1, min(num_proc, len(dataset)))
    return _in_processes(
        output,
        shards,
        lambda root, i: (_convert_shard, dataset, i, shards, root, codec, batch_bytes),
        len(dataset),
        progress,
    )


def npy_column(src: PathLike) -> str:
    """The column a ``.npy`` file becomes in a collection: its name
    without the suffix when that is a valid column name, else ``data``."""
    from .. import collection

    stem = os.path.splitext(os.path.basename(os.fspath(src)))[0]
    try:
        collection._check_name("column", stem)
    except ValueError:
        return "data"
    return stem


def _convert_file_shard(
    kind: str, src: str, shard: int, shards: int, root: str, options: dict[str, Any]
) -> dict[str, int]:
    """Runs in a worker process: slice `shard` of `shards` of the file
    source `src` into its part."""
    from .. import collection
    from .arrow import convert_parquet
    from .images import convert_image_folder
    from .numpy import convert_npy

    part = collection.part_name(shard)
    where = os.path.join(root, part)
    if kind == "npy":
        column = npy_column(src)
        os.makedirs(where, exist_ok=True)
        counts = convert_npy(src, os.path.join(where, column), shard=(shard, shards), **options)
        return {f"{part}/{column}": n for n in counts.values()}
    convert = convert_parquet if kind == "parquet" else convert_image_folder
    counts = convert(src, where, shard=(shard, shards), **options)
    return {f"{part}/{name}": n for name, n in counts.items()}


def convert_file_parallel(
    kind: str,
    src: PathLike,
    output: PathLike,
    records: int,
    num_proc: int,
    progress: Progress | None = None,
    **options: Any,
) -> dict[str, int]:
    """The file source `src` (`kind` ``"npy"``, ``"parquet"`` or
    ``"images"``, holding `records` records) into the collection `output`,
    by `num_proc` processes; returns ``{part/column: records}``."""
    path = os.fspath(src)
    if not isinstance(path, str):
        path = os.fsdecode(path)
    shards = max(1, min(num_proc, records))
    return _in_processes(
        output,
        shards,
        lambda root, i: (_convert_file_shard, kind, path, i, shards, root, options),
        records,
        progress,
    )


def check_num_proc(num_proc: Any) -> int:
    """`num_proc` checked: an int >= 1."""
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be an int >= 1, got {num_proc!r}")
    return num_proc


def _in_processes(
    output: PathLike,
    shards: int,
    job: Callable[[str, int], tuple[Any, ...]],
    records: int,
    progress: Progress | None,
) -> dict[str, int]:
    """Runs ``job(root, i)`` (a function and its arguments) for every
    slice `i` in `shards` spawned processes, then commits parts ``0 ..
    shards`` in order; on any failure removes what was written.
    `progress` hears ``(records converted, records)`` as each part ends
    (the columns of one part hold the same records)."""
    from .. import collection

    root = os.fspath(output)
    if not isinstance(root, str):
        root = os.fsdecode(root)
    if os.path.exists(root) and (not os.path.isdir(root) or os.listdir(root)):
        raise FileExistsError(f"{root} exists: convert writes a new collection")
    made = not os.path.exists(root)
    os.makedirs(root, exist_ok=True)
    try:
        with ProcessPoolExecutor(shards, mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(*job(root, i)): i for i in range(shards)}
            by_part: dict[int, dict[str, int]] = {}
            for f in as_completed(futures):
                by_part[futures[f]] = f.result()
                if progress is not None:
                    done = sum(max(c.values(), default=0) for c in by_part.values())
                    progress(done, records)
            counts = {k: n for i in range(shards) for k, n in by_part[i].items()}
        collection.commit(root, list(range(shards)))
    except BaseException:
        if made:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for entry in os.listdir(root):
                shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
        raise
    return counts
