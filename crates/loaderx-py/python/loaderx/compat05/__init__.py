"""The loaderx 0.5.x API, by role: raw byte records (:mod:`.zrecord`), the
NumPy dataset over them (:mod:`.dataset`), the sampler (:mod:`.sampler`)
and the loader (:mod:`.dataloader`, which also takes the 2.x streams).
Their original import paths (``loaderx._zrecord``, ``loaderx.dataset``,
``loaderx._sampler``, ``loaderx.dataloader``) re-export them."""

from .dataloader import DataLoader
from .dataset import Dataset
from .sampler import Sampler
from .zrecord import Zrecord

__all__ = ["DataLoader", "Dataset", "Sampler", "Zrecord"]
