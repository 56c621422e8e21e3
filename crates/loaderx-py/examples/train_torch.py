"""Train a small PyTorch classifier on data converted with loaderx, both ways.

    python crates/loaderx-py/examples/train_torch.py --out target/train-torch

1. Makes a synthetic two-class problem (16 features, the class decided by a
   fixed random hyperplane) and converts it with ``Dataset.write`` into two
   stores, ``x`` and ``y``.
2. **loaderx's own loader** feeds the training loop: a named-stream
   ``DataLoader`` gathers both stores in Rust threads, and its ``transform``
   (run on a stage thread, ahead of the loop) turns each batch into tensors
   with ``torch.from_numpy`` (no copy), pinned for a fast copy to the GPU
   when there is one. Half way, the loader's ``state_dict()`` goes into the
   checkpoint (next to the model's); a fresh loader restored from it
   continues the same stream.
3. **Map-style inside torch.utils.data.DataLoader**: the stores are plain
   map-style datasets (``__len__``, ``__getitems__``); torch's worker
   processes (``--start fork`` or ``spawn``) receive them pickled, which
   reopens each store by path in the worker.

Exits non-zero if the model does not learn (accuracy below 90 %).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from loaderx import Dataset
from loaderx.dataloader import DataLoader

FEATURES = 16


def make_data(out: Path, n: int) -> tuple[Dataset, Dataset]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    w = rng.standard_normal(FEATURES).astype(np.float32)
    y = (x @ w > 0).astype(np.int64)
    shutil.rmtree(out, ignore_errors=True)
    return Dataset.write(out / "x", x, codec="zstd"), Dataset.write(out / "y", y)


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
    )
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def accuracy(model: torch.nn.Module, x: Dataset, y: Dataset) -> float:
    with torch.no_grad():
        everything = np.arange(len(x))
        logits = model(torch.from_numpy(x[everything]))
        return float((logits.argmax(1) == torch.from_numpy(y[everything])).float().mean())


def to_tensors(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """The loader's transform: tensors over the loader's buffers (no copy);
    pinned when a GPU will receive them (pinning copies, off the loop's thread)."""
    tensors = {name: torch.from_numpy(array) for name, array in batch.items()}
    if torch.cuda.is_available():
        tensors = {name: t.pin_memory() for name, t in tensors.items()}
    return tensors


def train_with_loaderx(x: Dataset, y: Dataset, steps: int) -> float:
    model, opt = model_and_optimizer()
    streams = {"x": x, "y": y}
    loader = DataLoader(streams, batch_size=64, transform_workers=2, seed=1, transform=to_tensors)
    checkpoint = None
    for step in range(steps):
        batch = next(loader)
        xb, yb = batch["x"], batch["y"]  # on a GPU: .to("cuda", non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == steps // 2:
            # A checkpoint: the loader state is small and JSON-serialisable.
            checkpoint = {"model": model.state_dict(), "loader": json.dumps(loader.state_dict())}
    assert checkpoint is not None
    following = next(loader)
    loader.close()
    # Resume from the checkpoint (in a real job: in a new process, maybe with
    # another number of workers or hosts).
    resumed = DataLoader(streams, batch_size=64, transform_workers=4, seed=1, transform=to_tensors)
    resumed.load_state_dict(json.loads(checkpoint["loader"]))
    for _ in range(steps - steps // 2 - 1):
        next(resumed)
    again = next(resumed)
    resumed.close()
    assert all(torch.equal(following[k], again[k]) for k in streams), "resume diverged"
    return accuracy(model, x, y)


def train_map_style(x: Dataset, y: Dataset, epochs: int, start: str) -> float:
    model, opt = model_and_optimizer()
    pairs = torch.utils.data.StackDataset(x=x, y=y)  # calls each store's __getitems__
    loader = torch.utils.data.DataLoader(
        pairs,
        batch_size=64,
        shuffle=True,
        num_workers=2,
        multiprocessing_context=start,
        generator=torch.Generator().manual_seed(0),
        persistent_workers=True,  # spawn re-imports torch in each new worker
    )
    for _ in range(epochs):
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return accuracy(model, x, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("target/train-torch"))
    parser.add_argument("--records", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--start", choices=["fork", "spawn"], default="spawn")
    args = parser.parse_args()
    x, y = make_data(args.out, args.records)
    own = train_with_loaderx(x, y, args.steps)
    print(f"loaderx DataLoader -> torch: accuracy {own:.3f} after {args.steps} steps")
    mapped = train_map_style(x, y, args.epochs, args.start)
    print(f"torch DataLoader ({args.start} workers) over loaderx stores: accuracy {mapped:.3f}")
    for name, acc in (("loaderx loader", own), ("map-style", mapped)):
        if acc < 0.9:
            raise SystemExit(f"{name}: accuracy {acc:.3f} is below 0.9; training did not work")


if __name__ == "__main__":
    main()
