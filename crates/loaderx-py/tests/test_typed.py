"""Typed containers (``loaderx.zrecord.Dense``/``Ragged``) and
``loaderx.utils.train_dict``: the loaderx 2.x API over format v2 stores."""

from __future__ import annotations

import io
import os
import pickle
import threading
import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx
from conftest import assert_same_image, image, needs_proc
from loaderx import Zrecord, zrecord
from loaderx.utils import train_dict
from loaderx.zrecord import Dense, Ragged, ZrecordError

ALL_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]

CODECS = ["raw", "flate", "zstd", "lz4", "zstd_dict"]


def values(rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Random values of `dtype` that use its whole range (and both parts of
    a complex number)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(dt)
    real = rng.standard_normal(shape) * 1000
    imag = rng.standard_normal(shape) * 1000
    return (real + 1j * imag).astype(dt)


def compressible(n: int, shape: tuple[int, ...], dtype: Any = np.int32) -> np.ndarray:
    """Record i repeats a short pattern shifted by i: compressible, and
    each record names itself."""
    size = int(np.prod(shape, dtype=np.int64))
    base = (np.arange(size) // 8 % 13)[None, :] + np.arange(n)[:, None]
    return base.reshape((n, *shape)).astype(dtype)


def dictionary(shape: tuple[int, ...] = (64,)) -> bytes:
    return train_dict(compressible(400, shape), 1024)


def codec_args(codec: str, shape: tuple[int, ...] = (64,)) -> dict[str, Any]:
    if codec == "zstd_dict":
        return {"codec": codec, "dict_bytes": dictionary(shape)}
    return {"codec": codec}


def write_dense(path: Path, data: np.ndarray, codec: str = "zstd", **kw: Any) -> None:
    with Dense.create(path, data.dtype, data.shape[1:], codec=codec, **kw) as w:
        w.append(data)


def ragged_records(
    rng: np.random.Generator, n: int, ndim: int, dtype: Any = np.float32
) -> list[np.ndarray]:
    """`n` records of rank `ndim`; every axis varies from record to record."""
    out = []
    for _ in range(n):
        shape = tuple(int(d) for d in rng.integers(1, 6, size=ndim))
        out.append(values(rng, dtype, shape))
    return out


def write_ragged(path: Path, records: list[np.ndarray], codec: str = "zstd", **kw: Any) -> None:
    with Ragged.create(path, records[0].dtype, records[0].ndim, codec=codec, **kw) as w:
        w.append(records)


def assert_same_records(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"record {i}: shape {g.shape} != {e.shape}"
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e, err_msg=f"record {i}")


# --- the 2.x API as its documentation writes it --------------------------------------


def test_documented_usage_runs_as_written(tmp_path: Path) -> None:
    from loaderx.dataloader import DataLoader
    from loaderx.utils import train_dict
    from loaderx.zrecord import Dense, Ragged, ZrecordError
    from loaderx.zsampler import Sampler

    images = compressible(256, (3, 8, 8), np.uint8)
    labels = np.arange(256, dtype=np.int64)
    tokens = [np.arange(1 + i % 17, dtype=np.int32) * (i + 1) for i in range(256)]

    with Dense.create(tmp_path / "images", np.uint8, (3, 8, 8), codec="zstd") as w:
        w.append(images[:100])
        w.append(images[100:])
        assert len(w) == 256
    with Dense.create(tmp_path / "labels", np.int64, (), codec="raw", data_shards=2) as w:
        w.append(labels)
    d = train_dict(tokens)
    with Ragged.create(tmp_path / "tokens", np.int32, 1, codec="zstd_dict", dict_bytes=d) as w:
        w.append(tokens)

    ds = Dense.open(tmp_path / "images")
    assert len(ds) == 256 and ds.dtype == np.uint8 and ds.item_shape == (3, 8, 8)
    np.testing.assert_array_equal(ds[5], images[5])
    np.testing.assert_array_equal(ds[1, 4, 9], images[[1, 4, 9]])
    np.testing.assert_array_equal(ds[[0, 2]], images[[0, 2]])
    np.testing.assert_array_equal(ds[np.array([7, 3])], images[[7, 3]])
    np.testing.assert_array_equal(ds[10:20:3], images[10:20:3])
    mask = labels % 5 == 0
    np.testing.assert_array_equal(ds[mask], images[mask])

    rg = Ragged.open(tmp_path / "tokens")
    assert rg.dtype == np.int32 and rg.ndim == 1
    batch = rg[[3, 20]]
    assert isinstance(batch, list)
    assert_same_records(batch, [tokens[3], tokens[20]])

    lab = Dense.open(tmp_path / "labels")
    assert (ds.data_shards, lab.data_shards, rg.data_shards) == (4, 2, 4)
    streams = {"image": ds, "label": lab, "tokens": rg}
    with DataLoader(streams, transform_workers=2, batch_size=32, seed=7) as loader:
        for _ in range(3):
            b = next(loader)
            assert b["image"].shape == (32, 3, 8, 8)
            assert isinstance(b["tokens"], list) and len(b["tokens"]) == 32
            for img, label, tok in zip(b["image"], b["label"], b["tokens"]):
                np.testing.assert_array_equal(img, images[label])
                np.testing.assert_array_equal(tok, tokens[label])

    with Sampler(256, 32, Sampler.Mode.CYCLIC, seed=1) as sampler:
        assert next(sampler).dtype == np.uint64

    with pytest.raises(ZrecordError) as err:
        ds[256]
    assert err.value.code == -3
    for c in (ds, rg, lab):
        c.close()


def test_module_names() -> None:
    assert loaderx.Dense is Dense and loaderx.Ragged is Ragged
    assert zrecord.ZrecordError is loaderx.ZrecordError
    native = {np.dtype(t) for t in ALL_DTYPES}
    swapped = {d.newbyteorder(">") for d in native if d.itemsize > 1}
    assert set(zrecord.DTYPES) == {d.str for d in native | swapped}
    assert set(CODECS) <= set(zrecord.CODECS)
    assert zrecord.MAX_NDIM == 16 and zrecord.MAX_SHARDS == 16


# --- round trips ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda t: np.dtype(t).name)
def test_dense_round_trips_every_dtype(
    tmp_path: Path, rng: np.random.Generator, dtype: Any
) -> None:
    data = values(rng, dtype, (40, 3, 5))
    write_dense(tmp_path / "d", data)
    with Dense.open(tmp_path / "d") as ds:
        assert ds.dtype == np.dtype(dtype) and ds.item_shape == (3, 5) and len(ds) == 40
        got = ds[:]
        assert got.dtype == np.dtype(dtype) and got.shape == data.shape
        np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda t: np.dtype(t).name)
def test_ragged_round_trips_every_dtype(
    tmp_path: Path, rng: np.random.Generator, dtype: Any
) -> None:
    records = ragged_records(rng, 30, 2, dtype)
    write_ragged(tmp_path / "r", records)
    with Ragged.open(tmp_path / "r") as rg:
        assert rg.dtype == np.dtype(dtype) and rg.ndim == 2 and len(rg) == 30
        assert_same_records(rg[:], records)


@pytest.mark.parametrize("dtype", [np.float64, np.bool_, np.complex128, np.int8])
def test_scalar_records(tmp_path: Path, rng: np.random.Generator, dtype: Any) -> None:
    data = values(rng, dtype, (50,))
    with Dense.create(tmp_path / "s", dtype, (), codec="flate") as w:
        w.append(data)
    with Dense.open(tmp_path / "s") as ds:
        assert ds.item_shape == ()
        np.testing.assert_array_equal(ds[:], data)
        assert ds[3] == data[3] and ds[-1] == data[-1]
        assert ds[[1, 2]].shape == (2,)


def test_ragged_every_axis_varies(tmp_path: Path, rng: np.random.Generator) -> None:
    records = ragged_records(rng, 60, 3, np.int16)
    shapes = np.array([r.shape for r in records])
    assert all(len(set(shapes[:, axis])) > 1 for axis in range(3))
    write_ragged(tmp_path / "r", records, codec="lz4")
    with Ragged.open(tmp_path / "r") as rg:
        assert_same_records(rg[:], records)
        np.testing.assert_array_equal(rg.shapes(np.arange(60)), shapes)
        for i in (0, 17, 59):
            np.testing.assert_array_equal(rg[i], records[i])


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec(tmp_path: Path, rng: np.random.Generator, codec: str) -> None:
    data = compressible(300, (64,))
    write_dense(tmp_path / "d", data, **codec_args(codec))
    records = [compressible(1, (1 + i % 9, 64))[0] for i in range(100)]
    write_ragged(tmp_path / "r", records, **codec_args(codec))
    with Dense.open(tmp_path / "d") as ds, Ragged.open(tmp_path / "r") as rg:
        assert ds.codec == codec and rg.codec == codec
        np.testing.assert_array_equal(ds[:], data)
        assert_same_records(rg[:], records)
        ds.verify()
        assert rg.damaged() == []
        if codec != "raw":
            assert ds.stats()["live_bytes"] < data.nbytes


def test_zstd_dict_compresses_small_records_better_than_zstd(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    # Records of 128 bytes drawn from a shared vocabulary of 16-byte words:
    # each is too short for zstd alone to find repeats, the dictionary has them.
    vocab = rng.integers(0, 256, size=(40, 16), dtype=np.uint8)
    data = vocab[rng.integers(0, 40, size=(3000, 8))].reshape(3000, 128)
    d = train_dict(data, 4096)
    write_dense(tmp_path / "plain", data, codec="zstd")
    write_dense(tmp_path / "dict", data, codec="zstd_dict", dict_bytes=d)
    with Dense.open(tmp_path / "plain") as plain, Dense.open(tmp_path / "dict") as with_dict:
        np.testing.assert_array_equal(with_dict[:], data)
        assert with_dict.stats()["live_bytes"] < plain.stats()["live_bytes"] // 2


def test_zstd_dict_takes_raw_content_as_a_dictionary(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    # Bytes that are not a trained dictionary are raw content (as zstd and
    # loaderx 2.x take them): the vocabulary itself serves as one.
    vocab = rng.integers(0, 256, size=(40, 16), dtype=np.uint8)
    data = vocab[rng.integers(0, 40, size=(3000, 8))].reshape(3000, 128)
    write_dense(tmp_path / "plain", data, codec="zstd")
    write_dense(tmp_path / "raw", data, codec="zstd_dict", dict_bytes=vocab.tobytes())
    with Dense.open(tmp_path / "plain") as plain, Dense.open(tmp_path / "raw") as with_dict:
        assert with_dict.has_dict()
        np.testing.assert_array_equal(with_dict[:], data)
        np.testing.assert_array_equal(with_dict[[5, 2999, 0]], data[[5, 2999, 0]])
        with_dict.verify()
        assert with_dict.stats()["live_bytes"] < plain.stats()["live_bytes"] // 2


# --- indexing ------------------------------------------------------------------------


@pytest.fixture
def dense(tmp_path: Path) -> Any:
    data = compressible(20, (2, 3))
    write_dense(tmp_path / "d", data)
    with Dense.open(tmp_path / "d") as ds:
        yield ds, data


@pytest.fixture
def ragged(tmp_path: Path, rng: np.random.Generator) -> Any:
    records = ragged_records(rng, 20, 2)
    write_ragged(tmp_path / "r", records)
    with Ragged.open(tmp_path / "r") as rg:
        yield rg, records


SELECTIONS: list[Any] = [
    [3, 0, 19],
    [-1, -20, 5],
    [],
    np.array([4, 4, 2], dtype=np.int32),
    np.array([1, 18], dtype=np.uint64),
    np.array([-2, 7], dtype=np.int64),
    # 64-bit index arrays go to the store as they are (negatives wrapped only
    # when it refuses them): long ones, strided ones, mixed signs.
    np.array([19, -1, 0, -20, 7, 7, 3, 12, -5, 1], dtype=np.int64),
    np.arange(20, dtype=np.int64)[::-3],
    np.arange(20, dtype=np.uint64)[2:14],
    slice(None),
    slice(2, 15, 4),
    slice(None, None, -3),
    slice(-5, None),
    slice(30, 40),
    np.arange(20) % 3 == 0,
]


def positions(sel: Any, n: int = 20) -> list[int]:
    return np.arange(n)[sel].tolist()


@pytest.mark.parametrize("sel", SELECTIONS, ids=repr)
def test_dense_selections_stack_like_numpy(dense: Any, sel: Any) -> None:
    ds, data = dense
    got = ds[sel]
    assert got.shape == (len(positions(sel)), 2, 3)
    np.testing.assert_array_equal(got, data[positions(sel)])
    np.testing.assert_array_equal(ds.__getitems__(sel), data[positions(sel)])


@pytest.mark.parametrize("sel", SELECTIONS, ids=repr)
def test_ragged_selections_give_lists(ragged: Any, sel: Any) -> None:
    rg, records = ragged
    got = rg[sel]
    assert isinstance(got, list)
    assert_same_records(got, [records[i] for i in positions(sel)])


def test_single_record_forms(dense: Any, ragged: Any) -> None:
    ds, data = dense
    rg, records = ragged
    for i in (0, 7, -1, -20, np.int64(3), np.uint8(4), np.array(5)):
        np.testing.assert_array_equal(ds[i], data[int(i)])
        got = rg[i]
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, records[int(i)])


def test_tuple_selects_records_not_axes(dense: Any, ragged: Any) -> None:
    ds, data = dense
    rg, records = ragged
    np.testing.assert_array_equal(ds[1, 2], data[[1, 2]])
    np.testing.assert_array_equal(ds[4, -1, 0], data[[4, 19, 0]])
    assert ds[()].shape == (0, 2, 3)
    assert_same_records(rg[2, 9, 9], [records[2], records[9], records[9]])
    with pytest.raises(TypeError, match="position 1"):
        ds[1, slice(None)]


def test_out_of_range_and_bad_indices(dense: Any, ragged: Any) -> None:
    ds, _ = dense
    rg, _ = ragged
    for c in (ds, rg):
        for bad in (
            20,
            -21,
            [0, 20],
            [5, -21],
            (1, 99),
            np.array([0, 20]),
            np.array([5, -21, 1, 2, 3, 4, 5, 6, 7]),
            np.array([2**63, 1], dtype=np.uint64),
        ):
            with pytest.raises(ZrecordError) as err:
                c[bad]
            assert err.value.code == -3, bad
            # ...and an IndexError, as loaderx 2.x and Python sequences raise.
            assert isinstance(err.value, IndexError) and isinstance(err.value, RuntimeError)
            with pytest.raises(IndexError):
                c.__getitems__(bad if not isinstance(bad, int) else [bad])
        with pytest.raises(IndexError, match="mask"):
            c[np.ones(19, dtype=bool)]
        with pytest.raises(TypeError):
            c[1.5]
        with pytest.raises(TypeError):
            c[[1.0, 2.0]]
        with pytest.raises(TypeError):
            c["a"]


def test_iteration(dense: Any, ragged: Any) -> None:
    ds, data = dense
    rg, records = ragged
    np.testing.assert_array_equal(np.stack(list(ds)), data)
    assert_same_records(list(rg), records)


# --- memory --------------------------------------------------------------------------


def test_ragged_batch_is_views_into_one_allocation(ragged: Any) -> None:
    rg, records = ragged
    batch = rg[[5, 1, 12, 3]]
    owner = batch[0].base
    assert isinstance(owner, np.ndarray)
    for arr in batch:
        assert arr.base is owner
        assert np.shares_memory(arr, owner)
    start = owner.__array_interface__["data"][0]
    ends = [a.__array_interface__["data"][0] - start for a in batch]
    assert ends == sorted(ends) and ends[0] == 0
    assert owner.nbytes == sum(a.nbytes for a in batch)


def test_gather_flat(ragged: Any) -> None:
    rg, records = ragged
    flat, offsets, shapes = rg.gather_flat([4, 0, 4])
    assert flat.dtype == rg.dtype and flat.ndim == 1
    assert offsets.dtype == np.int64 and offsets.shape == (4,)
    assert shapes.dtype == np.int64 and shapes.shape == (3, 2)
    for k, i in enumerate([4, 0, 4]):
        np.testing.assert_array_equal(
            flat[offsets[k] : offsets[k + 1]].reshape(shapes[k]), records[i]
        )
    assert offsets[-1] == flat.size
    empty = rg.gather_flat([])
    assert empty[0].size == 0 and empty[1].tolist() == [0] and empty[2].shape == (0, 2)


def test_dense_batch_owns_one_buffer(dense: Any) -> None:
    ds, _ = dense
    batch = ds[[1, 2, 3]]
    owner = batch.base if batch.base is not None else batch
    assert owner.nbytes == batch.nbytes
    assert batch.flags.c_contiguous


def test_dense_append_does_not_copy_a_contiguous_array(tmp_path: Path) -> None:
    data = np.arange(8 << 20, dtype=np.float32).reshape(-1, 256)  # 32 MiB
    w = Dense.create(tmp_path / "big", np.float32, (256,), codec="raw")
    tracemalloc.start()
    try:
        w.append(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    w.close()
    assert peak < data.nbytes // 4, f"append allocated {peak} bytes for a {data.nbytes}-byte array"
    with Dense.open(tmp_path / "big") as ds:
        np.testing.assert_array_equal(ds[[0, 1000, -1]], data[[0, 1000, -1]])


def test_dense_append_takes_a_read_only_memory_map(tmp_path: Path) -> None:
    data = compressible(300, (5, 7), np.int16)
    np.save(tmp_path / "a.npy", data)
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert not mapped.flags.writeable
    with Dense.create(tmp_path / "d", np.int16, (5, 7), codec="lz4") as w:
        w.append(mapped)
    with Dense.open(tmp_path / "d") as ds:
        np.testing.assert_array_equal(ds[:], data)


def test_dense_append_takes_non_contiguous_arrays(tmp_path: Path) -> None:
    base = compressible(40, (6, 4))
    strided = base[::2, :, ::2]
    fortran = np.asfortranarray(base[:, :, :2])
    with Dense.create(tmp_path / "d", base.dtype, (6, 2), codec="flate") as w:
        w.append(strided)
        w.append(fortran)
    with Dense.open(tmp_path / "d") as ds:
        np.testing.assert_array_equal(ds[:], np.concatenate([strided, fortran]))


# --- writers and readers -------------------------------------------------------------


def test_writer_does_not_read_and_reader_does_not_append(tmp_path: Path) -> None:
    data = compressible(5, (4,))
    w = Dense.create(tmp_path / "d", data.dtype, (4,), codec="raw")
    w.append(data)
    assert len(w) == 5 and w.writer
    for read in (lambda: w[0], lambda: w[[0, 1]], lambda: w.__getitems__([0])):
        with pytest.raises(io.UnsupportedOperation, match="writer"):
            read()
        with pytest.raises(RuntimeError, match="writer"):  # what loaderx 2.x raises
            read()
    w.close()
    r = Dense.open(tmp_path / "d")
    assert not r.writer
    with pytest.raises(io.UnsupportedOperation, match="reader"):
        r.append(data)
    with pytest.raises(RuntimeError, match="reader"):
        r.append(data)
    for op in (lambda: r.delete([0]), r.compact):
        with pytest.raises(io.UnsupportedOperation, match="writable=True"):
            op()
    assert len(r) == 5
    r.close()

    rw = Ragged.create(tmp_path / "r", np.int32, 1, codec="raw")
    with pytest.raises(io.UnsupportedOperation):
        rw[0]
    rw.close()
    with Ragged.open(tmp_path / "r") as rr, pytest.raises(io.UnsupportedOperation):
        rr.append([np.ones(3, np.int32)])


def test_the_2x_attributes(tmp_path: Path) -> None:
    data = compressible(8, (2, 4))
    with Dense.create(tmp_path / "d", data.dtype, (2, 4), codec="zstd") as w:
        assert (w.ndim, w.item_shape, w.has_dict()) == (2, (2, 4), False)
        w.append(data)
    with Dense.open(tmp_path / "d") as ds:
        assert (ds.ndim, ds.item_shape, ds.has_dict()) == (2, (2, 4), False)
    with Ragged.create(
        tmp_path / "r", np.int32, 3, codec="zstd_dict", dict_bytes=dictionary()
    ) as w:
        assert w.ndim == 3 and w.has_dict()


def test_closed_handles_refuse_everything(tmp_path: Path) -> None:
    write_dense(tmp_path / "d", compressible(3, (2,)))
    ds = Dense.open(tmp_path / "d")
    ds.close()
    ds.close()
    assert ds.closed
    for op in (lambda: len(ds), lambda: ds[0], ds.verify, ds.stats):
        with pytest.raises(ValueError, match="closed"):
            op()
        with pytest.raises(RuntimeError, match="closed"):  # what loaderx 2.x raises
            op()
    w = Ragged.create(tmp_path / "r", np.int32, 1, codec="zstd")
    w.close()
    for op in (lambda: len(w), lambda: w.append([np.ones(2, np.int32)])):
        with pytest.raises(RuntimeError, match="closed"):
            op()


def test_reopen_after_close_then_edit(tmp_path: Path, rng: np.random.Generator) -> None:
    path = tmp_path / "r"
    records = ragged_records(rng, 12, 2, np.float64)
    write_ragged(path, records[:8], codec="flate")
    with Ragged.open(path) as rg:
        assert_same_records(rg[:], records[:8])
    with Ragged.open(path, writable=True) as rg:
        rg.append(records[8:])
        assert len(rg) == 12
        rg.delete([0, 11])
        assert len(rg) == 10
        # The last records move into the holes: compare as sets.
        live = sorted((r.shape, r.tobytes()) for r in rg[:])
        assert live == sorted((r.shape, r.tobytes()) for r in records[1:11])
        rg.compact()
        rg.verify()
    with Ragged.open(path) as rg:
        assert len(rg) == 10
        assert rg.stats()["reclaimable"] == 0


def test_readers_pickle_as_their_path(dense: Any) -> None:
    ds, data = dense
    clone = pickle.loads(pickle.dumps(ds))
    try:
        assert isinstance(clone, Dense) and clone.item_shape == ds.item_shape
        assert not clone.writer
        np.testing.assert_array_equal(clone[:], data)
    finally:
        clone.close()


def test_writers_do_not_pickle(tmp_path: Path) -> None:
    with Dense.create(tmp_path / "d", np.int8, (2,), codec="raw") as w:
        with pytest.raises((TypeError, io.UnsupportedOperation)):
            pickle.dumps(w)


def test_concurrent_readers_from_threads(tmp_path: Path, rng: np.random.Generator) -> None:
    data = compressible(500, (32,))
    records = ragged_records(rng, 500, 2, np.int32)
    write_dense(tmp_path / "d", data)
    write_ragged(tmp_path / "r", records)
    errors: list[BaseException] = []
    with Dense.open(tmp_path / "d") as ds, Ragged.open(tmp_path / "r") as rg:

        def work(seed: int) -> None:
            local = np.random.default_rng(seed)
            try:
                for _ in range(40):
                    idx = local.integers(0, 500, size=16)
                    np.testing.assert_array_equal(ds[idx], data[idx])
                    assert_same_records(rg[idx], [records[i] for i in idx])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_several_readers_of_one_store(tmp_path: Path) -> None:
    data = compressible(10, (3,))
    write_dense(tmp_path / "d", data)
    a, b = Dense.open(tmp_path / "d"), Dense.open(tmp_path / "d")
    np.testing.assert_array_equal(a[:], b[:])
    a.close()
    np.testing.assert_array_equal(b[:], data)
    b.close()


@needs_proc
def test_open_read_close_cycles_leak_no_descriptors_or_batches(tmp_path: Path) -> None:
    write_dense(tmp_path / "d", compressible(64, (16,)))
    write_ragged(tmp_path / "r", [np.ones((1 + i % 4, 3), np.float32) for i in range(64)])

    def cycle() -> list[weakref.ref[Any]]:
        with Dense.open(tmp_path / "d") as ds, Ragged.open(tmp_path / "r") as rg:
            dense_batch = ds[np.arange(0, 64, 3)]
            ragged_batch = rg[np.arange(0, 64, 3)]
            return [weakref.ref(dense_batch), weakref.ref(ragged_batch[0].base)]

    for _ in range(5):
        cycle()
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(200):
        owners = cycle()
        assert all(ref() is None for ref in owners), "a batch outlived its last view"
    assert len(os.listdir("/proc/self/fd")) == fds


# --- bad input: a clear error, and nothing changed -----------------------------------


def test_dense_append_wrong_dtype_or_shape(tmp_path: Path) -> None:
    with Dense.create(tmp_path / "d", np.float32, (3, 4), codec="zstd") as w:
        w.append(np.zeros((2, 3, 4), np.float32))
        with pytest.raises(ValueError, match=r"<f4.*float32.*found.*<f8.*float64"):
            w.append(np.zeros((2, 3, 4), np.float64))
        with pytest.raises(ValueError, match=r"\(3, 4\).*\(n, 3, 4\).*found \(2, 4, 3\)"):
            w.append(np.zeros((2, 4, 3), np.float32))
        with pytest.raises(ValueError, match="found \\(3, 4\\)"):
            w.append(np.zeros((3, 4), np.float32))
        with pytest.raises(ValueError, match=">f4"):
            w.append(np.zeros((2, 3, 4), ">f4"))
        with pytest.raises(TypeError, match="NumPy array"):
            w.append([[[0.0] * 4] * 3])  # type: ignore[arg-type]
        assert len(w) == 2
        with pytest.raises(ValueError, match="at least one record"):
            w.append(np.zeros((0, 3, 4), np.float32))
        assert len(w) == 2
    with Dense.create(tmp_path / "s", np.int64, (), codec="raw") as w:
        with pytest.raises(ValueError, match="found \\(2, 1\\)"):
            w.append(np.zeros((2, 1), np.int64))
        assert len(w) == 0
        # A 0-d array on a scalar store is one record (as loaderx 2.x takes it).
        w.append(np.array(3, np.int64))
        assert len(w) == 1
    with Dense.open(tmp_path / "d") as ds:
        assert len(ds) == 2
    with Dense.open(tmp_path / "s") as ds:
        assert ds[:].tolist() == [3]


def test_ragged_bad_records_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "r"
    good = [np.ones((2, 3), np.float32), np.ones((1, 1), np.float32)]
    write_ragged(path, good, codec="flate")
    before = image(path)
    bad_batches: list[tuple[list[Any], type, str]] = [
        (
            good + [np.zeros((0, 3), np.float32), np.zeros((3,), np.float32)],
            ValueError,
            "record 2: empty records are not stored — a record must be non-empty",
        ),
        (good + [np.ones((1, 3), np.float32), np.zeros((3,), np.float32)], ValueError, "record 3"),
        (good + [np.zeros((3,), np.float32)], ValueError, "record 2.*2 dimensions, found 1"),
        (good + [np.zeros((2, 2), np.float64)], ValueError, "record 2.*<f4.*found <f8"),
        (good + [[[1.0]]], TypeError, "record 2 is a list"),
    ]
    with Ragged.open(path, writable=True) as rg:
        for batch, exc, message in bad_batches:
            with pytest.raises(exc, match=message) as err:
                rg.append(batch)
            if exc is ZrecordError:
                assert err.value.code == -4  # type: ignore[attr-defined]
            assert len(rg) == 2
        # An array is the iterable of its rows: here rows of rank 1, refused.
        with pytest.raises(ValueError, match="record 0.*2 dimensions, found 1"):
            rg.append(np.ones((2, 2), np.float32))
        with pytest.raises(TypeError, match="0-d"):
            rg.append(np.ones((), np.float32))
        for nothing in ([], (), iter([])):
            with pytest.raises(ValueError, match="at least one record"):
                rg.append(nothing)
        assert len(rg) == 2
    assert_same_image(before, image(path))
    with Ragged.open(path) as rg:
        assert_same_records(rg[:], good)


def test_ragged_append_of_an_array_appends_its_rows(tmp_path: Path) -> None:
    # As loaderx 2.x: an array is an iterable of arrays, one record per row.
    grid = np.arange(2 * 3 * 4, dtype=np.int16).reshape(2, 3, 4)
    with Ragged.create(tmp_path / "r", np.int16, 2, codec="zstd") as w:
        w.append(grid)
        w.append(grid[:, :2, ::2])
        assert len(w) == 4
    with Ragged.open(tmp_path / "r") as rg:
        assert_same_records(rg[:], [grid[0], grid[1], grid[0, :2, ::2], grid[1, :2, ::2]])


def test_create_refuses_bad_arguments(tmp_path: Path) -> None:
    p = tmp_path / "x"
    cases: list[tuple[Any, type, str]] = [
        (lambda: Dense.create(p, np.float32, (3,), codec="gzip"), ValueError, "gzip"),
        (lambda: Dense.create(p, np.float32, (3,)), TypeError, "codec"),
        (lambda: Dense.create(p, object, (3,), codec="raw"), ValueError, "Python objects"),
        (
            lambda: Dense.create(p, [("a", "<i4"), ("b", "<f4")], (3,), codec="raw"),
            ValueError,
            "structured",
        ),
        (lambda: Dense.create(p, "M8", (3,), codec="raw"), ValueError, "needs a unit"),
        (lambda: Dense.create(p, "V0", (3,), codec="raw"), ValueError, "zero-itemsize"),
        (lambda: Dense.create(p, "nonsense", (3,), codec="raw"), TypeError, "nonsense"),
        (lambda: Dense.create(p, np.float32, (3, 0), codec="raw"), ValueError, "zero-size"),
        (lambda: Dense.create(p, np.float32, (3,), codec="zstd_dict"), ValueError, "dict_bytes"),
        (lambda: Ragged.create(p, np.float32, 2, codec="zstd_dict"), ValueError, "dict_bytes"),
        (
            lambda: Dense.create(p, np.float32, (3,), codec="zstd", dict_bytes=b"x" * 300),
            ValueError,
            "dictionary",
        ),
        (
            lambda: Dense.create(p, np.float32, (3,), codec="raw", data_shards=0),
            ValueError,
            "data_shards",
        ),
        (
            lambda: Dense.create(p, np.float32, (3,), codec="raw", data_shards=17),
            ValueError,
            "data_shards",
        ),
        (lambda: Dense.create(p, np.float32, (1,) * 17, codec="raw"), ValueError, "17"),
        (
            lambda: Dense.create(p, np.float32, (1 << 20, 1 << 10), codec="raw"),
            ValueError,
            "record limit",
        ),
        (lambda: Ragged.create(p, np.float32, 0, codec="raw"), ValueError, "ndim"),
        (lambda: Ragged.create(p, np.float32, 17, codec="raw"), ValueError, "ndim"),
        (lambda: Dense.create(p, np.float32, "3", codec="raw"), TypeError, "item_shape"),
    ]
    for make, exc, message in cases:
        with pytest.raises(exc, match=message):
            make()
        assert not (p / "meta.zr").exists(), f"{message}: a store was created"


def test_create_refuses_a_path_holding_a_store(tmp_path: Path) -> None:
    path = tmp_path / "d"
    data = compressible(4, (3,))
    write_dense(path, data)
    before = image(path)
    for make in (
        lambda: Dense.create(path, np.int32, (3,), codec="zstd"),
        lambda: Dense.create(path, np.float64, (), codec="raw"),
        lambda: Ragged.create(path, np.int32, 1, codec="raw"),
    ):
        with pytest.raises(FileExistsError, match=str(path.name)):
            make()
        with pytest.raises(RuntimeError, match=str(path.name)):  # what loaderx 2.x raises
            make()
    assert_same_image(before, image(path))
    # A directory with other files in it is not taken over either; an empty
    # one is.
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="other files"):
        Dense.create(tmp_path / "busy", np.int32, (3,), codec="raw")
    assert os.listdir(tmp_path / "busy") == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    Dense.create(tmp_path / "empty", np.int32, (3,), codec="raw").close()
    with Zrecord(tmp_path / "v1") as zr:
        zr.append(np.zeros(8, np.uint8), 1, 8)
    with pytest.raises(FileExistsError):
        Dense.create(tmp_path / "v1", np.uint8, (8,), codec="raw")
    with Dense.open(path) as ds:
        np.testing.assert_array_equal(ds[:], data)


def test_open_refuses_the_wrong_store(tmp_path: Path) -> None:
    write_dense(tmp_path / "d", compressible(2, (2,)))
    write_ragged(tmp_path / "r", [np.ones(2, np.int8)])
    with Zrecord(tmp_path / "v1") as zr:
        zr.append(np.zeros(8, np.uint8), 1, 8)
    with pytest.raises(ValueError, match="ragged container.*Ragged.open"):
        Dense.open(tmp_path / "r")
    with pytest.raises(ValueError, match="dense container.*Dense.open"):
        Ragged.open(tmp_path / "d")
    with pytest.raises(ValueError, match="format v1"):
        Dense.open(tmp_path / "v1")
    with pytest.raises(FileNotFoundError):
        Dense.open(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    for cls in (Dense, Ragged):
        with pytest.raises(FileNotFoundError, match="no .* container"):
            cls.open(tmp_path / "empty")
    assert os.listdir(tmp_path / "empty") == []


def test_ragged_append_takes_any_arrays_of_its_dtype_and_rank(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    # Contiguous arrays are written in place; views with strides, arrays
    # of an equivalent dtype object and read-only memory maps all go in
    # too, and come back as they were.
    base = values(rng, np.int32, (40, 30))
    np.save(tmp_path / "m.npy", base)
    mapped = np.load(tmp_path / "m.npy", mmap_mode="r")
    records: list[np.ndarray] = [
        base[:3],
        base[::2, ::3],
        np.asfortranarray(base[:5, :4]),
        base[5:6].astype(np.dtype("=i4")),
        mapped[10:20],
        base.T[:2],
    ]
    for container in (list, tuple):
        path = tmp_path / container.__name__
        with Ragged.create(path, np.int32, 2, codec="zstd") as w:
            w.append(container(records))
            w.append(container(records[::-1]))
            assert len(w) == 2 * len(records)
        with Ragged.open(path) as rg:
            assert_same_records(rg[:], records + records[::-1])
    del mapped
    # A big-endian array is not this store's dtype, whatever its values.
    with Ragged.open(tmp_path / "list", writable=True) as rg:
        with pytest.raises(ValueError, match="record 1.*<i4.*found >i4"):
            rg.append([base[:1], base[:2].astype(">i4")])
        assert len(rg) == 2 * len(records)


def test_generator_appends_block_by_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    monkeypatch.setattr(zrecord, "WRITE_CHUNK_BYTES", 4096)
    records = ragged_records(rng, 400, 2, np.float64)
    with Ragged.create(tmp_path / "gen", np.float64, 2, codec="zstd") as w:
        w.append(r for r in records)
        assert len(w) == 400
    with Ragged.create(tmp_path / "list", np.float64, 2, codec="zstd") as w:
        w.append(records)
    for name in ("gen", "list"):
        with Ragged.open(tmp_path / name) as rg:
            assert_same_records(rg[:], records)

    def with_bad_tail() -> Any:
        yield from records
        yield np.zeros((2, 1), np.float32)

    with Ragged.create(tmp_path / "bad", np.float64, 2, codec="zstd") as w:
        with pytest.raises(ValueError, match="record 400"):
            w.append(with_bad_tail())
        appended = len(w)
        assert appended < 400
    with Ragged.open(tmp_path / "bad") as rg:
        assert_same_records(rg[:], records[:appended])


def test_large_list_is_checked_whole_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zrecord, "WRITE_CHUNK_BYTES", 1024)
    records = [np.full((50,), i, np.int64) for i in range(100)] + [np.zeros((1, 1), np.int64)]
    with Ragged.create(tmp_path / "r", np.int64, 1, codec="raw") as w:
        with pytest.raises(ValueError, match="record 100"):
            w.append(records)
        assert len(w) == 0
        w.append(records[:100])
        assert len(w) == 100


# --- integrity -----------------------------------------------------------------------


def flip_byte(path: Path, needle: bytes | None = None) -> None:
    """Flip one byte of the store's record data: inside `needle` when given,
    else in the middle of the largest chunk file."""
    files = [
        p for p in path.iterdir() if p.is_file() and p.name.endswith(".zr") and p.name != "meta.zr"
    ]
    if needle is not None:
        files = [p for p in files if needle in p.read_bytes()]
        assert len(files) == 1, files
    target = max(files, key=lambda p: p.stat().st_size)
    raw = bytearray(target.read_bytes())
    at = raw.index(needle) + 10 if needle is not None else len(raw) // 2
    raw[at] ^= 0xFF
    target.write_bytes(bytes(raw))


def test_damaged_raw_record_is_named_by_verify(tmp_path: Path) -> None:
    # A dense store keeps raw records of one size as a run, checksummed a
    # block at a time: 64-byte records make blocks of 64 records (4 KiB),
    # so a damaged byte in record 70 damages block 1, records 64 ..= 127.
    path = tmp_path / "d"
    data = np.zeros((200, 64), np.uint8)
    marker = bytes(range(7, 71))
    data[70] = np.frombuffer(marker, np.uint8)
    write_dense(path, data, codec="raw", data_shards=1)
    with Dense.open(path) as ds:
        ds.verify()
        assert ds.damaged() == []
    flip_byte(path, marker)
    with Dense.open(path) as ds:
        damaged = ds.damaged()
        assert [i for i, _ in damaged] == list(range(64, 128))
        assert all("block 1 of its run (records 64 ..= 127)" in why for _, why in damaged)
        with pytest.raises(ZrecordError) as err:
            ds.verify()
        assert err.value.code == -7 and "entry 64" in str(err.value)
        # Raw records are read without a second pass unless asked for.
        np.testing.assert_array_equal(ds[[63, 69, 71, 128]], data[[63, 69, 71, 128]])
        assert ds[70].tobytes() != marker
    with Dense.open(path, check_raw=True) as ds:
        with pytest.raises(ZrecordError) as err:
            ds[[5, 100]]
        assert err.value.code == -7 and "entry 100" in str(err.value)
        # The blocks on either side still read.
        np.testing.assert_array_equal(ds[[5, 63, 128, 199]], data[[5, 63, 128, 199]])
        # A pickled reader keeps checking.
        clone = pickle.loads(pickle.dumps(ds))
        with pytest.raises(ZrecordError):
            clone[64]
        np.testing.assert_array_equal(clone[63], data[63])
        clone.close()


def test_a_million_int64_labels_cost_their_bytes(tmp_path: Path) -> None:
    # New dense stores get a run table: 1,000,000 labels appended at once
    # take little more than their 8,000,000 bytes (not an entry each).
    path = tmp_path / "labels"
    labels = np.arange(1_000_000, dtype=np.int64) * 7 - 3
    with Dense.create(path, np.int64, (), codec="raw") as w:
        w.append(labels)
    on_disk = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    assert on_disk <= 1.05 * labels.nbytes, on_disk
    with Dense.open(path, check_raw=True) as ds:
        assert len(ds) == len(labels)
        np.testing.assert_array_equal(ds[np.arange(len(labels))], labels)
        np.testing.assert_array_equal(ds[[999_999, 0, 4096]], labels[[999_999, 0, 4096]])
        ds.verify()


@pytest.mark.parametrize("codec", ["zstd", "flate"])
def test_damaged_compressed_record_fails_its_read(tmp_path: Path, codec: str) -> None:
    path = tmp_path / "r"
    records = [compressible(1, (3 + i % 5, 40))[0] for i in range(50)]
    write_ragged(path, records, codec=codec, data_shards=1)
    flip_byte(path)
    with Ragged.open(path) as rg:
        damaged = [i for i, _ in rg.damaged()]
        assert len(damaged) == 1
        bad = damaged[0]
        with pytest.raises(ZrecordError) as err:
            rg[[0, bad]]
        assert err.value.code == -7 and str(bad) in str(err.value)
        good = [i for i in range(50) if i != bad]
        assert_same_records(rg[good], [records[i] for i in good])


# --- the DataLoader ------------------------------------------------------------------


def test_dataloader_refuses_a_writer(tmp_path: Path) -> None:
    from loaderx.dataloader import DataLoader

    write_dense(tmp_path / "d", compressible(8, (2,)))
    w = Dense.create(tmp_path / "w", np.int32, (2,), codec="raw")
    w.append(compressible(8, (2,)))
    with Dense.open(tmp_path / "d") as ds:
        with pytest.raises(ValueError, match="writer"):
            DataLoader({"a": ds, "b": w}, batch_size=4)
    w.close()


def test_dataloader_over_multi_axis_ragged(tmp_path: Path, rng: np.random.Generator) -> None:
    from loaderx.dataloader import DataLoader

    records = ragged_records(rng, 64, 2, np.float32)
    write_ragged(tmp_path / "r", records)
    ids = np.arange(64, dtype=np.int64)
    write_dense(tmp_path / "ids", ids, codec="raw")
    with Ragged.open(tmp_path / "r") as rg, Dense.open(tmp_path / "ids") as idx:
        with DataLoader({"x": rg, "id": idx}, batch_size=16, seed=3) as loader:
            for _ in range(5):
                batch = next(loader)
                assert_same_records(batch["x"], [records[i] for i in batch["id"]])
                # Gathered by the native loader (no Python worker threads),
                # into one buffer per batch.
                assert not [t for t in threading.enumerate() if t.name.startswith("loaderx-worker")]
                owner = batch["x"][0].base
                assert all(x.base is owner for x in batch["x"])


@pytest.mark.parametrize("codec", ["raw", "flate", "zstd", "lz4"])
def test_empty_ragged_records_round_trip(tmp_path: Path, codec: str) -> None:
    from loaderx.dataloader import DataLoader

    # append_flat stores empty records (append refuses them, as 2.x does).
    tokens = [np.arange(n, dtype=np.int32) for n in (3, 0, 5, 0, 0, 7, 1, 0)]
    grid = [np.ones((2, 3), np.float32), np.zeros((0, 3), np.float32), np.zeros((4, 0), np.float32)]
    with Ragged.create(tmp_path / "t", np.int32, 1, codec=codec) as w:
        w.append_flat(np.concatenate(tokens[:4]), [0, 3, 3, 8, 8])
        flat = np.concatenate(tokens[4:])
        w.append_flat(flat, [0, 0, 7, 8, 8])
    with Ragged.create(tmp_path / "g", np.float32, 2, codec=codec) as w:
        w.append_flat(np.ones(6, np.float32), [0, 6, 6, 6], [[2, 3], [0, 3], [4, 0]])
    with Ragged.open(tmp_path / "t") as rg, Ragged.open(tmp_path / "g") as g2:
        assert len(rg) == 8
        assert_same_records(rg[:], tokens)
        assert rg[1].shape == (0,) and rg[1].dtype == np.int32
        assert_same_records(g2[:], grid)
        assert [x.shape for x in g2[[2, 1]]] == [(4, 0), (0, 3)]
        values, offsets, shapes = rg.gather_flat([1, 0, 3])
        assert offsets.tolist() == [0, 0, 3, 3] and shapes.tolist() == [[0], [3], [0]]
        assert rg.verify() is None and not rg.damaged()
        ids = np.arange(8, dtype=np.int64)
        write_dense(tmp_path / "ids", ids, codec="raw")
        with Dense.open(tmp_path / "ids") as idx, DataLoader({"t": rg, "id": idx}, batch_size=4, seed=1) as loader:
            for _ in range(4):
                batch = next(loader)
                assert_same_records(batch["t"], [tokens[i] for i in batch["id"]])


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("form", ["list", "tuple", "generator", "large list"])
def test_append_refuses_empty_records_and_writes_nothing(
    tmp_path: Path, codec: str, form: str
) -> None:
    # The 2.x contract: a zero-size record is refused (ValueError), and
    # nothing of the batch is stored. "large list" is big enough to be
    # written behind the call by a compressing writer.
    size = (zrecord.WRITE_BEHIND_AT_LEAST // 4 + 1) if form == "large list" else 5
    good = [np.arange(size, dtype=np.int32), np.arange(3, dtype=np.int32)]
    with Ragged.create(tmp_path / "r", np.int32, 1, codec=codec) as w:
        w.append(good)
        for empty in (np.zeros(0, np.int32), np.zeros((0,), np.int32)[::2]):
            batch = [*good, empty, good[1]]
            records: Any = {
                "list": batch,
                "large list": batch,
                "tuple": tuple(batch),
                "generator": (r for r in batch),
            }[form]
            with pytest.raises(ValueError, match="record 2: empty records are not stored"):
                w.append(records)
            assert len(w) == 2
    with Ragged.create(tmp_path / "g", np.uint8, 3, codec=codec) as w:
        with pytest.raises(ValueError, match=r"record 0: .*found shape \(3, 0, 2\)"):
            w.append([np.zeros((3, 0, 2), np.uint8)])
        assert len(w) == 0
    with Ragged.open(tmp_path / "r") as rg:
        assert_same_records(rg[:], good)


# --- train_dict ----------------------------------------------------------------------


def test_train_dict_from_every_source(tmp_path: Path) -> None:
    data = compressible(500, (32,))
    write_dense(tmp_path / "d", data)
    write_ragged(tmp_path / "r", [row[: 1 + i % 32] for i, row in enumerate(data)])
    with Dense.open(tmp_path / "d") as ds, Ragged.open(tmp_path / "r") as rg:
        sources: list[Any] = [data, list(data), (row.tobytes() for row in data), ds, rg]
        for source in sources:
            d = train_dict(source, 1024)
            assert isinstance(d, bytes) and 0 < len(d) <= 1024
            with Dense.create(
                tmp_path / f"z{len(os.listdir(tmp_path))}",
                np.int32,
                (32,),
                codec="zstd_dict",
                dict_bytes=d,
            ) as w:
                w.append(data)


def test_train_dict_also_writes_to_path(tmp_path: Path) -> None:
    data = compressible(500, (32,))
    trained = train_dict(data, 1024, path=tmp_path / "tokens.dict")
    assert (tmp_path / "tokens.dict").read_bytes() == trained
    assert train_dict(data, 1024, path=str(tmp_path / "again.dict")) == trained


def test_train_dict_bounds_its_sample() -> None:
    consumed = 0

    def endless() -> Any:
        nonlocal consumed
        while True:
            consumed += 1
            yield compressible(1, (64,))[0]

    train_dict(endless(), 1024, sample_bytes=64 * 256)
    assert consumed <= 257


def test_train_dict_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="too few"):
        train_dict([np.ones(10, np.int8)] * 3)
    with pytest.raises(TypeError):
        train_dict(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        train_dict(["text"] * 10)
    with pytest.raises(ValueError, match="dict_size|dictionary size"):
        train_dict(compressible(100, (64,)), 10)
    with pytest.raises(ValueError, match="dict_size"):
        train_dict(compressible(100, (64,)), 2 << 20)
