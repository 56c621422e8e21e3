"""The release tools in `tools/`: the zig wrapper that corrects maturin's
export list for the Windows on Arm wheel, the PE export check of
`check_dist.py` that verifies it, and its metadata check."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_zig_exports_corrects_only_a_def_file_naming_the_dotted_initialiser(
    tmp_path: Path,
) -> None:
    zig = load("zig_exports")
    wrong = tmp_path / "loaderx._native.def"
    wrong.write_text("LIBRARY loaderx._native\nEXPORTS\n    PyInit_loaderx._native\n")
    fixed = tmp_path / "loaderx._native.exports.def"
    for arg, want in ((str(wrong), str(fixed)), (f"-Wl,{wrong}", f"-Wl,{fixed}")):
        fixed.unlink(missing_ok=True)
        assert zig.corrected(arg) == want
        assert fixed.read_text() == "LIBRARY loaderx._native\nEXPORTS\n    PyInit__native\n"
    assert wrong.read_text().endswith("PyInit_loaderx._native\n")  # the original is left alone
    # rustc's own export list, other arguments and missing files pass as they are.
    right = tmp_path / "list.def"
    right.write_text("EXPORTS\n    PyInit__native\n")
    for arg in (str(right), f"-Wl,{right}", "-O2", "-Wl,--gc-sections", str(tmp_path / "gone.def")):
        assert zig.corrected(arg) == arg


def pe_with_exports(names: list[str], machine: int = 0xAA64) -> bytes:
    """A minimal PE32+ image: headers, then one section holding an export
    directory that names `names` (no imports), as a linker lays it out."""
    pe, opt_size, rva, section_at = 0x40, 240, 0x1000, 0x200
    n = len(names)
    functions, name_table = 40, 40 + 4 * n
    ordinals = name_table + 4 * n
    strings = ordinals + 2 * n
    blob = bytearray(b"x.dll\0")
    pointers = []
    for name in names:
        pointers.append(rva + strings + len(blob))
        blob += name.encode() + b"\0"
    body = bytearray(strings + len(blob))
    # Characteristics, stamp, versions, DLL name RVA, ordinal base, function
    # and name counts, then the RVAs of the functions, names and ordinals.
    struct.pack_into("<IIHHIIIIIII", body, 0, 0, 0, 0, 0, rva + strings, 1, n, n,
                     rva + functions, rva + name_table, rva + ordinals)
    struct.pack_into(f"<{n}I", body, functions, *([rva] * n))  # every export at the section start
    struct.pack_into(f"<{n}I", body, name_table, *pointers)
    struct.pack_into(f"<{n}H", body, ordinals, *range(n))
    body[strings:] = blob
    image = bytearray(section_at)
    image[:2] = b"MZ"
    struct.pack_into("<I", image, 0x3C, pe)
    image[pe:pe + 4] = b"PE\0\0"
    struct.pack_into("<HHIIIHH", image, pe + 4, machine, 1, 0, 0, 0, opt_size, 0x2022)
    opt = pe + 24
    struct.pack_into("<H", image, opt, 0x20B)
    struct.pack_into("<I", image, opt + 108, 16)  # NumberOfRvaAndSizes
    struct.pack_into("<II", image, opt + 112, rva, len(body))  # exports; imports stay 0
    section = opt + opt_size
    image[section:section + 8] = b".edata\0\0"
    struct.pack_into("<IIII", image, section + 8, len(body), rva, len(body), section_at)
    return bytes(image + body)


@pytest.mark.parametrize(
    "names", [["PyInit__native"], ["PyInit_loaderx._native"], ["a", "PyInit__native"]]
)
def test_check_dist_reads_the_exports_of_a_pe_image(names: list[str]) -> None:
    check = load("check_dist")
    arch, dlls, exports = check.pe_info(pe_with_exports(names))
    assert (arch, dlls, exports) == ("aarch64", [], names)


def metadata_with_urls(urls: list[str]) -> str:
    readme = (TOOLS.parent / "README.md").read_text(encoding="utf-8")
    head = [
        "Metadata-Version: 2.4",
        "Name: loaderx",
        "Version: 1.0.0",
        "License: MIT",
        "Requires-Python: >=3.9",
        "Requires-Dist: numpy>=1.21",
        *(f"Project-URL: {u}" for u in urls),
        "Description-Content-Type: text/markdown; charset=UTF-8",
    ]
    return "\n".join(head) + "\n\n" + readme


@pytest.mark.parametrize(
    ("urls", "refused"),
    [
        (["Repository, https://codeberg.org/eoelab/loaderx"], []),
        ([], ["no Project-URL"]),
        (["Repository, https://example.invalid/loaderx"], ["Repository"]),
        (
            ["Repository, https://codeberg.org/x", "Changelog, http://codeberg.org/x/CHANGELOG.md"],
            ["Changelog"],
        ),
        (["Docs, https://docs.example.com/x", "Home, https://localhost/x"], ["Docs", "Home"]),
    ],
)
def test_check_dist_refuses_project_urls_that_are_placeholders(
    urls: list[str], refused: list[str]
) -> None:
    check = load("check_dist")
    problems = check.Problems()
    check.check_metadata("w.whl", metadata_with_urls(urls), "1.0.0", problems)
    assert len(problems) == len(refused), problems
    for problem, what in zip(problems, refused):
        assert what in problem
