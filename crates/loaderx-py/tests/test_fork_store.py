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
