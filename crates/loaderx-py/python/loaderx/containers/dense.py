"""``Dense``: records that are each one item of a fixed dtype and shape."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import _native
from .. import zrecord as _settings
from .dlpack_in import as_array
from .args import DEFAULT_QUALITY, _codec, _quality, _shape
from .base import _Container
from .writing import _memmap_of, _release_pages


class Dense(_Container):
    """Records that are each one item of ``dtype`` and ``item_shape``.

    ``Dense.create(path, dtype, item_shape, *, codec, ...)`` returns a
    writer; ``Dense.open(path)`` a reader: ``ds[i]`` is one record,
    ``ds[i, j, k]`` (several records), a list, an integer array, a slice
    or a boolean mask a stacked ``(n, *item_shape)`` array.
    """

    _KIND = "dense"

    def _setup(
        self, store: _native.Store, path: str, readable: bool, writable: bool, editable: bool
    ) -> None:
        super()._setup(store, path, readable, writable, editable)
        self.item_shape: tuple[int, ...] = tuple(int(d) for d in self._schema["shape"])
        #: The number of axes of a record (``len(item_shape)``), as in loaderx 2.x.
        self.ndim = len(self.item_shape)
        self._item_len = int(self._schema["item_len"])
        # What `_native.Store.get_dense` shapes and types a batch by.
        self._proto = np.empty((0, *self.item_shape), dtype=self.dtype)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dtype: Any,
        item_shape: Any,
        *,
        codec: str,
        dict_bytes: bytes | None = None,
        data_shards: int = 4,
        quality: int = DEFAULT_QUALITY,
        storage_options: dict[str, Any] | None = None,
        staging_dir: str | os.PathLike[str] | None = None,
    ) -> Dense:
        """A writer for a new store at `path`, a new or empty directory
        (:class:`ContainerExistsError`, a ``FileExistsError``, for a store
        or other files there). `codec` is ``"raw"``, ``"flate"``, ``"zstd"``,
        ``"lz4"`` or ``"zstd_dict"`` (with `dict_bytes` from
        :func:`loaderx.utils.train_dict`); `data_shards` write lanes.

        Images: with codec ``"jpeg"`` (at `quality`, 1-100) or ``"png"``,
        `dtype` is ``uint8`` and `item_shape` ``(H, W, 3)`` or ``(3, H, W)``;
        appended arrays are encoded (on the store's threads) and reads decode
        them back into that layout. :meth:`append_encoded` stores JPEG/PNG
        files as they are.

        `path` may be a URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
        ``abfs://``, ``file://``) whose prefix holds nothing yet
        (:class:`ContainerExistsError` otherwise, before anything is
        written): the store is written in a local staging directory
        (`staging_dir`, else ``LOADERX_STAGING_DIR``, else the system's
        temporary directory) and published there by :meth:`close`, chunks
        first and ``meta.zr`` last, so readers of the URL find no store or
        the whole one. `storage_options` as for :meth:`open`. A ``with``
        block left by an exception publishes nothing (the staging directory
        is removed); a failed upload raises an error naming the URL and
        keeps the staged store, saying where (``loaderx push LOCAL URL``
        publishes it)."""
        _codec(codec)
        q = _quality(quality)
        made = cls._create(
            path, dtype, _shape(item_shape), 0, codec, dict_bytes, data_shards, storage_options,
            staging_dir,
        )
        made.quality = q
        return made

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        writable: bool = False,
        *,
        check_raw: bool = False,
        quality: int = DEFAULT_QUALITY,
        resize: tuple[int, int] | None = None,
        layout: str = "hwc",
        storage_options: dict[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
    ) -> Any:
        """A reader of the store at `path`; with ``writable=True`` it also
        appends, deletes and compacts. Reads check the checksum of every
        record of a store whose codec compresses (raw-kept records
        included); in a ``raw`` store ``check_raw=True`` checks raw records
        too (a second pass over their bytes). `quality`: JPEG quality of arrays
        appended through a writable handle.

        An image store opened with ``resize=(H, W)`` is an :class:`Images`
        reader instead: every image decoded, resized to cover ``H x W`` and
        centre-cropped to it, in `layout` (``"hwc"`` or ``"chw"``).

        `path` may be a URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
        ``abfs://``, ``http(s)://``, ``file://``): a read-only reader of a
        store in object storage, every record checked against its checksum,
        configured by `storage_options` (object_store's keys such as
        ``aws_endpoint``, and loaderx's ``timeout``, ``max_retries``,
        ``concurrency``, ...; see docs/REMOTE.md). `cache_dir` (or the
        environment variable ``LOADERX_CACHE_DIR``) keeps fetched blocks in a
        local directory several processes may share, at most `cache_bytes`
        (least recently used evicted first)."""
        return cls._open_with(
            path, writable, check_raw, quality, resize, layout, storage_options, cache_dir,
            cache_bytes,
        )

    def _describe(self) -> str:
        return f"{self.dtype.str}{list(self.item_shape)}"

    def append(self, array: np.ndarray) -> None:
        """Add one record per slice of `array` along axis 0 (at least one:
        ``ValueError`` otherwise; a 0-d array on a scalar store is one); its
        dtype and ``shape[1:]`` must be ``dtype`` and ``item_shape`` exactly. The array
        is written from its own memory (no copy when C-contiguous). A writer
        of a compressing codec writes an append of at least
        ``WRITE_BEHIND_AT_LEAST`` bytes behind the call: it copies the array
        (of one larger than ``WRITE_CHUNK_BYTES``, only the last block of
        that size; the blocks before are written first) and returns, and a
        write error is raised by the next call on the writer (``append``,
        ``len``, ``sync`` or ``close``). An
        array that views a read-only memory map (``np.load(...,
        mmap_mode="r")``) is always written before the call returns, from
        the map."""
        store = self._appending()
        if not isinstance(array, np.ndarray) and hasattr(array, "__dlpack__"):
            # A DLPack producer (PyTorch, JAX, DLTensor): viewed, not copied.
            array = as_array(array, "append's array", self.dtype)
        if not isinstance(array, np.ndarray):
            raise TypeError(f"append takes a NumPy array, got {type(array).__name__}")
        if array.ndim == 0 and self.item_shape == ():
            array = array.reshape(1)  # one scalar record, as loaderx 2.x takes it
        if array.dtype != self.dtype:
            raise ValueError(
                f"{self.path} holds {self.dtype.str} ({self.dtype}) records, found an array of "
                f"{array.dtype.str} ({array.dtype})"
            )
        if array.ndim != 1 + len(self.item_shape) or tuple(array.shape[1:]) != self.item_shape:
            expected = "".join(f", {d}" for d in self.item_shape)
            raise ValueError(
                f"{self.path} holds records of shape {self.item_shape}: expected an array of "
                f"shape (n{expected}), found {tuple(array.shape)}"
            )
        if array.shape[0] == 0:
            raise ValueError(
                f"append needs at least one record: found an array of shape {tuple(array.shape)}"
            )
        step = max(1, _settings.WRITE_CHUNK_BYTES // self._item_len)
        no_dims = np.zeros(0, dtype=np.uint32)
        mapped = _memmap_of(array)
        source = array if mapped is None else mapped
        # A read-only map (``np.load(..., mmap_mode="r")``) is written now,
        # from the map, never behind the call: behind it, the write would
        # need a copy (the file may change once append returns, and a file
        # cut short under a map is a SIGBUS), and the copy into fresh
        # memory costs more than the overlap saves (a 574 MiB zstd append
        # of 147 KiB records, until durable: 3.2 s with copies written
        # behind, 2.6 s written now from the map).
        read_only_map = mapped is not None and mapped.mode == "r"
        behind = self._writes_behind(array.nbytes) and not read_only_map
        for start in range(0, array.shape[0], step):
            block = array[start : start + step]
            if behind and (start + step >= array.shape[0] or not block.flags.c_contiguous):
                # The last block is copied (into a finished write's buffer
                # when one is spare) and written behind. The call waits for
                # the ones before it in any case, so those are written from
                # the caller's memory, unless they need a copy to be
                # contiguous: then into a spare buffer, as the last.
                owned = self._owned(block)
                _release_pages(source, block)
                store.append_dense_behind(owned.reshape(-1).view(np.uint8), owned.shape[0])
                return
            if not block.flags.c_contiguous:
                block = np.ascontiguousarray(block)
            flat = block.reshape(-1).view(np.uint8)
            if self.is_image:
                n = block.shape[0]
                lens = np.full(n, self._item_len, dtype=np.uint64)
                offsets = np.arange(n, dtype=np.uint64) * np.uint64(self._item_len)
                store.append_images(flat, offsets, lens, no_dims, self.quality)
            else:
                store.append_dense(flat, block.shape[0])
            _release_pages(source, block)

    def __getitem__(self, idx: Any) -> Any:
        """One record for an integer (negative counts from the end); a
        stacked ``(n, *item_shape)`` array for anything else."""
        # What `_reading()` checks, inline for an open reader with no write
        # in flight (a batch of 256 labels costs about as much as these
        # calls did).
        store = self._store
        if store is None or not self._readable:
            store = self._reading()
        return store.get_dense(idx, self._proto)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        """The batch ``(n, *item_shape)`` at `idxs` (PyTorch's batch hook)."""
        return self._reading().get_dense(idxs, self._proto, True)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None:
        super().native_stream(name)
        return (name, self._reading(), self._item_len)

    def native_batch(self, data: np.ndarray, offsets: np.ndarray | None) -> np.ndarray:
        """A gathered column as ``(n, *item_shape)`` (no copy)."""
        return data.view(self.dtype).reshape((-1, *self.item_shape))
