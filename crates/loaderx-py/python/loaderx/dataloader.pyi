from collections.abc import Callable, Mapping
from typing import Any, overload

from ._loader28 import Loader as Loader
from ._zrecord import _Closing

class DataLoader(_Closing):
    dataset: Any
    labelset: Any
    streams: dict[str, Any]
    batch_size: int
    num_workers: int
    prefetch_size: int
    lookahead: int
    rank: int
    world_size: int
    local_batch_size: int
    @overload
    def __init__(
        self,
        streams: Mapping[str, Any],
        transform_workers: int | None = None,
        batch_size: int = 256,
        prefetch_size: int = 4,
        mode: int = 2,
        seed: int = 42,
        transform: Callable[[dict[str, Any]], Any] = ...,
        *,
        num_workers: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        lookahead: int = 4,
    ) -> None: ...
    @overload
    def __init__(
        self,
        dataset: Any,
        labelset: Any,
        num_workers: int = 4,
        batch_size: int = 256,
        prefetch_size: int = 4,
        mode: int = 1,
        seed: int = 42,
        transform: Callable[[tuple[Any, Any]], tuple[Any, Any]] = ...,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        lookahead: int = 4,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> DataLoader: ...
    def __next__(self) -> Any: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
