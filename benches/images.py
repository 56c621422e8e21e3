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

Each measurement runs in a worker process pinned to one core (``1 core``)
or to both (``2 cores``: the store's pool has one thread per core); rounds
alternate the two workers so a noisy neighbour slows both alike.

    python benches/images.py [--rounds 3] [--seconds 2] [--json out.json]
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

import numpy as np

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
    mean = float(np.mean([len(f) for f in files]))
    return {"mean_jpeg_bytes": mean, "ratio": SIDE * SIDE * 3 / mean}


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny run: checks the script only")
    ap.add_argument("--worker", nargs=2, metavar=("FOLDER", "CORES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke:
        global N
        N = 64
        os.environ["LOADERX_IMAGES_N"] = str(N)
        args.rounds, args.seconds = 1, 0.1
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
    result: dict[str, object] = {"workload": info, "batch": BATCH, "side": SIDE, "images": N}
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
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
