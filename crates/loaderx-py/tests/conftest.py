"""Shared helpers for the loaderx test suite.

These tests run against the installed package (``maturin develop`` or
``pip install ./crates/loaderx-py``): the real native extension, never a stub.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


def target_dir() -> Path:
    """Cargo's target directory, where scratch state that outlives a run goes."""
    env = os.environ.get("CARGO_TARGET_DIR")
    if env:
        path = Path(env)
        return path if path.is_absolute() else REPO_ROOT / path
    return REPO_ROOT / "target"


def samples(n: int = 64) -> np.ndarray:
    """Small float32 images (3, 8, 8) with a compressible pattern."""
    return (np.arange(n * 3 * 8 * 8, dtype=np.float32).reshape(n, 3, 8, 8) % 17)


def tagged(n: int, width: int = 64, dtype: type = np.int32) -> np.ndarray:
    """Row `i` is filled with `i`, so each sample names itself."""
    return np.repeat(np.arange(n, dtype=dtype)[:, None], width, axis=1)


def tags(ds) -> list[int]:  # type: ignore[no-untyped-def]
    """Every live sample reduced to its identifying first element, sorted."""
    return sorted(int(row.flat[0]) for row in ds[np.arange(len(ds))])


def allocated_bytes(directory: Path | str, pattern: str = "*.zr") -> int:
    """Bytes actually allocated on disk (chunk files are sparse)."""
    return sum(p.stat().st_blocks * 512 for p in Path(directory).glob(pattern))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
