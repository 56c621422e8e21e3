"""Images: image folders (one label per subfolder) and WebDataset tar
shards."""

from __future__ import annotations

import os
import re
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConversionError
from ..zrecord import Dense, Ragged, ZrecordError
from .parallel import check_num_proc, convert_file_parallel
from .output import (
    BATCH_BYTES,
    PathLike,
    Progress,
    _Output,
    _rows_per_batch,
    _run,
    shard_range,
    url_output,
)


# --- image folders -------------------------------------------------------------------------

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def _image_files(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise ConversionError(f"{root} has no class folders (expected root/<class>/*.jpg|png)")
    files = []
    for label, name in enumerate(classes):
        for p in sorted((root / name).iterdir()):
            if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES:
                files.append((p, label))
    if not files:
        raise ConversionError(f"{root} holds no .jpg/.jpeg/.png files under its class folders")
    return classes, files


@url_output
def convert_image_folder(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    size: tuple[int, int] | None = None,
    workers: int = 4,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
    keep_encoded: bool = False,
    num_proc: int = 1,
    shard: tuple[int, int] | None = None,
    storage_options: dict[str, Any] | None = None,
    staging_dir: PathLike | None = None,
) -> dict[str, int]:
    """An image folder ``root/<class>/*.jpg|png`` as ``output/label``
    (``Dense`` int64, classes numbered in sorted name order, listed in
    ``output/classes.txt``) and ``output/image``: the encoded file bytes
    (``Ragged`` uint8, one axis), or with ``size=(height, width)`` the
    images decoded to RGB and resized to that shape (``Dense`` uint8
    ``(height, width, 3)``), decoded on `workers` threads (Pillow).

    With ``keep_encoded=True`` ``output/image`` is an image store instead
    (``Ragged`` uint8 ``(h, w, 3)``, codec ``jpeg``): every file kept as
    the JPEG/PNG bytes it is, its header read for its shape, and decoded
    on gather by ``Ragged.open(path)`` (each image at its own size) or
    ``Ragged.open(path, resize=(H, W))`` (stacked, resized and
    centre-cropped). `codec` then applies to the labels only.

    With ``num_proc > 1``, `output` is a collection written by that many
    processes, one part per slice of the files in class, then name order
    (``loaderx.collection``; see ``convert(..., num_proc=)``), each part
    holding ``label``, ``image`` and ``classes.txt``; labels number every
    class of `src`; progress is reported as each part ends. ``shard=(i, n)``
    converts the ``i``-th of `n` contiguous, near-equal slices of the
    files only (what each of those processes runs)."""
    if keep_encoded and size is not None:
        raise ValueError(
            "keep_encoded stores the files as they are; choose the size when reading "
            "(Ragged.open(path, resize=(height, width))), not with size="
        )
    root = Path(os.fspath(src))
    classes, files = _image_files(root)
    if check_num_proc(num_proc) > 1:
        if shard is not None:
            raise ValueError("num_proc > 1 converts every slice: pass it or shard=, not both")
        return convert_file_parallel(
            "images", src, output, len(files), num_proc, progress, codec=codec, size=size,
            workers=workers, batch_bytes=batch_bytes, keep_encoded=keep_encoded,
        )
    if shard is not None:
        lo, hi = shard_range(len(files), shard)
        files = files[lo:hi]
    total = len(files)
    labels = np.array([label for _, label in files], dtype=np.int64)

    def decode(path: Path) -> np.ndarray:
        from PIL import Image

        assert size is not None
        try:
            with Image.open(path) as img:
                rgb = img.convert("RGB")
                if rgb.size != (size[1], size[0]):
                    rgb = rgb.resize((size[1], size[0]), Image.Resampling.BILINEAR)
                return np.asarray(rgb, dtype=np.uint8)
        except Exception as exc:  # noqa: BLE001 - re-raised naming the file
            raise ConversionError(f"{path}: cannot decode the image: {exc}") from exc

    def body(out: _Output) -> None:
        (out.tmp / "classes.txt").write_text("".join(f"{c}\n" for c in classes))
        label_writer = out.dense("label", np.dtype(np.int64), ())
        done = 0
        if keep_encoded:
            images = out.ragged("image", np.dtype(np.uint8), 3, codec="jpeg")
            pending: list[tuple[Path, bytes]] = []
            pending_bytes = 0
            for i, (path, _) in enumerate(files):
                content = path.read_bytes()
                pending.append((path, content))
                pending_bytes += len(content)
                if pending_bytes >= batch_bytes or i == total - 1:
                    try:
                        images.append_encoded([d for _, d in pending])
                    except ZrecordError as exc:
                        bad = re.search(r"record (\d+) \(of this append\)", str(exc))
                        where = pending[int(bad.group(1))][0] if bad else root
                        raise ConversionError(f"{where}: {exc}") from exc
                    label_writer.append(labels[done : done + len(pending)])
                    done += len(pending)
                    pending, pending_bytes = [], 0
                    if progress is not None:
                        progress(done, total)
        elif size is None:
            writer = out.ragged("image", np.dtype(np.uint8), 1)
            block: list[np.ndarray] = []
            block_bytes = 0
            for i, (path, _) in enumerate(files):
                data = np.fromfile(path, dtype=np.uint8)
                if data.size == 0:
                    raise ConversionError(f"{path} is empty")
                block.append(data)
                block_bytes += data.size
                if block_bytes >= batch_bytes or i == total - 1:
                    writer.append(block)
                    label_writer.append(labels[done : done + len(block)])
                    done += len(block)
                    block, block_bytes = [], 0
                    if progress is not None:
                        progress(done, total)
        else:
            height, width = size
            dense = out.dense("image", np.dtype(np.uint8), (height, width, 3))
            step = _rows_per_batch(height * width * 3, batch_bytes)
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                for start in range(0, total, step):
                    chunk = [p for p, _ in files[start : start + step]]
                    arrays = list(pool.map(decode, chunk))
                    dense.append(np.stack(arrays))
                    label_writer.append(labels[start : start + len(chunk)])
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)

    return _run(output, codec, body)


# --- WebDataset tar shards -----------------------------------------------------------------


def _shards(src: Path) -> list[Path]:
    if src.is_dir():
        shards = sorted(p for p in src.iterdir() if p.name.endswith(".tar"))
    else:
        shards = [src]
    if not shards:
        raise ConversionError(f"{src} holds no .tar shards")
    return shards


def _split_name(name: str) -> tuple[str, str]:
    """WebDataset's key/extension split: the key is everything up to the
    first dot of the base name."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot or not stem:
        raise ConversionError(f"tar member {name!r} has no extension (expected <key>.<ext>)")
    return (f"{folder}/{stem}" if folder else stem), ext


@url_output
def convert_webdataset(
    src: PathLike,
    output: PathLike,
    *,
    codec: str,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
    storage_options: dict[str, Any] | None = None,
    staging_dir: PathLike | None = None,
) -> dict[str, int]:
    """WebDataset tar shards (one ``.tar`` or a directory of them, in name
    order) as one ``Ragged`` uint8 store per extension (``output/<ext>``,
    the members' bytes as they are). Every sample must have the same set of
    extensions; its key order is kept."""
    shards = _shards(Path(os.fspath(src)))

    def body(out: _Output) -> None:
        exts: list[str] | None = None
        pending: dict[str, list[np.ndarray]] = {}
        pending_bytes = 0
        done = 0

        def flush() -> None:
            nonlocal pending, pending_bytes
            for ext, records in pending.items():
                if records:
                    out.ragged(ext, np.dtype(np.uint8), 1).append(records)
            pending = {ext: [] for ext in pending}
            pending_bytes = 0

        def finish(key: str | None, sample: dict[str, bytes], where: str) -> None:
            nonlocal exts, pending_bytes, done
            if key is None:
                return
            found = sorted(sample)
            if exts is None:
                exts = found
                pending.update({ext: [] for ext in exts})
                for ext in exts:
                    out.ragged(ext, np.dtype(np.uint8), 1)
            elif found != exts:
                raise ConversionError(
                    f"{where}: sample {key!r} has extensions {found}, the first sample {exts}"
                )
            for ext, data in sample.items():
                if not data:
                    raise ConversionError(f"{where}: {key}.{ext} is empty")
                pending[ext].append(np.frombuffer(data, dtype=np.uint8))
                pending_bytes += len(data)
            done += 1
            if pending_bytes >= batch_bytes:
                flush()
                if progress is not None:
                    progress(done, None)

        for shard in shards:
            key: str | None = None
            sample: dict[str, bytes] = {}
            with tarfile.open(shard, "r|*") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    k, ext = _split_name(member.name)
                    if k != key:
                        finish(key, sample, str(shard))
                        key, sample = k, {}
                    if ext in sample:
                        raise ConversionError(f"{shard}: {member.name} appears twice")
                    fh = tar.extractfile(member)
                    assert fh is not None
                    sample[ext] = fh.read()
            finish(key, sample, str(shard))
        flush()
        if progress is not None:
            progress(done, done)
        if exts is None:
            raise ConversionError(f"{src} holds no samples")

    return _run(output, codec, body)
