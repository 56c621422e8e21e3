"""Training integration: named streams, sharding over real processes, exact
and elastic resume across a process restart, and the 2.x sampler spelling."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx
from loaderx import Dataset, Zrecord
from loaderx.dataloader import DataLoader
from loaderx.zsampler import Sampler

WORKER = Path(__file__).with_name("training_worker.py")
N = 96  # records
B = 16  # global batch


@pytest.fixture(scope="module")
def store_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Three dense streams of N records; record i of "label" is i."""
    root = tmp_path_factory.mktemp("training")
    rng = np.random.default_rng(3)
    arrays = {
        "image": rng.standard_normal((N, 3, 4)).astype(np.float32),
        "label": np.arange(N, dtype=np.int64),
        "mask": rng.integers(0, 2, (N, 5)).astype(np.uint8),
    }
    for name, array in arrays.items():
        Dataset.write(root / name, array, codec="zstd").close()
    return {name: str(root / name) for name in arrays}


def run_worker(args: dict[str, Any], out: Path | None = None) -> dict[str, np.ndarray]:
    if out is not None:
        args = {**args, "out": str(out)}
    done = subprocess.run(
        [sys.executable, str(WORKER), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    if out is None:
        return {}
    with np.load(out) as saved:
        return {name: saved[name] for name in saved.files}


def settings(paths: dict[str, str], **over: Any) -> dict[str, Any]:
    return {"streams": paths, "mode": 2, "workers": 2, "batch": B, "rank": 0, "world": 1, **over}


# --- named streams -------------------------------------------------------


class RaggedBytes:
    """Variable-size records of one Zrecord as a ragged stream: the native
    loader gathers them itself (through the ``native_stream`` hook)."""

    def __init__(self, store: Zrecord) -> None:
        self.store = store
        self.dtype = np.dtype(np.uint8)

    def __len__(self) -> int:
        return len(self.store)

    def __getitems__(self, idxs: Any) -> list[np.ndarray]:
        idxs = np.asarray(idxs, dtype=np.uint64)
        lengths = self.store.lengths(idxs).astype(np.uint64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
        flat = np.empty(int(offsets[-1]), dtype=np.uint8)
        self.store.gather_var(idxs, flat, offsets[:-1])
        return [flat[int(a) : int(b)] for a, b in zip(offsets, offsets[1:])]

    def native_stream(self, name: str) -> tuple[str, Any, int]:
        return (name, self.store.native_store(), 0)


@pytest.mark.parametrize("codec", sorted(loaderx.CODECS))
def test_named_streams_equal_direct_gathers(tmp_path: Path, codec: str) -> None:
    rng = np.random.default_rng(5)
    image = Dataset.write(
        tmp_path / "image", rng.standard_normal((50, 2, 3)).astype(np.float32), codec=codec
    )
    label = Dataset.write(tmp_path / "label", np.arange(50, dtype=np.int16), codec=codec)
    raw = Zrecord(tmp_path / "tokens", codec=codec)
    records = [rng.integers(0, 255, int(rng.integers(1, 40)), dtype=np.uint8) for _ in range(50)]
    lens = np.array([len(r) for r in records], dtype=np.uint64)
    raw.append_var(
        np.concatenate(records), np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64), lens
    )
    tokens = RaggedBytes(raw)
    streams = {"image": image, "label": label, "tokens": tokens}
    with DataLoader(streams, batch_size=8, transform_workers=3, mode=1, seed=9) as loader:
        for _ in range(10):
            batch = next(loader)
            assert list(batch) == ["image", "label", "tokens"]
            idxs = batch["label"].astype(np.int64)
            assert np.array_equal(batch["image"], image[idxs])
            assert len(batch["tokens"]) == 8
            for got, i in zip(batch["tokens"], idxs):
                assert np.array_equal(got, records[i])
            # The ragged records are views into one buffer per batch.
            bases = {id(t.base) for t in batch["tokens"]}
            assert len(bases) == 1 and batch["tokens"][0].base is not None
    # The Python-thread path gives the same batches (a stream without the hook).
    plain = {"image": image, "label": label, "tokens": _NoHook(tokens)}
    with DataLoader(streams, batch_size=8, mode=1, seed=9) as a, DataLoader(
        plain, batch_size=8, mode=1, seed=9
    ) as b:
        for _ in range(5):
            x, y = next(a), next(b)
            assert np.array_equal(x["image"], y["image"]) and np.array_equal(x["label"], y["label"])
            assert all(np.array_equal(p, q) for p, q in zip(x["tokens"], y["tokens"]))
    for ds in (image, label, raw):
        ds.close()


class _NoHook:
    def __init__(self, inner: RaggedBytes) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitems__(self, idxs: Any) -> Any:
        return self.inner.__getitems__(idxs)


def test_named_streams_reject_bad_input(store_paths: dict[str, str], tmp_path: Path) -> None:
    image = Dataset(store_paths["image"])
    short = Dataset.write(tmp_path / "short", np.arange(N - 1, dtype=np.int64))
    with pytest.raises(ValueError, match="empty dict"):
        DataLoader({})
    with pytest.raises(ValueError, match=r"'image': 96.*'short': 95"):
        DataLoader({"image": image, "short": short})
    with pytest.raises(ValueError, match=r"'bad': 'int'"):
        DataLoader({"image": image, "bad": 3})
    with pytest.raises(ValueError, match="must be str"):
        DataLoader({"image": image, 1: short})
    with pytest.raises(TypeError, match="not both"):
        DataLoader({"image": image}, transform_workers=2, num_workers=2)
    with pytest.raises(TypeError, match="labelset"):
        DataLoader(image)
    image.close()
    short.close()


def test_call_shapes_keep_their_own_semantics(store_paths: dict[str, str]) -> None:
    image, label = Dataset(store_paths["image"]), Dataset(store_paths["label"])
    seen: list[Any] = []

    def pair_transform(pair: Any) -> Any:
        seen.append(type(pair))
        data, lab = pair
        return data * 2, lab

    # 0.5.x: IID by default, the transform gets and returns a pair, {"data", "label"}.
    with DataLoader(image, label, 2, 8, transform=pair_transform) as old:
        batch = next(old)
        assert set(batch) == {"data", "label"} and seen[0] is tuple
        assert np.array_equal(batch["data"], image[batch["label"]] * 2)
        assert old.state_dict()["mode"] == 1 and old.state_dict()["streams"] == ["data", "label"]
    # 2.x: positional (streams, transform_workers, batch_size); shuffle by default;
    # the transform gets the batch dict and its result is the batch.
    with DataLoader({"x": image, "y": label}, 2, 8, transform=lambda b: (b["x"], b["y"])) as new:
        x, y = next(new)
        assert x.shape == (8, 3, 4) and np.array_equal(x, image[y])
        assert new.state_dict()["mode"] == 2 and new.num_workers == 2
    image.close()
    label.close()


# --- the 2.x sampler ------------------------------------------------------


def test_zsampler_modes_seek_close() -> None:
    assert [int(m) for m in Sampler.Mode] == [0, 1, 2]
    assert Sampler.Mode.CYCLIC == 2 and Sampler.Mode.SHUFFLE is Sampler.Mode.CYCLIC
    with Sampler(10, 4, Sampler.Mode.CYCLIC, seed=3) as s:
        drawn = np.concatenate([s.next() for _ in range(5)])  # two full cycles
        assert all(len(b) == 4 for b in [s.next()])
        for cycle in (drawn[:10], drawn[10:20]):
            assert sorted(cycle.tolist()) == list(range(10))
        assert not np.array_equal(drawn[:10], drawn[10:20])
        s.seek(2)
        assert np.array_equal(s.next(), drawn[8:12])
        assert np.array_equal(next(iter(s)), drawn[12:16])
        assert "Sampler.Mode.CYCLIC" in repr(s)
    assert s.closed
    with pytest.raises(ValueError, match="closed"):
        s.next()
    seq = Sampler(5, 3, Sampler.Mode.SEQUENTIAL)
    seq.seek(1)
    assert seq.next().tolist() == [3, 4, 0]
    with pytest.raises(TypeError, match="both"):
        Sampler(5, 3, 0, rank=0)


def test_sampler_state_is_versioned_json(store_paths: dict[str, str]) -> None:
    s = Sampler(N, B, 2, rank=1, world_size=2)
    s.next()
    state = json.loads(json.dumps(s.state_dict()))
    assert state["version"] == 1
    fresh = Sampler(N, B, 2, seed=0, rank=0, world_size=4)
    fresh.load_state_dict(state)
    assert fresh.step == 1
    with pytest.raises(ValueError, match="version 2"):
        fresh.load_state_dict({**state, "version": 2})
    with pytest.raises(ValueError, match="len = 96"):
        Sampler(N + 1, B, 2).load_state_dict(state)


# --- sharding over processes ----------------------------------------------


def test_four_ranks_one_pass_is_one_permutation(
    store_paths: dict[str, str], tmp_path: Path
) -> None:
    steps = N // B  # one pass over the data
    procs, outs = [], []
    for rank in range(4):
        out = tmp_path / f"rank{rank}.npz"
        args = settings(store_paths, rank=rank, world=4, take=steps, out=str(out))
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(args)], stderr=subprocess.PIPE, text=True
            )
        )
        outs.append(out)
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    labels = []
    for out in outs:
        with np.load(out) as saved:
            assert saved["label"].shape == (steps, B // 4)
            labels.append(saved["label"])
    union = np.concatenate([x.reshape(-1) for x in labels])
    assert sorted(union.tolist()) == list(range(N))  # disjoint and covering
    # Step by step, the ranks' shares put together are the single-host batches.
    single = run_worker(settings(store_paths, take=steps), tmp_path / "single.npz")
    assert np.array_equal(np.concatenate(labels, axis=1), single["label"])


def test_uneven_world_is_a_clear_error(store_paths: dict[str, str]) -> None:
    with Dataset(store_paths["label"]) as label:
        with pytest.raises(ValueError, match="not divisible by world size 3"):
            DataLoader({"label": label}, batch_size=B, rank=0, world_size=3)


# --- resume across a process restart --------------------------------------


def start_and_kill(args: dict[str, Any]) -> None:
    """Run a worker until it has saved its state and says so, then SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps({**args, "hold": True})],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize(("before", "after"), [(1, 1), (8, 8), (1, 8)])
def test_resume_after_kill_is_bit_identical(
    store_paths: dict[str, str], tmp_path: Path, mode: int, before: int, after: int
) -> None:
    skip, take = 7, 9  # crosses an epoch boundary (N / B = 6)
    state = tmp_path / "state.json"
    start_and_kill(
        settings(store_paths, mode=mode, workers=before, skip=skip, state_out=str(state))
    )
    saved = json.loads(state.read_text())
    assert saved["step"] == skip and saved["streams"] == ["image", "label", "mask"]
    resumed = run_worker(
        settings(store_paths, mode=mode, workers=after, state_in=str(state), take=take),
        tmp_path / "resumed.npz",
    )
    straight = run_worker(
        settings(store_paths, mode=mode, workers=before, skip=skip, take=take),
        tmp_path / "straight.npz",
    )
    for name in straight:
        assert resumed[name].tobytes() == straight[name].tobytes(), name


def test_elastic_resume_two_to_four_ranks(store_paths: dict[str, str], tmp_path: Path) -> None:
    skip, take = 5, 8
    state = tmp_path / "state.json"
    # Two ranks ran `skip` steps; rank 0's checkpoint is the job's.
    start_and_kill(settings(store_paths, rank=0, world=2, skip=skip, state_out=str(state)))
    run_worker(settings(store_paths, rank=1, world=2, skip=skip))
    shares = [
        run_worker(
            settings(store_paths, rank=r, world=4, state_in=str(state), take=take),
            tmp_path / f"r{r}.npz",
        )
        for r in range(4)
    ]
    single = run_worker(settings(store_paths, skip=skip, take=take), tmp_path / "single.npz")
    for name in single:
        assert np.array_equal(np.concatenate([s[name] for s in shares], axis=1), single[name]), name


def test_mismatched_state_names_the_mismatch(store_paths: dict[str, str]) -> None:
    image, label = Dataset(store_paths["image"]), Dataset(store_paths["label"])
    with DataLoader({"image": image, "label": label}, batch_size=B) as loader:
        state = json.loads(json.dumps(loader.state_dict()))
    with DataLoader({"image": image}, batch_size=B) as other:
        with pytest.raises(ValueError, match="streams"):
            other.load_state_dict(state)
    with DataLoader({"image": image, "label": label}, batch_size=2 * B) as other:
        with pytest.raises(ValueError, match="batch_size"):
            other.load_state_dict(state)
    with DataLoader({"image": image, "label": label}, batch_size=B, mode=0) as other:
        with pytest.raises(ValueError, match="mode"):
            other.load_state_dict(state)
    with DataLoader({"image": image, "label": label}, batch_size=B) as other:
        with pytest.raises(ValueError, match="no 'streams'"):
            other.load_state_dict(Sampler(N, B, 2).state_dict())
    image.close()
    label.close()


def test_dataset_pickles_as_its_path(store_paths: dict[str, str]) -> None:
    import pickle

    with Dataset(store_paths["image"]) as ds:
        back = pickle.loads(pickle.dumps(ds))
        assert back.path == ds.path and np.array_equal(back[[3, 1]], ds[[3, 1]])
        back.close()
    with pytest.raises(ValueError, match="closed"):
        pickle.dumps(ds)


class FlatOffsets(RaggedBytes):
    """A ragged stream whose batches are ``(flat, offsets)``: what a stream's
    own ``native_batch`` makes of the gathered column."""

    def native_batch(self, data: np.ndarray, offsets: np.ndarray | None) -> Any:
        return data, offsets


def test_native_batch_hook_shapes_the_column(tmp_path: Path) -> None:
    raw = Zrecord(tmp_path / "r", codec="lz4")
    records = [np.full(i % 7 + 1, i, dtype=np.uint8) for i in range(30)]
    lens = np.array([len(r) for r in records], dtype=np.uint64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64)
    raw.append_var(np.concatenate(records), starts, lens)
    label = Dataset.write(tmp_path / "l", np.arange(30, dtype=np.int64))
    with DataLoader({"r": FlatOffsets(raw), "label": label}, batch_size=6, mode=1) as loader:
        for _ in range(5):
            batch = next(loader)
            flat, offsets = batch["r"]
            assert offsets.dtype == np.uint64 and len(offsets) == 7 and offsets[-1] == len(flat)
            for k, i in enumerate(batch["label"]):
                assert np.array_equal(flat[offsets[k] : offsets[k + 1]], records[i])
    raw.close()
    label.close()
