"""Collections from Python: parts written by several processes, committed,
read back over global indices and streamed by DataLoader."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys

import numpy as np
import pytest

import loaderx
from loaderx import collection as lc
from loaderx.errors import ZrecordError

SIZES = [4, 2, 7, 3, 4]  # (empty parts: crates/loaderx-store/tests/collection.rs)


def _records(lo: int, hi: int) -> dict:
    """Global records lo..hi: a dense (2, 3) float32, a scalar int64 label
    and a ragged int32 token list (empty for every fifth record)."""
    idx = np.arange(lo, hi)
    x = (idx[:, None, None] * 10 + np.arange(6).reshape(2, 3)).astype(np.float32)
    y = idx.astype(np.int64)
    t = [np.arange(i % 5, dtype=np.int32) + i for i in range(lo, hi)]
    return {"x": x, "y": y, "t": t}


def _write(root: str, part: int) -> None:
    lo = sum(SIZES[:part])
    loaderx.collection.write_part(root, part, _records(lo, lo + SIZES[part]))


@pytest.fixture
def committed(tmp_path):
    root = str(tmp_path / "coll")
    # Parts written by separate processes, as an engine's tasks would.
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_write, args=(root, p)) for p in range(len(SIZES))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert lc.commit(root) == []
    return root


def test_written_in_processes_reads_back_every_index_form(committed):
    n = sum(SIZES)
    want = _records(0, n)
    col = lc.open(committed)
    assert len(col) == n
    assert col.columns == ["t", "x", "y"]
    assert col.parts == [(f"part-{i:05d}", s) for i, s in enumerate(SIZES)]
    assert col.schema["x"]["kind"] == "dense" and col.schema["t"]["kind"] == "ragged"
    x, y, t = col["x"], col["y"], col["t"]
    assert isinstance(x, loaderx.Dense) and isinstance(t, loaderx.Ragged)
    np.testing.assert_array_equal(x[:], want["x"])
    np.testing.assert_array_equal(y[::-1], want["y"][::-1])
    assert x[-1].tobytes() == want["x"][-1].tobytes()
    assert int(y[5]) == 5
    order = np.array([19, 0, 12, 4, 4, 11])
    np.testing.assert_array_equal(x[order], want["x"][order])
    mask = np.arange(n) % 3 == 0
    np.testing.assert_array_equal(y[mask], want["y"][mask])
    for got, i in zip(t[order], order):
        np.testing.assert_array_equal(got, want["t"][i])
    np.testing.assert_array_equal(t.shapes([3, 4]), [[3], [4]])
    batch = col[[2, 13]]
    np.testing.assert_array_equal(batch["y"], [2, 13])
    one = col[7]
    assert int(one["y"]) == 7 and one["t"].tolist() == want["t"][7].tolist()
    with pytest.raises(IndexError):
        y[n]
    with pytest.raises(KeyError, match="nope"):
        col["nope"]
    col.verify()
    col.close()


def test_dataloader_streams_columns_with_sharding_and_exact_resume(committed):
    n = sum(SIZES)
    col = lc.open(committed)
    dl = loaderx.DataLoader(col, batch_size=4, mode=2, seed=3, rank=0, world_size=1)
    first = [next(dl) for _ in range(3)]
    state = dl.state_dict()
    after = [next(dl) for _ in range(2)]
    for b in first + after:
        assert set(b) == {"t", "x", "y"}
        for k, label in enumerate(b["y"]):
            np.testing.assert_array_equal(b["x"][k], _records(label, label + 1)["x"][0])
            np.testing.assert_array_equal(b["t"][k], np.arange(label % 5, dtype=np.int32) + label)
    dl.close()
    again = loaderx.DataLoader(col, batch_size=4, mode=2, seed=3, rank=0, world_size=1)
    again.load_state_dict(state)
    for b, want in zip([next(again) for _ in range(2)], after):
        np.testing.assert_array_equal(b["y"], want["y"])
    again.close()
    # Two ranks split every global batch.
    seen = []
    for rank in (0, 1):
        d = loaderx.DataLoader(col, batch_size=4, mode=0, seed=0, rank=rank, world_size=2)
        seen.append(next(d)["y"])
        d.close()
    assert sorted(np.concatenate(seen).tolist()) == [0, 1, 2, 3]
    assert n == 20


def test_a_retried_part_replaces_its_first_attempt(tmp_path):
    root = str(tmp_path / "c")
    lc.write_part(root, 0, {"y": np.arange(5)})
    # The task "fails" after writing and is retried with the same part.
    lc.write_part(root, 0, {"y": np.arange(3)})
    # A crashed attempt's temporary directory is ignored.
    os.makedirs(os.path.join(root, ".part-00001.tmp-1-deadbeef", "y"))
    lc.write_part(root, "extra", {"y": np.arange(2)})
    ignored = lc.commit(root, parts=[0])
    assert sorted(ignored) == [".part-00001.tmp-1-deadbeef", "extra"]
    col = lc.open(root)
    assert len(col) == 3
    np.testing.assert_array_equal(col["y"][:], [0, 1, 2])
    assert [n for n in os.listdir(root) if n.startswith(".part-00000")] == []


def test_bad_parts_are_refused_naming_them(tmp_path):
    root = str(tmp_path / "c")
    with pytest.raises(ValueError, match="column 'b' has 2 records; column 'a' has 3"):
        lc.write_part(root, 0, {"a": np.arange(3), "b": np.arange(2)})
    with pytest.raises(ValueError, match="part name"):
        lc.write_part(root, "../up", {"a": np.arange(3)})
    with pytest.raises(ValueError, match="column name"):
        lc.write_part(root, 0, {".hidden": np.arange(3)})
    with pytest.raises(TypeError, match="'s'.*strings"):
        lc.write_part(root, 0, {"s": np.array(["a", "b"])})
    with pytest.raises(ValueError, match="zstd_dict"):
        lc.write_part(root, 0, {"a": np.arange(3)}, codec="zstd_dict")
    with pytest.raises(ValueError, match="local path; storage_options apply only"):
        lc.write_part(root, 0, {"a": np.arange(3)}, storage_options={"key": "x"})
    lc.write_part(root, 0, {"a": np.arange(3, dtype=np.int64)})
    lc.write_part(root, 1, {"a": np.arange(3, dtype=np.int32)})
    with pytest.raises(
        ZrecordError,
        match=r"part 1 \(\"part-00001\"\) column \"a\" holds dense <i4 \(\), zstd; "
        r"part 0 \(\"part-00000\"\) holds dense <i8 \(\), zstd$",
    ):
        lc.commit(root)
    assert not os.path.exists(os.path.join(root, lc.MANIFEST))
    with pytest.raises(ZrecordError, match="not a collection"):
        lc.open(root)
    with pytest.raises(ZrecordError, match="part-00007"):
        lc.commit(root, parts=[7])
    lc.write_part(root, 1, {"b": np.arange(3, dtype=np.int64)})
    with pytest.raises(ZrecordError, match="has columns"):
        lc.commit(root)


def test_image_bytes_columns_keep_the_files(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    import io

    files = []
    for i in range(3):
        buf = io.BytesIO()
        pil.fromarray(np.full((4 + i, 5, 3), 40 * i, dtype=np.uint8)).save(buf, format="PNG")
        files.append(buf.getvalue())
    root = str(tmp_path / "img")
    lc.write_part(root, 0, {"image": files[:2]}, codec="png")
    lc.write_part(root, 1, {"image": files[2:]}, codec="png")
    lc.commit(root)
    col = lc.open(root)
    img = col["image"][2]
    assert img.shape == (6, 5, 3) and int(img[0, 0, 0]) == 80
    # Files are told by their first bytes whatever the codec asked.
    sniffed = str(tmp_path / "sniffed")
    lc.write_part(sniffed, 0, {"image": files}, codec="lz4")
    lc.commit(sniffed)
    assert lc.open(sniffed).schema["image"]["codec"] == "png"
    # Other bytes are uint8 records, byte for byte.
    blobs = [b"hello", b"\x00\x01", b"x" * 300]
    raw = str(tmp_path / "raw")
    lc.write_part(raw, 0, {"blob": blobs}, codec="lz4")
    lc.commit(raw)
    got = lc.open(raw)["blob"]
    assert [got[i].tobytes() for i in range(3)] == blobs
    # A part of only image files and a part of other bytes disagree, and
    # the error says how to keep the column bytes in every part.
    mixed = str(tmp_path / "mixed")
    lc.write_part(mixed, 0, {"blob": files})
    lc.write_part(mixed, 1, {"blob": blobs})
    with pytest.raises(
        ZrecordError,
        match=r'column "blob" holds ragged \|u1 of rank 1, zstd; part 0 \("part-00000"\) holds '
        r'ragged \|u1 of rank 3, png \(.*codec=\{"blob": "zstd"\} to keep every value as bytes\)',
    ):
        lc.commit(mixed)
    # A codec given for the column by name keeps image files as bytes.
    for p, values in enumerate((files, blobs)):
        lc.write_part(mixed, p, {"blob": values}, codec={"blob": "zstd"})
    lc.commit(mixed)
    got = lc.open(mixed)["blob"]
    assert [got[i].tobytes() for i in range(6)] == files + blobs


def test_cli_info_and_verify_take_a_collection(committed):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "loaderx"

    def run(*args):
        return subprocess.run(
            [str(script), *args], capture_output=True, text=True, timeout=120
        )

    info = run("info", committed, "--json")
    assert info.returncode == 0, info.stderr
    got = json.loads(info.stdout)
    assert got["kind"] == "collection" and got["records"] == 20 and got["parts"] == 5
    assert got["columns"]["x"] == {"kind": "dense", "dtype": "float32", "shape": [2, 3],
                                   "codec": "zstd"}
    assert "collection        20 records in 5 parts" in run("info", committed).stdout
    ok = run("verify", committed)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "['t']: ok (20 records)" in ok.stdout
    # Damage the last byte of part 2's label chunk (global records 6 ..= 12):
    # its seven labels are one run, checksummed as one block, so verify
    # names every record of the block, by global index, and exits 1.
    chunk = Path(committed, "part-00002", "y", "0.zr")
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))
    bad = run("verify", committed, "--json")
    assert bad.returncode == 1
    report = {r["path"]: r for r in json.loads(bad.stdout)}
    damaged = report[f"{committed}['y']"]["damaged"]
    assert [i for i, _ in damaged] == list(range(6, 13))
    assert all("block 0 of its run (records 0 ..= 6)" in why for _, why in damaged)
    # The other parts' labels are whole.
    assert all(r["damaged"] == [] for p, r in report.items() if p != f"{committed}['y']")


def test_convert_num_proc_writes_a_collection_in_order(tmp_path):
    datasets = pytest.importorskip("datasets")
    from loaderx.converter import convert

    ds = datasets.Dataset.from_dict(
        {"label": list(range(23)), "tokens": [list(range(i % 6 + 1)) for i in range(23)]}
    )
    counts = convert(ds, tmp_path / "c", codec="zstd", num_proc=3)
    assert sum(v for k, v in counts.items() if k.endswith("/label")) == 23
    col = lc.open(tmp_path / "c")
    assert len(col) == 23 and len(col.parts) == 3
    np.testing.assert_array_equal(col["label"][:], np.arange(23))
    assert col["tokens"][22].tolist() == list(range(22 % 6 + 1))
    # The CLI does the same from a saved dataset.
    import subprocess
    import sys
    from pathlib import Path

    ds.save_to_disk(str(tmp_path / "saved"))
    script = Path(sys.executable).parent / "loaderx"
    done = subprocess.run(
        [str(script), "convert", str(tmp_path / "saved"), str(tmp_path / "c2"), "--parts", "2",
         "--codec", "lz4", "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    col2 = lc.open(tmp_path / "c2")
    assert len(col2.parts) == 2
    np.testing.assert_array_equal(col2["label"][::-1], np.arange(23)[::-1])
    # A source without a parallel converter (.npz) is refused, and nothing written.
    np.savez(tmp_path / "x.npz", a=np.arange(3))
    bad = subprocess.run(
        [str(script), "convert", str(tmp_path / "x.npz"), str(tmp_path / "c3"), "--parts", "2"],
        capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode != 0 and "--parts" in bad.stderr, bad.stderr
    assert not (tmp_path / "c3").exists()


def test_collections_and_their_readers_pickle_as_their_root(committed):
    import pickle

    col = lc.open(committed)
    again = pickle.loads(pickle.dumps(col))
    assert len(again) == len(col) and again.columns == col.columns
    x = pickle.loads(pickle.dumps(col["x"]))
    assert isinstance(x, loaderx.Dense)
    np.testing.assert_array_equal(x[[3, 17]], col["x"][[3, 17]])
    t = pickle.loads(pickle.dumps(col["t"]))
    assert t[9].tolist() == col["t"][9].tolist()
    col.close()
    with pytest.raises(loaderx.errors.ClosedError):
        pickle.dumps(col)


_FD_CHILD = r"""
import resource, sys
import numpy as np
import loaderx.collection as lc
from loaderx.errors import ZrecordError

root, cap = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
col = lc.open(root, max_open_parts=cap or None)
cap = col.max_open_parts
n = len(col)
want_a = np.arange(n, dtype=np.int64)
order = np.random.default_rng(0).permutation(n)
try:
    for idx in (np.arange(n), order):
        np.testing.assert_array_equal(col["a"][idx], want_a[idx])
        for i, row in zip(idx, col["b"][idx]):
            assert row.tolist() == list(range(int(i) % 7 + 1)), i
        assert col._native.opened_parts() <= cap
except ZrecordError as e:
    print("refused:", e)
    sys.exit(3)
print("ok", col._native.opened_parts())
"""


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="RLIMIT_NOFILE and /proc")
def test_more_parts_than_the_open_cap_and_the_descriptor_limit_read_whole(tmp_path):
    # 150 parts x 2 columns: 300 part stores, a few descriptors each, in a
    # process allowed 128 descriptors.
    root = str(tmp_path / "c")
    for p in range(150):
        ids = np.arange(p * 4, p * 4 + 4, dtype=np.int64)
        lc.write_part(
            root, p, {"a": ids, "b": [np.arange(int(i) % 7 + 1, dtype=np.int16) for i in ids]}
        )
    lc.commit(root)
    import resource

    # By default, an eighth of the descriptor limit (16 to 4096).
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    with lc.open(root) as col:
        want = 4096 if soft == resource.RLIM_INFINITY else min(max(soft // 8, 16), 4096)
        assert col.max_open_parts == want
    with lc.open(root, max_open_parts=5) as col:
        assert col.max_open_parts == 5
        np.testing.assert_array_equal(col["a"][::-1], np.arange(600)[::-1])
        assert col._native.opened_parts() <= 5
    with pytest.raises(ValueError, match="max_open_parts"):
        lc.open(root, max_open_parts=0)
    run = lambda cap: subprocess.run(  # noqa: E731
        [sys.executable, "-c", _FD_CHILD, root, str(cap)], capture_output=True, text=True, timeout=300
    )
    capped = run(16)
    assert capped.returncode == 0, capped.stdout + capped.stderr
    assert capped.stdout.startswith("ok")
    # The default fits the limit (16 part stores at 128 descriptors).
    default = run(0)
    assert default.returncode == 0, default.stdout + default.stderr
    assert default.stdout.startswith("ok")
    # Without a cap that fits, the same reads run out of descriptors: an
    # error naming the part, not a crash.
    uncapped = run(10_000)
    assert uncapped.returncode == 3, uncapped.stdout + uncapped.stderr
    assert "part-00" in uncapped.stdout


def test_npy_parquet_and_image_folders_convert_in_processes_to_collections(tmp_path):
    from loaderx.cli import main
    from loaderx.converter import convert_image_folder, convert_npy, convert_parquet

    # .npy: one column, named after the file.
    arr = np.arange(103 * 3, dtype=np.float32).reshape(103, 3)
    np.save(tmp_path / "feats.npy", arr)
    counts = convert_npy(tmp_path / "feats.npy", tmp_path / "npy", codec="zstd", num_proc=3)
    assert sorted(counts) == [f"part-0000{i}/feats" for i in range(3)]
    assert sum(counts.values()) == 103
    with lc.open(tmp_path / "npy") as col:
        assert [n for _, n in col.parts] == [34, 34, 35]
        np.testing.assert_array_equal(col["feats"][:], arr)

    # Parquet: row slices across row groups, dense and ragged columns.
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    n = 250
    tokens = [list(range(i % 9)) for i in range(n)]
    table = pa.table({"y": np.arange(n, dtype=np.int64), "t": pa.array(tokens, pa.list_(pa.int32()))})
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=60)
    assert main(["convert", str(tmp_path / "d.parquet"), str(tmp_path / "pq"), "--parts", "4", "-q"]) == 0
    with lc.open(tmp_path / "pq") as col:
        assert len(col.parts) == 4 and len(col) == n
        np.testing.assert_array_equal(col["y"][:], np.arange(n))
        for i, row in enumerate(col["t"][:]):
            assert row.tolist() == tokens[i]

    # Image folders: labels over every class, files in class then name order.
    Image = pytest.importorskip("PIL.Image")
    src = tmp_path / "imgs"
    want = []
    for c, cls in enumerate(["cat", "dog"]):
        (src / cls).mkdir(parents=True)
        for k in range(5):
            px = np.full((4, 6, 3), c * 100 + k, np.uint8)
            Image.fromarray(px).save(src / cls / f"{k}.png")
            want.append((c, px))
    convert_image_folder(src, tmp_path / "img", codec="zstd", size=(4, 6), num_proc=3)
    with lc.open(tmp_path / "img") as col:
        assert [n for _, n in col.parts] == [3, 3, 4]
        np.testing.assert_array_equal(col["label"][:], [c for c, _ in want])
        np.testing.assert_array_equal(col["image"][:], np.stack([px for _, px in want]))

    # Refusals: a bad count, a source --parts does not take.
    with pytest.raises(ValueError, match="num_proc"):
        convert_parquet(tmp_path / "d.parquet", tmp_path / "no", codec="zstd", num_proc=0)
    np.savez(tmp_path / "z.npz", a=arr)
    assert main(["convert", str(tmp_path / "z.npz"), str(tmp_path / "no"), "--parts", "2", "-q"]) != 0
    assert not (tmp_path / "no").exists()


def test_large_batches_reuse_buffers_only_once_their_arrays_are_gone(tmp_path):
    # Batches of 2 MiB and more fill recycled buffers: a batch still held
    # keeps its bytes while later batches are read, and records spread
    # over parts land in their places.
    root = str(tmp_path / "c")
    rows = np.random.default_rng(1).integers(0, 256, (64 * 40, 4096), dtype=np.uint8)
    for p in range(64):
        lc.write_part(root, p, {"x": rows[p * 40:(p + 1) * 40]}, codec="raw")
    lc.commit(root)
    with lc.open(root) as col:
        x = col["x"]
        rng = np.random.default_rng(0)
        held = []
        for _ in range(4):
            idx = rng.integers(0, len(rows), 1024)
            batch = x[idx]
            assert batch.nbytes >= 2 << 20
            held.append((idx, batch))
            del batch
        for idx, batch in held:
            np.testing.assert_array_equal(batch, rows[idx])
        del held
        for _ in range(3):
            idx = rng.permutation(len(rows))[:1024]
            np.testing.assert_array_equal(x[idx], rows[idx])
