"""The ``loaderx`` console script, run as a subprocess: exit codes, output,
progress on a pseudo-terminal and without one, Ctrl-C."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from loaderx.zrecord import Dense, Ragged

SCRIPT = Path(sys.executable).parent / "loaderx"


def loaderx(*args: object, **kw) -> subprocess.CompletedProcess:
    assert SCRIPT.exists(), f"the loaderx console script is not installed at {SCRIPT}"
    return subprocess.run(
        [str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120, **kw
    )


def leftovers(parent: Path, name: str) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.tmp-")]


@pytest.fixture
def images_npy(tmp_path: Path) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(11)
    a = rng.integers(0, 255, size=(2000, 3, 16, 16), dtype=np.uint8)
    np.save(tmp_path / "a.npy", a)
    return tmp_path / "a.npy", a


def test_convert_counts_the_records_of_every_part(tmp_path: Path, images_npy) -> None:
    src, a = images_npy
    done = loaderx(
        "convert", src, tmp_path / "parts", "--codec", "raw", "--parts", "3",
        "--progress-interval", "0",
    )
    assert done.returncode == 0, done.stderr
    # Three parts of 666 or 667 records: the sum, not the largest part.
    assert "converted 2,000 records" in done.stdout, done.stdout
    # Progress as each part ends, and the summary line, count every record.
    shown = [line for line in done.stderr.splitlines() if "ETA" in line]
    assert len(shown) == 3 and "2,000/2,000 records (100.0%)" in shown[-1], done.stderr
    assert "convert: 2,000 records in " in done.stderr, done.stderr


def test_convert_info_verify(tmp_path: Path, images_npy) -> None:
    src, a = images_npy
    done = loaderx("convert", src, tmp_path / "out", "--codec", "lz4")
    assert done.returncode == 0, done.stderr
    assert "converted 2,000 records" in done.stdout
    with Dense.open(tmp_path / "out") as d:
        assert d.codec == "lz4"
        np.testing.assert_array_equal(d[:], a)

    info = loaderx("info", tmp_path / "out")
    assert info.returncode == 0, info.stderr
    for text in ("format            v2", "dense uint8 (3, 16, 16)", "lz4", "2,000", "undo log  no"):
        assert text in info.stdout
    as_json = json.loads(loaderx("info", tmp_path / "out", "--json").stdout)
    assert as_json["records"] == 2000 and as_json["kind"] == "dense"
    assert as_json["shape"] == [3, 16, 16] and as_json["logical_bytes"] == a.nbytes
    on_disk = sum(p.stat().st_size for p in (tmp_path / "out").iterdir())
    assert as_json["bytes_on_disk"] == on_disk

    ok = loaderx("verify", tmp_path / "out")
    assert ok.returncode == 0 and "ok (2,000 records)" in ok.stdout


def test_convert_with_a_trained_dictionary(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    a = rng.zipf(1.3, size=(3000, 64)).clip(0, 30_000).astype(np.int32)
    np.save(tmp_path / "t.npy", a)
    done = loaderx("convert", tmp_path / "t.npy", tmp_path / "out", "--codec", "zstd_dict")
    assert done.returncode == 0, done.stderr
    with Dense.open(tmp_path / "out") as d:
        assert d.codec == "zstd_dict"
        np.testing.assert_array_equal(d[:], a)
    ok = loaderx("verify", tmp_path / "out")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_convert_refuses_an_existing_output_and_bad_sources(tmp_path: Path, images_npy) -> None:
    src, _ = images_npy
    (tmp_path / "out").mkdir()
    again = loaderx("convert", src, tmp_path / "out")
    assert again.returncode == 1 and "already exists" in again.stderr
    assert list((tmp_path / "out").iterdir()) == []
    (tmp_path / "x.csv").write_text("1,2\n")
    bad = loaderx("convert", tmp_path / "x.csv", tmp_path / "o2")
    assert bad.returncode == 1 and "unknown source type .csv" in bad.stderr
    usage = loaderx("convert", src, tmp_path / "o3", "--codec", "nope")
    assert usage.returncode == 2 and "invalid choice" in usage.stderr
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()
    missing = loaderx("info", tmp_path / "nothing")
    assert missing.returncode == 1 and "no loaderx store" in missing.stderr


def test_verify_reports_the_damaged_record(tmp_path: Path) -> None:
    # 200 records of 64 bytes, kept as a run checksummed 64 records (4 KiB)
    # at a time: damage to record 70 damages block 1, records 64 ..= 127.
    records = np.repeat((np.arange(200) % 251).astype(np.uint8)[:, None], 64, axis=1)
    with Dense.create(tmp_path / "s", "uint8", (64,), codec="raw", data_shards=1) as w:
        w.append(records)
    data = tmp_path / "s" / "0.zr"
    raw = bytearray(data.read_bytes())
    at = raw.find(bytes([70]) * 64)  # record 70's bytes
    assert at >= 0 and raw.find(bytes([70]) * 64, at + 1) == -1
    raw[at + 5] ^= 0x01
    data.write_bytes(bytes(raw))
    bad = loaderx("verify", tmp_path / "s")
    assert bad.returncode == 1
    assert "64 of 200 records damaged" in bad.stdout
    assert "record 64:" in bad.stdout and "record 127:" in bad.stdout
    assert "record 63:" not in bad.stdout and "record 128:" not in bad.stdout
    assert "block 1 of its run (records 64 ..= 127)" in bad.stdout
    report = json.loads(loaderx("verify", tmp_path / "s", "--json").stdout)
    assert [i for i, _ in report["damaged"]] == list(range(64, 128))


def test_info_compact_after_deletes_and_a_tree_of_stores(tmp_path: Path) -> None:
    with Ragged.create(tmp_path / "t" / "tok", "int32", 1, codec="zstd") as w:
        w.append([np.arange(1 + i % 50, dtype=np.int32) for i in range(400)])
    with Dense.create(tmp_path / "t" / "y", "float32", (), codec="raw") as w:
        w.append(np.arange(400, dtype=np.float32))
    with Ragged.open(tmp_path / "t" / "tok", writable=True) as r:
        r.delete(list(range(0, 400, 2)))
    info = json.loads(loaderx("info", tmp_path / "t", "--json").stdout)
    assert [Path(i["path"]).name for i in info] == ["tok", "y"]
    tok = info[0]
    assert tok["kind"] == "ragged" and tok["ndim"] == 1 and tok["records"] == 200
    assert tok["reclaimable_bytes"] > 0
    done = loaderx("compact", tmp_path / "t" / "tok")
    assert done.returncode == 0 and "freed" in done.stdout
    after = json.loads(loaderx("info", tmp_path / "t" / "tok", "--json").stdout)
    assert after["reclaimable_bytes"] == 0 and after["bytes_on_disk"] < tok["bytes_on_disk"]
    assert loaderx("verify", tmp_path / "t").returncode == 0


def test_bench_prints_a_row_per_configuration(tmp_path: Path, images_npy) -> None:
    src, _ = images_npy
    assert loaderx("convert", src, tmp_path / "out", "-q").returncode == 0
    done = loaderx(
        "bench", tmp_path / "out", "--batch-sizes", "16,64", "--workers", "1,2",
        "--seconds", "0.05", "--json",
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["workers"], r["batch_size"]) for r in rows] == [(1, 16), (1, 64), (2, 16), (2, 64)]
    assert all(r["records_per_s"] > 0 and r["batches"] >= 2 for r in rows)
    bad = loaderx("bench", tmp_path / "out", "--batch-sizes", "0")
    assert bad.returncode != 0 and "positive" in bad.stderr


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1", "0", "soon"])
def test_bench_refuses_a_duration_that_is_not_a_positive_number(
    tmp_path: Path, images_npy, seconds: str
) -> None:
    # nan ran forever (no time is >= nan) and -1 was taken.
    src, _ = images_npy
    assert loaderx("convert", src, tmp_path / "out", "-q").returncode == 0
    try:
        bad = subprocess.run(
            [str(SCRIPT), "bench", str(tmp_path / "out"), "--seconds", seconds],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"loaderx bench --seconds {seconds} ran on")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "--seconds" in bad.stderr and "positive" in bad.stderr and seconds in bad.stderr


@pytest.mark.parametrize("bad", ["nan", "-1", "inf", "soon"])
def test_a_progress_interval_that_is_not_a_time_is_refused(tmp_path: Path, images_npy, bad: str) -> None:
    src, _ = images_npy
    done = loaderx("convert", src, tmp_path / "out", "--progress-interval", bad)
    assert done.returncode == 2
    assert "--progress-interval: must be 0 or more seconds" in done.stderr
    assert not (tmp_path / "out").exists()


def test_progress_without_a_terminal_is_plain_lines(tmp_path: Path, images_npy) -> None:
    src, _ = images_npy
    done = loaderx("convert", src, tmp_path / "out", "--progress-interval", "0")
    assert done.returncode == 0
    lines = done.stderr.splitlines()
    assert "\r" not in done.stderr and "\x1b" not in done.stderr
    progress = [line for line in lines if "ETA" in line]
    assert progress and all(line.startswith("convert: ") for line in progress)
    assert "2,000/2,000 records (100.0%)" in progress[-1]
    assert lines[-1].startswith("convert: 2,000 records in ")
    quiet = loaderx("convert", src, tmp_path / "q", "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""
    as_json = loaderx("convert", src, tmp_path / "j", "--json")
    assert as_json.stderr == ""
    assert json.loads(as_json.stdout)["stores"] == {"": 2000}


def test_progress_on_a_terminal_is_a_bar(tmp_path: Path, images_npy) -> None:
    src, _ = images_npy
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(SCRIPT), "convert", str(src), str(tmp_path / "out"), "--progress-interval", "0"],
        stdin=slave, stdout=slave, stderr=slave, close_fds=True,
    )
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0
    text = seen.decode()
    assert "\r" in text and "ETA" in text and "[" in text and "#" in text
    assert "100.0%" in text and "records/s" in text


def test_ctrl_c_leaves_no_output(tmp_path: Path) -> None:
    # The source is a pipe this test feeds: the converter is mid-way, its
    # stores created, blocked on the next sample, when the interrupt comes.
    fifo = tmp_path / "feed.tar"
    os.mkfifo(fifo)
    # A program started with SIGINT ignored keeps ignoring it (that is what
    # `nohup` and a shell's background jobs rely on), and a child inherits
    # the setting: give the converter the default, whatever ran this suite.
    proc = subprocess.Popen(
        [str(SCRIPT), "convert", str(fifo), str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    feeder_done = threading.Event()

    def feed() -> None:
        # Whole samples only (the tar stream is not closed: no end marker),
        # then the pipe is held open so the converter waits for more.
        buf = io.BytesIO()
        tar = tarfile.open(fileobj=buf, mode="w")
        for i in range(50):
            data = bytes([i % 251]) * 100
            info = tarfile.TarInfo(f"k{i:03d}.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        body = buf.getvalue()
        tar.close()
        fd = os.open(fifo, os.O_WRONLY)
        try:
            os.write(fd, body)
            feeder_done.wait(60)
        finally:
            os.close(fd)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        deadline = time.monotonic() + 60

        def started() -> bool:
            tmp = leftovers(tmp_path, "out")
            return bool(tmp) and (tmp_path / tmp[0] / "bin" / "meta.zr").exists()

        while not started() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started(), "the conversion never created its store"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        feeder_done.set()
        feeder.join()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path, "out") == []
