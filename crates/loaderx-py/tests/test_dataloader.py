"""DataLoader: endless batches, transform, errors, shutdown that never hangs."""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from conftest import Consumer, samples, tagged, wait_until_blocked_in_next

from loaderx import DataLoader, Dataset, ZrecordError


def python_workers() -> list[threading.Thread]:
    """Worker threads of the Python engine (duck-typed datasets)."""
    return [t for t in threading.enumerate() if t.name.startswith("loaderx-worker")]


def native_workers() -> int:
    """Worker threads of the native engine, by OS thread name (Linux)."""
    tasks = Path("/proc/self/task")
    count = 0
    for comm in tasks.glob("*/comm"):
        try:
            count += comm.read_text().startswith("loaderx-loader")
        except OSError:  # the thread exited while we looked
            pass
    return count


def eventually(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Poll `condition` (a new OS thread names itself once it first runs)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def loader_threads() -> list[object]:
    return [*python_workers(), *range(native_workers())]


needs_proc = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="counts threads through /proc"
)


def close_within(loader: DataLoader, seconds: float = 60.0) -> None:
    """Close in a helper thread so a hang fails the test instead of stalling it."""
    closer = threading.Thread(target=loader.close)
    closer.start()
    closer.join(seconds)
    assert not closer.is_alive(), "DataLoader.close() hung"


@pytest.fixture
def pair(tmp_path: Path) -> Any:
    data = tagged(40, 8)
    with Dataset.write(tmp_path / "d", data) as ds, Dataset.write(
        tmp_path / "l", np.arange(40, dtype=np.int64)
    ) as ls:
        yield ds, ls


class Table:
    """Duck-typed stand-in for a Dataset: __len__ and __getitems__ only."""

    def __init__(self, values: np.ndarray, fail_on: int | None = None) -> None:
        self.values = values
        self.calls = 0
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.values)

    def __getitems__(self, idxs: Any) -> np.ndarray:
        with self.lock:
            self.calls += 1
            call = self.calls
        if self.fail_on is not None and call >= self.fail_on:
            raise KeyError(f"broken on call {call}")
        return self.values[np.asarray(idxs, dtype=np.int64)]


def test_batches_like_the_original(tmp_path: Path) -> None:
    data = samples()
    labels = np.arange(64, dtype=np.int32)
    with DataLoader(
        Dataset.write(tmp_path / "data.zr", data),
        Dataset.write(tmp_path / "label.zr", labels),
        num_workers=3,
        batch_size=16,
    ) as loader:
        for i, batch in enumerate(loader):
            assert set(batch) == {"data", "label"}
            assert batch["data"].shape == (16, 3, 8, 8) and batch["data"].dtype == np.float32
            assert batch["label"].shape == (16,) and batch["label"].dtype == np.int32
            assert np.array_equal(batch["data"], data[batch["label"]])
            if i >= 20:
                break


def test_data_and_label_gathered_at_same_indices(pair: Any) -> None:
    ds, ls = pair
    with DataLoader(ds, ls, num_workers=4, batch_size=7, mode=1, seed=3) as loader:
        for _ in range(50):
            batch = next(loader)
            assert np.array_equal(batch["data"][:, 0], batch["label"])


def test_sequential_mode_delivers_batches_in_order(pair: Any) -> None:
    ds, ls = pair
    with DataLoader(ds, ls, num_workers=3, batch_size=16, mode=0) as loader:
        for k in range(12):
            want = [(k * 16 + j) % 40 for j in range(16)]
            assert next(loader)["label"].tolist() == want


def test_shuffle_mode_covers_each_epoch(pair: Any) -> None:
    ds, ls = pair
    with DataLoader(ds, ls, num_workers=2, batch_size=8, mode=2, seed=11) as loader:
        seen = np.concatenate([next(loader)["label"] for _ in range(10)])
    assert sorted(seen[:40].tolist()) == list(range(40))
    assert sorted(seen[40:].tolist()) == list(range(40))


def test_same_seed_same_stream(pair: Any) -> None:
    ds, ls = pair
    runs = []
    for _ in range(2):
        with DataLoader(ds, ls, num_workers=4, batch_size=5, seed=9) as loader:
            runs.append([next(loader)["label"].tolist() for _ in range(20)])
    assert runs[0] == runs[1]


def test_transform_is_applied(pair: Any) -> None:
    ds, ls = pair

    def transform(pair: tuple) -> tuple:
        data, label = pair
        return data.astype(np.float64) / 2, label + 100

    with DataLoader(ds, ls, batch_size=4, transform=transform) as loader:
        batch = next(loader)
    assert batch["data"].dtype == np.float64
    assert np.array_equal(batch["data"][:, 0] * 2, batch["label"] - 100)


def test_transform_runs_off_the_consumer_thread(pair: Any) -> None:
    ds, ls = pair
    seen: list[int] = []

    def transform(pair: tuple) -> tuple:
        seen.append(threading.get_ident())
        return pair

    with DataLoader(ds, ls, batch_size=4, transform=transform) as loader:
        for _ in range(5):
            next(loader)
    assert seen and threading.get_ident() not in seen


def test_transform_keeps_sampler_order_and_resumes(pair: Any) -> None:
    ds, ls = pair

    def plus_one(pair: tuple) -> tuple:
        data, label = pair
        return data, label + 1

    with DataLoader(ds, ls, batch_size=5, mode=0) as plain:
        expected = [(next(plain)["label"] + 1).tolist() for _ in range(8)]
    with DataLoader(ds, ls, batch_size=5, mode=0, transform=plus_one, prefetch_size=2) as loader:
        got = [next(loader)["label"].tolist() for _ in range(3)]
        state = loader.state_dict()
        assert state["step"] == 3
        got += [next(loader)["label"].tolist() for _ in range(5)]
        assert got == expected
        loader.load_state_dict(state)
        assert [next(loader)["label"].tolist() for _ in range(5)] == expected[3:]


def test_default_transform_is_identity(pair: Any) -> None:
    ds, ls = pair
    with DataLoader(ds, ls, batch_size=4, mode=0) as loader:
        batch = next(loader)
    assert np.array_equal(batch["data"], ds[[0, 1, 2, 3]])
    assert np.array_equal(batch["label"], [0, 1, 2, 3])


def test_len_raises_type_error(pair: Any) -> None:
    with DataLoader(*pair, batch_size=4) as loader:
        with pytest.raises(TypeError):
            len(loader)


def test_different_lengths_raise_value_error(tmp_path: Path) -> None:
    a = Dataset.write(tmp_path / "a", np.zeros((10, 2)))
    b = Dataset.write(tmp_path / "b", np.zeros(9))
    before = len(loader_threads())
    with pytest.raises(ValueError, match="same length"):
        DataLoader(a, b)
    assert len(loader_threads()) == before


@pytest.mark.parametrize(
    "kwargs", [{"batch_size": 0}, {"num_workers": 0}, {"prefetch_size": 0}, {"mode": 5}]
)
def test_bad_settings_raise_value_error(pair: Any, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        DataLoader(*pair, **kwargs)


def test_any_object_with_len_and_getitems(tmp_path: Path) -> None:
    values = np.arange(30, dtype=np.int16) * 3
    with DataLoader(Table(values), Table(values // 3), batch_size=6, num_workers=2) as loader:
        for _ in range(10):
            batch = next(loader)
            assert np.array_equal(batch["data"], batch["label"] * 3)


def test_worker_exception_surfaces_in_consumer() -> None:
    values = np.arange(30)
    loader = DataLoader(Table(values, fail_on=3), Table(values), batch_size=2, num_workers=2, mode=0)
    try:
        with pytest.raises(KeyError, match="broken on call"):
            for _ in range(100):
                next(loader)
    finally:
        close_within(loader)


def test_transform_exception_surfaces_in_consumer(pair: Any) -> None:
    def boom(_: tuple) -> tuple:
        raise ZeroDivisionError("transform failed")

    loader = DataLoader(*pair, batch_size=2, transform=boom)
    try:
        with pytest.raises(ZeroDivisionError, match="transform failed"):
            next(loader)
    finally:
        close_within(loader)


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("shape", ["pair", "named"])
def test_a_transform_raising_stop_iteration_is_a_runtime_error_naming_it(
    pair: Any, engine: str, shape: str
) -> None:
    """StopIteration out of a transform would end a ``for`` loop over the
    endless loader silently; like a generator under PEP 479, it comes out
    as a RuntimeError naming the transform, with the StopIteration as its
    cause."""
    ds, ls = pair
    data = ds if engine == "native" else Table(ds[:])

    def stopping_transform(_: Any) -> Any:
        raise StopIteration("out of ideas")

    if shape == "pair":
        loader = DataLoader(data, ls, batch_size=2, mode=0, transform=stopping_transform)
    else:
        loader = DataLoader(
            {"data": data, "label": ls}, batch_size=2, mode=0, transform=stopping_transform
        )
    try:
        with pytest.raises(RuntimeError, match="stopping_transform.*StopIteration") as caught:
            for _ in loader:
                pass
        assert isinstance(caught.value.__cause__, StopIteration)
    finally:
        close_within(loader)


def test_a_stream_raising_stop_iteration_is_a_runtime_error_naming_it() -> None:
    class Ended(Table):
        def __getitems__(self, idxs: Any) -> np.ndarray:
            raise StopIteration

    values = np.arange(30)
    loader = DataLoader({"tokens": Ended(values), "label": Table(values)}, batch_size=2, mode=0)
    try:
        with pytest.raises(RuntimeError, match="'tokens'.*StopIteration"):
            for _ in loader:
                pass
    finally:
        close_within(loader)


def test_close_is_idempotent_and_stops_iteration(pair: Any) -> None:
    loader = DataLoader(*pair, batch_size=4)
    next(loader)
    close_within(loader)
    close_within(loader)
    with pytest.raises(StopIteration):
        next(loader)


def test_close_under_load_never_hangs(tmp_path: Path) -> None:
    """A full prefetch queue and no consumer: close still returns."""
    data = np.random.default_rng(0).integers(0, 255, (512, 4096), dtype=np.uint8)
    ds = Dataset.write(tmp_path / "d", data)
    ls = Dataset.write(tmp_path / "l", np.arange(512))
    for _ in range(5):
        loader = DataLoader(ds, ls, num_workers=4, batch_size=256, prefetch_size=2)
        next(loader)  # workers are running and the queue refills behind us
        close_within(loader)
    # Also while the consumer is blocked in next() on another thread: it is
    # woken with StopIteration, and raises nothing else.
    loader = DataLoader(ds, ls, num_workers=1, batch_size=256, prefetch_size=1)
    consumer = Consumer(loader)
    consumer.start()
    try:
        wait_until_blocked_in_next(consumer, None)
    finally:
        close_within(loader)
    consumer.join(60)
    assert not consumer.is_alive(), "close() did not wake the consumer"
    assert consumer.error is None, consumer.error
    assert consumer.stopped and consumer.batches >= 1


@needs_proc
def test_context_manager_and_threads_are_released(pair: Any) -> None:
    before = len(loader_threads())
    with DataLoader(*pair, num_workers=3, batch_size=4) as loader:
        next(loader)
        assert eventually(lambda: len(loader_threads()) >= before + 3)
    assert len(loader_threads()) == before


@needs_proc
def test_dropping_the_loader_closes_it(pair: Any) -> None:
    before = len(loader_threads())
    loader = DataLoader(*pair, num_workers=2, batch_size=4)
    next(loader)
    del loader
    gc.collect()
    for t in python_workers():
        t.join(60)
    assert len(loader_threads()) == before


@needs_proc
def test_datasets_use_the_native_engine_and_duck_types_the_python_one(pair: Any) -> None:
    ds, ls = pair
    with DataLoader(ds, ls, num_workers=2, batch_size=4) as loader:
        next(loader)
        assert eventually(lambda: native_workers() >= 2) and not python_workers()
    values = np.arange(40)
    with DataLoader(Table(values), ls, num_workers=2, batch_size=4) as loader:
        next(loader)
        assert len(python_workers()) == 2


def test_dataset_subclass_overriding_getitems_is_honoured(pair: Any) -> None:
    ds, ls = pair

    class Doubled(Dataset):
        def __getitems__(self, idxs: Any) -> np.ndarray:
            return super().__getitems__(idxs) * 2

    doubled = Doubled(ds.path)
    try:
        with DataLoader(doubled, ls, batch_size=8, mode=0) as loader:
            batch = next(loader)
        assert np.array_equal(batch["data"][:, 0], batch["label"] * 2)
    finally:
        doubled.close()


def test_failing_gather_surfaces_in_consumer(tmp_path: Path) -> None:
    """Closing the store under a running loader makes its gathers fail: the
    consumer gets the error (code -2, naming the stream), not a stall."""
    ds = Dataset.write(tmp_path / "d", tagged(100, 8))
    ls = Dataset.write(tmp_path / "l", np.arange(100))
    loader = DataLoader(ds, ls, num_workers=2, batch_size=10, prefetch_size=2)
    try:
        next(loader)
        ds.close()
        with pytest.raises(ZrecordError) as info:
            for _ in range(100):
                next(loader)
        assert info.value.code == -2
        assert "closed" in str(info.value) and "data" in str(info.value)
    finally:
        close_within(loader)


@pytest.mark.parametrize("engine", ["native", "python"])
def test_state_dict_resumes_exactly(pair: Any, engine: str) -> None:
    ds, ls = pair
    data = ds if engine == "native" else Table(ds[:])
    with DataLoader(data, ls, num_workers=3, batch_size=6, mode=2, seed=5) as loader:
        for _ in range(4):
            next(loader)
        state = loader.state_dict()
        assert state["step"] == 4 and state["seed"] == 5 and state["mode"] == 2
        expected = [next(loader)["label"].tolist() for _ in range(5)]
        # Rewind the same loader...
        loader.load_state_dict(state)
        assert [next(loader)["label"].tolist() for _ in range(5)] == expected
    # ...or resume in a fresh one, whatever seed it was built with.
    with DataLoader(data, ls, num_workers=1, batch_size=6, mode=2, seed=0) as fresh:
        fresh.load_state_dict(state)
        assert [next(fresh)["label"].tolist() for _ in range(5)] == expected


@pytest.mark.parametrize("engine", ["native", "python"])
def test_load_state_dict_mismatch_raises(pair: Any, engine: str) -> None:
    ds, ls = pair
    data = ds if engine == "native" else Table(ds[:])
    with DataLoader(data, ls, batch_size=4, mode=0) as loader:
        state = loader.state_dict()
        state["batch_size"] = 8
        with pytest.raises(ValueError, match="batch_size"):
            loader.load_state_dict(state)
        with pytest.raises(ValueError):
            loader.load_state_dict({"step": 3})
        assert next(loader)["label"].tolist() == [0, 1, 2, 3]  # still usable


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("step", [-1, 1 << 64, None])
def test_load_state_dict_names_a_bad_step(pair: Any, engine: str, step: Any) -> None:
    ds, ls = pair
    data = ds if engine == "native" else Table(ds[:])
    with DataLoader(data, ls, batch_size=4, mode=0) as loader:
        state = {**loader.state_dict(), "step": step}
        with pytest.raises((ValueError, TypeError), match=f"'step'.*{step}") as caught:
            loader.load_state_dict(state)
        assert not isinstance(caught.value, OverflowError)
        assert next(loader)["label"].tolist() == [0, 1, 2, 3]  # still usable


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("engine", ["native", "python"])
def test_forked_child_gets_a_clean_error_and_exits(pair: Any, engine: str) -> None:
    """A loader running in the parent is unusable in a forked child (its
    workers are not there): next() raises, close()/drop do not hang, and a new
    loader built in the child works."""
    ds, ls = pair
    data = ds if engine == "native" else Table(ds[:])
    holder = [DataLoader(data, ls, num_workers=2, batch_size=4, mode=0)]
    next(holder[0])
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                next(holder[0])
                code = 2
            except RuntimeError as exc:
                code = 0 if "forked" in str(exc) else 3
            holder[0].close()
            holder.clear()  # the last reference: the loader is dropped here
            gc.collect()
            with DataLoader(data, ls, num_workers=1, batch_size=4, mode=0) as fresh:
                if next(fresh)["label"].tolist() != [0, 1, 2, 3]:
                    code = 4
        except BaseException:  # noqa: BLE001
            code = 5
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 120
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("forked child hung")
            time.sleep(0.05)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert next(holder[0])["label"].tolist() == [4, 5, 6, 7]  # the parent goes on
    finally:
        close_within(holder[0])
