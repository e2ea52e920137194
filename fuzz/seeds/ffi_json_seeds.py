#!/usr/bin/env python3
"""Seeds for the ffi_json fuzz target (fuzz/fuzz_targets/ffi_json.rs): one byte that picks the
parser (its value modulo 12), then the JSON argument a C caller would pass.

Every argument comes from the repository's inputs: the scenario files (agent options, configs,
tools, policies, user and assistant messages, listener messages, summaries, usage, headers),
the logs the scenarios would write (seedlib.scenario_log: their events, to append to a fresh
session, and their messages and blocks), the demo's recorded session (usage, headers) and the
header deltas of seedlib.header_diff; then the first values of each kind made invalid
(seedlib.mutations, cut short, not UTF-8) and seedlib.json_oddities. Usage:

    python3 fuzz/seeds/ffi_json_seeds.py OUTDIR
"""
import seedlib

(OPTIONS, MESSAGE, MESSAGES, EVENT, POLICY_TABLE, POLICY, SUMMARY, USAGE, TOOLS, CONFIG, BLOCK,
 HEADER) = range(12)


def generate():
    args = {k: [] for k in range(12)}

    def add(kind, v):
        if v is not None and v not in args[kind]:
            args[kind].append(v)

    for name, d in seedlib.scenarios():
        agent = d.get("agent", {})
        add(OPTIONS, agent)
        add(OPTIONS, dict(agent, checkRequests=True))
        add(CONFIG, agent.get("config"))
        add(TOOLS, agent.get("tools"))
        header = seedlib.header_of(agent, d.get("listeners"))
        add(HEADER, header)
        for lst in d.get("listeners", []):
            add(MESSAGES, lst.get("messages"))
        if d.get("policy"):
            add(POLICY, d["policy"])
            add(POLICY_TABLE, d["policy"])
            add(POLICY_TABLE, {"default": d["policy"], "models": {agent.get("config", {}).get("model", "m"): d["policy"]}})
        summ = d.get("summariser") or {}
        if summ.get("text"):
            add(SUMMARY, {"text": summ["text"], "usage": summ.get("usage", {"inputTokens": 10, "outputTokens": 5})})
        for o in d.get("ops", []):
            k = o["op"]
            if k == "setPolicy" and isinstance(o.get("policy"), dict):
                add(POLICY, o["policy"])
            elif k == "setOptions":
                add(CONFIG, o.get("config"))
                add(TOOLS, o.get("tools"))
                add(OPTIONS, {x: o[x] for x in ("config", "system", "tools") if x in o})
            elif k == "respond" and o.get("usage"):
                add(USAGE, o["usage"])
            elif k == "setSummariser" and o["summariser"].get("text"):
                add(SUMMARY, {"text": o["summariser"]["text"]})
        records = seedlib.scenario_log(name, d, 1500)
        for r in records[1:]:
            ev = {k: v for k, v in r.items() if k in ("type", "data", "surfaceOp")}
            if sum(e["type"] == ev["type"] for e in args[EVENT]) < 4:
                add(EVENT, ev)
            msg = r["data"].get("message")
            if msg:
                add(MESSAGE, msg)
                for b in msg.get("content", []):
                    add(BLOCK, b)
        msgs = [r["data"]["message"] for r in records if r["type"].endswith("/message")]
        add(MESSAGES, msgs[:6])
    for r in seedlib.shrink(seedlib.recorded_log(), 60):
        data = r.get("data", {})
        add(USAGE, data.get("usage"))
        if r["type"] == "request/header":
            add(HEADER, data["header"])
            add(CONFIG, data["header"]["config"])
    add(EVENT, {"type": "host/note", "data": {"n": 1}})
    add(EVENT, {"type": "user/message", "data": {"message": seedlib.user_msg("host context"), "source": "host"}, "surfaceOp": "append"})
    add(SUMMARY, {"text": "", "truncated": True})
    for h in list(args[HEADER])[:20]:
        edited = dict(h, system=(h.get("system") or "") + "\nOne more rule.", config=dict(h["config"], model="other"))
        add(HEADER, seedlib.header_diff(h, edited))
    seeds = [bytes([kind]) + seedlib.compact(v).encode() for kind in range(12) for v in args[kind]]
    # What each parser must refuse, naming the field: the first values of each kind with a field
    # removed or of a wrong type, cut short, and not UTF-8; and the JSON parser's rarer paths.
    for kind in range(12):
        for v in args[kind][:3]:
            seeds += [bytes([kind]) + seedlib.compact(m).encode() for m in seedlib.mutations(v, 2)]
            seeds += [bytes([kind]) + t.encode() for t in seedlib.broken_json(v)]
        seeds += [bytes([kind]) + odd.encode() for odd in seedlib.json_oddities()]
        seeds += [bytes([kind]) + b'{"text":"\xff\xfe"}', bytes([kind])]
    return seeds


if __name__ == "__main__":
    seedlib.main(generate)
