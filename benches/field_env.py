#!/usr/bin/env python3
"""Make the benchmark venv of ``benches/field.py`` (the contenders).

``field_env.py VENV REQUIREMENTS`` creates ``VENV`` (when it has no working
interpreter) and installs the requirements of ``REQUIREMENTS`` one at a
time, so that one that cannot be installed does not take the others down
with it. The outcome is kept in ``VENV/field-env.json``: for every
requirement, the version installed or the reason it is missing (the last
lines pip printed). A venv whose ``field-env.json`` exists is complete and is
not touched again; ``cargo xtask bench`` names the venv after a hash of the
requirements file, so editing the file makes a new one.

Run by ``cargo xtask bench`` with the project venv's interpreter; needs
nothing beyond the standard library.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def requirements(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def dist_name(req: str) -> str:
    for sep in ("==", ">=", "<=", "~=", "<", ">", "[", ";", " "):
        req = req.split(sep, 1)[0]
    return req.strip()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: field_env.py VENV REQUIREMENTS", file=sys.stderr)
        return 2
    venv, req_file = Path(argv[0]), Path(argv[1])
    stamp = venv / "field-env.json"
    if stamp.exists():
        print(f"field_env: {venv} is ready ({stamp.name} exists)")
        return 0
    python = venv / "bin" / "python"
    if not python.exists() or subprocess.run([str(python), "-c", "import sys"], capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=False)
    result: dict[str, dict[str, str | None]] = {}
    for req in requirements(req_file):
        name = dist_name(req)
        t0 = time.perf_counter()
        print(f"field_env: pip install {req}", flush=True)
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", req],
            capture_output=True, text=True,
        )
        if proc.returncode == 0:
            probe = subprocess.run(
                [str(python), "-c", f"from importlib import metadata; print(metadata.version({name!r}))"],
                capture_output=True, text=True,
            )
            result[name] = {"requirement": req, "version": probe.stdout.strip() or None, "missing": None}
            print(f"field_env:   {name} {probe.stdout.strip()} ({time.perf_counter() - t0:.0f} s)", flush=True)
        else:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            reason = " / ".join(ln if len(ln) <= 240 else ln[:240] + "..." for ln in lines[-2:])
            reason = reason or f"pip exited with {proc.returncode}"
            result[name] = {"requirement": req, "version": None, "missing": f"pip install {req} failed: {reason}"}
            print(f"field_env:   {name} MISSING: {reason}", flush=True)
    stamp.write_text(json.dumps({"requirements": result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
