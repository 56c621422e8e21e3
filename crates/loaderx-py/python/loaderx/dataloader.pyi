from collections.abc import Callable
from types import TracebackType
from typing import Any

class DataLoader:
    dataset: Any
    labelset: Any
    batch_size: int
    num_workers: int
    prefetch_size: int
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
    ) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> DataLoader: ...
    def __next__(self) -> dict[str, Any]: ...
    def state_dict(self) -> dict[str, int]: ...
    def load_state_dict(self, state: dict[str, int]) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> DataLoader: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None: ...
    def __del__(self) -> None: ...
