"""Writing to a URL: ``Dense.create(url)``/``Ragged.create(url)`` and the
converters' output at a URL are staged locally and published at the end,
against a real S3 server on loopback (moto in server mode, started here)
and a fault-injecting proxy of our own in front of it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx
import loaderx.collection
import loaderx.convert
from loaderx.errors import ContainerExistsError, ZrecordError

moto_server = pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
boto3 = pytest.importorskip("boto3")

from remote_servers import FaultProxy, s3_options  # noqa: E402

BUCKET = "written"


def keys(client: Any, prefix: str) -> dict[str, bytes]:
    """Every object under `prefix`/ and its bytes."""
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/").get("Contents", [])
    return {
        k["Key"]: client.get_object(Bucket=BUCKET, Key=k["Key"])["Body"].read() for k in listing
    }


def files(local: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(local)): p.read_bytes() for p in sorted(local.rglob("*")) if p.is_file()
    }


def test_dense_create_at_a_url_publishes_at_close_byte_for_byte(
    s3: Any, tmp_path: Path
) -> None:
    opts = s3_options(s3.endpoint)
    staging = tmp_path / "staging"
    staging.mkdir()
    data = (np.arange(4000 * 24) % 251).astype(np.uint8).reshape(4000, 24)
    url = f"s3://{BUCKET}/dense"
    w = loaderx.Dense.create(
        url, np.uint8, (24,), codec="zstd", data_shards=2, storage_options=opts,
        staging_dir=staging,
    )
    assert w.path == url and "s3://" in repr(w)
    w.append(data[:1000])
    w.append(data[1000:])
    # Nothing at the URL until close; the store is staged in staging_dir.
    assert keys(s3, "dense") == {}
    assert len(list(staging.iterdir())) == 1
    w.close()
    assert list(staging.iterdir()) == []  # the staging directory is removed
    with loaderx.Dense.open(url, storage_options=opts) as d:
        assert len(d) == 4000
        np.testing.assert_array_equal(d[:], data)
        d.verify()
    # Byte for byte: the same store written locally has the same objects.
    local = tmp_path / "local"
    with loaderx.Dense.create(local, np.uint8, (24,), codec="zstd", data_shards=2) as w2:
        w2.append(data[:1000])
        w2.append(data[1000:])
    published = keys(s3, "dense")
    assert {k.removeprefix("dense/") for k in published} == set(files(local))
    for name, body in files(local).items():
        if name != "meta.zr":  # the table holds no path, but compare records anyway
            assert published[f"dense/{name}"] == body, name
    with loaderx.Dense.open(local) as d:
        np.testing.assert_array_equal(d[:], data)


def test_ragged_create_at_a_url_round_trips(s3: Any, tmp_path: Path) -> None:
    opts = s3_options(s3.endpoint)
    rng = np.random.default_rng(3)
    records = [rng.integers(0, 1000, size=int(n), dtype=np.int64) for n in rng.integers(1, 50, 300)]
    url = f"s3://{BUCKET}/ragged"
    with loaderx.Ragged.create(
        url, np.int64, 1, codec="lz4", storage_options=opts, staging_dir=tmp_path
    ) as w:
        w.append(records)
    assert list(tmp_path.iterdir()) == []
    with loaderx.Ragged.open(url, storage_options=opts) as r:
        assert len(r) == 300
        for i in (0, 17, 299):
            np.testing.assert_array_equal(r[i], records[i])
    objects = keys(s3, "ragged")
    assert "ragged/meta.zr" in objects and len(objects) >= 2


def test_a_prefix_that_holds_anything_is_refused_and_left_unchanged(
    s3: Any, tmp_path: Path
) -> None:
    opts = s3_options(s3.endpoint)
    s3.put_object(Bucket=BUCKET, Key="taken/readme.txt", Body=b"hello")
    before = keys(s3, "taken")
    with pytest.raises(ContainerExistsError, match="taken/readme.txt") as e:
        loaderx.Dense.create(
            f"s3://{BUCKET}/taken", np.int32, (), codec="raw", storage_options=opts,
            staging_dir=tmp_path,
        )
    assert isinstance(e.value, FileExistsError)
    assert keys(s3, "taken") == before
    assert list(tmp_path.iterdir()) == []  # nothing staged either
    # The same for a converter's output.
    src = tmp_path / "a.npy"
    np.save(src, np.arange(10))
    with pytest.raises(FileExistsError):
        loaderx.convert.convert_npy(
            src, f"s3://{BUCKET}/taken", codec="raw", storage_options=opts
        )
    assert keys(s3, "taken") == before


def test_url_writers_take_no_http_and_opens_stay_read_only(s3: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="read-only"):
        loaderx.Dense.create("http://127.0.0.1:9/x", np.int32, (), codec="raw")
    with pytest.raises(ValueError, match="storage_options"):
        loaderx.Dense.create(tmp_path / "l", np.int32, (), codec="raw", storage_options={"a": 1})
    with pytest.raises(ValueError, match="staging_dir"):
        loaderx.Dense.create(tmp_path / "l", np.int32, (), codec="raw", staging_dir=tmp_path)
    opts = s3_options(s3.endpoint)
    url = f"s3://{BUCKET}/ro"
    with loaderx.Dense.create(url, np.int32, (), codec="raw", storage_options=opts) as w:
        w.append(np.arange(5, dtype=np.int32))
    with pytest.raises(ValueError, match="read-only"):
        loaderx.Dense.open(url, writable=True, storage_options=opts)


def test_an_exception_in_with_publishes_nothing(s3: Any, tmp_path: Path) -> None:
    opts = s3_options(s3.endpoint)
    url = f"s3://{BUCKET}/abandoned"
    with pytest.raises(RuntimeError, match="boom"):
        with loaderx.Dense.create(
            url, np.int32, (2,), codec="raw", storage_options=opts, staging_dir=tmp_path
        ) as w:
            w.append(np.zeros((10, 2), np.int32))
            raise RuntimeError("boom")
    assert w.closed
    assert keys(s3, "abandoned") == {}
    assert list(tmp_path.iterdir()) == []
    # The prefix is still free.
    with loaderx.Dense.create(url, np.int32, (2,), codec="raw", storage_options=opts) as w:
        w.append(np.ones((3, 2), np.int32))
    with loaderx.Dense.open(url, storage_options=opts) as d:
        np.testing.assert_array_equal(d[:], np.ones((3, 2), np.int32))


def test_a_writer_dropped_without_close_publishes(s3: Any, tmp_path: Path) -> None:
    import gc

    opts = s3_options(s3.endpoint)
    url = f"s3://{BUCKET}/dropped"
    w = loaderx.Dense.create(
        url, np.int64, (), codec="raw", storage_options=opts, staging_dir=tmp_path
    )
    w.append(np.arange(7, dtype=np.int64))
    del w
    gc.collect()
    assert list(tmp_path.iterdir()) == []
    with loaderx.Dense.open(url, storage_options=opts) as d:
        np.testing.assert_array_equal(d[:], np.arange(7))


def test_a_failed_publish_names_the_url_publishes_nothing_and_keeps_the_store(
    proxy: FaultProxy, s3: Any, tmp_path: Path
) -> None:
    opts = s3_options(proxy.endpoint, max_retries=1, retry_backoff=0.01)
    url = f"s3://{BUCKET}/faulted"
    data = np.arange(500 * 3, dtype=np.int16).reshape(500, 3)
    w = loaderx.Dense.create(
        url, np.int16, (3,), codec="raw", storage_options=opts, staging_dir=tmp_path
    )
    w.append(data)
    proxy.arm("503", None, method="PUT")
    with pytest.raises(ZrecordError) as e:
        w.close()
    message = str(e.value)
    assert url in message and "loaderx push" in message
    assert proxy.hit >= 1
    assert w.closed
    # Nothing readable at the URL.
    assert "faulted/meta.zr" not in keys(s3, "faulted")
    with pytest.raises((ZrecordError, FileNotFoundError, ValueError)):
        loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint))
    # The staged store is kept, named by the error, and pushes as it says.
    (staging,) = tmp_path.iterdir()
    store = staging / "store"
    assert str(store) in message
    with loaderx.Dense.open(store) as d:
        np.testing.assert_array_equal(d[:], data)
    proxy.arm(None)
    loaderx.push(store, url, storage_options=opts)
    with loaderx.Dense.open(url, storage_options=opts) as d:
        np.testing.assert_array_equal(d[:], data)


# --- converters -------------------------------------------------------------------------------


def test_convert_npy_to_a_url_reads_back_equal(s3: Any, tmp_path: Path) -> None:
    opts = s3_options(s3.endpoint)
    data = np.arange(3000 * 5, dtype=np.float32).reshape(3000, 5)
    src = tmp_path / "x.npy"
    np.save(src, data)
    url = f"s3://{BUCKET}/npy"
    counts = loaderx.convert.convert_npy(
        src, url, codec="zstd", storage_options=opts, staging_dir=tmp_path
    )
    assert counts == {"": 3000}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]  # staging removed
    with loaderx.Dense.open(url, storage_options=opts) as d:
        np.testing.assert_array_equal(d[:], data)


def test_convert_parquet_to_a_url_and_a_collection_with_parts(s3: Any, tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    opts = s3_options(s3.endpoint)
    n = 1200
    ids = np.arange(n, dtype=np.int64)
    tokens = [list(range(i % 7)) for i in range(n)]
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": ids, "tokens": pa.array(tokens, pa.list_(pa.int32()))}), src)
    url = f"s3://{BUCKET}/parquet"
    counts = loaderx.convert.convert_parquet(src, url, codec="zstd", storage_options=opts)
    assert counts == {"id": n, "tokens": n}
    with loaderx.Dense.open(f"{url}/id", storage_options=opts) as d:
        np.testing.assert_array_equal(d[:], ids)
    with loaderx.Ragged.open(f"{url}/tokens", storage_options=opts) as r:
        for i in (0, 6, 13, n - 1):
            np.testing.assert_array_equal(r[i], np.array(tokens[i], np.int32))
    # num_proc: a collection, converted locally and published (manifest last).
    curl = f"s3://{BUCKET}/parquet-parts"
    counts = loaderx.convert.convert_parquet(
        src, curl, codec="zstd", num_proc=2, storage_options=opts
    )
    assert sum(v for k, v in counts.items() if k.endswith("/id")) == n
    objects = keys(s3, "parquet-parts")
    assert "parquet-parts/manifest.zc" in objects
    assert "parquet-parts/part-00000/.complete" in objects
    col = loaderx.collection.open(curl, storage_options=opts)
    try:
        assert len(col) == n
        np.testing.assert_array_equal(col["id"][[0, n - 1, 600]], ids[[0, n - 1, 600]])
    finally:
        col.close()


def test_a_failed_conversion_publishes_nothing(s3: Any, tmp_path: Path) -> None:
    opts = s3_options(s3.endpoint)
    src = tmp_path / "bad.npy"
    src.write_bytes(b"\x93NUMPY not really")
    url = f"s3://{BUCKET}/bad"
    with pytest.raises(Exception):
        loaderx.convert.convert_npy(
            src, url, codec="raw", storage_options=opts, staging_dir=tmp_path
        )
    assert keys(s3, "bad") == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npy"]


def test_a_failed_converter_upload_names_the_url(
    proxy: FaultProxy, s3: Any, tmp_path: Path
) -> None:
    src = tmp_path / "y.npy"
    np.save(src, np.arange(100, dtype=np.int64))
    url = f"s3://{BUCKET}/conv-faulted"
    opts = s3_options(proxy.endpoint, max_retries=1, retry_backoff=0.01)
    staging = tmp_path / "stage"
    staging.mkdir()
    proxy.arm("503", None, method="PUT")
    with pytest.raises(ZrecordError) as e:
        loaderx.convert.convert_npy(
            src, url, codec="raw", storage_options=opts, staging_dir=staging
        )
    message = str(e.value)
    assert url in message and "no store was published" in message
    assert "conv-faulted/meta.zr" not in keys(s3, "conv-faulted")
    (kept,) = staging.iterdir()
    assert str(kept) in message


def test_cli_convert_to_a_url(s3: Any, tmp_path: Path, capsys: Any) -> None:
    from loaderx.cli import main

    data = np.arange(700 * 2, dtype=np.int32).reshape(700, 2)
    src = tmp_path / "c.npy"
    np.save(src, data)
    url = f"s3://{BUCKET}/cli/out"  # a Path would collapse the `//`
    opts = [f"-o{k}={v}" for k, v in s3_options(s3.endpoint).items()]
    assert main(["convert", str(src), url, "--codec", "lz4", "-q", *opts]) == 0
    with loaderx.Dense.open(url, storage_options=s3_options(s3.endpoint)) as d:
        np.testing.assert_array_equal(d[:], data)
    # Again to the same URL: refused, and says so.
    assert main(["convert", str(src), url, "-q", *opts]) == 1
    assert "already holds objects" in capsys.readouterr().err
    # Storage options with a local output are refused.
    assert main(["convert", str(src), str(tmp_path / "local"), "-q", *opts]) == 1
    assert not os.path.exists(tmp_path / "local")


def test_an_image_folder_to_a_url_keeps_its_plain_files(s3: Any, tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(5)
    made = []
    for label, cls in enumerate(["cat", "dog"]):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(3):
            path = tmp_path / "imgs" / cls / f"{i}.png"
            image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(path)
            made.append((path, label))
    opts = s3_options(s3.endpoint)
    url = f"s3://{BUCKET}/images"
    counts = loaderx.convert.convert_image_folder(
        tmp_path / "imgs", url, codec="raw", storage_options=opts
    )
    assert counts == {"label": 6, "image": 6}
    objects = keys(s3, "images")
    assert objects["images/classes.txt"].split() == [b"cat", b"dog"]
    with loaderx.Ragged.open(f"{url}/image", storage_options=opts) as r:
        for i, (path, _) in enumerate(made):
            assert r[i].tobytes() == path.read_bytes()
    with loaderx.Dense.open(f"{url}/label", storage_options=opts) as d:
        np.testing.assert_array_equal(d[:], [m[1] for m in made])
