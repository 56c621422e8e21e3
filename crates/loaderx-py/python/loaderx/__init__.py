"""loaderx: a persistent record store and an endless data loader for ML training.

* :class:`Zrecord` stores byte records, each compressed on its own, and
  gathers any batch of them in parallel straight into a NumPy array.
* :class:`Dataset` is a typed NumPy view over a store (``Dataset.write``
  converts an array, ``ds[idxs]`` reads a batch).
* :class:`Dense` and :class:`Ragged` (also ``loaderx.zrecord``, the 2.x
  spelling) are typed containers: NumPy records of one dtype, of a fixed
  item shape or each with its own shape (``loaderx.utils.train_dict``
  trains the dictionary of their ``zstd_dict`` codec).
* :class:`DataLoader` draws index batches from a :class:`Sampler` and hands
  the training loop ready batches, endlessly: ``{"data", "label"}`` from two
  datasets, or any dict of named streams, sharded over hosts and resumable
  exactly (``loaderx.zsampler`` has the 2.x spelling of the sampler).
* Stores in object storage open by URL (``Dense.open("s3://...")``);
  :func:`push` uploads one.

A drop-in replacement for the loaderx 0.5.x Python API; stores are
compatible both ways for the ``raw`` and ``flate`` codecs.
"""

from __future__ import annotations

from . import _native, dtypes
from .compat05.dataloader import DataLoader
from .compat05.dataset import Dataset
from .compat05.sampler import Sampler
from .compat05.zrecord import CODECS, MAX_RECORD_LEN, Zrecord
from .errors import ERROR_CODES, ZrecordError
from .remote import push
from .zrecord import Dense, Ragged
from .allocator import Allocation, Allocator
from ._loader28 import Loader

#: The package version, as Cargo builds the native module.
__version__: str = _native.__version__

__all__ = [
    "Allocation",
    "Allocator",
    "CODECS",
    "ERROR_CODES",
    "DataLoader",
    "Dataset",
    "Loader",
    "Dense",
    "MAX_RECORD_LEN",
    "Ragged",
    "Sampler",
    "Zrecord",
    "ZrecordError",
    "__version__",
    "push",
    "dtypes",
]
