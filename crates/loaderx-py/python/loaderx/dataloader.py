"""The path of :mod:`loaderx.compat05.dataloader` (``DataLoader``) in loaderx
0.5.x and 2.x."""

from .compat05.dataloader import *  # noqa: F401,F403
