#!/usr/bin/env python3
"""Markdown tables of one benchmark run, from its JSON alone.

``benches/compare.py`` measures and saves a run as JSON (``--json``);
``cargo xtask bench`` adds the criterion estimates of the Rust benches
(``"criterion"``) and keeps the run in ``docs/bench/latest.json``.
``benches/typed.py`` (the typed containers against loaderx 2.4.0) keeps its
run in ``docs/bench/typed.json`` (marked ``"kind": "typed"``), and
``benches/field.py`` (every contender of the field) in
``docs/bench/field.json`` (``"kind": "field"``, rendered by
``benches/field_tables.py``). This script
turns such files into the tables the docs show, so that every figure in
``docs/BENCHMARKS.md`` and ``README.md`` comes from one run of each::

    python3 benches/tables.py docs/bench/latest.json docs/bench/typed.json          # print
    python3 benches/tables.py docs/bench/latest.json docs/bench/typed.json --write  # update docs

The docs hold generated blocks between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->``; ``--write`` replaces each block's body with the
table called NAME (see ``blocks`` and ``typed_blocks``) and fails if a block
has no table or a table has no block, so ``--write`` takes both files. Standard library only.

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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DOCS = (REPO / "docs" / "BENCHMARKS.md", REPO / "README.md")
MIB = 1 << 20
GIB = 1 << 30

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
        f"1-min load at start {m['load_1min']}, at end {m.get('load_1min_end', '?')}"
    )


def sampler_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        ours = r["impl"] == "ours"
        body.append(
            [
                f"**{r['name']}**" if ours else r["name"],
                str(r["batch"]),
                fmt_time(r["per_batch_s"]),
                f"{r['indices_per_s'] / 1e6:.0f} M/s",
                fmt_ratio(r["vs_default_rng"], bold=ours),
            ]
        )
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
                f"**{r['name']}**" if ours else r["name"],
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


def report(result: dict[str, Any]) -> str:
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
    if result.get("targets"):
        parts += ["", "**Targets**", "", targets_table(result["targets"])]
    return "\n".join(parts)


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
    if result.get("smoke"):
        text += " — SMOKE RUN: tiny data, figures mean nothing"
    return text


def impl_label(result: dict[str, Any], impl: str) -> str:
    c = result["contenders"].get(impl)
    return f"loaderx {c['loaderx']}" if c else impl


def typed_gather_table(result: dict[str, Any]) -> str:
    rows = result.get("gathers", [])
    base = {r["name"]: r for r in rows if r["impl"] == "original"}
    body = []
    for r in rows:
        ours = r["impl"] == "ours"
        b = base.get(r["name"]) if ours else None
        body.append(
            [
                f"**{r['name']}**" if ours else r["name"],
                impl_label(result, r["impl"]),
                fmt_time(r["per_batch_s"]),
                f"{fmt_time(min(r['rounds_s']))} – {fmt_time(max(r['rounds_s']))}",
                f"{r['records_per_s']:,.0f}",
                f"{r['mib_s']:,.0f} MiB/s",
                fmt_ratio(b and r["records_per_s"] / b["records_per_s"], bold=True) if ours else "—",
            ]
        )
    return table(
        ["gather", "loaderx", "per batch", "rounds (min – max)", "records/s", "throughput", "vs 2.4.0"], body
    )


def typed_write_table(result: dict[str, Any]) -> str:
    rows = result.get("writes", [])
    base = {r["name"]: r for r in rows if r["impl"] == "original"}
    body = []
    for r in rows:
        ours = r["impl"] == "ours"
        b = base.get(r["name"]) if ours else None
        body.append(
            [
                r["name"].replace("-", " "),
                impl_label(result, r["impl"]),
                f"{r['logical_bytes'] / MIB:.0f} MiB",
                f"{r['close_mib_s']:.0f} MiB/s",
                f"{r['durable_mib_s']:.0f} MiB/s",
                fmt_ratio(b and r["close_mib_s"] / b["close_mib_s"], bold=True) if ours else "—",
                fmt_ratio(b and r["durable_mib_s"] / b["durable_mib_s"], bold=True) if ours else "—",
            ]
        )
    return table(
        ["write", "loaderx", "data", "until close", "until durable", "vs 2.4.0 (close)", "vs 2.4.0 (durable)"],
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
            f"over {w['token_vocab']:,}). `vs 2.4.0` is records/s against the row of the same name.",
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


# ----------------------------------------------------------------- blocks


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


def blocks(result: dict[str, Any]) -> dict[str, str]:
    """Every generated block of the docs, by name."""
    benches = result.get("criterion", [])
    return {
        "machine": machine_line(result["machine"]),
        "gather": criterion_table(benches, "gather"),
        "decode": criterion_table(benches, "decode-1-core"),
        "gather-small": criterion_table(benches, "gather-small"),
        "append": criterion_table(benches, "append"),
        "open": criterion_table(benches, "open-1M-records"),
        "sampler": sampler_criterion_table(benches),
        "loader": criterion_table(benches, "loader-raw") + "\n\n" + criterion_table(benches, "loader-flate"),
        "rust-targets": rust_targets_table(benches),
        "python": report(result),
        "summary": summary(result),
    }


def typed_blocks(result: dict[str, Any]) -> dict[str, str]:
    """The generated blocks of a ``typed.py`` run."""
    return {"typed": typed_report(result)}


BLOCK = re.compile(r"(<!-- bench:([\w-]+) -->\n)(.*?)(<!-- /bench:\2 -->)", re.S)


def rewrite(text: str, generated: dict[str, str], used: set[str], where: Path) -> str:
    def body(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in generated:
            raise SystemExit(f"{where}: block `{name}` has no generated table (known: {sorted(generated)})")
        used.add(name)
        return f"{m.group(1)}{generated[name]}\n{m.group(4)}"

    return BLOCK.sub(body, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "json",
        type=Path,
        nargs="+",
        help="runs saved by compare.py --json and typed.py --json (each gives its own blocks)",
    )
    parser.add_argument("--write", action="store_true", help="update the generated blocks of the docs")
    args = parser.parse_args(argv)
    generated: dict[str, str] = {}
    for path in args.json:
        result = json.loads(path.read_text())
        if args.write and result.get("smoke"):
            raise SystemExit(f"{path} is a smoke run; its figures do not belong in the docs")
        if result.get("kind") == "field":
            from field_tables import blocks as field_blocks

            mine = field_blocks(result)
        else:
            mine = typed_blocks(result) if result.get("kind") == "typed" else blocks(result)
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
