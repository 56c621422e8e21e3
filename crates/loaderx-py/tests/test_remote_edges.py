"""Stores in object storage at their edges: credentials and the cache from
the environment, plain HTTP, objects cut short or deleted after open, DNS
and TLS failures, the requests a gather has in flight, the block cache's
eviction order, and a block cache shared by processes reading at the same
time. Real servers on loopback (moto in server mode, started here) and the
fault-injecting proxy of ``remote_servers``."""

from __future__ import annotations

import json
import subprocess
import sys
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

BUCKET = "edges"


def stored(
    s3: Any, tmp_path: Path, prefix: str, rows: int = 3000, width: int = 16, public: bool = False
) -> tuple[str, np.ndarray]:
    """A raw Dense store of ``arange`` int32 records uploaded under `prefix`
    (readable without credentials when `public`)."""
    path = tmp_path / prefix
    data = np.arange(rows * width, dtype=np.int32).reshape(rows, width)
    with loaderx.Dense.create(path, np.int32, (width,), codec="raw") as w:
        w.append(data)
    for f in sorted(path.iterdir()):
        if f.name.endswith(".zr"):
            extra = {"ACL": "public-read"} if public else None
            s3.upload_file(str(f), BUCKET, f"{prefix}/{f.name}", ExtraArgs=extra)
    return f"s3://{BUCKET}/{prefix}", data


def test_credentials_endpoint_and_cache_come_from_the_environment(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, data = stored(s3, tmp_path, "env")
    # Without the endpoint the store is not reachable (the default is AWS's).
    with pytest.raises(ZrecordError):
        loaderx.Dense.open(url, storage_options={
            "aws_access_key_id": "test", "aws_secret_access_key": "test", "aws_region": "us-east-1",
            "connect_timeout": 1, "timeout": 1, "max_retries": 0,
        })
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "LOADERX_CACHE_DIR": str(tmp_path / "cache"),
    }.items():
        monkeypatch.setenv(key, value)
    with loaderx.Dense.open(url) as d:
        idx = np.array([5, 2999, 1400])
        np.testing.assert_array_equal(d[idx], data[idx])
    assert any(p.name.endswith(".blk") for p in (tmp_path / "cache").iterdir())


def test_a_store_reads_over_plain_http(s3: Any, tmp_path: Path) -> None:
    """``http://`` is read-only and unlisted: the store's objects are found
    by their names (the S3 server serves them path-style to plain GETs)."""
    _, data = stored(s3, tmp_path, "http", public=True)
    url = f"{s3.endpoint}/{BUCKET}/http"
    with loaderx.Dense.open(url, storage_options={"timeout": 5, "allow_http": True}) as d:
        assert len(d) == len(data)
        idx = np.array([2999, 0, 17, 17, 1500])
        np.testing.assert_array_equal(d[idx], data[idx])
        d.verify()
    with pytest.raises(ValueError, match="read-only"):
        loaderx.Dense.open(url, True)


@pytest.mark.parametrize("change", ["truncated", "deleted"])
def test_an_object_cut_short_or_deleted_after_open_is_an_error_naming_it(
    s3: Any, tmp_path: Path, change: str
) -> None:
    url, data = stored(s3, tmp_path, f"cut-{change}")
    key = f"cut-{change}/0.zr"
    with loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint, max_retries=1)) as d:
        np.testing.assert_array_equal(d[[1, 2]], data[[1, 2]])
        if change == "truncated":
            body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            s3.put_object(Bucket=BUCKET, Key=key, Body=body[: len(body) // 2])
        else:
            s3.delete_object(Bucket=BUCKET, Key=key)
        for idx in ([0], [2999], [1, 2]):
            with pytest.raises(ZrecordError) as e:
                d[idx]
            assert f"{url}/0.zr" in str(e.value)


def test_a_name_that_does_not_resolve_is_an_error_naming_the_url(tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/dns"
    start = time.monotonic()
    with pytest.raises(ZrecordError) as e:
        loaderx.Dense.open(
            url,
            storage_options=s3_options(
                "http://no-such-host.invalid:9000", timeout=2, connect_timeout=2, retry_backoff=0.01
            ),
        )
    assert time.monotonic() - start < 20
    assert url in str(e.value)
    assert "dns error" in str(e.value), "the resolver's failure, not a timeout"


def test_a_tls_handshake_that_fails_is_an_error_naming_the_url(s3: Any) -> None:
    """``https://`` to a server that speaks plain HTTP: the handshake fails."""
    url = f"s3://{BUCKET}/tls"
    endpoint = s3.endpoint.replace("http://", "https://")
    start = time.monotonic()
    with pytest.raises(ZrecordError) as e:
        loaderx.Dense.open(
            url,
            storage_options={
                **s3_options(endpoint, timeout=2, connect_timeout=2, retry_backoff=0.01),
                "aws_allow_http": False,
            },
        )
    assert time.monotonic() - start < 20
    assert url in str(e.value)
    # rustls's refusal of a plain-HTTP answer, not a timeout.
    assert "corrupt message" in str(e.value) and "timed out" not in str(e.value)
    # And a port nobody listens on, for contrast, fails the same way.
    with pytest.raises(ZrecordError):
        loaderx.Dense.open(
            url, storage_options=s3_options(f"https://127.0.0.1:{free_port()}", timeout=2, retry_backoff=0.01)
        )


_READER = """
import json, sys
import numpy as np
import loaderx

url, opts, seed = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
rows, width = 20000, 64
rng = np.random.default_rng(seed)
with loaderx.Dense.open(url, storage_options=opts) as d:
    for _ in range(10):
        idx = rng.integers(0, rows, 24)
        got = d[idx]
        want = idx[:, None] * width + np.arange(width)
        if not np.array_equal(got, want.astype(np.int32)):
            sys.exit(f"batch {idx[:4]}... read wrong bytes")
print("ok")
"""


def test_processes_reading_at_once_share_a_bounded_cache(s3: Any, tmp_path: Path) -> None:
    """Three processes fill and evict one small cache at the same time:
    every batch each reads is right, and the directory ends near its bound
    (each process evicts after writing an eighth of it)."""
    url, _ = stored(s3, tmp_path, "shared", rows=20000, width=64)  # 5 MiB
    cache = tmp_path / "cache"
    bound, block = 512 << 10, 64 << 10
    opts = s3_options(
        s3.endpoint, cache_dir=str(cache), cache_bytes=bound, cache_block_bytes=block, timeout=20
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _READER, url, json.dumps(opts), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(3)
    ]
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-2000:]
            assert out.strip() == "ok"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    held = sum(f.stat().st_size for f in cache.iterdir() if f.name.endswith(".blk"))
    assert 0 < held <= bound + len(procs) * (bound // 8 + block), held
    assert not [f for f in cache.iterdir() if f.name.startswith(".tmp-")]


def chunk_gets(proxy: FaultProxy) -> list[str]:
    """The ``Range`` headers of the ranged GETs of record chunks (not of
    ``meta.zr``) the proxy has seen."""
    with proxy.lock:
        return [r for path, r in proxy.ranged_gets if not path.endswith("/meta.zr")]


@pytest.mark.parametrize(("cap", "peak"), [(1, 1), (4, 4), (16, 9)])
def test_concurrency_bounds_the_requests_one_gather_has_in_flight(
    s3: Any, proxy: FaultProxy, tmp_path: Path, cap: int, peak: int
) -> None:
    """A gather of records too far apart to share a request has at most
    ``concurrency`` ranged GETs in flight at once, and uses all of them:
    with the first requests held by the proxy until as many as the cap
    allows are in flight, nine requests reach the server ``concurrency``
    at a time (all nine when the cap is larger), never more."""
    url, data = stored(s3, tmp_path, f"concurrency-{cap}")
    idx = np.arange(9) * 333  # 21 KiB apart: one request each
    opts = s3_options(proxy.endpoint, concurrency=cap, coalesce_bytes=0)
    with loaderx.Dense.open(url, storage_options=opts) as d:
        before = len(chunk_gets(proxy))
        proxy.reset_peak()
        proxy.hold(peak)
        got = d[idx]
    np.testing.assert_array_equal(got, data[idx])
    assert len(chunk_gets(proxy)) - before == len(idx), "one request per record"
    assert proxy.peak == peak


def test_the_cache_evicts_the_least_recently_used_blocks_first(
    s3: Any, proxy: FaultProxy, tmp_path: Path
) -> None:
    """A hit makes a block recently used: when the directory passes its
    bound, the block read longest ago goes, not the one written first.
    With blocks of at least an eighth of the bound, eviction runs after
    every block written."""
    url, data = stored(s3, tmp_path, "lru")
    cache, block = tmp_path / "cache", 4096
    opts = s3_options(
        proxy.endpoint, cache_dir=str(cache), cache_bytes=3 * block, cache_block_bytes=block
    )
    rows = {"A": 300, "B": 900, "C": 1500, "D": 2100}  # each in a block of its own
    probe = tmp_path / "probe"

    def read(d: Any, name: str) -> list[int]:
        """Reads the record `name`: the chunk blocks the read fetched. Then
        waits until a file written gets a later modification time than any
        in the cache (file systems' clocks are coarse), so whatever the next
        read writes or refreshes is more recent than all before it."""
        before = len(chunk_gets(proxy))
        np.testing.assert_array_equal(d[[rows[name]]], data[[rows[name]]])
        fetched = [int(r.split("=")[1].split("-")[0]) // block for r in chunk_gets(proxy)[before:]]
        newest = max(f.stat().st_mtime_ns for f in cache.iterdir())
        while True:
            probe.unlink(missing_ok=True)
            probe.write_bytes(b"")
            if probe.stat().st_mtime_ns > newest:
                return fetched
            time.sleep(0.005)

    with loaderx.Dense.open(url, storage_options=opts) as d:
        blocks = {name: read(d, name) for name in "ABC"}
        assert sorted(len(b) for b in blocks.values()) == [1, 1, 1], blocks
        assert len({b[0] for b in blocks.values()}) == 3, blocks
        assert read(d, "A") == [], "a hit"
        # The fourth block takes the directory past its bound: B, read
        # longest ago, goes; A, written first but read since, stays.
        assert len(read(d, "D")) == 1
        assert read(d, "A") == [], "A, read again, stayed"
        assert read(d, "B") == blocks["B"], "B was evicted"
