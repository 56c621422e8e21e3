"""Stores in object storage, read from a real S3 server on loopback (moto
in server mode, started here) and through a fault-injecting proxy of our
own in front of it."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx
from loaderx.errors import ZrecordError

moto_server = pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
boto3 = pytest.importorskip("boto3")

from remote_servers import FaultProxy, free_port, s3_options  # noqa: E402

BUCKET = "data"


def upload(client: Any, local: Path, prefix: str) -> str:
    for f in sorted(local.iterdir()):
        if f.name.endswith(".zr"):
            client.upload_file(str(f), BUCKET, f"{prefix}/{f.name}")
    return f"s3://{BUCKET}/{prefix}"


@pytest.fixture(scope="module")
def dense(s3: Any, tmp_path_factory: Any) -> tuple[str, np.ndarray]:
    path = tmp_path_factory.mktemp("dense") / "s"
    data = np.arange(3000 * 16, dtype=np.int32).reshape(3000, 16)
    with loaderx.Dense.create(path, np.int32, (16,), codec="raw") as w:
        w.append(data[:1500])
        w.append(data[1500:])
    return upload(s3, path, "dense"), data


def test_dense_reads_from_s3_match_the_local_store(s3: Any, dense: Any) -> None:
    url, data = dense
    with loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint)) as d:
        assert len(d) == 3000
        assert d.item_shape == (16,)
        np.testing.assert_array_equal(d[7], data[7])
        idx = np.array([2999, 0, 1500, 17, 17, 1234])
        np.testing.assert_array_equal(d[idx], data[idx])
        np.testing.assert_array_equal(d[100:140], data[100:140])
        d.verify()
        # A reader pickles with its URL and options (DataLoader workers).
        again = pickle.loads(pickle.dumps(d))
        np.testing.assert_array_equal(again[[5, 6]], data[[5, 6]])
        again.close()


def test_ragged_and_compressed_reads(s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "r"
    rows = [np.arange(n, dtype=np.float32) * n for n in (1, 5, 300, 2, 42)]
    with loaderx.Ragged.create(path, np.float32, 1, codec="zstd") as w:
        w.append(rows)
    url = upload(s3, path, "ragged")
    with loaderx.Ragged.open(url, storage_options=s3_options(s3.endpoint)) as r:
        assert len(r) == 5
        for i, row in enumerate(rows):
            np.testing.assert_array_equal(r[i], row)


def test_image_reader_over_s3(s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "img"
    imgs = (np.arange(6 * 8 * 8 * 3) % 251).astype(np.uint8).reshape(6, 8, 8, 3)
    with loaderx.Dense.create(path, np.uint8, (8, 8, 3), codec="png") as w:
        w.append(imgs)
    url = upload(s3, path, "img")
    with loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint)) as d:
        np.testing.assert_array_equal(d[[4, 1]], imgs[[4, 1]])
    images = loaderx.Dense.open(url, resize=(4, 4), storage_options=s3_options(s3.endpoint))
    assert images[[0, 5]].shape == (2, 4, 4, 3)


def test_writes_and_bad_options_are_refused(s3: Any, dense: Any) -> None:
    url, _ = dense
    with pytest.raises(ValueError, match="read-only"):
        loaderx.Dense.open(url, True, storage_options=s3_options(s3.endpoint))
    with pytest.raises(ValueError, match="aws_no_such_key"):
        loaderx.Dense.open(url, storage_options={**s3_options(s3.endpoint), "aws_no_such_key": "x"})
    with pytest.raises(ZrecordError, match="meta.zr is missing"):
        loaderx.Dense.open(f"s3://{BUCKET}/nothing-here", storage_options=s3_options(s3.endpoint))


def test_a_changed_object_is_an_error_naming_it(s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "c"
    with loaderx.Dense.create(path, np.uint8, (4,), codec="raw") as w:
        w.append(np.arange(400, dtype=np.uint8).reshape(100, 4))
    url = upload(s3, path, "changing")
    with loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint)) as d:
        d[[1, 2]]
        chunk = next(k["Key"] for k in s3.list_objects_v2(Bucket=BUCKET, Prefix="changing/")["Contents"] if k["Key"].endswith("/0.zr"))
        body = bytearray(s3.get_object(Bucket=BUCKET, Key=chunk)["Body"].read())
        body[0] ^= 0xFF
        s3.put_object(Bucket=BUCKET, Key=chunk, Body=bytes(body))
        with pytest.raises(ZrecordError, match="changed since the store was opened") as e:
            d[[0]]
        assert f"{url}/0.zr" in str(e.value)


def test_a_v1_store_by_url_is_refused_saying_why(s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "v1"
    with loaderx.Zrecord(path) as z:
        z.append(np.zeros(10, np.uint8), 1, 10)
        assert z.native_store().format_version() == 1
    url = upload(s3, path, "v1")
    with pytest.raises(ZrecordError, match="carry no checksums"):
        loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint))


# --- faults, through the proxy ------------------------------------------------------


def opened(proxy: FaultProxy, url: str, **ours: Any) -> Any:
    ours.setdefault("timeout", 2)
    ours.setdefault("retry_backoff", 0.01)
    return loaderx.Dense.open(url, storage_options=s3_options(proxy.endpoint, **ours))


def test_latency_is_only_slower(proxy: FaultProxy, dense: Any) -> None:
    url, data = dense
    with opened(proxy, url) as d:
        proxy.arm("latency", None, delay=0.05)
        np.testing.assert_array_equal(d[[3, 2000]], data[[3, 2000]])
        assert proxy.hit >= 1


@pytest.mark.parametrize("fault", ["503", "429", "reset", "truncate"])
def test_transient_faults_are_retried(proxy: FaultProxy, dense: Any, fault: str) -> None:
    url, data = dense
    with opened(proxy, url) as d:
        proxy.arm(fault, 2)
        np.testing.assert_array_equal(d[[9, 2500]], data[[9, 2500]])
        assert proxy.hit == 2


@pytest.mark.parametrize("fault", ["503", "429", "reset", "truncate"])
def test_lasting_faults_end_in_an_error_naming_the_object(
    proxy: FaultProxy, dense: Any, fault: str
) -> None:
    url, _ = dense
    with opened(proxy, url, max_retries=2) as d:
        proxy.arm(fault, None)
        with pytest.raises(ZrecordError) as e:
            d[[11]]
        assert url in str(e.value)
        assert proxy.hit >= 2


def test_a_server_that_stops_answering_times_out(proxy: FaultProxy, dense: Any) -> None:
    url, _ = dense
    with opened(proxy, url, timeout=1, max_retries=0) as d:
        proxy.arm("hang", None)
        start = time.monotonic()
        with pytest.raises(ZrecordError, match="timeout") as e:
            d[[12]]
        assert time.monotonic() - start < 10
        assert url in str(e.value)


def test_a_refused_connection_is_an_error_naming_the_url(dense: Any) -> None:
    url, _ = dense
    endpoint = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(ZrecordError) as e:
        loaderx.Dense.open(url, storage_options=s3_options(endpoint, timeout=2, retry_backoff=0.01))
    assert time.monotonic() - start < 10
    assert url in str(e.value)


def test_ctrl_c_interrupts_a_waiting_gather(proxy: FaultProxy, dense: Any) -> None:
    url, _ = dense
    with opened(proxy, url, timeout=30) as d:
        proxy.arm("hang", None)
        timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            d[[13]]
        timer.join()
        assert time.monotonic() - start < 10


def test_cli_info_verify_and_bench_take_a_url(s3: Any, dense: Any, capsys: Any) -> None:
    import json

    from loaderx.cli import main

    url, _ = dense
    opts = [f"-o{k}={v}" for k, v in s3_options(s3.endpoint).items()]
    assert main(["info", url, "--json", *opts]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["path"], info["records"], info["kind"], info["format"]) == (url, 3000, "dense", 2)
    assert main(["verify", url, *opts]) == 0
    assert f"{url}: ok (3,000 records)" in capsys.readouterr().out
    argv = ["bench", url, "--batch-sizes", "64", "--workers", "1", "--seconds", "0.2", "--json"]
    assert main([*argv, *opts]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["batches"] >= 2
    with pytest.raises(SystemExit):
        main(["info", url, "-o", "no-equals-sign"])


def test_a_dataloader_over_s3_batches_then_hands_a_fault_to_the_consumer(
    proxy: FaultProxy, dense: Any
) -> None:
    url, data = dense
    reader = opened(proxy, url, max_retries=1)
    loader = loaderx.DataLoader({"x": reader}, transform_workers=2, batch_size=32, mode=1, seed=0)
    try:
        for _ in range(3):
            batch = next(loader)
            x = batch["x"]
            assert x.shape == (32, 16)
            # Row i of the store is i * 16 .. i * 16 + 15.
            np.testing.assert_array_equal(x[:, 1:] - x[:, :-1], 1)
            np.testing.assert_array_equal(data[x[:, 0] // 16], x)
        proxy.arm("503", None)
        with pytest.raises(ZrecordError) as e:
            for _ in range(64):
                next(loader)
        assert url in str(e.value)
    finally:
        start = time.monotonic()
        loader.close()
        reader.close()
        assert time.monotonic() - start < 10


def chunk_gets(proxy: FaultProxy) -> int:
    """Ranged GETs of chunk objects (not of the table in ``meta.zr``)."""
    with proxy.lock:
        return sum(1 for path, _ in proxy.ranged_gets if "meta.zr" not in path)


@pytest.mark.parametrize("lookahead", [0, 4])
def test_the_dataloader_requests_its_next_batches_ahead(
    proxy: FaultProxy, dense: Any, lookahead: int
) -> None:
    url, data = dense
    # Sequential batches of 64 neighbouring rows: the store keeps them as a
    # run checksummed in blocks of 64 rows (4 KiB), so each batch is one
    # block, read (and checked) with one request.
    reader = opened(proxy, url, coalesce_bytes=0)
    loader = loaderx.DataLoader(
        {"x": reader},
        transform_workers=1,
        batch_size=64,
        prefetch_size=1,
        mode=0,
        seed=0,
        lookahead=lookahead,
    )
    try:
        np.testing.assert_array_equal(next(loader)["x"], data[0:64])
        # The window holds one batch: without lookahead the loader asks for
        # batch 1 and no more; with it, batches 1..5 are requested while the
        # consumer holds batch 0.
        expected = 2 + lookahead
        deadline = time.monotonic() + 10
        while chunk_gets(proxy) < expected and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        assert chunk_gets(proxy) == expected, proxy.ranged_gets
        # The batches read ahead are the right ones, read once.
        for k in range(1, 6):
            np.testing.assert_array_equal(next(loader)["x"], data[64 * k : 64 * (k + 1)])
        assert chunk_gets(proxy) <= 7 + lookahead
    finally:
        loader.close()
        reader.close()


def test_verify_and_damaged_read_in_batches_not_a_request_per_record(
    proxy: FaultProxy, s3: Any, tmp_path: Path
) -> None:
    data = np.arange(3000 * 16, dtype=np.int32).reshape(3000, 16)
    path = tmp_path / "v"
    with loaderx.Dense.create(path, np.int32, (16,), codec="raw", data_shards=1) as w:
        w.append(data)
    # Damage record 1234's bytes in its chunk (raw records: row i at i * 64).
    chunk = max((f for f in path.iterdir() if f.name[0].isdigit()), key=lambda f: f.stat().st_size)
    raw = bytearray(chunk.read_bytes())
    at = raw.find(data[1234].tobytes())
    assert at >= 0
    raw[at + 5] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    url = upload(s3, path, "damaged")
    with opened(proxy, url) as d:
        before = chunk_gets(proxy)
        found = d.damaged()
        # A run's records are checksummed 64 at a time (4 KiB blocks):
        # record 1234 is in block 19, records 1216 ..= 1279.
        assert [i for i, _ in found] == list(range(1216, 1280)), found
        assert all("block 19 of its run" in why for _, why in found)
        with pytest.raises(ZrecordError, match="entry 1216: block 19"):
            d.verify()
        # The blocks around it read.
        np.testing.assert_array_equal(d[[1215, 1280]], data[[1215, 1280]])
        with pytest.raises(ZrecordError, match="block 19"):
            d[1234]
        # 3000 records of 64 bytes: a few requests, not one per record.
        assert chunk_gets(proxy) - before <= 10, proxy.ranged_gets


def test_lookahead_is_checked(tmp_path: Path) -> None:
    with loaderx.Dense.create(tmp_path / "s", np.int32, (2,), codec="raw") as w:
        w.append(np.zeros((4, 2), np.int32))
    with loaderx.Dense.open(tmp_path / "s") as r:
        with pytest.raises(ValueError, match="lookahead"):
            loaderx.DataLoader({"x": r}, batch_size=2, lookahead=-1)
        with pytest.raises(TypeError, match="lookahead"):
            loaderx.DataLoader({"x": r}, batch_size=2, lookahead=1.5)


# --- push ----------------------------------------------------------------------------


def test_push_uploads_a_store_that_then_reads_back(s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "p"
    data = (np.arange(5000 * 8) % 241).astype(np.uint8).reshape(5000, 8)
    with loaderx.Dense.create(path, np.uint8, (8,), codec="zstd", data_shards=2) as w:
        w.append(data)
    url = f"s3://{BUCKET}/pushed"
    objects = loaderx.push(path, url, storage_options=s3_options(s3.endpoint))
    assert objects[-1] == "meta.zr" and len(objects) >= 2
    keys = {k["Key"] for k in s3.list_objects_v2(Bucket=BUCKET, Prefix="pushed/")["Contents"]}
    assert keys == {f"pushed/{o}" for o in objects}
    with loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint)) as d:
        np.testing.assert_array_equal(d[[4999, 0, 2500]], data[[4999, 0, 2500]])
    # A URL holding a store is not replaced under its readers.
    with pytest.raises(FileExistsError):
        loaderx.push(path, url, storage_options=s3_options(s3.endpoint))
    # Nor is a directory that holds no store pushed.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not a store")
    with pytest.raises(ZrecordError, match="holds no store"):
        loaderx.push(plain, f"s3://{BUCKET}/not-a-store", storage_options=s3_options(s3.endpoint))
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="not-a-store/")


def test_cli_push(s3: Any, tmp_path: Path, capsys: Any) -> None:
    from loaderx.cli import main

    path = tmp_path / "c"
    with loaderx.Dense.create(path, np.int64, (), codec="raw") as w:
        w.append(np.arange(100, dtype=np.int64))
    url = f"s3://{BUCKET}/cli-pushed"
    opts = [f"-o{k}={v}" for k, v in s3_options(s3.endpoint).items()]
    assert main(["push", str(path), url, *opts]) == 0
    assert f"to {url}" in capsys.readouterr().out
    with loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint)) as d:
        np.testing.assert_array_equal(d[[99, 1]], [99, 1])


def test_a_failed_push_publishes_nothing(proxy: FaultProxy, s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "i"
    with loaderx.Dense.create(path, np.uint8, (4,), codec="raw") as w:
        w.append(np.zeros((10, 4), np.uint8))
    url = f"s3://{BUCKET}/failed-push"
    proxy.arm("503", None, method="PUT")
    with pytest.raises(ZrecordError) as e:
        loaderx.push(path, url, storage_options=s3_options(proxy.endpoint, max_retries=1, retry_backoff=0.01))
    assert url in str(e.value)
    assert proxy.hit >= 1
    keys = {k["Key"] for k in s3.list_objects_v2(Bucket=BUCKET, Prefix="failed-push/").get("Contents", [])}
    assert "failed-push/meta.zr" not in keys


# --- the block cache -------------------------------------------------------------------


def test_the_block_cache_is_shared_by_processes_and_keyed_by_etag(
    proxy: FaultProxy, s3: Any, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    path = tmp_path / "cached"
    data = np.arange(2000 * 4, dtype=np.int32).reshape(2000, 4)
    with loaderx.Dense.create(path, np.int32, (4,), codec="raw") as w:
        w.append(data)
    url = upload(s3, path, "cached")
    cache = tmp_path / "cache"
    opts = s3_options(proxy.endpoint, cache_dir=str(cache), cache_bytes=1 << 30, max_retries=0)
    # (cache_dir= and cache_bytes= as keywords are the same options.)
    # Another process fills the cache.
    script = (
        "import json, sys, numpy as np, loaderx\n"
        "url, opts = sys.argv[1], json.loads(sys.argv[2])\n"
        "with loaderx.Dense.open(url, storage_options=opts) as d:\n"
        "    print(int(d[np.arange(2000)].sum()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, url, json.dumps(opts)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert int(out.stdout) == int(data.sum())
    assert any(p.name.endswith(".blk") for p in cache.iterdir())
    # This one reads every record with the server refusing every ranged read.
    proxy.arm("503", None)
    plain = s3_options(proxy.endpoint, max_retries=0)
    with loaderx.Dense.open(url, storage_options=plain, cache_dir=cache, cache_bytes=1 << 30) as d:
        np.testing.assert_array_equal(d[np.arange(2000)], data)
    assert proxy.hit == 0
    # The object changes on the server: a new handle sees the new ETag and
    # is not served the old blocks (the server still refuses: an error).
    chunk = "cached/0.zr"
    body = bytearray(s3.get_object(Bucket=BUCKET, Key=chunk)["Body"].read())
    body[0] ^= 1
    s3.put_object(Bucket=BUCKET, Key=chunk, Body=bytes(body))
    with loaderx.Dense.open(url, storage_options=opts) as d:
        with pytest.raises(ZrecordError):
            d[[0]]
    assert proxy.hit >= 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_reads_through_an_inherited_reader(s3: Any, dense: Any) -> None:
    url, data = dense
    with loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint, timeout=5)) as d:
        np.testing.assert_array_equal(d[[1, 2]], data[[1, 2]])
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if the read is right
            code = 1
            try:
                code = 0 if np.array_equal(d[[10, 2000]], data[[10, 2000]]) else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung reading the store")
            time.sleep(0.05)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        np.testing.assert_array_equal(d[[3]], data[[3]])
