"""loaderx 0.5.x's path of :mod:`loaderx.compat05.dataset` (``Dataset``)."""

from .compat05.dataset import *  # noqa: F401,F403
from .compat05.dataset import SCHEMA_VERSION, __all__  # noqa: F401
