"""Bad input to Dataset: unusable schemas, records of another size, refused
writes and deletes. Each is a clear error that changes nothing on disk."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from conftest import assert_same_image, image, tagged

from loaderx import MAX_RECORD_LEN, DataLoader, Dataset, Zrecord, ZrecordError


BAD_SCHEMAS: dict[str, tuple[Any, str]] = {
    "not JSON": (b"{not json", "not valid JSON"),
    "empty file": (b"", "not valid JSON"),
    "binary garbage": (b"\xff\xfe\x00", "not valid JSON"),
    "missing dtype": ({"dtype": None}, "no 'dtype' entry"),
    "missing shape": ({"shape": None}, "no 'shape' entry"),
    "missing codec": ({"codec": None}, "no 'codec' entry"),
    "dtype not understood": ({"dtype": "bogus"}, "'dtype' 'bogus' is not a NumPy dtype"),
    "dtype not a string": ({"dtype": 5}, "'dtype' must be a NumPy dtype string"),
    "dtype of objects": ({"dtype": "|O"}, "Python objects"),
    "shape not a list": ({"shape": 5}, "'shape' must be a list"),
    "shape negative": ({"shape": [-4, 4]}, "'shape' must be a list"),
    "shape of floats": ({"shape": [1.5]}, "'shape' must be a list"),
    "shape of bools": ({"shape": [True]}, "'shape' must be a list"),
    "zero-byte samples": ({"shape": [0]}, "is 0 bytes"),
    "samples over 2 GiB": ({"shape": [1 << 40]}, "outside 1..=2147483647"),
    "unknown codec": ({"codec": "snappy"}, "unknown codec 'snappy'"),
    "other sample size (dtype)": ({"dtype": "<f8"}, "record 0 of the store is 64 bytes"),
    "other sample size (shape)": ({"shape": [8]}, "<i4[8] (32 bytes)"),
}


@pytest.mark.parametrize("case", list(BAD_SCHEMAS))
def test_unusable_schema_is_a_value_error_naming_the_file(tmp_path: Path, case: str) -> None:
    path = tmp_path / "d"
    Dataset.write(path, np.arange(64, dtype=np.int32).reshape(4, 16)).close()
    schema_path = path / "schema.json"
    change, fragment = BAD_SCHEMAS[case]
    if isinstance(change, bytes):
        schema_path.write_bytes(change)
    else:
        schema = json.loads(schema_path.read_text())
        for key, value in change.items():
            if value is None:
                del schema[key]
            else:
                schema[key] = value
        schema_path.write_text(json.dumps(schema))
    before = image(path)
    with pytest.raises(ValueError) as info:
        Dataset(path)
    assert not isinstance(info.value, ZrecordError)
    assert str(schema_path) in str(info.value) and fragment in str(info.value), str(info.value)
    with pytest.raises(ValueError):
        Dataset.write(path, np.arange(64, dtype=np.int32).reshape(4, 16))
    assert_same_image(before, image(path))


def test_records_of_another_size_are_refused_never_half_filled(tmp_path: Path) -> None:
    """A record appended behind the Dataset's back with another size: a
    batch holding it fails with -6 naming the record and the schema (never
    a row of uninitialised memory), through ds[...] and the native loader."""
    n = 40
    path = tmp_path / "d"
    rows = tagged(n, 16)
    Dataset.write(path, rows).close()
    with Zrecord(path, codec="raw") as zr:
        zr.append(np.full(32, 7, np.uint8), 1, 32)  # half a sample: index 40
        zr.append(np.full(128, 7, np.uint8), 1, 128)  # two samples: index 41
    Dataset.write(tmp_path / "l", np.arange(n + 2)).close()
    with Dataset(path) as ds, Dataset(tmp_path / "l") as ls:
        for idx in ([3, 40], [41], [-2]):
            with pytest.raises(ZrecordError) as info:
                ds[idx]
            assert info.value.code == -6
            message = str(info.value)
            assert "schema.json" in message and "<i4[16]" in message, message
            assert "is 32 bytes" in message or "is 128 bytes" in message, message
        assert np.array_equal(ds[:n], rows)
        with DataLoader(ds, ls, num_workers=1, batch_size=n + 2, mode=0) as loader:
            with pytest.raises(ZrecordError) as info:
                next(loader)
            assert info.value.code == -6 and "record 40 is 32 bytes" in str(info.value)


DATASET_REFUSED: dict[str, Callable[[Path], Any]] = {
    "write another dtype": lambda p: Dataset.write(p, np.zeros((4, 16), np.float32)),
    "write another shape": lambda p: Dataset.write(p, np.zeros((4, 4, 4), np.int32)),
    "write samples over 1 MiB": lambda p: Dataset.write(
        p, np.zeros((1, MAX_RECORD_LEN + 4), np.uint8)
    ),
    "write an unknown codec": lambda p: Dataset.write(p, np.zeros((4, 16), np.int32), codec="gzip"),
    "write a 0-d array": lambda p: Dataset.write(p, np.int32(3)),
    "delete out of range": lambda p: Dataset(p).delete([0, 40]),
    "delete a negative index": lambda p: Dataset(p).delete([0, -1]),
}


@pytest.mark.parametrize("case", list(DATASET_REFUSED))
def test_refused_dataset_operation_leaves_every_byte_as_it_was(tmp_path: Path, case: str) -> None:
    path = tmp_path / "d"
    Dataset.write(path, tagged(40, 16)).close()
    before = image(path)
    with pytest.raises((ValueError, ZrecordError)) as info:
        DATASET_REFUSED[case](path)
    if case.startswith("delete"):
        assert isinstance(info.value, ZrecordError) and info.value.code == -3
    else:
        assert not isinstance(info.value, ZrecordError)
    gc.collect()
    assert_same_image(before, image(path))
    with Dataset(path) as ds:
        assert np.array_equal(ds[:], tagged(40, 16))
