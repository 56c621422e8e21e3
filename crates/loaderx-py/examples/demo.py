"""loaderx end to end: convert a memory-mapped dataset with every codec, then
time the DataLoader over each.

    python crates/loaderx-py/examples/demo.py --out target/demo

(`cargo xtask demo` builds the package into .venv and runs exactly this.)

1. Makes a synthetic image-like dataset (uint8 samples of shape (3, 64, 64):
   smooth gradients plus a little noise, so it compresses a bit) and int64
   labels, as memory-mapped .npy files; reused when already there.
2. Converts it with ``Dataset.write`` once per codec (raw, flate, zstd, lz4),
   block by block so a progress bar can follow (each call appends).
3. Runs a ``DataLoader`` over each for a few hundred steps and checks that
   every batch's images match their labels.
4. Prints samples/s, MiB/s, the size the store occupies on disk (allocated
   blocks: chunk files are sparse) and the compression ratio per codec.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

import loaderx
from loaderx import CODECS, DataLoader, Dataset

SHAPE = (3, 64, 64)


class Progress:
    """A small text progress bar; one line per quarter when not on a terminal."""

    def __init__(self, label: str, total: int, unit_bytes: int) -> None:
        self.label, self.total, self.unit_bytes = label, total, unit_bytes
        self.tty = sys.stdout.isatty()
        self.start = time.perf_counter()
        self.next_quarter = 1

    def update(self, done: int) -> None:
        frac = done / self.total if self.total else 1.0
        secs = max(time.perf_counter() - self.start, 1e-9)
        rate = done * self.unit_bytes / secs / 2**20
        width = 30
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        line = f"  {self.label:<18} [{bar}] {frac:6.1%} {done:>7}/{self.total} {rate:8.1f} MiB/s"
        if self.tty:
            print("\r" + line, end="" if done < self.total else "\n", flush=True)
        elif frac * 4 >= self.next_quarter or done == self.total:
            print(line, flush=True)
            while frac * 4 >= self.next_quarter:
                self.next_quarter += 1


def make_source(out: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    images_npy, labels_npy = out / "images.npy", out / "labels.npy"
    if images_npy.is_file() and labels_npy.is_file():
        images = np.load(images_npy, mmap_mode="r")
        labels = np.load(labels_npy, mmap_mode="r")
        if images.shape == (n, *SHAPE) and images.dtype == np.uint8 and labels.shape == (n,):
            print(f"reusing {images_npy} ({images.nbytes / 2**20:.0f} MiB)")
            return images_npy, labels_npy
        del images, labels
    print(f"generating {n} synthetic images {SHAPE} uint8 into {images_npy}")
    images = np.lib.format.open_memmap(images_npy, mode="w+", dtype=np.uint8, shape=(n, *SHAPE))
    rng = np.random.default_rng(seed)
    c, h, w = SHAPE
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    progress = Progress("generate", n, int(np.prod(SHAPE)))
    block = 1000
    for start in range(0, n, block):
        k = min(block, n - start)
        slope = rng.uniform(-2.0, 2.0, (k, c, 2, 1, 1)).astype(np.float32)
        base = rng.uniform(0, 255, (k, c, 1, 1)).astype(np.float32)
        value = slope[:, :, 0] * xx + slope[:, :, 1] * yy + base
        value += rng.integers(0, 4, (k, c, h, w)).astype(np.float32)  # a little noise
        images[start : start + k] = np.mod(value, 256).astype(np.uint8)
        progress.update(start + k)
    images.flush()
    del images
    labels = np.lib.format.open_memmap(labels_npy, mode="w+", dtype=np.int64, shape=(n,))
    labels[:] = np.arange(n, dtype=np.int64)  # label = index, so batches can be checked
    labels.flush()
    del labels
    return images_npy, labels_npy


def allocated(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.iterdir() if p.is_file())


def convert(src: np.ndarray, dst: Path, codec: str, label: str) -> float:
    """Dataset.write block by block (each call appends), with a progress bar."""
    if dst.exists():
        shutil.rmtree(dst)
    block = 2000
    itembytes = int(np.prod(src.shape[1:])) * src.dtype.itemsize
    progress = Progress(label, len(src), itembytes)
    start = time.perf_counter()
    for lo in range(0, len(src), block):
        Dataset.write(dst, src[lo : lo + block], codec=codec).close()
        progress.update(min(lo + block, len(src)))
    return time.perf_counter() - start


def time_loader(
    images: Dataset, labels: Dataset, reference: np.ndarray, steps: int, batch: int, workers: int
) -> float:
    with DataLoader(images, labels, num_workers=workers, batch_size=batch, mode=1, seed=0) as loader:
        for _ in range(10):  # warm up: threads started, pages touched
            next(loader)
        start = time.perf_counter()
        for step in range(steps):
            got = next(loader)
            if step % 50 == 0:  # spot-check: the images are the labelled ones
                idx = got["label"][:8]
                if not np.array_equal(got["data"][:8], reference[idx]):
                    raise SystemExit(f"batch {step}: images do not match their labels")
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("target/demo"))
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--codecs", nargs="+", default=["raw", "flate", "zstd", "lz4"])
    args = parser.parse_args()
    for codec in args.codecs:
        if codec not in CODECS:
            parser.error(f"unknown codec {codec!r}; loaderx knows {sorted(CODECS)}")

    args.out.mkdir(parents=True, exist_ok=True)
    print(f"loaderx {loaderx.__version__} from {Path(loaderx.__file__).parent}")
    images_src, labels_src = make_source(args.out, args.samples)
    images = np.load(images_src, mmap_mode="r")
    labels = np.load(labels_src, mmap_mode="r")
    raw_bytes = images.nbytes
    sample_bytes = int(np.prod(SHAPE))

    rows = []
    for codec in args.codecs:
        print(f"\n== {codec}")
        img_dir, lbl_dir = args.out / f"images-{codec}.zr", args.out / f"labels-{codec}.zr"
        write_secs = convert(images, img_dir, codec, f"write {codec}")
        convert(labels, lbl_dir, codec, "write labels")
        on_disk = allocated(img_dir)
        with Dataset(img_dir) as ids, Dataset(lbl_dir) as lds:
            assert len(ids) == len(lds) == args.samples
            secs = time_loader(ids, lds, images, args.steps, args.batch_size, args.workers)
        per_sec = args.steps * args.batch_size / secs
        rows.append(
            (
                codec,
                per_sec,
                per_sec * sample_bytes / 2**20,
                raw_bytes / write_secs / 2**20,
                on_disk / 2**20,
                raw_bytes / on_disk,
            )
        )
        print(f"  loader: {args.steps} steps of {args.batch_size} in {secs:.2f} s")

    print(
        f"\n{args.samples} samples of {SHAPE} uint8 ({raw_bytes / 2**20:.0f} MiB raw); "
        f"DataLoader(batch_size={args.batch_size}, num_workers={args.workers}, mode=IID), "
        f"{args.steps} timed steps"
    )
    header = ("codec", "samples/s", "MiB/s", "write MiB/s", "on disk MiB", "ratio")
    print(f"{header[0]:<8}{header[1]:>12}{header[2]:>10}{header[3]:>13}{header[4]:>13}{header[5]:>8}")
    for codec, sps, mibs, wmibs, disk, ratio in rows:
        print(f"{codec:<8}{sps:>12,.0f}{mibs:>10,.1f}{wmibs:>13,.1f}{disk:>13,.1f}{ratio:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
