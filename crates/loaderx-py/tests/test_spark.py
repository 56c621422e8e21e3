"""Spark writing a collection: real PySpark in local mode (one session for
the module, a JRE on the machine), read back byte for byte; a task that
fails once after writing its part, or whose worker dies in the middle of
writing it, and is retried by Spark leaves every record exactly once; a job
failing for good leaves no manifest, and only a new commit makes its
directory a collection."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime (cargo xtask test installs openjdk-17-jre-headless)", allow_module_level=True)

import loaderx  # noqa: E402
import loaderx.spark as lspark  # noqa: E402
from loaderx import collection as lc  # noqa: E402
from conftest import KilledWhenRead, blobs, check_blobs, png_file  # noqa: E402

N = 40


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    # Python workers run this interpreter (its venv has loaderx) and import
    # this module for the part writers below.
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p
    )
    session = (
        SparkSession.builder.master("local[2,2]")  # 2 threads, a task may fail once
        .appName("loaderx-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _frame(spark):
    rows = [
        (i, [float(i + k) for k in range(6)], [i * k for k in range(1 + i % 4)], png_file(i))
        for i in range(N)
    ]
    schema = "id long, x array<float>, tokens array<int>, image binary"
    return spark.createDataFrame(rows, schema).repartition(4)


def _check(root: str, storage_options=None) -> None:
    col = lc.open(root, storage_options=storage_options)
    assert len(col) == N
    assert sorted(col.columns) == ["id", "image", "tokens", "x"]
    assert col.schema["x"]["kind"] == "dense" and list(col.schema["x"]["shape"]) == [2, 3]
    assert col.schema["tokens"]["kind"] == "ragged"
    assert col.schema["image"]["codec"] == "png"
    ids = col["id"][:]
    assert sorted(ids.tolist()) == list(range(N)), "every record exactly once"
    for g, i in enumerate(ids.tolist()):
        want_x = (np.arange(6, dtype=np.float32) + i).reshape(2, 3)
        assert col["x"][g].tobytes() == want_x.tobytes()
        want_t = np.array([i * k for k in range(1 + i % 4)], dtype=np.int32)
        assert col["tokens"][g].tobytes() == want_t.tobytes()
        img = col["image"][g]
        assert img.shape == (3 + i % 3, 4, 3) and int(img[0, 0, 0]) == i
    col.close()


def test_other_binary_columns_are_uint8_records_byte_for_byte(spark, tmp_path):
    """A binary column that is not all JPEG or PNG files is stored as
    ``uint8`` Ragged records holding each value's bytes exactly (the PNG
    among them kept as bytes, not decoded; the empty value empty)."""
    rows = [(i, b) for i, b in enumerate(blobs(N))]
    frame = spark.createDataFrame(rows, "id long, blob binary").repartition(4)
    root = str(tmp_path / "blobs")
    lspark.write(frame, root)
    check_blobs(root, N)


def test_spark_write_reads_back_byte_for_byte(spark, tmp_path):
    root = str(tmp_path / "coll")
    assert lspark.write(_frame(spark), root, shapes={"x": (2, 3)}) == []
    _check(root)


def test_spark_writes_a_collection_to_s3(spark):
    """To an S3 server on loopback (moto, started here): each task uploads
    its part, the driver commits the manifest object; read back by URL."""
    pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
    from remote_servers import s3_options, start_s3

    server, client = start_s3("spark")
    opts = s3_options(client.endpoint)
    try:
        url = "s3://spark/coll"
        assert lspark.write(_frame(spark), url, storage_options=opts, shapes={"x": (2, 3)}) == []
        _check(url, opts)
    finally:
        server.stop()


def _fails_once(root, part, columns, codec):
    name = lc.write_part(root, part, columns, codec=codec)
    if part == 1:
        try:
            fd = os.open(os.path.join(root, "..", "failed-once"), os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return name
        os.close(fd)
        raise RuntimeError("this attempt fails after writing its part")
    return name


def test_a_task_retried_by_spark_leaves_every_record_once(spark, tmp_path):
    root = str(tmp_path / "coll")
    lspark.write(_frame(spark), root, shapes={"x": (2, 3)}, part_writer=_fails_once)
    assert os.path.exists(tmp_path / "failed-once")
    _check(root)
    assert sorted(os.listdir(root)) == ["manifest.zc"] + [f"part-{i:05d}" for i in range(4)]


def _dies_mid_write(root, part, columns, codec):
    if part == 1:
        try:
            os.close(os.open(os.path.join(root, "..", "died-once"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            columns = {k: v for k, v in columns.items() if k != "image"}
            columns["image"] = KilledWhenRead(len(columns["id"]))
    return lc.write_part(root, part, columns, codec=codec)


def test_a_worker_killed_mid_write_is_retried_and_records_appear_once(spark, tmp_path):
    root = str(tmp_path / "coll")
    lspark.write(_frame(spark), root, shapes={"x": (2, 3)}, part_writer=_dies_mid_write)
    assert os.path.exists(tmp_path / "died-once")
    _check(root)
    entries = os.listdir(root)
    assert sorted(e for e in entries if not e.startswith(".")) == ["manifest.zc"] + [
        f"part-{i:05d}" for i in range(4)
    ]
    assert [e for e in entries if e.startswith(".part-00001.tmp-")]


def _always_fails(root, part, columns, codec):
    lc.write_part(root, part, columns, codec=codec)
    if part == 2:
        raise RuntimeError("this task fails every time")
    return lc.part_name(part)


def test_a_job_failing_for_good_leaves_no_manifest(spark, tmp_path):
    root = str(tmp_path / "coll")
    with pytest.raises(Exception, match="fails every time"):
        lspark.write(_frame(spark), root, shapes={"x": (2, 3)}, part_writer=_always_fails)
    assert not os.path.exists(os.path.join(root, lc.MANIFEST))
    with pytest.raises(loaderx.ZrecordError, match="not a collection"):
        lc.open(root)
    # Only a new commit publishes what the tasks finished.
    lc.commit(root)
    col = lc.open(root)
    ids = col["id"][:].tolist()
    assert 0 < len(ids) == len(set(ids)) == len(col) and set(ids) <= set(range(N))
    col.close()


def test_bad_columns_are_refused_by_name(spark, tmp_path):
    df = spark.createDataFrame([(i, f"cat {i}") for i in range(4)], "id long, caption string")
    with pytest.raises(Exception, match="'caption' holds strings"):
        lspark.write(df, str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"\['nope'\]"):
        lspark.write(df, str(tmp_path / "c"), shapes={"nope": (2,)})
    bad = spark.createDataFrame([(i, [1.0] * (i + 1)) for i in range(4)], "id long, x array<double>")
    with pytest.raises(Exception, match="shapes says \\(2,\\)"):
        lspark.write(bad, str(tmp_path / "d"), shapes={"x": (2,)})
