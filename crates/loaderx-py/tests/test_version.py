"""The package's version is the workspace's one version (Cargo.toml)."""

import re
from importlib import metadata
from pathlib import Path

import loaderx

WORKSPACE = Path(__file__).resolve().parents[3] / "Cargo.toml"


def workspace_version() -> str:
    text = WORKSPACE.read_text(encoding="utf-8")
    table = re.search(r"^\[workspace\.package\]\n(.*?)(?=^\[)", text, re.S | re.M)
    assert table, f"no [workspace.package] in {WORKSPACE}"
    version = re.search(r'^version\s*=\s*"([^"]+)"', table.group(1), re.M)
    assert version, f"no version in [workspace.package] of {WORKSPACE}"
    return version.group(1)


def test_version_is_the_workspace_version() -> None:
    expected = workspace_version()
    assert loaderx.__version__ == expected
    assert loaderx._native.__version__ == expected
    assert metadata.version("loaderx") == expected
