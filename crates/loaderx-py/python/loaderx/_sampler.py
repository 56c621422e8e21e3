"""loaderx 0.5.x's path of :mod:`loaderx.compat05.sampler` (``Sampler``)."""

from .compat05.sampler import *  # noqa: F401,F403
from .compat05.sampler import resolve_world  # noqa: F401
