"""The 0.5.x API (Zrecord, Dataset) creates format v1 stores by default and
format v2 on request (``format=2``): no 1 MiB record ceiling, checksums."""

from __future__ import annotations

import os

import numpy as np
import pytest

from loaderx import Dataset, Zrecord, ZrecordError

V1_META_LEN = 16 + (1 << 24) * 16


def test_the_default_is_format_1_readable_by_loaderx_054(tmp_path):
    with Zrecord(tmp_path / "s") as z:
        z.append(np.zeros(10, np.uint8), 1, 10)
        assert z.native_store().format_version() == 1
    assert os.path.getsize(tmp_path / "s" / "meta.zr") == V1_META_LEN


@pytest.mark.parametrize("codec", ["raw", "flate", "zstd", "lz4"])
def test_format_2_holds_records_over_1_mib(tmp_path, codec):
    big = (np.arange(3 << 20) % 251).astype(np.uint8)
    with Zrecord(tmp_path / "s", codec, format=2) as z:
        z.append(big, 1, big.size)
        z.append(big[:100], 1, 100)
        assert z.native_store().format_version() == 2
    with Zrecord(tmp_path / "s") as z:  # reopened in the format it has
        assert len(z) == 2
        assert z.native_store().format_version() == 2
        out = np.zeros(big.size, np.uint8)
        z.gather_exact([0], out, big.size)
        assert np.array_equal(out, big)
    with Zrecord(tmp_path / "v1", codec) as z, pytest.raises(ZrecordError) as err:
        z.append(big, 1, big.size)
    assert err.value.code == -4


def test_dataset_write_format_2(tmp_path):
    samples = np.random.default_rng(1).integers(0, 255, (3, 3, 700, 600), dtype=np.uint8)
    assert samples[0].nbytes > 1 << 20
    with pytest.raises(ValueError, match="record limit of format 1"):
        Dataset.write(tmp_path / "v1", samples)
    ds = Dataset.write(tmp_path / "v2", samples, codec="zstd", format=2)
    assert len(ds) == 3
    assert np.array_equal(ds[[2, 0]], samples[[2, 0]])
    # Appending to it keeps its format.
    ds = Dataset.write(tmp_path / "v2", samples[:1], format=1)
    assert len(ds) == 4


def test_a_bad_format_is_refused_and_creates_nothing(tmp_path):
    with pytest.raises(ValueError, match="format must be 1 or 2"):
        Zrecord(tmp_path / "s", format=3)
    assert not (tmp_path / "s").exists()
