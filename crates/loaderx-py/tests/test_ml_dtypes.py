"""bfloat16 and the float8 types of ml_dtypes as store dtypes (issue 42, P1):
the 2.8 catalog ``loaderx.dtypes``, the format v2 dtype table, and round
trips through every API generation that returns NumPy (0.5.x ``Dataset``
and its ``DataLoader``, 2.4 ``Dense``/``Ragged``); ml_dtypes optional."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import loaderx
from loaderx import DataLoader, Dataset, Dense, Ragged, dtypes

ml_dtypes = pytest.importorskip("ml_dtypes")

#: The ml floats with a DLPack type code (DLPack 1.1's float8 codes).
ML_DLPACK_CODES = {"bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
                   "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"}  # fmt: skip

#: Every 8-bit float ml_dtypes defines, and bfloat16.
ML_NAMES = sorted(
    n for n in dir(ml_dtypes) if n.startswith("float8_") and isinstance(getattr(ml_dtypes, n), type)
) + ["bfloat16"]


def _values(dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Powers of two, which every ml float holds exactly (the unsigned,
    exponent-only e8m0 included)."""
    n = int(np.prod(shape))
    base = np.array([2.0**k for k in range(-3, 5)], dtype=np.float32)
    return np.resize(base, n).reshape(shape).astype(dt)


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def test_table_holds_every_ml_float_of_ml_dtypes() -> None:
    assert sorted(dtypes.ML_FLOATS) == sorted(ML_NAMES)
    for name in ML_NAMES:
        dt = getattr(dtypes, name)
        assert dt == np.dtype(getattr(ml_dtypes, name))
        assert dtypes.store_name(dt) == name
        assert dtypes.from_store_name(name) == dt
        assert loaderx.zrecord.stores_dtype(dt)
    # The catalog of the 2.8 API: the plain numbers, then the ml floats.
    assert dtypes.float32 == np.float32 and dtypes.bool == np.bool_
    assert set(dtypes.supported) >= {dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.int64}
    # `dtype.str` of these is ambiguous (`<V2`, `<f1`): never what is stored.
    assert dtypes.store_name(np.dtype("V2")) == "|V2"
    assert loaderx._native.dtype_name(dtypes.float8_e5m2) == "float8_e5m2"


@pytest.mark.parametrize("name", ML_NAMES)
def test_dense_and_ragged_round_trip(tmp_path, name: str) -> None:
    dt = getattr(dtypes, name)
    data = _values(dt, (6, 2, 3))
    for codec in ("raw", "zstd"):
        path = tmp_path / f"dense-{codec}"
        with Dense.create(path, dt, (2, 3), codec=codec) as w:
            w.append(data)
        with Dense.open(path) as r:
            assert r.dtype == dt
            _same(r[[5, 0, 3]], data[[5, 0, 3]])
            _same(r[2], data[2])
    path = tmp_path / "ragged"
    records = [data[0].reshape(-1), data[1, 0], data[2, :, :2].reshape(-1)]
    with Ragged.create(path, dt, ndim=1, codec="zstd") as w:
        w.append(records)
    with Ragged.open(path) as r:
        got = r[[2, 0, 1]]
        for a, b in zip(got, [records[2], records[0], records[1]]):
            _same(a, b)
        flat, offsets, shapes = r.gather_flat([1, 2])
        assert flat.dtype == dt and offsets.tolist() == [0, 3, 7]


#: The ml floats PyTorch imports by DLPack; the others (no torch dtype)
#: are read back through loaderx's own import, which checks the code.
TORCH_DLPACK = {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                "float8_e5m2fnuz", "float8_e8m0fnu"}  # fmt: skip


def _bytes_of(tensor: object, name: str) -> bytes:
    """The bytes of a DLPack tensor of an ml float (NumPy's ``from_dlpack``
    imports none of them)."""
    if name in TORCH_DLPACK:
        import torch

        t = torch.from_dlpack(tensor)
        assert str(t.dtype) == f"torch.{name}"
        return bytes(t.contiguous().view(torch.uint8).numpy().tobytes())
    from loaderx.containers.dlpack_in import as_array

    return as_array(tensor, "tensor", getattr(dtypes, name)).tobytes()


@pytest.mark.parametrize("name", ML_NAMES)
def test_2_8_writers_and_views_round_trip(tmp_path, name: str) -> None:
    """The 2.8 API: ``DenseWriter`` and ``RaggedWriter`` (2-D records in
    ``RaggedBatch``es) store ml floats, and views read them back as DLPack
    tensors of the same bytes and shapes. A float with no DLPack type code
    is refused by name where a DLPack tensor of it would be made."""
    pytest.importorskip("torch")
    from loaderx import Allocator
    from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter

    dt = getattr(dtypes, name)
    data = _values(dt, (6, 2, 3))
    allocator = Allocator("cpu")
    with DenseWriter(tmp_path / "dense", dt, (2, 3), codec="zstd") as w:
        w.append(data)
    records = [data[0], data[1, :1], data[2, :, :2]]
    with DenseStore(tmp_path / "dense") as dense:
        if name not in ML_DLPACK_CODES:
            with pytest.raises(TypeError, match=name):
                dense.bind(allocator)[[5, 0, 3]]
            with pytest.raises(TypeError, match=name):
                RaggedBatch.from_records(records)
            return
        got = dense.bind(allocator)[[5, 0, 3]]
        assert got.dtype == dt and tuple(got.shape) == (3, 2, 3)
        assert _bytes_of(got, name) == data[[5, 0, 3]].tobytes()
    with RaggedWriter(tmp_path / "ragged", dt, ndim=2, codec="zstd") as w:
        w.append(RaggedBatch.from_records(records[:2]))
        w.append(RaggedBatch.from_records(records[2:]))
    with RaggedStore(tmp_path / "ragged") as ragged:
        batch = ragged.bind(allocator)[[2, 0, 1]]
        assert np.from_dlpack(batch.shapes).tolist() == [[2, 2], [2, 3], [1, 3]]
        for part, want in zip(batch.to_tensors(), [records[2], records[0], records[1]]):
            assert _bytes_of(part, name) == want.tobytes()


def test_a_consumer_refusing_the_dtype_keeps_its_error(tmp_path) -> None:
    """NumPy refuses a bfloat16 DLPack tensor with its own RuntimeError; the
    capsule it drops on the way must not swallow that error (a
    ``SystemError``, 'returned NULL without setting an exception')."""
    from loaderx import Allocator
    from loaderx.zrecord import DenseStore, DenseWriter

    with DenseWriter(tmp_path / "bf", dtypes.bfloat16, (2,), codec="raw") as w:
        w.append(np.ones((3, 2), dtype=dtypes.bfloat16))
    with DenseStore(tmp_path / "bf") as store:
        batch = store.bind(Allocator("cpu"))[[0, 2]]
        for _ in range(3):
            with pytest.raises(RuntimeError, match="dtype"):
                np.from_dlpack(batch)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_dataset_and_dataloader_round_trip(tmp_path, name: str) -> None:
    dt = getattr(dtypes, name)
    data = _values(dt, (16, 4))
    labels = np.arange(16, dtype=np.int64)
    Dataset.write(tmp_path / "data", data, codec="raw")
    Dataset.write(tmp_path / "label", labels, codec="raw")
    schema = json.loads((tmp_path / "data" / "schema.json").read_text())
    assert schema["dtype"] == name
    ds = Dataset(tmp_path / "data")
    assert ds.dtype == dt
    _same(ds[[3, 1, 15]], data[[3, 1, 15]])
    # Appending keeps the dtype (compared after parsing the stored name).
    Dataset.write(tmp_path / "data", data[:2], codec="raw")
    Dataset.write(tmp_path / "label", np.arange(16, 18, dtype=np.int64), codec="raw")
    assert len(Dataset(tmp_path / "data")) == 18
    loader = DataLoader(
        {"x": Dataset(tmp_path / "data"), "y": Dataset(tmp_path / "label")},
        batch_size=4,
        mode=0,
        seed=1,
    )
    try:
        batch = next(loader)
        idx = batch["y"]
        assert batch["x"].dtype == dt
        full = np.concatenate([data, data[:2]])
        _same(batch["x"], full[idx])
    finally:
        loader.close()


def test_wrong_ml_float_is_refused(tmp_path) -> None:
    data = _values(dtypes.bfloat16, (4, 2))
    with Dense.create(tmp_path / "f8", dtypes.float8_e4m3fn, (2,), codec="raw") as w:
        with pytest.raises((TypeError, ValueError), match="bfloat16|dtype"):
            w.append(data)
        assert len(w) == 0


def test_ml_dtypes_is_optional() -> None:
    """Without ml_dtypes: ``import loaderx`` and the plain catalog work; an
    ml float name raises ImportError saying what to install."""
    code = (
        "import sys; sys.modules['ml_dtypes'] = None\n"
        "import loaderx, numpy as np\n"
        "from loaderx import dtypes\n"
        "assert dtypes.float32 == np.float32\n"
        "try:\n"
        "    dtypes.bfloat16\n"
        "except ImportError as e:\n"
        "    assert 'ml-dtypes' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
        "assert 'ml_dtypes' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print('fine')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "fine"


def test_store_of_ml_float_needs_ml_dtypes_to_open(tmp_path) -> None:
    with Dense.create(tmp_path / "bf", dtypes.bfloat16, (2,), codec="raw") as w:
        w.append(_values(dtypes.bfloat16, (3, 2)))
    code = (
        "import sys; sys.modules['ml_dtypes'] = None\n"
        "from loaderx import Dense\n"
        f"Dense.open({str(tmp_path / 'bf')!r})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    assert "ImportError" in out.stderr and "ml-dtypes" in out.stderr
