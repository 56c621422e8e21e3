"""One training process for the multi-process tests in ``test_training.py``.

Run as ``python training_worker.py '<json>'`` with:

* ``streams``: ``{name: dataset path}``; ``mode``, ``workers``, ``batch``,
  ``seed``, ``rank``, ``world``: the DataLoader's settings;
* ``state_in`` (optional): a JSON file saved by ``state_dict()`` to resume from;
* ``skip``: batches to draw and drop; then ``state_out`` (optional) gets the
  state as JSON (written to a temporary file, then renamed);
* ``take``: batches to keep, saved to ``out`` (an ``.npz`` with one array per
  stream: the batches stacked);
* ``hold``: after all that, print ``ready`` and wait to be killed.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from loaderx import Dataset
from loaderx.dataloader import DataLoader


def main() -> None:
    args = json.loads(sys.argv[1])
    streams = {name: Dataset(path) for name, path in args["streams"].items()}
    loader = DataLoader(
        streams,
        transform_workers=args["workers"],
        batch_size=args["batch"],
        mode=args["mode"],
        seed=args.get("seed", 7),
        rank=args["rank"],
        world_size=args["world"],
    )
    if args.get("state_in"):
        with open(args["state_in"]) as f:
            loader.load_state_dict(json.load(f))
    for _ in range(args.get("skip", 0)):
        next(loader)
    if args.get("state_out"):
        tmp = args["state_out"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(loader.state_dict(), f)
        os.replace(tmp, args["state_out"])
    kept: dict[str, list[np.ndarray]] = {name: [] for name in streams}
    for _ in range(args.get("take", 0)):
        batch = next(loader)
        for name, value in batch.items():
            kept[name].append(np.copy(value))
    if args.get("out"):
        np.savez(args["out"], **{name: np.stack(v) for name, v in kept.items()})
    if args.get("hold"):
        print("ready", flush=True)
        time.sleep(3600)
    loader.close()


if __name__ == "__main__":
    main()
