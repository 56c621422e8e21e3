"""The loaderx 2.8 API as its README documents it, written from the
documented behaviour (issue 42). The file runs against this package (the
pytest suite) and, unchanged, against loaderx 2.8.19 in its own venv
(``test_api28_reference.py``): it imports nothing of this repository but
``loaderx`` and uses no fixture but pytest's own.

Covered here: dtypes, Dense and Ragged writers/stores/views, DLTensor and
RaggedBatch, and the documented errors. The Loader, Sampler, train_dict and
converter examples are not (yet) part of it.
"""

from __future__ import annotations

import numpy as np
import pytest

from loaderx import Allocator, dtypes
from loaderx.zrecord import (
    DenseStore,
    DenseView,
    DenseWriter,
    DLTensor,
    RaggedBatch,
    RaggedStore,
    RaggedView,
    RaggedWriter,
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
    with pytest.raises((TypeError, ValueError)):
        RaggedBatch.from_records([np.zeros(2, np.int32), np.zeros((2, 2), np.int32)])
