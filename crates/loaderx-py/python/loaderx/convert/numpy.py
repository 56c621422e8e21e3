"""NumPy files: ``.npy`` (memory-mapped) and ``.npz`` members."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

from ..errors import ConversionError
from ..zrecord import Dense
from .parallel import check_num_proc, convert_file_parallel
from .output import (
    BATCH_BYTES,
    PathLike,
    Progress,
    _Output,
    _read_each,
    _reading,
    _rows_per_batch,
    _run,
    _storable,
    shard_range,
    url_output,
)


# --- NumPy files ---------------------------------------------------------------------------


def _append_dense_chunks(
    writer: Dense,
    array: np.ndarray,
    batch_bytes: int,
    progress: Progress | None,
    done: list[int],
    total: int | None,
) -> None:
    row = max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
    step = _rows_per_batch(row, batch_bytes)
    for start in range(0, array.shape[0], step):
        block = array[start : start + step]
        writer.append(block)
        done[0] += block.shape[0]
        if progress is not None:
            progress(done[0], total)


def _npy_header(fh: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` from the header of the ``.npy``
    data `fh` is at."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    return tuple(shape), bool(fortran), dtype


def _check_array(array: np.ndarray, where: str) -> np.dtype:
    if array.ndim == 0:
        raise ConversionError(f"{where}: a 0-d array has no records (axis 0)")
    return _storable(array.dtype, where)


@url_output
def convert_npy(
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
    """A ``.npy`` file (memory-mapped) as one ``Dense`` store at `output`:
    one record per slice along axis 0.

    With ``num_proc > 1``, `output` is a collection written by that many
    processes (``loaderx.collection``; see ``convert(..., num_proc=)``),
    its one column named after the file (``tokens.npy`` -> ``tokens``;
    ``data`` when the name is not a valid column name); progress is
    reported as each part ends. ``shard=(i, n)`` converts the ``i``-th of `n`
    contiguous, near-equal slices of the records only (what each of those
    processes runs)."""
    path = os.fspath(src)
    with _reading(path, "a .npy file"):
        with open(path, "rb") as fh:
            _shape, _fortran, found = _npy_header(fh)
        if found.hasobject:
            raise ConversionError(
                f"{path} holds Python objects (dtype {found}), which cannot be stored; "
                f"save the values as numbers"
            )
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    dtype = _check_array(array, str(src))
    if check_num_proc(num_proc) > 1:
        if shard is not None:
            raise ValueError("num_proc > 1 converts every slice: pass it or shard=, not both")
        return convert_file_parallel(
            "npy", src, output, array.shape[0], num_proc, progress, codec=codec,
            batch_bytes=batch_bytes,
        )
    if shard is not None:
        lo, hi = shard_range(array.shape[0], shard)
        array = array[lo:hi]

    def body(out: _Output) -> None:
        # A store directly at `output`: the temporary directory is the store.
        out.tmp.rmdir()
        writer = out.create_dense(out.tmp, dtype, array.shape[1:])
        out.writers[""] = writer
        _append_dense_chunks(writer, array, batch_bytes, progress, [0], array.shape[0])

    return _run(output, codec, body)


class _NpzMember:
    """One array of an ``.npz``: its header, and its rows block by block,
    memory-mapped when stored uncompressed, else streamed through the
    decompressor (bounded memory; a Fortran-order compressed member is
    read whole, as its rows are not contiguous in the stream)."""

    def __init__(self, path: str, info: zipfile.ZipInfo) -> None:
        self.path = path
        self.info = info
        self.name = info.filename[: -len(".npy")]
        with zipfile.ZipFile(path) as zf, zf.open(info) as member:
            self.shape, self.fortran, self.dtype = self._header(member)

    def _header(self, fh: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
        shape, fortran, dtype = _npy_header(fh)
        if dtype.hasobject:
            raise ConversionError(f"{self.path}: member {self.name!r} holds Python objects")
        return shape, fortran, dtype

    def _mapped(self) -> np.ndarray:
        with open(self.path, "rb") as fh:
            fh.seek(self.info.header_offset)
            local = fh.read(30)
            if local[:4] != b"PK\x03\x04":
                raise ConversionError(f"{self.path}: member {self.info.filename} has a bad header")
            name_len = int.from_bytes(local[26:28], "little")
            extra_len = int.from_bytes(local[28:30], "little")
            fh.seek(self.info.header_offset + 30 + name_len + extra_len)
            self._header(fh)
            offset = fh.tell()
        return np.memmap(
            self.path,
            dtype=self.dtype,
            mode="r",
            offset=offset,
            shape=self.shape,
            order="F" if self.fortran else "C",
        )

    def blocks(self, rows: int) -> Iterator[np.ndarray]:
        if self.info.compress_type == zipfile.ZIP_STORED:
            array = self._mapped()
            for start in range(0, self.shape[0], rows):
                yield array[start : start + rows]
            return
        with zipfile.ZipFile(self.path) as zf, zf.open(self.info) as opened:
            member: Any = opened
            if self.fortran:
                array = np.lib.format.read_array(member, allow_pickle=False)
                for start in range(0, self.shape[0], rows):
                    yield array[start : start + rows]
                return
            self._header(member)
            row_shape = self.shape[1:]
            row_bytes = self.dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
            left = self.shape[0]
            while left:
                n = min(rows, left)
                block = np.empty((n, *row_shape), dtype=self.dtype)
                view = memoryview(cast(Any, block.reshape(-1).view(np.uint8)))
                got = 0
                while got < n * row_bytes:
                    read = member.readinto(view[got:])
                    if not read:
                        raise ConversionError(
                            f"{self.path}: member {self.name!r} ends early (truncated archive)"
                        )
                    got += read
                left -= n
                yield block


def _npz_members(path: str) -> list[_NpzMember]:
    with zipfile.ZipFile(path) as zf:
        infos = [i for i in zf.infolist() if i.filename.endswith(".npy")]
    return [_NpzMember(path, info) for info in infos]


@url_output
def convert_npz(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
    storage_options: dict[str, Any] | None = None,
    staging_dir: PathLike | None = None,
) -> dict[str, int]:
    """An ``.npz`` archive as one ``Dense`` store per array
    (``output/<name>``); all arrays must have the same length along axis
    0. Uncompressed members (``np.savez``) are memory-mapped, compressed
    ones (``np.savez_compressed``) streamed through the decompressor."""
    path = os.fspath(src)
    with _reading(path, "a .npz archive"):
        members = _npz_members(path)
    if not members:
        raise ConversionError(f"{path} holds no arrays")
    for m in members:
        if not m.shape:
            raise ConversionError(f"{path}: member {m.name!r}: a 0-d array has no records (axis 0)")
        _storable(m.dtype, f"{path}: member {m.name!r}")
    lengths = {m.name: m.shape[0] for m in members}
    if len(set(lengths.values())) > 1:
        raise ConversionError(f"{path}: the arrays differ in length along axis 0: {lengths}")
    total = sum(lengths.values())

    def body(out: _Output) -> None:
        done = [0]
        for m in members:
            writer = out.dense(m.name, m.dtype, m.shape[1:])
            row = max(1, m.dtype.itemsize * int(np.prod(m.shape[1:], dtype=np.int64)))
            rows = _rows_per_batch(row, batch_bytes)
            for block in _read_each(m.blocks(rows), path, f"a .npz archive (member {m.name!r})"):
                writer.append(block)
                done[0] += block.shape[0]
                if progress is not None:
                    progress(done[0], total)

    return _run(output, codec, body)
