"""Reading, through the Python API, the stores loaderx 0.5.4 wrote, from the
committed fixtures (no network): ``crates/loaderx-store/tests/fixtures/loaderx-054``,
whose ``make_fixtures.py`` describes how they were made, packed and restored."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
from conftest import REPO_ROOT

from loaderx import Dataset, Zrecord

FIXTURES = REPO_ROOT / "crates/loaderx-store/tests/fixtures/loaderx-054"


def restore(root: Path) -> dict[str, Path]:
    """Every packed store restored under `root` (prefix + zeros up to the
    original length), by name."""
    stores: dict[str, Path] = {}
    for line in (FIXTURES / "MANIFEST").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, length, prefix_len, crc = line.split()
        store, file = name.split("/")
        prefix = (FIXTURES / "stores" / name).read_bytes()
        assert (len(prefix), zlib.crc32(prefix)) == (int(prefix_len), int(crc)), name
        dest = root / store / file
        dest.parent.mkdir(exist_ok=True)
        with open(dest, "wb") as f:
            f.write(prefix)
            f.truncate(int(length))
        stores[store] = root / store
    return stores


def expected(store: str) -> list[tuple[int, int]]:
    lines = (FIXTURES / "expected" / f"{store}.txt").read_text().splitlines()
    return [(int(tag), int(n)) for tag, n in (line.split() for line in lines)]


def record(tag: int, n: int) -> np.ndarray:
    return ((7 * tag + np.arange(n) // 16) % 251).astype(np.uint8)


def test_datasets_054_wrote_read_back_exactly(tmp_path: Path) -> None:
    stores = restore(tmp_path)
    for name in ("dataset-raw", "dataset-flate"):
        tags = [tag for tag, _ in expected(name)]
        with Dataset(stores[name]) as ds:
            assert ds.dtype == np.int32 and ds.shape == (4, 4) and ds.codec == name[8:]
            want = np.array(tags, dtype=np.int32)[:, None, None] * 16 + np.arange(16).reshape(4, 4)
            assert np.array_equal(ds[:], want), name
            assert np.array_equal(ds[[-1, 2]], want[[-1, 2]]), name
    assert [t for t, _ in expected("dataset-flate")].count(0) == 0


def test_zrecords_054_wrote_read_back_exactly(tmp_path: Path) -> None:
    stores = restore(tmp_path)
    for name in ("raw", "flate", "deleted", "compacted"):
        order = expected(name)
        with Zrecord(stores[name]) as zr:
            assert len(zr) == len(order)
            lens = zr.lengths(np.arange(len(zr)))
            assert lens.tolist() == [n for _, n in order], name
            offsets = np.concatenate([[0], np.cumsum(lens[:-1], dtype=np.uint64)]).astype(np.uint64)
            buf = np.zeros(int(lens.sum()), np.uint8)
            zr.gather_var(np.arange(len(zr)), buf, offsets)
            want = np.concatenate([record(tag, n) for tag, n in order])
            assert np.array_equal(buf, want), name
