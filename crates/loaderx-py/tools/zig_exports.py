"""`python -m ziglang`, for the Windows on Arm wheel: corrects the module's
export list.

    python zig_exports.py -m ziglang ZIG-ARGS...

maturin (1.16) cross-builds that wheel with zig and, for Windows GNU
targets, hands the linker a `.def` file of its own that exports `PyInit_`
followed by the whole module path (`PyInit_loaderx._native`), while the
module defines, and Python looks up, `PyInit__native`; zig keeps only that
`.def` file, so the link fails or the DLL exports a name Python never calls.
`cargo xtask dist` gives maturin, as the Python that runs zig
(CARGO_ZIGBUILD_PYTHON_PATH), a wrapper that runs this script, which
passes a corrected copy of such a `.def` file to the real zig (`python -m
ziglang`, from the same environment) and every other argument unchanged. `check_dist.py` checks the wheel's DLL exports `PyInit__native`.
"""

from __future__ import annotations

import os
import sys

WRONG = "PyInit_loaderx._native"
RIGHT = "PyInit__native"


def corrected(arg: str) -> str:
    """`arg`, naming a corrected copy if it names a `.def` file with WRONG."""
    prefix = "-Wl," if arg.startswith("-Wl,") else ""
    path = arg[len(prefix):]
    if not path.endswith(".def") or not os.path.isfile(path):
        return arg
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if WRONG not in text:
        return arg
    fixed = path[: -len(".def")] + ".exports.def"
    with open(fixed, "w", encoding="utf-8") as f:
        f.write(text.replace(WRONG, RIGHT))
    return prefix + fixed


def main() -> None:
    if sys.argv[1:3] != ["-m", "ziglang"]:
        sys.exit(f"zig_exports.py: expected `-m ziglang ...`, got {sys.argv[1:3]}")
    args = [corrected(a) for a in sys.argv[3:]]
    os.execv(sys.executable, [sys.executable, "-m", "ziglang", *args])


if __name__ == "__main__":
    main()
