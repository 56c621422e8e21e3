"""Helpers around the typed containers: ``from loaderx.utils import train_dict``.

:func:`train_dict` trains the zstd dictionary a ``codec="zstd_dict"``
container keeps (``Dense.create(..., codec="zstd_dict", dict_bytes=d)``).
The training itself is zstd's own trainer, run by the Rust engine with the
GIL released; its bounds (dictionary sizes, sample budget, fewest samples)
come from there.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable
from typing import Any, Union

import numpy as np

from . import _native
from .errors import ArgumentTypeError, ContainerModeError
from .zrecord import Dense, Ragged

#: Dictionary size used when none is given, in bytes.
DEFAULT_DICT_SIZE: int = int(_native.DEFAULT_DICT_SIZE)
#: Largest dictionary, in bytes.
MAX_DICT_SIZE: int = int(_native.MAX_DICT_SIZE)

#: Sample bytes per dictionary byte when `sample_bytes` is not given (zstd's
#: guidance: about 100 times the dictionary size).
SAMPLES_PER_DICT_BYTE = 100

Source = Union[np.ndarray, Dense, Ragged, Iterable[Any]]

# Records per read when sampling an open container.
_READ_BATCH = 1024


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {value!r}") from None
    if number < 1:
        raise ValueError(f"{what} must be positive, got {number}")
    return number


def _record_bytes(record: Any, pos: int) -> bytes:
    if isinstance(record, np.ndarray):
        if record.dtype.hasobject:
            raise ArgumentTypeError(
                f"object arrays cannot train a zstd dictionary (record {pos} is {record.dtype})"
            )
        raw = np.ascontiguousarray(record).tobytes()
    else:
        try:
            raw = bytes(memoryview(record))
        except TypeError:
            raise TypeError(
                f"record {pos} is a {type(record).__name__}: records are NumPy arrays or bytes"
            ) from None
    if not raw:
        raise ValueError(f"zero-byte records cannot train a zstd dictionary (record {pos})")
    return raw


def _pick(n: int, budget: int, record_len: float, seed: int) -> np.ndarray:
    """Up to ``budget / record_len`` of the indices ``0..n``, at random,
    sorted (so reads walk the store forward)."""
    count = min(n, max(1, int(budget // max(record_len, 1.0))))
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=count, replace=False)).astype(np.int64)


def _samples(source: Source, budget: int, seed: int) -> list[bytes]:
    """Whole records (a record longer than the budget is cut to it) until
    the budget is spent: random ones from an array or an open container, the
    first ones from any other iterable (which is read no further)."""
    if isinstance(source, (Dense, Ragged)) and source.writer:
        raise ContainerModeError(
            f"train_dict requires an opened read-only container: {source.path} is a writer "
            f"(from create); close it and pass {type(source).__name__}.open(path)"
        )
    if isinstance(source, Dense):
        n = len(source)
        if n == 0:
            return []
        record_len = int(np.prod(source.item_shape, dtype=np.int64)) * source.dtype.itemsize
        picks = _pick(n, budget, record_len, seed)
        return [
            row.tobytes()
            for start in range(0, picks.size, _READ_BATCH)
            for row in source[picks[start : start + _READ_BATCH]]
        ]
    if isinstance(source, Ragged):
        n = len(source)
        if n == 0:
            return []
        sizes = np.prod(source.shapes(np.arange(min(n, _READ_BATCH))), axis=1)
        picks = _pick(n, budget, float(sizes.mean()) * source.dtype.itemsize, seed)
        out: list[bytes] = []
        spent = 0
        for start in range(0, picks.size, _READ_BATCH):
            for record in source[picks[start : start + _READ_BATCH]]:
                if spent >= budget:
                    return out
                raw = record.tobytes()[: budget - spent]
                out.append(raw)
                spent += len(raw)
        return out
    if isinstance(source, np.ndarray):
        if source.ndim == 0:
            raise ValueError("source must have a record axis (got a 0-d array)")
        if source.dtype.hasobject:
            raise ArgumentTypeError(
                f"object arrays cannot train a zstd dictionary (source is {source.dtype})"
            )
        n = source.shape[0]
        if n == 0:
            raise ValueError(
                f"cannot train a zstd dictionary on an empty array (shape {source.shape})"
            )
        if source.nbytes == 0:
            raise ValueError(
                f"zero-byte records cannot train a zstd dictionary (shape {source.shape})"
            )
        record_len = source.nbytes / n
        picks = _pick(n, budget, record_len, seed)
        return [np.ascontiguousarray(source[i]).tobytes()[:budget] for i in picks.tolist()]
    if isinstance(source, (str, bytes, bytearray, memoryview)):
        raise TypeError(
            f"source must be an array, an iterable of records or an open container, "
            f"got {type(source).__name__}"
        )
    try:
        records = iter(source)
    except TypeError:
        raise TypeError(
            f"source must be an array, an iterable of records or an open container, "
            f"got {type(source).__name__}"
        ) from None
    out = []
    spent = 0
    for pos, record in enumerate(records):
        raw = _record_bytes(record, pos)[: budget - spent]
        out.append(raw)
        spent += len(raw)
        if spent >= budget:
            break
    return out


def train_dict(
    source: Source,
    dict_size: int = DEFAULT_DICT_SIZE,
    *,
    sample_bytes: int | None = None,
    seed: int = 0,
    path: str | os.PathLike[str] | None = None,
) -> bytes:
    """Train a zstd dictionary for ``codec="zstd_dict"`` from sample records.

    Args:
        source: an array (one record per slice along axis 0), an iterable
            of records (NumPy arrays or bytes), or an open :class:`Dense` or
            :class:`Ragged` reader.
        dict_size: the dictionary's largest size in bytes (at least 256,
            at most ``MAX_DICT_SIZE``).
        sample_bytes: how many bytes of records to train on; default 100
            times `dict_size`, at most 100 MiB. Records are
            picked at random from an array or a container (with `seed`), and
            taken from the start of any other iterable, which is read no
            further than that.
        path: also write the dictionary to this file (as loaderx 2.x
            does), replacing what is there.

    Returns:
        The dictionary, for ``Dense.create(..., dict_bytes=...)``.

    Raises:
        ValueError: too few samples (fewer than 7), a size out of bounds,
            or data zstd cannot build a dictionary from; the message names
            the bound. Also an empty array, a zero-byte record, an array of
            Python objects (:class:`~loaderx.zrecord.ArgumentTypeError`,
            also a ``TypeError``) and a writer rather than an opened
            container (:class:`~loaderx.zrecord.ContainerModeError`), as
            loaderx 2.x.
    """
    dict_size = _positive(dict_size, "dict_size")
    if dict_size > MAX_DICT_SIZE:
        raise ValueError(f"dict_size {dict_size} is over the {MAX_DICT_SIZE}-byte limit")
    if sample_bytes is None:
        budget = dict_size * SAMPLES_PER_DICT_BYTE
    else:
        budget = _positive(sample_bytes, "sample_bytes")
    samples = _samples(source, budget, operator.index(seed))
    # The trainer checks the rest (smallest dictionary, fewest samples,
    # largest sample), naming the bound.
    sizes = np.fromiter((len(s) for s in samples), dtype=np.uint64, count=len(samples))
    flat = np.frombuffer(b"".join(samples), dtype=np.uint8)
    trained = bytes(_native.train_dictionary(flat, sizes, dict_size))
    if path is not None:
        with open(path, "wb") as out:
            out.write(trained)
    return trained


__all__ = ["DEFAULT_DICT_SIZE", "MAX_DICT_SIZE", "train_dict"]
