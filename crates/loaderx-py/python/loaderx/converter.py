"""The loaderx 2.x path of :mod:`loaderx.convert` (the converters):
``from loaderx.converter import convert, huggingface``."""

from .convert import (
    BATCH_BYTES,
    SOURCES,
    ConversionError,
    Source,
    convert,
    convert_arrow,
    convert_image_folder,
    convert_npy,
    convert_npz,
    convert_parquet,
    convert_path,
    convert_webdataset,
    huggingface,
    source_kind,
)
from .convert.output import PathLike, Progress

__all__ = [
    "BATCH_BYTES",
    "ConversionError",
    "PathLike",
    "Progress",
    "SOURCES",
    "Source",
    "convert",
    "convert_arrow",
    "convert_image_folder",
    "convert_npy",
    "convert_npz",
    "convert_parquet",
    "convert_path",
    "convert_webdataset",
    "huggingface",
    "source_kind",
]
