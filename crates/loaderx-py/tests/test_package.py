"""The package surface: exports, version, the native module, typing markers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import loaderx
from loaderx import _lib


def test_top_level_exports() -> None:
    from loaderx import (  # noqa: F401
        CODECS,
        MAX_RECORD_LEN,
        DataLoader,
        Dataset,
        Sampler,
        Zrecord,
        ZrecordError,
    )

    assert set(loaderx.__all__) >= {
        "Dataset", "DataLoader", "Zrecord", "ZrecordError", "Sampler", "MAX_RECORD_LEN", "CODECS",
    }
    assert issubclass(ZrecordError, RuntimeError)
    assert MAX_RECORD_LEN == 1048576
    assert {"raw", "flate", "zstd", "lz4"} <= set(CODECS)


def test_version() -> None:
    assert loaderx.__version__ == "0.6.0"


def test_original_module_paths_still_import() -> None:
    from loaderx._sampler import Sampler  # noqa: F401
    from loaderx._zrecord import MAX_RECORD_LEN, Zrecord, ZrecordError  # noqa: F401
    from loaderx.dataloader import DataLoader  # noqa: F401
    from loaderx.dataset import Dataset  # noqa: F401

    assert MAX_RECORD_LEN == loaderx.MAX_RECORD_LEN


def test_lib_path_names_the_native_extension() -> None:
    spec = importlib.util.find_spec("loaderx._native")
    assert spec is not None and spec.origin
    for stem in ("zrecord", "sampler"):
        found = Path(_lib.path(stem))
        assert found.is_file()
        assert found == Path(spec.origin).resolve()
    try:
        _lib.path("nonexistent")
    except ImportError as exc:
        assert "nonexistent" in str(exc)
    else:
        raise AssertionError("expected ImportError for an unknown stem")


def test_typing_markers_ship_with_the_package() -> None:
    pkg = Path(loaderx.__file__).parent
    assert (pkg / "py.typed").is_file()
    # The native module has a stub; the Python modules are annotated in
    # their source, with no stub beside them to fall out of step.
    assert sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*.pyi")) == ["_native.pyi"]


def test_old_module_paths_export_what_their_modules_do() -> None:
    import loaderx.compat05.dataset
    import loaderx.dataset

    assert loaderx.dataset.__all__ == loaderx.compat05.dataset.__all__
    for name in loaderx.dataset.__all__:
        assert getattr(loaderx.dataset, name) is getattr(loaderx.compat05.dataset, name)
