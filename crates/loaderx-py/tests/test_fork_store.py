"""A store opened in a parent and used in forked children, as PyTorch's
fork workers do: the children read, and cannot write, delete or compact
behind the parent's back (the parent holds the writer role)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from loaderx import Dataset, Zrecord, ZrecordError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fork() is POSIX-only")


def run_in_child(body) -> int:
    """Forks; the child runs `body()` and exits with its return value."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = body()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), status
    return os.WEXITSTATUS(status)


def refused(call) -> bool:
    try:
        call()
    except ZrecordError as e:
        return "locked" in str(e)
    return False


def test_forked_children_read_and_cannot_write(tmp_path: Path) -> None:
    rows = np.arange(64 * 32, dtype=np.uint8).reshape(64, 32)
    ds = Dataset.write(str(tmp_path / "ds"), rows, codec="raw")
    zr = Zrecord(str(tmp_path / "zr"))
    zr.append(rows, 64, 32)
    zr.sync()  # the parent is now the writer of `zr`

    def child() -> int:
        read_ok = bool(np.array_equal(ds[[3, 60, 7]], rows[[3, 60, 7]]))
        out = np.zeros((2, 32), dtype=np.uint8)
        zr.gather([1, 2], out, 32)
        read_ok &= bool(np.array_equal(out, rows[[1, 2]]))
        blocked = refused(lambda: zr.append(rows[:1], 1, 32))
        blocked &= refused(lambda: zr.delete([0]))
        blocked &= refused(lambda: zr.compact())
        return int(read_ok) | int(blocked) << 1

    codes = [run_in_child(child) for _ in range(3)]
    assert codes == [0b11] * 3, "child: reads ok (1), writes refused (2)"
    # The parent is untouched and keeps writing.
    assert len(zr) == 64
    zr.append(rows[:2], 2, 32)
    zr.delete([0])
    zr.compact()
    assert len(zr) == 65
    zr.close()
    ds.close()


def test_appends_commit_at_exit_and_a_kill_loses_only_uncommitted(tmp_path: Path) -> None:
    """An interpreter that exits normally commits what it appended (as
    ``close()`` does); one killed outright keeps exactly the last commit."""
    import subprocess

    path = str(tmp_path / "zr")
    script = (
        "import os, signal, sys, numpy as np\n"
        "from loaderx import Zrecord\n"
        "zr = Zrecord(sys.argv[1])\n"
        "zr.append(np.full(40, 1, np.uint8), 4, 10)\n"
        "zr.sync()\n"
        "zr.append(np.full(20, 2, np.uint8), 2, 10)\n"
        "if sys.argv[2] == 'kill':\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script, path, "kill"], check=False)
    assert killed.returncode == -9
    with Zrecord(path) as zr:
        assert len(zr) == 4, "only the committed records survive a kill"
    exited = subprocess.run([sys.executable, "-c", script, path + "2", "exit"], check=False)
    assert exited.returncode == 0
    with Zrecord(path + "2") as zr:
        assert len(zr) == 6, "a normal exit commits pending appends"
        out = np.zeros((6, 10), np.uint8)
        zr.gather(range(6), out, 10)
        assert (out[:4] == 1).all() and (out[4:] == 2).all()


def _fork_with_pipes(body):
    """Forks; the child runs ``body(wait, tell)`` and exits with its return
    value. ``wait()`` blocks until the parent says go, ``tell()`` tells the
    parent. Returns ``(pid, go, heard)`` for the parent."""
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.close(to_child_w)
            os.close(to_parent_r)
            code = body(
                lambda: os.read(to_child_r, 1),
                lambda: os.write(to_parent_w, b"."),
            )
        finally:
            os._exit(code)
    os.close(to_child_r)
    os.close(to_parent_w)
    return pid, (lambda: os.write(to_child_w, b".")), (lambda: os.read(to_parent_r, 1))


def _wait(pid: int, seconds: float = 30.0) -> int | None:
    """The child's exit status, or None (after killing it) if it hung."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            assert os.WIFEXITED(status), status
            return os.WEXITSTATUS(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_the_parent_cannot_delete_or_compact_under_a_forked_reader(tmp_path: Path) -> None:
    """Finding: a forked child read under its parent's lock, so the parent's
    delete and compact ran while the child still read the old table, and the
    child's next gather returned [32, 33, ...] for indices 0..7 with no
    error. Now they are refused (naming the child) while it lives."""
    from loaderx.zrecord import Dense

    path = tmp_path / "labels"
    labels = np.arange(4096, dtype=np.uint64)
    w = Dense.create(path, np.uint64, (), codec="raw")
    w.append(labels)
    w.close()
    store = Dense.open(path, writable=True)
    assert np.array_equal(store[np.arange(8)], labels[:8])

    def child(wait, tell) -> int:
        first = store[np.arange(8)]
        tell()
        wait()
        again = store[np.arange(256)]
        return int(not np.array_equal(first, labels[:8])) | int(
            not np.array_equal(again, labels[:256])
        ) << 1

    pid, go, heard = _fork_with_pipes(child)
    heard()
    with pytest.raises(ZrecordError, match=f"locked.*process {pid}"):
        store.delete(range(32))
    with pytest.raises(ZrecordError, match=f"locked.*process {pid}"):
        store.compact()
    go()
    assert _wait(pid) == 0, "the child read wrong labels"
    # The child is gone: now they run.
    store.delete(range(32))
    store.compact()
    assert len(store) == 4096 - 32
    store.close()


def test_a_forked_child_does_not_keep_its_parents_writer_role(tmp_path: Path) -> None:
    """Finding: a child kept the writer lock's descriptor, so the parent
    could not append after closing and reopening while the child lived, and
    was told "another handle in this process is its writer"."""
    from loaderx.zrecord import Dense

    path = tmp_path / "s"
    w = Dense.create(path, np.int64, (4,), codec="raw")
    w.append(np.ones((10, 4), np.int64))

    pid, go, heard = _fork_with_pipes(lambda wait, tell: (tell(), wait(), 0)[2])
    heard()
    w.close()
    again = Dense.open(path, writable=True)
    again.append(np.zeros((2, 4), np.int64))
    again.close()
    go()
    assert _wait(pid) == 0
    assert len(Dense.open(path)) == 12


def test_a_forked_child_neither_sees_nor_commits_pending_appends(tmp_path: Path) -> None:
    """Finding: a child that inherited pending appends hung forever in
    ``sync()`` once the parent had closed (the commit re-locked its own
    mutex). Now the child's view is the parent's last commit, and ``sync``
    and ``close`` return at once."""
    zr = Zrecord(str(tmp_path / "zr"))
    zr.append(np.full(40, 1, np.uint8), 4, 10)
    zr.sync()
    zr.append(np.full(20, 2, np.uint8), 2, 10)

    def child(wait, tell) -> int:
        wait()
        code = int(len(zr) != 4)
        zr.sync()
        zr.close()
        return code

    pid, go, _ = _fork_with_pipes(child)
    zr.close()
    go()
    assert _wait(pid) == 0, "the child saw pending appends (1) or hung (None)"
    with Zrecord(str(tmp_path / "zr")) as again:
        assert len(again) == 6


def test_a_child_forked_during_a_compaction_gets_an_error_not_a_hang(tmp_path: Path) -> None:
    """Finding: a child whose parent held the engine's lock at the fork (a
    compaction in another thread) waited for it forever on its first
    gather. Now it gets an error at once, and the parent's compaction ends
    normally."""
    import threading
    import time

    from loaderx.zrecord import Dense

    path = tmp_path / "big"
    w = Dense.create(path, np.uint8, (4096,), codec="raw")
    for _ in range(8):
        w.append(np.ones((4096, 4096), np.uint8))
    w.close()
    store = Dense.open(path, writable=True)
    store.delete(range(0, 32768, 2))
    compacting = threading.Thread(target=store.compact)
    compacting.start()
    time.sleep(0.05)

    def child(wait, tell) -> int:
        try:
            store[np.arange(8)]
        except ZrecordError as e:
            return 0 if "locked" in str(e) else 2
        return 1  # read a store its parent was compacting

    pid, _, _ = _fork_with_pipes(child)
    during = compacting.is_alive()
    code = _wait(pid, 20)
    compacting.join()
    if not during:
        pytest.skip("the compaction ended before the fork")
    assert code == 0, "the child read (1), failed otherwise (2) or hung (None)"
    assert len(store) == 16384
    store.close()
