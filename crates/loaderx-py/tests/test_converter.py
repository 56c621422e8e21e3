"""loaderx.converter: every source converted for real and read back through
the typed containers, exactly (values, dtypes, shapes, order, labels)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import (
    ConversionError,
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
from loaderx.zrecord import Dense, Ragged

datasets = pytest.importorskip("datasets", reason="the converter extra (datasets) is not installed")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
PIL_Image = pytest.importorskip("PIL.Image")


def leftovers(parent: Path, name: str) -> list[str]:
    """Temporary siblings a conversion into parent/name may have left."""
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.tmp-")]


def read_dense(path: Path) -> np.ndarray:
    with Dense.open(path) as d:
        return d[:]


def read_ragged(path: Path) -> list[np.ndarray]:
    with Ragged.open(path) as r:
        return [np.array(x) for x in r[:]]


# --- Hugging Face --------------------------------------------------------------------------


def hf_columns(n: int, seed: int) -> tuple[dict, object]:
    rng = np.random.default_rng(seed)
    seq = [rng.integers(-300, 300, size=int(rng.integers(1, 9))).astype(np.int16) for _ in range(n)]
    grid = [rng.standard_normal((int(rng.integers(1, 5)), 3)).astype(np.float32) for _ in range(n)]
    data = {
        "x": rng.integers(-(2**31), 2**31 - 1, size=n).astype(np.int32),
        "y": rng.standard_normal(n),
        "flag": rng.integers(0, 2, size=n).astype(bool),
        "label": rng.integers(0, 3, size=n),
        "seq": [s.tolist() for s in seq],
        "fixed": rng.standard_normal((n, 4)).astype(np.float32).tolist(),
        "mat": rng.integers(0, 255, size=(n, 2, 3)).astype(np.uint8).tolist(),
        "grid": [g.tolist() for g in grid],
    }
    features = datasets.Features(
        {
            "x": datasets.Value("int32"),
            "y": datasets.Value("float64"),
            "flag": datasets.Value("bool"),
            "label": datasets.ClassLabel(names=["a", "b", "c"]),
            "seq": datasets.Sequence(datasets.Value("int16")),
            "fixed": datasets.Sequence(datasets.Value("float32"), length=4),
            "mat": datasets.Array2D((2, 3), "uint8"),
            "grid": datasets.Array2D((None, 3), "float32"),
        }
    )
    expected = dict(data)
    expected["seq"] = seq
    expected["grid"] = grid
    return expected, datasets.Dataset.from_dict(data, features=features)


def check_split(out: Path, expected: dict, n: int) -> None:
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)
    x = read_dense(out / "x")
    assert x.dtype == np.int32 and x.shape == (n,)
    np.testing.assert_array_equal(x, expected["x"])
    y = read_dense(out / "y")
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, expected["y"])
    flag = read_dense(out / "flag")
    assert flag.dtype == np.bool_
    np.testing.assert_array_equal(flag, expected["flag"])
    label = read_dense(out / "label")
    assert label.dtype == np.int64
    np.testing.assert_array_equal(label, expected["label"])
    fixed = read_dense(out / "fixed")
    assert fixed.dtype == np.float32 and fixed.shape == (n, 4)
    np.testing.assert_array_equal(fixed, np.asarray(expected["fixed"], dtype=np.float32))
    mat = read_dense(out / "mat")
    assert mat.dtype == np.uint8 and mat.shape == (n, 2, 3)
    np.testing.assert_array_equal(mat, np.asarray(expected["mat"], dtype=np.uint8))
    seq = read_ragged(out / "seq")
    assert len(seq) == n
    for got, want in zip(seq, expected["seq"]):
        assert got.dtype == np.int16
        np.testing.assert_array_equal(got, want)
    grid = read_ragged(out / "grid")
    for got, want in zip(grid, expected["grid"]):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("batch_bytes", [64, 1 << 20])
def test_dataset_dict_round_trip(tmp_path: Path, batch_bytes: int) -> None:
    train_expected, train = hf_columns(57, seed=1)
    test_expected, test = hf_columns(13, seed=2)
    dd = datasets.DatasetDict(train=train, test=test)
    counts = convert(dd, tmp_path / "out", codec="zstd", batch_bytes=batch_bytes)
    assert counts["train/x"] == 57 and counts["test/seq"] == 13
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["test", "train"]
    check_split(tmp_path / "out" / "train", train_expected, 57)
    check_split(tmp_path / "out" / "test", test_expected, 13)
    assert leftovers(tmp_path, "out") == []


def test_saved_and_reloaded_dataset_keeps_row_order_of_a_selection(tmp_path: Path) -> None:
    expected, ds = hf_columns(40, seed=3)
    ds.save_to_disk(str(tmp_path / "saved"))
    loaded = datasets.load_from_disk(str(tmp_path / "saved"))
    order = [39, 0, 17, 5, 5, 22]
    picked = loaded.select(order)
    convert(picked, tmp_path / "out", codec="lz4", batch_bytes=100)
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "x"), expected["x"][order])
    seq = read_ragged(tmp_path / "out" / "seq")
    for got, i in zip(seq, order):
        np.testing.assert_array_equal(got, expected["seq"][i])
    # The save_to_disk directory itself, through convert_path.
    assert source_kind(tmp_path / "saved") == "hf"
    convert_path(tmp_path / "saved", tmp_path / "whole", codec="raw")
    check_split(tmp_path / "whole", expected, 40)
    # The converter let go of the mapped pages it read; the dataset, still
    # open, reads the same values.
    convert(loaded, tmp_path / "again", codec="raw", batch_bytes=64)
    np.testing.assert_array_equal(loaded.with_format("numpy")["x"], expected["x"])
    for got, want in zip(loaded["seq"], expected["seq"]):
        np.testing.assert_array_equal(got, want)


def test_image_feature(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    pictures = [rng.integers(0, 256, size=(5 + i, 7 + 2 * i, 3), dtype=np.uint8) for i in range(6)]
    files = []
    for i, pic in enumerate(pictures):
        path = tmp_path / f"{i}.png"
        PIL_Image.fromarray(pic).save(path)
        files.append(str(path))
    ds = datasets.Dataset.from_dict(
        {"image": files, "label": list(range(6))},
        features=datasets.Features(
            {"image": datasets.Image(), "label": datasets.Value("int64")}
        ),
    )
    convert(ds, tmp_path / "out", codec="zstd", batch_bytes=200)
    images = read_ragged(tmp_path / "out" / "image")
    assert len(images) == 6
    for got, want in zip(images, pictures):
        assert got.dtype == np.uint8 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "label"), np.arange(6))


@pytest.mark.parametrize("batch_bytes", [64, 1 << 20])
def test_iterable_dataset_dict_with_declared_features(tmp_path: Path, batch_bytes: int) -> None:
    train_expected, train = hf_columns(57, seed=5)
    test_expected, test = hf_columns(13, seed=6)
    streamed = datasets.IterableDatasetDict(
        train=train.to_iterable_dataset(num_shards=3), test=test.to_iterable_dataset()
    )
    seen: list[tuple[int, object]] = []
    counts = convert(
        streamed,
        tmp_path / "out",
        codec="zstd",
        batch_bytes=batch_bytes,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert counts["train/x"] == 57 and counts["test/seq"] == 13
    check_split(tmp_path / "out" / "train", train_expected, 57)
    check_split(tmp_path / "out" / "test", test_expected, 13)
    assert seen[-1] == (70, None) and all(total is None for _done, total in seen)
    assert leftovers(tmp_path, "out") == []


def test_iterable_dataset_without_features_is_inferred(tmp_path: Path) -> None:
    rows = {
        "label": [1, 2, 3],
        "tokens": [[1, 2], [3], [4, 5, 6]],
        "precise": np.array([1.123456789012345, 2.0, 3.0]),
        "wide": np.array([2**63 + 1, 2**63 + 2, 2**63 + 3], dtype=np.uint64),
    }

    def generate():  # type: ignore[no-untyped-def]
        for i in range(3):
            yield {name: values[i] for name, values in rows.items()}

    source = datasets.IterableDataset.from_generator(generate)
    assert source.features is None
    counts = convert(source, tmp_path / "out", codec="lz4")
    assert counts == {"label": 3, "tokens": 3, "precise": 3, "wide": 3}
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "label"), [1, 2, 3])
    precise = read_dense(tmp_path / "out" / "precise")
    assert precise.dtype == np.float64 and precise[0] == rows["precise"][0]
    wide = read_dense(tmp_path / "out" / "wide")
    assert wide.dtype == np.uint64
    np.testing.assert_array_equal(wide, rows["wide"])
    assert [t.tolist() for t in read_ragged(tmp_path / "out" / "tokens")] == rows["tokens"]


def test_iterable_dataset_with_images_and_a_refused_column(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    pictures = [rng.integers(0, 256, size=(4 + i, 6 + i, 3), dtype=np.uint8) for i in range(5)]
    files = []
    for i, pic in enumerate(pictures):
        path = tmp_path / f"{i}.png"
        PIL_Image.fromarray(pic).save(path)
        files.append(str(path))
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    ds = datasets.Dataset.from_dict({"image": files, "label": list(range(5))}, features=features)
    convert(ds.to_iterable_dataset(), tmp_path / "out", codec="raw", batch_bytes=100)
    for got, want in zip(read_ragged(tmp_path / "out" / "image"), pictures):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "label"), np.arange(5))

    text = datasets.Dataset.from_dict({"x": [1, 2], "text": ["a", "b"]}).to_iterable_dataset()
    with pytest.raises(ConversionError, match="text"):
        convert(text, tmp_path / "text", codec="raw")
    assert not (tmp_path / "text").exists() and leftovers(tmp_path, "text") == []


def test_string_column_is_refused_by_name_and_nothing_is_written(tmp_path: Path) -> None:
    ds = datasets.Dataset.from_dict({"x": [1, 2, 3], "text": ["a", "b", "c"]})
    with pytest.raises(ConversionError, match="'text'"):
        convert(ds, tmp_path / "out", codec="zstd")
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path, "out") == []
    # Mapped away first, it converts.
    convert(ds.remove_columns("text"), tmp_path / "out", codec="zstd")
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "x"), [1, 2, 3])


def test_nested_objects_are_refused_by_name(tmp_path: Path) -> None:
    ds = datasets.Dataset.from_dict({"meta": [{"a": 1, "b": 2.0}, {"a": 3, "b": 4.0}]})
    with pytest.raises(ConversionError, match="'meta'"):
        convert(ds, tmp_path / "out", codec="zstd")
    assert not (tmp_path / "out").exists()


def test_failure_half_way_leaves_nothing(tmp_path: Path) -> None:
    # The second split has a missing sequence in its last row: the first
    # split is written by then, and must vanish with the rest.
    good = datasets.Dataset.from_dict({"seq": [[1, 2], [3], []] * 50})
    bad = datasets.Dataset.from_dict({"seq": [[1], [2, 3], None]})
    dd = datasets.DatasetDict(a=good, b=bad)
    with pytest.raises(ConversionError, match="null"):
        convert(dd, tmp_path / "out", codec="zstd", batch_bytes=16)
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path, "out") == []


def test_existing_output_is_refused_and_kept(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("mine")
    ds = datasets.Dataset.from_dict({"x": [1, 2]})
    with pytest.raises(FileExistsError):
        convert(ds, tmp_path / "out", codec="zstd")
    assert (tmp_path / "out" / "keep").read_text() == "mine"
    assert leftovers(tmp_path, "out") == []


def test_not_a_dataset_and_bad_codec(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="datasets.Dataset"):
        convert({"x": [1]}, tmp_path / "out", codec="zstd")
    ds = datasets.Dataset.from_dict({"x": [1, 2]})
    with pytest.raises(ValueError, match="codec"):
        convert(ds, tmp_path / "out", codec="gzip9")
    assert list(tmp_path.iterdir()) == []


def test_huggingface_loads_through_datasets(tmp_path: Path) -> None:
    # A local dataset directory (no network here): the call goes all the
    # way through datasets.load_dataset and its parquet builder.
    repo = tmp_path / "repo" / "data"
    repo.mkdir(parents=True)
    pq.write_table(pa.table({"x": pa.array([5, 6, 7], pa.int16())}), repo / "train.parquet")
    pq.write_table(pa.table({"x": pa.array([8], pa.int16())}), repo / "test.parquet")
    dd = huggingface(str(tmp_path / "repo"), cache_dir=str(tmp_path / "cache"))
    assert sorted(dd) == ["test", "train"]
    convert(dd, tmp_path / "out", codec="zstd")
    x = read_dense(tmp_path / "out" / "train" / "x")
    assert x.dtype == np.int16
    np.testing.assert_array_equal(x, [5, 6, 7])
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "test" / "x"), [8])
    with pytest.raises(ValueError, match="repo_id"):
        huggingface("")
    with pytest.raises(FileNotFoundError):
        huggingface(str(tmp_path / "missing"), cache_dir=str(tmp_path / "cache"))


# --- NumPy files ---------------------------------------------------------------------------


def test_npy_round_trip_c_and_fortran_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 255, size=(300, 3, 8, 8), dtype=np.uint8)
    np.save(tmp_path / "a.npy", a)
    convert_npy(tmp_path / "a.npy", tmp_path / "a", codec="zstd", batch_bytes=1000)
    with Dense.open(tmp_path / "a") as d:
        assert d.item_shape == (3, 8, 8) and d.dtype == np.uint8
        np.testing.assert_array_equal(d[:], a)
    f = np.asfortranarray(rng.standard_normal((50, 6)).astype(np.float16))
    np.save(tmp_path / "f.npy", f)
    convert_path(tmp_path / "f.npy", tmp_path / "f", codec="lz4")
    np.testing.assert_array_equal(read_dense(tmp_path / "f"), f)
    scalars = np.arange(10, dtype=np.complex64)
    np.save(tmp_path / "s.npy", scalars)
    convert_npy(tmp_path / "s.npy", tmp_path / "s", codec="raw")
    np.testing.assert_array_equal(read_dense(tmp_path / "s"), scalars)


def test_npy_refusals(tmp_path: Path) -> None:
    np.save(tmp_path / "zero.npy", np.float32(3.0))
    with pytest.raises(ConversionError, match="0-d"):
        convert_npy(tmp_path / "zero.npy", tmp_path / "out", codec="zstd")
    np.save(tmp_path / "generic.npy", np.full(4, "NaT", dtype="M8"))
    with pytest.raises(ConversionError, match="cannot be stored"):
        convert_npy(tmp_path / "generic.npy", tmp_path / "out", codec="zstd")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path, "out") == []


@pytest.mark.parametrize("dtype", [">i4", ">f8", "|S5", "<U3", "<M8[ms]"])
def test_npy_and_npz_of_other_dtypes_keep_them(tmp_path: Path, dtype: str) -> None:
    values = np.arange(12).reshape(6, 2).astype(np.int64)
    array = values.astype(dtype)
    np.save(tmp_path / "a.npy", array)
    convert_npy(tmp_path / "a.npy", tmp_path / "a", codec="zstd")
    got = read_dense(tmp_path / "a")
    assert got.dtype.str == np.dtype(dtype).str
    assert got.tobytes() == array.tobytes()
    np.savez(tmp_path / "b.npz", x=array, y=np.arange(6))
    convert_npz(tmp_path / "b.npz", tmp_path / "b", codec="raw")
    assert read_dense(tmp_path / "b" / "x").tobytes() == array.tobytes()


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_round_trip(tmp_path: Path, save) -> None:
    rng = np.random.default_rng(6)
    images = rng.integers(0, 255, size=(40, 4, 4), dtype=np.uint8)
    labels = rng.integers(0, 10, size=40).astype(np.int64)
    weights = np.asfortranarray(rng.standard_normal((40, 3)))
    save(tmp_path / "d.npz", images=images, labels=labels, weights=weights)
    counts = convert_npz(tmp_path / "d.npz", tmp_path / "out", codec="zstd", batch_bytes=50)
    assert counts == {"images": 40, "labels": 40, "weights": 40}
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "images"), images)
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "labels"), labels)
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "weights"), weights)


def test_npz_lengths_must_agree(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", a=np.arange(5), b=np.arange(6))
    with pytest.raises(ConversionError, match="differ in length"):
        convert_npz(tmp_path / "d.npz", tmp_path / "out", codec="zstd")
    assert not (tmp_path / "out").exists()


# --- Parquet and Arrow ---------------------------------------------------------------------


def token_table(n: int, seed: int) -> tuple[pa.Table, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    # Some token lists are empty: they stay records, so row i is record i.
    tokens = [rng.integers(0, 50_000, size=int(rng.integers(0, 40))).astype(np.int32) for _ in range(n)]
    assert any(t.size == 0 for t in tokens)
    table = pa.table(
        {
            "tokens": pa.array([t.tolist() for t in tokens], type=pa.list_(pa.int32())),
            "pos": pa.array(
                # Some rows have no points: empty (0, 2) records.
                [rng.standard_normal((int(rng.integers(0, 4)), 2)).tolist() for _ in range(n)],
                type=pa.list_(pa.list_(pa.float64(), 2)),
            ),
            "vec": pa.array(
                rng.standard_normal((n, 3)).astype(np.float32).tolist(),
                type=pa.list_(pa.float32(), 3),
            ),
            "id": pa.array(np.arange(n, dtype=np.uint64)),
            "ok": pa.array(rng.integers(0, 2, size=n).astype(bool)),
        }
    )
    return table, tokens


def check_tokens(out: Path, table: pa.Table, tokens: list[np.ndarray]) -> None:
    got = read_ragged(out / "tokens")
    assert len(got) == len(tokens)
    for g, t in zip(got, tokens):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, t)
    pos = read_ragged(out / "pos")
    wanted = table.column("pos").to_pylist()
    assert len(pos) == len(wanted) and any(not w for w in wanted)
    for g, want in zip(pos, wanted):
        assert g.dtype == np.float64 and g.shape == (len(want), 2)
        np.testing.assert_array_equal(g, np.array(want, np.float64).reshape(-1, 2))
    vec = read_dense(out / "vec")
    assert vec.dtype == np.float32 and vec.shape == (len(tokens), 3)
    np.testing.assert_array_equal(vec, np.array(table.column("vec").to_pylist(), np.float32))
    ids = read_dense(out / "id")
    assert ids.dtype == np.uint64
    np.testing.assert_array_equal(ids, np.arange(len(tokens)))
    np.testing.assert_array_equal(read_dense(out / "ok"), table.column("ok").to_numpy(False))


def test_zstd_dict_trains_a_dictionary_per_store(tmp_path: Path) -> None:
    table, tokens = token_table(3000, seed=9)
    pq.write_table(table.select(["tokens", "id"]), tmp_path / "t.parquet", row_group_size=500)
    convert_parquet(tmp_path / "t.parquet", tmp_path / "dict", codec="zstd_dict")
    convert_parquet(tmp_path / "t.parquet", tmp_path / "plain", codec="zstd")
    with Ragged.open(tmp_path / "dict" / "tokens") as rg:
        assert rg.codec == "zstd_dict"
        assert_records(rg, tokens)
    np.testing.assert_array_equal(read_dense(tmp_path / "dict" / "id"), np.arange(3000))
    with Dense.open(tmp_path / "dict" / "id") as ids:
        assert ids.codec == "zstd_dict"
    # Short random token lists are where a dictionary pays.
    assert du(tmp_path / "dict" / "tokens") < du(tmp_path / "plain" / "tokens")
    # Too few records to train on: plain zstd, still exact.
    small = pa.table({"t": pa.array([[1, 2], [], [3]], pa.list_(pa.int32()))})
    pq.write_table(small, tmp_path / "s.parquet")
    convert_parquet(tmp_path / "s.parquet", tmp_path / "small", codec="zstd_dict")
    with Ragged.open(tmp_path / "small" / "t") as rg:
        assert rg.codec == "zstd"
        assert [r.tolist() for r in rg[:]] == [[1, 2], [], [3]]


def assert_records(rg: Ragged, expected: list[np.ndarray]) -> None:
    got = rg[:]
    assert len(got) == len(expected)
    for g, t in zip(got, expected):
        np.testing.assert_array_equal(g, t)


def du(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def test_parquet_batch_by_batch(tmp_path: Path) -> None:
    table, tokens = token_table(500, seed=7)
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=64)
    seen = []
    counts = convert_parquet(
        tmp_path / "t.parquet",
        tmp_path / "out",
        codec="zstd",
        batch_bytes=2000,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert set(counts.values()) == {500}
    assert len(seen) > 3 and seen[-1] == (500, 500)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    check_tokens(tmp_path / "out", table, tokens)


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_arrow_ipc(tmp_path: Path, kind: str) -> None:
    table, tokens = token_table(200, seed=8)
    path = tmp_path / "t.arrow"
    opener = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
    with pa.OSFile(str(path), "wb") as sink, opener(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=33):
            writer.write_batch(batch)
            writer.write_batch(batch.slice(0, 0))  # empty batches are legal
    convert_path(path, tmp_path / "out", codec="lz4")
    check_tokens(tmp_path / "out", table, tokens)


def test_parquet_refusals_name_the_column_and_row(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1, 2], "name": ["a", "b"]}), tmp_path / "s.parquet")
    with pytest.raises(ConversionError, match="'name'"):
        convert_parquet(tmp_path / "s.parquet", tmp_path / "out", codec="zstd")
    pq.write_table(pa.table({"..": [1, 2]}), tmp_path / "dots.parquet")
    with pytest.raises(ConversionError, match="cannot name a store"):
        convert_parquet(tmp_path / "dots.parquet", tmp_path / "out", codec="zstd")
    assert not (tmp_path / "meta.zr").exists()
    pq.write_table(pa.table({"x": pa.array([1, None, 3])}), tmp_path / "n.parquet")
    with pytest.raises(ConversionError, match="null"):
        convert_parquet(tmp_path / "n.parquet", tmp_path / "out", codec="zstd")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path, "out") == []


def _cut(path: Path, keep: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(keep)


def _damaged_sources(root: Path) -> dict[str, tuple[Path, str]]:
    """Files the converters cannot read, with a phrase the refusal carries."""
    a = np.arange(4000, dtype=np.int64).reshape(1000, 4)
    made: dict[str, tuple[Path, str]] = {}
    np.save(root / "cut.npy", a)
    _cut(root / "cut.npy", 5000)
    made["truncated npy"] = (root / "cut.npy", "cannot read")
    np.save(root / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    made["object npy"] = (root / "obj.npy", "Python objects")
    np.savez(root / "cut.npz", x=a, y=a[:, 0])
    _cut(root / "cut.npz", 20000)
    made["truncated npz"] = (root / "cut.npz", "cannot read")
    np.savez_compressed(root / "cutc.npz", x=a, y=a[:, 0])
    _cut(root / "cutc.npz", (root / "cutc.npz").stat().st_size // 2)
    made["truncated compressed npz"] = (root / "cutc.npz", "cannot read")
    table = pa.table({"x": a[:, 0], "y": a[:, 1]})
    pq.write_table(table, root / "cut.parquet")
    _cut(root / "cut.parquet", (root / "cut.parquet").stat().st_size - 100)
    made["truncated parquet"] = (root / "cut.parquet", "cannot read")
    pq.write_table(table, root / "holed.parquet")
    data = (root / "holed.parquet").read_bytes()
    (root / "holed.parquet").write_bytes(data[: len(data) // 2] + data[len(data) // 2 + 50 :])
    made["damaged parquet"] = (root / "holed.parquet", "cannot read")
    twice = pa.Table.from_arrays([pa.array(a[:, 0]), pa.array(a[:, 1])], names=["x", "x"])
    pq.write_table(twice, root / "twice.parquet")
    made["duplicate parquet columns"] = (root / "twice.parquet", "'x' appears 2 times")
    pq.write_table(pa.table({}), root / "none.parquet")
    made["parquet with no columns"] = (root / "none.parquet", "no columns")
    return made


@pytest.mark.parametrize(
    "case",
    [
        "truncated npy",
        "object npy",
        "truncated npz",
        "truncated compressed npz",
        "truncated parquet",
        "damaged parquet",
        "duplicate parquet columns",
        "parquet with no columns",
    ],
)
def test_a_source_that_cannot_be_read_is_refused_naming_the_file(tmp_path: Path, case: str) -> None:
    # NumPy and pyarrow errors came through without the file's name (or,
    # for a Parquet file with no columns, an empty output was written).
    source, phrase = _damaged_sources(tmp_path)[case]
    with pytest.raises(ConversionError, match=phrase) as caught:
        convert_path(source, tmp_path / "out", codec="zstd")
    assert str(source) in str(caught.value), caught.value
    assert not (tmp_path / "out").exists() and leftovers(tmp_path, "out") == []


# --- image folders -------------------------------------------------------------------------


def make_image_folder(root: Path) -> list[tuple[Path, int, np.ndarray]]:
    rng = np.random.default_rng(9)
    made = []
    for label, cls in enumerate(["cat", "dog", "eel"]):
        (root / cls).mkdir(parents=True)
        for i in range(4):
            pic = rng.integers(0, 256, size=(10 + i, 12, 3), dtype=np.uint8)
            path = root / cls / f"{i}.{'png' if i % 2 else 'jpg'}"
            PIL_Image.fromarray(pic).save(path)
            made.append((path, label, pic))
    (root / "dog" / "notes.txt").write_text("not an image")
    return sorted(made, key=lambda m: (m[1], m[0].name))


def test_image_folder_as_encoded_bytes(tmp_path: Path) -> None:
    made = make_image_folder(tmp_path / "imgs")
    counts = convert_image_folder(tmp_path / "imgs", tmp_path / "out", codec="raw", batch_bytes=500)
    assert counts == {"label": 12, "image": 12}
    raw = read_ragged(tmp_path / "out" / "image")
    for got, (path, _, _) in zip(raw, made):
        assert got.tobytes() == path.read_bytes()
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "label"), [m[1] for m in made])
    assert (tmp_path / "out" / "classes.txt").read_text().split() == ["cat", "dog", "eel"]


def test_image_folder_decoded_to_a_fixed_shape(tmp_path: Path) -> None:
    made = make_image_folder(tmp_path / "imgs")
    convert_image_folder(tmp_path / "imgs", tmp_path / "out", codec="zstd", size=(8, 6), workers=3)
    with Dense.open(tmp_path / "out" / "image") as d:
        assert d.item_shape == (8, 6, 3) and d.dtype == np.uint8
        got = d[:]
    for image, (path, _, _) in zip(got, made):
        with PIL_Image.open(path) as img:
            want = np.asarray(img.convert("RGB").resize((6, 8), PIL_Image.Resampling.BILINEAR))
        np.testing.assert_array_equal(image, want)
    np.testing.assert_array_equal(read_dense(tmp_path / "out" / "label"), [m[1] for m in made])


def test_image_folder_with_a_broken_image_names_it(tmp_path: Path) -> None:
    make_image_folder(tmp_path / "imgs")
    (tmp_path / "imgs" / "eel" / "broken.png").write_bytes(b"not a png at all")
    with pytest.raises(ConversionError, match="broken.png"):
        convert_image_folder(tmp_path / "imgs", tmp_path / "out", codec="zstd", size=(4, 4))
    assert not (tmp_path / "out").exists() and leftovers(tmp_path, "out") == []


# --- WebDataset ----------------------------------------------------------------------------


def write_shard(path: Path, samples: list[tuple[str, dict[str, bytes]]]) -> None:
    with tarfile.open(path, "w") as tar:
        for key, files in samples:
            for ext, data in files.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_webdataset_shards(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    samples = [
        (f"s{i:04d}", {"jpg": rng.bytes(int(rng.integers(1, 300))), "cls": str(i % 7).encode()})
        for i in range(30)
    ]
    (tmp_path / "shards").mkdir()
    write_shard(tmp_path / "shards" / "a-000.tar", samples[:17])
    write_shard(tmp_path / "shards" / "a-001.tar", samples[17:])
    assert source_kind(tmp_path / "shards") == "webdataset"
    counts = convert_webdataset(tmp_path / "shards", tmp_path / "out", codec="zstd", batch_bytes=700)
    assert counts == {"cls": 30, "jpg": 30}
    jpg = read_ragged(tmp_path / "out" / "jpg")
    cls = read_ragged(tmp_path / "out" / "cls")
    for (key, files), j, c in zip(samples, jpg, cls):
        assert j.tobytes() == files["jpg"], key
        assert c.tobytes() == files["cls"], key


def test_webdataset_sample_missing_an_extension(tmp_path: Path) -> None:
    write_shard(
        tmp_path / "x.tar",
        [("a", {"jpg": b"1", "cls": b"2"}), ("b", {"jpg": b"3"})],
    )
    with pytest.raises(ConversionError, match="'b'"):
        convert_webdataset(tmp_path / "x.tar", tmp_path / "out", codec="zstd")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path, "out") == []


def test_unknown_source(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ConversionError, match="unknown source type .csv"):
        convert_path(tmp_path / "x.csv", tmp_path / "out", codec="zstd")
    with pytest.raises(FileNotFoundError):
        convert_path(tmp_path / "nope.npy", tmp_path / "out", codec="zstd")
    assert sorted(os.listdir(tmp_path)) == ["x.csv"]


# --- Ragged.append_flat, the converters' fast path -----------------------------------------


def test_append_flat_round_trips_gather_flat(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    shapes = rng.integers(1, 5, size=(30, 2))
    sizes = shapes.prod(axis=1)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    flat = rng.standard_normal(int(offsets[-1])).astype(np.float32)
    with Ragged.create(tmp_path / "r", "float32", 2, codec="zstd") as w:
        w.append_flat(flat, offsets[:11], shapes[:10])
        w.append_flat(flat, offsets[10:], shapes[10:])  # offsets not starting at 0
    with Ragged.open(tmp_path / "r") as r:
        got_flat, got_offsets, got_shapes = r.gather_flat(slice(None))
    np.testing.assert_array_equal(got_flat, flat)
    np.testing.assert_array_equal(got_offsets, offsets)
    np.testing.assert_array_equal(got_shapes, shapes)


def test_append_flat_refusals_change_nothing(tmp_path: Path) -> None:
    flat = np.arange(10, dtype=np.int32)
    with Ragged.create(tmp_path / "r", "int32", 1, codec="raw") as w:
        w.append_flat(flat, [0, 3, 10])
        with pytest.raises(ValueError, match="int32"):
            w.append_flat(flat.astype(np.int64), [0, 3])
        with pytest.raises(ValueError, match="non-decreasing"):
            w.append_flat(flat, [0, 5, 4])
        with pytest.raises(ValueError, match="non-decreasing"):
            w.append_flat(flat, [0, 11])
        assert len(w) == 2
    with Ragged.create(tmp_path / "m", "int32", 2, codec="raw") as w:
        with pytest.raises(ValueError, match="pass shapes"):
            w.append_flat(flat, [0, 4])
        with pytest.raises(ValueError, match=r"record 0: shape \(3, 1\)"):
            w.append_flat(flat, [0, 4], [[3, 1]])
        assert len(w) == 0
    with Ragged.open(tmp_path / "r") as r:
        assert [x.tolist() for x in r[:]] == [[0, 1, 2], list(range(3, 10))]


def test_append_flat_refuses_values_out_of_range_naming_them(tmp_path: Path) -> None:
    # Dimensions are stored as 32-bit lengths: a larger one wrapped
    # ([[2**32, 0]] read back as (0, 0)); an empty offsets array was taken
    # as no records; uint64 offsets past int64 were shown as -1.
    flat = np.arange(10, dtype=np.int32)
    with Ragged.create(tmp_path / "m", "int32", 2, codec="zstd") as w:
        for dims in ([[2**32, 0]], [[0, 2**63 - 1]], [[2**64 - 1, 0]], [[2**64, 0]]):
            big = max(dims[0])
            with pytest.raises(ValueError, match=rf"record 0: dimension {big} .*4294967295"):
                w.append_flat(flat, [0, 0], dims)
        assert len(w) == 0
    with Ragged.create(tmp_path / "r", "int32", 1, codec="raw") as w:
        with pytest.raises(ValueError, match="offsets.*empty"):
            w.append_flat(flat, np.array([], dtype=np.int64))
        top = 2**64 - 1
        with pytest.raises(ValueError, match=rf"offsets\[0\] = {top}, outside 0\.\.10"):
            w.append_flat(flat, np.array([top, top], dtype=np.uint64))
        with pytest.raises(ValueError, match=r"offsets\[1\] = 5 is below offsets\[0\] = 7"):
            w.append_flat(flat, np.array([7, 5], dtype=np.uint64))
        assert len(w) == 0
        w.append_flat(flat, np.array([0, 4, 10], dtype=np.uint64))
        w.append_flat(flat, [3])  # one offset: no records
        assert len(w) == 2
    with Ragged.open(tmp_path / "r") as r:
        assert [x.tolist() for x in r[:]] == [[0, 1, 2, 3], list(range(4, 10))]


def test_empty_split_and_null_column(tmp_path: Path) -> None:
    ds = datasets.Dataset.from_dict({"x": np.arange(3, dtype=np.int8), "s": [[1], [2, 3], [4]]})
    counts = convert(datasets.DatasetDict(train=ds, test=ds.select([])), tmp_path / "o", codec="zstd")
    assert counts == {"train/x": 3, "train/s": 3, "test/x": 0, "test/s": 0}
    with Dense.open(tmp_path / "o" / "test" / "x") as d:
        assert len(d) == 0 and d.dtype == np.int8
    nulls = datasets.Dataset.from_dict({"z": [None, None]})
    with pytest.raises(ConversionError, match="column 'z'.*null"):
        convert(nulls, tmp_path / "n", codec="zstd")
    assert not (tmp_path / "n").exists()
