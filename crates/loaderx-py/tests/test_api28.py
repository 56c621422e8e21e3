"""The loaderx 2.8 API as its README documents it, written from the
documented behaviour (issue 42). The file runs against this package (the
pytest suite) and, unchanged, against loaderx 2.8.19 in its own venv
(``target/compat28-venv``, by ``cargo xtask test``): it imports nothing of
this repository but ``loaderx`` and uses no fixture but pytest's own.

Covered here: dtypes, Dense and Ragged writers/stores/views, DLTensor and
RaggedBatch, the Sampler, the Loader, and the documented errors. Where 2.8
leaves a choice open (the sampler's random stream, the order of batches with
several workers) the tests check the documented properties, not values.
"""

from __future__ import annotations

import numpy as np
import pytest

from loaderx import Allocator, Loader, dtypes
from loaderx.sampler import Sampler
from loaderx.zrecord import (
    DenseStore,
    DenseView,
    DenseWriter,
    DLTensor,
    RaggedBatch,
    RaggedStore,
    RaggedView,
    RaggedWriter,
    train_dict,
)


def _np(t: object) -> np.ndarray:
    return np.from_dlpack(t)


def test_dense_records_and_batches(tmp_path) -> None:
    data = np.arange(64, dtype=dtypes.float32).reshape(8, 2, 4)
    with DenseWriter(tmp_path / "data", data.dtype, data.shape[1:], codec="zstd") as w:
        w.append(data)
    with DenseStore(tmp_path / "data") as store, Allocator("cpu") as allocator:
        assert isinstance(store, DenseStore)
        view = store.bind(allocator)
        assert isinstance(view, DenseView)
        assert len(view) == 8 and view.dtype == dtypes.float32
        assert tuple(view.item_shape) == (2, 4)
        one = view[0]
        assert isinstance(one, DLTensor)
        assert not hasattr(one, "to_numpy") and not hasattr(one, "__array__")
        np.testing.assert_array_equal(_np(one), data[0])
        batch = view[0, 5, 2]
        assert _np(batch).shape == (3, 2, 4)
        np.testing.assert_array_equal(_np(batch), data[[0, 5, 2]])
        np.testing.assert_array_equal(_np(view[np.array([7, 1])]), data[[7, 1]])
        np.testing.assert_array_equal(_np(view[:4]), data[:4])
        np.testing.assert_array_equal(_np(view[:]), data)
        seen = [_np(r) for r in view]
        assert len(seen) == 8
        np.testing.assert_array_equal(np.stack(seen), data)
        assert one.__dlpack_device__()[0] == 1


def test_ragged_records(tmp_path) -> None:
    seqs = [np.arange(n, dtype=dtypes.int32) for n in (3, 1, 4, 1, 5)]
    with RaggedWriter(tmp_path / "tokens", dtypes.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records(seqs))
    with RaggedStore(tmp_path / "tokens") as store, Allocator("cpu") as allocator:
        view = store.bind(allocator)
        assert isinstance(view, RaggedView) and view.ndim == 1 and len(view) == 5
        batch = view[0, 2, 4]
        assert isinstance(batch, RaggedBatch)
        values = _np(batch.values)
        cu = _np(batch.cu_seqlens)
        shapes = _np(batch.shapes)
        assert values.dtype == dtypes.int32 and values.ndim == 1
        assert cu.dtype == np.int32 and cu.tolist() == [0, 3, 7, 12]
        assert shapes.dtype == np.uint32 and shapes.tolist() == [[3], [4], [5]]
        np.testing.assert_array_equal(values, np.concatenate([seqs[0], seqs[2], seqs[4]]))
        tensors = batch.to_tensors()
        assert len(tensors) == 3
        for got, want in zip(tensors, [seqs[0], seqs[2], seqs[4]]):
            np.testing.assert_array_equal(_np(got), want)
        single = view[3]
        assert isinstance(single, RaggedBatch)
        assert _np(single.shapes).shape[0] == 1
        assert _np(single.values).tolist() == [0]


def test_ragged_two_dimensional_packed_append(tmp_path) -> None:
    values = np.array([3, 5, 7, 11, 13, 17, 19], dtype=dtypes.int32)
    cu = np.array([0, 2, 6, 7], dtype=np.int32)
    shapes = np.array([[1, 2], [2, 2], [1, 1]], dtype=np.uint32)
    with RaggedWriter(tmp_path / "r", dtypes.int32, ndim=2, codec="raw") as w:
        w.append(RaggedBatch(values, cu, shapes))
    with RaggedStore(tmp_path / "r") as store, Allocator("cpu") as allocator:
        batch = store.bind(allocator)[:]
        np.testing.assert_array_equal(_np(batch.values), values)
        recs = [_np(t) for t in batch.to_tensors()]
        assert [r.shape for r in recs] == [(1, 2), (2, 2), (1, 1)]


def test_read_is_exact_append_input(tmp_path) -> None:
    data = np.arange(30, dtype=dtypes.int64).reshape(10, 3)
    with DenseWriter(tmp_path / "src", dtypes.int64, (3,), codec="raw") as w:
        w.append(data)
    seqs = [np.full(n, n, dtype=dtypes.float32) for n in (2, 3, 1)]
    with RaggedWriter(tmp_path / "rsrc", dtypes.float32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(seqs))
    with DenseStore(tmp_path / "src") as s, RaggedStore(tmp_path / "rsrc") as rs, \
            Allocator("cpu") as allocator:  # fmt: skip
        source = s.bind(allocator)
        with DenseWriter(tmp_path / "dst", source.dtype, source.item_shape, codec="zstd") as d:
            d.append(source[:])
        rsource = rs.bind(allocator)
        with RaggedWriter(tmp_path / "rdst", rsource.dtype, ndim=1, codec="zstd") as d:
            d.append(rsource[:])
    with DenseStore(tmp_path / "dst") as s, RaggedStore(tmp_path / "rdst") as rs, \
            Allocator("cpu") as allocator:  # fmt: skip
        np.testing.assert_array_equal(_np(s.bind(allocator)[:]), data)
        got = rs.bind(allocator)[:]
        assert _np(got.cu_seqlens).tolist() == [0, 2, 5, 6]


def test_read_only_mmap_append(tmp_path) -> None:
    data = np.arange(24, dtype=dtypes.uint8).reshape(6, 4)
    np.save(tmp_path / "x.npy", data)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    with DenseWriter(tmp_path / "m", dtypes.uint8, (4,), codec="zstd", data_shards=4) as w:
        w.append(mm)
    with DenseStore(tmp_path / "m") as s, Allocator("cpu") as allocator:
        np.testing.assert_array_equal(_np(s.bind(allocator)[:]), data)


def test_dtype_catalog() -> None:
    for name in ("bool", "int8", "uint64", "float16", "float32", "complex128", "bfloat16",
                 "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                 "float8_e8m0fnu"):  # fmt: skip
        dt = getattr(dtypes, name)
        assert isinstance(dt, np.dtype) and dt.name == name
        assert dt in dtypes.supported
    assert dtypes.bfloat16.itemsize == 2 and dtypes.float8_e5m2.itemsize == 1


def test_documented_errors(tmp_path) -> None:
    data = np.arange(12, dtype=dtypes.int32).reshape(3, 4)
    w = DenseWriter(tmp_path / "d", dtypes.int32, (4,), codec="raw")
    with pytest.raises(RuntimeError):
        w[0]  # a writer cannot be read
    with pytest.raises(ValueError):
        w.append(data.astype(np.int64))  # dtype must match exactly
    with pytest.raises(ValueError):
        w.append(data.reshape(4, 3))  # shape must be (n, *item_shape)
    w.append(data)
    w.close()
    with pytest.raises(Exception):
        DenseWriter(tmp_path / "d", dtypes.int32, (4,), codec="raw")  # existing path
    with pytest.raises(ValueError):
        DenseWriter(tmp_path / "e", dtypes.int32, (4,), codec="lzma")
    with pytest.raises(ValueError):
        DenseWriter(tmp_path / "f", dtypes.int32, (4,), codec="zstd_dict")  # no dictionary
    store = DenseStore(tmp_path / "d")
    assert not hasattr(store, "append")  # a read-only store cannot be appended to
    with pytest.raises(RuntimeError):
        store[0]  # unbound
    allocator = Allocator("cpu")
    with pytest.raises(TypeError):
        store.bind(object())
    view = store.bind(allocator)
    with pytest.raises(IndexError):
        view[3]
    with pytest.raises(IndexError):
        view[0, 3]
    with pytest.raises(IndexError):
        view[-1]  # positions are 0..len-1, no counting from the end
    kept = view[1]
    store.close()
    with pytest.raises(RuntimeError):
        view[0]  # a view of a closed store
    # A result read before the close stays valid.
    np.testing.assert_array_equal(_np(kept), data[1])
    allocator.close()
    with DenseStore(tmp_path / "d") as again:
        with pytest.raises(RuntimeError):
            again.bind(allocator)[0]  # a view of a closed allocator
    np.testing.assert_array_equal(_np(kept), data[1])
    with pytest.raises((TypeError, ValueError)):
        RaggedBatch.from_records([np.zeros(2, np.int32), np.zeros((2, 2), np.int32)])


def test_sampler_modes() -> None:
    seq = Sampler(10, 4, Sampler.Mode.SEQUENTIAL)
    assert [seq.next().tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    iid = [b.copy() for b, _ in zip(Sampler(7, 50, Sampler.Mode.IID, seed=3), range(4))]
    again = [b.copy() for b, _ in zip(Sampler(7, 50, Sampler.Mode.IID, seed=3), range(4))]
    assert all(b.dtype == np.uint64 and b.shape == (50,) for b in iid)
    assert all(((b >= 0) & (b < 7)).all() for b in iid)
    np.testing.assert_array_equal(np.stack(iid), np.stack(again))
    assert any(len(set(b.tolist())) < 50 for b in iid)  # with replacement
    for length, batch in ((10, 3), (10, 4), (12, 4), (100, 7)):
        cyc = Sampler(length, batch, Sampler.Mode.CYCLIC, seed=5)
        per_epoch = length // batch
        for _epoch in range(3):
            drawn = np.concatenate([cyc.next().copy() for _ in range(per_epoch)])
            assert drawn.size == per_epoch * batch
            assert len(set(drawn.tolist())) == drawn.size  # no record twice in an epoch
            assert drawn.max() < length
    # A batch size above the length draws one permutation per batch.
    small = Sampler(3, 5, Sampler.Mode.CYCLIC)
    for _ in range(4):
        assert sorted(small.next().tolist()) == [0, 1, 2]
    assert int(Sampler.Mode.SEQUENTIAL) == 0 and int(Sampler.Mode.IID) == 1
    assert int(Sampler.Mode.CYCLIC) == 2


def test_sampler_borrowed_buffer_seek_and_iteration() -> None:
    for mode in (Sampler.Mode.SEQUENTIAL, Sampler.Mode.IID, Sampler.Mode.CYCLIC):
        s = Sampler(1000, 16, mode, seed=11)
        history = [s.next().copy() for _ in range(9)]
        first = s.next()
        second = s.next()
        assert np.shares_memory(first, second)  # borrowed: the next draw overwrites it
        s.seek(4)
        np.testing.assert_array_equal(s.next(), history[4])
        s.seek(0)
        np.testing.assert_array_equal(next(iter(s)), history[0])
        s.seek(8)
        np.testing.assert_array_equal(next(s), history[8])
        s.seek(10**12)  # any step, directly
        far = s.next().copy()
        other = Sampler(1000, 16, mode, seed=11)
        other.seek(10**12)
        np.testing.assert_array_equal(other.next(), far)
    assert not np.array_equal(
        Sampler(1000, 16, Sampler.Mode.IID, seed=1).next(),
        Sampler(1000, 16, Sampler.Mode.IID, seed=2).next(),
    )


def test_sampler_errors() -> None:
    for args in ((0, 1, 0), (1, 0, 0), (1, 1, 3), (1, 1, -1), (1, 1, 0, -1), (2**64, 1, 0)):
        with pytest.raises(ValueError):
            Sampler(*args)
    with pytest.raises(TypeError):
        Sampler(1.5, 1, 0)
    s = Sampler(5, 2, Sampler.Mode.SEQUENTIAL)
    with pytest.raises(ValueError):
        s.seek(-1)
    s.seek(2**64 - 1)
    s.next()
    with pytest.raises(OverflowError):
        s.next()  # the uint64 step space is spent


def _loader_stores(tmp_path):
    images = np.arange(48 * 6, dtype=dtypes.uint8).reshape(48, 2, 3)
    labels = np.arange(48, dtype=dtypes.int64) * 10
    tokens = [np.arange(i % 4 + 1, dtype=dtypes.int32) + i for i in range(48)]
    with DenseWriter(tmp_path / "images", images.dtype, (2, 3), codec="zstd") as w:
        w.append(images)
    with DenseWriter(tmp_path / "labels", labels.dtype, (), codec="raw") as w:
        w.append(labels)
    with RaggedWriter(tmp_path / "tokens", dtypes.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records(tokens))
    stores = [DenseStore(tmp_path / "images"), DenseStore(tmp_path / "labels"),
              RaggedStore(tmp_path / "tokens")]  # fmt: skip
    return images, labels, tokens, stores


def _check_step(step, idxs, images, labels, tokens, parts) -> None:
    assert isinstance(step, list) and len(step) == parts
    size = len(idxs) // parts
    for p, shard in enumerate(step):
        assert set(shard) == {"image", "label", "tokens"}
        want = idxs[p * size:(p + 1) * size]
        np.testing.assert_array_equal(_np(shard["image"]), images[want])
        np.testing.assert_array_equal(_np(shard["label"]), labels[want])
        batch = shard["tokens"]
        assert isinstance(batch, RaggedBatch)
        got = [_np(t) for t in batch.to_tensors()]
        assert len(got) == size
        for g, i in zip(got, want):
            np.testing.assert_array_equal(g, tokens[i])


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_loader_shards_one_global_batch_over_placement_views(tmp_path, workers) -> None:
    images, labels, tokens, stores = _loader_stores(tmp_path)
    allocator = Allocator("cpu")
    parts = 2
    streams = {
        name: [store.bind(allocator) for _ in range(parts)]
        for name, store in zip(("image", "label", "tokens"), stores)
    }
    replay = Sampler(48, 8, Sampler.Mode.CYCLIC, seed=9)
    expected = [replay.next().copy() for _ in range(40)]
    sampler = Sampler(48, 8, Sampler.Mode.CYCLIC, seed=9)
    with Loader(streams, sampler, workers=workers, prefetch=2) as loader:
        assert iter(loader) is loader
        with pytest.raises(TypeError):
            len(loader)
        seen = []
        for _ in range(6):
            step = next(loader)
            # Find which sampled batch this step holds (several workers may
            # hand batches over in completion order).
            first = _np(step[0]["label"]) // 10
            matches = [k for k, idxs in enumerate(expected)
                       if np.array_equal(idxs[:4], first)]  # fmt: skip
            assert matches, "every step is one of the sampler's batches"
            k = matches[0]
            _check_step(step, expected[k].astype(np.int64), images, labels, tokens, parts)
            seen.append(k)
        assert len(set(seen)) == 6
        if workers <= 1:
            assert seen == list(range(6))  # synchronous or one worker: in order
    for store in stores:
        store.close()
    allocator.close()


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_loader_transform_and_errors(tmp_path, workers) -> None:
    images, labels, tokens, stores = _loader_stores(tmp_path)
    allocator = Allocator("cpu")
    views = {"label": [stores[1].bind(allocator)]}

    def total(step):
        return sum(int(_np(shard["label"]).sum()) for shard in step)

    sampler = Sampler(48, 4, Sampler.Mode.SEQUENTIAL)
    with Loader(views, sampler, workers=workers, transform=total) as loader:
        sums = sorted(next(loader) for _ in range(3))
        assert sums == sorted(int(labels[k * 4:(k + 1) * 4].sum()) for k in range(3))

    def fail(step):
        raise ZeroDivisionError("from the transform")

    loader = Loader(views, Sampler(48, 4, Sampler.Mode.SEQUENTIAL), workers=workers,
                    transform=fail)  # fmt: skip
    with pytest.raises(ZeroDivisionError):
        next(loader)
    loader.close()
    loader.close()  # idempotent
    with pytest.raises(StopIteration):
        next(loader)
    for store in stores:
        store.close()


def test_loader_refuses_bad_streams_and_settings(tmp_path) -> None:
    images, labels, tokens, stores = _loader_stores(tmp_path)
    allocator = Allocator("cpu")
    image, label = stores[0].bind(allocator), stores[1].bind(allocator)
    sampler = Sampler(48, 4, Sampler.Mode.SEQUENTIAL)
    bad_streams = [
        {},  # no stream
        {"image": []},  # an empty view list
        {"image": image},  # not a list
        {"image": [image], "label": [label, label]},  # lists of other lengths
        {"image": [stores[0]]},  # a store, not a view
    ]
    for streams in bad_streams:
        with pytest.raises(ValueError):
            Loader(streams, sampler)
    with DenseWriter(tmp_path / "short", dtypes.int64, (), codec="raw") as w:
        w.append(labels[:10])
    with DenseStore(tmp_path / "short") as short:
        with pytest.raises(ValueError):  # streams of other lengths
            Loader({"label": [label], "short": [short.bind(allocator)]}, sampler)
    with pytest.raises(ValueError):
        Loader({"label": [label]}, sampler, workers=-1)
    with pytest.raises(ValueError):
        Loader({"label": [label]}, sampler, prefetch=0)
    with pytest.raises(TypeError):
        Loader({"label": [label]}, sampler, workers=True)
    # A batch of 4 cannot be split over 3 views.
    with pytest.raises(ValueError):
        with Loader({"label": [label] * 3}, sampler, workers=0) as loader:
            next(loader)
    with pytest.raises(ValueError):
        with Loader({"label": [label] * 3}, Sampler(48, 4, 0), workers=2) as loader:
            next(loader)
    for store in stores:
        store.close()


def test_train_dict_for_zstd_dict_stores(tmp_path) -> None:
    rng = np.random.default_rng(0)
    words = rng.integers(0, 256, size=(16, 8), dtype=np.uint8)
    data = words[rng.integers(0, 16, size=(600, 12))].reshape(600, 96)
    tokens = [words[rng.integers(0, 16, size=n)].reshape(-1) for n in rng.integers(2, 20, 400)]
    with DenseWriter(tmp_path / "d", dtypes.uint8, (96,), codec="zstd") as w:
        w.append(data)
    with RaggedWriter(tmp_path / "r", dtypes.uint8, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records(tokens))
    with DenseStore(tmp_path / "d") as ds, RaggedStore(tmp_path / "r") as rs, \
            Allocator("cpu") as allocator:  # fmt: skip
        dense_dict = train_dict(ds.bind(allocator), path=tmp_path / "dense.dict")
        ragged_dict = train_dict(rs.bind(allocator))
        assert isinstance(dense_dict, bytes) and dense_dict
        assert (tmp_path / "dense.dict").read_bytes() == dense_dict
        assert isinstance(ragged_dict, bytes) and ragged_dict
        with pytest.raises(TypeError):
            train_dict(ds)  # a store, not a view
    with DenseWriter(tmp_path / "dz", dtypes.uint8, (96,), codec="zstd_dict",
                     dict_bytes=dense_dict) as w:  # fmt: skip
        w.append(data)
    with RaggedWriter(tmp_path / "rz", dtypes.uint8, ndim=1, codec="zstd_dict",
                      dict_bytes=ragged_dict) as w:  # fmt: skip
        w.append(RaggedBatch.from_records(tokens))
    with DenseStore(tmp_path / "dz") as ds, RaggedStore(tmp_path / "rz") as rs, \
            Allocator("cpu") as allocator:  # fmt: skip
        assert ds.codec == "zstd_dict"
        np.testing.assert_array_equal(_np(ds.bind(allocator)[:]), data)
        got = rs.bind(allocator)[:].to_tensors()
        assert len(got) == len(tokens)
        for g, t in zip(got, tokens):
            np.testing.assert_array_equal(_np(g), t)


def test_allocator(tmp_path) -> None:
    allocator = Allocator("cpu")
    assert allocator.device_type == "cpu" and allocator.device_id == 0
    assert allocator.device == (1, 0)  # the DLPack device pair
    assert allocator.pool_size >= 0
    assert Allocator("CPU", pool_size=1 << 20).pool_size == 1 << 20
    assert Allocator("cpu", pool_size=0).pool_size == 0
    data = np.arange(6, dtype=dtypes.int16).reshape(3, 2)
    with DenseWriter(tmp_path / "a", dtypes.int16, (2,), codec="raw") as w:
        w.append(data)
    with DenseStore(tmp_path / "a") as store:
        view = store.bind(allocator)
        assert view.device == (1, 0)
        assert view[0].__dlpack_device__() == (1, 0)
    for bad in (dict(device_type="tpu"), dict(device_type=""),
                dict(device_type="cpu", device_id=1), dict(device_type="cpu", pool_size=-1),
                dict(device_type="cpu", device_id=-1)):  # fmt: skip
        with pytest.raises(ValueError):
            Allocator(**bad)
    for bad in (dict(device_type=1), dict(device_type="cpu", device_id=True),
                dict(device_type="cpu", pool_size=1.5)):  # fmt: skip
        with pytest.raises(TypeError):
            Allocator(**bad)
    allocator.close()
    allocator.close()


def test_allocator_acquire() -> None:
    from loaderx import Allocation

    with Allocator("cpu", pool_size=1 << 20) as allocator:
        assert allocator.size_class(1000) == 1024 and allocator.size_class(0) == 1
        region = allocator.acquire(1000, alignment=64)
        assert isinstance(region, Allocation)
        assert region.size == 1024 and region.alignment == 64
        assert region.device == allocator.device == (1, 0)
        assert region.owner_base_ptr % 64 == 0
        grid = region.view(np.float32, (16, 16))
        assert grid.shape == (16, 16) and grid.dtype == np.float32
        assert grid.ctypes.data == region.owner_base_ptr
        grid[:] = 3.5
        flat = region.view(np.float32, 256)  # the same bytes
        np.testing.assert_array_equal(flat, 3.5)
        tail = region.view(np.uint8, (4,), offset=1020)
        assert tail.ctypes.data == region.owner_base_ptr + 1020
        for shape, offset in (((1025,), 0), ((8,), 1020)):
            with pytest.raises(ValueError):
                region.view(np.uint8, shape, offset)
        region.close()
        region.close()
        with pytest.raises(RuntimeError):
            region.view(np.uint8, (1,))
        with allocator.acquire(10) as small:  # 2.8 may hand back a larger idle region
            assert small.size >= 16 and small.alignment >= 16
            assert small.owner_base_ptr % 16 == 0
        with pytest.raises(RuntimeError):
            small.view(np.uint8, (1,))
        for bad in (3, 0, -8):
            with pytest.raises(ValueError):
                allocator.acquire(8, alignment=bad)
        with pytest.raises(ValueError):
            allocator.acquire(-1)
        for bad_size in (1.5, True):
            with pytest.raises(TypeError):
                allocator.acquire(bad_size)
    with pytest.raises(RuntimeError):
        allocator.acquire(8)


def test_convert_hugging_face_dataset(tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    from loaderx.converter import convert

    features = datasets.Features({
        "label": datasets.Value("int64"),
        "vec": datasets.Sequence(datasets.Value("float32"), length=3),
        "tokens": datasets.Sequence(datasets.Value("int32")),
    })  # fmt: skip
    rows = {
        "label": list(range(12)),
        "vec": [[i, i + 0.5, -i] for i in range(12)],
        "tokens": [list(range(i, i + i % 4 + 1)) for i in range(12)],
    }
    ds = datasets.Dataset.from_dict(rows, features=features)
    convert(ds, tmp_path / "out", codec="zstd")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["label", "tokens", "vec"]
    with DenseStore(tmp_path / "out" / "label") as label, \
            DenseStore(tmp_path / "out" / "vec") as vec, \
            RaggedStore(tmp_path / "out" / "tokens") as tokens, \
            Allocator("cpu") as allocator:  # fmt: skip
        assert label.dtype == dtypes.int64 and vec.dtype == dtypes.float32
        assert tuple(vec.item_shape) == (3,) and tokens.ndim == 1
        np.testing.assert_array_equal(_np(label.bind(allocator)[:]), np.arange(12))
        np.testing.assert_array_equal(
            _np(vec.bind(allocator)[:]), np.array(rows["vec"], dtype=np.float32)
        )
        got = tokens.bind(allocator)[:].to_tensors()
        assert [_np(t).tolist() for t in got] == rows["tokens"]
    with pytest.raises(FileExistsError):
        convert(ds, tmp_path / "out", codec="raw")
    with pytest.raises(TypeError):
        convert(rows, tmp_path / "dict", codec="raw")  # not a Dataset
    with pytest.raises(ValueError):
        convert(datasets.Dataset.from_dict({"s": ["a", "b"]}), tmp_path / "s", codec="raw")
    assert not (tmp_path / "s").exists()
