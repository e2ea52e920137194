"""Shared helpers of the seed generators (fuzz/seeds/<target>_seeds.py).

Every generator reads only files of this repository (the scenario files, tests/data, the
recorded demo log), uses no randomness it does not seed itself, and names each seed by the
SHA-1 of its bytes, so the same checkout always gives the same corpus
(scripts/fuzz/corpus.sh builds build/fuzz-corpus/<target> from them).
"""
import glob
import hashlib
import json
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def path(*parts):
    return os.path.join(ROOT, *parts)


def compact(v):
    """JSON text as the library writes it: no spaces, UTF-8 kept as it is."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def scenarios():
    """(file name, parsed scenario) for every tests/scenarios/*.json, in name order."""
    out = []
    for f in sorted(glob.glob(path("tests", "scenarios", "*.json"))):
        with open(f, encoding="utf-8") as fh:
            out.append((os.path.basename(f), json.load(fh)))
    return out


def stream_replies():
    """(format, parsed whole reply) for the provider replies in tests/data/stream/*.json."""
    formats = {"openai-chat": "openai", "openai-responses": "openai-responses", "anthropic": "anthropic", "gemini": "gemini"}
    out = []
    for f in sorted(glob.glob(path("tests", "data", "stream", "*.json"))):
        name = os.path.basename(f)
        if name.endswith(".stream.json"):
            continue
        fmt = next((v for k, v in formats.items() if name.startswith(k)), None)
        if fmt:
            with open(f, encoding="utf-8") as fh:
                out.append((fmt, json.load(fh)))
    return out


def recorded_log():
    """The records of the demo's recorded session (a real log the library wrote, version 1)."""
    with open(path("examples", "go", "demo", "recorded-session.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def text_of(v, limit=1500):
    """A scenario text: a string, or {"$repeat": s, "times": n}; cut to `limit` characters."""
    if isinstance(v, dict) and "$repeat" in v:
        v = v["$repeat"] * v.get("times", 1)
    return str(v)[:limit]


def shrink(v, limit):
    """`v` with every string longer than `limit` cut to it (keeps seeds small)."""
    if isinstance(v, str):
        return v[:limit]
    if isinstance(v, list):
        return [shrink(x, limit) for x in v]
    if isinstance(v, dict):
        return {k: shrink(x, limit) for k, x in v.items()}
    return v


def write_seeds(outdir, seeds):
    """Writes each seed (bytes) as OUTDIR/<sha1>; returns how many distinct ones were written."""
    os.makedirs(outdir, exist_ok=True)
    names = set()
    for s in seeds:
        name = hashlib.sha1(s).hexdigest()
        names.add(name)
        with open(os.path.join(outdir, name), "wb") as fh:
            fh.write(s)
    return len(names)


def main(generate):
    """The command line of every generator: `<generator>.py OUTDIR`."""
    if len(sys.argv) != 2:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} OUTDIR")
    n = write_seeds(sys.argv[1], generate())
    print(f"{n} seeds in {sys.argv[1]}")


# ---------------------------------------------------------------------------------------------
# Logs

def seal(records, version=2):
    """The JSONL bytes of `records` (the session header first, then events). Version 2 ends every
    event with its chained digest (docs/log.md): sha256(previous link || record without the
    field), starting from sha256(header record)."""
    header = dict(records[0], version=version)
    lines = [compact(header)]
    link = hashlib.sha256(lines[0].encode()).digest()
    for ev in records[1:]:
        body = compact(ev)
        if version == 2:
            link = hashlib.sha256(link + body.encode()).digest()
            body = body[:-1] + ',"chain":"' + link.hex() + '"}'
        lines.append(body)
    return [line.encode() for line in lines]


def user_msg(text):
    return {"role": "user", "content": [{"type": "text", "text": text}]}


class LogWriter:
    """Writes the events an agent would log for a scenario's ops, following the log rules of
    docs/log.md (turns, steps, tool pairing, headers, head-region compaction). Times are fixed, so
    the output is the same on every run. An op that would break a rule is skipped."""

    def __init__(self, session_id, header):
        self.records = [{"type": "session", "format": "llmsession", "version": 2, "id": session_id, "createdAt": 1700000000000}]
        self.header = header
        self.written_header = None
        self.instance = 1
        self.reason = "initial"
        self.turn = 0
        self.open_turn = False
        self.step = 0
        self.open_step = False
        self.pending = []
        self.surface = []
        self.calls = 0

    def add(self, kind, data, surface=None, sources=None):
        ev = {"type": kind, "seq": len(self.records) - 1, "time": 1700000000000 + len(self.records), "data": data}
        if surface is not None:
            ev["surfaceOp"] = surface
        if sources is not None:
            ev["sources"] = sources
        if surface == "append":
            self.surface.append(ev["seq"])
        self.records.append(ev)

    def size(self):
        return sum(len(compact(r)) + 80 for r in self.records)

    def start_turn(self, text):
        if self.open_turn:
            return
        self.turn += 1
        self.step = 0
        self.open_turn = True
        self.add("turn/start", {"turn": self.turn})
        self.add("user/message", {"message": user_msg(text), "source": "user"}, "append")

    def request(self):
        if not self.open_turn or self.open_step or self.pending:
            return
        if self.written_header != self.header:
            self.add("request/header", {"header": self.header, "reason": self.reason, "instance": self.instance})
            self.written_header = self.header
            self.reason = "change"
        self.step += 1
        self.open_step = True
        body = compact({"header": self.header, "surface": self.surface}).encode()
        self.add("step/start", {"turn": self.turn, "step": self.step, "instance": self.instance,
                                "digest": "sha256:" + hashlib.sha256(body).hexdigest(), "bytes": len(body)})

    def respond(self, text, calls=(), usage=None):
        if not self.open_step:
            return
        content = [{"type": "text", "text": text}] if text else []
        ids = []
        for c in calls:
            self.calls += 1
            cid = c.get("id") or f"call_{self.calls}"
            if cid in ids or any(cid == p for p in self.pending):
                cid = f"{cid}_{self.calls}"
            ids.append((cid, c.get("name", "read"), c.get("arguments", "{}")))
        content += [{"type": "tool-call", "id": i, "name": n, "arguments": a} for i, n, a in ids]
        data = {"turn": self.turn, "step": self.step, "message": {"role": "assistant", "content": content}}
        if usage:
            data["usage"] = usage
        self.add("assistant/message", data, "append")
        for i, n, a in ids:
            self.add("tool/call", {"turn": self.turn, "step": self.step, "callId": i, "name": n, "arguments": a})
        self.add("step/end", {"turn": self.turn, "step": self.step, "outcome": "response"})
        self.open_step = False
        self.pending = [i for i, _, _ in ids]

    def provider_error(self, message):
        if not self.open_step:
            return
        self.add("step/end", {"turn": self.turn, "step": self.step, "outcome": "error", "error": message})
        self.open_step = False

    def tool_result(self, text, is_error=False):
        if self.open_step or not self.pending:
            return
        self.add("tool/result", {"callId": self.pending.pop(0), "content": [{"type": "text", "text": text}], "isError": is_error}, "append")

    def end_turn(self, reason="completed"):
        if not self.open_turn:
            return
        if self.open_step:
            self.add("step/end", {"turn": self.turn, "step": self.step, "outcome": "cancelled"})
            self.open_step = False
        while self.pending:
            self.tool_result("the turn ended before this call was answered", True)
        self.add("turn/end", {"turn": self.turn, "reason": reason})
        self.open_turn = False

    def inject(self, text, source="host"):
        if self.open_step or self.pending:
            return
        self.add("user/message", {"message": user_msg(text), "source": source}, "append")

    def compact(self, summary):
        """A compaction of the whole surface (the head region up to now), landed."""
        if self.open_step or self.pending or not self.surface:
            return
        span = {"start": 0, "end": len(self.surface) - 1}
        seqs = list(self.surface)
        self.add("compaction/start", {"span": span, "seqs": seqs})
        self.add("compaction/summary", {"summary": summary})
        checkpoint = user_msg(f"<conversation-checkpoint>\n{summary}\n</conversation-checkpoint>")
        self.add("user/message", {"message": checkpoint, "source": "compaction"},
                 {"op": "replace", "start": span["start"], "end": span["end"]}, seqs)
        self.surface = [self.records[-1]["seq"]]
        self.add("compaction/end", {"outcome": "landed"})

    def resume(self):
        """A new agent instance: the old one ends its turn (disposed); the next request records a
        `resume` header."""
        if self.open_turn:
            self.end_turn("disposed")
        self.instance += 1
        if self.written_header is not None:
            self.reason = "resume"
            self.written_header = None

    def host_event(self, n):
        self.add("host/note", {"n": n})


def header_of(agent, listeners=None):
    """The request header (`EpochHeader` wire form) of a scenario's agent options; the messages
    its listeners contribute become the session prefix."""
    h = {"config": agent.get("config", {"provider": "test", "model": "m"})}
    if agent.get("system"):
        h["system"] = agent["system"]
    if agent.get("tools"):
        h["tools"] = agent["tools"]
    prefix = [m for lst in (listeners or []) for m in lst.get("messages", [])]
    if prefix:
        h["messagePrefix"] = prefix
    return h


def scenario_log(name, d, limit=None):
    """The log a scenario's ops would write (see LogWriter), stopping at the first turn end past
    `limit` bytes."""
    header = header_of(d.get("agent", {}), d.get("listeners"))
    w = LogWriter("scenario-" + name.rsplit(".", 1)[0], header)
    for o in d.get("ops", []):
        k = o["op"]
        if "expectError" in o:
            continue  # an op the scenario expects to be refused writes nothing
        if k == "turn":
            w.start_turn(text_of(o["user"], 120))
        elif k == "request":
            w.request()
        elif k == "respond":
            w.respond(text_of(o.get("text", ""), 120), o.get("toolCalls", []), o.get("usage"))
        elif k == "toolResult":
            w.tool_result(text_of(o.get("text", ""), 120))
        elif k == "endTurn":
            w.end_turn(o.get("reason", "completed"))
        elif k == "providerError":
            w.provider_error(o.get("message", "error"))
        elif k == "inject":
            w.inject(text_of(o["user"], 120))
        elif k == "compact":
            w.compact("Summary of the work so far.")
        elif k == "resume":
            w.resume()
        elif k == "setOptions":
            h = dict(w.header)
            for key in ("config", "system", "tools"):
                if key in o:
                    if o[key]:
                        h[key] = o[key]
                    else:
                        h.pop(key, None)
            w.header = h
        if limit and not w.open_turn and w.size() > limit:
            break
    w.end_turn("completed")
    return w.records


# ---------------------------------------------------------------------------------------------
# Header deltas

def lines(text):
    """The lines of a system prompt (the empty or absent prompt has none)."""
    return [] if not text else text.split("\n")


def system_arm(a, b):
    al, bl = lines(a), lines(b)
    lead = 0
    while lead < min(len(al), len(bl)) and al[lead] == bl[lead]:
        lead += 1
    trail = 0
    while trail < min(len(al), len(bl)) - lead and al[-1 - trail] == bl[-1 - trail]:
        trail += 1
    return {"keepLeading": lead, "keepTrailing": trail, "insert": bl[lead: len(bl) - trail]}


def tool_key(t):
    """A tool's key in the list, as the library names it (src/types.rs, `ToolSchema`): a
    function's name (also in OpenAI's `{"type":"function","function":{...}}` shape), or for a
    provider tool `"<format>:<key>"`, the key being the tool object's `name`, else its `type`
    (with `:<server_label>` when it has one), else its one field."""
    if t.get("type") == "provider":
        obj = t.get("tool") or {}
        text = lambda k: obj.get(k) if isinstance(obj.get(k), str) and obj.get(k) else None
        if text("name"):
            key = text("name")
        elif text("type"):
            key = text("type") + (":" + text("server_label") if text("server_label") else "")
        else:
            key = next(iter(obj)) if len(obj) == 1 else ""
        return f"{t.get('format')}:{key}"
    if t.get("type") == "function" and isinstance(t.get("function"), dict):
        return t["function"].get("name")
    return t.get("name")


def tools_arm(a, b):
    an = [tool_key(t) for t in a]
    bn = [tool_key(t) for t in b]
    old = {tool_key(t): t for t in a}
    arm = {}
    removed = [n for n in an if n not in bn]
    changed = [t for t in b if tool_key(t) in old and t != old[tool_key(t)]]
    kept_new = [n for n in bn if n in old]
    kept_old = [n for n in an if n in bn]
    added = [{"index": i, "tool": t} for i, t in enumerate(b) if tool_key(t) not in old]
    if removed:
        arm["removed"] = removed
    if changed:
        arm["changed"] = changed
    if kept_new != kept_old:
        arm["order"] = kept_new
    if added:
        arm["added"] = added
    return arm


def header_diff(a, b):
    """The delta from header `a` to `b` as `diff` writes it (docs/header-delta.md)."""
    d = {}
    if a.get("system") != b.get("system"):
        d["system"] = system_arm(a.get("system"), b.get("system"))
    if a.get("tools") != b.get("tools"):
        arm = tools_arm(a.get("tools", []), b.get("tools", []))
        if arm:
            d["tools"] = arm
    if a.get("config") != b.get("config"):
        d["config"] = b["config"]
    if a.get("messagePrefix") != b.get("messagePrefix"):
        d["messagePrefix"] = b.get("messagePrefix", [])
    return d


# ---------------------------------------------------------------------------------------------
# Invalid variants

WRONG = [None, 5, -1, "x", [], {}, True]


def mutations(v, depth=2):
    """Variants of the JSON value `v` that a parser must refuse, naming the field: each key of an
    object removed or given a value of every wrong kind, an unknown key added, each list cut to
    its first element or given a wrong element; the same one level down (to `depth`)."""
    out = []
    if isinstance(v, dict):
        out.append(dict(v, unknownField=1))
        for k, x in v.items():
            out.append({kk: xx for kk, xx in v.items() if kk != k})
            out += [dict(v, **{k: w}) for w in WRONG if w != x and type(w) is not type(x)]
            if depth > 1:
                out += [dict(v, **{k: m}) for m in mutations(x, depth - 1)]
    elif isinstance(v, list) and v:
        out.append(v[:1] + [5])
        out.append(v + v[:1])
        if depth > 1:
            out += [[m] + v[1:] for m in mutations(v[0], depth - 1)]
    return out


def broken_json(text):
    """JSON texts cut short and with a stray byte: syntax errors at different depths."""
    t = text if isinstance(text, str) else compact(text)
    return [t[: len(t) // 2], t[: max(1, len(t) - 1)], t + "}", t.replace(":", " ", 1)]


def json_oddities():
    """JSON texts that take the parser's rarer paths: escapes (surrogate pairs, a lone
    surrogate), numbers that do not fit (the 68-digit integer of finding F6, exponents, -0),
    nesting past the log's limit of 100 levels, a duplicate key, every kind of whitespace."""
    deep = "[" * 101 + "]" * 101
    return [
        '"caf\\u00e9 \\ud83d\\ude00 \\t\\n\\r\\b\\f\\/\\\\\\""',
        '"\\ud800"',
        "23333333333333333333333333333333333333333333333333333333333333333338",
        '[1e400, -0, 0.1, 1.5e-300, -12345678901234567890, 3.141592653589793238462643383279]',
        deep,
        '{"a": ' * 101 + "1" + "}" * 101,
        '{"k": 1, "k": 2}',
        ' \t\r\n{ "k" :\t[ 1 ,\n2 ] }\r\n',
        '"' + "\\u0041" * 40 + '"',
        '{"' + '":1,"'.join(f"k{i}" for i in range(40)) + '":1}',
    ]
