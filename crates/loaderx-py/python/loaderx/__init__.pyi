from . import _lib as _lib
from . import _native as _native
from . import dtypes as dtypes
from .allocator import Allocation as Allocation
from .allocator import Allocator as Allocator
from ._loader28 import Loader as Loader
from ._sampler import Sampler as Sampler
from ._zrecord import CODECS as CODECS
from ._zrecord import ERROR_CODES as ERROR_CODES
from ._zrecord import MAX_RECORD_LEN as MAX_RECORD_LEN
from ._zrecord import Zrecord as Zrecord
from ._zrecord import ZrecordError as ZrecordError
from .dataloader import DataLoader as DataLoader
from .dataset import Dataset as Dataset
from .zrecord import Dense as Dense
from .remote import push as push
from .zrecord import Ragged as Ragged

__version__: str
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
