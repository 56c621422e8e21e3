"""Two-way store compatibility with the original loaderx 0.5.4 (from PyPI).

A scratch virtualenv at ``<target>/compat-venv`` holds ``loaderx==0.5.4``
(binary wheel, with cffi) and NumPy; it is created once and reused. The same
scripts run under both packages (the API is the same), so:

* the original writes raw and flate datasets, deletes and compacts, and our
  ``Dataset``/``Zrecord`` read back exactly what the original reads back;
* we write the same, and the original reads back exactly what we read back.

Without PyPI the fixture fails with a message saying so; it never skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import target_dir

ORIGINAL = "loaderx==0.5.4"
N = 300
VICTIMS = list(range(0, N, 7)) + [N - 1, 3]

WRITE = textwrap.dedent(
    f"""
    import sys
    from pathlib import Path
    import numpy as np
    from loaderx import Dataset, Zrecord

    out = Path(sys.argv[1])
    rng = np.random.default_rng(0)
    images = (rng.integers(0, 6, ({N}, 3, 16, 16)) + np.arange(16) * 3).astype(np.uint8)
    labels = np.arange({N}, dtype=np.int64)
    for codec in ("raw", "flate"):
        Dataset.write(out / ("images-" + codec), images, codec=codec, chunk_bytes=50_000).close()
        Dataset.write(out / ("labels-" + codec), labels, codec=codec).close()

    # Deletes and a compaction, then more appends after it.
    for name, array in (("edited-images", images), ("edited-labels", labels)):
        ds = Dataset.write(out / name, array, codec="flate")
        ds.delete({VICTIMS!r})
        ds.compact()
        ds.close()
        Dataset.write(out / name, array[:20]).close()

    # Ragged raw records at the Zrecord level.
    blobs = [bytes([(7 * i) % 256]) * (50 + 37 * i) for i in range(60)]
    flat = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    lens = np.array([len(b) for b in blobs], dtype=np.uint32)
    offsets = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.uint64)
    with Zrecord(out / "ragged", codec="flate") as zr:
        zr.append_var(flat, offsets, lens)
        zr.append_var(flat, offsets, lens, codec="raw")
        zr.delete([0, 5, 100, 119])
        zr.compact()
        zr.sync()
    print("wrote", sorted(p.name for p in out.iterdir()))
    """
)

DUMP = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    import loaderx
    from loaderx import Dataset, Zrecord

    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    arrays, stats = {}, {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        if (d / "schema.json").is_file():
            ds = Dataset(d)
            arrays[d.name] = ds[np.arange(len(ds))]
            stats[d.name] = ds.stats()
            ds.close()
        else:
            zr = Zrecord(d)
            n = len(zr)
            idxs = np.arange(n, dtype=np.uint64)
            lens = zr.lengths(idxs)
            offsets = np.concatenate([[0], np.cumsum(lens[:-1], dtype=np.uint64)]).astype(np.uint64)
            buf = np.zeros(int(lens.sum()), dtype=np.uint8)
            zr.gather_var(idxs, buf, offsets)
            arrays[d.name] = buf
            arrays[d.name + "-lens"] = lens
            stats[d.name] = zr.stats()
            zr.close()
    np.savez(out / "arrays.npz", **arrays)
    (out / "stats.json").write_text(json.dumps({"version": loaderx.__version__, "stats": stats}))
    """
)


def _run(python: Path | str, script: str, *args: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [str(python), "-c", script, *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{python} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc.stdout


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _has_original(python: Path) -> bool:
    if not python.is_file():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import numpy, loaderx; assert loaderx.__version__ == '0.5.4'"],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.fixture(scope="session")
def original_python() -> Path:
    """The interpreter of a venv that has the original loaderx 0.5.4."""
    venv = target_dir() / "compat-venv"
    python = _venv_python(venv)
    if _has_original(python):
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True)
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", ORIGINAL, "numpy"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0 or not _has_original(python):
        pytest.fail(
            f"could not install {ORIGINAL} from PyPI into {venv} (is PyPI reachable?). "
            "The compatibility tests need the original package; they are not skipped.\n"
            f"pip exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return python


def _load(out: Path) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(out / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    return arrays, json.loads((out / "stats.json").read_text())


def _expected() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images = (rng.integers(0, 6, (N, 3, 16, 16)) + np.arange(16) * 3).astype(np.uint8)
    return images, np.arange(N, dtype=np.int64)


def _check_contents(arrays: dict[str, np.ndarray]) -> None:
    """What was written is what comes back, independent of either reader."""
    images, labels = _expected()
    for codec in ("raw", "flate"):
        assert np.array_equal(arrays[f"images-{codec}"], images)
        assert np.array_equal(arrays[f"labels-{codec}"], labels)
    survivors = sorted(set(range(N)) - set(VICTIMS))
    edited = arrays["edited-labels"]
    assert sorted(edited[:-20].tolist()) == survivors
    assert edited[-20:].tolist() == list(range(20))
    assert np.array_equal(arrays["edited-images"][:-20], images[edited[:-20]])
    assert np.array_equal(arrays["edited-images"][-20:], images[:20])
    assert arrays["ragged-lens"].size == 116


def _roundtrip(writer: Path | str, reader: Path | str, tmp_path: Path) -> None:
    stores, by_writer, by_reader = (tmp_path / d for d in ("stores", "writer", "reader"))
    for d in (stores, by_writer, by_reader):
        d.mkdir()
    _run(writer, WRITE, stores, cwd=tmp_path)
    _run(writer, DUMP, stores, by_writer, cwd=tmp_path)
    _run(reader, DUMP, stores, by_reader, cwd=tmp_path)
    written, written_stats = _load(by_writer)
    read, read_stats = _load(by_reader)
    assert written_stats["version"] != read_stats["version"]  # really two packages
    assert sorted(written) == sorted(read)
    for name in written:
        assert written[name].dtype == read[name].dtype, name
        assert np.array_equal(written[name], read[name]), name
    assert written_stats["stats"] == read_stats["stats"]
    _check_contents(read)


def test_original_writes_we_read(original_python: Path, tmp_path: Path) -> None:
    _roundtrip(original_python, sys.executable, tmp_path)


def test_we_write_original_reads(original_python: Path, tmp_path: Path) -> None:
    _roundtrip(sys.executable, original_python, tmp_path)
