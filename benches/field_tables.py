#!/usr/bin/env python3
"""Tables, targets and plots of a ``benches/field.py`` run, from its JSON.

``report(result)`` is the Markdown of the whole run (method, machine, what
is missing and why, one store table per workload, the loader table, the
targets of issue #14); ``summary(result)`` the README's headline table.
``benches/tables.py --write`` puts both into the docs' generated blocks
(``field`` and ``field-summary``). ``--plots DIR`` draws the PNG figures
(needs matplotlib: run it with the bench venv's interpreter)::

    python3 benches/field_tables.py docs/bench/field.json
    <target>/bench-venv-*/bin/python benches/field_tables.py docs/bench/field.json --plots docs/img
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

MIB = 1 << 20
KIB = 1 << 10

LABELS = {
    ("ours", "ours"): "**loaderx** (this tree)",
    ("ours", "ours-flat"): "**loaderx** append_flat",
    ("v054", "v054"): "loaderx 0.5.4",
    ("v240", "v240"): "loaderx 2.4.0",
    ("field", "npy"): "NumPy mmap .npy",
    ("field", "h5py"): "HDF5 (h5py)",
    ("field", "lmdb"): "LMDB",
    ("field", "arrow"): "Arrow IPC",
    ("field", "parquet"): "Parquet (256/group)",
    ("field", "arrayrecord"): "ArrayRecord (group_size:1)",
    ("field", "lance"): "Lance (take)",
    ("field", "memory"): "in-memory ceiling",
}
COMPRESSED = {"flate", "zstd", "lz4", "gzip"}


def label(row: dict[str, Any]) -> str:
    return LABELS.get((row["impl"], row["contender"]), row["contender"])


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


def table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


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


def store_table(result: dict[str, Any], workload: str) -> str:
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
        name = label(r)
        if r.get("error"):
            name += " (failed: " + r["error"][:120].replace("|", "/") + ")"
        body.append([name, r["codec"], fmt_rate(r.get("write_bps")), fmt_rate(r.get("gather_bps")),
                     fmt_n(r.get("records_s")), fmt_t(r.get("gather_p95_s")), fmt_b(disk), ratio, of_ceiling])
    for s in result.get("skipped", []):
        if s["workload"] == workload:
            body.append([LABELS.get((s["impl"], s["contender"]), s["contender"]), s["codec"],
                         f"not measured: {s['skip']}", "", "", "", "", "", ""])
    return table(["contender", "codec", "write (durable)", "gather", "records/s", "p95 batch",
                  "on disk", "logical/disk", "× ceiling"], body)


def loader_table(result: dict[str, Any]) -> str:
    rows = result.get("loaders", [])
    body = []
    for r in sorted(rows, key=lambda r: -r.get("batches_per_s", 0)):
        name = "**loaderx** (this tree)" if r["name"] == "loaderx" else r["name"]
        if "missing" in r:
            body.append([name, r["codec"], "missing: " + r["missing"][:160].replace("|", "/"), "", "", "", "", ""])
            continue
        body.append([name, r["codec"], f"{r['batches_per_s']:.1f}", fmt_t(r["p95_s"]), fmt_b(r["peak_pss"]),
                     fmt_b(r["peak_pss"] - r["pss_before"]), fmt_b(r["peak_rss"]), str(r["procs"])])
    return table(["loader", "codec", "batches/s", "p95 next()", "peak PSS (tree)", "PSS added by loader",
                  "peak RSS (tree, summed)", "processes"], body)


# ----------------------------------------------------------------- targets


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue #14's targets, each measured (or not, with the reason)."""
    out: list[dict[str, Any]] = []
    by: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for wname in result.get("workloads", {}):
        for r in store_rows(result, wname):
            by[(wname, r["impl"], r["contender"], r["codec"])] = r

    def get(w: str, impl: str, contender: str, codec: str, key: str) -> float | None:
        r = by.get((w, impl, contender, codec))
        return None if r is None else r.get(key)

    def add(name: str, ours: float | None, other: float | None, goal: float, why: str = "") -> None:
        m = None if ours is None or other is None or other == 0 else ours / other
        out.append({"target": name, "measured": m, "goal": goal,
                    "met": None if m is None else m >= goal,
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
    for wname in ("labels", "tok512"):
        add(f"small records ({wname}) raw records/s vs NumPy mmap", get(wname, "ours", "ours", "raw", rs),
            get(wname, "field", "npy", "raw", rs), 1.0, "a contender missing")
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
    for other in ("torch fork", "torch spawn", "grain", "jax-dataloader"):
        add(f"loader raw vs {other}", lrate("loaderx", "raw"), lrate(other, "raw"), 1.0, f"{other} missing")
    ours = loaders.get(("loaderx", "raw"))
    if ours:
        others = [r["peak_pss"] for k, r in loaders.items() if k[0] not in ("loaderx", "loaderx pair")]
        add("loader raw: lowest peak PSS (lowest other / ours)", min(others) if others else None,
            ours["peak_pss"], 1.0, "no other loader")
        batch = result["workloads"]["img224"]["median_record_bytes"] * 256
        bound = (4 + 4) * batch + 100 * MIB
        add(f"loader raw: peak PSS under (prefetch + workers) × batch + 100 MiB = {fmt_b(bound)} (bound / ours)",
            float(bound), ours["peak_pss"], 1.0)
    return out


def targets_table(result: dict[str, Any]) -> str:
    body = []
    for t in targets(result):
        m = t["measured"]
        met = "–" if t["met"] is None else ("yes" if t["met"] else "**no**")
        body.append([t["target"], "not measured: " + t["note"] if m is None else f"{m:.2f}×", f"≥ {t['goal']:g}×", met])
    return table(["target (issue #14)", "measured", "goal", "met"], body)


# ----------------------------------------------------------------- report


def round_min(cfg: dict[str, Any]) -> str:
    """A round's least duration, as the machine line words it."""
    least = cfg.get("round_min_s")
    return f" and {least * 1000:.0f} ms" if least else ""


def machine_line(result: dict[str, Any]) -> str:
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
    return table(["missing", "why"], rows)


def workloads_table(result: dict[str, Any]) -> str:
    body = [[name, w["what"], f"{w['records']:,}", fmt_b(w["logical_bytes"]), fmt_b(w["median_record_bytes"])]
            for name, w in result["workloads"].items()]
    return table(["workload", "records", "count", "logical size", "median record"], body)


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


def report(result: dict[str, Any]) -> str:
    parts = [f"Machine: {machine_line(result)}", "", f"Versions: {versions_line(result)}", "",
             "#### Workloads", "", workloads_table(result), "", "#### Missing contenders", "",
             missing_table(result), ""]
    if result.get("stores"):
        parts += ["#### Stores", "", STORE_NOTE, ""]
        interference = interference_line(result)
        if interference:
            parts += [interference, ""]
        for name in result["workloads"]:
            parts += [f"##### {name}: {result['workloads'][name]['what']}", "", store_table(result, name), ""]
    if result.get("loaders"):
        parts += ["#### Loaders (img224 + int64 label, batch 256, 4 workers)", "", LOADER_NOTE, "",
                  loader_table(result), ""]
        reclaim = loader_reclaim_line(result)
        if reclaim:
            parts += [reclaim, ""]
    parts += ["#### Targets", "", targets_table(result)]
    return "\n".join(parts)


def summary(result: dict[str, Any]) -> str:
    """The README's headline: img224 gather and the loaders."""
    rows = [r for r in store_rows(result, "img224") if "gather_bps" in r] if "img224" in result.get("workloads", {}) else []
    rows.sort(key=lambda r: -r["gather_bps"])
    body = [[label(r), r["codec"], fmt_rate(r["gather_bps"]), fmt_rate(r.get("write_bps"))] for r in rows]
    lines = [table(["store (img224, 147 KiB records)", "codec", "gather", "write"], body)]
    lrows = [r for r in result.get("loaders", []) if "missing" not in r]
    lrows.sort(key=lambda r: -r["batches_per_s"])
    lines += ["", table(["loader (batch 256, 4 workers)", "codec", "batches/s", "peak PSS"],
                        [["**loaderx**" if r["name"] == "loaderx" else r["name"], r["codec"],
                          f"{r['batches_per_s']:.1f}", fmt_b(r["peak_pss"])] for r in lrows])]
    scale_f = result.get("config", {}).get("scale")
    scale = "smoke run, figures mean nothing" if result.get("smoke") else f"scale {scale_f}"
    if not result.get("smoke") and scale_f is not None and scale_f < 1:
        scale += ": a preliminary run, noisy; ratios are not verdicts"
    lines += ["", f"({result['machine']['nproc']} cores, {scale}; full tables in docs/BENCHMARKS.md)"]
    return "\n".join(lines)


def blocks(result: dict[str, Any]) -> dict[str, str]:
    return {"field": report(result), "field-summary": summary(result)}


# ----------------------------------------------------------------- plots


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
            ys = [f"{label(r).replace('**', '')} {r['codec']}" for r in rows]
            xs = [r["gather_bps"] / MIB for r in rows]
            colors = ["tab:red" if r["impl"] == "ours" else "tab:gray" if r["contender"] == "memory" else "tab:blue"
                      for r in rows]
            ax.barh(ys, xs, color=colors)
            per = int(rows[0].get("batch_records", 256)) if rows else 256
            ax.set_title(f"{name}: random gather of {per} records (MiB/s)", fontsize=9)
            ax.tick_params(labelsize=7)
        fig.tight_layout()
        p = outdir / "field-gather.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
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
        fig.tight_layout()
        p = outdir / "field-loader.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", type=Path)
    parser.add_argument("--plots", type=Path, default=None, help="draw the PNG figures into this directory")
    args = parser.parse_args(argv)
    result = json.loads(args.json.read_text())
    if args.plots:
        for p in plots(result, args.plots):
            print(f"wrote {p}")
    else:
        print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
