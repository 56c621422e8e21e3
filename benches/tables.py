#!/usr/bin/env python3
"""Markdown tables (and the figures) of the benchmark runs, from their JSON
alone.

Five scripts measure and each keeps its run as JSON: ``compare.py`` (the
binding against NumPy and loaderx 0.5.4, with the criterion estimates of
the Rust benches under ``"criterion"``; ``docs/bench/latest.json``),
``typed.py`` (the typed containers against loaderx 2.4.0, ``"kind":
"typed"``; ``docs/bench/typed.json``), ``field.py`` (every store and
loader of the field, ``"kind": "field"``; ``docs/bench/field.json``),
``remote.py`` (stores read from S3 on loopback against the field's remote
readers, ``"kind": "remote"``; ``docs/bench/remote.json``) and
``convert.py`` (parallel conversion and collections, ``"kind":
"convert"``; ``docs/bench/convert.json``). This script turns such files
into the tables the docs show, so that every figure in
``docs/BENCHMARKS.md``, ``README.md`` and
``docs/bench/{rust,python,typed,field,remote,convert}.md`` (the full reports)
comes from one run of each::

    python3 benches/tables.py docs/bench/*.json            # print
    python3 benches/tables.py docs/bench/*.json --write    # update the docs
    python benches/tables.py docs/bench/field.json --plots docs/img   # figures (matplotlib)

The docs hold generated blocks between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->``; ``--write`` replaces each block's body with the
table called NAME (see ``compare_blocks``, ``typed_blocks``,
``field_blocks``, ``remote_blocks`` and ``convert_blocks``) and fails if a block has no table
or a table has no block, so ``--write`` takes every file. Standard library only, but for
``--plots``.

``collect_criterion(DIR)`` reads criterion's output directory
(``<target>/criterion``) into the ``"criterion"`` list; ``compare.py
--criterion-dir`` calls it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
# The generated docs: the reference, the README, and the full reports of the
# runs beside their JSON (the reference keeps their targets).
DOCS = (REPO / "docs" / "BENCHMARKS.md", REPO / "README.md",
        *(REPO / "docs" / "bench" / f"{name}.md" for name in ("rust", "python", "typed", "field", "remote", "convert")))
KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

# ----------------------------------------------------------------- markdown
#
# Two table styles: `table` pads every column (compare.py's and typed.py's
# runs), `plain_table` does not (field.py's, whose cells are long).

def fmt_time(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:.1f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_bytes_rate(per_s: float) -> str:
    return f"{per_s / GIB:.2f} GiB/s" if per_s >= GIB else f"{per_s / MIB:.0f} MiB/s"


def fmt_elems_rate(per_s: float) -> str:
    return f"{per_s / 1e9:.2f} G/s" if per_s >= 1e9 else f"{per_s / 1e6:.0f} M/s"


def fmt_ratio(r: float | None, bold: bool = False) -> str:
    if r is None:
        return "—"
    text = f"{r:.2f}x"
    return f"**{text}**" if bold else text


def table(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    right = set(range(1, len(headers))) if right is None else right
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            out.append(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]))
        return "| " + " | ".join(out) + " |"

    sep = "|" + "|".join(
        ("-" * (w + 1) + ":") if i in right else ("-" * (w + 2)) for i, w in enumerate(widths)
    ) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def fmt_rate(b: float | None) -> str:
    if b is None:
        return "–"
    return f"{b / (1 << 30):.2f} GiB/s" if b >= 1 << 30 else f"{b / MIB:.0f} MiB/s" if b >= 10 * MIB else f"{b / MIB:.1f} MiB/s"


def fmt_n(x: float | None) -> str:
    if x is None:
        return "–"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.2f} {unit}"
    return f"{x:.0f}"


def fmt_t(s: float | None) -> str:
    if s is None:
        return "–"
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def fmt_b(b: float | None) -> str:
    if b is None:
        return "–"
    if b >= 1 << 30:
        return f"{b / (1 << 30):.2f} GiB"
    return f"{b / MIB:.1f} MiB" if b >= MIB else f"{b / KIB:.0f} KiB"


def plain_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# ----------------------------------------------------------------- criterion


def collect_criterion(root: Path) -> list[dict[str, Any]]:
    """Every benchmark under criterion's output directory ``root``: its id,
    group, throughput declaration and the point estimates (ns per
    iteration) of its latest run."""
    out = []
    for bench in sorted(root.glob("**/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())
        out.append(
            {
                "id": meta["full_id"],
                "group": meta["group_id"],
                "function": meta.get("function_id"),
                "value": meta.get("value_str"),
                "throughput": meta.get("throughput"),
                "median_ns": est["median"]["point_estimate"],
                "mean_ns": est["mean"]["point_estimate"],
                "mean_ci_ns": [
                    est["mean"]["confidence_interval"]["lower_bound"],
                    est["mean"]["confidence_interval"]["upper_bound"],
                ],
            }
        )
    return out


# What each criterion group measures, on which data, and the row its ratios
# are taken against (all in the same run).
GROUPS: dict[str, tuple[str, str | None]] = {
    "gather": (
        "Store gather of 256 random 12 KiB image-like records from 4,096 "
        "(48 MiB), warm page cache. The baselines copy the same records out of "
        "memory: on one thread, and shared over the calling thread plus a pool "
        "as the store shares a gather (same thread count). lz4 does not shrink "
        "image-like records, so the store keeps them raw and reading them is a copy.",
        "memcpy-caller+pool",
    ),
    "gather-labels": (
        "Gather of 256 random `int64` labels out of 1,000,000 from a run-table "
        "store (what `Dense.create` makes), against a copy loop over the same "
        "bytes in memory: the gap is the engine's cost per call (checks, "
        "lookups, the lock), before the binding's.",
        "copy-loop",
    ),
    "decode-1-core": (
        "Per-core decode, one thread, 256 records of 12 KiB, per data kind "
        "(`codec/data`: image-like, token ids, text-like). A record a codec "
        "does not shrink is stored raw, and its decode is a copy.",
        None,
    ),
    "gather-small": (
        "Small gathers (`codec/records`) from a cache-hot store of image-like "
        "records, around the serial/parallel threshold.",
        None,
    ),
    "append": (
        "Append of 1,024 image-like 12 KiB records to a fresh store (placement "
        "and writes, no fsync).",
        None,
    ),
    "open-1M-records": ("Opening a store of 1,000,000 records, read-only.", None),
    "loader-raw": (
        "Loader end to end (4 workers, prefetch 4, batches recycled) against "
        "calling `store.gather` in a loop at the sampler's indices: 20,000 "
        "image-like 12 KiB records stored raw, batch 256, IID.",
        "direct",
    ),
    "loader-flate": (
        "The same, records stored with DEFLATE (decode-bound).",
        "direct",
    ),
}


def rate(bench: dict[str, Any]) -> str:
    tp = bench.get("throughput") or {}
    per_s = 1e9 / bench["median_ns"]
    if "Bytes" in tp:
        return fmt_bytes_rate(tp["Bytes"] * per_s)
    if "BytesDecimal" in tp:
        return fmt_bytes_rate(tp["BytesDecimal"] * per_s)
    if "Elements" in tp:
        return fmt_elems_rate(tp["Elements"] * per_s)
    return "—"


def bench_name(bench: dict[str, Any]) -> str:
    """The id within its group (criterion's full id minus the group)."""
    prefix = bench["group"] + "/"
    return bench["id"][len(prefix) :] if bench["id"].startswith(prefix) else bench["id"]


def criterion_table(benches: list[dict[str, Any]], group: str) -> str:
    rows = [b for b in benches if b["group"] == group]
    if not rows:
        return f"(no `{group}` results in this run)"
    caption, baseline = GROUPS.get(group, ("", None))
    base = next((b for b in rows if bench_name(b) == baseline), None)
    headers = ["bench", "median time", "throughput"]
    if base is not None:
        headers.append(f"vs {baseline}")
    body = []
    for b in rows:
        cells = [bench_name(b), fmt_time(b["median_ns"] / 1e9), rate(b)]
        if base is not None:
            cells.append(fmt_ratio(base["median_ns"] / b["median_ns"]))
        body.append(cells)
    text = table(headers, body)
    return f"{caption}\n\n{text}" if caption else text


def sampler_criterion_table(benches: list[dict[str, Any]]) -> str:
    rows = [b for b in benches if b["group"].startswith("sampler")]
    if not rows:
        return "(no sampler results in this run)"
    body = [[b["id"], fmt_time(b["median_ns"] / 1e9), rate(b)] for b in rows]
    return table(["bench", "median time", "indices"], body)


# The Rust-side targets: (description, measured value from the run's
# criterion estimates by id, goal, whether the value must be at least the goal
# (else at most), unit). A target whose benches are missing from the run is
# reported as such, never as met.
def per_s(benches: dict[str, dict[str, Any]], bench_id: str) -> float | None:
    b = benches.get(bench_id)
    if b is None:
        return None
    tp = b.get("throughput") or {}
    amount = tp.get("Bytes") or tp.get("BytesDecimal") or tp.get("Elements") or 1
    return amount * 1e9 / b["median_ns"]


def ratio(benches: dict[str, dict[str, Any]], num: str, den: str) -> float | None:
    a, b = benches.get(num), benches.get(den)
    return None if a is None or b is None else b["median_ns"] / a["median_ns"]


def rust_targets(benches_list: list[dict[str, Any]]) -> list[tuple[str, float | None, float, bool, str]]:
    b = {x["id"]: x for x in benches_list}
    def mib(v: float | None) -> float | None:
        return None if v is None else v / MIB

    def mega(v: float | None) -> float | None:
        return None if v is None else v / 1e6

    open_ns = b.get("open-1M-records", {}).get("median_ns")
    labels, copy = b.get("gather-labels/store"), b.get("gather-labels/copy-loop")
    labels_over = None if labels is None or copy is None else (labels["median_ns"] - copy["median_ns"]) / 1e3
    rows: list[tuple[str, float | None, float, bool, str]] = [
        ("raw gather vs memcpy over the same threads", ratio(b, "gather/raw", "gather/memcpy-caller+pool"), 0.70, True, "x"),
    ]
    for data in ("image", "tokens"):
        rows.append((f"DEFLATE decode per core, {data} data", mib(per_s(b, f"decode-1-core/flate/{data}")), 300, True, "MiB/s"))
    for data in ("image", "tokens"):
        rows.append((f"zstd decode per core, {data} data", mib(per_s(b, f"decode-1-core/zstd/{data}")), 800, True, "MiB/s"))
    rows += [
        ("lz4 vs zstd decode per core, text data (the data lz4 shrinks)", ratio(b, "decode-1-core/lz4/text", "decode-1-core/zstd/text"), 1.0, True, "x"),
        ("open a store of 1M records", None if open_ns is None else open_ns / 1e6, 5.0, False, "ms"),
        ("256 labels: the engine's time above a copy loop", labels_over, 1.0, False, "µs"),
        ("sampler iid, batch 8192", mega(per_s(b, "sampler_fill/iid/8192")), 1000, True, "M/s"),
        ("sampler shuffle, batch 8192", mega(per_s(b, "sampler_fill/shuffle/8192")), 300, True, "M/s"),
        ("loader vs direct gather loop, raw", ratio(b, "loader-raw/loader", "loader-raw/direct"), 0.90, True, "x"),
        ("loader vs direct gather loop, flate", ratio(b, "loader-flate/loader", "loader-flate/direct"), 0.90, True, "x"),
    ]
    return rows


def rust_targets_table(benches: list[dict[str, Any]]) -> str:
    body = []
    for name, value, goal, at_least, unit in rust_targets(benches):
        if value is None:
            measured, result = "not in this run", "**not measured**"
        else:
            if unit == "x":
                measured = f"{value:.2f}x"
            else:
                measured = f"{value:.3f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
            met = value >= goal if at_least else value < goal
            result = "met" if met else "**missed**"
        goal_text = f"{'≥' if at_least else '<'} {goal:g}{unit if unit == 'x' else ' ' + unit}"
        body.append([name, measured, goal_text, result])
    return table(["target", "measured", "goal", "result"], body, right={1, 2})


# ----------------------------------------------------------------- compare.py


def machine_line(m: dict[str, Any]) -> str:
    return (
        f"machine: {m['nproc']} CPUs (nproc), {m['cpu_model']}, {m['system']}; "
        f"Python {m['python']}, numpy {m['numpy']}, loaderx {m['loaderx']}; "
        f"1-min load at start {m.get('load_1min_start', m.get('load_1min'))}, at end {m.get('load_1min_end', '?')}"
    )


def name_cell(row: dict[str, Any]) -> str:
    """A row's name, in bold when it is ours."""
    return f"**{row['name']}**" if row["impl"] == "ours" else row["name"]


def sampler_table(rows: list[dict[str, Any]]) -> str:
    body = [
        [name_cell(r), str(r["batch"]), fmt_time(r["per_batch_s"]), f"{r['indices_per_s'] / 1e6:.0f} M/s",
         fmt_ratio(r["vs_default_rng"], bold=r["impl"] == "ours")]
        for r in rows
    ]
    return table(["sampler", "batch", "per batch", "indices", "vs default_rng"], body)


def store_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        label = r["name"] if r["impl"] != "original" else f"{r['name']} (0.5.4)"
        body.append(
            [
                label,
                "—" if r["write_mib_s"] is None else f"{r['write_mib_s']:.0f} MiB/s",
                f"{r['gather_mib_s']:.0f} MiB/s",
                fmt_time(r["per_batch_s"]),
                fmt_ratio(r["gather_vs_npy"], bold=r["name"] == "loaderx-raw" and r["impl"] == "ours"),
                f"{r['on_disk_bytes'] / MIB:.0f} MiB",
                f"{r['size_ratio']:.2f}x",
            ]
        )
    return table(["store", "write", "gather", "per batch", "gather vs npy", "on disk", "ratio"], body)


def loader_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        ours = r["impl"] == "ours"
        body.append(
            [
                name_cell(r),
                f"{r['batches_per_s']:.1f}",
                fmt_time(r["per_batch_s"]),
                f"{r['samples_per_s']:,.0f}",
                f"{r['mib_per_s']:.0f} MiB/s",
                fmt_ratio(r.get("vs_original"), bold=ours),
            ]
        )
    return table(["loader", "batches/s", "per batch", "samples/s", "throughput", "vs 0.5.4"], body)


def targets_table(rows: list[dict[str, Any]]) -> str:
    body = [
        [
            r["target"],
            f"{r['measured']:.2f}x",
            f"{'>' if r['strict'] else '≥'} {r['goal']:.1f}x",
            "met" if r["met"] else "**missed**",
        ]
        for r in rows
    ]
    return table(["target", "measured", "goal", "result"], body, right={1, 2})


def compare_report(result: dict[str, Any], targets: bool = True) -> str:
    """The Python-side comparison of a ``compare.py`` run, as markdown."""
    w = result["workload"]
    parts = [machine_line(result["machine"])]
    if "original_machine" in result:
        m = result["original_machine"]
        parts[0] += f" (0.5.4 side: Python {m['python']}, numpy {m['numpy']})"
    if result.get("smoke"):
        parts[0] += " — SMOKE RUN: tiny data, figures mean nothing"
    if "sampler" in result:
        parts += [
            "",
            f"**Sampler** — IID batches over {w['sampler_space']:,} indices "
            "(median of interleaved rounds; 0.5.4's ratio is against default_rng in its own process)",
            "",
            sampler_table(result["sampler"]),
        ]
    if "store" in result:
        dropped = {
            "dropped": "page cache dropped before each write",
            "not permitted": "page cache NOT dropped before writes (not permitted here)",
            "not tried": "page cache not dropped (smoke run)",
        }.get(result.get("page_cache_before_writes", ""), "page cache state unknown")
        parts += [
            "",
            f"**Store** — {w['records']:,} image-like records × {w['record_bytes'] // 1024} KiB "
            f"uint8{tuple(w['shape'])}, gather of {w['gather_batch']} random indices × "
            f"{w['gather_batches']}, warm cache; writes interleaved round by round, {dropped}, "
            "each ending in fsync (on disk = allocated blocks; ratio = logical / on disk)",
            "",
            store_table(result["store"]),
        ]
    if "loader" in result:
        parts += [
            "",
            f"**Loader** — DataLoader end to end over the image-like records, batch "
            f"{w['loader_batch']}, {w['loader_workers']} workers, IID, identity transform, "
            f"{w['loader_measure']} batches after {w['loader_warmup']} warm-up, batch contents "
            "checked against direct reads (median of rounds)",
            "",
            loader_table(result["loader"]),
        ]
    if targets and result.get("targets"):
        parts += ["", "**Targets**", "", targets_table(result["targets"])]
    return "\n".join(parts)


def summary(result: dict[str, Any]) -> str:
    """The README's bullet list: the headline ratios of the run."""
    lines = []
    for r in result.get("sampler", []):
        if r["impl"] == "ours" and r["batch"] == 256:
            lines.append(
                f"* `Sampler`, IID batch of 256: **{r['vs_default_rng']:.1f}×** the speed of "
                "NumPy's `default_rng().integers`."
            )
    for r in result.get("store", []):
        if r["impl"] == "ours" and r["name"] == "loaderx-raw" and r["gather_vs_npy"]:
            lines.append(
                f"* `Dataset.__getitems__`, {result['workload']['gather_batch']} random 12 KiB raw "
                f"image-like records: **{r['gather_vs_npy']:.2f}×** the speed of fancy-indexing a "
                "memory-mapped `.npy`."
            )
    benches = result.get("criterion", [])
    by_id = {b["id"]: b for b in benches}
    raw, base = by_id.get("gather/raw"), by_id.get("gather/memcpy-caller+pool")
    if raw and base:
        lines.append(
            f"* Raw gathers (Rust) run at **{base['median_ns'] / raw['median_ns']:.0%}** of a `memcpy` "
            "of the same records over the same threads."
        )
    loader = [r for r in result.get("loader", []) if r["impl"] == "ours" and r.get("vs_original")]
    if loader:
        parts = " and ".join(f"**{r['vs_original']:.2f}×** ({r['codec']})" for r in loader)
        lines.append(f"* `DataLoader`: {parts} the batches/s of the original loaderx 0.5.4 on the same data.")
    decode = [b for b in benches if b["group"] == "decode-1-core"]
    if decode:
        per = ", ".join(f"{bench_name(b)} {rate(b)}" for b in decode)
        lines.append(f"* Per-core decode (`codec/data`, MiB of output per second): {per}.")
    if not lines:
        return "(this run has none of the summary figures)"
    return "\n".join(lines)


def compare_blocks(result: dict[str, Any]) -> dict[str, str]:
    """Every generated block of the docs, by name."""
    benches = result.get("criterion", [])
    return {
        "machine": machine_line(result["machine"]),
        "gather": criterion_table(benches, "gather"),
        "decode": criterion_table(benches, "decode-1-core"),
        "gather-small": criterion_table(benches, "gather-small"),
        "gather-labels": criterion_table(benches, "gather-labels"),
        "append": criterion_table(benches, "append"),
        "open": criterion_table(benches, "open-1M-records"),
        "sampler": sampler_criterion_table(benches),
        "loader": criterion_table(benches, "loader-raw") + "\n\n" + criterion_table(benches, "loader-flate"),
        "rust-targets": rust_targets_table(benches),
        "python": compare_report(result, targets=False),
        "python-targets": targets_table(result["targets"]) if result.get("targets") else "(no targets in this run)",
        "summary": summary(result),
    }


# ----------------------------------------------------------------- typed.py


def typed_contenders_line(result: dict[str, Any]) -> str:
    c = result["contenders"]
    ours = c["ours"]
    text = f"ours: loaderx {ours['loaderx']} (Python {ours['python']}, numpy {ours['numpy']})"
    if "original" in c:
        o = c["original"]
        text += f"; original: loaderx {o['loaderx']} from PyPI (Python {o['python']}, numpy {o['numpy']})"
    else:
        text += f"; **loaderx 2.4.0 MISSING** ({result.get('original_missing')}): no side-by-side figures"
    if "original28" in c:
        o = c["original28"]
        text += (f"; original 2.8: loaderx {o['loaderx']} from PyPI (Python {o['python']}, numpy "
                 f"{o['numpy']}), against ours through the 2.8 API")
    elif "ours28" in c:
        text += (f"; **loaderx 2.8.19 MISSING** ({result.get('original28_missing')}): the 2.8 API rows "
                 "have no side-by-side figures")
    if result.get("smoke"):
        text += " — SMOKE RUN: tiny data, figures mean nothing"
    return text


def impl_label(result: dict[str, Any], impl: str) -> str:
    c = result["contenders"].get(impl)
    if not c:
        return impl
    return f"loaderx {c['loaderx']}" + (" (2.8 API)" if impl.endswith("28") else "")


#: The contender each of ours is compared with in the ``vs`` columns:
#: the 2.x API with 2.4.0, the 2.8 API with 2.8.19.
BASELINES = {"ours": "original", "ours28": "original28"}


def against_original(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Callable[[str], str]]]:
    """Each row with its ``vs original`` cell maker: ``vs(key)`` is our
    row's ``key`` over that of the original's row of the same name (2.4.0
    for the 2.x API, 2.8.19 for the 2.8 API), in bold ("—" on the
    originals' own rows)."""
    base = {(r["impl"], r["name"]): r for r in rows if r["impl"] not in BASELINES}

    def maker(r: dict[str, Any]) -> Callable[[str], str]:
        if r["impl"] not in BASELINES:
            return lambda _key: "—"
        b = base.get((BASELINES[r["impl"]], r["name"]))
        return lambda key: fmt_ratio(None if b is None else r[key] / b[key], bold=True)

    return [(r, maker(r)) for r in rows]


def typed_gather_table(result: dict[str, Any]) -> str:
    body = [
        [
            name_cell(r),
            impl_label(result, r["impl"]),
            fmt_time(r["per_batch_s"]),
            f"{fmt_time(min(r['rounds_s']))} – {fmt_time(max(r['rounds_s']))}",
            f"{r['records_per_s']:,.0f}",
            f"{r['mib_s']:,.0f} MiB/s",
            vs("records_per_s"),
        ]
        for r, vs in against_original(result.get("gathers", []))
    ]
    return table(
        ["gather", "loaderx", "per batch", "rounds (min – max)", "records/s", "throughput", "vs original"], body
    )


def typed_write_table(result: dict[str, Any]) -> str:
    body = []
    for r, vs in against_original(result.get("writes", [])):
        until = [f"{r[f'{when}_mib_s']:.0f} MiB/s" for when in ("close", "durable")]
        name, data = r["name"].replace("-", " "), f"{r['logical_bytes'] / MIB:.0f} MiB"
        body.append([name, impl_label(result, r["impl"]), data, *until, vs("close_mib_s"), vs("durable_mib_s")])
    return table(
        ["write", "loaderx", "data", "until close", "until durable", "vs original (close)",
         "vs original (durable)"],
        body,
    )


def typed_store_table(result: dict[str, Any]) -> str:
    body = []
    for r in result.get("stores", []):
        body.append(
            [
                r["name"].replace("-", " "),
                impl_label(result, r["impl"]),
                f"{r['logical_bytes'] / MIB:.1f} MiB",
                f"{r['on_disk_bytes'] / MIB:.1f} MiB",
                f"{r['logical_bytes'] / r['on_disk_bytes']:.2f}x",
                f"{r['dict_len']:,} B" if "dict_len" in r else "—",
            ]
        )
    return table(["store", "loaderx", "data", "on disk", "ratio", "dictionary"], body)


def typed_open_table(result: dict[str, Any]) -> str:
    o = result.get("open")
    if not o:
        return "(no open measurement in this run)"
    cold = o.get("cold")
    body = [
        [
            f"{o['records']:,}",
            fmt_time(o["build_s"]),
            f"{o['store_bytes'] / MIB:,.0f} MiB",
            fmt_time(o["open_s"]),
            fmt_time(cold["open_s"]) if cold else "—",
            f"{o['rss_added'] / MIB:.2f} MiB",
        ]
    ]
    return table(["records", "built in (once)", "on disk", "open (warm)", "open (cold cache)", "RSS added"], body)


def typed_targets_table(result: dict[str, Any]) -> str:
    body = []
    for t in result.get("targets", []):
        unit, goal, value = t["unit"], t["goal"], t["measured"]
        sign = "≥" if t["at_least"] else ("<" if unit in ("ms", "MiB", "x") else "≤")

        def show(v: float) -> str:
            if unit == "%":
                return f"{v * 100:+.1f}%"
            if unit == "x":
                return f"{v:.2f}x"
            return f"{v:.3f} {unit}" if v < 10 else f"{v:,.0f} {unit}"

        goal_text = f"{sign} {goal * 100:.0f}%" if unit == "%" else f"{sign} {goal:g}{unit if unit == 'x' else ' ' + unit}"
        if value is None:
            body.append([t["target"], "—", goal_text, f"**not measured** ({t.get('not_measured') or 'not in this run'})"])
            continue
        if unit == "%":
            margin = f"{(goal - value) * 100:+.1f} pts"
        elif t["at_least"]:
            margin = f"{value / goal - 1:+.0%}"
        else:
            margin = f"{1 - value / goal:+.0%}"
        verdict = "met" if t["met"] else "**missed**"
        body.append([t["target"], show(value), goal_text, f"{verdict} ({margin})"])
    return table(["target", "measured", "goal", "result (margin)"], body, right={1, 2})


def typed_report(result: dict[str, Any]) -> str:
    """The typed-container comparison of a ``typed.py`` run, as markdown."""
    w = result["workload"]
    dropped = {
        "dropped": "page cache dropped before each write",
        "not permitted": "page cache NOT dropped before writes (not permitted here)",
        "not tried": "page cache not dropped (smoke run)",
    }.get(result.get("page_cache_before_writes", ""), "page cache state unknown")
    lo, hi = w["token_range"]
    return "\n".join(
        [
            machine_line(result["machine"]),
            "",
            typed_contenders_line(result),
            "",
            f"**Gathers** — {w['gather_batch']} random indices × {w['gather_batches']} batches per round, "
            f"median of {w['rounds']} rounds, contenders interleaved; warm page cache, every record "
            f"read once first, a batch checked against the generated data. Images: "
            f"{w['images']:,} × uint8{tuple(w['image_shape'])} ({w['image_bytes'] // 1024} KiB); tokens: "
            f"{w['tokens']:,} int32 sequences of {lo}–{hi} ids (median {w['token_median']}, Zipf "
            f"over {w['token_vocab']:,}). `vs original` is records/s against the row of the same name of "
            f"2.4.0 (for ours through the 2.x API) or 2.8.19 (for ours through the 2.8 API).",
            "",
            typed_gather_table(result),
            "",
            f"**Writes** — `create` + `append` + `close` of the whole data set (tokens appended "
            f"{w['token_append']:,} records per call), {dropped}; until `close` returns, and until an "
            f"`os.sync()` after it returns (median of {w['write_rounds']} interleaved rounds; "
            "throughput is of the data's own bytes)",
            "",
            typed_write_table(result),
            "",
            *([f"**First compressed write of a process** — in a fresh process per round and contender: "
               f"a raw store of the images written first (untimed), "
               f"{'the page cache dropped' if all(r.get('dropped') for r in result['first_writes']) else 'the page cache NOT dropped'}, then a `zstd` "
               f"store of the same images (`create` + one `append` + `close`; `DenseWriter` for the 2.8 API) "
               f"until an `os.sync()` after it (median of {w['write_rounds']} interleaved rounds)",
               "", typed_first_write_table(result), ""] if result.get("first_writes") else []),
            "**On disk** — allocated blocks of each store (ratio = data bytes / on disk); "
            "`zstd_dict` with a dictionary trained by each package's own `train_dict` on the token records",
            "",
            typed_store_table(result),
            "",
            f"**Open** — `Dense.open` of a format-v2 store of one-byte records (ours only), in a fresh "
            f"process per round after opening a small store (the library's one-time costs); median of "
            f"{w['open_rounds']} rounds with the store's pages cached, and once after dropping the page cache",
            "",
            typed_open_table(result),
            "",
            "**Targets**",
            "",
            typed_targets_table(result),
        ]
    )


def typed_first_write_table(result: dict[str, Any]) -> str:
    body = []
    for r in result.get("first_writes", []):
        label = impl_label(result, r["impl"])
        rounds = ", ".join(f"{s['durable_s']:.2f}" for s in r["rounds"])
        body.append([label, f"{r['durable_s']:.3f} s", f"{r['durable_mib_s']:,.0f} MiB/s", rounds])
    return table(["contender", "until durable", "throughput", "rounds (s)"], body, right={1, 2})


def typed_blocks(result: dict[str, Any]) -> dict[str, str]:
    """The generated blocks of a ``typed.py`` run."""
    return {"typed": typed_report(result), "typed-targets": typed_targets_table(result)}


# ----------------------------------------------------------------- field.py


# How the field tables name each contender of the bench venv ...
FIELD_LABELS = {
    "npy": "NumPy mmap .npy",
    "h5py": "HDF5 (h5py)",
    "lmdb": "LMDB",
    "arrow": "Arrow IPC",
    "parquet": "Parquet (256/group)",
    "arrayrecord": "ArrayRecord (group_size:1)",
    "lance": "Lance (take)",
    "memory": "in-memory ceiling",
}
# ... and every contender, by (worker, contender).
LABELS = {
    ("ours", "ours"): "**loaderx** (this tree)",
    ("ours", "ours-flat"): "**loaderx** append_flat",
    ("v054", "v054"): "loaderx 0.5.4",
    ("v240", "v240"): "loaderx 2.4.0",
    ("ours", "ours28"): "**loaderx** 2.8 API",
    ("v2819", "v2819"): "loaderx 2.8.19",
    **{("field", name): label for name, label in FIELD_LABELS.items()},
}
COMPRESSED = {"flate", "zstd", "lz4", "gzip"}


def contender_label(row: dict[str, Any]) -> str:
    return LABELS.get((row["impl"], row["contender"]), row["contender"])


def store_rows(result: dict[str, Any], workload: str) -> list[dict[str, Any]]:
    out = []
    wl = result["workloads"][workload]
    for r in result.get("stores", []):
        if r["workload"] != workload:
            continue
        r = dict(r)
        if "gather_batch_s" in r:
            r["gather_bps"] = r["batch_bytes"] / r["gather_batch_s"]
            r["records_s"] = r.get("batch_records", 256) / r["gather_batch_s"]
        if "write_durable_s" in r:
            r["write_bps"] = wl["logical_bytes"] / r["write_durable_s"]
            r["write_close_bps"] = wl["logical_bytes"] / r["write_close_s"]
        out.append(r)
    return out


def field_store_table(result: dict[str, Any], workload: str) -> str:
    rows = store_rows(result, workload)
    wl = result["workloads"][workload]
    ceiling = max((r for r in rows if r["contender"] == "memory" and "gather_bps" in r),
                  key=lambda r: r["gather_bps"], default=None)
    rows.sort(key=lambda r: -r.get("gather_bps", 0))
    body = []
    for r in rows:
        disk = r.get("on_disk_bytes")
        ratio = f"{wl['logical_bytes'] / disk:.2f}" if disk else "–"
        of_ceiling = f"{r['gather_bps'] / ceiling['gather_bps']:.2f}" if ceiling and "gather_bps" in r else "–"
        name = contender_label(r)
        if r.get("error"):
            name += " (failed: " + r["error"][:120].replace("|", "/") + ")"
        body.append([name, r["codec"], fmt_rate(r.get("write_bps")), fmt_rate(r.get("gather_bps")),
                     fmt_n(r.get("records_s")), fmt_t(r.get("gather_p95_s")), fmt_b(disk), ratio, of_ceiling])
    for s in result.get("skipped", []):
        if s["workload"] == workload:
            body.append([LABELS.get((s["impl"], s["contender"]), s["contender"]), s["codec"],
                         f"not measured: {s['skip']}", "", "", "", "", "", ""])
    return plain_table(["contender", "codec", "write (durable)", "gather", "records/s", "p95 batch",
                  "on disk", "logical/disk", "× ceiling"], body)


def field_loader_table(result: dict[str, Any]) -> str:
    rows = result.get("loaders", [])
    body = []
    for r in sorted(rows, key=lambda r: -r.get("batches_per_s", 0)):
        name = "**loaderx** (this tree)" if r["name"] == "loaderx" else r["name"]
        if "missing" in r:
            body.append([name, r["codec"], "missing: " + r["missing"][:160].replace("|", "/"), "", "", "", "", ""])
            continue
        body.append([name, r["codec"], f"{r['batches_per_s']:.1f}", fmt_t(r["p95_s"]), fmt_b(r["peak_pss"]),
                     fmt_b(r["peak_pss"] - r["pss_before"]), fmt_b(r["peak_rss"]), str(r["procs"])])
    return plain_table(["loader", "codec", "batches/s", "p95 next()", "peak PSS (tree)", "PSS added by loader",
                  "peak RSS (tree, summed)", "processes"], body)


# ----------------------------------------------------------------- targets


def field_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue #14's targets, each measured (or not, with the reason)."""
    out: list[dict[str, Any]] = []
    by: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for wname in result.get("workloads", {}):
        for r in store_rows(result, wname):
            by[(wname, r["impl"], r["contender"], r["codec"])] = r

    def get(w: str, impl: str, contender: str, codec: str, key: str) -> float | None:
        r = by.get((w, impl, contender, codec))
        return None if r is None else r.get(key)

    def add(name: str, ours: float | None, other: float | None, goal: float, why: str = "",
            at_most: bool = False) -> None:
        m = None if ours is None or other is None or other == 0 else ours / other
        out.append({"target": name, "measured": m, "goal": goal, "at_most": at_most,
                    "met": None if m is None else (m <= goal if at_most else m >= goal),
                    "note": why if m is None else ""})

    g = "gather_bps"
    add("dense raw gather (img224) vs NumPy mmap", get("img224", "ours", "ours", "raw", g),
        get("img224", "field", "npy", "raw", g), 1.5, "a contender missing")
    add("dense raw gather (img224) vs in-memory ceiling", get("img224", "ours", "ours", "raw", g),
        max((get("img224", "field", "memory", c, g) or 0 for c in ("raw", "cores", "1thread")), default=0) or None,
        0.8, "ceiling missing")
    add("dense raw gather (img224) vs loaderx 2.4.0", get("img224", "ours", "ours", "raw", g),
        get("img224", "v240", "v240", "raw", g), 1.5, "2.4.0 missing")
    add("flate gather (img224) vs loaderx 0.5.4 flate", get("img224", "ours", "ours", "flate", g),
        get("img224", "v054", "v054", "flate", g), 3.0, "0.5.4 missing")
    add("zstd gather (img224) vs loaderx 2.4.0 zstd", get("img224", "ours", "ours", "zstd", g),
        get("img224", "v240", "v240", "zstd", g), 1.5, "2.4.0 missing")
    for wname in ("img224", "img64", "photos", "tokens"):
        best_other = max((r.get(g, 0) for (w, impl, c, codec), r in by.items()
                          if w == wname and impl == "field" and codec in COMPRESSED), default=None)
        best_ours = max((r.get(g, 0) for (w, impl, c, codec), r in by.items()
                         if w == wname and impl == "ours" and codec in COMPRESSED), default=None)
        add(f"best compressed gather ({wname}) vs best other compressed store", best_ours, best_other or None, 1.0,
            "no other compressed contender")
    rs = "records_s"
    for codec in ("raw", "zstd"):
        add(f"ragged tokens {codec} records/s vs loaderx 2.4.0", get("tokens", "ours", "ours", codec, rs),
            get("tokens", "v240", "v240", codec, rs), 2.0, "2.4.0 missing")
    best = max((r.get(rs, 0) for (w, impl, c, codec), r in by.items()
                if w == "tokens" and impl in ("field", "v240") and c != "memory"), default=None)
    add("ragged tokens raw records/s vs every other store", get("tokens", "ours", "ours", "raw", rs), best or None, 1.0)
    # Small records (issue 43): 1.5x NumPy's memory map, and their bytes on
    # disk (a run table: at most 5% over the labels, 2% over 2 KiB blocks).
    for wname, most in (("labels", 1.05), ("tok512", 1.02)):
        add(f"small records ({wname}) raw records/s vs NumPy mmap", get(wname, "ours", "ours", "raw", rs),
            get(wname, "field", "npy", "raw", rs), 1.5, "a contender missing")
        logical = result.get("workloads", {}).get(wname, {}).get("logical_bytes")
        add(f"small records ({wname}) raw on disk / their bytes", get(wname, "ours", "ours", "raw", "on_disk_bytes"),
            logical, most, "not measured", at_most=True)
    # The 2.8 API against loaderx 2.8.19 (issue 42): gathers at least 2x,
    # no more disk, in every workload and codec both measured; the row shows
    # the worst of them (every pair is in the store tables).
    gathers, disks = [], []
    for wname in result.get("workloads", {}):
        for codec in ("raw", "zstd"):
            theirs, ours28 = by.get((wname, "v2819", "v2819", codec)), by.get((wname, "ours", "ours28", codec))
            if theirs is None or ours28 is None:
                continue
            if theirs.get(g) and ours28.get(g):
                gathers.append((ours28[g] / theirs[g], f"{wname} {codec}", ours28[g], theirs[g]))
            if theirs.get("on_disk_bytes") and ours28.get("on_disk_bytes"):
                disks.append((ours28["on_disk_bytes"] / theirs["on_disk_bytes"], f"{wname} {codec}",
                              ours28["on_disk_bytes"], theirs["on_disk_bytes"]))
    worst = min(gathers, default=None)
    add("2.8 API gather vs loaderx 2.8.19, slowest workload" + (f" ({worst[1]})" if worst else ""),
        worst[2] if worst else None, worst[3] if worst else None, 2.0, "2.8.19 or the 2.8 API missing")
    worst = max(disks, default=None)
    add("2.8 API on disk / loaderx 2.8.19's, largest workload" + (f" ({worst[1]})" if worst else ""),
        worst[2] if worst else None, worst[3] if worst else None, 1.0, "2.8.19 or the 2.8 API missing",
        at_most=True)
    wb = "write_bps"
    for wname in ("img224", "tokens"):
        for codec in ("raw", "zstd"):
            add(f"write {wname} {codec} (durable) vs loaderx 2.4.0", get(wname, "ours", "ours", codec, wb),
                get(wname, "v240", "v240", codec, wb), 1.0, "2.4.0 missing")
        best = max((r.get(wb, 0) for (w, impl, c, codec), r in by.items()
                    if w == wname and impl == "field" and r.get(wb)), default=None)
        add(f"fastest write {wname} (any codec) vs every other store", max(
            (r.get(wb, 0) for (w, impl, c, codec), r in by.items() if w == wname and impl == "ours"), default=None),
            best or None, 1.0)
    loaders = {(r["name"], r["codec"]): r for r in result.get("loaders", []) if "missing" not in r}

    def lrate(name: str, codec: str) -> float | None:
        r = loaders.get((name, codec))
        return None if r is None else r["batches_per_s"]

    for codec, old in (("raw", "raw"), ("zstd", "flate")):
        add(f"loader {codec} vs loaderx 2.4.0 {codec}", lrate("loaderx", codec), lrate("loaderx 2.4.0", codec), 2.0,
            "a loader missing")
        add(f"loader {codec} vs loaderx 0.5.4 {old}", lrate("loaderx", codec), lrate("loaderx 0.5.4", old), 1.5,
            "a loader missing")
    for codec in ("raw", "zstd"):
        add(f"named-stream loader {codec} vs the two-stream call (loaderx pair)", lrate("loaderx", codec),
            lrate("loaderx pair", codec), 1.0, "a loader missing")
    for codec in ("raw", "zstd"):
        add(f"2.8 API Loader {codec} vs loaderx 2.8.19's", lrate("loaderx 2.8 API", codec),
            lrate("loaderx 2.8.19", codec), 2.0, "2.8.19's or the 2.8 API's loader missing")
    for other in ("torch fork", "torch spawn", "grain", "jax-dataloader"):
        add(f"loader raw vs {other}", lrate("loaderx", "raw"), lrate(other, "raw"), 1.0, f"{other} missing")
    ours = loaders.get(("loaderx", "raw"))
    if ours:
        others = [r["peak_pss"] for k, r in loaders.items()
                  if k[1] == "raw" and k[0] not in ("loaderx", "loaderx pair", "loaderx 2.8 API")]
        add("loader raw: lowest peak PSS (lowest other / ours)", min(others) if others else None,
            ours["peak_pss"], 1.0, "no other loader")
        batch = result["workloads"]["img224"]["median_record_bytes"] * 256
        bound = (4 + 4) * batch + 100 * MIB
        add(f"loader raw: peak PSS under (prefetch + workers) × batch + 100 MiB = {fmt_b(bound)} (bound / ours)",
            float(bound), ours["peak_pss"], 1.0)
    return out


def field_targets_table(result: dict[str, Any]) -> str:
    body = []
    for t in field_targets(result):
        m = t["measured"]
        met = "–" if t["met"] is None else ("yes" if t["met"] else "**no**")
        goal = f"{'≤' if t.get('at_most') else '≥'} {t['goal']:g}×"
        body.append([t["target"], "not measured: " + t["note"] if m is None else f"{m:.3f}×" if t.get("at_most")
                     else f"{m:.2f}×", goal, met])
    return plain_table(["target (issues 14, 42, 43)", "measured", "goal", "met"], body)


# ----------------------------------------------------------------- report


def round_min(cfg: dict[str, Any]) -> str:
    """A round's least duration, as the machine line words it."""
    least = cfg.get("round_min_s")
    return f" and {least * 1000:.0f} ms" if least else ""


def field_machine_line(result: dict[str, Any]) -> str:
    m = result["machine"]
    cfg = result.get("config", {})
    scale = "smoke run (figures mean nothing)" if result.get("smoke") else f"scale {cfg.get('scale')}"
    mem = f", {m['memory_bytes'] / (1 << 30):.0f} GiB" if m.get("memory_bytes") else ""
    return (f"{m['cpu_model']}, {m['nproc']} cores{mem}, {m['system']}, Python {m['python']}; "
            f"load {m.get('load_1min_start')} → {m.get('load_1min_end')}; {scale}; "
            f"{cfg.get('rounds')} gather rounds, each at least {cfg.get('gather_batches')} batches"
            f"{round_min(cfg)}, "
            f"{cfg.get('write_rounds')} write rounds, {cfg.get('loader_rounds')} loader rounds × "
            f"{cfg.get('loader_batches')} batches; page cache before writes: {result.get('page_cache_before_writes', '–')}; "
            f"{result.get('seconds', '?')} s in all.")


def versions_line(result: dict[str, Any]) -> str:
    parts = []
    for impl, hello in result.get("contenders", {}).items():
        v = hello.get("versions", {})
        if impl == "field":
            parts.append("bench venv: " + ", ".join(f"{k} {x}" for k, x in v.items() if k != "python"))
        else:
            parts.append(f"{impl}: loaderx {v.get('loaderx', '?')} (NumPy {v.get('numpy')})")
    return "; ".join(parts)


def missing_table(result: dict[str, Any]) -> str:
    rows = [[k, v[:300].replace("|", "/")] for k, v in {**result.get("install_missing", {}),
                                                          **result.get("missing", {})}.items()]
    if not rows:
        return "Every contender installed and ran."
    return plain_table(["missing", "why"], rows)


def workloads_table(result: dict[str, Any]) -> str:
    body = [[name, w["what"], f"{w['records']:,}", fmt_b(w["logical_bytes"]), fmt_b(w["median_record_bytes"])]
            for name, w in result["workloads"].items()]
    return plain_table(["workload", "records", "count", "logical size", "median record"], body)


STORE_NOTE = (
    "Controls for: the same records and the same sequence of 256-index batches for every contender, each round "
    "as many of them as fill the round's least duration (a fast contender goes further along the sequence: "
    "a few dozen batches of small records would take under a millisecond, too short to measure a store); "
    "warm page cache (every store read through and given one untimed round before its rounds, and read through again "
    "before each timed round, since other contenders' jobs make the kernel evict page cache); contenders alternated round by "
    "round with the order rotated, medians of the rounds; writes timed until the writer closed and `os.sync()` "
    "returned, after the page cache was dropped (the source each writer reads is held mapped by its worker, so "
    "dropping leaves it cached: every write reads its input from memory). Does not control for: each store's own layout choices "
    "(chunking, compression level: each library's default), disk placement on a shared VM, other tenants' load; "
    "p95 is over every batch of every round. The ceiling is the faster of its two rows (all cores, one "
    "thread), and × ceiling is against that; it copies into an output reused from batch to batch, as "
    "loaderx reuses a handle's dropped batch buffers, while the other stores return fresh arrays as their "
    "APIs do. Non-loaderx stores decode into NumPy the way a user would "
    "(Arrow buffers viewed, LMDB/ArrayRecord bytes copied into one array). h5py reads record by record "
    "(`read_direct` into one array): its fancy selection was 25x slower on one-record chunks.")

LOADER_NOTE = (
    "Controls for: batch 256, 4 workers (threads or processes, as each loader does it), prefetch 4 where the "
    "loader has the knob (torch: prefetch_factor 1 per worker; grain: worker buffer 1); each loader in a fresh "
    "process per round, rounds alternated; warm page cache; every loader's first batch checked against "
    "the source before the clock starts and the memory sampling begins. Memory: PSS and RSS summed over the process tree, sampled every 20 ms. RSS double "
    "counts: a page shared by several processes (the memory-mapped store, the interpreter's libraries, "
    "copy-on-write pages after fork) counts fully in each of them, so a forking loader's summed RSS grows "
    "with the number of workers even when they share the pages; PSS divides each shared page among the "
    "processes mapping it, so its sum is what the tree really holds. *PSS added by loader* is the "
    "tree's peak PSS less the loader process's own PSS once the loader is built, before its first batch; "
    "the peak covers the warm-up and timed batches (the checked batch comes before the sampling). "
    "Does not control for: what each loader does per batch beyond fetch + collate (none runs a "
    "transform), jax-dataloader has no workers (one process, in-memory array), the samplers (loaderx named "
    "streams and 2.4.0: shuffle without replacement, their default; 0.5.4: IID, its default; torch: random "
    "with replacement; Grain and jax-dataloader: shuffle). A memory-mapped store's pages that a process has "
    "touched count in its PSS, so the loaders reading a mapped file (loaderx, torch over .npy) carry up to "
    "the store's size in PSS that the page cache holds anyway.")


def scanned(rc: dict[str, int]) -> int:
    """Pages the kernel scanned to reclaim memory (kswapd and direct)."""
    return rc.get("pgscan_kswapd", 0) + rc.get("pgscan_direct", 0)


def interference_line(result: dict[str, Any]) -> str:
    """What else ran during the timed gathers: CPU time of the other
    workers, and time the hypervisor took from this VM (steal)."""
    others, steal, busy, scan, refaults = [], 0.0, 0.0, 0, 0
    for r in result.get("stores", []):
        others += r.get("rounds_others_cpu_s", [])
        for rc in r.get("rounds_reclaim", []):
            scan += scanned(rc)
            refaults += rc.get("workingset_refault_file", 0)
        for _own, machine, st in r.get("rounds_cpu", []):
            busy += machine
            steal += st
    if not others:
        return ""
    return (f"During the timed gathers the other workers used at most {max(others):.2f} s of CPU in any one "
            f"job ({sum(others):.2f} s in all); the hypervisor took {steal:.1f} s (steal) beside "
            f"{busy:.1f} s of busy CPU; the kernel scanned {scan * 4 / 1024:.0f} MiB of pages to reclaim "
            f"and refaulted {refaults * 4 / 1024:.0f} MiB of evicted file pages meanwhile.")


def loader_reclaim_line(result: dict[str, Any]) -> str:
    """The kernel's reclaim during the loader rounds (pages scanned to free
    memory, evicted file pages read back in)."""
    rounds = [rc for r in result.get("loaders", []) for rc in r.get("rounds_reclaim", [])]
    if not rounds:
        return ""
    scans = [scanned(rc) for rc in rounds]
    refaults = sum(rc.get("workingset_refault_file", 0) for rc in rounds)
    return (f"During the {len(rounds)} timed loader runs the kernel scanned {sum(scans) * 4 / 1024:.0f} MiB "
            f"of pages to reclaim (at most {max(scans) * 4 / 1024:.0f} MiB in one run) and read "
            f"{refaults * 4 / 1024:.0f} MiB of evicted file pages back in.")


def field_report(result: dict[str, Any]) -> str:
    parts = [f"Machine: {field_machine_line(result)}", "", f"Versions: {versions_line(result)}", "",
             "#### Workloads", "", workloads_table(result), "", "#### Missing contenders", "",
             missing_table(result), ""]
    if result.get("stores"):
        parts += ["#### Stores", "", STORE_NOTE, ""]
        interference = interference_line(result)
        if interference:
            parts += [interference, ""]
        for name in result["workloads"]:
            parts += [f"##### {name}: {result['workloads'][name]['what']}", "", field_store_table(result, name), ""]
    if result.get("loaders"):
        parts += ["#### Loaders (img224 + int64 label, batch 256, 4 workers)", "", LOADER_NOTE, "",
                  field_loader_table(result), ""]
        reclaim = loader_reclaim_line(result)
        if reclaim:
            parts += [reclaim, ""]
    parts += ["#### Targets", "", field_targets_table(result)]
    return "\n".join(parts)


def field_summary(result: dict[str, Any]) -> str:
    """The README's headline: img224 gather and the loaders."""
    rows = [r for r in store_rows(result, "img224") if "gather_bps" in r] if "img224" in result.get("workloads", {}) else []
    rows.sort(key=lambda r: -r["gather_bps"])
    body = [[contender_label(r), r["codec"], fmt_rate(r["gather_bps"]), fmt_rate(r.get("write_bps"))] for r in rows]
    lines = [plain_table(["store (img224, 147 KiB records)", "codec", "gather", "write"], body)]
    lrows = [r for r in result.get("loaders", []) if "missing" not in r]
    lrows.sort(key=lambda r: -r["batches_per_s"])
    lines += ["", plain_table(["loader (batch 256, 4 workers)", "codec", "batches/s", "peak PSS"],
                        [["**loaderx**" if r["name"] == "loaderx" else r["name"], r["codec"],
                          f"{r['batches_per_s']:.1f}", fmt_b(r["peak_pss"])] for r in lrows])]
    scale_f = result.get("config", {}).get("scale")
    scale = "smoke run, figures mean nothing" if result.get("smoke") else f"scale {scale_f}"
    if not result.get("smoke") and scale_f is not None and scale_f < 1:
        scale += ": a preliminary run, noisy; ratios are not verdicts"
    lines += ["", f"({result['machine']['nproc']} cores, {scale}; full tables in docs/bench/field.md)"]
    return "\n".join(lines)


def field_blocks(result: dict[str, Any]) -> dict[str, str]:
    return {"field": field_report(result), "field-summary": field_summary(result),
            "field-targets": field_targets_table(result)}


# ----------------------------------------------------------------- remote
#
# benches/remote.py's run ("kind": "remote"): S3 servers on loopback behind
# the latency proxy, ours against the field's remote readers.

REMOTE_GATHER_LABELS = {
    "loaderx": "**loaderx** (this tree)", "boto3": "boto3 get_object(Range) ×32 threads",
    "s3fs": "s3fs cat_ranges", "obstore": "obstore get_ranges", "lance": "Lance take (S3)",
}
REMOTE_LOADER_LABELS = {"loaderx": "**loaderx** DataLoader", "mds": "MosaicML Streaming (MDS)",
                        "litdata": "LitData StreamingDataset"}
REMOTE_GATHER_NOTE = (
    "Batches of 256 random records (the same index batches for everybody); each row the median of its "
    "rounds' mean batch time, p95 over every batch. boto3, s3fs and obstore fetch each record's byte range "
    "of the `.npy` source object (offsets known locally; nothing decoded, nothing checked); loaderx reads its "
    "table from the server and checks each record's CRC32C; Lance reads its own dataset written to the server.")
REMOTE_LOADER_NOTE = (
    "img224 images with an int64 label, batch 256, 4 workers, each run a fresh process (peak PSS of its process "
    "tree). Time to first batch from opening the stores; then the batches after the warm-up, at most to the end of "
    "the first epoch (after it MDS and LitData read their local shard cache, not the server). Local disk: what the "
    "loader's cache directory holds at the end (loaderx runs without a block cache).")


def brief(text: str, limit: int = 200) -> str:
    """One table cell of a (maybe multi-line) failure: its last line that
    names an error, else its first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    named = [ln for ln in lines if "Error:" in ln or "error:" in ln or "failed:" in ln]
    line = (named[-1] if named else lines[0]) if lines else text
    return line[:limit].replace("|", "/")


def remote_ceiling(result: dict[str, Any], server: str, via: str) -> float | None:
    for r in result.get("ceiling", []):
        if r["server"] == server and r["via"] == via:
            return float(r["bytes_per_s"])
    return None


def remote_gather(result: dict[str, Any], server: str, latency: int, workload: str,
                  contender: str) -> dict[str, Any] | None:
    for r in result.get("gathers", []):
        if (r["server"], r["latency_ms"], r["workload"], r["contender"]) == (server, latency, workload, contender):
            return r
    return None


def remote_loader(result: dict[str, Any], name: str, server: str, latency: int | None,
                  store: str = "img224") -> dict[str, Any] | None:
    for r in result.get("loaders", []):
        if (r["name"], r["server"], r["latency_ms"], r["store"]) == (name, server, latency, store):
            return r
    return None


def loader_batch_bytes(result: dict[str, Any]) -> float:
    batch = result.get("config", {}).get("loader_batch", 256)
    return float(result["workloads"]["img224"]["median_record_bytes"] + 8) * batch


def remote_fast(result: dict[str, Any]) -> str:
    return "s3s-fs" if "held" in result.get("servers", {}).get("s3s-fs", {}) else "moto"


def remote_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of issue 40: measured, goal, met (None: not measured),
    and what it is measured against."""
    out: list[dict[str, Any]] = []
    fast = remote_fast(result)

    def add(target: str, measured: float | None, goal: float, note: str = "", at_most: bool = False) -> None:
        met = None if measured is None else (measured <= goal if at_most else measured >= goal)
        out.append({"target": target, "measured": measured, "goal": goal, "met": met, "note": note,
                    "at_most": at_most})

    ours = remote_gather(result, fast, 25, "img224", "loaderx")
    for other, goal in (("boto3", 5.0), ("s3fs", 2.0), ("obstore", 1.0)):
        o = remote_gather(result, fast, 25, "img224", other)
        m = ours["bytes_per_s"] / o["bytes_per_s"] if ours and o and "bytes_per_s" in o and "bytes_per_s" in ours \
            else None
        add(f"gather 256 img224 at 25 ms ({fast}) vs {REMOTE_GATHER_LABELS[other]}", m, goal,
            "" if m is not None else brief((o or {}).get("error", "missing")))
    bb = loader_batch_bytes(result)
    dl = remote_loader(result, "loaderx", fast, 25)
    local = remote_loader(result, "loaderx", "local disk", None)
    ceil = remote_ceiling(result, fast, "25 ms")
    if dl and "batches_per_s" in dl and ceil:
        bound = ceil
        against = "the server's ceiling at 25 ms"
        if local and "batches_per_s" in local and local["batches_per_s"] * bb < ceil:
            bound, against = local["batches_per_s"] * bb, "the local-disk DataLoader"
        add(f"DataLoader at 25 ms vs {against} (the lower of it and the ceiling)", dl["batches_per_s"] * bb / bound,
            0.8)
    else:
        add("DataLoader at 25 ms vs the server's ceiling", None, 0.8, "not measured")
    bound_s = 1.0 + 4 * 0.025
    for store, what in (("img224", "0.5 GiB store"), ("big", "4 GiB store")):
        r = remote_loader(result, "loaderx", fast, 25, store)
        size = result.get("servers", {}).get(fast, {}).get("held", {}).get(
            "small_bytes" if store == "img224" else "big_bytes")
        label = f"{what} ({fmt_b(size)})" if size else what
        add(f"time to first batch at 25 ms, {label} (s, ≤ 1 s + 4 round trips)",
            r["ttfb_s"] if r and "ttfb_s" in r else None, bound_s, "" if r else "not measured", at_most=True)
    small, big = remote_loader(result, "loaderx", fast, 25), remote_loader(result, "loaderx", fast, 25, "big")
    if small and big and "ttfb_s" in small and "ttfb_s" in big:
        add("time to first batch: 4 GiB store / 0.5 GiB store (the same: ≤ 1.25×)", big["ttfb_s"] / small["ttfb_s"],
            1.25, at_most=True)
    for other in ("mds", "litdata"):
        o = remote_loader(result, other, fast, 25)
        if dl and o and "batches_per_s" in o and "batches_per_s" in dl:
            add(f"DataLoader batches/s at 25 ms vs {REMOTE_LOADER_LABELS[other]}",
                dl["batches_per_s"] / o["batches_per_s"], 1.0)
            add(f"local disk: {REMOTE_LOADER_LABELS[other]}'s ({fmt_b(o['disk_bytes'])}) minus ours "
                f"({fmt_b(dl['disk_bytes'])}), MiB (> 0)", (o["disk_bytes"] - dl["disk_bytes"]) / MIB, 1e-9)
        else:
            add(f"DataLoader batches/s at 25 ms vs {REMOTE_LOADER_LABELS[other]}", None, 1.0,
                brief((o or {}).get("missing", "not measured")))
    if dl and local and "peak_pss" in dl and "peak_pss" in local:
        bound = result.get("lookahead_bytes", 0) + 64 * MIB
        add(f"memory added by remote reads (peak PSS at 25 ms − local disk), MiB (≤ lookahead "
            f"{fmt_b(result.get('lookahead_bytes'))} + 64 MiB)", (dl["peak_pss"] - local["peak_pss"]) / MIB,
            bound / MIB, at_most=True)
    return out


def remote_targets_table(result: dict[str, Any]) -> str:
    body = []
    for t in remote_targets(result):
        m, goal = t["measured"], t["goal"]
        unit = "" if t["at_most"] or "MiB" in t["target"] else "×"
        met = "–" if t["met"] is None else ("yes" if t["met"] else "**no**")
        cmp = "≤" if t["at_most"] else "≥" if goal > 1e-6 else ">"
        shown = "not measured: " + t["note"] if m is None else f"{m:.2f}{unit}"
        body.append([t["target"], shown, f"{cmp} {goal:g}{unit}" if goal > 1e-6 else "> 0", met])
    return plain_table(["target (issue 40)", "measured", "goal", "met"], body)


def remote_ceiling_table(result: dict[str, Any]) -> str:
    body = []
    for r in result.get("ceiling", []):
        held = f"{r['objects']} × {fmt_b(r['object_bytes'])}"
        body.append([r["server"] + (" (in-memory, Python)" if r["server"] == "moto" else ""), r["via"], r["client"],
                     held, fmt_rate(r["bytes_per_s"])])
    return plain_table(["server", "reached", "client", "objects", "whole-object GETs"], body)


def remote_gather_table(result: dict[str, Any], workload: str) -> str:
    body = []
    rows = [r for r in result.get("gathers", []) if r["workload"] == workload]
    for r in sorted(rows, key=lambda r: (r["server"] != "s3s-fs", r["latency_ms"], -r.get("bytes_per_s", 0))):
        ours = remote_gather(result, r["server"], r["latency_ms"], workload, "loaderx")
        label = REMOTE_GATHER_LABELS.get(r["contender"], r["contender"])
        server = r["server"]
        if server == "moto":
            server += f" (in-memory; batches of {result.get('config', {}).get('moto_batch', '?')})"
        where = [server, f"{r['latency_ms']} ms"]
        if "error" in r:
            body.append([*where, label, "failed: " + brief(r["error"]), "", "", "", "", ""])
            continue
        vs = ours["bytes_per_s"] / r["bytes_per_s"] if ours and "bytes_per_s" in ours else None
        records = result.get("config", {}).get("moto_batch", 256) if r["server"] == "moto" else 256
        body.append([*where, label, fmt_rate(r["bytes_per_s"]), f"{records / r['batch_s']:,.0f}", fmt_t(r["batch_s"]),
                     fmt_t(r["p95_s"]), "–" if vs is None or r["contender"] == "loaderx" else f"{vs:.2f}×"])
    return plain_table(["server", "latency", "reader", "gather", "records/s", "batch", "p95", "loaderx vs it"], body)


def remote_loader_table(result: dict[str, Any]) -> str:
    bb = loader_batch_bytes(result)
    body = []
    for r in result.get("loaders", []):
        label = REMOTE_LOADER_LABELS.get(r["name"], r["name"])
        where = [r["server"], "–" if r["latency_ms"] is None else f"{r['latency_ms']} ms",
                 "4 GiB (repeated records)" if r["store"] == "big" else r["store"]]
        if "missing" in r:
            body.append([label, *where, "missing: " + brief(r["missing"]), "", "", "", "", ""])
            continue
        body.append([label, *where, f"{r['batches_per_s']:.2f} ({fmt_rate(r['batches_per_s'] * bb)})",
                     fmt_t(r["p95_s"]), fmt_t(r["ttfb_s"]), fmt_b(r["disk_bytes"]), fmt_b(r["peak_pss"]),
                     str(r["batches"])])
    return plain_table(["loader", "server", "latency", "store", "batches/s", "p95", "first batch", "local disk",
                        "peak PSS", "timed batches"], body)


def remote_machine_line(result: dict[str, Any]) -> str:
    m = result["machine"]
    cfg = result.get("config", {})
    scale = "smoke run (figures mean nothing)" if result.get("smoke") else f"scale {cfg.get('scale')}"
    return (f"{m['cpu_model']}, {m['nproc']} cores, {m['system']}, Python {m['python']}; "
            f"load {m.get('load_1min_start')} → {m.get('load_1min_end')}; {scale}; {cfg.get('rounds')} gather "
            f"rounds × {cfg.get('batches')} batches (moto: {cfg.get('moto_rounds')}), {cfg.get('ceiling_rounds')} "
            f"ceiling rounds, {cfg.get('loader_rounds')} loader rounds; {result.get('seconds', '?')} s in all.")


def remote_servers_line(result: dict[str, Any]) -> str:
    parts = []
    for name, info in result.get("servers", {}).items():
        if "missing" in info:
            parts.append(f"{name}: missing ({info['missing'][:200]})")
            continue
        held = info["held"]
        what = f"img224 {held.get('img224')} records" + (f", tokens {held['tokens']} records" if "tokens" in held
                                                        else "")
        parts.append(f"{name}: {what}" + (" (moto copies a whole object per ranged read, so it holds a subset)"
                                          if name == "moto" else ""))
    return "; ".join(parts)


def remote_report(result: dict[str, Any]) -> str:
    parts = [f"Machine: {remote_machine_line(result)}", "", f"Versions: {versions_line(result)}", "",
             f"Servers: {remote_servers_line(result)}", "", "#### Workloads", "", workloads_table(result), "",
             "#### Missing contenders", "", missing_table(result), "",
             "#### Server ceiling (parallel whole-object GETs)", "", remote_ceiling_table(result), ""]
    for name in result.get("workloads", {}):
        parts += [f"#### Gathers: {name}, {result['workloads'][name]['what']}", "", REMOTE_GATHER_NOTE, "",
                  remote_gather_table(result, name), ""]
    parts += ["#### Loaders", "", REMOTE_LOADER_NOTE, "", remote_loader_table(result), "",
              "#### Targets", "", remote_targets_table(result)]
    return "\n".join(parts)


def remote_blocks(result: dict[str, Any]) -> dict[str, str]:
    return {"remote": remote_report(result), "remote-targets": remote_targets_table(result)}


# ----------------------------------------------------------------- convert.py


#: How the convert tables name each job.
CONVERT_LABELS = {
    "convert-1": "**loaderx** `convert`, num_proc=1",
    "convert-2": "**loaderx** `convert`, num_proc=2",
    "ray-1": "Ray Data, 1 CPU → **`loaderx.ray.write`**",
    "ray-2": "Ray Data, 2 CPUs → **`loaderx.ray.write`**",
    "spark-2": "Spark local[2] → **`loaderx.spark.write`**",
    "mds-2": "MDS `MDSWriter` × 2 processes + `merge_index`",
    "litdata-2": "LitData `optimize(num_workers=2)`",
}


def convert_versions_line(result: dict[str, Any]) -> str:
    merged: dict[str, str] = {}
    for versions in result.get("versions", {}).values():
        merged.update(versions)
    text = ", ".join(f"{k} {v}" for k, v in sorted(merged.items())) or "none measured"
    if result.get("smoke"):
        text += " — SMOKE RUN: tiny data, figures mean nothing"
    return text


def convert_table(result: dict[str, Any], workload: str) -> str:
    rows = [r for r in result.get("conversions", []) if r["workload"] == workload]
    base = next((r for r in rows if r["job"] == "convert-1" and "records_per_s" in r), None)
    body = []
    for r in rows:
        label = CONVERT_LABELS.get(r["job"], r["job"])
        if "records_per_s" not in r:
            what = "missing" if "missing" in r else "failed"
            body.append([label, f"**{what}**: {r.get('missing') or r.get('error')}", *["–"] * 7])
            continue
        ws = r["rounds_write_s"]
        body.append([
            label, fmt_t(r["start_s"]), fmt_t(r["write_s"]), fmt_t(r["total_s"]),
            f"{r['records_per_s']:,.0f}", fmt_rate(r["logical_bytes"] / r["write_s"]),
            fmt_ratio(None if base is None else r["records_per_s"] / base["records_per_s"], bold=True),
            f"{fmt_b(r['on_disk_bytes'])} ({r['logical_bytes'] / max(1, r['on_disk_bytes']):.2f}x)",
            f"{fmt_t(min(ws))} – {fmt_t(max(ws))}",
        ])
    return plain_table(["conversion", "start", "write", "start + write", "records/s (write)", "data/s (write)",
                        "vs num_proc=1", "on disk (ratio)", "write rounds (min – max)"], body)


def collection_table(result: dict[str, Any]) -> str:
    c = result.get("collection")
    if not c:
        return "(no collection section in this run)"
    by = {r["reader"]: r for r in c["readers"]}
    store = by["store"]
    labels = {"store": "one `Dense` store", "collection": f"{c['parts']:,}-part collection",
              "collection-all-open": f"{c['parts']:,}-part collection, `max_open_parts={c['parts']}`"}
    body = []
    for name, r in by.items():
        body.append([
            labels.get(name, name), fmt_t(r["gather_batch_s"]), f"{r['gather_records_per_s']:,.0f}",
            fmt_ratio(r["gather_records_per_s"] / store["gather_records_per_s"], bold=name != "store"),
            fmt_t(r["loader_batch_s"]), f"{r['loader_records_per_s']:,.0f}",
            fmt_ratio(r["loader_records_per_s"] / store["loader_records_per_s"], bold=name != "store"),
        ])
    return plain_table(["reader", "gather / batch", "records/s", "vs store", "DataLoader / batch", "records/s",
                        "vs store"], body)


def collection_open_line(result: dict[str, Any]) -> str:
    c = result["collection"]
    cold = f", {fmt_t(c['cold_open_s'])} after dropping the page cache" if c.get("cold_open_s") is not None else ""
    return (f"`collection.open` of the {c['parts']:,} parts: {fmt_t(c['open_s'])} in this process (median of "
            f"{len(c['open_rounds_s'])}), {fmt_t(c['fresh_open_s'])} in a fresh process (median of "
            f"{len(c['fresh_open_rounds_s'])}){cold}. Built once: the store in {c['store_build_s']:.1f} s "
            f"({fmt_b(c['store_bytes'])}), the parts one `write_part` each plus `commit` in "
            f"{c['collection_build_s']:.1f} s ({fmt_b(c['collection_bytes'])}).")


def convert_workloads_line(result: dict[str, Any]) -> str:
    parts = []
    for name in ("img224", "tokens"):
        m = result["workloads"].get(name)
        if m:
            parts.append(f"{name}: {m['records']:,} records, {fmt_b(m['logical_bytes'])} ({m['what']})")
    return "; ".join(parts)


CONVERT_NOTE = (
    "Each conversion runs in a fresh process, after the page cache is dropped and the sources read back "
    "into it. **start**: importing the engine and starting it (`ray.init`, the Spark session and its JVM, "
    "then a warm-up task per core that starts their worker processes; our converter, MDS and LitData only "
    "import: their worker processes start within the write); **write**: the conversion until it returns and an "
    "`os.sync()` has returned (every output durable). records/s and data/s are of the write phase; "
    "`vs num_proc=1` compares records/s with our single-process converter; on disk: allocated blocks "
    "(ratio: the records' bytes over them). Medians of the rounds, jobs alternated round by round. "
    "Every output is zstd. Sources: img224 from the `.npy` file (Spark: the same bytes from a Parquet "
    "binary column, stored as uint8 Ragged records), tokens from a Parquet `list<int32>` file, for everybody."
)


def convert_report(result: dict[str, Any]) -> str:
    """The whole report of a ``convert.py`` run, as markdown."""
    cfg = result.get("config", {})
    parts = [machine_line(result["machine"]), "", f"Versions: {convert_versions_line(result)}", "",
             f"Workloads: {convert_workloads_line(result)}", ""]
    missing = result.get("missing", {})
    if missing:
        parts += ["Missing: " + "; ".join(f"{CONVERT_LABELS.get(k, k)}: {v}" for k, v in missing.items()), ""]
    if result.get("conversions"):
        dropped = result.get("page_cache_before_writes", "?")
        parts += ["#### Conversion", "", CONVERT_NOTE + f" Page cache before each run: {dropped}; "
                  f"{cfg.get('rounds', '?')} rounds.", ""]
        for name in ("img224", "tokens"):
            parts += [f"##### {name}", "", convert_table(result, name), ""]
    if result.get("collection"):
        c = result["collection"]
        parts += ["#### A collection of many parts against one store", "",
                  f"{c['records']:,} `{c['workload']}` records ({c['record_bytes'] // 1024} KiB, raw) as one "
                  f"store and as {c['parts']:,} parts. Gathers: batches of 256 random indices, "
                  f"{cfg.get('gather_batches', '?')} per round, median of {cfg.get('gather_rounds', '?')} "
                  f"rounds, warm page cache. DataLoader: batch 256, 4 workers, prefetch 4, "
                  f"{cfg.get('loader_batches', '?')} batches after {cfg.get('loader_warmup', '?')}, a fresh "
                  f"loader per round, median of {cfg.get('loader_rounds', '?')} rounds. Readers alternated.", "",
                  collection_table(result), "", collection_open_line(result), ""]
    parts += ["#### Targets", "", typed_targets_table(result)]
    return "\n".join(parts)


def convert_summary(result: dict[str, Any]) -> str:
    """BENCHMARKS.md's tables: records/s per conversion and workload, the
    collection's reads."""
    rows = {(r["job"], r["workload"]): r for r in result.get("conversions", [])}
    jobs = list(dict.fromkeys(r["job"] for r in result.get("conversions", [])))
    body = []
    for job in jobs:
        cells = [CONVERT_LABELS.get(job, job)]
        for w in ("img224", "tokens"):
            r = rows.get((job, w), {})
            if "records_per_s" in r:
                cells += [f"{r['records_per_s']:,.0f}", fmt_t(r["start_s"]), fmt_b(r["on_disk_bytes"])]
            else:
                cells += ["missing" if "missing" in r else "failed", "–", "–"]
        body.append(cells)
    text = [plain_table(["conversion", "img224 records/s", "start", "on disk", "tokens records/s", "start",
                         "on disk"], body)]
    if result.get("collection"):
        text += ["", collection_table(result), "", collection_open_line(result)]
    scale = result.get("config", {}).get("scale")
    note = "smoke run, figures mean nothing" if result.get("smoke") else f"scale {scale}"
    text += ["", f"({result['machine']['nproc']} cores, {note}; full tables in bench/convert.md)"]
    return "\n".join(text)


def convert_blocks(result: dict[str, Any]) -> dict[str, str]:
    """The generated blocks of a ``convert.py`` run."""
    return {"convert": convert_report(result), "convert-summary": convert_summary(result),
            "convert-targets": typed_targets_table(result)}


# ----------------------------------------------------------------- blocks


BLOCK = re.compile(r"(<!-- bench:([\w-]+) -->\n)(.*?)(<!-- /bench:\2 -->)", re.S)


def rewrite(text: str, generated: dict[str, str], used: set[str], where: Path) -> str:
    def body(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in generated:
            raise SystemExit(f"{where}: block `{name}` has no generated table (known: {sorted(generated)})")
        used.add(name)
        return f"{m.group(1)}{generated[name]}\n{m.group(4)}"

    return BLOCK.sub(body, text)


# ----------------------------------------------------------------- plots


def save_figure(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(result: dict[str, Any], outdir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    made = []
    names = [n for n in result["workloads"] if any(r["workload"] == n for r in result.get("stores", []))]
    if names:
        fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.4 * len(names) + 0.6))
        axes = [axes] if len(names) == 1 else list(axes)
        for ax, name in zip(axes, names):
            rows = [r for r in store_rows(result, name) if "gather_bps" in r]
            rows.sort(key=lambda r: r["gather_bps"])
            ys = [f"{contender_label(r).replace('**', '')} {r['codec']}" for r in rows]
            xs = [r["gather_bps"] / MIB for r in rows]
            colors = ["tab:red" if r["impl"] == "ours" else "tab:gray" if r["contender"] == "memory" else "tab:blue"
                      for r in rows]
            ax.barh(ys, xs, color=colors)
            per = int(rows[0].get("batch_records", 256)) if rows else 256
            ax.set_title(f"{name}: random gather of {per} records (MiB/s)", fontsize=9)
            ax.tick_params(labelsize=7)
        made.append(save_figure(plt, fig, outdir / "field-gather.png"))
    lrows = [r for r in result.get("loaders", []) if "missing" not in r]
    if lrows:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 0.35 * len(lrows) + 1.2))
        lrows.sort(key=lambda r: r["batches_per_s"])
        ys = [f"{r['name']} {r['codec']}" for r in lrows]
        colors = ["tab:red" if r["name"] == "loaderx" else "tab:blue" for r in lrows]
        a1.barh(ys, [r["batches_per_s"] for r in lrows], color=colors)
        a1.set_title("batches/s (batch 256 × 147 KiB)", fontsize=9)
        a2.barh(ys, [r["peak_pss"] / MIB for r in lrows], color=colors, label="peak PSS")
        a2.barh(ys, [r["peak_rss"] / MIB for r in lrows], color="none", edgecolor="black", label="summed RSS")
        a2.set_title("peak memory of the process tree (MiB)", fontsize=9)
        a2.legend(fontsize=7)
        a2.set_yticklabels([])
        for a in (a1, a2):
            a.tick_params(labelsize=7)
        made.append(save_figure(plt, fig, outdir / "field-loader.png"))
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "json",
        type=Path,
        nargs="+",
        help="runs saved by compare.py, typed.py and field.py --json (each gives its own blocks)",
    )
    parser.add_argument("--write", action="store_true", help="update the generated blocks of the docs")
    parser.add_argument("--plots", type=Path, default=None,
                        help="draw the figures of the field.py runs into this directory (needs matplotlib)")
    args = parser.parse_args(argv)
    runs = [(path, json.loads(path.read_text())) for path in args.json]
    if args.plots:
        for _path, result in runs:
            if result.get("kind") == "field":
                for p in plots(result, args.plots):
                    print(f"wrote {p}")
        return 0
    generated: dict[str, str] = {}
    for path, result in runs:
        if args.write and result.get("smoke"):
            raise SystemExit(f"{path} is a smoke run; its figures do not belong in the docs")
        kind = result.get("kind")
        mine = field_blocks(result) if kind == "field" else typed_blocks(result) if kind == "typed" \
            else remote_blocks(result) if kind == "remote" \
            else convert_blocks(result) if kind == "convert" else compare_blocks(result)
        clash = sorted(set(mine) & set(generated))
        if clash:
            raise SystemExit(f"{path}: blocks {clash} already come from an earlier file")
        generated.update(mine)
    if not args.write:
        for name, text in generated.items():
            print(f"<!-- bench:{name} -->\n{text}\n<!-- /bench:{name} -->\n")
        return 0
    used: set[str] = set()
    for doc in DOCS:
        doc.write_text(rewrite(doc.read_text(), generated, used, doc))
    missing = sorted(set(generated) - used)
    if missing:
        raise SystemExit(f"no block in {', '.join(map(str, DOCS))} for: {', '.join(missing)}")
    names = ", ".join(str(p) for p in args.json)
    print(f"updated {', '.join(str(d.relative_to(REPO)) for d in DOCS)} from {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
