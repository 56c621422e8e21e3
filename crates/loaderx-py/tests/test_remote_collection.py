"""Collections in object storage: written part by part to, committed at,
pushed to and read from a real S3 server on loopback (moto in server mode,
started here), and faults through the fault-injecting proxy in front of it."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx
import loaderx.collection as lc
from loaderx.errors import ZrecordError

moto_server = pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
boto3 = pytest.importorskip("boto3")

from remote_servers import FaultProxy, free_port, s3_options  # noqa: E402

BUCKET = "colls"


def keys(client: Any, prefix: str) -> set[str]:
    out: set[str] = set()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    for page in pages:
        out.update(k["Key"] for k in page.get("Contents", []))
    return out


def png(seed: int) -> bytes:
    from io import BytesIO

    PIL = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(seed)
    buf = BytesIO()
    PIL.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def part_columns(p: int, n: int) -> dict[str, Any]:
    """Part `p`'s records: a dense (3,) float32 column, a ragged int32
    column, a scalar int64 label."""
    rng = np.random.default_rng(p)
    return {
        "x": rng.standard_normal((n, 3)).astype(np.float32),
        "tokens": [rng.integers(0, 1000, size=1 + (i * 7 + p) % 13, dtype=np.int32) for i in range(n)],
        "label": np.arange(p * 1000, p * 1000 + n, dtype=np.int64),
    }


SIZES = [40, 3, 25, 61]


def expected() -> dict[str, Any]:
    parts = [part_columns(p, n) for p, n in enumerate(SIZES)]
    return {
        "x": np.concatenate([c["x"] for c in parts]),
        "tokens": [t for c in parts for t in c["tokens"]],
        "label": np.concatenate([c["label"] for c in parts]),
    }


def check(col: Any, want: dict[str, Any]) -> None:
    n = len(want["label"])
    assert len(col) == n
    assert col.columns == ["label", "tokens", "x"]
    rng = np.random.default_rng(7)
    for idx in (np.arange(n), rng.permutation(n)[:50], np.array([n - 1, 0, 40, 40, 39])):
        np.testing.assert_array_equal(col["x"][idx], want["x"][idx])
        np.testing.assert_array_equal(col["label"][idx], want["label"][idx])
        got = col["tokens"][idx]
        for g, i in zip(got, idx):
            assert g.tobytes() == want["tokens"][i].tobytes()
    batch = col[[3, 70]]
    np.testing.assert_array_equal(batch["label"], want["label"][[3, 70]])


def test_write_part_commit_and_open_by_url(s3: Any) -> None:
    url = f"s3://{BUCKET}/written"
    opts = s3_options(s3.endpoint)
    for p, n in enumerate(SIZES):
        assert lc.write_part(url, p, part_columns(p, n), storage_options=opts) == f"part-{p:05d}"
    # Each part: its stores, and the completion mark.
    got = keys(s3, "written/")
    for p in range(len(SIZES)):
        assert f"written/part-{p:05d}/.complete" in got
        for c in ("x", "tokens", "label"):
            assert f"written/part-{p:05d}/{c}/meta.zr" in got
    assert "written/manifest.zc" not in got
    with pytest.raises(ZrecordError, match="not a collection"):
        lc.open(url, storage_options=opts)
    assert lc.commit(url, storage_options=opts) == []
    col = lc.open(url, storage_options=opts)
    try:
        assert col.parts == [(f"part-{p:05d}", n) for p, n in enumerate(SIZES)]
        check(col, expected())
        col.verify()
        # A reader pickles with its URL and options (DataLoader workers).
        again = pickle.loads(pickle.dumps(col["x"]))
        np.testing.assert_array_equal(again[[0, 125]], expected()["x"][[0, 125]])
        again.close()
    finally:
        col.close()


def test_a_dataloader_streams_a_collection_by_url(s3: Any) -> None:
    url = f"s3://{BUCKET}/loaded"
    opts = s3_options(s3.endpoint)
    for p, n in enumerate(SIZES):
        lc.write_part(url, p, {"label": part_columns(p, n)["label"]}, storage_options=opts)
    lc.commit(url, storage_options=opts)
    col = lc.open(url, storage_options=opts)
    want = set(expected()["label"].tolist())
    loader = loaderx.DataLoader(col, batch_size=21, mode=0, seed=3)
    try:
        seen: list[int] = []
        for _ in range(len(want) // 21):
            seen.extend(next(loader)["label"].tolist())
        assert len(set(seen)) == len(seen) and set(seen) <= want
    finally:
        loader.close()
        col.close()


def test_a_retried_part_replaces_its_own_objects(s3: Any) -> None:
    url = f"s3://{BUCKET}/retried"
    opts = s3_options(s3.endpoint)
    lc.write_part(url, 0, {"a": np.arange(10, dtype=np.int64)}, storage_options=opts)
    # The first attempt of part 1 wrote another column and more records.
    first = {"a": np.arange(500, dtype=np.int64), "extra": np.zeros((500, 2), np.uint8)}
    lc.write_part(url, 1, first, storage_options=opts)
    lc.write_part(url, 1, {"a": np.arange(100, 105, dtype=np.int64)}, storage_options=opts)
    assert not any("/extra/" in k for k in keys(s3, "retried/part-00001/"))
    assert lc.commit(url, storage_options=opts) == []
    with lc.open(url, storage_options=opts) as col:
        np.testing.assert_array_equal(col["a"][:], np.r_[np.arange(10), np.arange(100, 105)])


def test_a_failed_part_upload_is_unfinished_and_ignored(
    proxy: FaultProxy, s3: Any
) -> None:
    url = f"s3://{BUCKET}/failing"
    opts = s3_options(s3.endpoint)
    lc.write_part(url, 0, {"a": np.arange(4, dtype=np.int16)}, storage_options=opts)
    # The part's first object uploads; then every PUT fails.
    lc.write_part(url, 1, {"a": np.arange(4, dtype=np.int16)}, storage_options=opts)
    s3.delete_object(Bucket=BUCKET, Key="failing/part-00001/.complete")
    proxy.arm("503", None, method="PUT")
    with pytest.raises(ZrecordError) as e:
        lc.write_part(
            url,
            2,
            {"a": np.arange(4, dtype=np.int16)},
            storage_options=s3_options(proxy.endpoint, max_retries=1, retry_backoff=0.01),
        )
    assert f"{url}/part-00002" in str(e.value)
    assert "failing/part-00002/.complete" not in keys(s3, "failing/")
    # Parts without their mark are named, not committed.
    assert lc.commit(url, storage_options=opts) == ["part-00001"]
    with lc.open(url, storage_options=opts) as col:
        assert col.parts == [("part-00000", 4)]
    with pytest.raises(ZrecordError, match='part "part-00001" is not a finished part'):
        lc.commit(url, parts=[0, 1], storage_options=opts)


def test_a_read_fault_is_an_error_naming_the_part_url(proxy: FaultProxy, s3: Any) -> None:
    url = f"s3://{BUCKET}/faulty-read"
    opts = s3_options(s3.endpoint)
    for p in range(2):
        lc.write_part(url, p, {"v": np.arange(p * 8, p * 8 + 8, dtype=np.int32)}, storage_options=opts)
    lc.commit(url, storage_options=opts)
    col = lc.open(url, storage_options=s3_options(proxy.endpoint, max_retries=1, retry_backoff=0.01))
    try:
        np.testing.assert_array_equal(col["v"][[1, 9]], [1, 9])
        proxy.arm("503", None)
        with pytest.raises(ZrecordError) as e:
            col["v"][[12]]
        assert f"{url}/part-00001/v" in str(e.value)
    finally:
        col.close()
    # A server that refuses connections: an error naming the URL.
    dead = s3_options(f"http://127.0.0.1:{free_port()}", timeout=2, retry_backoff=0.01, max_retries=1)
    with pytest.raises(ZrecordError) as e:
        lc.open(url, storage_options=dead)
    assert url in str(e.value)
    with pytest.raises(ValueError, match="aws_no_such_key"):
        lc.open(url, storage_options={**opts, "aws_no_such_key": "1"})


def local_collection(root: Path) -> dict[str, Any]:
    for p, n in enumerate(SIZES):
        lc.write_part(root, p, part_columns(p, n))
    lc.commit(root)
    return expected()


def test_push_uploads_a_collection_byte_for_byte(s3: Any, tmp_path: Path) -> None:
    root = tmp_path / "c"
    want = local_collection(root)
    url = f"s3://{BUCKET}/pushed"
    opts = s3_options(s3.endpoint)
    objects = loaderx.push(root, url, storage_options=opts)
    assert objects[-1] == "manifest.zc"
    assert keys(s3, "pushed/") == {f"pushed/{o}" for o in objects}
    for o in objects:
        body = s3.get_object(Bucket=BUCKET, Key=f"pushed/{o}")["Body"].read()
        if o.endswith(".complete"):
            assert body == b""
        else:
            assert body == (root / o).read_bytes(), o
    with lc.open(url, storage_options=opts) as col:
        check(col, want)
    with pytest.raises(FileExistsError):
        loaderx.push(root, url, storage_options=opts)


def test_cli_info_verify_and_push_take_a_collection_url(
    s3: Any, tmp_path: Path, capsys: Any
) -> None:
    from loaderx.cli import main

    root = tmp_path / "c"
    local_collection(root)
    url = f"s3://{BUCKET}/cli"
    opts = [f"-o{k}={v}" for k, v in s3_options(s3.endpoint).items()]
    assert main(["push", str(root), url, *opts]) == 0
    assert f"to {url}" in capsys.readouterr().out
    assert main(["info", url, "--json", *opts]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["kind"], info["records"], info["parts"]) == ("collection", sum(SIZES), 4)
    assert main(["verify", url, *opts]) == 0
    out = capsys.readouterr().out
    assert f"{url}['x']: ok ({sum(SIZES)} records)" in out
    argv = ["bench", url, "--batch-sizes", "16", "--workers", "1", "--seconds", "0.1", "--json"]
    assert main([*argv, *opts]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["batch_size"] == 16 and rows[0]["batches"] >= 2
    # The same on the local collection.
    assert main(["bench", str(root), *argv[2:]]) == 0
    assert json.loads(capsys.readouterr().out)[0]["batches"] >= 2


def test_storage_options_with_a_local_path_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="local path"):
        lc.open(tmp_path, storage_options={"aws_region": "x"})
    with pytest.raises(ValueError, match="local path"):
        lc.commit(tmp_path, storage_options={"aws_region": "x"})
    assert not os.listdir(tmp_path)
