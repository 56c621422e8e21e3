"""The original loaderx 0.5.4 test suite, run unchanged against this package.

The suite is not part of this repository. It ships in the original's source
distribution on PyPI, which is fetched with pip (``pip download --no-deps
--no-binary :all: loaderx==0.5.4``) into ``<target>/loaderx-054-sdist/``,
checked against its published SHA-256, and its ``tests/`` directory extracted
next to it; later runs reuse both. The suite then runs under pytest in a child
of this interpreter, which imports the loaderx installed here (the child is
checked to import this package, not the original's sources).

Without PyPI (and no cached sdist) the test fails saying so; it never skips.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import fetch_sdist

import loaderx

ORIGINAL = "loaderx==0.5.4"
SDIST = "loaderx-0.5.4.tar.gz"
#: SHA-256 of the sdist as published on PyPI (files there never change).
SDIST_SHA256 = "0e50b59b2d6e0061f35e52e516b4743d8f2c7ae823f67fef3c6d25a5092db9f1"
TESTS = "loaderx-0.5.4/tests/"


def _original_tests() -> Path:
    """The extracted ``tests/`` directory of the original sdist."""
    sdist = fetch_sdist(ORIGINAL, SDIST, SDIST_SHA256)
    cache = sdist.parent
    tests = cache / TESTS
    if not tests.is_dir():
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(TESTS) and m.isfile()]
            if not members:
                pytest.fail(f"{sdist} ships no {TESTS} directory: nothing to run")
            for member in members:
                target = cache / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                target.write_bytes(source.read())
    return tests


def test_the_original_suite_passes_against_this_package(tmp_path: Path) -> None:
    tests = _original_tests()
    files = sorted(tests.glob("test_*.py"))
    assert files, f"no test files in {tests}"
    expected = sum(
        1
        for f in files
        for node in ast.parse(f.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    )
    # Run from an empty directory with an empty config, in importlib mode, so
    # nothing but the installed package is importable as `loaderx` and no
    # configuration of ours or of the original applies.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    probe = subprocess.run(
        [sys.executable, "-c", "import loaderx; print(loaderx.__version__); print(loaderx.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert probe.stdout.split("\n")[:2] == [loaderx.__version__, loaderx.__file__]
    assert loaderx.__version__ != "0.5.4"
    report = tmp_path / "report.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), "--rootdir",
         str(tmp_path), "--import-mode=importlib", "-p", "no:cacheprovider", "-q", "-rA",
         "-W", "error::pytest.PytestUnhandledThreadExceptionWarning",
         f"--junitxml={report}", *map(str, files)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = f"--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, output
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None, output
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": expected, "failures": 0, "errors": 0, "skipped": 0}, output
