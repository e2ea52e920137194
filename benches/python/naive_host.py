#!/usr/bin/env python3
"""The Python naive-host harness of benches/bindings.sh (docs/performance.md, "The provider body
against a naive host").

    python3 benches/python/naive_host.py LIB DIR ITERATIONS OUT [body|render]

There is no Python binding: llmsession is called through ctypes, straight on the C ABI
(include/llmsession.h), from the shared library LIB. llmsession and a naive Python host build
the same OpenAI chat-completions body side by side, step by step, on the fixture in DIR
(`bench_bindings write DIR N`, plus the provider replies in DIR/replies.jsonl that the driver
writes). The naive host is what a Python host without the library does: it keeps the body as
dicts and lists (the messages in the provider's shape) and per step parses the provider's reply
with json.loads, appends the assistant message and the tool result, and serialises the whole
body with json.dumps (compact separators, ensure_ascii=False: the library's bytes). It starts
from the first request's body as the library rendered it, parsed (untimed), so both start on
identical bytes; after every step the bodies are compared byte for byte and the harness fails
(exit 1) on the first difference.

llmsession: "body" (the default) is the hot path: lls_agent_set_renderer once, then per step
lls_agent_record_body(reply), lls_agent_record_tool_result and lls_agent_next_body (the body
read in place through a memoryview, freed once compared); "render" is the path before it
(lls_parse_response, lls_agent_record_response, lls_agent_record_tool_result,
lls_agent_next_request and lls_render_with_options of the envelope).

Each step times the pair back to back, in alternating order: "next" is the body build alone
(for llmsession with lls_string_free, after the comparison; json.dumps for the naive host, which returns a str: its encoding to bytes is not counted),
"step" the whole step. Round 0 warms up. Appends "lls_next naive_next lls_step naive_step" (ns)
per timed step to OUT, writes the last body of the first timed round to OUT.body and prints
"bytes=N digest=D" (the body's length, the envelope's digest).
"""
import ctypes as C
import json
import os
import sys
import time

P = C.c_void_p
SZ = C.c_size_t
ST = C.c_int32


class RequestInfo(C.Structure):
    """lls_request_info (include/llmsession.h)."""

    _fields_ = [
        ("instance", C.c_uint64),
        ("turn", C.c_uint64),
        ("step", C.c_uint64),
        ("step_seq", C.c_uint64),
        ("purpose", C.c_uint32),
        ("prefix_len", C.c_uint32),
        ("message_count", C.c_uint32),
        ("shared_messages", C.c_uint32),
        ("envelope_len", C.c_size_t),
        ("digest", C.c_char * 72),
    ]


class Lib:
    """The entry points the harness calls, with their C signatures."""

    def __init__(self, path):
        lib = C.CDLL(path)
        self.lib = lib

        def f(name, *args):
            fn = getattr(lib, name)
            fn.restype = ST
            fn.argtypes = list(args)
            return fn

        E = C.POINTER(P)  # lls_error **
        OUT = [C.POINTER(P), C.POINTER(SZ), E]
        self.session_open_file = f("lls_session_open_file", C.c_char_p, SZ, C.c_char_p, SZ, C.POINTER(P), E)
        self.session_fork = f("lls_session_fork", P, C.c_char_p, SZ, C.POINTER(P), E)
        self.agent_new = f("lls_agent_new", P, C.c_char_p, SZ, C.POINTER(P), E)
        self.agent_start_turn = f("lls_agent_start_turn", P, C.c_char_p, SZ, C.POINTER(C.c_uint64), E)
        self.agent_record_tool_result = f("lls_agent_record_tool_result", P, C.c_char_p, SZ, C.POINTER(SZ), E)
        self.agent_record_response = f("lls_agent_record_response", P, C.c_char_p, SZ, C.POINTER(C.c_uint64), E)
        self.agent_next_request = f("lls_agent_next_request", P, P, *OUT)
        self.agent_request_info = f("lls_agent_request_info", P, *OUT)
        self.parse_response = f("lls_parse_response", C.c_char_p, SZ, C.c_char_p, SZ, *OUT)
        self.render_with_options = f("lls_render_with_options", C.c_char_p, SZ, C.c_char_p, SZ, C.c_char_p, SZ, *OUT)
        self.string_free = lib.lls_string_free
        self.string_free.restype = None
        self.string_free.argtypes = [P]
        for name in ("lls_agent_free", "lls_session_free", "lls_error_free"):
            getattr(lib, name).restype = None
            getattr(lib, name).argtypes = [P]
        lib.lls_error_message.restype = C.c_char_p
        lib.lls_error_message.argtypes = [P]
        self.hot = hasattr(lib, "lls_agent_next_body")
        if self.hot:
            self.agent_set_renderer = f("lls_agent_set_renderer", P, C.c_char_p, SZ, C.c_char_p, SZ, E)
            self.agent_record_body = f(
                "lls_agent_record_body", P, C.c_char_p, SZ, C.POINTER(C.c_uint64), C.POINTER(C.c_uint32), E)
            self.agent_next_body = f(
                "lls_agent_next_body", P, P, C.POINTER(P), C.POINTER(SZ), C.POINTER(RequestInfo), E)

    def check(self, status, err, what):
        if status != 0:
            msg = self.lib.lls_error_message(err) if err else b"(no error object)"
            if err:
                self.lib.lls_error_free(err)
            raise RuntimeError(f"{what}: status {status}: {msg.decode()}")

    def take(self, ptr, n):
        """Copies and frees an owned output."""
        b = C.string_at(ptr, n)
        self.string_free(ptr)
        return b


class LlsHost:
    """llmsession's side: `body` is the last body built (a memoryview over the library's
    buffer in the hot path), valid until done()."""

    def __init__(self, lib, agent, mode):
        self.l, self.a, self.mode = lib, agent, mode
        self.body, self.digest, self._ptr = None, "", None
        self.err = P()
        self.seq = C.c_uint64()
        self.calls = C.c_uint32()
        self.written = SZ()
        self.out = P()
        self.n = SZ()
        self.info = RequestInfo()
        if mode == "body":
            if not lib.hot:
                raise SystemExit("naive_host.py: this library has no lls_agent_next_body (use mode 'render')")
            self.l.check(self.l.agent_set_renderer(agent, b"openai", 6, None, 0, C.byref(self.err)), self.err, "set_renderer")
        elif mode != "render":
            raise SystemExit(f"naive_host.py: mode {mode!r}: expected 'body' or 'render'")

    def record(self, reply, result):
        l, err = self.l, self.err
        if self.mode == "body":
            l.check(l.agent_record_body(self.a, reply, len(reply), C.byref(self.seq), C.byref(self.calls), C.byref(err)), err, "record_body")
        else:
            l.check(l.parse_response(b"openai", 6, reply, len(reply), C.byref(self.out), C.byref(self.n), C.byref(err)), err, "parse_response")
            parsed = l.take(self.out, self.n.value)
            l.check(l.agent_record_response(self.a, parsed, len(parsed), C.byref(self.seq), C.byref(err)), err, "record_response")
        l.check(l.agent_record_tool_result(self.a, result, len(result), C.byref(self.written), C.byref(err)), err, "record_tool_result")

    def build(self):
        l, err, out, n = self.l, self.err, self.out, self.n
        if self.mode == "body":
            l.check(l.agent_next_body(self.a, None, C.byref(out), C.byref(n), C.byref(self.info), C.byref(err)), err, "next_body")
            self._ptr = out.value
            self.body = memoryview((C.c_char * n.value).from_address(out.value)).cast("B")
            self.digest = self.info.digest.decode()
            return
        l.check(l.agent_next_request(self.a, None, C.byref(out), C.byref(n), C.byref(err)), err, "next_request")
        env = l.take(out, n.value)
        l.check(l.agent_request_info(self.a, C.byref(out), C.byref(n), C.byref(err)), err, "request_info")
        info = json.loads(l.take(out, n.value))
        opts = json.dumps({"prefixLen": info["prefixLen"]}).encode()
        l.check(l.render_with_options(b"openai", 6, env, len(env), opts, len(opts), C.byref(out), C.byref(n), C.byref(err)), err, "render")
        self.body = l.take(out, n.value)
        self.digest = info["digest"]

    def done(self):
        if self.body is not None and self._ptr is not None:
            self.body.release()
            self.l.string_free(self._ptr)
        self.body, self._ptr = None, None


class NaiveHost:
    """The naive host: the body as dicts, keys in the library's (sorted) order."""

    def __init__(self, first):
        self.state = json.loads(bytes(first))
        self.build()
        if self.text.encode() != bytes(first):
            raise SystemExit("naive_host.py: the naive host does not write the first body back as it was")

    def record(self, reply, result):
        m = json.loads(reply)["choices"][0]["message"]
        msg = {"content": m["content"], "role": m["role"]}
        if m.get("tool_calls"):
            msg["tool_calls"] = [
                {"function": {"arguments": c["function"]["arguments"], "name": c["function"]["name"]}, "id": c["id"], "type": c["type"]}
                for c in m["tool_calls"]
            ]
        t = json.loads(result)
        self.state["messages"].append(msg)
        self.state["messages"].append({"content": "\n".join(b["text"] for b in t["content"]), "role": "tool", "tool_call_id": t["callId"]})

    def build(self):
        self.text = json.dumps(self.state, ensure_ascii=False, separators=(",", ":"))


def difference(got, want):
    i = 0
    while i < len(got) and i < len(want) and got[i] == want[i]:
        i += 1
    return f"{len(got)} and {len(want)} bytes, first difference at byte {i}: {got[max(0, i - 60):i + 60]!r} instead of {want[max(0, i - 60):i + 60]!r}"


def main():
    if len(sys.argv) < 5:
        sys.exit("usage: naive_host.py LIB DIR ITERATIONS OUT [body|render]")
    libpath, d, iterations, outfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    mode = sys.argv[5] if len(sys.argv) > 5 else "body"
    l = Lib(libpath)
    read = lambda f: [x.rstrip(b"\n") for x in open(os.path.join(d, f), "rb") if x.strip()]
    lines, replies = read("inputs.jsonl"), read("replies.jsonl")
    agent_opts, fork_opts, user, exchanges = lines[0], lines[1], lines[2], lines[3:]
    if len(replies) != len(exchanges) // 2:
        sys.exit(f"naive_host.py: replies.jsonl has {len(replies)} replies for {len(exchanges) // 2} exchanges")
    err = P()
    parent = P()
    path = os.path.join(d, "session.jsonl").encode()
    popts = b'{"durability":"never"}'
    l.check(l.session_open_file(path, len(path), popts, len(popts), C.byref(parent), C.byref(err)), err, "open_file")
    clock = time.perf_counter_ns
    samples, last, digest = [], b"", ""
    rnd = 0
    while len(samples) < iterations:
        child, agent = P(), P()
        l.check(l.session_fork(parent, fork_opts, len(fork_opts), C.byref(child), C.byref(err)), err, "fork")
        l.check(l.agent_new(child, agent_opts, len(agent_opts), C.byref(agent), C.byref(err)), err, "agent_new")
        turn = C.c_uint64()
        l.check(l.agent_start_turn(agent, user, len(user), C.byref(turn), C.byref(err)), err, "start_turn")
        h = LlsHost(l, agent, mode)
        h.build()
        naive = NaiveHost(h.body)
        h.done()
        for k in range(0, len(exchanges) - 1, 2):
            if rnd > 0 and len(samples) == iterations:
                break
            reply, result = replies[k // 2], exchanges[k + 1]

            def lls_step():
                t0 = clock()
                h.record(reply, result)
                t1 = clock()
                h.build()
                t2 = clock()
                return t2 - t1, t2 - t0

            def naive_step():
                t0 = clock()
                naive.record(reply, result)
                t1 = clock()
                naive.build()
                t2 = clock()
                return t2 - t1, t2 - t0

            if (k // 2) % 2 == 0:
                (ln, ls), (nn, ns) = lls_step(), naive_step()
            else:
                (nn, ns), (ln, ls) = naive_step(), lls_step()
            got = naive.text.encode()
            if got != h.body:
                sys.stderr.write(f"naive_host.py: round {rnd}, exchange {k // 2}: the naive host's body differs from llmsession's: {difference(got, bytes(h.body))}\n")
                sys.exit(1)
            if rnd == 1:
                last, digest = bytes(h.body), h.digest
            # Freeing the body is part of llmsession's cost (after the comparison, which reads it).
            r0 = clock()
            h.done()
            r = clock() - r0
            if rnd > 0:
                samples.append(f"{ln + r} {nn} {ls + r} {ns}")
        l.lib.lls_agent_free(agent)
        l.lib.lls_session_free(child)
        rnd += 1
    l.lib.lls_session_free(parent)
    with open(outfile, "w") as f:
        f.write("\n".join(samples) + "\n")
    with open(outfile + ".body", "wb") as f:
        f.write(last)
    print(f"bytes={len(last)} digest={digest}")


if __name__ == "__main__":
    main()
