"""The path of :mod:`loaderx.compat05.dataloader` (``DataLoader``) in loaderx
0.5.x and 2.x, and of 2.8's ``Loader`` (:mod:`loaderx._loader28`)."""

from .compat05.dataloader import *  # noqa: F401,F403
from ._loader28 import Loader  # noqa: F401,E402
