"""The typed containers (the loaderx 2.x API), one module per kind:
:mod:`.dense`, :mod:`.ragged`, :mod:`.images`; their arguments are checked
in :mod:`.args`, and they write through :mod:`.writing`.
:mod:`loaderx.zrecord` re-exports them."""

from .dense import Dense
from .images import Images
from .ragged import FlatRagged, Ragged

__all__ = ["Dense", "FlatRagged", "Images", "Ragged"]
