#!/usr/bin/env python3
"""The Python resume harness of benches/bindings.sh (docs/performance.md, "Resume and memory
against a naive host"), on the resume fixture in DIR (`bench_bindings write-log DIR EVENTS`),
through ctypes on the C ABI (the entry points of naive_host.py).

    python3 benches/python/resume.py time LIB DIR ITERATIONS OUT
    python3 benches/python/resume.py memory LIB DIR

`time` runs, back to back in alternating order, per iteration: the naive host's resume (read
DIR/session.jsonl and json.loads every line: it checks nothing and builds no body) and
llmsession's (lls_session_open_file of a fresh copy of the log, copied untimed: it reads it,
checks the hash chain and every event, and derives the history; lls_agent_new,
lls_agent_set_renderer, lls_agent_start_turn, lls_agent_next_body, then frees everything).
Iteration 0 warms up. Appends "lls_ns naive_ns" per timed iteration to OUT and prints "bytes=N
digest=D" (the body built).

`memory` opens the small log DIR/warm/session.jsonl, builds its body and frees everything (the
library's one-off costs), reads VmRSS from
/proc/self/status, opens a fresh copy of the log, reads it again, builds the next body (held),
reads it a third time and prints "memory file=BYTES open_kib=GROWTH body_kib=GROWTH".
"""
import ctypes as C
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from naive_host import P, SZ, Lib, RequestInfo  # noqa: E402


def inputs(d):
    lines = [x.rstrip(b"\n") for x in open(os.path.join(d, "inputs.jsonl"), "rb") if x.strip()]
    return lines[0], lines[2]


class Resumed:
    """A session opened from a file, with an agent and its next body (freed by close())."""

    def __init__(self, l, path, agent_opts, user):
        self.l, err = l, P()
        self.session, self.agent, self.ptr = P(), P(), P()
        p = path.encode()
        opts = b'{"durability":"never"}'
        l.check(l.session_open_file(p, len(p), opts, len(opts), C.byref(self.session), C.byref(err)), err, "open_file")
        l.check(l.agent_new(self.session, agent_opts, len(agent_opts), C.byref(self.agent), C.byref(err)), err, "agent_new")
        l.check(l.agent_set_renderer(self.agent, b"openai", 6, None, 0, C.byref(err)), err, "set_renderer")
        turn = C.c_uint64()
        l.check(l.agent_start_turn(self.agent, user, len(user), C.byref(turn), C.byref(err)), err, "start_turn")
        n, info = SZ(), RequestInfo()
        l.check(l.agent_next_body(self.agent, None, C.byref(self.ptr), C.byref(n), C.byref(info), C.byref(err)), err, "next_body")
        self.bytes, self.digest = n.value, info.digest.decode()

    def close(self):
        self.l.string_free(self.ptr)
        self.l.lib.lls_agent_free(self.agent)
        self.l.lib.lls_session_free(self.session)


def naive(path):
    with open(path, "rb") as f:
        return [json.loads(x) for x in f.read().split(b"\n") if x]


def run_time(l, d, iterations, outfile):
    agent_opts, user = inputs(d)
    log = os.path.join(d, "session.jsonl")
    tmp = tempfile.mkdtemp(prefix="lls-resume-")
    clock = time.perf_counter_ns
    samples, res = [], None
    try:
        i = 0
        while len(samples) < iterations:
            copy = os.path.join(tmp, f"resume-{i}.jsonl")
            shutil.copyfile(log, copy)

            def lls_run():
                nonlocal res
                t0 = clock()
                r = Resumed(l, copy, agent_opts, user)
                r.close()
                res = r
                return clock() - t0

            def naive_run():
                t0 = clock()
                naive(log)
                return clock() - t0

            if i % 2 == 0:
                ln, nn = lls_run(), naive_run()
            else:
                nn, ln = naive_run(), lls_run()
            os.remove(copy)
            if i > 0:
                samples.append(f"{ln} {nn}")
            i += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open(outfile, "w") as f:
        f.write("\n".join(samples) + "\n")
    print(f"bytes={res.bytes} digest={res.digest}")


def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("resume.py: no VmRSS in /proc/self/status")


def run_memory(l, d):
    agent_opts, user = inputs(d)
    tmp = tempfile.mkdtemp(prefix="lls-resume-")
    try:
        copy = os.path.join(tmp, "resume.jsonl")
        shutil.copyfile(os.path.join(d, "session.jsonl"), copy)
        size = os.path.getsize(copy)
        # The library's one-off costs (its code paged in, lazily built tables, the allocator's
        # first arenas) are not the session's: a small log of the same shape (DIR/warm) is
        # opened, a body built from it and everything freed before the first reading.
        warm = os.path.join(tmp, "warm.jsonl")
        shutil.copyfile(os.path.join(d, "warm", "session.jsonl"), warm)
        Resumed(l, warm, agent_opts, user).close()
        before = rss_kib()
        s, err = P(), P()
        p = copy.encode()
        opts = b'{"durability":"never"}'
        l.check(l.session_open_file(p, len(p), opts, len(opts), C.byref(s), C.byref(err)), err, "open_file")
        opened = rss_kib()
        agent, ptr = P(), P()
        l.check(l.agent_new(s, agent_opts, len(agent_opts), C.byref(agent), C.byref(err)), err, "agent_new")
        l.check(l.agent_set_renderer(agent, b"openai", 6, None, 0, C.byref(err)), err, "set_renderer")
        turn = C.c_uint64()
        l.check(l.agent_start_turn(agent, user, len(user), C.byref(turn), C.byref(err)), err, "start_turn")
        n, info = SZ(), RequestInfo()
        l.check(l.agent_next_body(agent, None, C.byref(ptr), C.byref(n), C.byref(info), C.byref(err)), err, "next_body")
        built = rss_kib()
        print(f"memory file={size} open_kib={opened - before} body_kib={built - before} body={n.value}")
        l.string_free(ptr)
        l.lib.lls_agent_free(agent)
        l.lib.lls_session_free(s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    a = sys.argv[1:]
    if len(a) == 5 and a[0] == "time":
        run_time(Lib(a[1]), a[2], int(a[3]), a[4])
    elif len(a) == 3 and a[0] == "memory":
        run_memory(Lib(a[1]), a[2])
    else:
        sys.exit("usage: resume.py time LIB DIR ITERATIONS OUT | memory LIB DIR")


if __name__ == "__main__":
    main()
