"""loaderx 0.5.x's path of :mod:`loaderx.compat05.dataset` (``Dataset``)."""

from .compat05.dataset import (
    CODECS,
    FORMAT,
    MAX_RECORD_LEN,
    SCHEMA,
    SCHEMA_VERSION,  # noqa: F401 - not in __all__, as in 0.5.x
    WRITE_CHUNK_BYTES,
    Dataset,
)

__all__ = ["Dataset", "CODECS", "MAX_RECORD_LEN", "SCHEMA", "FORMAT", "WRITE_CHUNK_BYTES"]
