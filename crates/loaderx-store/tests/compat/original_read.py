"""Reads a store with the original loaderx 0.5.4 and compares it with the
expected records, for tests/compat.rs.

Usage: original_read.py STORE EXPECT_BIN LENS_BIN
Exits 0 when every record matches, 1 (with a message) otherwise.
"""
import sys

import numpy as np
from loaderx import Zrecord


def main(store, expect_path, lens_path):
    expect = np.fromfile(expect_path, dtype=np.uint8)
    lens = np.fromfile(lens_path, dtype="<u4")
    with Zrecord(store) as zr:
        if len(zr) != len(lens):
            print(f"length {len(zr)} != expected {len(lens)}")
            return 1
        got_lens = zr.lengths(np.arange(len(lens)))
        if not np.array_equal(got_lens, lens):
            print("record lengths differ")
            return 1
        offs = np.concatenate([[0], np.cumsum(lens[:-1].astype(np.uint64))]).astype(np.uint64)
        out = np.empty(int(lens.sum()), dtype=np.uint8)
        zr.gather_var(np.arange(len(lens), dtype=np.uint64), out, offs)
        if not np.array_equal(out, expect):
            bad = int(np.flatnonzero(out != expect)[0])
            print(f"bytes differ from offset {bad}")
            return 1
        stats = zr.stats()
        if stats["records"] != len(lens):
            print(f"stats disagree: {stats}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
