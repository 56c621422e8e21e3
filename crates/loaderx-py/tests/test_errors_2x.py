"""Refusals of the 2.x API raise what loaderx 2.x raises (or a subclass of
both that and our choice), with the phrases its messages carry, and leave
nothing behind."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.utils import train_dict
from loaderx.zrecord import (
    EXISTS,
    ArgumentTypeError,
    ClosedError,
    ContainerExistsError,
    ContainerModeError,
    Dense,
    Ragged,
    ZrecordError,
    stores_dtype,
)
from loaderx.zsampler import Sampler


def dense_store(path: Path, n: int = 16) -> Path:
    with Dense.create(path, np.uint8, (4,), codec="raw") as writer:
        writer.append(np.arange(n * 4, dtype=np.uint8).reshape(n, 4))
    return path


def smooth(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    steps = rng.integers(0, 3, size=(n, 3, 32, 32))
    return (np.cumsum(steps, axis=-1) % 256).astype(np.uint8)


@pytest.mark.parametrize("cls", [Dense, Ragged])
def test_direct_construction_names_the_class_methods(cls: Any) -> None:
    with pytest.raises(TypeError, match=rf"use {cls.__name__}\.open\(\.\.\.\) or "):
        cls()
    with pytest.raises(TypeError, match=r"\.create\(\.\.\.\)"):
        cls("path", "dtype")


def test_the_codec_is_checked_before_everything_else(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with pytest.raises(ValueError, match="unknown codec 'nope'"):
        Dense.create(path, np.dtype(object), (True,), codec="nope", dict_bytes=b"x")
    with pytest.raises(ValueError, match="unknown codec"):
        Ragged.create(path, np.uint8, "1", codec="nope")  # type: ignore[arg-type]
    assert not path.exists()


@pytest.mark.parametrize("dictionary", [None, b"", bytearray()])
def test_zstd_dict_without_a_dictionary(tmp_path: Path, dictionary: Any) -> None:
    path = tmp_path / "s"
    with pytest.raises(ValueError, match="requires non-empty dict_bytes"):
        Dense.create(path, np.uint8, (2,), codec="zstd_dict", dict_bytes=dictionary)
    assert not path.exists()
    Dense.create(path, np.uint8, (2,), codec="raw").close()


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_an_unusable_dictionary_is_a_bad_argument_and_leaves_nothing_behind(
    tmp_path: Path, kind: str
) -> None:
    # A zstd dictionary header with dictionary id 0, which zstd reserves.
    unusable = b"\x37\xa4\x30\xec" + bytes(4) + bytes(200)

    def create(path: Path) -> Any:
        if kind == "dense":
            return Dense.create(path, np.uint8, (8,), codec="zstd_dict", dict_bytes=unusable)
        return Ragged.create(path, np.uint8, 1, codec="zstd_dict", dict_bytes=unusable)

    nested = tmp_path / "n1" / "n2" / "n3"
    with pytest.raises(ValueError, match="dict_bytes.*not a usable zstd dictionary") as caught:
        create(nested)
    assert not isinstance(caught.value, ZrecordError), caught.value
    assert str(nested) in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # A directory that was there before stays, empty.
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="not a usable zstd dictionary"):
        create(empty)
    assert empty.is_dir() and not any(empty.iterdir())
    with Dense.create(nested, np.uint8, (8,), codec="zstd") as w:  # the path is free
        w.append(np.zeros((1, 8), np.uint8))


def test_create_on_a_store_or_a_foreign_directory_is_code_minus_12(tmp_path: Path) -> None:
    store = dense_store(tmp_path / "s")
    before = sorted((p.name, p.stat().st_size) for p in store.iterdir())
    with pytest.raises(ZrecordError) as caught:
        Dense.create(store, np.uint8, (4,), codec="raw")
    assert caught.value.code == EXISTS == -12
    assert isinstance(caught.value, ContainerExistsError)
    assert isinstance(caught.value, FileExistsError) and isinstance(caught.value, RuntimeError)
    assert sorted((p.name, p.stat().st_size) for p in store.iterdir()) == before

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "dict.zr").write_bytes(b"stale")
    with pytest.raises(ZrecordError) as caught:
        Ragged.create(foreign, np.int32, 1, codec="raw")
    assert caught.value.code == -12
    assert [p.name for p in foreign.iterdir()] == ["dict.zr"]

    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is ContainerExistsError
    assert again.code == -12 and str(again) == str(caught.value)


BAD_ARGUMENTS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "data_shards=True": (
        lambda p: Dense.create(p, np.uint8, (4,), codec="raw", data_shards=True),
        "data_shards must be an integer",
    ),
    "data_shards=np.False_": (
        lambda p: Dense.create(p, np.uint8, (4,), codec="raw", data_shards=np.bool_(False)),  # type: ignore[arg-type]
        "data_shards must be an integer",
    ),
    "data_shards=1.5": (
        lambda p: Dense.create(p, np.uint8, (4,), codec="raw", data_shards=1.5),  # type: ignore[arg-type]
        "data_shards must be an integer",
    ),
    "data_shards='2'": (
        lambda p: Dense.create(p, np.uint8, (4,), codec="raw", data_shards="2"),  # type: ignore[arg-type]
        "data_shards must be an integer",
    ),
    "shape (1.5,)": (
        lambda p: Dense.create(p, np.uint8, (1.5,), codec="raw"),  # type: ignore[arg-type]
        "dimensions must be integers",
    ),
    "shape ('4',)": (
        lambda p: Dense.create(p, np.uint8, ("4",), codec="raw"),  # type: ignore[arg-type]
        "dimensions must be integers",
    ),
    "shape (True,)": (
        lambda p: Dense.create(p, np.uint8, (True,), codec="raw"),
        "dimensions must be integers",
    ),
    "ndim=True": (lambda p: Ragged.create(p, np.uint8, True, codec="raw"), "ndim"),
    "ndim='1'": (lambda p: Ragged.create(p, np.uint8, "1", codec="raw"), "ndim"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_wrong_argument_types_are_type_and_value_errors(tmp_path: Path, case: str) -> None:
    call, message = BAD_ARGUMENTS[case]
    path = tmp_path / "s"
    with pytest.raises(ArgumentTypeError, match=message) as caught:
        call(path)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)
    assert not path.exists()


BAD_VALUES: dict[str, tuple[Callable[[Path], Any], str]] = {
    "structured": (
        lambda p: Dense.create(p, np.dtype([("x", "i4")]), (), codec="raw"),
        "structured dtypes",
    ),
    "subarray": (
        lambda p: Dense.create(p, np.dtype(("i4", (2,))), (), codec="raw"),
        "subarray dtypes",
    ),
    "metadata": (
        lambda p: Dense.create(p, np.dtype("i4", metadata={"unit": "x"}), (), codec="raw"),
        "dtype metadata",
    ),
    "object": (lambda p: Dense.create(p, np.dtype(object), (), codec="raw"), "object dtypes"),
    "V0": (lambda p: Dense.create(p, np.dtype("V0"), (), codec="raw"), "zero-itemsize dtypes"),
    "rank": (lambda p: Dense.create(p, np.uint8, (1,) * 17, codec="raw"), "rank"),
    "negative dimension": (
        lambda p: Dense.create(p, np.uint8, (2, -1), codec="raw"),
        "non-negative",
    ),
    "ndim 0": (lambda p: Ragged.create(p, np.uint8, 0, codec="raw"), "ndim"),
    "ndim 65": (lambda p: Ragged.create(p, np.uint8, 65, codec="raw"), "ndim"),
}


# Values only the format's own rules refuse (checked in Rust): named as the
# argument at fault, never as a damaged schema block.
SCHEMA_RULES: dict[str, tuple[Callable[[Path], Any], str, str]] = {
    "zero dimension": (
        lambda p: Dense.create(p, np.float32, (4, 0), codec="raw"),
        "shape",
        "dimension 1 = 0",
    ),
    "saturated byte count": (
        lambda p: Dense.create(p, np.float64, (1 << 40,) * 3, codec="raw"),
        "shape",
        "over 2^64 - 1 bytes",
    ),
    "oversized item": (
        lambda p: Dense.create(p, np.uint8, (1 << 32,), codec="raw"),
        "shape",
        "record limit",
    ),
    "jpeg float32": (
        lambda p: Dense.create(p, np.float32, (8, 8, 3), codec="jpeg"),
        "dtype",
        "uint8 RGB",
    ),
    "jpeg four channels": (
        lambda p: Dense.create(p, np.uint8, (8, 8, 4), codec="jpeg"),
        "shape",
        "(H, W, 3)",
    ),
    "png rank 2": (lambda p: Ragged.create(p, np.uint8, 2, codec="png"), "ndim", "ndim 3"),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_RULES))
def test_invalid_create_arguments_are_named_not_called_damage(tmp_path: Path, case: str) -> None:
    call, argument, fragment = SCHEMA_RULES[case]
    path = tmp_path / "n1" / "n2"
    with pytest.raises(ValueError) as caught:
        call(path)
    message = str(caught.value)
    assert not isinstance(caught.value, ZrecordError), message
    assert f"invalid {argument}: " in message and fragment in message, message
    assert str(path) in message, message
    assert "damaged" not in message, message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_values_name_what_is_wrong(tmp_path: Path, case: str) -> None:
    call, message = BAD_VALUES[case]
    path = tmp_path / "s"
    with pytest.raises(ValueError, match=message):
        call(path)
    assert not path.exists()


def test_the_other_geometry_is_refused_naming_schema_fields(tmp_path: Path) -> None:
    dense = dense_store(tmp_path / "d")
    with pytest.raises(ValueError, match="schema fields"):
        Ragged.open(dense)
    ragged = tmp_path / "r"
    with Ragged.create(ragged, np.int32, 1, codec="raw") as writer:
        writer.append([np.arange(3, dtype=np.int32)])
    with pytest.raises(ValueError, match="schema fields"):
        Dense.open(ragged)


@pytest.mark.parametrize("scalar", [True, False, np.bool_(True), np.array(False)])
def test_a_boolean_scalar_is_not_an_index(tmp_path: Path, scalar: Any) -> None:
    with Dense.open(dense_store(tmp_path / "s")) as ds:
        with pytest.raises(TypeError, match="boolean scalar"):
            ds[scalar]
        # A mask of the right length still selects.
        mask = np.zeros(len(ds), dtype=bool)
        mask[[3, 5]] = True
        np.testing.assert_array_equal(ds[mask], ds[[3, 5]])


@pytest.mark.parametrize(
    "args",
    [(1 << 64, 4, 2), (8, 1 << 64, 2), (8, 4, 2, 1 << 64), (0, 4, 2), (8, 4, 2, -1), (8, 4, 3)],
)
def test_sampler_arguments_out_of_range_are_value_errors(args: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"must be|mode"):
        Sampler(*args)


@pytest.mark.parametrize("step", [-1, 1 << 64])
def test_sampler_seek_out_of_range_is_a_value_error(step: int) -> None:
    with pytest.raises(ValueError, match=r"step must be in 0\.\.2\^64-1"):
        Sampler(8, 4, Sampler.Mode.CYCLIC).seek(step)


def test_a_loader_over_empty_streams_names_them(tmp_path: Path) -> None:
    for name in ("images", "labels"):
        Dense.create(tmp_path / name, np.uint8, (4,), codec="raw").close()
    with Dense.open(tmp_path / "images") as a, Dense.open(tmp_path / "labels") as b:
        with pytest.raises(ValueError, match=r"\['images', 'labels'\].*no records") as caught:
            DataLoader({"images": a, "labels": b})
        assert str(tmp_path / "images") in str(caught.value)
        with pytest.raises(ValueError, match=r"\['data', 'label'\].*no records") as caught:
            DataLoader(a, b)
        assert str(tmp_path / "labels") in str(caught.value)


def test_a_cyclic_batch_larger_than_the_data_is_one_permutation(tmp_path: Path) -> None:
    sampler = Sampler(3, 8, Sampler.Mode.CYCLIC, 42)
    assert sampler.batch_size == sampler.local_batch_size == 3
    for _ in range(5):
        batch = sampler.next()
        assert batch.dtype == np.uint64 and sorted(batch.tolist()) == [0, 1, 2]
    path = tmp_path / "s"
    with Dense.create(path, np.int64, (), codec="raw") as writer:
        writer.append(np.arange(3, dtype=np.int64))
    with Dense.open(path) as ds, DataLoader({"x": ds}, batch_size=8, mode=2) as loader:
        for _ in range(4):
            assert sorted(next(loader)["x"].tolist()) == [0, 1, 2]
    # The modes with replacement or a sliding window keep the size asked for.
    assert Sampler(3, 8, Sampler.Mode.IID).next().shape == (8,)
    assert Sampler(3, 8, Sampler.Mode.SEQUENTIAL).next().tolist() == [0, 1, 2, 0, 1, 2, 0, 1]


def test_loader_refuses_closed_streams_and_writers_as_not_opened_for_reading(
    tmp_path: Path,
) -> None:
    path = dense_store(tmp_path / "s")
    closed = Dense.open(path)
    closed.close()
    with pytest.raises(ClosedError, match="opened for reading"):
        DataLoader({"d": closed})
    writer = Dense.create(tmp_path / "w", np.uint8, (4,), codec="zstd")
    writer.append(np.zeros((1, 4), dtype=np.uint8))
    try:
        with pytest.raises(ContainerModeError, match="opened for reading"):
            DataLoader({"d": writer})
    finally:
        writer.close()


@pytest.mark.parametrize("name", ["transform_workers", "num_workers", "prefetch_size"])
@pytest.mark.parametrize("value", [0, -1, 1.5, False])
def test_loader_names_the_count_as_passed(tmp_path: Path, name: str, value: Any) -> None:
    with Dense.open(dense_store(tmp_path / "s")) as ds:
        kind = ValueError if isinstance(value, int) and not isinstance(value, bool) else TypeError
        with pytest.raises(kind, match=name):
            DataLoader({"d": ds}, **{name: value})


@pytest.mark.parametrize(
    ("source", "kind", "message"),
    [
        (np.empty((0, 4), dtype=np.uint8), ValueError, "empty array"),
        (np.empty((2, 0), dtype=np.uint8), ValueError, "zero-byte records"),
        ([b"abc", b""], ValueError, "zero-byte records"),
        (np.empty((2, 1), dtype=object), ArgumentTypeError, "object arrays"),
        ([np.empty(1, dtype=object)], ArgumentTypeError, "object arrays"),
    ],
)
def test_train_dict_refuses_sources_it_cannot_train_on(
    source: Any, kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind, match=message):
        train_dict(source)


def test_train_dict_default_is_a_32_kib_dictionary(tmp_path: Path) -> None:
    data = smooth(400)
    dictionary = train_dict(data)
    assert 0 < len(dictionary) <= 32 << 10
    writer = Dense.create(tmp_path / "w", np.uint8, data.shape[1:], codec="raw")
    writer.append(data)
    try:
        with pytest.raises(ContainerModeError, match="opened read-only"):
            train_dict(writer)
    finally:
        writer.close()
    with Dense.open(tmp_path / "w") as reader:
        assert 0 < len(train_dict(reader)) <= 32 << 10


@pytest.mark.parametrize("codec", ["raw", "zstd", "lz4"])
@pytest.mark.parametrize("name", [">i2", ">u4", ">i8", ">f4", ">f8", ">c16"])
def test_big_endian_records_keep_their_byte_order(tmp_path: Path, name: str, codec: str) -> None:
    dtype = np.dtype(name)
    data = (np.arange(64) * 3 - 50).astype(dtype).reshape(16, 4)
    with Dense.create(tmp_path / "d", dtype, (4,), codec=codec) as writer:
        with pytest.raises(ValueError, match=name.replace(">", "")):
            writer.append(data.astype(dtype.newbyteorder("=")))  # the native order is refused
        writer.append(data)
    with Dense.open(tmp_path / "d") as ds:
        assert ds.dtype == dtype and ds.dtype.str == name
        got = ds[[5, 0, 15]]
        assert got.dtype.str == name
        np.testing.assert_array_equal(got, data[[5, 0, 15]])
        np.testing.assert_array_equal(ds[:], data)
        with DataLoader({"x": ds}, batch_size=4, mode=0) as loader:
            batch = next(loader)["x"]
            assert batch.dtype.str == name
            np.testing.assert_array_equal(batch, data[:4])
    records = [np.arange(n, dtype=dtype) for n in (1, 5, 3)]
    with Ragged.create(tmp_path / "r", dtype, 1, codec=codec) as ragged:
        ragged.append(records)
    with Ragged.open(tmp_path / "r") as rg:
        assert rg.dtype == dtype
        for got_record, want in zip(rg[[2, 0, 1]], [records[2], records[0], records[1]]):
            assert got_record.dtype.str == name
            np.testing.assert_array_equal(got_record, want)


def text_bytes_and_times(dtype: np.dtype, n: int) -> np.ndarray:
    """`n` * 3 distinct values of `dtype`, shaped (n, 3)."""
    count = n * 3
    if dtype.kind in "SU":
        values = np.array([f"r{i}-{'x' * (i % 4)}" for i in range(count)]).astype(dtype)
    elif dtype.kind == "V":
        raw = np.arange(count * dtype.itemsize, dtype=np.uint8) * 7
        values = raw.view(dtype)
    else:
        values = (np.arange(count, dtype=np.int64) * 86_400_003 - 5).view(dtype)
    return values.reshape(n, 3)


@pytest.mark.parametrize(
    "name", ["|S6", "<U5", ">U3", "|V4", "<M8[ns]", ">M8[D]", "<m8[10ms]", ">m8[s]"]
)
def test_text_bytes_and_times_round_trip(tmp_path: Path, name: str) -> None:
    dtype = np.dtype(name)
    assert dtype.str == name
    data = text_bytes_and_times(dtype, 20)
    with Dense.create(tmp_path / "d", dtype, (3,), codec="zstd") as writer:
        writer.append(data)
    with Dense.open(tmp_path / "d") as ds:
        assert ds.dtype == dtype and ds.dtype.str == name
        got = ds[[7, 0, 19]]
        assert got.dtype == dtype
        assert got.tobytes() == data[[7, 0, 19]].tobytes()
        with DataLoader({"x": ds}, batch_size=5, mode=0) as loader:
            assert next(loader)["x"].tobytes() == data[:5].tobytes()
    with Ragged.create(tmp_path / "r", dtype, 1, codec="raw") as ragged:
        ragged.append([data[i, : 1 + i % 3] for i in range(20)])
    with Ragged.open(tmp_path / "r") as rg:
        for i, record in zip([4, 0, 2], rg[[4, 0, 2]]):
            assert record.dtype == dtype
            assert record.tobytes() == data[i, : 1 + i % 3].tobytes()


@pytest.mark.parametrize("name", ["M8", "m8", "O", "V0", "S0"])
def test_dtypes_without_a_size_or_unit_are_refused(tmp_path: Path, name: str) -> None:
    assert not stores_dtype(name)
    with pytest.raises(ValueError):
        Dense.create(tmp_path / "d", name, (3,), codec="raw")
    assert not (tmp_path / "d").exists()
    assert stores_dtype("M8[us]") and stores_dtype("S3") and stores_dtype(">f4")


def test_2x_constant_names() -> None:
    import loaderx.zrecord as zrecord

    assert zrecord.MAX_DATA_SHARDS == zrecord.MAX_SHARDS == 16
    assert zrecord.MAX_RECORD_LEN == zrecord.MAX_ITEM_LEN == 2**31 - 1
    assert {"MAX_DATA_SHARDS", "MAX_RECORD_LEN", "EXISTS", "stores_dtype"} <= set(zrecord.__all__)
