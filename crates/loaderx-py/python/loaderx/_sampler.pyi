import enum

import numpy as np
import numpy.typing as npt

def resolve_world(rank: int | None, world_size: int | None) -> tuple[int, int]: ...

class Sampler:
    class Mode(enum.IntEnum):
        SEQUENTIAL = 0
        IID = 1
        SHUFFLE = 2

    length: int
    batch_size: int
    mode: Sampler.Mode
    seed: int
    rank: int
    world_size: int
    local_batch_size: int
    def __init__(
        self,
        length: int,
        batch_size: int,
        mode: int,
        seed: int = 42,
        *,
        rank: int = 0,
        world_size: int = 1,
    ) -> None: ...
    def next(self) -> npt.NDArray[np.uint64]: ...
    def seek(self, step: int) -> None: ...
    @property
    def step(self) -> int: ...
    def state_dict(self) -> dict[str, int]: ...
    def load_state_dict(self, state: dict[str, int]) -> None: ...
    def __iter__(self) -> Sampler: ...
    def __next__(self) -> npt.NDArray[np.uint64]: ...
