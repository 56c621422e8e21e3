import os
from collections.abc import Iterable
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from .zrecord import Dense, Ragged

__all__ = ["DEFAULT_DICT_SIZE", "MAX_DICT_SIZE", "train_dict"]

DEFAULT_DICT_SIZE: int
MAX_DICT_SIZE: int
SAMPLES_PER_DICT_BYTE: int

Source = Union[npt.NDArray[Any], Dense, Ragged, Iterable[Any]]

def train_dict(
    source: Source,
    dict_size: int = ...,
    *,
    sample_bytes: int | None = None,
    seed: int = 0,
    path: str | os.PathLike[str] | None = None,
) -> bytes: ...
