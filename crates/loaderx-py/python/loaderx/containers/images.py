"""``Images``: an image store read at one fixed size."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .._handles import _OPEN, _Closing
from .base import _Container


class Images(_Closing):
    """Images of an image store (codec ``jpeg`` or ``png``, dense or
    ragged) read at one fixed size: ``Dense.open(path, resize=(H, W))`` or
    ``Ragged.open(path, resize=(H, W))``.

    Every image is decoded in the store's Rust threads (the GIL released),
    resized keeping its aspect ratio so it covers ``H x W`` (a triangle
    filter: bilinear when enlarging, an area-weighted average when
    shrinking), centre-cropped to ``H x W`` and written straight into the
    batch. ``im[i]`` is one ``uint8`` array of :attr:`item_shape`
    (``(H, W, 3)`` for ``layout="hwc"``, ``(3, H, W)`` for ``"chw"``); any
    other index a stacked ``(n, *item_shape)`` array. A ``DataLoader``
    stream like any other (batches through :meth:`__getitems__`)."""

    def __init__(self, source: _Container, size: tuple[int, int], layout: str) -> None:
        if layout not in ("hwc", "chw"):
            source.close()
            raise ValueError(f"layout must be 'hwc' or 'chw', got {layout!r}")
        self._source = source
        self.path = source.path
        self.height, self.width = size
        self.layout = layout
        self.dtype = np.dtype(np.uint8)
        self.item_shape: tuple[int, ...] = (
            (self.height, self.width, 3) if layout == "hwc" else (3, self.height, self.width)
        )
        _OPEN.add(self)

    def __len__(self) -> int:
        return len(self._source)

    def __repr__(self) -> str:
        return (
            f"<Images reader {self.path!r}: {self.layout} {list(self.item_shape)}, "
            f"codec={self._source.codec}, {'closed' if self.closed else f'{len(self)} records'}>"
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._source.closed

    def close(self) -> None:
        """Release the store. Idempotent."""
        source = getattr(self, "_source", None)
        if source is not None:
            source.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _reopen_images,
            (
                type(self._source),
                self.path,
                (self.height, self.width),
                self.layout,
                self._source._storage_options,
            ),
        )

    def __getitem__(self, idx: Any) -> np.ndarray:
        store = self._source._reading()
        return store.get_images(idx, self.height, self.width, self.layout)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        """The batch ``(n, *item_shape)`` at `idxs`."""
        store = self._source._reading()
        return store.get_images(idxs, self.height, self.width, self.layout, True)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]


def _reopen_images(
    cls: type[_Container],
    path: str,
    size: tuple[int, int],
    layout: str,
    storage_options: dict[str, str] | None = None,
) -> Images:
    """Unpickles an :class:`Images` reader."""
    return cls._open(path, False, False, storage_options)._images(size, layout)
