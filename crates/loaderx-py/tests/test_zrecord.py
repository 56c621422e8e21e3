"""Zrecord: raw byte records, every member of the 0.5.x API (docs/API.md) and every error code."""

from __future__ import annotations

import gc
import pickle
import shutil
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

import loaderx
from loaderx import MAX_RECORD_LEN, Zrecord, ZrecordError

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def fill(zr: Zrecord, n: int = 32, item: int = 256, codec: str | None = None) -> np.ndarray:
    """Append `n` records of `item` bytes; record i is a ramp starting at i."""
    data = ((np.arange(n)[:, None] + np.arange(item)[None, :]) % 251).astype(np.uint8)
    first = zr.append(data, n, item, codec=codec)
    assert first == 0
    return data


# --- opening -----------------------------------------------------------------


def test_open_creates_directory_and_empty_store(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.zr"
    with Zrecord(path) as zr:
        assert len(zr) == 0
        assert zr.stats() == {"records": 0, "live_bytes": 0, "chunk_bytes": 0, "reclaimable": 0}
    assert (path / "meta.zr").is_file()


def test_open_accepts_str_and_pathlike(tmp_path: Path) -> None:
    with Zrecord(str(tmp_path / "s")) as a, Zrecord(tmp_path / "p") as b:
        assert len(a) == len(b) == 0


def test_unknown_codec_raises_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bogus"):
        Zrecord(tmp_path / "x", codec="bogus")
    with Zrecord(tmp_path / "y") as zr:
        with pytest.raises(ValueError, match="gzip"):
            zr.append(np.zeros(8, np.uint8), 1, 8, codec="gzip")
        assert len(zr) == 0


def test_codecs_constant() -> None:
    assert {"raw", "flate", "zstd", "lz4"} <= set(loaderx.CODECS)
    assert loaderx.CODECS["raw"] == 0 and loaderx.CODECS["flate"] == 1
    assert loaderx.MAX_RECORD_LEN == MAX_RECORD_LEN == 1 << 20


# --- append / gather / lengths ------------------------------------------------


@pytest.mark.parametrize("codec", ["raw", "flate", "zstd", "lz4"])
def test_roundtrip_every_codec(tmp_path: Path, codec: str) -> None:
    with Zrecord(tmp_path / codec, codec=codec) as zr:
        data = fill(zr, n=40, item=1000)
        assert len(zr) == 40
        idxs = np.array([39, 0, 17, 17, 5], dtype=np.uint64)
        out = np.zeros((5, 1000), dtype=np.uint8)
        zr.gather(idxs, out, 1000)
        assert np.array_equal(out, data[idxs.astype(int)])
        assert np.array_equal(zr.lengths(idxs), np.full(5, 1000, np.uint32))


@pytest.mark.parametrize("codec", ["raw", "flate", "zstd", "lz4"])
def test_incompressible_records_roundtrip(tmp_path: Path, codec: str, rng: np.random.Generator) -> None:
    noise = rng.integers(0, 256, (16, 4096), dtype=np.uint8)
    with Zrecord(tmp_path / codec, codec=codec) as zr:
        zr.append(noise, 16, 4096)
        out = np.empty_like(noise)
        zr.gather(np.arange(16), out, 4096)
        assert np.array_equal(out, noise)
        # Stored raw when the codec cannot shrink it: never more than the data.
        assert zr.stats()["live_bytes"] == noise.nbytes


def test_compressible_records_shrink(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        zr.append(np.zeros((8, 65536), np.uint8), 8, 65536)
        assert zr.stats()["live_bytes"] < 8 * 65536 // 10


def test_append_returns_first_index_of_each_batch(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        assert zr.append(np.ones(30, np.uint8), 3, 10) == 0
        assert zr.append(np.ones(50, np.uint8), 5, 10) == 3
        assert zr.append(np.ones(10, np.uint8), 1, 10, codec="raw") == 8
        assert len(zr) == 9


def test_append_from_any_dtype_and_readonly_source(tmp_path: Path) -> None:
    src = np.arange(24, dtype=np.float64).reshape(4, 6)
    src.flags.writeable = False
    with Zrecord(tmp_path / "z") as zr:
        zr.append(src, 4, 6 * 8)
        out = np.empty((4, 6), np.float64)
        zr.gather(np.arange(4), out, 48)
        assert np.array_equal(out, src)


def test_gather_into_any_dtype_in_place(tmp_path: Path) -> None:
    values = np.arange(20, dtype=np.int32).reshape(5, 4)
    with Zrecord(tmp_path / "z") as zr:
        zr.append(values, 5, 16)
        dst = np.full((3, 4), -1, np.int32)
        before = dst.ctypes.data
        zr.gather([4, 0, 2], dst, 16)
        assert dst.ctypes.data == before
        assert np.array_equal(dst, values[[4, 0, 2]])


def test_gather_with_stride_larger_than_record(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        data = fill(zr, n=4, item=10)
        dst = np.full(4 * 16, 0xEE, np.uint8)
        zr.gather([3, 2, 1, 0], dst, 16)
        slots = dst.reshape(4, 16)
        assert np.array_equal(slots[:, :10], data[::-1])
        assert (slots[:, 10:] == 0xEE).all()  # the gaps are untouched


def test_gather_empty_batch(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=2, item=8)
        zr.gather([], np.empty(0, np.uint8), 8)
        assert zr.lengths([]).shape == (0,)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_idxs_any_integer_dtype(tmp_path: Path, dtype: type) -> None:
    with Zrecord(tmp_path / "z") as zr:
        data = fill(zr, n=10, item=32)
        out = np.empty((3, 32), np.uint8)
        zr.gather(np.array([9, 1, 4], dtype=dtype), out, 32)
        assert np.array_equal(out, data[[9, 1, 4]])
        assert zr.lengths(np.array([2], dtype=dtype)).dtype == np.uint32


def test_idxs_lists_tuples_ranges_and_scalars(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        data = fill(zr, n=10, item=32)
        for idxs in ([9, 1, 4], (9, 1, 4), range(9, 0, -4), [np.int64(9), 1, np.uint8(4)]):
            out = np.empty((3, 32), np.uint8)
            zr.gather(idxs, out, 32)
            assert np.array_equal(out, data[list(idxs)]), idxs
        out = np.empty(32, np.uint8)
        zr.gather(7, out, 32)
        assert np.array_equal(out, data[7])


@pytest.mark.parametrize(
    "bad",
    [[1.0, 2.0], np.array([0.5]), ["a"], [True, False], np.array([True]), [1, "x"], [None]],
)
def test_non_integer_idxs_raise_type_error(tmp_path: Path, bad: object) -> None:
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=4, item=8)
        with pytest.raises(TypeError):
            zr.gather(bad, np.empty(64, np.uint8), 8)
        with pytest.raises(TypeError):
            zr.lengths(bad)
        with pytest.raises(TypeError):
            zr.delete(bad)
        assert len(zr) == 4


def test_lengths_of_ragged_records(tmp_path: Path) -> None:
    lens = np.array([1, 7, 300, 12], np.uint32)
    src = np.arange(lens.sum(), dtype=np.uint64).astype(np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.uint64)
    with Zrecord(tmp_path / "z") as zr:
        assert zr.append_var(src, offsets, lens) == 0
        got = zr.lengths([3, 2, 1, 0])
        assert got.dtype == np.uint32
        assert got.tolist() == [12, 300, 7, 1]


def test_ragged_roundtrip_in_any_order(tmp_path: Path) -> None:
    blobs = [bytes([i % 251]) * (100 + i * 13) for i in range(40)]
    flat = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    lens = np.array([len(b) for b in blobs], dtype=np.uint32)
    offsets = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.uint64)
    with Zrecord(tmp_path / "z", codec="zstd") as zr:
        zr.append_var(flat, offsets, lens, codec="flate")
        order = np.array([5, 39, 0, 5], np.uint64)
        want = b"".join(blobs[i] for i in order)
        out_off = np.concatenate([[0], np.cumsum(lens[order][:-1])]).astype(np.uint64)
        out = np.zeros(len(want), np.uint8)
        zr.gather_var(order, out, out_off)
        assert out.tobytes() == want


def test_append_var_from_overlapping_and_reordered_source(tmp_path: Path) -> None:
    src = np.frombuffer(b"abcdefghij", np.uint8)
    with Zrecord(tmp_path / "z", codec="raw") as zr:
        zr.append_var(src, [5, 0, 2], [5, 3, 8])
        out = np.zeros(16, np.uint8)
        zr.gather_var([0, 1, 2], out, [0, 5, 8])
        assert out.tobytes() == b"fghij" + b"abc" + b"cdefghij"


# --- argument validation in Python ---------------------------------------------


def test_non_contiguous_dst_and_src_raise_value_error(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=4, item=8)
        with pytest.raises(ValueError, match="contiguous"):
            zr.gather([0, 1], np.zeros((2, 16), np.uint8)[:, ::2], 8)
        with pytest.raises(ValueError, match="contiguous"):
            zr.gather_var([0, 1], np.zeros((4, 16), np.uint8)[::2], [0, 8])
        with pytest.raises(ValueError, match="contiguous"):
            zr.append(np.zeros((4, 16), np.uint8)[:, ::2], 4, 8)
        with pytest.raises(ValueError, match="contiguous"):
            zr.append_var(np.zeros((4, 16), np.uint8).T, [0], [8])
        assert len(zr) == 4


def test_read_only_dst_raises_value_error(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=4, item=8)
        dst = np.zeros(16, np.uint8)
        dst.flags.writeable = False
        with pytest.raises(ValueError, match="writable"):
            zr.gather([0, 1], dst, 8)
        with pytest.raises(ValueError, match="writable"):
            zr.gather_var([0, 1], dst, [0, 8])
        with pytest.raises(ValueError, match="writable"):
            zr.gather([0], memoryview(b"12345678"), 8)


def test_buffers_other_than_arrays(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z", codec="raw") as zr:
        zr.append(b"0123456789abcdef", 2, 8)
        dst = bytearray(16)
        zr.gather([1, 0], dst, 8)
        assert bytes(dst) == b"89abcdef01234567"
        with pytest.raises(TypeError):
            zr.gather([0], object(), 8)


def test_object_arrays_are_refused(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        with pytest.raises(TypeError):
            zr.append(np.array([object()] * 8), 1, 8)


def test_negative_counts_raise(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        with pytest.raises(ValueError):
            zr.append(np.zeros(8, np.uint8), -1, 8)
        with pytest.raises(ValueError):
            zr.append(np.zeros(8, np.uint8), 1, -8)
        with pytest.raises(ValueError):
            zr.gather([], np.zeros(8, np.uint8), -1)
        with pytest.raises(ValueError):
            zr.gather_var([0], np.zeros(8, np.uint8), [-1])


def test_mismatched_offsets_raise_value_error(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=4, item=8)
        with pytest.raises(ValueError, match="offsets"):
            zr.gather_var([0, 1, 2], np.zeros(64, np.uint8), [0, 8])
        with pytest.raises(ValueError, match="offsets"):
            zr.append_var(np.zeros(64, np.uint8), [0, 8], [8])
        assert len(zr) == 4


# --- error codes ----------------------------------------------------------------


def test_error_is_runtime_error_with_code_and_picklable() -> None:
    err = ZrecordError(-3)
    assert isinstance(err, RuntimeError)
    assert err.code == -3 and "index out of range" in str(err)
    custom = ZrecordError(-7, "record 4 in 0.zr failed to decode")
    back = pickle.loads(pickle.dumps(custom))
    assert back.code == -7 and str(back) == str(custom)


def test_code_3_index_out_of_range(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=5, item=8)
        dst = np.zeros(16, np.uint8)
        with pytest.raises(ZrecordError, match="12345") as info:
            zr.gather([0, 12345], dst, 8)
        assert info.value.code == -3
        assert (dst == 0).all()  # validated before anything was written
        with pytest.raises(ZrecordError) as info:
            zr.gather_var([5], dst, [0])
        assert info.value.code == -3
        with pytest.raises(ZrecordError) as info:
            zr.lengths([1, 5])
        assert info.value.code == -3
        with pytest.raises(ZrecordError) as info:
            zr.delete([2, 7])
        assert info.value.code == -3
        assert len(zr) == 5  # a failed delete deletes nothing


@pytest.mark.parametrize("dtype", [np.int64, np.int8, list])
def test_code_3_negative_index_names_it(tmp_path: Path, dtype: object) -> None:
    idxs = [1, -4] if dtype is list else np.array([1, -4], dtype=dtype)
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=5, item=8)
        for call in (
            lambda: zr.gather(idxs, np.zeros(16, np.uint8), 8),
            lambda: zr.gather_var(idxs, np.zeros(16, np.uint8), [0, 8]),
            lambda: zr.lengths(idxs),
            lambda: zr.delete(idxs),
        ):
            with pytest.raises(ZrecordError, match="-4") as info:
                call()
            assert info.value.code == -3
        assert len(zr) == 5


def test_code_4_record_too_large_or_empty(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z", codec="raw") as zr:
        big = np.zeros(MAX_RECORD_LEN + 1, np.uint8)
        with pytest.raises(ZrecordError) as info:
            zr.append(big, 1, MAX_RECORD_LEN + 1)
        assert info.value.code == -4
        assert str(MAX_RECORD_LEN + 1) in str(info.value) or str(MAX_RECORD_LEN) in str(info.value)
        with pytest.raises(ZrecordError) as info:
            zr.append_var(big, [0, 0], [8, MAX_RECORD_LEN + 1])
        assert info.value.code == -4
        with pytest.raises(ZrecordError) as info:
            zr.append(np.zeros(8, np.uint8), 1, 0)
        assert info.value.code == -4
        with pytest.raises(ZrecordError) as info:
            zr.append_var(np.zeros(8, np.uint8), [0, 0], [4, 0])
        assert info.value.code == -4
        assert len(zr) == 0
        # Exactly at the limit is fine.
        assert zr.append(big, 1, MAX_RECORD_LEN) == 0
        assert zr.lengths([0]).tolist() == [MAX_RECORD_LEN]


def test_code_6_buffer_too_small(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=4, item=64)
        dst = np.zeros(64 * 2 - 1, np.uint8)
        with pytest.raises(ZrecordError) as info:
            zr.gather([0, 1], dst, 64)
        assert info.value.code == -6
        assert (dst == 0).all()
        with pytest.raises(ZrecordError) as info:
            zr.gather_var([0, 1], np.zeros(100, np.uint8), [0, 64])
        assert info.value.code == -6
        with pytest.raises(ZrecordError) as info:
            zr.append(np.zeros(100, np.uint8), 2, 64)
        assert info.value.code == -6
        with pytest.raises(ZrecordError) as info:
            zr.append_var(np.zeros(100, np.uint8), [0, 50], [50, 51])
        assert info.value.code == -6
        assert len(zr) == 4


def _meta_header(path: Path) -> bytes:
    with open(path / "meta.zr", "rb") as f:
        return f.read(16)


def test_code_8_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "z"
    Zrecord(path).close()
    with open(path / "meta.zr", "r+b") as f:
        f.write(b"NOPE")
    with pytest.raises(ZrecordError) as info:
        Zrecord(path)
    assert info.value.code == -8
    assert "meta.zr" in str(info.value)


def test_code_8_unsupported_version(tmp_path: Path) -> None:
    path = tmp_path / "z"
    Zrecord(path).close()
    header = _meta_header(path)
    assert header[:4] == b"ZREC" and struct.unpack_from("<H", header, 4)[0] == 1
    with open(path / "meta.zr", "r+b") as f:
        f.seek(4)
        f.write(struct.pack("<H", 2))
    with pytest.raises(ZrecordError) as info:
        Zrecord(path)
    assert info.value.code == -8
    assert "version" in str(info.value)


def test_code_2_io_failure(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a directory")
    with pytest.raises(ZrecordError) as info:
        Zrecord(blocker / "store")
    assert info.value.code == -2
    assert "file" in str(info.value)


def test_code_7_corrupt_record(tmp_path: Path) -> None:
    path = tmp_path / "z"
    with Zrecord(path, codec="flate") as zr:
        zr.append(np.zeros((4, 4096), np.uint8), 4, 4096)
        live = zr.stats()["live_bytes"]
        assert live < 4 * 4096  # really compressed, so there is a stream to break
    with open(path / "0.zr", "r+b") as f:
        f.write(b"\xff" * live)
    with Zrecord(path) as zr:
        out = np.zeros((4, 4096), np.uint8)
        with pytest.raises(ZrecordError) as info:
            zr.gather([0, 1, 2, 3], out, 4096)
        assert info.value.code == -7


def test_code_5_store_full(tmp_path: Path) -> None:
    """2^24 one-byte records fill the table; the next append is refused."""
    limit = 1 << 24
    path = tmp_path / "z"
    with Zrecord(path, codec="raw") as zr:
        step = 1 << 22
        block = np.zeros(step, np.uint8)
        for _ in range(limit // step):
            zr.append(block, step, 1)
        assert len(zr) == limit
        with pytest.raises(ZrecordError) as info:
            zr.append(block, 1, 1)
        assert info.value.code == -5
        assert len(zr) == limit
        last = np.full(1, 7, np.uint8)
        zr.gather([limit - 1], last, 1)
        assert last[0] == 0
    shutil.rmtree(path)  # 256 MiB of table: do not leave it behind in /tmp


# --- delete / compact / stats -------------------------------------------------------


def test_delete_swaps_tail_into_holes(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z", codec="raw") as zr:
        zr.append(np.arange(10, dtype=np.uint8), 10, 1)
        zr.delete([2, 9, 2, 0])  # duplicates and any order
        assert len(zr) == 7
        out = np.empty(7, np.uint8)
        zr.gather(np.arange(7), out, 1)
        assert sorted(out.tolist()) == [1, 3, 4, 5, 6, 7, 8]
        zr.delete(np.array([], np.int64))
        assert len(zr) == 7


def test_delete_everything_then_append(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        fill(zr, n=6, item=16)
        zr.delete(range(6))
        assert len(zr) == 0
        assert zr.append(np.ones(16, np.uint8), 1, 16) == 0


def test_compact_reclaims_and_keeps_contents(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z", codec="raw") as zr:
        zr.append(np.repeat(np.arange(200, dtype=np.uint8), 512), 200, 512)
        zr.delete(range(0, 200, 2))
        dirty = zr.stats()
        assert dirty["records"] == 100
        assert dirty["reclaimable"] == dirty["chunk_bytes"] - dirty["live_bytes"] > 0
        out = np.empty((100, 512), np.uint8)
        zr.gather(np.arange(100), out, 512)
        zr.compact()
        clean = zr.stats()
        assert clean["records"] == 100
        assert clean["live_bytes"] == dirty["live_bytes"] == 100 * 512
        assert clean["chunk_bytes"] < dirty["chunk_bytes"]
        assert clean["reclaimable"] == 0
        again = np.empty_like(out)
        zr.gather(np.arange(100), again, 512)
        assert np.array_equal(out, again)
        zr.compact()
        assert zr.stats() == clean


def test_compact_refuses_while_another_handle_is_open(tmp_path: Path) -> None:
    """Compaction moves bytes, so it needs the store to itself (an advisory
    lock shared by every open handle, in any process); it fails with -2
    instead of moving records under another reader."""
    path = tmp_path / "z"
    with Zrecord(path, codec="raw") as zr:
        zr.append(np.arange(64, dtype=np.uint8), 64, 1)
        zr.delete(range(0, 64, 2))
        with Zrecord(path) as other:
            with pytest.raises(ZrecordError) as info:
                zr.compact()
            assert info.value.code == -2
            assert "lock" in str(info.value)
            assert len(other) == 32
        zr.compact()  # alone again: fine
        assert zr.stats()["reclaimable"] == 0


def test_stats_counts(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z", codec="raw") as zr:
        zr.append(np.zeros(300, np.uint8), 3, 100)
        stats = zr.stats()
        assert stats == {"records": 3, "live_bytes": 300, "chunk_bytes": 300, "reclaimable": 0}
        assert all(type(v) is int for v in stats.values())


def test_sync_and_reopen_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "z"
    with Zrecord(path, codec="lz4") as zr:
        data = fill(zr, n=50, item=333)
        zr.sync()
    with Zrecord(path) as zr:
        out = np.empty_like(data)
        zr.gather(np.arange(50), out, 333)
        assert np.array_equal(out, data)


def test_store_codec_mixture(tmp_path: Path) -> None:
    """Each record carries its own codec, so one store may hold all of them."""
    with Zrecord(tmp_path / "z") as zr:
        rows = []
        for i, codec in enumerate(["raw", "flate", "zstd", "lz4"]):
            row = np.full(4096, i, np.uint8)
            zr.append(row, 1, 4096, codec=codec)
            rows.append(row)
        out = np.empty((4, 4096), np.uint8)
        zr.gather([0, 1, 2, 3], out, 4096)
        assert np.array_equal(out, np.stack(rows))


# --- lifecycle -----------------------------------------------------------------


def test_close_is_idempotent_and_later_calls_fail_cleanly(tmp_path: Path) -> None:
    zr = Zrecord(tmp_path / "z")
    fill(zr, n=2, item=8)
    zr.close()
    zr.close()
    with pytest.raises(ValueError, match="closed"):
        len(zr)
    with pytest.raises(ValueError, match="closed"):
        zr.gather([0], np.zeros(8, np.uint8), 8)
    with pytest.raises(ValueError, match="closed"):
        zr.stats()


def test_context_manager_closes(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        assert isinstance(zr, Zrecord)
    with pytest.raises(ValueError):
        len(zr)


def test_del_closes_and_store_reopens(tmp_path: Path) -> None:
    path = tmp_path / "z"
    zr = Zrecord(path)
    fill(zr, n=3, item=8)
    del zr
    gc.collect()
    with Zrecord(path) as again:
        assert len(again) == 3


def test_two_handles_on_one_store_see_appends(tmp_path: Path) -> None:
    path = tmp_path / "z"
    with Zrecord(path) as writer:
        data = fill(writer, n=4, item=8)
        writer.sync()
        with Zrecord(path) as reader:
            out = np.empty_like(data)
            reader.gather(np.arange(4), out, 8)
            assert np.array_equal(out, data)


# --- threads ---------------------------------------------------------------------


def test_threads_hammering_one_store(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z", codec="zstd") as zr:
        data = fill(zr, n=256, item=512)
        errors: list[str] = []

        def hammer(seed: int) -> None:
            local = np.random.default_rng(seed)
            try:
                for _ in range(100):
                    k = local.integers(0, 256, 64)
                    out = np.empty((64, 512), np.uint8)
                    zr.gather(k, out, 512)
                    if not np.array_equal(out, data[k]):
                        errors.append("gathered rows do not match")
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))

        threads = [threading.Thread(target=hammer, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]


def test_appends_while_threads_gather(tmp_path: Path) -> None:
    with Zrecord(tmp_path / "z") as zr:
        first = fill(zr, n=64, item=128)
        stop = threading.Event()
        errors: list[str] = []

        def reader() -> None:
            out = np.empty((16, 128), np.uint8)
            while not stop.is_set():
                try:
                    k = np.random.randint(0, 64, 16)
                    zr.gather(k, out, 128)
                    if not np.array_equal(out, first[k]):
                        errors.append("torn read")
                except Exception as exc:  # noqa: BLE001
                    errors.append(repr(exc))

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            for i in range(50):
                zr.append(np.full((4, 128), i, np.uint8), 4, 128)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors[:3]
        assert len(zr) == 64 + 200


def test_delete_during_concurrent_gathers_never_tears(tmp_path: Path) -> None:
    """Delete waits for in-flight gathers; each gather sees the store either
    before or after a delete, so every gathered row is a whole, live record."""
    with Zrecord(tmp_path / "z", codec="flate") as zr:
        n, item = 2000, 256
        zr.append(np.repeat(np.arange(n, dtype=np.uint16), item // 2).view(np.uint8), n, item)
        deleted: set[int] = set()
        stop = threading.Event()
        errors: list[str] = []

        def reader(seed: int) -> None:
            local = np.random.default_rng(seed)
            out = np.empty((32, item // 2), np.uint16)
            while not stop.is_set():
                try:
                    live = len(zr)
                    k = local.integers(0, max(live, 1), 32)
                    zr.gather(k, out, item)
                except ZrecordError as exc:
                    if exc.code != -3:  # the store shrank between len() and gather
                        errors.append(repr(exc))
                    continue
                except Exception as exc:  # noqa: BLE001
                    errors.append(repr(exc))
                    continue
                rows_uniform = (out == out[:, :1]).all()
                if not rows_uniform:
                    errors.append("torn record")

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        try:
            for step in range(40):
                victims = list(range(step * 7 % 100, len(zr), 97))[:10]
                out = np.empty((len(victims), item // 2), np.uint16)
                zr.gather(victims, out, item)
                deleted.update(int(v) for v in out[:, 0])
                zr.delete(victims)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors[:3]
        remaining = np.empty((len(zr), item // 2), np.uint16)
        zr.gather(np.arange(len(zr)), remaining, item)
        assert sorted(remaining[:, 0].tolist()) == sorted(set(range(n)) - deleted)
