"""DLPack export of the 2.8 API's DLTensor (crates/loaderx-py/src/dlpack.rs):
versioned and legacy capsules, the protocol's arguments, lifetimes (a
result outlives its store, never a dangling pointer), and zero-copy into
NumPy, PyTorch and JAX, bfloat16 and float8 included."""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loaderx import Allocator, dtypes
from loaderx.zrecord import DenseStore, DenseWriter, DLTensor, RaggedBatch, RaggedStore, RaggedWriter

_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype = ctypes.c_char_p
_name.argtypes = [ctypes.py_object]


def _store(tmp_path, dtype=dtypes.float32):
    data = np.arange(40, dtype=np.float32).reshape(10, 4).astype(dtype)
    with DenseWriter(tmp_path / "s", dtype, (4,), codec="zstd") as w:
        w.append(data)
    return data


def test_capsule_versions_and_arguments() -> None:
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    t = DLTensor._wrap(a)
    assert _name(t.__dlpack__()) == b"dltensor"
    assert _name(t.__dlpack__(max_version=(0, 8))) == b"dltensor"
    assert _name(t.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert _name(t.__dlpack__(max_version=(1, 3))) == b"dltensor_versioned"
    assert t.__dlpack_device__() == (1, 0)
    assert t.__dlpack__(dl_device=(1, 0)) is not None
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(stream=7)
    with pytest.raises(TypeError):
        t.__dlpack__(max_version=1)
    # copy=False shares, copy=True does not.
    shared = np.from_dlpack(t, copy=False)
    assert shared.ctypes.data == a.ctypes.data
    copied = np.from_dlpack(t, copy=True)
    assert copied.ctypes.data != a.ctypes.data
    np.testing.assert_array_equal(copied, a)


def test_read_only_memory_is_flagged() -> None:
    a = np.arange(4, dtype=np.int32)
    a.flags.writeable = False
    t = DLTensor._wrap(a)
    got = np.from_dlpack(t)  # NumPy asks for a versioned capsule
    assert not got.flags.writeable
    with pytest.raises(BufferError):
        t.__dlpack__()  # a legacy consumer could not be told it is read-only
    assert _name(t.__dlpack__(copy=True)) == b"dltensor"


def test_capsules_keep_the_array_alive_and_release_it() -> None:
    a = np.arange(1000, dtype=np.float64)
    base = sys.getrefcount(a)
    t = DLTensor._wrap(a)
    caps = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    assert sys.getrefcount(a) > base
    consumed = np.from_dlpack(t)
    del t, caps
    gc.collect()
    assert consumed.sum() == a.sum()  # the consumer still holds it
    del consumed
    gc.collect()
    assert sys.getrefcount(a) == base  # unconsumed and consumed capsules freed


def test_result_outlives_its_store_and_view(tmp_path) -> None:
    data = _store(tmp_path)
    store = DenseStore(tmp_path / "s")
    allocator = Allocator("cpu")
    view = store.bind(allocator)
    batch = view[3, 1, 9]
    one = view[2]
    ragged_src = [np.arange(n, dtype=np.int32) for n in (2, 5)]
    with RaggedWriter(tmp_path / "r", dtypes.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(ragged_src))
    rstore = RaggedStore(tmp_path / "r")
    rbatch = rstore.bind(allocator)[1, 0]
    store.close()
    rstore.close()
    allocator.close()
    del view, store, rstore
    gc.collect()
    np.testing.assert_array_equal(np.from_dlpack(batch), data[[3, 1, 9]])
    np.testing.assert_array_equal(np.from_dlpack(one), data[2])
    np.testing.assert_array_equal(np.from_dlpack(rbatch.values), np.r_[ragged_src[1], ragged_src[0]])


def _torch_zero_copy_and_lifetime(tmp_path) -> None:
    import torch
    data = _store(tmp_path)
    with DenseStore(tmp_path / "s") as store, Allocator("cpu") as allocator:
        batch = store.bind(allocator)[0, 4]
        t = torch.from_dlpack(batch)
        again = torch.from_dlpack(batch)
    assert t.data_ptr() == again.data_ptr()  # one buffer, shared
    assert np.from_dlpack(batch).ctypes.data == t.data_ptr()
    del batch
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), data[[0, 4]])
    # A torch tensor appends without a copy through DLPack.
    src = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    with DenseWriter(tmp_path / "t", dtypes.int32, (4,), codec="raw") as w:
        w.append(src)
    with DenseStore(tmp_path / "t") as s, Allocator("cpu") as allocator:
        np.testing.assert_array_equal(np.from_dlpack(s.bind(allocator)[:]), src.numpy())


def _torch_ml_floats_both_ways(tmp_path, name: str) -> None:
    import torch

    tdtype = getattr(torch, name)
    dt = getattr(dtypes, name)
    src = torch.tensor([[1.0, 2.0], [0.5, 4.0], [8.0, 0.25]]).to(tdtype)
    with DenseWriter(tmp_path / name, dt, (2,), codec="zstd") as w:
        w.append(src)
    with DenseStore(tmp_path / name) as s, Allocator("cpu") as allocator:
        got = torch.from_dlpack(s.bind(allocator)[2, 0])
    assert got.dtype == tdtype
    assert torch.equal(got.float(), src[[2, 0]].float())


def _jax_zero_copy(tmp_path) -> None:
    """A batch of at least POOLED_OUTPUT_BYTES comes from the engine's pool
    (page-aligned buffers), which JAX's CPU import shares; smaller batches
    are NumPy allocations (16-byte aligned), which JAX copies (docs/API.md)."""
    import jax
    import jax.numpy as jnp

    from loaderx import _native

    rows = _native.POOLED_OUTPUT_BYTES // (4 * 1024) + 1
    data = np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024)
    with DenseWriter(tmp_path / "big", dtypes.float32, (1024,), codec="raw") as w:
        w.append(data)
    with DenseStore(tmp_path / "big") as store, Allocator("cpu") as allocator:
        batch = store.bind(allocator)[:]
        arr = jax.dlpack.from_dlpack(batch)
        ptr = np.from_dlpack(batch).ctypes.data
    assert ptr % 64 == 0
    assert arr.unsafe_buffer_pointer() == ptr  # shared, not copied
    del batch
    np.testing.assert_array_equal(np.asarray(arr), data)
    (tmp_path / "bf").mkdir()
    bf = _store(tmp_path / "bf", dtypes.bfloat16)
    with DenseStore(tmp_path / "bf" / "s") as store, Allocator("cpu") as allocator:
        got = jnp.from_dlpack(store.bind(allocator)[1])
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got.astype(jnp.float32)), bf[1].astype(np.float32))


def _dense_2x_append_takes_dlpack_producers(tmp_path) -> None:
    """The 2.4 generation's ``Dense.append`` takes a DLPack producer too,
    viewed in place: a torch tensor (bfloat16 included) and a DLTensor."""
    import torch

    from loaderx import Dense

    src = torch.tensor([[1.0, 2.0], [0.5, 4.0]]).to(torch.bfloat16)
    with Dense.create(tmp_path / "bf", dtypes.bfloat16, (2,), codec="raw") as w:
        w.append(src)
        w.append(DLTensor._wrap(np.ones((1, 2), dtype=dtypes.bfloat16)))
    with Dense.open(tmp_path / "bf") as r:
        got = r[[0, 1, 2]]
    assert got.dtype == dtypes.bfloat16
    assert got.astype(np.float32).tolist() == [[1.0, 2.0], [0.5, 4.0], [1.0, 1.0]]
    # Viewed, not copied: the import shares the tensor's memory.
    from loaderx.containers.dlpack_in import as_array

    assert as_array(src, "x", dtypes.bfloat16).ctypes.data == src.data_ptr()


def _every_generation_appends_dlpack_producers(tmp_path) -> None:
    """PyTorch tensors (bfloat16 included) go into every generation's
    append viewed in place: ``Ragged.append`` (a list of tensors, or one
    tensor as its rows), the 0.5.x ``Zrecord.append``/``append_var`` and
    ``Dataset.write``; a read-only NumPy memory map too."""
    import torch

    from loaderx import Dataset, Ragged, Zrecord
    from loaderx.containers.dlpack_in import as_array

    seqs = [torch.arange(n, dtype=torch.int32) + n for n in (3, 1, 4)]
    with Ragged.create(tmp_path / "r", dtypes.int32, 1, codec="zstd") as w:
        w.append(seqs)
        w.append(torch.arange(6, dtype=torch.int32).reshape(2, 3))  # two records: its rows
    with Ragged.open(tmp_path / "r") as r:
        got = [a.tolist() for a in r[[0, 1, 2, 3, 4]]]
    assert got == [[3, 4, 5], [1], [4, 5, 6, 7], [0, 1, 2], [3, 4, 5]]
    bf = [torch.tensor([[1.0, 2.0]]).to(torch.bfloat16), torch.tensor([[0.5], [4.0]]).to(torch.bfloat16)]
    with Ragged.create(tmp_path / "bf", dtypes.bfloat16, 2, codec="raw") as w:
        w.append(bf)
    with Ragged.open(tmp_path / "bf") as r:
        recs = r[[0, 1]]
    assert recs[0].dtype == dtypes.bfloat16
    assert [a.astype(np.float32).tolist() for a in recs] == [[[1.0, 2.0]], [[0.5], [4.0]]]
    for t in bf:  # viewed, not copied
        assert as_array(t, "x").ctypes.data == t.data_ptr()

    raw = torch.arange(12, dtype=torch.uint8)
    z = Zrecord(tmp_path / "z", codec="raw")
    assert z.append(raw, 3, 4) == 0
    assert z.append_var(raw, np.array([0, 5]), np.array([2, 7])) == 3
    dst = np.zeros((5, 7), dtype=np.uint8)
    assert z.lengths([0, 1, 2, 3, 4]).tolist() == [4, 4, 4, 2, 7]
    z.gather_var([2, 4], dst.reshape(-1), np.array([0, 4]))
    assert dst.reshape(-1)[:11].tolist() == [8, 9, 10, 11, 5, 6, 7, 8, 9, 10, 11]
    z.close()

    labels = torch.arange(10, dtype=torch.int64) * 3
    ds = Dataset.write(tmp_path / "labels", labels, codec="raw")
    assert ds[np.arange(10)].tolist() == (np.arange(10) * 3).tolist()
    ds.close()
    images = torch.arange(24, dtype=torch.float32).reshape(3, 2, 4).to(torch.bfloat16)
    ds = Dataset.write(tmp_path / "images", images, codec="zstd")
    got = ds[np.array([2, 0])]
    assert got.dtype == dtypes.bfloat16 and got.shape == (2, 2, 4)
    assert got.astype(np.float32).tolist() == images[[2, 0]].float().tolist()
    ds.close()

    np.save(tmp_path / "m.npy", np.arange(16, dtype=np.uint8).reshape(4, 4))
    mm = np.load(tmp_path / "m.npy", mmap_mode="r")
    z = Zrecord(tmp_path / "zm", codec="raw")
    assert z.append(mm, 4, 4) == 0
    out = np.zeros(16, dtype=np.uint8)
    z.gather([3, 0], out, 4)
    assert out[:8].tolist() == [12, 13, 14, 15, 0, 1, 2, 3]
    z.close()
    with Ragged.create(tmp_path / "rm", dtypes.uint8, 1, codec="raw") as w:
        w.append(mm)
    with Ragged.open(tmp_path / "rm") as r:
        assert r[3].tolist() == [12, 13, 14, 15]


def _child(body: str, framework: str, tmp_path: Path, *args: str) -> None:
    """Runs `body(tmp_path, *args)` of this module in a child interpreter:
    importing PyTorch or JAX here would leave their threads and arenas in
    the suite's process (test_leaks.py measures its RSS)."""
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    code = (
        "import sys, pathlib; sys.path.insert(0, sys.argv[1]); import test_dlpack as t; "
        f"t.{body}(pathlib.Path(sys.argv[2]), *sys.argv[3:])"
    )
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", code, here, str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_torch_zero_copy_and_lifetime(tmp_path) -> None:
    _child("_torch_zero_copy_and_lifetime", "torch", tmp_path)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_torch_ml_floats_both_ways(tmp_path, name: str) -> None:
    _child("_torch_ml_floats_both_ways", "torch", tmp_path, name)


def test_jax_zero_copy(tmp_path) -> None:
    _child("_jax_zero_copy", "jax", tmp_path)


def test_dense_2x_append_takes_dlpack_producers(tmp_path) -> None:
    _child("_dense_2x_append_takes_dlpack_producers", "torch", tmp_path)


def test_every_generation_appends_dlpack_producers(tmp_path) -> None:
    _child("_every_generation_appends_dlpack_producers", "torch", tmp_path)
