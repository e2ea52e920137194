#!/usr/bin/env python3
"""Seeds for the load_log fuzz target (fuzz/fuzz_targets/load_log.rs): the bytes of JSONL logs.

From the repository's own logs: the log each scenario file (tests/scenarios/*.json) would write
(seedlib.scenario_log, cut at the first turn end past 2 KB) in format 2 (chained), in format 1,
and with its header changes written as deltas; and the first two turns of the demo's recorded
session (examples/go/demo/recorded-session.jsonl, written by the library; texts shortened).
Each log also comes damaged the ways a crash or an edit leaves one: no final newline (torn),
cut inside its last record, its last record dropped (an open turn to repair), a line that is
not JSON at the end, a record edited in the middle (a broken chain), two records swapped. Each
event type also comes with its data and envelope made invalid (seedlib.mutations), and a host
event carries seedlib.json_oddities. Hand-picked regression inputs are committed in fuzz/seeds/load_log/ (docs/reliability.md, F5
and F6). Usage:

    python3 fuzz/seeds/load_log_seeds.py OUTDIR
"""
import seedlib

LIMIT = 2000


def jsonl(lines, final_newline=True):
    return b"\n".join(lines) + (b"\n" if final_newline else b"")


def variants(lines):
    out = [jsonl(lines), jsonl(lines, final_newline=False)]
    if len(lines) > 1:
        last = lines[-1]
        out.append(jsonl(lines[:-1]) + last[: len(last) // 2])
        out.append(jsonl(lines[:-1]))
        out.append(jsonl(lines + [b"not json"]))
    if len(lines) > 3:
        mid = len(lines) // 2
        edited = lines[mid].replace(b'"time":', b'"time":1', 1)
        out.append(jsonl(lines[:mid] + [edited] + lines[mid + 1:]))
        out.append(jsonl(lines[:mid] + [lines[mid + 1], lines[mid]] + lines[mid + 2:]))
    return out


def with_deltas(records):
    """The same log with every `change` snapshot written as a header delta (as a delta writer
    would), or None when it has none."""
    out, prev, changed = [], None, False
    for r in records:
        if r["type"] == "request/header":
            h = r["data"]["header"]
            if r["data"]["reason"] == "change" and prev is not None:
                r = dict(r, type="request/header-delta", data={"delta": seedlib.header_diff(prev, h), "instance": r["data"]["instance"]})
                changed = True
            prev = h
        out.append(r)
    return out if changed else None


def generate():
    seeds = []
    for name, d in seedlib.scenarios():
        records = seedlib.scenario_log(name, d, LIMIT)
        seeds += variants(seedlib.seal(records, 2))
        seeds.append(jsonl(seedlib.seal(records, 1)))
        deltas = with_deltas(records)
        if deltas:
            seeds.append(jsonl(seedlib.seal(deltas, 2)))
    # Every event type broken the ways validation names (seedlib.mutations of its data, and of
    # its envelope), in the first log that has it: the log cut right after the broken event (a
    # damaged unfinished turn, cut on open) and, for the data, whole (damage before a complete
    # turn, refused naming the line).
    done = set()
    for name, d in seedlib.scenarios():
        records = seedlib.scenario_log(name, d, LIMIT)
        for i, r in enumerate(records[1:], 1):
            if r["type"] in done:
                continue
            done.add(r["type"])
            for k, m in enumerate(seedlib.mutations(r["data"], 1)):
                broken = records[:i] + [dict(r, data=m)] + records[i + 1:]
                seeds.append(jsonl(seedlib.seal(broken[: i + 1], 2)))
                if k % 3 == 0:
                    seeds.append(jsonl(seedlib.seal(broken, 2)))
            envelope = {k: v for k, v in r.items() if k != "data"}
            for m in seedlib.mutations(envelope, 1):
                seeds.append(jsonl(seedlib.seal(records[:i] + [dict(m, data=r["data"])], 2)))
    # The JSON parser's rarer paths in the data of a host event, and a session header field.
    for odd in seedlib.json_oddities():
        seeds.append(('{"type":"session","format":"llmsession","version":1,"id":"odd","createdAt":1,"note":' + odd + "}\n"
                      '{"type":"host/note","seq":0,"time":1,"data":{"v":' + odd + "}}\n").encode())
    # The first two turns of the recorded session as the library wrote them (version 1), and
    # chained (version 2).
    recorded = seedlib.shrink(seedlib.recorded_log(), 40)
    ends = [i for i, r in enumerate(recorded) if r["type"] == "turn/end"]
    head = recorded[: ends[1] + 1]
    seeds += variants([seedlib.compact(r).encode() for r in head])
    seeds.append(jsonl(seedlib.seal(head, 2)))
    seeds.append(b"")
    return seeds


if __name__ == "__main__":
    seedlib.main(generate)
