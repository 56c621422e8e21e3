"""What this package's 2.8 ``Loader`` and ``loaderx.sampler.Sampler`` do
beyond 2.8's documented behaviour (that part is tests/test_api28.py): the
native engine behind them, the sampler's position, 2-D ragged shards,
closing under load, and the sampler stream against the engine's."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from loaderx import Allocator, Loader, _native, dtypes
from loaderx._loader28 import _ShardedNative
from loaderx._transform import TransformStage
from loaderx.sampler import Sampler
from loaderx.zrecord import DenseStore, DenseWriter, RaggedBatch, RaggedStore, RaggedWriter


def _np(t: object) -> np.ndarray:
    return np.from_dlpack(t)


@pytest.fixture
def stores(tmp_path):
    values = np.arange(64 * 4, dtype=dtypes.float32).reshape(64, 4)
    with DenseWriter(tmp_path / "x", values.dtype, (4,), codec="zstd") as w:
        w.append(values)
    # Two-axis ragged records: record i is (i % 3 + 1, 2).
    recs = [np.full((i % 3 + 1, 2), i, dtype=dtypes.int16) for i in range(64)]
    with RaggedWriter(tmp_path / "r", dtypes.int16, ndim=2, codec="raw") as w:
        w.append(RaggedBatch.from_records(recs))
    dense, ragged = DenseStore(tmp_path / "x"), RaggedStore(tmp_path / "r")
    yield values, recs, dense, ragged
    dense.close()
    ragged.close()


def test_cyclic_is_the_native_cyclic_mode() -> None:
    s = Sampler(100, 7, Sampler.Mode.CYCLIC, seed=4)
    native = _native.Sampler(100, 7, 3, 4)
    out = np.empty(7, dtype=np.uint64)
    for _ in range(30):
        native.fill(out)
        np.testing.assert_array_equal(s.next(), out)
    assert s.step == 30 and s.length == 100 and s.batch_size == 7 and s.seed == 4
    assert s.mode is Sampler.Mode.CYCLIC
    assert "CYCLIC" in repr(s)


def test_native_engine_starts_at_the_sampler_step_and_moves_it(stores) -> None:
    values, recs, dense, ragged = stores
    allocator = Allocator("cpu")
    streams = {"x": [dense.bind(allocator)] * 2, "r": [ragged.bind(allocator)] * 2}
    replay = Sampler(64, 8, Sampler.Mode.IID, seed=1)
    expected = [replay.next().copy() for _ in range(20)]
    sampler = Sampler(64, 8, Sampler.Mode.IID, seed=1)
    sampler.seek(5)
    with Loader(streams, sampler, workers=2, prefetch=3) as loader:
        assert isinstance(loader._engine, _ShardedNative)
        for k in range(5, 12):
            step = next(loader)
            assert sampler.step == k + 1  # the sampler stands after the batch delivered
            idxs = expected[k].astype(np.int64)
            for p, shard in enumerate(step):
                want = idxs[p * 4:(p + 1) * 4]
                np.testing.assert_array_equal(_np(shard["x"]), values[want])
                batch = shard["r"]
                assert _np(batch.shapes).tolist() == [[i % 3 + 1, 2] for i in want]
                assert _np(batch.cu_seqlens)[0] == 0
                for got, i in zip(batch.to_tensors(), want):
                    np.testing.assert_array_equal(_np(got), recs[i])
    assert loader.sampler is None


def test_transform_runs_on_the_stage_thread(stores) -> None:
    values, _recs, dense, _ragged = stores
    allocator = Allocator("cpu")
    threads = set()

    def where(step):
        threads.add(threading.get_ident())
        return [_np(s["x"]).copy() for s in step]

    sampler = Sampler(64, 4, Sampler.Mode.SEQUENTIAL)
    with Loader({"x": [dense.bind(allocator)]}, sampler, workers=1, transform=where) as loader:
        assert isinstance(loader._engine, TransformStage)
        for k in range(4):
            np.testing.assert_array_equal(next(loader)[0], values[k * 4:(k + 1) * 4])
    assert threading.get_ident() not in threads


def test_transform_runs_on_workers_threads_at_once_in_order(stores) -> None:
    """With ``workers=3`` three batches are transformed at the same time
    (each transform waits at a barrier only the three together pass: one
    stage thread would break it), and the steps still come in sampler
    order, whichever transform finishes first."""
    values, _recs, dense, _ragged = stores
    allocator = Allocator("cpu")
    barrier = threading.Barrier(3, timeout=30)
    threads = set()

    def together(step):
        arr = _np(step[0]["x"]).copy()
        threads.add(threading.get_ident())
        if int(arr[0, 0]) in (0, 16, 32):  # the first three batches
            barrier.wait()
        # Batches 0, 3, 6, ... finish after the two that follow them.
        time.sleep(0.05 if int(arr[0, 0]) % 48 == 0 else 0.0)
        return arr

    sampler = Sampler(64, 4, Sampler.Mode.SEQUENTIAL)
    with Loader({"x": [dense.bind(allocator)]}, sampler, workers=3, prefetch=2,
                transform=together) as loader:
        for k in range(30):
            np.testing.assert_array_equal(next(loader), values[(k % 16) * 4:(k % 16 + 1) * 4])
        assert loader.sampler.step == 30
        barrier.abort()  # the third epoch's first batches, made ahead, wait there too
    assert len(threads) == 3 and threading.get_ident() not in threads


def test_a_failing_transform_among_parallel_ones_raises_in_its_place(stores) -> None:
    """Of batches transformed at once, the one whose transform raises is
    raised by ``next()`` after the batches before it, and closes the
    loader (2.8's rule)."""
    values, _recs, dense, _ragged = stores
    allocator = Allocator("cpu")

    def failing(step):
        arr = _np(step[0]["x"]).copy()
        if int(arr[0, 0]) == 5 * 16:  # the sixth batch
            raise ValueError("bad batch 5")
        time.sleep(0.01)
        return arr

    sampler = Sampler(64, 4, Sampler.Mode.SEQUENTIAL)
    loader = Loader({"x": [dense.bind(allocator)]}, sampler, workers=4, transform=failing)
    for k in range(5):
        np.testing.assert_array_equal(next(loader), values[k * 4:(k + 1) * 4])
    with pytest.raises(ValueError, match="bad batch 5"):
        next(loader)
    with pytest.raises(StopIteration):
        next(loader)
    loader.close()


def test_other_views_or_samplers_run_on_the_stage_threads(stores) -> None:
    """A sampler of another kind, or one stream's views over several
    stores, is served by the stage threads: steps drawn in turn (a sampler
    lending one buffer for every step is copied), gathered and transformed
    off the consumer's thread, several at once, handed out in order."""
    values, _recs, dense, _ragged = stores
    allocator = Allocator("cpu")

    class Lending:
        """Fills and returns the same buffer at every step."""

        def __init__(self) -> None:
            self.buf = np.zeros(4, dtype=np.uint64)
            self.step = 0

        def next(self):
            self.buf[:] = (np.arange(4) * 7 + self.step) % 64
            self.step += 1
            return self.buf

    threads = set()

    def where(step):
        threads.add(threading.get_ident())
        return [_np(s["x"]).copy() for s in step]

    sampler = Lending()
    with Loader({"x": [dense.bind(allocator)] * 2}, sampler, workers=3, transform=where) as loader:
        assert isinstance(loader._engine, TransformStage)
        for k in range(40):
            want = (np.arange(4) * 7 + k) % 64
            first, second = next(loader)
            np.testing.assert_array_equal(first, values[want[:2]])
            np.testing.assert_array_equal(second, values[want[2:]])
        assert sampler.step >= 40  # drawn ahead, by at most prefetch + workers
        assert sampler.step <= 40 + 4 + 3
    assert threads and threading.get_ident() not in threads
    # Views of one stream over two stores of the same path.
    other = DenseStore(dense.path)
    sampler2 = Sampler(64, 4, Sampler.Mode.SEQUENTIAL)
    views = [dense.bind(allocator), other.bind(allocator)]
    with Loader({"x": views}, sampler2, workers=2) as loader:
        assert isinstance(loader._engine, TransformStage)
        for k in range(20):
            step = next(loader)
            lo = (k % 16) * 4
            np.testing.assert_array_equal(_np(step[0]["x"]), values[lo:lo + 2])
            np.testing.assert_array_equal(_np(step[1]["x"]), values[lo + 2:lo + 4])
    other.close()


def test_a_failing_draw_on_the_stage_threads_raises_in_its_place(stores) -> None:
    """A sampler whose ``next()`` raises at one step: the steps before it
    are delivered, then its error, and the loader is closed."""
    values, _recs, dense, _ragged = stores
    allocator = Allocator("cpu")

    class Failing:
        def __init__(self) -> None:
            self.step = 0

        def next(self):
            self.step += 1
            if self.step == 4:
                raise KeyError("no step 3")
            return np.arange(4, dtype=np.uint64) + self.step

    with Loader({"x": [dense.bind(allocator)]}, Failing(), workers=2) as loader:
        for k in range(3):
            np.testing.assert_array_equal(_np(next(loader)[0]["x"]), values[k + 1:k + 5])
        with pytest.raises(KeyError, match="no step 3"):
            next(loader)
        with pytest.raises(StopIteration):
            next(loader)


def test_close_while_a_consumer_waits_and_a_closed_store_fails_the_loader(stores) -> None:
    _values, _recs, dense, _ragged = stores
    allocator = Allocator("cpu")
    blocked = threading.Event()

    def slow(step):
        blocked.set()
        time.sleep(0.3)
        return step

    loader = Loader({"x": [dense.bind(allocator)]}, Sampler(64, 4, 0), workers=1,
                    transform=slow)  # fmt: skip
    blocked.wait(5)
    started = time.monotonic()
    loader.close()
    assert time.monotonic() - started < 5
    with pytest.raises(StopIteration):
        next(loader)

    store = DenseStore(dense.path)
    loader = Loader({"x": [store.bind(allocator)]}, Sampler(64, 4, 0), workers=2, prefetch=1)
    next(loader)
    store.close()
    with pytest.raises(Exception):  # noqa: B017 - the engine's error for a closed store
        for _ in range(10):
            next(loader)
    with pytest.raises(StopIteration):
        next(loader)


def _big_stores(tmp_path):
    # 64 records of 64 KiB: a batch of 32 (2 MiB) or more is pooled.
    data = np.arange(64 * 16384, dtype=np.float32).reshape(64, 16384)
    with DenseWriter(tmp_path / "big", data.dtype, (16384,), codec="raw") as w:
        w.append(data)
    recs = [np.full(16384 + i, i, dtype=np.float32) for i in range(64)]
    with RaggedWriter(tmp_path / "rbig", dtypes.float32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(recs))
    return data, recs


def test_allocator_pool_reuses_dropped_batches_within_pool_size(tmp_path) -> None:
    data, recs = _big_stores(tmp_path)
    allocator = Allocator("cpu", pool_size=64 << 20)
    assert _native.POOLED_OUTPUT_BYTES <= 32 * 16384 * 4
    with DenseStore(tmp_path / "big") as dense, RaggedStore(tmp_path / "rbig") as ragged:
        view, rview = dense.bind(allocator), ragged.bind(allocator)
        first = view[np.arange(40)]
        ptr = _np(first).ctypes.data
        assert allocator.cached_bytes == 0
        kept = view[np.arange(40)]  # the first is alive: another buffer
        assert _np(kept).ctypes.data != ptr
        del first
        assert allocator.cached_bytes >= 40 * 16384 * 4  # back in the pool
        again = view[np.arange(10, 50)]
        assert _np(again).ctypes.data == ptr  # reused
        np.testing.assert_array_equal(_np(again), data[10:50])
        assert allocator.cached_bytes == 0
        # A capsule held by a consumer keeps the buffer out of the pool.
        held = _np(again)
        del again
        assert allocator.cached_bytes == 0
        del held
        assert allocator.cached_bytes > 0
        # Ragged reads draw from the same pool.
        batch = rview[np.arange(64)]
        for got, want in zip(batch.to_tensors(), recs):
            np.testing.assert_array_equal(_np(got), want)
        del batch, kept
        assert allocator.cached_bytes > 0
        allocator.close()
        assert allocator.cached_bytes == 0
        with pytest.raises(RuntimeError):
            view[0]


def test_acquired_regions_come_from_the_pool_once_nothing_views_them() -> None:
    allocator = Allocator("cpu", pool_size=1 << 20)
    region = allocator.acquire(4000, alignment=256)
    array = region.view(np.int32, (1000,))
    array[:] = np.arange(1000)
    region.close()
    assert allocator.cached_bytes == 0  # `array` still views it
    np.testing.assert_array_equal(array, np.arange(1000))
    del array
    idle = allocator.cached_bytes
    assert idle >= 4096  # back in the pool
    again = allocator.acquire(4096, alignment=256)
    assert allocator.cached_bytes == 0  # reused: nothing idle
    assert again.owner_base_ptr % 256 == 0
    again.close()
    del again
    # A small request takes the smallest idle region that fits, not a large one.
    big, small = allocator.acquire(64 << 10), allocator.acquire(100)
    big_at, small_at = big.owner_base_ptr, small.owner_base_ptr
    del small  # returned first: the most recent idle region is the big one
    del big
    assert allocator.cached_bytes >= (64 << 10) + 128
    tiny = allocator.acquire(50)
    assert tiny.owner_base_ptr == small_at != big_at
    allocator.close()
    assert allocator.cached_bytes == 0


def test_allocator_pool_size_bounds_idle_buffers(tmp_path) -> None:
    _big_stores(tmp_path)
    with DenseStore(tmp_path / "big") as dense:
        none = Allocator("cpu", pool_size=0)
        view = dense.bind(none)
        batch = view[np.arange(40)]
        del batch
        assert none.cached_bytes == 0  # nothing kept
        one = Allocator("cpu", pool_size=48 * 16384 * 4)
        view = dense.bind(one)
        a, b = view[np.arange(40)], view[np.arange(40)]
        del a
        kept = one.cached_bytes
        assert 40 * 16384 * 4 <= kept <= one.pool_size
        del b  # over the budget: the longest idle goes
        assert one.cached_bytes <= one.pool_size
