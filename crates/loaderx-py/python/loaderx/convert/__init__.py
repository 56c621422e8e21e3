"""Getting data in: converters from common sources to typed containers.

``from loaderx.converter import convert, huggingface``

* :func:`convert` writes a Hugging Face ``Dataset`` (or ``DatasetDict``) as
  one typed store per numeric column (one directory per split).
* :func:`convert_npy`, :func:`convert_npz`, :func:`convert_parquet`,
  :func:`convert_arrow`, :func:`convert_image_folder` and
  :func:`convert_webdataset` convert files; :func:`convert_path` picks one
  by what `src` is (the ``loaderx convert`` command).

Every converter writes under a temporary sibling of `output`
(``.<name>.tmp-<pid>-<random>``) and renames it into place only once every
store is closed and all agree on the record count; on any error (or
Ctrl-C) the temporary directory is removed and `output` never appears.
Memory stays bounded: sources are read in batches of about
``batch_bytes`` (memory-mapped where the format allows it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ConversionError
from .arrow import convert_arrow, convert_parquet
from .hf import convert, huggingface
from .images import convert_image_folder, convert_webdataset
from .numpy import convert_npy, convert_npz
from .output import BATCH_BYTES, PathLike, Progress, url_output


def _saved_dataset(src: PathLike, output: PathLike, **options: Any) -> dict[str, int]:
    """A ``datasets`` ``save_to_disk`` folder, through :func:`convert`."""
    import datasets  # type: ignore[import-untyped]

    return convert(datasets.load_from_disk(os.fspath(src)), output, **options)


@dataclass(frozen=True)
class Source:
    """A kind of source :func:`convert_path` (and ``loaderx convert``) takes."""

    #: What :func:`source_kind` answers.
    kind: str
    #: Its name in ``loaderx convert --help``.
    shown: str
    #: The file suffixes (lowercase) that mean it, and how a refusal names
    #: them; none for a directory.
    suffixes: tuple[str, ...]
    expected: str
    #: ``convert(src, output, *, codec, progress, ...)``.
    convert: Callable[..., dict[str, int]]
    #: Whether it takes the image options (``workers``, ``size``,
    #: ``keep_encoded``).
    images: bool = False


#: Every source :func:`convert_path` and the ``loaderx convert`` command
#: take, in the order the command's help lists them.
SOURCES: tuple[Source, ...] = (
    Source("npy", ".npy", (".npy",), ".npy", convert_npy),
    Source("npz", ".npz", (".npz",), ".npz", convert_npz),
    Source("parquet", "Parquet", (".parquet",), ".parquet", convert_parquet),
    Source("arrow", "Arrow", (".arrow", ".feather", ".ipc"), ".arrow/.feather", convert_arrow),
    Source("images", "image folders", (), "an image folder", convert_image_folder, True),
    Source("webdataset", "WebDataset shards", (".tar",), ".tar", convert_webdataset),
    Source("hf", "a saved Hugging Face dataset", (), "a datasets save_to_disk folder",
           _saved_dataset),
)
_BY_KIND = {source.kind: source for source in SOURCES}


def source_kind(src: PathLike) -> str:
    """What :func:`convert_path` takes `src` for: ``"npy"``, ``"npz"``,
    ``"parquet"``, ``"arrow"``, ``"images"``, ``"webdataset"`` or
    ``"hf"`` (a ``save_to_disk`` directory): the ``kind`` of one of
    :data:`SOURCES`."""
    path = Path(os.fspath(src))
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    suffix = path.suffix.lower()
    if not path.is_dir():  # a file, or a pipe streaming one
        for source in SOURCES:
            if suffix in source.suffixes:
                return source.kind
        files = [s.expected for s in SOURCES if s.suffixes]
        folders = [s.expected for s in SOURCES if not s.suffixes]
        raise ConversionError(
            f"{path}: unknown source type {suffix or '(no suffix)'}; expected "
            f"{', '.join(files + folders[:-1])} or {folders[-1]}"
        )
    if (path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file():
        return "hf"
    if any(p.name.endswith(".tar") for p in path.iterdir()):
        return "webdataset"
    return "images"


@url_output
def convert_path(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    workers: int = 4,
    size: tuple[int, int] | None = None,
    progress: Progress | None = None,
    keep_encoded: bool = False,
    parts: int = 1,
    storage_options: dict[str, Any] | None = None,
    staging_dir: PathLike | None = None,
) -> dict[str, int]:
    """Convert whatever `src` is (see :func:`source_kind`) into `output`
    (`size` and `keep_encoded`: image folders, see
    :func:`convert_image_folder`). ``parts > 1`` writes a collection in
    that many processes (``num_proc=parts``); it takes a saved Hugging
    Face dataset, a ``.npy`` file, a Parquet file or an image folder."""
    kind = source_kind(src)
    source = _BY_KIND[kind]
    options: dict[str, Any] = {"codec": codec, "progress": progress}
    if source.images:
        options.update(size=size, workers=workers, keep_encoded=keep_encoded)
    if parts != 1:
        if kind not in _PARALLEL:
            raise ConversionError(
                f"{src}: --parts (a collection written by several processes) takes a saved "
                f"Hugging Face dataset, a .npy file, a Parquet file or an image folder, not "
                f"{source.shown}"
            )
        options["num_proc"] = parts
    return source.convert(src, output, **options)


#: The sources ``parts > 1`` (``num_proc``) takes.
_PARALLEL = ("hf", "npy", "parquet", "images")


__all__ = [
    "BATCH_BYTES",
    "ConversionError",
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
