#!/usr/bin/env python3
"""Summarises criterion's results (docs/performance.md): medians, noise and the ratios.

    python3 benches/report.py [CRITERION_DIR]   (default: $CARGO_TARGET_DIR/criterion or target/criterion)

Noise is the median absolute deviation of the per-iteration times over the samples, as a
percentage of the median.
"""
import json
import os
import sys
from pathlib import Path


def load(d: Path):
    est = d / "new" / "estimates.json"
    bench = d / "new" / "benchmark.json"
    if not est.exists():
        return None
    e = json.loads(est.read_text())
    b = json.loads(bench.read_text())
    median = e["median"]["point_estimate"]  # ns per iteration
    mad = e["median_abs_dev"]["point_estimate"]
    tp = b.get("throughput") or {}
    return {"ns": median, "noise": 100.0 * mad / median if median else 0.0, "bytes": tp.get("Bytes"), "elements": tp.get("Elements")}


def fmt_time(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_rate(bytes_, ns):
    rate = bytes_ / (ns / 1e9)
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if rate >= scale:
            return f"{rate / scale:.3g} {unit}"
    return f"{rate:.3g} B/s"


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.environ.get("CARGO_TARGET_DIR", "target")) / "criterion"
    if not root.exists():
        sys.exit(f"no criterion results in {root}")
    groups = {p.name: p for p in root.iterdir() if p.is_dir()}

    sizes = sorted(int(g.split("_")[-1]) for g in groups if g.startswith("request_build_"))
    if sizes:
        print("## Request build (median per step; noise = MAD/median)\n")
        print("| history | request | memcpy | envelope | next_request | step | serde_rebuild | next_request / memcpy speed | serde_rebuild / next_request time |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            g = groups[f"request_build_{n}"]
            r = {k: load(g / k) for k in ("memcpy", "envelope", "next_request", "step", "serde_rebuild")}
            if any(v is None for v in r.values()):
                continue
            b = r["memcpy"]["bytes"]
            cell = lambda k: f"{fmt_time(r[k]['ns'])} ({fmt_rate(b, r[k]['ns'])}, ±{r[k]['noise']:.0f} %)"
            print(
                f"| {n} | {b / 1e6:.2f} MB | {cell('memcpy')} | {cell('envelope')} | {cell('next_request')} | {cell('step')} | "
                f"{cell('serde_rebuild')} | {100 * r['memcpy']['ns'] / r['next_request']['ns']:.0f} % | "
                f"{r['serde_rebuild']['ns'] / r['next_request']['ns']:.1f}× |"
            )
        print()

    for name, g in sorted(groups.items()):
        if name.startswith("request_build_"):
            continue
        rows = []
        for d in sorted(g.rglob("new")):
            bench = d.parent
            r = load(bench)
            if r is None:
                continue
            label = str(bench.relative_to(g))
            rate = ""
            if r["bytes"]:
                rate = fmt_rate(r["bytes"], r["ns"])
            elif r["elements"]:
                rate = f"{r['elements'] / (r['ns'] / 1e9):.3g} events/s"
            rows.append((label, r, rate))
        if not rows:
            continue
        print(f"## {name}\n")
        print("| benchmark | median | throughput | noise |")
        print("|---|---|---|---|")
        for label, r, rate in rows:
            print(f"| {label} | {fmt_time(r['ns'])} | {rate} | ±{r['noise']:.0f} % |")
        print()


if __name__ == "__main__":
    main()
