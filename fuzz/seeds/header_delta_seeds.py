#!/usr/bin/env python3
"""Seeds for the header_delta fuzz target (fuzz/fuzz_targets/header_delta.rs): a base header
(first line, JSON) and a header delta (the rest), docs/header-delta.md.

The headers come from the scenario files (each agent's options and listener prefix, then every
setOptions change) and from the demo's recorded session (texts shortened). Each header is
paired with the next one of its scenario and with edits of its own (a system line added,
removed or changed, the prompt dropped, tools removed, reordered, changed and added, another
model, a prefix added or dropped); the delta of each pair is computed the way `diff` writes it
(seedlib.header_diff: common leading and trailing lines; removed, changed, order, added; whole
config and prefix), plus the single arms alone, an empty delta and a base with no delta line.
For the first twelve headers: deltas that must be refused (each rule of docs/header-delta.md,
"Validation"), the deltas and bases with a field removed or of a wrong type (seedlib.mutations)
and texts that are not JSON. Usage:

    python3 fuzz/seeds/header_delta_seeds.py OUTDIR
"""
import seedlib


def tool(name, description):
    return {"name": name, "description": description, "parameters": {"type": "object"}}


lines = seedlib.lines
diff = seedlib.header_diff


def edits(h):
    """Headers one change away from `h`."""
    out = []
    system = h.get("system") or ""
    sl = lines(system)
    out.append(dict(h, system="Rule zero." + ("\n" + system if system else "")))
    out.append(dict(h, system=(system + "\n" if system else "") + "A rule at the end."))
    if len(sl) > 1:
        out.append(dict(h, system="\n".join(sl[:1] + ["a line in the middle"] + sl[1:])))
        out.append(dict(h, system="\n".join(sl[1:])))
    if system:
        out.append({k: v for k, v in h.items() if k != "system"})
        out.append(dict(h, system=system + "\n"))
    tools = h.get("tools", [])
    out.append(dict(h, tools=[tool("grep", "Search files")] + tools))
    if tools:
        out.append(dict(h, tools=tools[1:]) if len(tools) > 1 else {k: v for k, v in h.items() if k != "tools"})
        out.append(dict(h, tools=[dict(tools[0], description=tools[0].get("description", "") + " (v2)")] + tools[1:]))
        out.append(dict(h, tools=tools[1:] + [tool(seedlib.tool_key(tools[0]), "replaced")]))
    if len(tools) > 1:
        out.append(dict(h, tools=list(reversed(tools))))
    out.append(dict(h, config=dict(h["config"], model=h["config"].get("model", "m") + "-next")))
    out.append(dict(h, config=dict(h["config"], maxTokens=512, temperature=0.5)))
    if h.get("messagePrefix"):
        out.append({k: v for k, v in h.items() if k != "messagePrefix"})
    else:
        out.append(dict(h, messagePrefix=[seedlib.user_msg("Project notes: keep answers short.")]))
    return out


def headers():
    """Every scenario's header history, and the recorded session's headers."""
    histories = []
    for _, d in seedlib.scenarios():
        h = seedlib.header_of(d.get("agent", {}), d.get("listeners"))
        hist = [h]
        for o in d.get("ops", []):
            if o["op"] == "setOptions" and "expectError" not in o:
                h = dict(h)
                for key in ("config", "system", "tools"):
                    if key in o:
                        if o[key]:
                            h[key] = o[key]
                        else:
                            h.pop(key, None)
                hist.append(h)
        histories.append(hist)
    recorded = [r["data"]["header"] for r in seedlib.shrink(seedlib.recorded_log(), 60) if r["type"] == "request/header"]
    histories.append(recorded)
    return histories


def seed(base, delta):
    return (seedlib.compact(base) + "\n" + seedlib.compact(delta)).encode()


def refused(base):
    """Deltas that parse as JSON but that `from_value` or `apply` must refuse, each naming what is
    wrong (docs/header-delta.md, "Validation")."""
    tools = base.get("tools", [])
    name = seedlib.tool_key(tools[0]) if tools else "read"
    n = len(lines(base.get("system")))
    g = tool("grep", "Search files")
    return [
        {"system": {"keepLeading": n, "keepTrailing": 1, "insert": []}},
        {"system": {"keepLeading": -1, "keepTrailing": 0, "insert": []}},
        {"system": {"keepLeading": 0, "keepTrailing": 0, "insert": ["two\nlines"]}},
        {"system": {"keepLeading": 0, "keepTrailing": 0}},
        {"system": {"keepLeading": 0, "keepTrailing": 0, "insert": [], "extra": 1}},
        {"system": None},
        {"tools": {}},
        {"tools": {"removed": ["nope"]}},
        {"tools": {"removed": [name, name]}},
        {"tools": {"removed": [name], "changed": [dict(tools[0], description="v2") if tools else g]}},
        {"tools": {"changed": [g]}},
        {"tools": {"order": [name, name]}},
        {"tools": {"order": ["nope"]}},
        {"tools": {"added": [{"index": 0, "tool": g}, {"index": 0, "tool": tool("find", "Find")}]}},
        {"tools": {"added": [{"index": 5, "tool": g}]}},
        {"tools": {"added": [{"index": 0, "tool": tools[0] if tools else g, "extra": 1}]}},
        {"tools": {"added": [{"index": 0, "tool": tools[0]}]}} if tools else {"tools": {"removed": []}},
        {"config": {"provider": "p"}},
        {"messagePrefix": [{"role": "assistant", "content": []}]},
        {"messagePrefix": None},
        {"unknown": {}},
    ]


def generate():
    seeds = []
    for hist in headers()[:12]:
        base = hist[0]
        seeds += [seed(base, d) for d in refused(base)]
        for e in edits(base)[:4]:
            d = diff(base, e)
            if d:
                seeds += [seed(base, m) for m in seedlib.mutations(d, 3)]
        seeds += [(m if isinstance(m, str) else seedlib.compact(m)).encode() + b"\n{}" for m in seedlib.mutations(base, 2)[:40]]
        seeds += [t.encode() for t in seedlib.broken_json(seedlib.compact(base) + "\n" + seedlib.compact(diff(base, edits(base)[0])))]
    # The parser's rarer paths, inside a config (which keeps fields it does not know) and as a
    # system prompt edit.
    for odd in seedlib.json_oddities():
        seeds.append(('{"config":{"provider":"p","model":"m","extra":' + odd + '}}\n{"config":{"provider":"p","model":"m2","x":' + odd + "}}").encode())
        seeds.append(('{"config":{"provider":"p","model":"m"},"system":' + odd + '}\n{"system":{"keepLeading":0,"keepTrailing":0,"insert":[' + odd + "]}}").encode())
    for hist in headers():
        for a, b in zip(hist, hist[1:]):
            d = diff(a, b)
            if d:
                seeds.append(seed(a, d))
        base = hist[0]
        seeds.append(seedlib.compact(base).encode())
        seeds.append(seed(base, {}))
        for e in edits(base):
            d = diff(base, e)
            if not d:
                continue
            seeds.append(seed(base, d))
            if len(d) > 1:
                seeds += [seed(base, {k: v}) for k, v in d.items()]
    return seeds


if __name__ == "__main__":
    seedlib.main(generate)
