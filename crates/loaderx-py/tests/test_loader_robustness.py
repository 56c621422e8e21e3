"""DataLoader robustness across its three engines (native, native with a
transform, Python threads): a failed batch raises in its place and the loader
goes on; close() returns promptly in every state."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    CLOSE_BOUND,
    CODEC,
    Consumer,
    Gate,
    Table,
    close_within,
    read_entry,
    tagged,
    wait_until_blocked_in_next,
    write_entry,
)

from loaderx import DataLoader, Dataset, ZrecordError


ENGINES = ["native", "native+transform", "python"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Data (4 KB compressible records, so gathers take a moment) and labels,
    plus a copy of the data whose entry 0 is damaged."""
    root = tmp_path_factory.mktemp("pair")
    data = np.random.default_rng(0).integers(0, 4, (512, 1024), dtype=np.int32)
    for name in ("d", "bad"):
        Dataset.write(root / name, data).close()
    entry = read_entry(root / "bad", 0)
    entry[CODEC] = 9
    write_entry(root / "bad", 0, entry)
    Dataset.write(root / "l", np.arange(512)).close()
    with Dataset(root / "d") as ds, Dataset(root / "l") as ls, Dataset(root / "bad") as bad:
        yield ds, ls, bad


def _sleepy(batch: Any) -> Any:
    time.sleep(0.02)
    return batch


def _boom(batch: Any) -> Any:
    raise ArithmeticError("transform failed")


def make_loader(pair: Any, engine: str, failing: bool = False, **kwargs: Any) -> DataLoader:
    """The three engines; slow enough that a consumer really waits, and
    failing from the first batch when asked."""
    ds, ls, bad = pair
    kwargs = {"num_workers": 2, "batch_size": 128, "prefetch_size": 2, "mode": 0, **kwargs}
    if engine == "native":
        return DataLoader(bad if failing else ds, ls, **kwargs)
    if engine == "native+transform":
        return DataLoader(ds, ls, transform=_boom if failing else _sleepy, **kwargs)
    values = np.arange(512)
    data = Table(values, delay=0.02, fail_at=0 if failing else None)
    return DataLoader(data, Table(values), **kwargs)


@pytest.mark.parametrize("engine", ["native", "native+transform", "python+transform", "python"])
def test_a_failed_batch_raises_in_its_place_and_the_loader_goes_on(
    tmp_path: Path, engine: str
) -> None:
    """Batch 2 (indices 8..11) fails: by a damaged record (native), by the
    transform, or by ``__getitems__`` (python); batches 0, 1, 3, 4 arrive
    in order around the error."""
    ds = Dataset.write(tmp_path / "d", tagged(40, 8))
    ls = Dataset.write(tmp_path / "l", np.arange(40))
    kwargs: dict[str, Any] = {"num_workers": 2, "batch_size": 4, "mode": 0}

    def failing_transform(pair: tuple[Any, Any]) -> tuple[Any, Any]:
        if 9 in pair[1]:
            raise ArithmeticError("transform failed on label 9")
        return pair

    if engine == "native":
        ds.close()
        entry = read_entry(tmp_path / "d", 9)
        entry[CODEC] = 9
        write_entry(tmp_path / "d", 9, entry)
        ds = Dataset(tmp_path / "d")
        loader = DataLoader(ds, ls, **kwargs)
        expected: tuple[type[BaseException], str] = (ZrecordError, "meta.zr entry 9")
    elif engine.endswith("+transform"):
        data = ds if engine.startswith("native") else Table(ds[:])
        loader = DataLoader(data, ls, transform=failing_transform, **kwargs)
        expected = (ArithmeticError, "label 9")
    else:
        loader = DataLoader(Table(ds[:], fail_at=9), ls, **kwargs)
        expected = (LookupError, "index 9")
    try:
        assert next(loader)["label"].tolist() == [0, 1, 2, 3]
        assert next(loader)["label"].tolist() == [4, 5, 6, 7]
        with pytest.raises(expected[0], match=expected[1]) as info:
            next(loader)
        if isinstance(info.value, ZrecordError):
            assert info.value.code == -7 and 'stream "data", batch 2' in str(info.value)
        assert next(loader)["label"].tolist() == [12, 13, 14, 15]
        batch = next(loader)
        assert batch["label"].tolist() == [16, 17, 18, 19]
        assert np.array_equal(batch["data"][:, 0], batch["label"])
    finally:
        close_within(loader)
        ds.close()
        ls.close()


STATES = [
    "fresh",
    "full queue, no consumer",
    "mid-iteration",
    "after an error",
]


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("engine", ENGINES)
def test_close_returns_promptly_in_every_state(pair: Any, engine: str, state: str) -> None:
    if state == "fresh":
        loader = make_loader(pair, engine)
        close_within(loader)
    elif state == "full queue, no consumer":
        loader = make_loader(pair, engine)
        next(loader)
        time.sleep(0.3)  # setup, not a measurement: let the workers fill the queue
        close_within(loader)
    elif state == "mid-iteration":
        loader = make_loader(pair, engine)
        seen = 0
        for seen, _batch in enumerate(loader, 1):
            if seen == 3:
                close_within(loader)  # from inside the loop
        assert seen == 3  # the loop ended with StopIteration right after
    else:
        loader = make_loader(pair, engine, failing=True)
        with pytest.raises((ZrecordError, ArithmeticError, LookupError)):
            next(loader)
        close_within(loader)
    with pytest.raises(StopIteration):
        next(loader)


class HeldTable(Table):
    """A Table whose ``__getitems__`` passes through `gate` first."""

    def __init__(self, values: np.ndarray, gate: Gate) -> None:
        super().__init__(values)
        self.gate = gate

    def __getitems__(self, idxs: Any) -> np.ndarray:
        self.gate()
        return super().__getitems__(idxs)


@pytest.mark.parametrize("engine", ENGINES)
def test_close_wakes_a_consumer_blocked_in_next(pair: Any, engine: str) -> None:
    """A consumer thread blocked in next() gets StopIteration from close(),
    promptly. With the Python engine and the transform stage the test holds
    the only worker after 2 batches, so the consumer can only be waiting when
    close() runs, and it must be woken while the worker is still held (by
    close, not by a batch); close() itself returns once the worker is let go.
    The native engine's workers run no Python code to hold: there the
    consumer is caught asleep in next() between batches."""
    ds, ls, _ = pair
    gate = Gate(free=2)
    settings: dict[str, Any] = {"num_workers": 1, "batch_size": 128, "prefetch_size": 1, "mode": 0}
    held: int | None = 2
    if engine == "native":
        loader = DataLoader(ds, ls, **settings)
        held = None
    elif engine == "native+transform":

        def transform(batch: Any) -> Any:
            gate()
            return batch

        loader = DataLoader(ds, ls, transform=transform, **settings)
    else:
        values = np.arange(512)
        loader = DataLoader(HeldTable(values, gate), Table(values), **settings)
    consumer = Consumer(loader)
    consumer.start()
    closer = threading.Thread(target=loader.close, name="test-closer")
    try:
        wait_until_blocked_in_next(consumer, held)
        closer.start()
        consumer.join(CLOSE_BOUND)
        assert not consumer.is_alive(), "close() did not wake the consumer blocked in next()"
        assert consumer.error is None, consumer.error
        assert consumer.stopped
        if held is not None:
            assert consumer.batches == held and gate.held == 1, (consumer.batches, gate.held)
    finally:
        gate.open()
        if closer.ident is None:  # failed before close() was called
            close_within(loader)
        else:
            closer.join(CLOSE_BOUND)
    assert not closer.is_alive(), f"DataLoader.close() did not return within {CLOSE_BOUND} s"
    with pytest.raises(StopIteration):
        next(loader)


def run_script(script: str, root: Path, engine: str, timeout: float, waiter: str) -> list[str]:
    """The output lines of `script` run by a new interpreter with arguments
    `root` and `engine`. The test fails if it has not exited after `timeout`
    seconds (`waiter` waited for user code) or exits with an error."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", script, str(root), engine],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{waiter} waited for user code: {exc.stdout!r}")
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split("\n")


BLOCKED_USER_CODE = textwrap.dedent(
    """
    import sys, threading, time
    import numpy as np
    from loaderx import DataLoader, Dataset

    root, engine = sys.argv[1], sys.argv[2]
    ds, ls = Dataset(root + "/d"), Dataset(root + "/l")

    class Table:
        def __init__(self, values):
            self.values = values
        def __len__(self):
            return len(self.values)
        def __getitems__(self, idxs):
            return self.values[np.asarray(idxs, dtype=np.int64)]

    class Stuck(Table):
        def __init__(self, values, started):
            super().__init__(values)
            self.started = started
        def __getitems__(self, idxs):
            self.started.set()
            time.sleep(3600)

    def blocked():
        started = threading.Event()
        def transform(batch):
            started.set()
            time.sleep(3600)
        if engine == "native+transform":
            loader = DataLoader(ds, ls, num_workers=1, batch_size=4, transform=transform)
        elif engine == "python+transform":
            table = Table(np.arange(len(ls)))
            loader = DataLoader(table, ls, num_workers=1, batch_size=4, transform=transform)
        else:
            loader = DataLoader(Stuck(np.arange(len(ls)), started), ls, num_workers=1, batch_size=4)
        assert started.wait(60), "the user code never ran"
        return loader

    loader = blocked()
    start = time.monotonic()
    loader.close()
    print("closed in", round(time.monotonic() - start, 1), flush=True)
    # Another one left open: the interpreter's exit closes it.
    left_open = blocked()
    print("exiting", flush=True)
    """
)


@pytest.mark.parametrize("engine", ["native+transform", "python+transform", "python"])
def test_close_and_exit_do_not_wait_for_user_code_that_never_returns(
    pair: Any, engine: str
) -> None:
    """A transform (or a duck-typed stream's ``__getitems__``) blocked for
    an hour: close() returns within its bound, and so does the interpreter's
    exit with such a loader still open. The thread running the user code is
    not joined (a daemon thread, its result dropped)."""
    root = Path(pair[0].path).parent
    waiter = "close() or the interpreter's exit"
    lines = run_script(BLOCKED_USER_CODE, root, engine, 60, waiter)
    assert lines[0].startswith("closed in "), lines
    assert float(lines[0].split()[-1]) <= CLOSE_BOUND, lines
    assert lines[1] == "exiting", lines


STUCK_ONCE = textwrap.dedent(
    """
    import sys, threading, time
    import numpy as np
    from loaderx import DataLoader, Dataset

    root, engine = sys.argv[1], sys.argv[2]
    ds, ls = Dataset(root + "/d"), Dataset(root + "/l")
    started = threading.Event()
    calls = []

    def once(value):
        # The first call never returns; every later one passes its value on.
        calls.append(1)
        if len(calls) == 1:
            started.set()
            time.sleep(3600)
        return value

    class Table:
        def __init__(self, values):
            self.values = values
        def __len__(self):
            return len(self.values)
        def __getitems__(self, idxs):
            return self.values[np.asarray(idxs, dtype=np.int64)]

    class StuckOnce(Table):
        def __getitems__(self, idxs):
            return once(super().__getitems__(idxs))

    class Hooked:
        # A natively gathered stream whose batch hook is user code.
        def __len__(self):
            return len(ds)
        def native_stream(self, name):
            return ds.native_stream(name)
        def native_batch(self, data, offsets):
            return once(data)

    table = np.arange(len(ls))
    if engine == "native+transform":
        loader = DataLoader(ds, ls, num_workers=1, batch_size=4, transform=once)
    elif engine == "native hook":
        loader = DataLoader(Hooked(), ls, num_workers=1, batch_size=4, transform=lambda b: b)
    elif engine == "python+transform":
        loader = DataLoader(Table(table), ls, num_workers=1, batch_size=4, transform=once)
    else:
        loader = DataLoader(StuckOnce(table), ls, num_workers=1, batch_size=4)
    assert started.wait(60), "the user code never ran"
    state = loader.state_dict()
    start = time.monotonic()
    loader.load_state_dict(state)
    print("restored in", round(time.monotonic() - start, 1), flush=True)
    reference = DataLoader(ds, ls, num_workers=1, batch_size=4)
    for _ in range(3):
        got, want = next(loader)["label"], next(reference)["label"]
        assert np.array_equal(got, want), (got, want)
    loader.close()
    reference.close()
    print("batches as before", flush=True)
    """
)


@pytest.mark.parametrize("engine", ["native+transform", "native hook", "python+transform", "python"])
def test_load_state_dict_does_not_wait_for_user_code_that_never_returns(
    pair: Any, engine: str
) -> None:
    """A transform (or a stream's ``__getitems__`` or ``native_batch``
    hook) blocked for an hour on its first call: ``load_state_dict`` returns within the close bound, the
    blocked call is left behind (its result dropped when it returns), and
    the batches from the restored state are the ones a fresh loader yields."""
    root = Path(pair[0].path).parent
    lines = run_script(STUCK_ONCE, root, engine, 60, "load_state_dict()")
    assert lines[0].startswith("restored in "), lines
    assert float(lines[0].split()[-1]) <= CLOSE_BOUND, lines
    assert lines[1] == "batches as before", lines


HUGE_SETTING = textwrap.dedent(
    """
    import sys
    import numpy as np
    from loaderx import DataLoader, Dataset

    class Table:
        def __init__(self, values):
            self.values = values
        def __len__(self):
            return len(self.values)
        def __getitems__(self, idxs):
            return self.values[np.asarray(idxs, dtype=np.int64)]

    root, engine, setting = sys.argv[1], sys.argv[2], sys.argv[3]
    ds, ls = Dataset(root + "/d"), Dataset(root + "/l")
    data = ds if engine == "native" else Table(np.arange(len(ls)))
    try:
        loader = DataLoader(data, ls, **{setting: 2**40})
        try:
            batch = next(loader)
            print("batch of", len(batch["label"]), flush=True)
        finally:
            loader.close()
    except (MemoryError, ValueError) as exc:
        print("raised", type(exc).__name__, exc, flush=True)
    """
)


@pytest.mark.parametrize("setting", ["batch_size", "prefetch_size", "num_workers"])
@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_huge_size_raises_instead_of_aborting_the_interpreter(
    pair: Any, engine: str, setting: str
) -> None:
    """No size a user passes reaches an allocation that aborts when it
    fails: 2^40 of anything either works (workers beyond the prefetch have
    nothing to do and are not started) or raises MemoryError/ValueError
    naming what it could not allocate for."""
    root = Path(pair[0].path).parent
    out = subprocess.run(
        [sys.executable, "-c", HUGE_SETTING, str(root), engine, setting],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stdout}{out.stderr}"
    line = out.stdout.strip().splitlines()[-1]
    if setting == "num_workers" or (engine, setting) == ("python", "prefetch_size"):
        assert line == "batch of 256", out.stdout
    else:
        assert line.startswith("raised MemoryError"), out.stdout
        named = "batch" if setting == "batch_size" else "prefetch"
        assert named in line and str(2**40) in line, line
