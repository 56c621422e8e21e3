import io
import os
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from . import _native
from ._zrecord import ZrecordError as ZrecordError
from ._zrecord import ArgumentTypeError as ArgumentTypeError
from ._zrecord import ClosedError as ClosedError
from ._zrecord import ZrecordIndexError as ZrecordIndexError

__all__ = [
    "ArgumentTypeError",
    "CODECS",
    "ClosedError",
    "ContainerExistsError",
    "ContainerModeError",
    "DEFAULT_QUALITY",
    "DTYPES",
    "Dense",
    "EXISTS",
    "FlatRagged",
    "IMAGE_CODECS",
    "Images",
    "MAX_DATA_SHARDS",
    "MAX_ITEM_LEN",
    "MAX_NDIM",
    "MAX_RECORD_LEN",
    "MAX_SHARDS",
    "Ragged",
    "WRITE_BEHIND_AT_LEAST",
    "WRITE_CHUNK_BYTES",
    "ZrecordError",
    "ZrecordIndexError",
    "stores_dtype",
]

DTYPES: tuple[str, ...]

def stores_dtype(dtype: Any) -> bool: ...
CODECS: dict[str, int]
EXISTS: int
MAX_NDIM: int
MAX_SHARDS: int
MAX_ITEM_LEN: int
MAX_DATA_SHARDS: int
MAX_RECORD_LEN: int
WRITE_CHUNK_BYTES: Final[int]
WRITE_BEHIND_AT_LEAST: Final[int]
IMAGE_CODECS: tuple[str, ...]
DEFAULT_QUALITY: int

class ContainerModeError(io.UnsupportedOperation, RuntimeError): ...
class ContainerExistsError(FileExistsError, ZrecordError):
    def __new__(cls, message: str) -> ContainerExistsError: ...
    def __init__(self, message: str) -> None: ...

class _Container:
    path: str
    dtype: np.dtype[Any]
    codec: str
    data_shards: int
    is_image: bool
    quality: int
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def append_encoded(self, files: Iterable[Any]) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def writer(self) -> bool: ...
    def __len__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def close(self) -> None: ...
    def sync(self) -> None: ...
    def verify(self) -> None: ...
    def damaged(self) -> list[tuple[int, str]]: ...
    def delete(self, idxs: npt.ArrayLike) -> None: ...
    def compact(self) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def has_dict(self) -> bool: ...
    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None: ...
    def __del__(self) -> None: ...

class Dense(_Container):
    item_shape: tuple[int, ...]
    ndim: int
    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dtype: npt.DTypeLike,
        item_shape: int | tuple[int, ...],
        *,
        codec: str,
        dict_bytes: bytes | None = None,
        data_shards: int = 4,
        quality: int = 90,
    ) -> Dense: ...
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        writable: bool = False,
        *,
        check_raw: bool = False,
        quality: int = 90,
        resize: tuple[int, int] | None = None,
        layout: str = "hwc",
    ) -> Any: ...
    def append(self, array: npt.NDArray[Any]) -> None: ...
    def __getitem__(self, idx: Any) -> Any: ...
    def __getitems__(self, idxs: npt.ArrayLike) -> npt.NDArray[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...
    def native_batch(
        self, data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.uint64] | None
    ) -> npt.NDArray[Any]: ...
    def __enter__(self) -> Dense: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None: ...

class Ragged(_Container):
    ndim: int
    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dtype: npt.DTypeLike,
        ndim: int,
        *,
        codec: str,
        dict_bytes: bytes | None = None,
        data_shards: int = 4,
        quality: int = 90,
    ) -> Ragged: ...
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        writable: bool = False,
        *,
        check_raw: bool = False,
        quality: int = 90,
        resize: tuple[int, int] | None = None,
        layout: str = "hwc",
    ) -> Any: ...
    def append(self, records: Iterable[npt.NDArray[Any]]) -> None: ...
    def _append(self, records: Iterable[npt.NDArray[Any]], empty: bool) -> None: ...
    def append_flat(
        self, flat: npt.NDArray[Any], offsets: npt.ArrayLike, shapes: npt.ArrayLike | None = None
    ) -> None: ...
    def gather_flat(
        self, idxs: npt.ArrayLike
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def shapes(self, idxs: npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    def __getitem__(self, idx: Any) -> Any: ...
    def __getitems__(self, idxs: npt.ArrayLike) -> list[npt.NDArray[Any]]: ...
    def __iter__(self) -> Iterator[npt.NDArray[Any]]: ...
    def native_indexed_batch(
        self,
        data: npt.NDArray[np.uint8],
        offsets: npt.NDArray[np.uint64] | None,
        idxs: npt.NDArray[np.uint64],
    ) -> list[npt.NDArray[Any]]: ...
    def __enter__(self) -> Ragged: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None: ...
    def flat(self) -> FlatRagged: ...
    def flat_batch(
        self, data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.uint64] | None, idxs: npt.NDArray[np.uint64]
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...

class Images:
    path: str
    height: int
    width: int
    layout: str
    dtype: np.dtype[Any]
    item_shape: tuple[int, ...]
    def __init__(self, source: _Container, size: tuple[int, int], layout: str) -> None: ...
    def __len__(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def __getitem__(self, idx: Any) -> npt.NDArray[np.uint8]: ...
    def __getitems__(self, idxs: Any) -> npt.NDArray[np.uint8]: ...
    def __iter__(self) -> Iterator[npt.NDArray[np.uint8]]: ...
    def __enter__(self) -> Images: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None: ...
    def __del__(self) -> None: ...

class FlatRagged:
    def __init__(self, ragged: Ragged) -> None: ...
    def __len__(self) -> int: ...
    def __getitems__(self, idxs: npt.ArrayLike) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None: ...
    def native_indexed_batch(
        self, data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.uint64] | None, idxs: npt.NDArray[np.uint64]
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
