#!/usr/bin/env python3
"""Summarises `llmsession simulate --json` over many sessions (benches/clock.sh, EXTRA_TRANSCRIPTS).

    summary.py SIMULATE.json

Groups the timelines by source (the file name up to its first "__": benches/clock/prepare.py
names a file after its repository) and prints, per group and in aggregate: sessions, requests,
pauses, the cost of each policy, clock / optimal, clock against threshold, how many sessions the
clock costs more than 10 % over threshold, and where the clock's extra cost over the optimum
goes (keep-warm requests during the session, keep-warm after the last request, requests that
found the cache cold).
"""
import json
import os
import sys
from collections import OrderedDict

POLICIES = ["threshold", "clock", "optimal", "clock+compact", "optimal+compact"]


def group_of(t):
    return os.path.basename(t["file"]).split("__")[0]


def row(name, ts):
    s = lambda p, k: sum(t["policies"][p][k] for t in ts)
    c, o, th = s("clock", "cost"), s("optimal", "cost"), s("threshold", "cost")
    cc, oc = s("clock+compact", "cost"), s("optimal+compact", "cost")
    over = sum(1 for t in ts if t["policies"]["clock"]["vsThreshold"] > 1.10)
    return (
        f"| {name} | {len(ts)} | {sum(t['requests'] for t in ts)} | {sum(t['pauses'] for t in ts)} | {th:.2f} | {c:.2f} | {o:.2f} "
        f"| {c / o:.3f} | {(c / th - 1) * 100:+.1f} % | {over} | {cc:.2f} | {oc:.2f} | {cc / oc:.3f} | {(cc / th - 1) * 100:+.1f} % |"
    )


def main(path):
    d = json.load(open(path))
    ts = d["timelines"]
    groups = OrderedDict()
    for t in sorted(ts, key=group_of):
        groups.setdefault(group_of(t), []).append(t)
    print("| source | sessions | requests | pauses | threshold | clock | optimal | clock ÷ optimal | clock vs threshold "
          "| sessions > +10 % | clock+compact | optimal+compact | ratio | clock+compact vs threshold |")
    print("|" + " --- |" * 14)
    for g, gts in groups.items():
        print(row(g, gts))
    print(row("**aggregate**", ts))
    s = lambda p, k: sum(t["policies"][p][k] for t in ts)
    extra = s("clock", "cost") - s("optimal", "cost")
    in_session = (s("clock", "pingCost") - s("clock", "abandonedCost")) - s("optimal", "pingCost")
    requests = (s("clock", "cost") - s("clock", "pingCost")) - (s("optimal", "cost") - s("optimal", "pingCost"))
    print()
    print(f"clock over optimal: {extra:.2f} = keep-warm after the last request {s('clock', 'abandonedCost'):.2f} "
          f"({s('clock', 'pings')} keep-warm requests in all) + more keep-warm during the session {in_session:.2f} "
          f"+ requests {requests:.2f} (cold returns: clock {s('clock', 'coldReturns')}, optimal {s('optimal', 'coldReturns')}, "
          f"threshold {s('threshold', 'coldReturns')}; writes at another tier than recorded: clock {s('clock', 'tierWrites')}, "
          f"optimal {s('optimal', 'tierWrites')})")
    print(f"sessions without pauses: {sum(1 for t in ts if t['pauses'] == 0)}; clock vs threshold on them: "
          + "{:+.1f} %".format((sum(t['policies']['clock']['cost'] for t in ts if t['pauses'] == 0)
                                / max(1e-9, sum(t['policies']['threshold']['cost'] for t in ts if t['pauses'] == 0)) - 1) * 100))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: summary.py SIMULATE.json")
    main(sys.argv[1])
