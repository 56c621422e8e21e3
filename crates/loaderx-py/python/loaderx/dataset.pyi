import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from . import _native
from ._zrecord import CODECS as CODECS
from ._zrecord import MAX_RECORD_LEN as MAX_RECORD_LEN
from ._zrecord import _Closing

SCHEMA: Final[str]
FORMAT: Final[str]
SCHEMA_VERSION: Final[int]
WRITE_CHUNK_BYTES: Final[int]

class Dataset(_Closing):
    path: Path
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    codec: str
    def __init__(self, path: str | os.PathLike[str]) -> None: ...
    def __len__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def __getitem__(self, idx: Any) -> Any: ...
    def __getitems__(self, idxs: npt.ArrayLike) -> npt.NDArray[Any]: ...
    def native_stream(self, name: str) -> tuple[str, _native.Store, int] | None: ...
    def __iter__(self) -> Iterator[Any]: ...
    @classmethod
    def write(
        cls,
        path: str | os.PathLike[str],
        array: npt.ArrayLike,
        codec: str = "flate",
        chunk_bytes: int = 67108864,
        *,
        format: int = 1,
    ) -> Dataset: ...
    def delete(self, idxs: npt.ArrayLike) -> None: ...
    def compact(self) -> None: ...
    def stats(self) -> dict[str, int]: ...

__all__ = ["Dataset", "CODECS", "MAX_RECORD_LEN", "SCHEMA", "FORMAT", "WRITE_CHUNK_BYTES"]
