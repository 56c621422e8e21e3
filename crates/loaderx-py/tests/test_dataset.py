"""Dataset: schema, every indexing form, write/append, maintenance, fork safety."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import allocated_bytes, samples, tagged, tags

from loaderx import MAX_RECORD_LEN, Dataset, ZrecordError


@pytest.fixture
def data() -> np.ndarray:
    return samples(64)


@pytest.fixture
def ds(tmp_path: Path, data: np.ndarray) -> Any:
    with Dataset.write(tmp_path / "data.zr", data) as opened:
        yield opened


# --- schema ---------------------------------------------------------------------


def test_schema_json_exactly_as_documented(tmp_path: Path, data: np.ndarray) -> None:
    Dataset.write(tmp_path / "d", data).close()
    text = (tmp_path / "d" / "schema.json").read_text()
    assert json.loads(text) == {
        "format": "loaderx-zrecord",
        "version": 1,
        "dtype": "<f4",
        "shape": [3, 8, 8],
        "codec": "flate",
    }
    assert text.strip() == (
        '{"format": "loaderx-zrecord", "version": 1, "dtype": "<f4", '
        '"shape": [3, 8, 8], "codec": "flate"}'
    )


def test_scalar_schema_has_empty_shape(tmp_path: Path) -> None:
    ls = Dataset.write(tmp_path / "l", np.arange(10, dtype=">i8"), codec="raw")
    schema = json.loads((tmp_path / "l" / "schema.json").read_text())
    assert schema["shape"] == [] and schema["dtype"] == ">i8" and schema["codec"] == "raw"
    assert ls.shape == () and ls.dtype == np.dtype(">i8")
    assert ls[3] == 3 and ls[[1, 2]].tolist() == [1, 2]


def test_attributes(ds: Dataset, tmp_path: Path) -> None:
    assert len(ds) == 64
    assert ds.dtype == np.float32
    assert ds.shape == (3, 8, 8)
    assert ds.codec == "flate"
    assert ds.path == tmp_path / "data.zr"
    assert isinstance(ds.path, Path)


def test_missing_schema_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Dataset(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="schema.json"):
        Dataset(tmp_path / "empty")


def test_foreign_schema_format_raises_value_error(tmp_path: Path, data: np.ndarray) -> None:
    Dataset.write(tmp_path / "d", data).close()
    schema_path = tmp_path / "d" / "schema.json"
    schema = json.loads(schema_path.read_text())
    schema["format"] = "something-else"
    schema_path.write_text(json.dumps(schema))
    with pytest.raises(ValueError, match="loaderx-zrecord"):
        Dataset(tmp_path / "d")


def test_reads_schema_written_with_indentation(tmp_path: Path, data: np.ndarray) -> None:
    """loaderx 0.5.x wrote the schema with indent=2."""
    Dataset.write(tmp_path / "d", data).close()
    schema_path = tmp_path / "d" / "schema.json"
    schema_path.write_text(json.dumps(json.loads(schema_path.read_text()), indent=2) + "\n")
    with Dataset(tmp_path / "d") as again:
        assert np.array_equal(again[:], data)


# --- indexing -------------------------------------------------------------------


def test_int_and_negative_int(ds: Dataset, data: np.ndarray) -> None:
    assert np.array_equal(ds[5], data[5])
    assert np.array_equal(ds[np.int16(5)], data[5])
    assert np.array_equal(ds[np.uint64(63)], data[63])
    assert np.array_equal(ds[-1], data[63])
    assert np.array_equal(ds[-64], data[0])
    assert ds[0].shape == (3, 8, 8)


def test_out_of_range_int_raises_code_3(ds: Dataset) -> None:
    for bad in (64, 999, -65):
        with pytest.raises(ZrecordError) as info:
            ds[bad]
        assert info.value.code == -3
        assert str(bad) in str(info.value)


@pytest.mark.parametrize(
    "sl",
    [slice(2, 9), slice(None), slice(None, None, -1), slice(1, 60, 7), slice(-5, None), slice(10, 3), slice(100, 200)],
)
def test_slices(ds: Dataset, data: np.ndarray, sl: slice) -> None:
    got = ds[sl]
    assert got.shape == data[sl].shape
    assert np.array_equal(got, data[sl])


def test_list_and_int_arrays(ds: Dataset, data: np.ndarray) -> None:
    assert np.array_equal(ds[[1, 4, 2]], data[[1, 4, 2]])
    for dtype in (np.int8, np.int32, np.int64, np.uint16, np.uint64):
        idx = np.array([63, 0, 31, 7, 7], dtype=dtype)
        assert np.array_equal(ds[idx], data[idx.astype(int)])
    assert ds[[]].shape == (0, 3, 8, 8)
    assert np.array_equal(ds[[-1, -2, 0]], data[[-1, -2, 0]])


def test_bool_mask(ds: Dataset, data: np.ndarray) -> None:
    mask = np.zeros(64, dtype=bool)
    mask[[3, 40]] = True
    assert np.array_equal(ds[mask], data[[3, 40]])
    assert ds[np.zeros(64, bool)].shape == (0, 3, 8, 8)
    with pytest.raises(IndexError):
        ds[np.ones(10, bool)]


def test_tuple_indexes_into_samples(ds: Dataset, data: np.ndarray) -> None:
    assert np.array_equal(ds[5, 1], data[5, 1])
    assert np.array_equal(ds[2:6, 0, 3], data[2:6, 0, 3])
    assert np.array_equal(ds[[1, 3], :, 2:4], data[[1, 3], :, 2:4])


def test_out_of_range_batches_raise_code_3(ds: Dataset) -> None:
    for bad in ([0, 64], np.array([5, -70]), [1000]):
        with pytest.raises(ZrecordError) as info:
            ds[bad]
        assert info.value.code == -3


def test_getitems_hook(ds: Dataset, data: np.ndarray) -> None:
    idxs = np.array([63, 0, 31, 7, 7], dtype=np.uint64)
    assert np.array_equal(ds.__getitems__(idxs), data[[63, 0, 31, 7, 7]])
    assert np.array_equal(ds.__getitems__([3, 2]), data[[3, 2]])
    out = ds.__getitems__([1, 2, 3])
    assert out.flags.c_contiguous and out.flags.writeable and out.dtype == np.float32


def test_non_integer_indices_raise_type_error(ds: Dataset) -> None:
    for bad in (1.5, "a", [0.5, 1.0], None):
        with pytest.raises((TypeError, IndexError)):
            ds[bad]


def test_iteration(tmp_path: Path) -> None:
    data = tagged(5, 4)
    with Dataset.write(tmp_path / "d", data) as ds:
        assert [int(row[0]) for row in ds] == [0, 1, 2, 3, 4]


# --- write ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "flate", "zstd", "lz4"])
def test_write_every_codec_roundtrip(tmp_path: Path, data: np.ndarray, codec: str) -> None:
    with Dataset.write(tmp_path / codec, data, codec=codec) as ds:
        assert ds.codec == codec
        assert np.array_equal(ds[np.arange(64)], data)
    with Dataset(tmp_path / codec) as ds:
        assert np.array_equal(ds[:], data)


@pytest.mark.parametrize(
    "dtype", [np.uint8, np.int16, np.float16, np.float64, np.complex64, np.bool_, ">u4", "<U3", "S5"]
)
def test_write_many_dtypes(tmp_path: Path, dtype: Any) -> None:
    src = np.arange(30).reshape(10, 3).astype(dtype)
    with Dataset.write(tmp_path / "d", src) as ds:
        assert ds.dtype == np.dtype(dtype)
        assert np.array_equal(ds[:], src)


def test_write_accepts_lists_and_non_contiguous_arrays(tmp_path: Path) -> None:
    with Dataset.write(tmp_path / "a", [[1, 2], [3, 4]]) as ds:
        assert ds[:].tolist() == [[1, 2], [3, 4]]
    base = np.arange(40, dtype=np.int64).reshape(10, 4)
    with Dataset.write(tmp_path / "b", base[::2, ::2]) as ds:
        assert np.array_equal(ds[:], base[::2, ::2])


def test_write_streams_bounded_chunks(tmp_path: Path) -> None:
    """Every block handed to the store is at most `chunk_bytes` (but at least one sample)."""

    class Recording(np.ndarray):
        seen: list[int] = []

        def __getitem__(self, key: Any) -> Any:
            out = super().__getitem__(key)
            if isinstance(key, slice):
                Recording.seen.append(len(out))
            return out

    src = tagged(1000, 16).view(Recording)  # 64-byte samples
    Recording.seen = []
    with Dataset.write(tmp_path / "d", src, chunk_bytes=64 * 30 + 7) as ds:
        assert len(ds) == 1000
        assert tags(ds) == list(range(1000))
    assert Recording.seen and max(Recording.seen) == 30
    assert sum(Recording.seen) == 1000

    Recording.seen = []
    Dataset.write(tmp_path / "e", src, chunk_bytes=1).close()
    assert set(Recording.seen) == {1}


def test_write_from_memory_mapped_npy(tmp_path: Path) -> None:
    npy = tmp_path / "src.npy"
    mm = np.lib.format.open_memmap(npy, mode="w+", dtype=np.uint8, shape=(500, 3, 16, 16))
    for i in range(500):
        mm[i] = i % 251
    mm.flush()
    del mm
    src = np.load(npy, mmap_mode="r")
    with Dataset.write(tmp_path / "d", src, codec="zstd", chunk_bytes=1 << 16) as ds:
        assert len(ds) == 500 and ds.shape == (3, 16, 16)
        assert np.array_equal(ds[::37], src[::37])


def test_write_appends_to_existing(tmp_path: Path, data: np.ndarray) -> None:
    path = tmp_path / "d"
    Dataset.write(path, data).close()
    with Dataset.write(path, data[:10]) as ds:
        assert len(ds) == 74
        assert np.array_equal(ds[64:], data[:10])
        assert np.array_equal(ds[:64], data)


def test_append_keeps_existing_codec(tmp_path: Path, data: np.ndarray) -> None:
    path = tmp_path / "d"
    Dataset.write(path, data, codec="raw").close()
    with Dataset.write(path, data, codec="zstd") as ds:
        assert ds.codec == "raw"
        assert json.loads((path / "schema.json").read_text())["codec"] == "raw"
        assert ds.stats()["live_bytes"] == 2 * data.nbytes


def test_append_with_different_dtype_or_shape_raises(tmp_path: Path, data: np.ndarray) -> None:
    path = tmp_path / "d"
    Dataset.write(path, data).close()
    with pytest.raises(ValueError, match="cannot append"):
        Dataset.write(path, data.astype(np.float64))
    with pytest.raises(ValueError, match="cannot append"):
        Dataset.write(path, data.reshape(64, 3, 64))
    with Dataset(path) as ds:
        assert len(ds) == 64


def test_write_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="byte record limit"):
        Dataset.write(tmp_path / "big", np.zeros((2, MAX_RECORD_LEN + 1), np.uint8))
    with pytest.raises(ValueError, match="0-d"):
        Dataset.write(tmp_path / "scalar", np.float32(3.0))
    with pytest.raises(ValueError, match="codec"):
        Dataset.write(tmp_path / "codec", np.zeros((2, 2)), codec="snappy")
    with pytest.raises(ValueError, match="zero bytes"):
        Dataset.write(tmp_path / "empty-sample", np.zeros((4, 0)))
    with pytest.raises(ValueError, match="objects"):
        Dataset.write(tmp_path / "objects", np.array([object(), object()]))
    for name in ("big", "scalar", "codec", "empty-sample", "objects"):
        assert not (tmp_path / name / "schema.json").exists(), name


def test_write_sample_exactly_at_limit(tmp_path: Path) -> None:
    src = np.zeros((2, MAX_RECORD_LEN), np.uint8)
    src[1] = 1
    with Dataset.write(tmp_path / "d", src, codec="raw") as ds:
        assert np.array_equal(ds[:], src)


def test_write_zero_samples(tmp_path: Path) -> None:
    with Dataset.write(tmp_path / "d", np.zeros((0, 4), np.int16)) as ds:
        assert len(ds) == 0 and ds.shape == (4,)
        assert ds[:].shape == (0, 4)


def test_compression_shrinks_structured_data(tmp_path: Path, data: np.ndarray) -> None:
    with Dataset.write(tmp_path / "d", data) as ds:
        blocks = allocated_bytes(ds.path, "[0-9]*.zr")
        assert 0 < blocks < data.nbytes


# --- delete / compact / stats -----------------------------------------------------


def test_delete_keeps_index_space_dense(tmp_path: Path) -> None:
    with Dataset.write(tmp_path / "d", tagged(20)) as ds:
        ds.delete([19, 3, 3, 11])
        assert len(ds) == 17
        assert tags(ds) == [i for i in range(20) if i not in (3, 11, 19)]
        with pytest.raises(ZrecordError) as info:
            ds[17]
        assert info.value.code == -3


def test_delete_out_of_range_raises_code_3(tmp_path: Path) -> None:
    with Dataset.write(tmp_path / "d", tagged(5)) as ds:
        for bad in ([5], [-1], np.array([0, 99])):
            with pytest.raises(ZrecordError) as info:
                ds.delete(bad)
            assert info.value.code == -3
        assert len(ds) == 5


def test_compact_and_stats(tmp_path: Path) -> None:
    with Dataset.write(tmp_path / "d", tagged(200, 512)) as ds:
        ds.delete(list(range(0, 200, 2)))
        before = tags(ds)
        dirty = ds.stats()
        assert set(dirty) == {"records", "live_bytes", "chunk_bytes", "reclaimable"}
        assert dirty["records"] == 100 and dirty["reclaimable"] > 0
        ds.compact()
        clean = ds.stats()
        assert clean["live_bytes"] == dirty["live_bytes"]
        assert clean["chunk_bytes"] < dirty["chunk_bytes"]
        assert tags(ds) == before
    with Dataset(tmp_path / "d") as ds:
        assert tags(ds) == before


# --- lifecycle ------------------------------------------------------------------------


def test_close_idempotent_and_context_manager(tmp_path: Path, data: np.ndarray) -> None:
    with Dataset.write(tmp_path / "d", data) as ds:
        assert len(ds) == 64
    ds.close()
    ds.close()
    with pytest.raises(ValueError, match="closed"):
        ds[0]
    with pytest.raises(ValueError, match="closed"):
        len(ds)


def test_del_releases_the_store(tmp_path: Path, data: np.ndarray) -> None:
    ds = Dataset.write(tmp_path / "d", data)
    del ds
    gc.collect()
    with Dataset(tmp_path / "d") as again:
        assert np.array_equal(again[:], data)


# --- concurrency ------------------------------------------------------------------------


def test_threads_hammering_one_dataset(ds: Dataset, data: np.ndarray) -> None:
    errors: list[str] = []

    def hammer(seed: int) -> None:
        local = np.random.default_rng(seed)
        try:
            for _ in range(100):
                k = local.integers(0, 64, 32)
                if not np.array_equal(ds.__getitems__(k), data[k]):
                    errors.append("gathered rows do not match source")
                i = int(local.integers(-64, 64))
                if not np.array_equal(ds[i], data[i]):
                    errors.append("single sample does not match")
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_reads_parent_dataset(tmp_path: Path) -> None:
    """A Dataset opened (and read in parallel) in the parent works in a forked child."""
    data = (np.arange(4096 * 256, dtype=np.uint32).reshape(4096, 256) * 2654435761) % 977
    with Dataset.write(tmp_path / "d", data.astype(np.uint16)) as ds:
        expected = data.astype(np.uint16)
        # Big batches so the parallel path (and its thread pool) runs before the fork.
        assert np.array_equal(ds[:], expected)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # child: never return into pytest
            code = 1
            try:
                ok = np.array_equal(ds[:], expected) and np.array_equal(
                    ds[np.arange(4095, -1, -3)], expected[::-3]
                )
                code = 0 if ok else 3
            except BaseException:  # noqa: BLE001
                code = 4
            finally:
                os._exit(code)
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("forked child hung reading the dataset (thread pool inherited across fork?)")
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        # And the parent still works after the fork.
        assert np.array_equal(ds[::2], expected[::2])
