import enum
from types import TracebackType

import numpy as np
import numpy.typing as npt

from . import _sampler

__all__ = ["Sampler"]

class Sampler(_sampler.Sampler):
    class Mode(enum.IntEnum):  # type: ignore[misc]
        SEQUENTIAL = 0
        IID = 1
        CYCLIC = 2
        SHUFFLE = 2

    closed: bool
    def __init__(
        self,
        length: int,
        batch_size: int,
        mode: int,
        seed: int = 42,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None: ...
    def next(self) -> npt.NDArray[np.uint64]: ...
    def seek(self, step: int) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Sampler: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None: ...
