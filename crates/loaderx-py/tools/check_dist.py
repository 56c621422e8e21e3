"""Checks built release artefacts of loaderx (wheels and the sdist).

    python check_dist.py --version X.Y.Z ARTEFACT...

Standard library only. For every wheel:

* the file name's tags and WHEEL's `Tag:` agree, are abi3 (`cp39-abi3-...`)
  and name one platform this project ships;
* exactly one native module (`loaderx/_native.abi3.so` or `loaderx/_native.pyd`)
  whose header (ELF, PE or Mach-O) names the wheel's architecture;
* the native module needs only libraries its platform tag allows: for
  manylinux, the glibc symbol versions it requires are at most the tag's
  (`manylinux2014` = glibc 2.17) and its `DT_NEEDED` libraries are on the
  manylinux2014 list; for musllinux only musl's libc; on Windows only system
  DLLs and `python3.dll`; on macOS only system libraries;
* the Python files, type stubs and `py.typed` of the source tree are there;
* METADATA is complete: name, version (the expected one), license,
  requires-python, the NumPy dependency, project URLs and the README as the
  long description.

For the sdist: PKG-INFO is complete in the same way, and it holds
pyproject.toml, the Cargo manifests and the crates' sources.

Exits 1 listing every problem found, 0 when all artefacts pass.
"""

from __future__ import annotations

import argparse
import email.parser
import re
import struct
import sys
import tarfile
import urllib.parse
import zipfile
from pathlib import Path

PACKAGE = "loaderx"
# Host names RFC 2606 and RFC 6761 reserve for examples and tests.
RESERVED_HOSTS = (".invalid", ".example", ".test", ".localhost", "example.com", "example.net", "example.org")
PY_DIR = Path(__file__).resolve().parent.parent / "python" / PACKAGE

# Libraries a manylinux2014 extension may need (PEP 599's list).
MANYLINUX2014_LIBS = {
    "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1",
    "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libresolv.so.2",
    "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6",
    "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0",
}
MANYLINUX_GLIBC = {"manylinux2014": (2, 17)}
# Windows: DLLs every Windows has (plus the stable-ABI Python DLL).
WINDOWS_SYSTEM_DLLS = {
    "kernel32.dll", "ntdll.dll", "advapi32.dll", "userenv.dll", "ws2_32.dll",
    "bcrypt.dll", "bcryptprimitives.dll", "msvcrt.dll", "ucrtbase.dll", "shell32.dll",
    "ole32.dll", "user32.dll", "secur32.dll", "python3.dll", "vcruntime140.dll",
}
MACOS_ALLOWED = ("/usr/lib/", "/System/Library/")

ARCH_BY_TAG = {
    "x86_64": "x86_64", "aarch64": "aarch64", "win_amd64": "x86_64", "win_arm64": "aarch64",
    "arm64": "aarch64",
}
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
PE_MACHINES = {0x8664: "x86_64", 0xAA64: "aarch64"}
MACHO_CPUS = {0x01000007: "x86_64", 0x0100000C: "aarch64"}


class Problems(list):
    def add(self, artefact: str, text: str) -> None:
        self.append(f"{artefact}: {text}")


# --- platform tags -----------------------------------------------------------

def platform_of(tag: str) -> tuple[str, str]:
    """(family, arch) of a wheel platform tag, e.g. ('manylinux2014', 'x86_64')."""
    m = re.fullmatch(r"manylinux(2014|_2_(\d+))_(x86_64|aarch64)", tag)
    if m:
        family = "manylinux2014" if m.group(1) == "2014" else f"manylinux_2_{m.group(2)}"
        return family, m.group(3)
    m = re.fullmatch(r"musllinux_(\d+)_(\d+)_(x86_64|aarch64)", tag)
    if m:
        return f"musllinux_{m.group(1)}_{m.group(2)}", m.group(3)
    if tag in ("win_amd64", "win_arm64"):
        return "windows", ARCH_BY_TAG[tag]
    m = re.fullmatch(r"macosx_(\d+)_(\d+)_(x86_64|arm64|universal2)", tag)
    if m:
        return "macos", ARCH_BY_TAG.get(m.group(3), m.group(3))
    raise ValueError(f"platform tag {tag!r} is not one this project ships")


def glibc_limit(family: str) -> tuple[int, int] | None:
    """Highest glibc a manylinux family allows (None for other families)."""
    if family in MANYLINUX_GLIBC:
        return MANYLINUX_GLIBC[family]
    m = re.fullmatch(r"manylinux_2_(\d+)", family)
    return (2, int(m.group(1))) if m else None


# --- binary headers ----------------------------------------------------------

def elf_info(data: bytes) -> tuple[str, list[str], tuple[int, ...] | None]:
    """(arch, DT_NEEDED names, highest GLIBC_x.y version needed) of an ELF64 LE file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(shnum):
        off = shoff + i * shentsize
        _name, stype, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, off
        )
        sections.append((stype, offset, size, link, entsize))

    def cstr(table: int, at: int) -> str:
        start = sections[table][1] + at
        return data[start:data.index(b"\0", start)].decode()

    needed: list[str] = []
    glibc: tuple[int, ...] | None = None
    for stype, offset, size, link, _entsize in sections:
        if stype == 6:  # SHT_DYNAMIC
            for at in range(offset, offset + size, 16):
                tag, val = struct.unpack_from("<qQ", data, at)
                if tag == 0:
                    break
                if tag == 1:  # DT_NEEDED
                    needed.append(cstr(link, val))
        elif stype == 0x6FFFFFFE:  # SHT_GNU_verneed
            at = offset
            while True:
                _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, at)
                a = at + aux
                for _ in range(cnt):
                    _hash, _flags, _other, name, anext = struct.unpack_from("<IHHII", data, a)
                    m = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", cstr(link, name))
                    if m:
                        v = tuple(int(p) for p in m.group(1).split("."))
                        glibc = v if glibc is None or v > glibc else glibc
                    if anext == 0:
                        break
                    a += anext
                if nxt == 0:
                    break
                at += nxt
    return ELF_MACHINES.get(machine, f"elf-machine-{machine}"), needed, glibc


def pe_info(data: bytes) -> tuple[str, list[str], list[str]]:
    """(arch, imported DLL names, exported names) of a PE32+ file."""
    if data[:2] != b"MZ":
        raise ValueError("not a PE file (no MZ header)")
    pe = struct.unpack_from("<I", data, 0x3C)[0]
    if data[pe:pe + 4] != b"PE\0\0":
        raise ValueError("not a PE file (no PE signature)")
    machine, nsections = struct.unpack_from("<HH", data, pe + 4)
    opt_size = struct.unpack_from("<H", data, pe + 20)[0]
    opt = pe + 24
    if struct.unpack_from("<H", data, opt)[0] != 0x20B:
        raise ValueError("not a PE32+ (64-bit) image")
    # Data directories 0 (exports) and 1 (imports): (RVA, size) pairs.
    export_rva = struct.unpack_from("<I", data, opt + 112)[0]
    import_rva = struct.unpack_from("<I", data, opt + 112 + 8)[0]
    sections = []
    for i in range(nsections):
        s = opt + opt_size + 40 * i
        vsize, vaddr, rsize, rptr = struct.unpack_from("<IIII", data, s + 8)
        sections.append((vaddr, max(vsize, rsize), rptr))

    def at(rva: int) -> int:
        for vaddr, size, rptr in sections:
            if vaddr <= rva < vaddr + size:
                return rptr + rva - vaddr
        raise ValueError(f"RVA {rva:#x} is in no section")

    dlls = []
    if import_rva:
        d = at(import_rva)
        while True:
            name_rva = struct.unpack_from("<I", data, d + 12)[0]
            if name_rva == 0:
                break
            n = at(name_rva)
            dlls.append(data[n:data.index(b"\0", n)].decode())
            d += 20
    exports = []
    if export_rva:
        e = at(export_rva)
        count, names_rva = struct.unpack_from("<I4xI", data, e + 24)
        for i in range(count):
            n = at(struct.unpack_from("<I", data, at(names_rva) + 4 * i)[0])
            exports.append(data[n:data.index(b"\0", n)].decode())
    return PE_MACHINES.get(machine, f"pe-machine-{machine:#x}"), dlls, exports


def macho_info(data: bytes) -> tuple[str, list[str]]:
    """(arch, LC_LOAD_DYLIB paths) of a thin 64-bit Mach-O file."""
    if struct.unpack_from("<I", data, 0)[0] != 0xFEEDFACF:
        raise ValueError("not a thin 64-bit little-endian Mach-O file")
    cpu, _sub, _ftype, ncmds, _size = struct.unpack_from("<iiIII", data, 4)
    at = 32
    dylibs = []
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, at)
        if cmd in (0xC, 0x80000018, 0x8000001F):  # LC_LOAD_DYLIB, _WEAK_, _REEXPORT_
            off = struct.unpack_from("<I", data, at + 8)[0]
            name = data[at + off:at + size].split(b"\0", 1)[0].decode()
            dylibs.append(name)
        at += size
    return MACHO_CPUS.get(cpu & 0xFFFFFFFF, f"macho-cpu-{cpu:#x}"), dylibs


# --- metadata ----------------------------------------------------------------

def check_metadata(name: str, text: str, version: str, problems: Problems) -> None:
    meta = email.parser.Parser().parsestr(text)
    if meta.get("Name", "").lower() != PACKAGE:
        problems.add(name, f"metadata Name is {meta.get('Name')!r}")
    if meta.get("Version") != version:
        problems.add(name, f"metadata Version is {meta.get('Version')!r}, expected {version!r}")
    if not (meta.get("License") or meta.get("License-Expression")):
        problems.add(name, "metadata has no License / License-Expression")
    if not meta.get("Requires-Python", "").startswith(">=3.9"):
        problems.add(name, f"metadata Requires-Python is {meta.get('Requires-Python')!r}")
    requires = meta.get_all("Requires-Dist") or []
    if not any(re.match(r"numpy\s*[>=(]", r) and "extra" not in r for r in requires):
        problems.add(name, f"metadata requires no numpy: {requires}")
    urls = meta.get_all("Project-URL") or []
    if not urls:
        problems.add(name, "metadata has no Project-URL")
    for entry in urls:
        label, _, url = entry.partition(",")
        host = urllib.parse.urlsplit(url.strip()).hostname or ""
        if not url.strip().startswith("https://") or host.endswith(RESERVED_HOSTS) or "." not in host:
            problems.add(name, f"Project-URL {label.strip()!r} is not a real https address: {url.strip()!r}")
    if meta.get("Description-Content-Type", "").split(";")[0] != "text/markdown":
        problems.add(name, "metadata long description is not markdown")
    body = meta.get_payload() or meta.get("Description") or ""
    readme = (PY_DIR.parent.parent / "README.md").read_text(encoding="utf-8")
    if readme.strip().splitlines()[0] not in body:
        problems.add(name, "metadata long description is not the package README")


# --- wheels ------------------------------------------------------------------

def check_wheel(path: Path, version: str, problems: Problems) -> None:
    name = path.name
    parts = path.stem.split("-")
    if len(parts) != 5 or parts[0] != PACKAGE or parts[1] != version:
        problems.add(name, f"file name is not {PACKAGE}-{version}-<tags>.whl")
        return
    py, abi, plat = parts[2:]
    if (py, abi) != ("cp39", "abi3"):
        problems.add(name, f"tags {py}-{abi}: expected cp39-abi3 (one wheel for Python 3.9+)")
    try:
        # A compressed tag set (`manylinux2014_x86_64.manylinux_2_17_x86_64`)
        # names one platform several ways: each must parse and agree.
        platforms = {platform_of(p) for p in plat.split(".")}
    except ValueError as e:
        problems.add(name, str(e))
        return
    if len({arch for _, arch in platforms}) != 1:
        problems.add(name, f"platform tags name several architectures: {plat}")
        return
    # The strictest glibc bound among the tags is the one to meet.
    family, arch = min(platforms, key=lambda fa: glibc_limit(fa[0]) or (99, 99))
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        info = f"{PACKAGE}-{version}.dist-info"
        wheel_tags = [
            line.split(":", 1)[1].strip()
            for line in z.read(f"{info}/WHEEL").decode().splitlines()
            if line.startswith("Tag:")
        ]
        if sorted(wheel_tags) != sorted(f"{py}-{abi}-{p}" for p in plat.split(".")):
            problems.add(name, f"WHEEL tags {wheel_tags} differ from the file name")
        check_metadata(name, z.read(f"{info}/METADATA").decode(), version, problems)

        natives = [n for n in names if re.fullmatch(rf"{PACKAGE}/_native\.[^/]*\.(so|pyd)|{PACKAGE}/_native\.(so|pyd)", n)]
        others = [n for n in names if n.endswith((".so", ".pyd", ".dll", ".dylib")) and n not in natives]
        if len(natives) != 1 or others:
            problems.add(name, f"expected exactly one native module, found {natives + others}")
            return
        native = natives[0]
        expected_suffix = ".pyd" if family == "windows" else ".abi3.so"
        if not native.endswith(expected_suffix):
            problems.add(name, f"native module {native} should end in {expected_suffix}")
        data = z.read(native)
        try:
            check_binary(name, family, arch, data, problems)
        except (ValueError, struct.error, IndexError) as e:
            problems.add(name, f"{native}: unreadable header: {e}")

        for src in sorted(PY_DIR.iterdir()):
            if src.suffix in (".py", ".pyi") or src.name == "py.typed":
                if f"{PACKAGE}/{src.name}" not in names:
                    problems.add(name, f"missing {PACKAGE}/{src.name}")
        if f"{PACKAGE}/_native.pyi" not in names:
            problems.add(name, "missing the native module's stub _native.pyi")


def check_binary(name: str, family: str, arch: str, data: bytes, problems: Problems) -> None:
    if family.startswith(("manylinux", "musllinux")):
        got, needed, glibc = elf_info(data)
        if got != arch:
            problems.add(name, f"native module is {got}, tag says {arch}")
        if family.startswith("manylinux"):
            limit = glibc_limit(family)
            if glibc is None or glibc > limit:
                problems.add(name, f"needs glibc {glibc}, tag {family} allows up to {limit}")
            bad = [n for n in needed if n not in MANYLINUX2014_LIBS and not n.startswith("ld-linux")]
        else:
            if glibc is not None:
                problems.add(name, f"musllinux module needs glibc symbols (GLIBC_{glibc})")
            # musl's loader resolves `libc.so` (what zig links against) to
            # itself, like `libc.musl-<arch>.so.1`.
            bad = [n for n in needed if not re.fullmatch(r"libc\.so|libc\.musl-\w+\.so\.1", n)]
        if bad:
            problems.add(name, f"needs shared libraries outside its tag: {bad}")
        print(f"  {name}: ELF {got}, needs {needed}, max GLIBC {glibc}")
    elif family == "windows":
        got, dlls, exports = pe_info(data)
        if got != arch:
            problems.add(name, f"native module is {got}, tag says {arch}")
        # What Python calls to import `loaderx._native`.
        if "PyInit__native" not in exports:
            problems.add(name, f"does not export PyInit__native (exports {exports})")
        bad = [d for d in dlls if d.lower() not in WINDOWS_SYSTEM_DLLS and not d.lower().startswith("api-ms-win-")]
        if bad:
            problems.add(name, f"imports DLLs Windows does not have: {bad}")
        print(f"  {name}: PE {got}, imports {dlls}, exports {exports}")
    else:
        got, dylibs = macho_info(data)
        if got != arch:
            problems.add(name, f"native module is {got}, tag says {arch}")
        bad = [d for d in dylibs if not d.startswith(MACOS_ALLOWED)]
        if bad:
            problems.add(name, f"loads libraries macOS does not have: {bad}")
        print(f"  {name}: Mach-O {got}, loads {dylibs}")


# --- sdist -------------------------------------------------------------------

def check_sdist(path: Path, version: str, problems: Problems) -> None:
    name = path.name
    top = f"{PACKAGE}-{version}"
    if name != f"{top}.tar.gz":
        problems.add(name, f"expected {top}.tar.gz")
        return
    with tarfile.open(path) as t:
        names = set(t.getnames())
        pkg = t.extractfile(f"{top}/PKG-INFO")
        if pkg is None:
            problems.add(name, "no PKG-INFO")
            return
        check_metadata(name, pkg.read().decode(), version, problems)
    need = ["pyproject.toml", "Cargo.toml", "Cargo.lock"]
    for n in need:
        if f"{top}/{n}" not in names:
            problems.add(name, f"missing {n}")
    for krate in ("loaderx-format", "loaderx-store", "loaderx-sampler", "loaderx-loader", "loaderx-py"):
        if not any(n.startswith(f"{top}/") and f"/{krate}/src/lib.rs" in n for n in names):
            problems.add(name, f"missing the sources of {krate}")
    for src in sorted(PY_DIR.iterdir()):
        if src.suffix in (".py", ".pyi") or src.name == "py.typed":
            if not any(n.endswith(f"/python/{PACKAGE}/{src.name}") for n in names):
                problems.add(name, f"missing python/{PACKAGE}/{src.name}")
    print(f"  {name}: {len(names)} members")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True, help="the version every artefact must carry")
    parser.add_argument("artefacts", nargs="+", type=Path)
    args = parser.parse_args()
    problems = Problems()
    for path in args.artefacts:
        print(f"checking {path.name}")
        if path.suffix == ".whl":
            check_wheel(path, args.version, problems)
        elif path.name.endswith(".tar.gz"):
            check_sdist(path, args.version, problems)
        else:
            problems.add(path.name, "neither a wheel nor an sdist")
    for p in problems:
        print(f"PROBLEM {p}")
    print(f"{len(args.artefacts)} artefact(s) checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
