"""Sampler: modes, determinism, fresh arrays, argument checks."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from loaderx import Sampler


def draw(s: Sampler, k: int) -> np.ndarray:
    return np.stack([s.next() for _ in range(k)])


def test_mode_constants() -> None:
    assert Sampler.Mode.SEQUENTIAL == 0
    assert Sampler.Mode.IID == 1
    assert Sampler.Mode.SHUFFLE == 2


def test_next_returns_fresh_uint64_batches() -> None:
    s = Sampler(100, 8, Sampler.Mode.IID, seed=1)
    a = s.next()
    assert a.dtype == np.uint64 and a.shape == (8,)
    keep = a.copy()
    a[:] = 12345  # the caller owns it; the sampler must not reuse it
    b = s.next()
    assert b is not a and not np.shares_memory(a, b)
    assert np.array_equal(Sampler(100, 8, 1, seed=1).next(), keep)


def test_sequential_is_a_circular_sliding_window() -> None:
    n, b = 10, 4
    s = Sampler(n, b, Sampler.Mode.SEQUENTIAL)
    got = draw(s, 7)
    want = np.array([[(k * b + j) % n for j in range(b)] for k in range(7)], dtype=np.uint64)
    assert np.array_equal(got, want)


def test_sequential_batch_larger_than_length() -> None:
    s = Sampler(3, 7, 0)
    assert s.next().tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert s.next().tolist() == [1, 2, 0, 1, 2, 0, 1]


def test_iid_in_range_deterministic_and_seed_dependent() -> None:
    a = draw(Sampler(1000, 64, Sampler.Mode.IID, seed=7), 20)
    b = draw(Sampler(1000, 64, Sampler.Mode.IID, seed=7), 20)
    c = draw(Sampler(1000, 64, Sampler.Mode.IID, seed=8), 20)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.max() < 1000
    # With replacement: 1280 draws from 1000 values must repeat some.
    assert len(np.unique(a)) < a.size


def test_iid_is_roughly_uniform() -> None:
    """Fixed seed, so this is deterministic; a biased generator fails it."""
    n = 10
    counts = np.bincount(draw(Sampler(n, 1000, 1, seed=3), 100).ravel().astype(np.int64), minlength=n)
    expected = 100 * 1000 / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 40.0, counts  # 9 degrees of freedom; p < 1e-5 beyond 40


def test_default_seed_is_42() -> None:
    assert np.array_equal(Sampler(500, 16, 1).next(), Sampler(500, 16, 1, seed=42).next())


@pytest.mark.parametrize("n,b", [(10, 3), (12, 4), (5, 8), (1, 1)])
def test_shuffle_every_epoch_is_a_permutation(n: int, b: int) -> None:
    s = Sampler(n, b, Sampler.Mode.SHUFFLE, seed=5)
    stream = np.concatenate([s.next() for _ in range((4 * n) // b + 2)])
    epochs = [stream[e * n : (e + 1) * n] for e in range(4)]
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(n))
    if n >= 5:
        assert any(not np.array_equal(epochs[0], e) for e in epochs[1:])


def test_iterable() -> None:
    s = Sampler(20, 5, 0)
    assert iter(s) is s
    first = next(s)
    assert first.tolist() == [0, 1, 2, 3, 4]
    for i, batch in enumerate(s):
        assert batch.tolist() == [(5 * (i + 1) + j) % 20 for j in range(5)]
        if i == 5:
            break


@pytest.mark.parametrize(
    "args,error",
    [
        ((0, 4, 0), ValueError),
        ((10, 0, 0), ValueError),
        ((10, 4, 3), ValueError),
        ((10, 4, -1), ValueError),
        ((-1, 4, 0), ValueError),
        ((10.0, 4, 0), TypeError),
        ((10, "4", 0), TypeError),
    ],
)
def test_bad_arguments(args: tuple, error: type) -> None:
    with pytest.raises(error):
        Sampler(*args)


# --- additions: sharding and checkpoints -------------------------------------------


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_ranks_split_each_global_batch(mode: int) -> None:
    whole = Sampler(50, 12, mode, seed=4)
    ranks = [Sampler(50, 12, mode, seed=4, rank=r, world_size=3) for r in range(3)]
    assert [s.local_batch_size for s in ranks] == [4, 4, 4]
    for _ in range(10):
        parts = [s.next() for s in ranks]
        assert all(p.shape == (4,) for p in parts)
        assert np.array_equal(np.concatenate(parts), whole.next())


def test_state_dict_resumes_exactly() -> None:
    s = Sampler(1000, 32, Sampler.Mode.SHUFFLE, seed=77)
    draw(s, 5)
    state = s.state_dict()
    assert state["step"] == 5 == s.step and state["seed"] == 77 and state["mode"] == 2
    expected = draw(s, 4)
    resumed = Sampler(1000, 32, Sampler.Mode.SHUFFLE, seed=0)
    resumed.load_state_dict(state)
    assert resumed.seed == 77 and resumed.step == 5
    assert np.array_equal(draw(resumed, 4), expected)


def test_state_dict_mismatch_raises() -> None:
    state = Sampler(100, 10, 1).state_dict()
    with pytest.raises(ValueError, match="len"):
        Sampler(99, 10, 1).load_state_dict(state)
    with pytest.raises(ValueError):
        Sampler(100, 10, 1).load_state_dict({"seed": 1})


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("step", -1, ValueError),
        ("step", 1 << 64, ValueError),
        ("step", None, TypeError),
        ("step", "soon", ValueError),
        ("seed", -5, ValueError),
        ("mode", 256, ValueError),
        ("world_size", [1], TypeError),
        ("version", -1, ValueError),
    ],
)
def test_a_bad_state_entry_is_named(key: str, value: Any, error: type) -> None:
    # int() conversions and their ranges used to raise OverflowError or
    # TypeError naming neither the entry nor its value.
    sampler = Sampler(100, 10, 1)
    state: dict[str, Any] = {**sampler.state_dict(), key: value}
    with pytest.raises(error, match=rf"'{key}'.*{re.escape(repr(value))}") as caught:
        sampler.load_state_dict(state)
    assert not isinstance(caught.value, OverflowError)
    assert sampler.step == 0


def test_bad_sharding_raises() -> None:
    with pytest.raises(ValueError, match="divisible"):
        Sampler(100, 10, 1, rank=0, world_size=3)
    with pytest.raises(ValueError, match="rank"):
        Sampler(100, 10, 1, rank=2, world_size=2)
    with pytest.raises(ValueError):
        Sampler(100, 10, 1, world_size=0)
