"""The native extension: the store engine and the sampler, GIL released."""

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "OutputPool",
    "Store",
    "push",
    "first_object",
    "publish",
    "Sampler",
    "Loader",
    "Collection",
    "CollectionColumn",
    "collection_at_url",
    "collection_commit",
    "collection_upload_part",
    "DLTensor",
    "import_dlpack",
    "loader_state",
    "sampler_state_of",
    "MAX_RECORD_LEN",
    "POOLED_OUTPUT_BYTES",
    "CODECS",
    "ERROR_CODES",
    "DTYPES",
    "ML_DTYPES",
    "TYPED_CODECS",
    "MAX_NDIM",
    "MAX_LANES",
    "MAX_ITEM_LEN",
    "DEFAULT_DICT_SIZE",
    "MAX_DICT_SIZE",
    "stores_dtype",
    "dtype_name",
    "train_dictionary",
    "BEHIND_NOTE",
    "as_indices",
    "check_dtype",
    "check_shape",
    "check_codec",
    "check_dictionary",
    "check_shards",
    "check_ndim",
    "check_quality",
    "check_size",
    "file_maps",
    "release_pages",
    "release_mapped",
    "__version__",
]

__version__: str
MAX_RECORD_LEN: Final[int]
POOLED_OUTPUT_BYTES: Final[int]
CODECS: dict[str, int]
ERROR_CODES: dict[int, tuple[str, str]]
BEHIND_NOTE: Final[str]
DTYPES: list[str]
ML_DTYPES: list[str]
TYPED_CODECS: dict[str, int]
MAX_NDIM: Final[int]
MAX_LANES: Final[int]
MAX_ITEM_LEN: Final[int]
DEFAULT_DICT_SIZE: Final[int]
MAX_DICT_SIZE: Final[int]

def stores_dtype(name: str) -> bool: ...
def dtype_name(dtype: np.dtype[Any]) -> str: ...
def train_dictionary(
    samples: npt.NDArray[np.uint8], sizes: npt.NDArray[np.uint64], max_size: int
) -> bytes: ...
def check_dtype(dtype: Any) -> np.dtype[Any]: ...
def check_shape(item_shape: Any) -> tuple[int, ...]: ...
def check_codec(codec: Any) -> str: ...
def check_dictionary(codec: str, dict_bytes: Any) -> bytes | None: ...
def check_shards(data_shards: Any) -> int: ...
def check_ndim(ndim: Any) -> int: ...
def check_quality(quality: Any) -> int: ...
def check_size(resize: Any) -> tuple[int, int]: ...
def as_indices(
    idxs: object, what: str = "idxs", noun: str = "index", wrap: int | None = None
) -> npt.NDArray[np.uint64]: ...
def file_maps(paths: list[str]) -> list[tuple[int, int]]: ...
def release_pages(spans: list[tuple[int, int]], maps: list[tuple[int, int]]) -> None: ...
def release_mapped(source: object, block: object) -> None: ...

@final
class OutputPool:
    def __new__(cls, pool_size: int) -> OutputPool: ...
    @property
    def cached_bytes(self) -> int: ...
    @property
    def pool_size(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def acquire(self, size: int) -> npt.NDArray[np.uint8]: ...

@final
class Store:
    def __new__(cls, path: str) -> Store: ...
    @staticmethod
    def create_typed(
        path: str,
        kind: str,
        dtype: str,
        shape: list[int],
        ndim: int,
        codec: str,
        dictionary: bytes | None = None,
        lanes: int = 1,
    ) -> Store: ...
    @staticmethod
    def open_existing(
        path: str,
        writable: bool,
        check_raw: bool = False,
        storage_options: list[tuple[str, str]] | None = None,
    ) -> Store: ...
    @staticmethod
    def create_v2_bytes(path: str, codec: str) -> Store: ...
    def format_version(self) -> int: ...
    def lanes(self) -> int: ...
    def schema(self) -> dict[str, Any] | None: ...
    def append_dense(self, src: npt.NDArray[np.uint8], n: int) -> int: ...
    def append_arrays(
        self, records: Sequence[Any], dtype: np.dtype[Any], ndim: int, empty: bool
    ) -> int | None: ...
    @staticmethod
    def pack_arrays(
        records: Sequence[Any], dtype: np.dtype[Any], ndim: int, empty: bool
    ) -> (
        tuple[
            npt.NDArray[np.uint8],
            npt.NDArray[np.uint64],
            npt.NDArray[np.uint64],
            npt.NDArray[np.uint32],
        ]
        | None
    ): ...
    def append_shaped(
        self,
        src: npt.NDArray[np.uint8],
        offsets: npt.NDArray[np.uint64],
        lens: npt.NDArray[np.uint64],
        dims: npt.NDArray[np.uint32],
    ) -> int: ...
    def append_images(
        self,
        src: npt.NDArray[np.uint8],
        offsets: npt.NDArray[np.uint64],
        lens: npt.NDArray[np.uint64],
        dims: npt.NDArray[np.uint32],
        quality: int,
    ) -> int: ...
    def append_encoded(
        self,
        src: npt.NDArray[np.uint8],
        offsets: npt.NDArray[np.uint64],
        lens: npt.NDArray[np.uint64],
    ) -> int: ...
    def append_dense_behind(self, src: npt.NDArray[Any], n: int) -> None: ...
    def append_shaped_behind(
        self,
        src: npt.NDArray[np.uint8],
        offsets: npt.NDArray[np.uint64],
        lens: npt.NDArray[np.uint64],
        dims: npt.NDArray[np.uint32],
    ) -> None: ...
    def take_spare(self) -> npt.NDArray[np.uint8] | None: ...
    def get_dense(
        self,
        idx: object,
        proto: npt.NDArray[Any],
        batch: bool = False,
        pool: OutputPool | None = None,
    ) -> Any: ...
    def get_ragged(
        self,
        idx: object,
        dtype: np.dtype[Any],
        batch: bool = False,
        pool: OutputPool | None = None,
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64], bool]: ...
    def shapes(self, idx: object) -> npt.NDArray[np.int64]: ...
    def get_images(
        self, idx: object, height: int, width: int, layout: str, batch: bool = False
    ) -> npt.NDArray[np.uint8]: ...
    def verify(self) -> None: ...
    def damaged(self) -> list[tuple[int, str]]: ...
    def __len__(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def sync(self) -> None: ...
    def lengths(self, idxs: npt.NDArray[np.uint64], out: npt.NDArray[np.uint32]) -> None: ...
    def gather(self, idxs: npt.NDArray[np.uint64], dst: npt.NDArray[np.uint8], stride: int) -> None: ...
    def gather_exact(
        self, idxs: npt.NDArray[np.uint64], dst: npt.NDArray[np.uint8], item_len: int
    ) -> None: ...
    def gather_like(self, idxs: object, proto: npt.NDArray[Any]) -> npt.NDArray[Any] | None: ...
    def gather_var(
        self, idxs: npt.NDArray[np.uint64], dst: npt.NDArray[np.uint8], offsets: npt.NDArray[np.uint64]
    ) -> None: ...
    def append(self, src: npt.NDArray[np.uint8], n: int, item_len: int, codec: str) -> int: ...
    def append_var(
        self,
        src: npt.NDArray[np.uint8],
        offsets: npt.NDArray[np.uint64],
        lens: npt.NDArray[np.uint64],
        codec: str,
    ) -> int: ...
    def delete(self, idxs: object) -> None: ...
    def compact(self) -> None: ...
    def stats(self) -> tuple[int, int, int, int]: ...
    def close(self) -> None: ...

@final
class Collection:
    @staticmethod
    def open(
        path: str,
        storage_options: list[tuple[str, str]] | None = None,
        max_open_parts: int | None = None,
    ) -> Collection: ...
    def max_open_parts(self) -> int: ...
    def __len__(self) -> int: ...
    def columns(self) -> list[str]: ...
    def schemas(self) -> dict[str, dict[str, Any]]: ...
    def parts(self) -> list[tuple[str, int]]: ...
    def opened_parts(self) -> int: ...
    def column(self, name: str) -> CollectionColumn: ...

@final
class CollectionColumn:
    def schema(self) -> dict[str, Any] | None: ...
    def lanes(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def get_dense(self, idx: object, proto: npt.NDArray[Any], batch: bool = False) -> Any: ...
    def get_ragged(
        self, idx: object, dtype: np.dtype[Any], batch: bool = False
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64], bool]: ...
    def shapes(self, idx: object) -> npt.NDArray[np.int64]: ...
    def get_images(
        self, idx: object, height: int, width: int, layout: str, batch: bool = False
    ) -> npt.NDArray[np.uint8]: ...
    def verify(self) -> None: ...
    def damaged(self) -> list[tuple[int, str]]: ...

def collection_commit(
    path: str,
    parts: list[str] | None = None,
    storage_options: list[tuple[str, str]] | None = None,
) -> tuple[list[str], int, list[str]]: ...
def collection_upload_part(
    local: str | os.PathLike[str],
    url: str,
    part: str,
    storage_options: list[tuple[str, str]] | None = None,
) -> list[str]: ...
def collection_at_url(url: str, storage_options: list[tuple[str, str]] | None = None) -> bool: ...

@final
class Sampler:
    def __new__(
        cls,
        length: int,
        batch_size: int,
        mode: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> Sampler: ...
    def fill(self, out: npt.NDArray[np.uint64]) -> None: ...
    @property
    def local_batch_size(self) -> int: ...
    @property
    def step(self) -> int: ...
    def seek(self, step: int) -> None: ...
    def state(self) -> dict[str, int]: ...
    def restore(self, state: Mapping[str, Any]) -> None: ...

def loader_state(sampler_state: Mapping[str, Any], streams: list[str]) -> dict[str, Any]: ...
def sampler_state_of(loader_state: Mapping[str, Any], streams: list[str]) -> dict[str, int]: ...
@final
class Loader:
    def __new__(
        cls,
        streams: list[tuple[str, Store, int]],
        length: int,
        batch_size: int,
        mode: int,
        seed: int,
        num_workers: int,
        prefetch: int,
        rank: int = 0,
        world_size: int = 1,
        lookahead: int = 0,
    ) -> Loader: ...
    def next(
        self,
    ) -> (
        tuple[
            int,
            npt.NDArray[np.uint64],
            list[tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64] | None]],
        ]
        | None
    ): ...
    def state(self) -> dict[str, Any]: ...
    def restore(self, state: Mapping[str, Any]) -> None: ...
    @property
    def local_batch_size(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...

def push(
    local: str, url: str, storage_options: list[tuple[str, str]] | None = None
) -> tuple[list[str], int]: ...
def first_object(
    url: str, storage_options: list[tuple[str, str]] | None = None
) -> str | None: ...
def publish(
    local: str, url: str, storage_options: list[tuple[str, str]] | None = None
) -> tuple[list[str], int]: ...


@final
class DLTensor:
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def device(self) -> tuple[int, int]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, idx: Any, /) -> DLTensor: ...
    @staticmethod
    def _wrap(array: Any) -> DLTensor: ...


def import_dlpack(producer: Any, dtype: np.dtype[Any]) -> Any: ...
