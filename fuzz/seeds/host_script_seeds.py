#!/usr/bin/env python3
"""Seeds for the host_script fuzz target (fuzz/fuzz_targets/host_script.rs): the bytes the
driver in tests/support/host_script.rs decodes into host operations (the first three bytes
configure the world, then one byte picks each operation, modulo 20, and the next bytes are its
arguments).

Each scenario file (tests/scenarios/*.json) is translated into that encoding: its turns,
requests, responses with their tool calls, tool results, turn ends, injections, provider
errors, compactions, resumes, forks, option, policy and summariser changes. Added to them: the
16 scripts of tests/reliability.rs `host_script_smoke` (the same xorshift bytes), a short script
per operation after a complete turn with tool calls, and the fork sequences of finding F1
(docs/reliability.md). Usage:

    python3 fuzz/seeds/host_script_seeds.py OUTDIR

Operation numbers and argument bytes must match `World::run` in tests/support/host_script.rs.
"""
import seedlib

(TURN, REQUEST, RESPOND, RESPOND_CALLS, TOOL_RESULT, INJECT, PROVIDER_ERROR, END_TURN, COMPACT,
 RESUME, FORK, DISPOSE, SET_OPTIONS, KNOBS, SET_POLICY, HOST_APPEND) = (0, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19)
REASONS = ["completed", "completed", "aborted", "error", "rejected", "max-tokens", "disposed", "interrupted"]
SUMMARISERS = {"fixed": 0, "fail": 1, "empty": 2, "cancel": 3, "append-during": 4, "truncated": 5}


def nearest(values, v):
    """The index of the value closest to `v` (0 for what is not a number: the policy-validation
    scenarios pass strings)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0
    return min(range(len(values)), key=lambda i: abs(values[i] - v))


def byte(v, unit):
    """`v / unit` as one byte (0 for what is not a number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0
    return max(0, min(int(v // unit), 255))


class Script:
    """Bytes for the driver, with the state it needs to encode the next operation."""

    def __init__(self, check_requests=1, pre_step=0, prefix=0):
        self.out = bytearray([check_requests, pre_step, prefix])
        self.prefix = prefix
        self.calls = 0
        self.pending = []

    def text(self, s):
        # text(): 1 = "<what> N", 3 = "<what> words words ..." (long texts).
        n = len(s) if isinstance(s, str) else 0
        self.out += bytes([3, 39]) if n > 200 else bytes([1, n % 256])

    def turn(self, s="x"):
        self.out.append(TURN)
        self.text(s)

    def request(self):
        self.out += bytes([REQUEST, 1])

    def respond(self, s="", calls=0, usage=None):
        calls = min(calls, 3)
        self.out.append(RESPOND_CALLS if calls else RESPOND)
        self.text(s)
        if calls:
            self.out.append(calls)
            for i in range(calls):
                self.out += bytes([1, i % 2])  # a new id; read or write
            self.pending = [f"call_{self.calls + i + 1}" for i in range(calls)]
            self.calls += calls
        if isinstance(usage, dict):
            # Usage: inputTokens = byte * 40, outputTokens = byte, cacheReadTokens = byte * 10.
            self.out += bytes([1, byte(usage.get("inputTokens"), 40), byte(usage.get("outputTokens"), 1),
                               byte(usage.get("cacheReadTokens"), 10)])
        else:
            self.out.append(0)

    def tool_result(self, is_error=False):
        self.out.append(TOOL_RESULT)
        if self.pending:
            self.out += bytes([1, 0])
            self.pending.pop(0)
        elif self.calls:
            self.out.append(0)
        self.out.append(0 if is_error else 1)

    def end_turn(self, reason="completed"):
        self.out += bytes([END_TURN, REASONS.index(reason) if reason in REASONS else 0])
        self.pending = []

    def inject(self, s="x"):
        self.out.append(INJECT)
        self.text(s)

    def provider_error(self, overflow=False):
        self.out += bytes([PROVIDER_ERROR, 1 if overflow else 0])

    def compact(self, span=None):
        if span:
            self.out += bytes([COMPACT, 0, span[0] % 256, max(0, min(span[1] - span[0], 3))])
        else:
            self.out += bytes([COMPACT, 1])

    def resume(self, reload=False):
        self.out += bytes([RESUME, 1 if reload else 0])
        self.pending = []

    def fork(self, seed=None):
        self.out += bytes([FORK, 1]) if seed is None else bytes([FORK, 0, seed])
        self.pending = []

    def dispose(self, whole=True):
        self.out += bytes([DISPOSE, 1 if whole else 0])

    def set_options(self, what, n=0):
        self.out += bytes([SET_OPTIONS, what]) + (bytes([n]) if what < 3 else b"")

    def knobs(self, summariser=0, pre_step=0, prefix=None):
        prefix = self.prefix if prefix is None else prefix
        self.out += bytes([KNOBS, summariser | (pre_step << 3) | (prefix << 5)])

    def set_policy(self, p):
        if not isinstance(p, dict):
            self.out += bytes([SET_POLICY, 0])
            return
        w = 1 + nearest([9000, 12000, 20000], p.get("contextWindow", 12000))
        t = nearest([0.01, 0.05, 0.5], p.get("threshold", 0.5))
        r = nearest([0, 40, 400], p.get("retainedTokens", 40))
        self.out += bytes([SET_POLICY, w, t, r])

    def host_append(self, what, n=0):
        self.out += bytes([HOST_APPEND, what]) + (bytes([n]) if what != 1 else b"")


def scenario(d):
    s = Script(prefix=1 if d.get("listeners") else 0)
    if d.get("policy"):
        s.set_policy(d["policy"])
    kind = (d.get("summariser") or {}).get("kind")
    if kind in SUMMARISERS:
        s.knobs(SUMMARISERS[kind])
    for o in d.get("ops", []):
        k = o["op"]
        if k == "turn":
            s.turn(seedlib.text_of(o["user"]))
        elif k == "request":
            s.request()
        elif k == "respond":
            s.respond(seedlib.text_of(o.get("text", "")), len(o.get("toolCalls", [])), o.get("usage"))
        elif k == "toolResult":
            s.tool_result(o.get("isError", False))
        elif k == "endTurn":
            s.end_turn(o.get("reason", "completed"))
        elif k == "inject":
            s.inject(seedlib.text_of(o["user"]))
        elif k == "providerError":
            s.provider_error(o.get("overflow", False))
        elif k == "compact":
            s.compact(o.get("span"))
        elif k in ("resume", "load"):
            s.resume(o.get("reload", k == "load"))
        elif k == "fork":
            s.fork()
        elif k == "setOptions":
            for i, key in enumerate(("system", "tools", "config")):
                if key in o:
                    s.set_options(i, min(255, len(str(o[key]))))
        elif k == "setPolicy":
            s.set_policy(o.get("policy"))
        elif k == "setSummariser" and o["summariser"].get("kind") in SUMMARISERS:
            s.knobs(SUMMARISERS[o["summariser"]["kind"]])
    return bytes(s.out)


def smoke_scripts():
    """The 16 inputs of tests/reliability.rs `host_script_smoke` (xorshift, 400 bytes each)."""
    out = []
    mask = (1 << 64) - 1
    for seed in range(16):
        x = ((seed * 0x9E3779B97F4A7C15) & mask) | 1
        data = bytearray()
        for _ in range(400):
            x ^= (x << 13) & mask
            x ^= x >> 7
            x ^= (x << 17) & mask
            data.append(x & 0xFF)
        out.append(bytes(data))
    return out


def per_operation():
    """A complete turn with two tool calls, then each operation once, then another turn."""
    out = []
    extra = [
        lambda s: s.turn("y" * 300), lambda s: s.request(), lambda s: s.respond("r", 0, {"inputTokens": 4000, "outputTokens": 20}),
        lambda s: s.tool_result(True), lambda s: s.inject("note"), lambda s: s.provider_error(True),
        lambda s: s.end_turn("aborted"), lambda s: s.compact(), lambda s: s.compact((0, 2)), lambda s: s.resume(True),
        lambda s: s.resume(False), lambda s: s.fork(), lambda s: s.fork(0), lambda s: s.dispose(True), lambda s: s.dispose(False),
        lambda s: s.set_options(0, 7), lambda s: s.set_options(1, 1), lambda s: s.set_options(2, 1), lambda s: s.set_options(3),
        lambda s: s.knobs(4, 1, 1), lambda s: s.knobs(1, 2, 2), lambda s: s.set_policy({"contextWindow": 9000, "threshold": 0.01, "retainedTokens": 0}),
        lambda s: s.host_append(0, 1), lambda s: s.host_append(1), lambda s: s.host_append(2, 7),
    ]
    for op in extra:
        s = Script()
        s.set_policy({"contextWindow": 12000, "threshold": 0.05, "retainedTokens": 40})
        s.turn("read both files")
        s.request()
        s.respond("reading", 2, {"inputTokens": 800, "outputTokens": 12, "cacheReadTokens": 400})
        s.tool_result()
        s.tool_result()
        s.request()
        s.respond("done")
        s.end_turn()
        op(s)
        s.turn("and now?")
        s.request()
        s.respond("ok")
        s.end_turn()
        out.append(bytes(s.out))
    return out


def finding_f1():
    """Forks seeded with no events and with events an earlier ancestor wrote (docs/reliability.md,
    F1), then a reload of each."""
    s = Script()
    s.host_append(0, 1)
    s.host_append(0, 2)
    s.fork(0)
    s.resume(True)
    t = Script()
    t.host_append(0, 1)
    t.host_append(0, 2)
    t.fork()
    t.host_append(0, 3)
    t.fork(1)
    t.resume(True)
    return [bytes(s.out), bytes(t.out)]


def generate():
    return [scenario(d) for _, d in seedlib.scenarios()] + smoke_scripts() + per_operation() + finding_f1()


if __name__ == "__main__":
    seedlib.main(generate)
