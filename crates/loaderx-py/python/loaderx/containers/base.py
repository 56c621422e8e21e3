"""What every typed container shares: the handle, its mode (writer,
reader, writable), creation and opening, pickling, maintenance."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, TypeVar

import numpy as np

from .. import _native, _staging
from .. import zrecord as _settings
from .._handles import _OPEN, _Closing
from ..dtypes import from_store_name
from ..errors import ClosedError, ContainerModeError
from .args import (
    DEFAULT_QUALITY,
    IMAGE_CODECS,
    _codec,
    _dictionary,
    _dtype,
    _quality,
    _shards,
    _size,
)
from .paths import _is_url, _options, create_local, create_staged, path_text
from .writing import _pack_files

_T = TypeVar("_T", bound="_Container")


def _reopen(
    cls: type[_T], path: str, check_raw: bool, storage_options: dict[str, str] | None = None
) -> _T:
    """Unpickles a reader."""
    return cls._open(path, False, check_raw, storage_options)


class _Container(_Closing):
    """What :class:`Dense` and :class:`Ragged` share: the handle, its mode,
    index parsing and maintenance."""

    _KIND = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Handles come from the class methods; loaderx 2.x refuses direct
        # construction with this TypeError.
        raise TypeError(f"use {type(self).__name__}.open(...) or {type(self).__name__}.create(...)")

    @classmethod
    def _make(
        cls: type[_T], store: _native.Store, path: str, readable: bool, writable: bool, editable: bool
    ) -> _T:
        """A handle on `store` (which it closes if `store` is not a `cls`)."""
        made = cls.__new__(cls)
        made._setup(store, path, readable, writable, editable)
        return made

    def _setup(
        self, store: _native.Store, path: str, readable: bool, writable: bool, editable: bool
    ) -> None:
        schema = store.schema()
        if schema is None or schema["kind"] != self._KIND:
            store.close()
            what = (
                "a format v1 byte store (use loaderx.Zrecord or Dataset)"
                if schema is None
                else (f"a {schema['kind']} container (use {schema['kind'].capitalize()}.open)")
            )
            raise ValueError(
                f"{path} holds {what}, not a {self._KIND} container: its schema fields do not "
                f"describe a {self._KIND} store"
            )
        self._store: _native.Store | None = store
        self.path = path
        self.dtype: np.dtype = from_store_name(schema["dtype"])
        self.codec: str = schema["codec"]
        #: Write lanes chosen at creation (``data_shards``), as in loaderx 2.x.
        self.data_shards: int = store.lanes()
        self._schema = schema
        self._readable = readable
        self._writable = writable
        self._editable = editable
        self._check_raw = False
        self._storage_options: dict[str, str] | None = None
        #: A writer created at a URL: ``(url, options, staging dir, staged
        #: store)``, published at close.
        self._publish_to: tuple[str, list[tuple[str, str]] | None, str, str] | None = None
        #: Whether records are encoded images (codec ``jpeg`` or ``png``).
        self.is_image: bool = self.codec in IMAGE_CODECS
        #: JPEG quality of appended arrays (``jpeg`` stores).
        self.quality: int = DEFAULT_QUALITY
        _OPEN.add(self)

    @classmethod
    def _open_with(
        cls,
        path: str | os.PathLike[str],
        writable: bool,
        check_raw: bool,
        quality: int,
        resize: tuple[int, int] | None,
        layout: str,
        storage_options: dict[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
    ) -> Any:
        """What `Dense.open` and `Ragged.open` do: a reader or writer, or an
        :class:`Images` reader when `resize` is given."""
        if cache_dir is not None or cache_bytes is not None:
            storage_options = dict(storage_options or {})
            if cache_dir is not None:
                storage_options["cache_dir"] = os.fsdecode(os.fspath(cache_dir))
            if cache_bytes is not None:
                storage_options["cache_bytes"] = str(int(cache_bytes))
        if resize is not None:
            if writable:
                raise ValueError("resize gives a reader: it cannot be combined with writable=True")
            return cls._open(path, False, check_raw, storage_options)._images(resize, layout)
        q = _quality(quality)
        opened = cls._open(path, writable, check_raw, storage_options)
        opened.quality = q
        return opened

    @classmethod
    def _open(
        cls: type[_T],
        path: Any,
        writable: bool,
        check_raw: bool,
        storage_options: dict[str, str] | None = None,
    ) -> _T:
        shown = path_text(path)
        options = _options(storage_options)
        if _is_url(shown):
            if writable:
                raise ValueError(f"{shown}: a store opened by URL is read-only (writable=True)")
        elif options:
            raise ValueError(
                f"{shown} is a local path: storage_options apply to stores opened by URL"
            )
        elif not os.path.isdir(shown) or not os.listdir(shown):
            raise FileNotFoundError(f"no {cls._KIND} container at {shown}")
        store = _native.Store.open_existing(shown, bool(writable), bool(check_raw), options)
        opened = cls._make(store, shown, True, bool(writable), bool(writable))
        opened._check_raw = bool(check_raw)
        opened._storage_options = storage_options
        return opened

    @classmethod
    def _create(
        cls: type[_T],
        path: Any,
        dtype: Any,
        shape: tuple[int, ...],
        ndim: int,
        codec: Any,
        dict_bytes: Any,
        data_shards: Any,
        storage_options: dict[str, Any] | None = None,
        staging_dir: str | os.PathLike[str] | None = None,
    ) -> _T:
        shown = path_text(path)
        codec = _codec(codec)
        found = _dtype(dtype)
        spec = (cls._KIND, found, shape, ndim, codec, _dictionary(codec, dict_bytes), _shards(data_shards))
        options = _options(storage_options)
        if not _is_url(shown):
            store = create_local(shown, options, staging_dir, cls.__name__, *spec)
            return cls._make(store, shown, False, True, False)
        store, staging, local = create_staged(shown, options, staging_dir, cls.__name__, *spec)
        made = cls._make(store, shown, False, True, False)
        made._publish_to = (shown, options, staging, local)
        return made

    # --- the handle -------------------------------------------------------------------

    def _live(self) -> _native.Store:
        """The native store (which first waits for the write behind the last
        append, raising its error); :class:`ClosedError` once closed."""
        store = self._store
        if store is None:
            raise self._closed()
        return store

    def _closed(self) -> ClosedError:
        return ClosedError(f"operation on a closed {type(self).__name__} ({self.path})")

    def _reading(self) -> _native.Store:
        store = self._live()
        if not self._readable:
            raise ContainerModeError(
                f"this {type(self).__name__} at {self.path} is a writer: close it and read "
                f"with {type(self).__name__}.open(path)"
            )
        return store

    def _appending(self) -> _native.Store:
        store = self._live()
        if not self._writable:
            raise ContainerModeError(
                f"this {type(self).__name__} at {self.path} is a reader: append through the "
                f"writer from {type(self).__name__}.create, or open with writable=True"
            )
        return store

    def _editing(self, op: str) -> _native.Store:
        store = self._live()
        if not self._editable:
            raise ContainerModeError(
                f"cannot {op} {self.path}: open it with {type(self).__name__}.open(path, "
                f"writable=True) first"
            )
        return store

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._store is None

    @property
    def writer(self) -> bool:
        """Whether this handle only appends (made by ``create``)."""
        return not self._readable

    def __len__(self) -> int:
        return len(self._live())

    def __repr__(self) -> str:
        mode = "writer" if not self._readable else ("writable" if self._writable else "reader")
        state = "closed" if self._store is None else f"{len(self._store)} records"
        return (
            f"<{type(self).__name__} {mode} {self.path!r}: {self._describe()}, "
            f"codec={self.codec}, {state}>"
        )

    def _describe(self) -> str:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        """A reader pickles as its path (a PyTorch worker started by spawn
        reopens it there); writers do not pickle."""
        self._reading()
        if self._writable:
            raise TypeError(f"a writable {type(self).__name__} cannot be pickled; pickle a reader")
        return (_reopen, (type(self), self.path, self._check_raw, self._storage_options))

    def close(self) -> None:
        """Publish what was appended and release the store. Idempotent;
        waits for the calls in flight. An append on another thread that
        races with it is either stored or raises :class:`ClosedError`.

        A writer created at a URL publishes the staged store there now
        (chunks first, ``meta.zr`` last) and removes the staging directory;
        if the upload fails, the error names the URL and the staged store
        is kept (the error says where, and how to push it)."""
        store = getattr(self, "_store", None)
        if store is not None:
            self._store = None
            publish = getattr(self, "_publish_to", None)
            self._publish_to = None
            try:
                store.close()
            except BaseException:
                if publish is not None:
                    _staging.discard(publish[2])
                raise
            if publish is not None:
                url, options, staging, local = publish
                _staging.publish(local, url, options, staging)
                _staging.discard(staging)

    def __exit__(self, *exc_info: object) -> None:
        """Closes the handle; a writer created at a URL that leaves the
        ``with`` block by an exception publishes nothing and removes its
        staging directory instead."""
        publish = getattr(self, "_publish_to", None)
        if exc_info and exc_info[0] is not None and publish is not None:
            self._discard()
            return
        self.close()

    def _discard(self) -> None:
        """Releases a writer created at a URL without publishing it."""
        store = getattr(self, "_store", None)
        publish = self._publish_to
        self._store = None
        self._publish_to = None
        try:
            if store is not None:
                store.close()
        finally:
            if publish is not None:
                _staging.discard(publish[2])

    def sync(self) -> None:
        """Make everything appended so far durable and visible to handles
        opened from now on (``close()`` does it too)."""
        self._appending().sync()

    # --- write-behind -----------------------------------------------------------------

    def _writes_behind(self, nbytes: int) -> bool:
        """Whether an append of `nbytes` is written behind the caller."""
        return (
            not self._readable
            and self.codec != "raw"
            and not self.is_image
            and nbytes >= _settings.WRITE_BEHIND_AT_LEAST
        )

    def _owned(self, block: np.ndarray) -> np.ndarray:
        """A copy of `block` for a write behind the caller, into the buffer
        of a finished write when it is the same size (no fresh pages)."""
        spare = self._live().take_spare()
        if spare is not None and spare.nbytes == block.nbytes:
            out = spare.view(block.dtype).reshape(block.shape)
            np.copyto(out, block)
            return out
        return np.array(block, order="C", copy=True)

    # --- images -----------------------------------------------------------------------

    def _image_store(self, op: str) -> _native.Store:
        store = self._appending()
        if not self.is_image:
            raise ValueError(
                f"{op} needs an image store (codec 'jpeg' or 'png'); {self.path} has codec "
                f"{self.codec!r}"
            )
        return store

    def append_encoded(self, files: Iterable[Any]) -> None:
        """Add JPEG or PNG files as they are, no re-encoding: each item of
        `files` is one file's bytes. Each header is read (not the pixels)
        and checked: a :class:`Dense` store takes only images of its
        ``(H, W)``; a :class:`Ragged` store records each image's
        ``(h, w, 3)``. JPEG and PNG files may be mixed. Files are checked in
        blocks of about ``WRITE_CHUNK_BYTES``; a block with a bad file
        (``ZrecordError`` naming it) is not written."""
        store = self._image_store("append_encoded")
        if isinstance(files, (bytes, bytearray, memoryview, str)):
            raise TypeError("append_encoded takes an iterable of files (bytes), not one file")
        for data, offsets, lens in _pack_files(files):
            store.append_encoded(data, offsets, lens)

    def _images(self, resize: Any, layout: str) -> Any:
        if not self.is_image:
            self.close()
            raise ValueError(
                f"resize needs an image store (codec 'jpeg' or 'png'); {self.path} has codec "
                f"{self.codec!r}"
            )
        from .images import Images

        return Images(self, _size(resize), layout)

    # --- integrity and maintenance ----------------------------------------------------

    def verify(self) -> None:
        """Check every record and table entry against its checksum; raises
        ``ZrecordError`` (code -7) naming the first damaged record."""
        self._live().verify()

    def damaged(self) -> list[tuple[int, str]]:
        """Every damaged record as ``(index, reason)``; empty when healthy."""
        return [(int(i), str(why)) for i, why in self._live().damaged()]

    def delete(self, idxs: Any) -> None:
        """Remove records; the last records move into the holes so the
        indices stay ``0..len``. Needs ``open(path, writable=True)``."""
        self._editing("delete from").delete(idxs)

    def compact(self) -> None:
        """Reclaim the space deleted records left. Needs
        ``open(path, writable=True)``."""
        self._editing("compact").compact()

    def stats(self) -> dict[str, int]:
        """``records``, ``live_bytes``, ``chunk_bytes`` and ``reclaimable``."""
        keys = ("records", "live_bytes", "chunk_bytes", "reclaimable")
        return dict(zip(keys, self._live().stats()))

    def has_dict(self) -> bool:
        """Whether the store's records are compressed with a zstd dictionary
        (``codec="zstd_dict"``), as in loaderx 2.x."""
        return self.codec == "zstd_dict"

    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None:
        """How the native loader gathers this container (``DataLoader``);
        :class:`ContainerModeError` (a ``ValueError``) for a writer."""
        if not self._readable:
            raise ContainerModeError(
                f"stream {name!r} is a {type(self).__name__} writer ({self.path}); pass a reader "
                f"from {type(self).__name__}.open"
            )
        return None
