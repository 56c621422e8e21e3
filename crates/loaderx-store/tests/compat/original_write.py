"""Writes stores with the original loaderx 0.5.4 for tests/compat.rs.

Usage: original_write.py OUT_DIR

For each codec (raw, flate) makes OUT_DIR/<codec>/store with fixed and
ragged appends, a delete and a compaction, and OUT_DIR/<codec>/expect.bin /
lens.bin holding every live record in index order (lens as little-endian u32).
"""
import os
import sys

import numpy as np
from loaderx import Zrecord


def records(seed, n, size):
    rng = np.random.default_rng(seed)
    base = np.repeat(np.arange(size, dtype=np.int64)[None, :] // 32, n, axis=0)
    noise = rng.integers(0, 3, (n, size))
    return ((base + noise + seed * 7) % 251).astype(np.uint8)


def main(out):
    for codec in ("raw", "flate"):
        d = os.path.join(out, codec)
        os.makedirs(d, exist_ok=True)
        with Zrecord(os.path.join(d, "store"), codec=codec) as zr:
            fixed = records(1, 50, 3000)
            zr.append(np.ascontiguousarray(fixed), 50, 3000)
            blobs = [records(100 + i, 1, 200 + 37 * i)[0] for i in range(30)]
            flat = np.concatenate(blobs)
            lens = np.array([len(b) for b in blobs], dtype=np.uint32)
            offsets = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.uint64)
            zr.append_var(flat, offsets, lens)
            zr.delete([0, 7, 7, 49, 60, 79])
            zr.compact()
            zr.append(np.ascontiguousarray(records(9, 5, 1000)), 5, 1000, codec="raw")
            zr.sync()
            n = len(zr)
            got_lens = zr.lengths(np.arange(n))
            offs = np.concatenate([[0], np.cumsum(got_lens[:-1].astype(np.uint64))]).astype(np.uint64)
            out_buf = np.empty(int(got_lens.sum()), dtype=np.uint8)
            zr.gather_var(np.arange(n, dtype=np.uint64), out_buf, offs)
        out_buf.tofile(os.path.join(d, "expect.bin"))
        got_lens.astype("<u4").tofile(os.path.join(d, "lens.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
