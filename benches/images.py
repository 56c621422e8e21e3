#!/usr/bin/env python3
"""JPEG decode on gather, side by side with a plain Python PIL loop.

Workload: 1,024 photo-like 224x224 RGB images (smooth gradients, blobs and
sensor-like noise; about 8.9x smaller as JPEG than as pixels), encoded by
PIL at quality 90 (4:2:0) and stored as they are in a ``Dense`` image store
(``append_encoded``), so both sides decode the very same bytes.

Measurements (images/s, median of the rounds):

* ``pil``: ``np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))`` for
  every file in a loop (Pillow's libjpeg-turbo; one core);
* ``gather``: ``reader[idx]`` with batches of 256 random indices: every
  image decoded by zune-jpeg in the store's threads, the GIL released,
  straight into the ``(256, 224, 224, 3)`` batch;
* ``resize``: the same, through ``Dense.open(path, resize=(192, 192))``
  (decode, cover-resize, centre crop).

Then the loaders (images/s and peak PSS summed over the process tree, each
loader in a fresh process, rounds alternated, medians), on the same JPEGs
written out as files plus an ``int64`` label per image, batch 256, 4
workers, random order with replacement:

* ``loaderx``: ``DataLoader({"image": jpeg store, "label": label store})``,
  the native loader (every image decoded in its Rust threads);
* ``torch``: ``torch.utils.data.DataLoader`` over a dataset whose
  ``__getitem__`` opens the file with PIL (``convert("RGB")``), default
  collate, fork workers (prefetch factor 2).

Each measurement runs in a worker process pinned to one core (``1 core``)
or to both (``2 cores``: the store's pool has one thread per core); rounds
alternate the two workers so a noisy neighbour slows both alike.

    python benches/images.py [--rounds 3] [--seconds 2] [--loader-batches 30] [--json out.json]
    python benches/images.py --smoke     # seconds; checks the script only
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchlib import pss_rss_of, run_sampled

N = int(os.environ.get("LOADERX_IMAGES_N", "1024"))
SIDE = 224
BATCH = 256


def photo(rng: np.random.Generator) -> np.ndarray:
    y, x = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    img = np.zeros((SIDE, SIDE, 3), np.float32)
    for _ in range(6):
        fy, fx = rng.uniform(0.002, 0.05, 2)
        phase = rng.uniform(0, 6.28, 3)
        amp = rng.uniform(10, 50, 3)
        for c in range(3):
            img[..., c] += amp[c] * np.sin(fy * y * 6.28 + fx * x * 6.28 + phase[c])
    for _ in range(8):
        cy, cx, r = rng.uniform(0, SIDE), rng.uniform(0, SIDE), rng.uniform(5, 60)
        img[((y - cy) ** 2 + (x - cx) ** 2) < r * r] += rng.uniform(-60, 60, 3)
    img += 128 + rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def prepare(folder: str) -> dict[str, float]:
    from PIL import Image

    from loaderx.zrecord import Dense

    rng = np.random.default_rng(0)
    files = []
    for _ in range(N):
        out = io.BytesIO()
        Image.fromarray(photo(rng)).save(out, "JPEG", quality=90)
        files.append(out.getvalue())
    with open(os.path.join(folder, "files.bin"), "wb") as fh:
        for f in files:
            fh.write(len(f).to_bytes(4, "little"))
            fh.write(f)
    with Dense.create(os.path.join(folder, "store"), np.uint8, (SIDE, SIDE, 3), codec="jpeg") as w:
        w.append_encoded(files)
    write_loader_inputs(folder, files)
    mean = float(np.mean([len(f) for f in files]))
    return {"mean_jpeg_bytes": mean, "ratio": SIDE * SIDE * 3 / mean}


def write_loader_inputs(folder: str, files: list[bytes]) -> None:
    """The JPEGs as files (what torch reads) and the labels as a store."""
    from loaderx.zrecord import Dense

    os.makedirs(os.path.join(folder, "jpegs"))
    for i, f in enumerate(files):
        with open(os.path.join(folder, "jpegs", f"{i:05d}.jpg"), "wb") as fh:
            fh.write(f)
    with Dense.create(os.path.join(folder, "labels"), np.int64, (), codec="raw") as w:
        w.append(np.arange(len(files), dtype=np.int64))


def load_files(folder: str) -> list[bytes]:
    raw = open(os.path.join(folder, "files.bin"), "rb").read()
    files, at = [], 0
    while at < len(raw):
        n = int.from_bytes(raw[at : at + 4], "little")
        files.append(raw[at + 4 : at + 4 + n])
        at += 4 + n
    return files


def rate(step, seconds: float) -> float:
    step()  # warm
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += step()
    return done / (time.perf_counter() - start)


def worker(folder: str, cores: int, seconds: float) -> None:
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))
    from PIL import Image

    from loaderx.zrecord import Dense

    files = load_files(folder)
    reader = Dense.open(os.path.join(folder, "store"))
    resized = Dense.open(os.path.join(folder, "store"), resize=(192, 192))
    rng = np.random.default_rng(cores)
    check = reader[[0, 1]].astype(np.int16)
    pil = np.stack([np.asarray(Image.open(io.BytesIO(f)).convert("RGB")) for f in files[:2]])
    assert np.abs(check - pil).mean() < 1.0, "decoders disagree"

    def pil_loop() -> int:
        for k in rng.integers(0, N, BATCH):
            np.asarray(Image.open(io.BytesIO(files[k])).convert("RGB"))
        return BATCH

    def gather() -> int:
        batch = reader[rng.integers(0, N, BATCH)]
        assert batch.shape == (BATCH, SIDE, SIDE, 3)
        return BATCH

    def gather_resized() -> int:
        return len(resized[rng.integers(0, N, BATCH)])

    out = {
        "pil": rate(pil_loop, seconds),
        "gather": rate(gather, seconds),
        "resize": rate(gather_resized, seconds),
    }
    print(json.dumps(out), flush=True)


class JpegFiles:
    """A map-style torch dataset: PIL decode of one file per item."""

    def __init__(self, folder: str) -> None:
        self.paths = sorted(
            os.path.join(folder, "jpegs", f) for f in os.listdir(os.path.join(folder, "jpegs"))
        )

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            return np.asarray(im.convert("RGB")), i


def loader_worker(folder: str, name: str, batch: int, warmup: int, batches: int) -> None:
    """One loader in this process; prints a JSON line when ready (with its
    own PSS) and one with the timings."""
    if name == "loaderx":
        from loaderx import DataLoader
        from loaderx.zrecord import Dense

        streams = {
            "image": Dense.open(os.path.join(folder, "store")),
            "label": Dense.open(os.path.join(folder, "labels")),
        }
        dl = DataLoader(streams, batch_size=batch, num_workers=WORKERS, prefetch_size=4)
        it = iter(dl)

        def step() -> tuple[np.ndarray, np.ndarray]:
            b = next(it)
            return b["image"], b["label"]
    else:
        try:
            import torch
        except ImportError as e:
            print(json.dumps({"missing": f"torch: {e}"}), flush=True)
            os._exit(0)
        ds = JpegFiles(folder)
        sampler = torch.utils.data.RandomSampler(ds, replacement=True, num_samples=1 << 40)
        tl = torch.utils.data.DataLoader(
            ds, batch_size=batch, sampler=sampler, num_workers=WORKERS, prefetch_factor=2
        )
        it = iter(tl)

        def step() -> tuple[np.ndarray, np.ndarray]:
            images, labels = next(it)
            return images.numpy(), labels.numpy()

    print(json.dumps({"ready": True, "pss_before": pss_rss_of(os.getpid())[0]}), flush=True)
    files = load_files(folder)
    from PIL import Image

    images, labels = step()
    assert images.shape == (batch, SIDE, SIDE, 3), images.shape
    k = int(labels[0])
    pil = np.asarray(Image.open(io.BytesIO(files[k])).convert("RGB")).astype(np.int16)
    assert np.abs(images[0].astype(np.int16) - pil).mean() < 1.0, "not the image of its label"
    del images, labels
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(batches):
        step()
    total = time.perf_counter() - start
    print(json.dumps({"images_s": batch * batches / total}), flush=True)
    os._exit(0)


#: Loader workers, as in the field benchmark.
WORKERS = 4


def measure_loader(folder: str, name: str, batch: int, warmup: int, batches: int) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--loader-worker", folder, name]
    cmd += ["--loader-shape", str(batch), str(warmup), str(batches)]
    return run_sampled(cmd, f"loader {name}")


def loader_rounds(folder: str, rounds: int, batch: int, batches: int) -> dict[str, dict[str, Any]]:
    """Median images/s and peak PSS of each loader; a loader that cannot
    run here (torch not installed) is reported with the reason."""
    names = ["loaderx", "torch"]
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    missing: dict[str, dict[str, Any]] = {}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            if name in missing:
                continue
            res = measure_loader(folder, name, batch, 3, batches)
            if "missing" in res:
                if name == "loaderx":
                    raise SystemExit(f"loaderx's loader cannot run: {res['missing']}")
                missing[name] = res
            else:
                runs[name].append(res)
    out = {n: {k: statistics.median(x[k] for x in v) for k in v[0]} for n, v in runs.items() if v}
    return {**out, **missing}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny run: checks the script only")
    ap.add_argument("--loader-batches", type=int, default=30, help="timed batches per loader run")
    ap.add_argument("--worker", nargs=2, metavar=("FOLDER", "CORES"), help=argparse.SUPPRESS)
    ap.add_argument("--loader-worker", nargs=2, metavar=("FOLDER", "NAME"), help=argparse.SUPPRESS)
    ap.add_argument("--loader-shape", nargs=3, type=int, default=[BATCH, 3, 30], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke:
        global N
        N = 64
        os.environ["LOADERX_IMAGES_N"] = str(N)
        args.rounds, args.seconds = 1, 0.1
    if args.loader_worker:
        loader_worker(*args.loader_worker, *args.loader_shape)
        return
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.seconds)
        return
    with tempfile.TemporaryDirectory(prefix="loaderx-images-") as folder:
        info = prepare(folder)
        runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
        for r in range(args.rounds):
            for cores in (1, 2) if r % 2 == 0 else (2, 1):
                cmd = [sys.executable, os.path.abspath(__file__), "--seconds", str(args.seconds)]
                cmd += ["--worker", folder, str(cores)]
                line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                runs[cores].append(json.loads(line.strip().splitlines()[-1]))
        loader_batch = 16 if args.smoke else BATCH
        loaders = loader_rounds(folder, args.rounds, loader_batch, 2 if args.smoke else args.loader_batches)
    result: dict[str, object] = {"workload": info, "batch": BATCH, "side": SIDE, "images": N,
                                 "loaders": loaders, "loader_batch": loader_batch, "workers": WORKERS}
    print(
        f"{N} JPEGs {SIDE}x{SIDE} q90, {info['mean_jpeg_bytes']:.0f} bytes each "
        f"({info['ratio']:.1f}x smaller than pixels); batch {BATCH}; images/s, median of "
        f"{args.rounds}"
    )
    print(f"{'':10}{'PIL loop':>12}{'gather':>12}{'vs PIL':>9}{'resize 192':>12}")
    for cores in (1, 2):
        med = {k: statistics.median(r[k] for r in runs[cores]) for k in runs[cores][0]}
        result[f"{cores}core"] = med
        print(
            f"{cores} core{'s' if cores > 1 else ' '}   {med['pil']:12.0f}{med['gather']:12.0f}"
            f"{med['gather'] / med['pil']:8.2f}x{med['resize']:12.0f}"
        )
    one, two = result["1core"], result["2core"]
    assert isinstance(one, dict) and isinstance(two, dict)
    print(f"both cores / PIL's one-core rate: {two['gather'] / one['pil']:.2f}x")
    print(f"\nloaders: batch {loader_batch}, {WORKERS} workers, image + label; median of {args.rounds}")
    print(f"{'':10}{'images/s':>12}{'peak PSS':>12}")
    for name, m in loaders.items():
        if "missing" in m:
            print(f"{name:10}  missing: {m['missing']}")
        else:
            print(f"{name:10}{m['images_s']:12.0f}{m['peak_pss'] / 2**20:9.0f} MiB")
    ours, torch_ = loaders["loaderx"], loaders["torch"]
    if "missing" not in torch_:
        print(f"loaderx / torch: {ours['images_s'] / torch_['images_s']:.2f}x images/s, "
              f"{ours['peak_pss'] / torch_['peak_pss']:.2f}x peak PSS")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
