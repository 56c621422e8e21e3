"""Typed containers beyond the 2.x API: ragged streams in the flat form,
``(flat, offsets, shapes)``, through the DataLoader (``Ragged.flat()``) and
directly; memory-mapped input appended block by block without staying
resident."""

from __future__ import annotations

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.zrecord import Dense, Ragged


def _records(rng: np.random.Generator, n: int, ndim: int) -> list[np.ndarray]:
    shapes = rng.integers(1, 6, (n, ndim))
    return [rng.integers(-99, 99, tuple(s)).astype(np.int32) for s in shapes]


@pytest.mark.parametrize("ndim", [1, 3])
def test_the_loader_hands_out_flat_ragged_batches(tmp_path, ndim):
    rng = np.random.default_rng(ndim)
    records = _records(rng, 50, ndim)
    with Ragged.create(tmp_path / "r", np.int32, ndim, codec="zstd") as w:
        w.append(records)
    with Dense.create(tmp_path / "l", np.int64, (), codec="raw") as w:
        w.append(np.arange(50, dtype=np.int64))
    rg, labels = Ragged.open(tmp_path / "r"), Dense.open(tmp_path / "l")
    loader = DataLoader(
        {"tokens": rg.flat(), "label": labels}, batch_size=8, mode=0, transform_workers=2
    )
    try:
        for _ in range(7):
            batch = next(loader)
            flat, offsets, shapes = batch["tokens"]
            assert flat.dtype == np.int32 and offsets.dtype == np.int64
            assert shapes.shape == (8, ndim) and offsets.shape == (9,)
            want = rg.gather_flat(batch["label"])
            for got, expected in zip((flat, offsets, shapes), want):
                assert np.array_equal(got, expected)
            for k, label in enumerate(batch["label"]):
                rec = flat[offsets[k] : offsets[k + 1]].reshape(shapes[k])
                assert np.array_equal(rec, records[label])
    finally:
        loader.close()
        rg.close()
        labels.close()


def test_flat_needs_a_reader(tmp_path):
    with Ragged.create(tmp_path / "r", np.int32, 1, codec="raw") as w:
        w.append([np.arange(3, dtype=np.int32)])
        with pytest.raises(ValueError):
            w.flat()


@pytest.mark.parametrize("mode", ["r", "r+", "c"])
def test_a_memory_mapped_input_is_stored_exactly_and_left_intact(tmp_path, mode, monkeypatch):
    """Dense.append lets go of a memory-mapped input's pages block by block
    (so a large file never becomes resident whole); the data, and a
    copy-on-write map's private changes, must survive that."""
    import loaderx.zrecord as zr

    monkeypatch.setattr(zr, "WRITE_CHUNK_BYTES", 3 * 12288)  # many blocks
    src = np.lib.format.open_memmap(tmp_path / "x.npy", "w+", np.uint8, (40, 3, 64, 64))
    src[:] = (np.arange(src.size, dtype=np.uint32) % 251).reshape(src.shape)
    src.flush()
    del src
    x = np.load(tmp_path / "x.npy", mmap_mode=mode)
    if mode == "c":
        x[7] = 9  # a private change, in memory only
    expected = np.array(x)
    with Dense.create(tmp_path / "d", np.uint8, (3, 64, 64), codec="raw") as w:
        w.append(x)
    assert np.array_equal(x, expected)
    with Dense.open(tmp_path / "d") as d:
        assert np.array_equal(d[:], expected)


@pytest.mark.parametrize("codec", ["raw", "flate", "zstd", "lz4", "zstd_dict"])
def test_named_typed_streams_equal_direct_gathers_for_every_codec(tmp_path, codec):
    """Every stream of every batch is what a direct gather of the batch's
    indices returns: a dense image stream, a one-axis and a three-axis
    ragged stream, and labels."""
    from loaderx.utils import train_dict

    rng = np.random.default_rng(5)
    n = 96
    images = (rng.integers(0, 4, (n, 3, 8, 8)) * 60).astype(np.uint8)
    seqs = [rng.integers(0, 50, 1 + i % 23).astype(np.int32) for i in range(n)]
    boxes = _records(rng, n, 3)
    extra = {}
    if codec == "zstd_dict":
        extra = {"dict_bytes": train_dict(seqs + [b.astype(np.int32) for b in boxes])}
    with Dense.create(tmp_path / "img", np.uint8, (3, 8, 8), codec=codec, **extra) as w:
        w.append(images)
    with Ragged.create(tmp_path / "seq", np.int32, 1, codec=codec, **extra) as w:
        w.append(seqs)
    with Ragged.create(tmp_path / "box", np.int32, 3, codec=codec, **extra) as w:
        w.append(boxes)
    with Dense.create(tmp_path / "lab", np.int64, (), codec="raw") as w:
        w.append(np.arange(n, dtype=np.int64))
    streams = {
        name: cls.open(tmp_path / name)
        for name, cls in [("img", Dense), ("seq", Ragged), ("box", Ragged), ("lab", Dense)]
    }
    try:
        with DataLoader(streams, batch_size=12, mode=2, seed=4, transform_workers=2) as loader:
            for _ in range(10):
                batch = next(loader)
                idx = batch["lab"]
                assert np.array_equal(batch["img"], streams["img"][idx])
                for name in ("seq", "box"):
                    direct = streams[name][idx]
                    assert len(batch[name]) == len(direct) == 12
                    for got, want in zip(batch[name], direct):
                        assert got.shape == want.shape and np.array_equal(got, want)
    finally:
        for s in streams.values():
            s.close()
