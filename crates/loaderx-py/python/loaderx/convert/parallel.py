"""``convert(..., num_proc=N)``: a Hugging Face ``Dataset`` converted by N
processes into a collection (``loaderx.collection``).

The dataset is cut into N contiguous shards; process ``i`` converts shard
``i`` with :func:`loaderx.convert.hf.convert` into part ``part-%05d`` of
the output (one typed store per column: exactly a collection's part), and
once every process succeeded the parts are committed, in shard order, so
the collection's records are the dataset's, in its order. If any process
fails, the output is removed and nothing is published.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from .output import PathLike


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
    dataset: Any, output: PathLike, *, codec: str, batch_bytes: int, num_proc: int
) -> dict[str, int]:
    """A ``datasets.Dataset`` into the collection `output`, by `num_proc`
    processes; returns ``{part/column: records}``."""
    from .. import collection

    root = os.fspath(output)
    if not isinstance(root, str):
        root = os.fsdecode(root)
    if os.path.exists(root) and (not os.path.isdir(root) or os.listdir(root)):
        raise FileExistsError(f"{root} exists: convert writes a new collection")
    shards = max(1, min(num_proc, len(dataset)))
    made = not os.path.exists(root)
    os.makedirs(root, exist_ok=True)
    try:
        with ProcessPoolExecutor(shards, mp_context=mp.get_context("spawn")) as pool:
            futures = [
                pool.submit(_convert_shard, dataset, i, shards, root, codec, batch_bytes)
                for i in range(shards)
            ]
            counts: dict[str, int] = {}
            for f in futures:
                counts.update(f.result())
        collection.commit(root, list(range(shards)))
    except BaseException:
        if made:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for entry in os.listdir(root):
                shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
        raise
    return counts
