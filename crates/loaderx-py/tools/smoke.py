"""Smoke test of an installed loaderx: write a dataset with every codec, read
it back, delete and compact, and run the loader a few steps.

Run by `cargo xtask dist` with an installed wheel (never the source tree):
`python smoke.py [EXPECTED_VERSION]`. Exits non-zero on the first mismatch.
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

import loaderx
from loaderx import DataLoader, Dataset


def main() -> None:
    here = Path(loaderx.__file__).resolve().parent
    print(f"loaderx {loaderx.__version__} from {here}")
    if len(sys.argv) > 1 and loaderx.__version__ != sys.argv[1]:
        raise SystemExit(f"version {loaderx.__version__!r}, expected {sys.argv[1]!r}")
    if (here.parent / "Cargo.toml").exists() or (here.parent.parent / "Cargo.toml").exists():
        raise SystemExit(f"imported from a source tree ({here}), not an installed wheel")

    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, size=(64, 8, 8, 3), dtype=np.uint8)
    labels = np.arange(64, dtype=np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for codec in loaderx.CODECS:
            if codec == "zstd_dict":
                continue  # needs a trained dictionary before the first record
            ds = Dataset.write(root / f"images_{codec}.zr", images, codec=codec)
            back = Dataset(root / f"images_{codec}.zr")
            if len(back) != 64 or not np.array_equal(back[np.arange(64)], images):
                raise SystemExit(f"codec {codec}: records read back differ")
            ds.close()
            back.close()
            print(f"codec {codec}: 64 records written and read back")

        lab = Dataset.write(root / "labels.zr", labels)
        lab.delete([0, 1])
        lab.compact()
        # A delete moves records from the end into the holes (as loaderx 0.5
        # does): the set of records left is what must hold.
        left = sorted(int(v) for v in lab[np.arange(len(lab))])
        if left != list(range(2, 64)):
            raise SystemExit(f"delete + compact: records left {left}")
        print("delete + compact: the 62 records left are the right ones")
        lab.close()

        imgs = Dataset(root / "images_flate.zr")
        labs = Dataset.write(root / "labels_full.zr", labels)
        with DataLoader(imgs, labs, batch_size=16) as loader:
            for step, batch in enumerate(loader):
                x, y = batch["data"], batch["label"]
                if x.shape != (16, 8, 8, 3) or y.shape != (16,):
                    raise SystemExit(f"step {step}: shapes {x.shape} {y.shape}")
                if not np.array_equal(x, images[y]):
                    raise SystemExit(f"step {step}: images do not match their labels")
                if step == 5:
                    break
        print("loader: 6 batches of 16, each image matching its label")
        imgs.close()
        labs.close()
    print("smoke test passed")


if __name__ == "__main__":
    main()
