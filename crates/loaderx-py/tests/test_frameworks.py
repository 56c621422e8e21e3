"""PyTorch and JAX: the training examples run end to end, a Dataset works
inside torch.utils.data.DataLoader with fork and spawn workers, and the
loader takes its rank and world size from an initialised torch.distributed.

`cargo xtask test` installs torch and jax into the test venv; where they
could not be installed these tests skip, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx import Dataset

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def needs(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None,
        reason=f"{module} is not installed in this venv (cargo xtask test installs it)",
    )


def run(args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


@needs("torch")
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_torch_example_trains(tmp_path: Path, start: str) -> None:
    out = run([str(EXAMPLES / "train_torch.py"), "--out", str(tmp_path), "--start", start])
    assert "loaderx DataLoader -> torch" in out and f"({start} workers)" in out


@needs("torch")
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_dataset_in_torch_workers_reads_the_same(tmp_path: Path, start: str) -> None:
    import torch

    values = np.arange(200 * 3, dtype=np.float32).reshape(200, 3)
    with Dataset.write(tmp_path / "v", values, codec="lz4") as ds:
        loader = torch.utils.data.DataLoader(
            ds,
            batch_size=16,
            num_workers=2,
            multiprocessing_context=start,
            collate_fn=torch.from_numpy,  # __getitems__ already stacked the batch
        )
        got = torch.cat(list(loader)).numpy()
    assert np.array_equal(got, values)


@needs("torch")
def test_rank_and_world_size_come_from_torch_distributed(tmp_path: Path) -> None:
    labels = tmp_path / "labels"
    Dataset.write(labels, np.arange(64, dtype=np.int64)).close()
    script = textwrap.dedent("""
        import json, sys
        import torch.distributed as dist
        from loaderx import Dataset
        from loaderx.dataloader import DataLoader
        from loaderx.zsampler import Sampler
        rank, init = int(sys.argv[1]), sys.argv[2]
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
        dist.barrier()  # both ranks connected before either can leave
        with DataLoader({"label": Dataset(sys.argv[3])}, batch_size=8, mode=0) as loader:
            first = next(loader)["label"].tolist()
            seen = [loader.rank, loader.world_size, first]
        s = Sampler(64, 8, Sampler.Mode.SEQUENTIAL)
        print(json.dumps(seen + [s.rank, s.world_size, s.next().tolist()]))
        dist.barrier()
        dist.destroy_process_group()
        """)
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(rank), init, str(labels)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    finished = [proc.communicate(timeout=300) for proc in procs]
    for rank, (proc, (_out, err)) in enumerate(zip(procs, finished)):
        assert proc.returncode == 0, f"rank {rank}: {err}"
    results = [json.loads(out) for out, _err in finished]
    assert results[0] == [0, 2, [0, 1, 2, 3], 0, 2, [0, 1, 2, 3]]
    assert results[1] == [1, 2, [4, 5, 6, 7], 1, 2, [4, 5, 6, 7]]


@needs("jax")
def test_jax_example_trains_on_one_device(tmp_path: Path) -> None:
    out = run([str(EXAMPLES / "train_jax.py"), "--out", str(tmp_path)])
    assert "on one device" in out


@needs("jax")
def test_jax_example_shards_over_two_host_devices(tmp_path: Path) -> None:
    out = run([str(EXAMPLES / "train_jax.py"), "--out", str(tmp_path), "--host-devices", "2"])
    assert "sharded over 2 devices" in out


@needs("jax")
def test_rank_and_world_size_come_from_jax_processes(tmp_path: Path) -> None:
    labels = tmp_path / "labels"
    Dataset.write(labels, np.arange(64, dtype=np.int64)).close()
    with socket.socket() as probe:  # a free port for the coordinator
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = textwrap.dedent("""
        import json, sys
        import jax
        jax.distributed.initialize(
            coordinator_address=sys.argv[2], num_processes=2, process_id=int(sys.argv[1])
        )
        from loaderx import Dataset
        from loaderx.dataloader import DataLoader
        with DataLoader({"label": Dataset(sys.argv[3])}, batch_size=8, mode=0) as loader:
            print(json.dumps([loader.rank, loader.world_size, next(loader)["label"].tolist()]))
        jax.distributed.shutdown()
        """)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(rank), f"127.0.0.1:{port}", str(labels)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert results == [[0, 2, [0, 1, 2, 3]], [1, 2, [4, 5, 6, 7]]]


def _tensors(batch: list[np.ndarray]) -> list[object]:
    import torch

    return [torch.from_numpy(t) for t in batch]


@needs("torch")
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_typed_readers_in_torch_workers_read_the_same(tmp_path: Path, start: str) -> None:
    """Dense and Ragged readers as map-style datasets: batched through
    ``__getitems__``, pickled by path into spawned workers."""
    import torch

    from loaderx.zrecord import Dense, Ragged

    values = np.arange(120 * 6, dtype=np.float32).reshape(120, 2, 3)
    tokens = [np.arange(1 + i % 9, dtype=np.int64) + i for i in range(120)]
    with Dense.create(tmp_path / "d", np.float32, (2, 3), codec="zstd") as w:
        w.append(values)
    with Ragged.create(tmp_path / "r", np.int64, 1, codec="lz4") as w:
        w.append(tokens)
    with Dense.open(tmp_path / "d") as dense, Ragged.open(tmp_path / "r") as ragged:
        dense_loader = torch.utils.data.DataLoader(
            dense,
            batch_size=16,
            num_workers=2,
            multiprocessing_context=start,
            collate_fn=torch.from_numpy,  # __getitems__ already stacked the batch
        )
        assert np.array_equal(torch.cat(list(dense_loader)).numpy(), values)
        ragged_loader = torch.utils.data.DataLoader(
            ragged,
            batch_size=16,
            num_workers=2,
            multiprocessing_context=start,
            collate_fn=_tensors,  # a list of records of their own lengths
        )
        got = [t.numpy() for batch in ragged_loader for t in batch]
    assert len(got) == len(tokens)
    for g, e in zip(got, tokens):
        assert np.array_equal(g, e)
