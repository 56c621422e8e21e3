# Verbatim copy of tests/test_loaderx.py from the original loaderx 0.5.4 sdist (MIT, see LICENSE-loaderx-0.5.4 here); do not edit.
"""End-to-end checks for the Python layer against the built shared objects.

Run from the repository root, after `zig build`:

    python3 -m pytest tests/            # if pytest is available
    python3 tests/test_loaderx.py       # standalone, no test runner needed

These exercise the real .so rather than a stub: the two bugs this suite was
written to catch (a shared object without libc deadlocking `std.Thread`, and an
optimized packed-struct store clobbering the on-disk magic) were both invisible
to the Zig test suite.
"""

import os
import sys
import tempfile
import threading

import numpy as np

import importlib.util

# Fall back to the source checkout only when loaderx is not installed, so the
# same file can verify either a working tree or an installed wheel.
if importlib.util.find_spec("loaderx") is None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import loaderx  # noqa: E402
from loaderx import DataLoader, Dataset, Zrecord, ZrecordError, _lib  # noqa: E402
from loaderx._zrecord import MAX_RECORD_LEN  # noqa: E402


def _samples(n=64):
    return (np.arange(n * 3 * 8 * 8, dtype=np.float32).reshape(n, 3, 8, 8) % 17)


def test_fixed_shape_roundtrip():
    with tempfile.TemporaryDirectory() as tmp:
        data = _samples()
        ds = Dataset.write(os.path.join(tmp, "data.zr"), data)

        assert len(ds) == 64
        assert ds.dtype == np.float32 and ds.shape == (3, 8, 8)

        idxs = np.array([63, 0, 31, 7, 7], dtype=np.uint64)
        assert np.array_equal(ds.__getitems__(idxs), data[[63, 0, 31, 7, 7]])
        assert np.array_equal(ds[5], data[5])
        assert np.array_equal(ds[-1], data[63])
        assert np.array_equal(ds[2:9], data[2:9])
        assert np.array_equal(ds[[1, 4, 2]], data[[1, 4, 2]])

        mask = np.zeros(64, dtype=bool)
        mask[[3, 40]] = True
        assert np.array_equal(ds[mask], data[[3, 40]])


def test_reopen_after_write():
    """A store must survive being closed and opened again."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.zr")
        data = _samples()
        Dataset.write(path, data).close()

        ds = Dataset(path)
        assert np.array_equal(ds[np.arange(64)], data)


def test_scalar_labels():
    with tempfile.TemporaryDirectory() as tmp:
        labels = np.arange(64, dtype=np.int32)
        ls = Dataset.write(os.path.join(tmp, "label.zr"), labels)
        assert ls.shape == () and len(ls) == 64
        assert np.array_equal(ls[np.arange(64)], labels)


def test_compression_shrinks_structured_data():
    with tempfile.TemporaryDirectory() as tmp:
        data = _samples()
        ds = Dataset.write(os.path.join(tmp, "data.zr"), data)

        blocks = sum(
            os.stat(os.path.join(ds.path, f)).st_blocks * 512
            for f in os.listdir(ds.path)
            if f.endswith(".zr") and f != "meta.zr"
        )
        # Chunk files are sparse; only allocated blocks reflect what was stored.
        assert 0 < blocks < data.nbytes


def test_incompressible_data_roundtrips():
    """Noise cannot shrink, so it takes the raw fallback — and must still read back."""
    with tempfile.TemporaryDirectory() as tmp:
        noise = np.random.default_rng(0).integers(0, 256, (32, 4096), dtype=np.uint8)
        ds = Dataset.write(os.path.join(tmp, "noise.zr"), noise)
        assert np.array_equal(ds[np.arange(32)], noise)


def test_raw_codec():
    with tempfile.TemporaryDirectory() as tmp:
        data = _samples()
        ds = Dataset.write(os.path.join(tmp, "raw.zr"), data, codec="raw")
        assert np.array_equal(ds[np.arange(64)], data)


def test_append_to_existing_store():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.zr")
        data = _samples()
        Dataset.write(path, data).close()
        ds = Dataset.write(path, data)

        assert len(ds) == 128
        assert np.array_equal(ds[np.arange(64, 128)], data)


def test_errors():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.zr")
        data = _samples()
        ds = Dataset.write(path, data)

        try:
            ds[999]
            raise AssertionError("expected out-of-range to raise")
        except ZrecordError as e:
            assert e.code == -3

        for bad in (
            lambda: Dataset.write(path, data.astype(np.float64)),
            lambda: Dataset.write(os.path.join(tmp, "big.zr"),
                                  np.zeros((2, MAX_RECORD_LEN + 1), dtype=np.uint8)),
        ):
            try:
                bad()
                raise AssertionError("expected ValueError")
            except ValueError:
                pass

        try:
            Dataset(os.path.join(tmp, "absent.zr"))
            raise AssertionError("expected FileNotFoundError")
        except FileNotFoundError:
            pass


def _tags(ds):
    """Every live sample reduced to its identifying first element, sorted."""
    return sorted(int(row.flat[0]) for row in ds[np.arange(len(ds))])


def test_delete_keeps_index_space_dense():
    with tempfile.TemporaryDirectory() as tmp:
        # Each sample is identified by its first element.
        data = np.repeat(np.arange(20, dtype=np.int32)[:, None], 64, axis=1)
        ds = Dataset.write(os.path.join(tmp, "data.zr"), data)

        ds.delete([19, 3, 3, 11])  # tail, interior, duplicate
        assert len(ds) == 17

        assert _tags(ds) == [i for i in range(20) if i not in (3, 11, 19)]

        # Every index below the new length must address a live sample.
        assert ds[np.arange(len(ds))].shape == (17, 64)
        try:
            ds[17]
            raise AssertionError("expected the old tail index to be gone")
        except ZrecordError as e:
            assert e.code == -3


def test_delete_then_append():
    with tempfile.TemporaryDirectory() as tmp:
        data = np.repeat(np.arange(10, dtype=np.int32)[:, None], 64, axis=1)
        path = os.path.join(tmp, "data.zr")
        ds = Dataset.write(path, data[:8])
        ds.delete([1, 2, 3])
        ds.close()

        more = Dataset.write(path, data[8:])
        assert len(more) == 7
        assert _tags(more) == [0, 4, 5, 6, 7, 8, 9]


def test_compact_reclaims_space():
    with tempfile.TemporaryDirectory() as tmp:
        data = np.repeat(np.arange(200, dtype=np.int32)[:, None], 512, axis=1)
        ds = Dataset.write(os.path.join(tmp, "data.zr"), data)

        ds.delete(list(range(0, 200, 2)))
        assert len(ds) == 100
        before = _tags(ds)

        dirty = ds.stats()
        assert dirty["reclaimable"] > 0

        ds.compact()
        clean = ds.stats()

        assert clean["records"] == 100
        assert clean["live_bytes"] == dirty["live_bytes"]
        assert clean["chunk_bytes"] < dirty["chunk_bytes"]
        assert clean["reclaimable"] < dirty["reclaimable"]

        # Contents are unchanged by the move, and the store still works.
        assert _tags(ds) == before
        ds.compact()  # idempotent
        assert _tags(ds) == before


def test_compact_survives_reopen():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.zr")
        data = np.repeat(np.arange(40, dtype=np.int32)[:, None], 256, axis=1)

        ds = Dataset.write(path, data)
        ds.delete(list(range(0, 40, 3)))
        expected = _tags(ds)
        ds.compact()
        ds.close()

        reopened = Dataset(path)
        assert len(reopened) == len(expected)
        assert _tags(reopened) == expected


def test_ragged_records():
    with tempfile.TemporaryDirectory() as tmp:
        blobs = [bytes([i % 251]) * (100 + i * 13) for i in range(40)]
        flat = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        lens = np.array([len(b) for b in blobs], dtype=np.uint32)
        offsets = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.uint64)

        with Zrecord(os.path.join(tmp, "ragged.zr")) as zr:
            zr.append_var(flat, offsets, lens)
            assert len(zr) == 40
            assert np.array_equal(zr.lengths(np.arange(40)), lens)

            out = np.empty(flat.size, dtype=np.uint8)
            zr.gather_var(np.arange(40, dtype=np.uint64), out, offsets)
            assert np.array_equal(out, flat)

            zr.delete([0, 1])


def test_dataloader():
    with tempfile.TemporaryDirectory() as tmp:
        data = _samples()
        labels = np.arange(64, dtype=np.int32)
        loader = DataLoader(
            Dataset.write(os.path.join(tmp, "data.zr"), data),
            Dataset.write(os.path.join(tmp, "label.zr"), labels),
            num_workers=3,
            batch_size=16,
        )
        for i, batch in enumerate(loader):
            assert batch["data"].shape == (16, 3, 8, 8)
            assert batch["label"].shape == (16,)
            if i >= 20:
                break


def test_concurrent_gathers():
    """The loader fans out over threads; gathers must stay independent."""
    with tempfile.TemporaryDirectory() as tmp:
        data = _samples()
        ds = Dataset.write(os.path.join(tmp, "data.zr"), data)
        errors = []

        def hammer():
            try:
                for _ in range(50):
                    k = np.random.randint(0, 64, size=32).astype(np.uint64)
                    if not np.array_equal(ds.__getitems__(k), data[k.astype(int)]):
                        errors.append("gathered rows do not match source")
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))

        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors


if __name__ == "__main__":
    print(f"loaderx  {os.path.dirname(loaderx.__file__)}")
    print(f"library  {_lib.path('zrecord')}\n")

    failed = []
    for name, fn in sorted(globals().items()):
        if not name.startswith("test_") or not callable(fn):
            continue
        try:
            fn()
            print(f"  ok   {name}")
        except Exception as exc:  # noqa: BLE001
            failed.append(name)
            print(f"  FAIL {name}: {exc!r}")
    print(f"\n{len(failed)} failed" if failed else "\nall passed")
    sys.exit(1 if failed else 0)
