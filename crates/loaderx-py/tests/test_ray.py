"""Ray Data writing a collection: real Ray in local mode (one session for
the module), read back byte for byte; a task killed after writing its part,
or in the middle of writing it, and retried by Ray leaves every record
exactly once; a job failing for good leaves no manifest, and only a new
commit makes its directory a collection."""

from __future__ import annotations

import os

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import loaderx  # noqa: E402
import loaderx.ray as lray  # noqa: E402
from loaderx import collection as lc  # noqa: E402
from conftest import KilledWhenRead, blobs, check_blobs, png_file  # noqa: E402

N = 40


@pytest.fixture(scope="module")
def session():
    # Workers import this module for the datasinks defined below.
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield ray
    ray.shutdown()


def _rows() -> list[dict]:
    return [
        {
            "id": np.int64(i),
            "x": np.arange(6, dtype=np.float32).reshape(2, 3) + i,
            "tokens": np.arange(1 + i % 4, dtype=np.int32) * i,
            "image": png_file(i),
        }
        for i in range(N)
    ]


def _dataset(session):
    return session.data.from_items(_rows()).repartition(4)


def _check(root: str, storage_options=None) -> None:
    col = lc.open(root, storage_options=storage_options)
    assert len(col) == N
    assert sorted(col.columns) == ["id", "image", "tokens", "x"]
    schema = col.schema
    assert schema["x"]["kind"] == "dense" and list(schema["x"]["shape"]) == [2, 3]
    assert schema["id"]["kind"] == "dense" and list(schema["id"]["shape"]) == []
    assert schema["tokens"]["kind"] == "ragged"
    assert schema["image"]["codec"] == "png"
    ids = col["id"][:]
    assert sorted(ids.tolist()) == list(range(N)), "every record exactly once"
    rows = _rows()
    for g, i in enumerate(ids.tolist()):
        want = rows[i]
        assert col["x"][g].tobytes() == want["x"].tobytes()
        assert col["tokens"][g].tobytes() == want["tokens"].tobytes()
        assert col["image"][g].shape == (3 + i % 3, 4, 3)
        assert int(col["image"][g][0, 0, 0]) == i
    # The image files themselves are kept: the PNG decodes to the same pixels.
    col.close()


def test_other_binary_columns_are_uint8_records_byte_for_byte(session, tmp_path):
    """A binary column that is not all JPEG or PNG files is stored as
    ``uint8`` Ragged records holding each value's bytes exactly (the PNG
    among them kept as bytes, not decoded; the empty value empty)."""
    rows = [{"id": np.int64(i), "blob": b} for i, b in enumerate(blobs(N))]
    root = str(tmp_path / "blobs")
    assert lray.write(session.data.from_items(rows).repartition(4), root) == []
    check_blobs(root, N)


def test_ray_write_reads_back_byte_for_byte(session, tmp_path):
    root = str(tmp_path / "coll")
    assert lray.write(_dataset(session), root) == []
    _check(root)
    # And it streams.
    col = lc.open(root)
    dl = loaderx.DataLoader(col, batch_size=8, mode=0, seed=0, rank=0, world_size=1)
    batch = next(dl)
    assert batch["x"].shape == (8, 2, 3) and len(batch["tokens"]) == 8
    dl.close()


class _DiesOnce(lray.CollectionDatasink):
    """Kills its worker process right after writing part 1 the first time,
    before Ray hears of it: Ray retries the task, which rewrites the part."""

    def __init__(self, root: str, marker: str) -> None:
        super().__init__(root)
        self.marker = marker

    def _write_part(self, name, columns):
        super()._write_part(name, columns)
        if name == "part-00001":
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            os._exit(1)


class _DiesMidWrite(lray.CollectionDatasink):
    """Kills its worker process in the middle of writing part 1 the first
    time (its last column not yet written): Ray retries the task."""

    def __init__(self, root: str, marker: str) -> None:
        super().__init__(root)
        self.marker = marker

    def _write_part(self, name, columns):
        if name == "part-00001":
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                columns = {k: v for k, v in columns.items() if k != "image"}
                columns["image"] = KilledWhenRead(len(columns["id"]))
        super()._write_part(name, columns)


@pytest.mark.parametrize("sink", [_DiesOnce, _DiesMidWrite])
def test_a_task_killed_is_retried_and_records_appear_once(session, tmp_path, sink):
    """Killed right after writing part 1, or in the middle of writing it."""
    root = str(tmp_path / "coll")
    marker = str(tmp_path / "died")
    _dataset(session).write_datasink(sink(root, marker), ray_remote_args={"max_retries": 2})
    assert os.path.exists(marker), "the task did die once"
    _check(root)
    entries = os.listdir(root)
    assert sorted(e for e in entries if not e.startswith(".")) == ["manifest.zc"] + [
        f"part-{i:05d}" for i in range(4)
    ]
    # A kill mid-write leaves its unfinished part behind, which nothing reads.
    unfinished = [e for e in entries if e.startswith(".part-00001.tmp-")]
    assert bool(unfinished) == (sink is _DiesMidWrite)


class _AlwaysFails(lray.CollectionDatasink):
    def _write_part(self, name, columns):
        super()._write_part(name, columns)
        if name == "part-00002":
            raise RuntimeError("this task fails every time")


def test_a_job_failing_for_good_leaves_no_manifest(session, tmp_path):
    root = str(tmp_path / "coll")
    with pytest.raises(Exception, match="fails every time"):
        _dataset(session).write_datasink(_AlwaysFails(root))
    assert not os.path.exists(os.path.join(root, lc.MANIFEST))
    with pytest.raises(loaderx.ZrecordError, match="not a collection"):
        lc.open(root)
    # Only a new commit publishes what the tasks finished.
    lc.commit(root)
    col = lc.open(root)
    ids = col["id"][:].tolist()
    assert 0 < len(ids) == len(set(ids)) == len(col) and set(ids) <= set(range(N))
    col.close()


def test_string_columns_are_refused_by_name(session, tmp_path):
    ds = session.data.from_items([{"caption": f"a cat {i}", "id": i} for i in range(4)])
    with pytest.raises(Exception, match="'caption'.*strings"):
        lray.write(ds, str(tmp_path / "c"))
    assert not os.path.exists(os.path.join(tmp_path, "c", lc.MANIFEST))


def test_ray_writes_a_collection_to_s3(session, tmp_path):
    """To an S3 server on loopback (moto, started here): each task uploads
    its part, the driver commits the manifest object; read back by URL."""
    pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
    from remote_servers import s3_options, start_s3

    server, client = start_s3("ray")
    opts = s3_options(client.endpoint)
    try:
        url = "s3://ray/coll"
        assert lray.write(_dataset(session), url, storage_options=opts) == []
        _check(url, opts)
    finally:
        server.stop()
