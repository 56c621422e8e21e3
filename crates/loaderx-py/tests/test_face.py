"""Python is a face: every read of a container is one call into the native
store, whatever form its index takes (the index rules live in Rust)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.zrecord import Dense, Ragged, ZrecordError

N = 20


class Counting:
    """Stands in for a native ``Store``: counts the calls made through it."""

    def __init__(self, store: Any) -> None:
        self._wrapped = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._wrapped, name)
        if not callable(found):
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return found(*args, **kwargs)

        return counted

    def __len__(self) -> int:
        self.calls.append("__len__")
        return len(self._wrapped)


def forms() -> dict[str, Any]:
    base = np.array([3, 0, 19, 7, 7])
    found: dict[str, Any] = {
        "int": 4,
        "negative int": -1,
        "np.int64": np.int64(5),
        "np.uint8": np.uint8(6),
        "0-d array": np.array(2),
        "slice": slice(2, 11, 3),
        "negative slice": slice(None, None, -4),
        "empty slice": slice(5, 5),
        "ellipsis": Ellipsis,
        "tuple": (4, -1, 0),
        "empty tuple": (),
        "list": [1, 18, -2],
        "empty list": [],
        "mask": np.arange(N) % 3 == 0,
        "list mask": [i % 4 == 0 for i in range(N)],
        "big-endian int64": base.astype(">i8"),
        "strided int64": np.repeat(base, 2)[::2],
        "2-D int32": base[:4].astype(np.int32).reshape(2, 2),
        "negative int64": base - N,
        "object": np.array([1, 2**3], dtype=object),
    }
    for dtype in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"):
        found[dtype] = base.astype(dtype)
    return found


def positions(sel: Any) -> Any:
    """What `sel` selects of ``np.arange(N)``: an int or an index array."""
    ref = np.arange(N)
    if isinstance(sel, tuple):
        return ref[list(sel)] if sel else ref[:0]
    if isinstance(sel, list) and not sel:
        return ref[:0]
    if isinstance(sel, np.ndarray) and sel.dtype == object:
        sel = sel.astype(np.int64)
    if isinstance(sel, np.ndarray) and sel.ndim > 1:
        sel = sel.reshape(-1)
    got = ref[sel]
    return int(got) if np.ndim(got) == 0 else got


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, np.ndarray]:
    root = tmp_path_factory.mktemp("face")
    data = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
    with Dense.create(root / "d", np.float32, (2, 3), codec="zstd") as w:
        w.append(data)
    with Ragged.create(root / "r", np.int16, 1, codec="raw") as w:
        w.append([np.full(i + 1, i, dtype=np.int16) for i in range(N)])
    return root / "d", root / "r", data


@pytest.mark.parametrize("name", list(forms()))
def test_dense_getitem_is_one_native_call(stores: Any, name: str) -> None:
    dense, _, data = stores
    sel = forms()[name]
    with Dense.open(dense) as ds:
        counting = Counting(ds._store)
        ds._store = counting
        try:
            got = ds[sel]
            batch = ds.__getitems__(sel if not isinstance(sel, int) else [sel])
        finally:
            ds._store = counting._wrapped
    assert len(counting.calls) == 2, counting.calls
    want = positions(sel)
    np.testing.assert_array_equal(got, data[want])
    np.testing.assert_array_equal(batch, data[np.atleast_1d(want)])


@pytest.mark.parametrize("name", list(forms()))
def test_ragged_getitem_is_one_native_call(stores: Any, name: str) -> None:
    _, ragged, _ = stores
    sel = forms()[name]
    with Ragged.open(ragged) as rg:
        counting = Counting(rg._store)
        rg._store = counting
        try:
            got = rg[sel]
        finally:
            rg._store = counting._wrapped
    assert len(counting.calls) == 1, counting.calls
    want = positions(sel)
    if isinstance(want, int):
        np.testing.assert_array_equal(got, np.full(want + 1, want, dtype=np.int16))
    else:
        assert [int(r[0]) for r in got] == want.tolist()


@pytest.mark.parametrize(
    "bad, error",
    [
        (N, ZrecordError),
        (-N - 1, ZrecordError),
        ([0, N], ZrecordError),
        (np.array([5, -N - 1]), ZrecordError),
        (np.ones(N - 1, dtype=bool), IndexError),
        (True, TypeError),
        (1.5, TypeError),
        ([1.0, 2.0], TypeError),
        ("a", TypeError),
        ((1, slice(None)), TypeError),
    ],
    ids=repr,
)
def test_a_refused_index_is_at_most_one_native_call(stores: Any, bad: Any, error: Any) -> None:
    dense, ragged, _ = stores
    for cls, path in ((Dense, dense), (Ragged, ragged)):
        with cls.open(path) as c:
            counting = Counting(c._store)
            c._store = counting
            try:
                with pytest.raises(error):
                    c[bad]
            finally:
                c._store = counting._wrapped
        assert len(counting.calls) <= 1, counting.calls
