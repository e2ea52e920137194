#!/usr/bin/env python3
"""Seeds for the ffi_calls fuzz target (fuzz/fuzz_targets/ffi_calls.rs).

Translates every scenario file (tests/scenarios/*.json) into the target's line format,
`[op][param][payload JSON]\\n`, and adds short scripts for each callback mode, and for the hot
path (a renderer per wire format, next_body, record_body with a canned reply and with each
provider reply of tests/data/stream/*.json, last_envelope). Usage:

    python3 fuzz/seeds/ffi_calls_seeds.py OUTDIR

Op numbers must match `State::step` in the target.
"""
import json

import seedlib

OPS = 36
(SESSION_NEW, OPEN_STORE, FORK, SESSION_FREE, APPEND, SESSION_READS, SYNC, AGENT_NEW, SET_OPTIONS,
 SET_POLICY, START_TURN, NEXT_REQUEST, RECORD_RESPONSE, TOOL_RESULT, INJECT, PROVIDER_ERROR, END_TURN,
 COMPACT, AGENT_READS, DISPOSE, AGENT_FREE, CALLBACKS, MODE, CANCEL, HELD_REPLY, RENDER, PARSE_RESPONSE,
 USAGE, OVERFLOW, INVOKE, BAD_HANDLE, ERROR_ACCESSORS, SET_RENDERER, NEXT_BODY, RECORD_BODY,
 LAST_ENVELOPE) = range(36)
HOT_RENDERERS = ["openai", "openai-responses", "anthropic", "gemini", "cobol"]
KINDS = ["prefix", "pre-step", "summariser", "counter", "store", "invoke"]
MODES = ["answer", "fail", "error-no-reply", "ok-no-reply", "unknown-code", "pending-worker",
         "answered-then-pending", "hold", "dispose-self", "free-self", "reenter", "append-session"]


def line(op, p=0, payload=None):
    if op == 10:  # the byte 10 is a newline: the same op, one lap of OPS later
        op += OPS
    if p == 10:
        raise ValueError("param 10 is a newline")
    body = b"" if payload is None else (payload if isinstance(payload, bytes) else
                                        json.dumps(payload, separators=(",", ":")).encode())
    assert b"\n" not in body
    return bytes([op, p]) + body + b"\n"


def mode_param(kind, mode):
    p = KINDS.index(kind) + 6 * MODES.index(mode)
    return p + 72 if p == 10 else p


def user(t):
    return {"role": "user", "content": [{"type": "text", "text": seedlib.text_of(t)}]}


def scenario(d, store):
    out = [line(OPEN_STORE if store else SESSION_NEW)]
    opts = dict(d.get("agent", {}))
    if d.get("policy") is not None:
        opts["policy"] = d["policy"]
    bits = (1 if d.get("listeners") else 0) | (2 if d.get("preStep") else 0) | 4
    summ = d.get("summariser") or {}
    if summ.get("kind") == "fail":
        out.append(line(MODE, mode_param("summariser", "fail")))
    elif summ.get("text"):
        out.append(line(MODE, mode_param("summariser", "answer"), {"text": summ["text"], "usage": summ.get("usage", {"inputTokens": 1, "outputTokens": 1})}))
    out.append(line(AGENT_NEW, bits << 3, opts))
    sessions = 1
    for o in d.get("ops", []):
        k = o["op"]
        if k == "turn":
            out.append(line(START_TURN, 0, user(o["user"])))
        elif k == "request":
            out.append(line(NEXT_REQUEST))
        elif k == "respond":
            content = []
            if o.get("text"):
                content.append({"type": "text", "text": seedlib.text_of(o["text"])})
            for c in o.get("toolCalls", []):
                content.append({"type": "tool-call", "id": c["id"], "name": c["name"], "arguments": c.get("arguments", "{}")})
            body = {"message": {"role": "assistant", "content": content}}
            if o.get("usage"):
                body["usage"] = o["usage"]
            out.append(line(RECORD_RESPONSE, 0, body))
        elif k == "toolResult":
            out.append(line(TOOL_RESULT, 0, {"callId": o["callId"], "text": seedlib.text_of(o.get("text", ""))}))
        elif k == "endTurn":
            out.append(line(END_TURN, 0, o.get("reason", "completed").encode()))
        elif k == "setPolicy":
            out.append(line(SET_POLICY, 0, o["policy"]))
        elif k == "setOptions":
            out.append(line(SET_OPTIONS, 0, {x: o[x] for x in ("config", "system", "tools") if x in o}))
        elif k == "compact":
            out.append(line(COMPACT, 0, {"span": o["span"]} if "span" in o else None))
        elif k == "resume":
            out.append(line(AGENT_FREE))
            if o.get("reload") and store:
                out.append(line(OPEN_STORE, 1))
                out.append(line(AGENT_NEW, (bits << 3) | sessions, opts))
                sessions += 1
            else:
                out.append(line(AGENT_NEW, bits << 3, opts))
        elif k == "inject":
            out.append(line(INJECT, 0, user(o["user"])))
        elif k == "providerError":
            out.append(line(PROVIDER_ERROR, 0, {"message": o.get("message", "error"), "overflow": o.get("overflow", False)}))
        elif k == "fork":
            out.append(line(FORK))
        elif k == "secondAgent":
            out.append(line(AGENT_NEW, bits << 3, opts))
        elif k == "setSummariser":
            s = o["summariser"]
            if s.get("kind") == "fixed":
                out.append(line(MODE, mode_param("summariser", "answer"), {"text": s.get("text", "")}))
            elif s.get("kind") == "fail":
                out.append(line(MODE, mode_param("summariser", "fail")))
            elif s.get("kind") == "empty":
                out.append(line(MODE, mode_param("summariser", "answer"), {"text": ""}))
            elif s.get("kind") == "truncated":
                out.append(line(MODE, mode_param("summariser", "answer"), {"text": "cut", "truncated": True}))
    out += [line(RENDER, 0), line(RENDER, 1), line(AGENT_READS), line(SESSION_READS, 0x80), line(DISPOSE)]
    return b"".join(out)


def mode_scripts():
    """One short script per callback kind and mode: every callback registered, a cancel token,
    a turn with a tool call, a compaction, a held reply answered, an invoke."""
    seeds = []
    for kind in KINDS:
        for mode in MODES:
            s = [line(OPEN_STORE if kind == "store" else SESSION_NEW), line(CANCEL, 0),
                 line(AGENT_NEW, 0xF << 3, {"config": {"provider": "p", "model": "m"}, "system": "s",
                                            "policy": {"contextWindow": 2000, "threshold": 0.3, "retainedTokens": 50, "summaryMaxTokens": 200}}),
                 line(MODE, mode_param(kind, mode)),
                 line(START_TURN, 4), line(NEXT_REQUEST, 8), line(RECORD_RESPONSE, 0x10), line(TOOL_RESULT, 0xF0),
                 line(NEXT_REQUEST, 8), line(RECORD_RESPONSE, 0), line(END_TURN, 0),
                 line(COMPACT, 32), line(HELD_REPLY, 0), line(INVOKE, 1), line(HELD_REPLY, 0x80),
                 line(AGENT_READS), line(SESSION_READS, 0x80), line(FORK), line(BAD_HANDLE, 0), line(BAD_HANDLE, 6),
                 line(AGENT_FREE), line(SESSION_FREE), line(BAD_HANDLE, 8), line(BAD_HANDLE, 3)]
            seeds.append(b"".join(s))
    # The hot path, per wire format: set the renderer, a turn, the body, a canned reply with a
    # tool call, its result, the next body and reply, the envelope.
    for i, r in enumerate(HOT_RENDERERS):
        seeds.append(b"".join([line(SESSION_NEW), line(AGENT_NEW), line(SET_RENDERER, i << 3), line(START_TURN),
                               line(NEXT_BODY), line(RECORD_BODY, 0x10), line(TOOL_RESULT), line(NEXT_BODY),
                               line(RECORD_BODY), line(LAST_ENVELOPE), line(END_TURN), line(AGENT_READS)]))
    # Each recorded provider reply (tests/data/stream) as the raw body of its format.
    for fmt, reply in seedlib.stream_replies():
        i = HOT_RENDERERS.index(fmt)
        body = json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode()
        seeds.append(b"".join([line(SESSION_NEW), line(AGENT_NEW), line(SET_RENDERER, i << 3), line(START_TURN),
                               line(NEXT_BODY), line(RECORD_BODY, 0, body), line(LAST_ENVELOPE), line(END_TURN, 0x10)]))
    # The provider helpers chained into an agent.
    seeds.append(b"".join([line(SESSION_NEW), line(AGENT_NEW), line(START_TURN), line(NEXT_REQUEST),
                           line(PARSE_RESPONSE, 0), line(RECORD_RESPONSE), line(USAGE, 0), line(USAGE, 3),
                           line(OVERFLOW, 1), line(RENDER, 0), line(ERROR_ACCESSORS), line(PROVIDER_ERROR, 8),
                           line(END_TURN, 0x20), line(SYNC), line(APPEND)]))
    return seeds


def generate():
    seeds = []
    for _, d in seedlib.scenarios():
        seeds.append(scenario(d, store=False))
        seeds.append(scenario(d, store=True))
    return seeds + mode_scripts()


if __name__ == "__main__":
    seedlib.main(generate)
