#!/usr/bin/env python3
"""A tool-using agent on llmsession's body path, through the official `openai` SDK.

llmsession builds every request body (agent.next_body), the SDK sends it (llmsession.sdk_kwargs
puts the server's own fields under extra_body), and the reply goes back to llmsession whole
(agent.record_body takes the SDK's ChatCompletion) or streamed (the SDK's raw bytes fed to an
llmsession.Stream). The tool calls come back as data (rec.tool_calls); the host runs read_file
on a workspace and records each result. Each run is one agent instance over the session in
--log: run it again and it resumes the session, its first request carrying the whole history.
At the end it verifies the log (every request rebuilt from it) and explains each request's cache
figures (docs/python.md, "With the official SDKs").

    pip install bindings/python openai==3.60.0
    python examples/python/agent.py --log agent.jsonl "What does weather-cli do?"
    python examples/python/agent.py --log agent.jsonl --script examples/go/demo/script.json --turns 2-3

--base-url: an OpenAI-compatible endpoint (default: the local llama-server of
scripts/llama/server.sh, http://127.0.0.1:8766/v1). A turn of a --script file with "readFile"
gets a host-scripted read_file call when the model makes none in its first reply (the small local
model never calls tools by itself; docs/demo.md, "Host-scripted tool calls"). Requests are
streamed except the one that gets a scripted call (--no-stream: none is). --check exits 1 unless
verify rebuilt every request and, on every request of the run but the session's first, the server
read from its cache at least 99 % of what explain expected (the Go host's rule 9, docs/demo.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import openai

import llmsession as lls

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "You are a coding agent working in the weather-cli repository. Answer briefly. Use the read_file tool to read files."
READ_FILE = {
    "name": "read_file",
    "description": "Read a text file of the workspace. Paths are relative to the workspace root.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "file path, e.g. units/units.go"}},
        "required": ["path"],
    },
}


def read_file(workspace: Path, call: lls.ToolCall) -> Tuple[str, bool]:
    """Runs one read_file call: (text, is_error)."""
    try:
        path = call.arguments["path"]
        target = (workspace / path).resolve()
        if workspace.resolve() not in target.parents:
            return f"{path}: outside the workspace", True
        return target.read_text(encoding="utf-8"), False
    except (ValueError, KeyError, TypeError) as e:
        return f"bad arguments: {e}", True
    except OSError as e:
        return f"{e.strerror}: {path}", True


def scripted_call(completion: Any, turn: int, path: str) -> Dict[str, Any]:
    """The completion as a dict, with a read_file call added to its message."""
    reply = completion.to_dict()
    choice = reply["choices"][0]
    choice["message"]["tool_calls"] = [
        {"id": f"call_t{turn}_1", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}
    ]
    choice["finish_reason"] = "tool_calls"
    return reply


def streamed(client: openai.OpenAI, kwargs: Dict[str, Any], agent: lls.Agent) -> lls.Recorded:
    """One streamed request: the SDK's raw bytes go to an llmsession Stream (the SDK's parsed
    stream drops the `data: [DONE]` the accumulator checks for)."""
    create = client.chat.completions.with_streaming_response.create
    with create(**kwargs, stream=True, stream_options={"include_usage": True}) as resp, lls.Stream("openai") as s:
        print("assistant (streamed): ", end="", flush=True)
        for chunk in resp.iter_bytes():
            s.feed(chunk)
            for d in s.deltas():
                if d["type"] == "text":
                    print(d.get("text", ""), end="", flush=True)
        print()
        return agent.record_stream(s)


def run_turn(client: openai.OpenAI, agent: lls.Agent, session: lls.Session, workspace: Path, user: str, read: Optional[str], stream: bool) -> None:
    create = client.chat.completions.create
    turn = agent.start_turn(user)
    print(f"user: {user}")
    while True:
        body = agent.next_body()
        step = body.info["step"]
        scripted = read is not None and step == 1
        kwargs = lls.sdk_kwargs(create, body)  # cache_prompt and other server fields: extra_body
        try:
            if stream and not scripted:
                rec = streamed(client, kwargs, agent)
            else:
                completion = create(**kwargs)
                text = completion.choices[0].message.content
                if text:
                    print(f"assistant: {text.strip()}")
                if scripted and not completion.choices[0].message.tool_calls:
                    print(f"  (host-scripted tool call: read_file {read})")
                    rec = agent.record_body(scripted_call(completion, turn, read))
                else:
                    rec = agent.record_body(completion)
        except openai.APIStatusError as e:
            overflow = lls.is_context_overflow(e.status_code, e.response.content)
            if agent.provider_error({"message": str(e), "overflow": overflow}):
                print("  context overflow: compacted, retrying")
                continue
            agent.end_turn("error")
            raise
        usage = session.events(rec.seq, rec.seq + 1)[0]["data"].get("usage", {})
        prompt = usage.get("inputTokens", 0) + usage.get("cacheReadTokens", 0)
        print(f"  [request turn {turn} step {step}] prompt {prompt} tokens, cached {usage.get('cacheReadTokens', 0)} (server), finish {rec.finish_reason}")
        if not rec.tool_calls:
            agent.end_turn("max-tokens" if rec.finish_reason == "max-tokens" else "completed")
            return
        for call in rec.tool_calls:
            result, is_error = read_file(workspace, call)
            agent.record_tool_result({"callId": call.id, "text": result, "isError": is_error})
            print(f"  tool {call.name}({json.dumps(call.arguments_json)}): {len(result)} characters{' (error)' if is_error else ''}")


def report(session: lls.Session, instance: int, check: bool) -> bool:
    """verify and explain at the end of the run; with check, the rules (True: all held)."""
    v = session.verify()
    print(f"\nverify: {v['events']} events, {v['requests']} requests rebuilt from the log alone")
    ex = session.explain()
    reqs = [r for r in ex["requests"] if r["kind"] == "conversation"]
    print("explain (cached: the server's figure; expected: what the log says it could read):")
    ok = v["requests"] == len(ex["requests"])
    for r in reqs:
        short = r["id"] != "1" and r["cachedTokens"] * 100 < r["expectedCachedTokens"] * 99
        mark = "  <- below expected" if short else ""
        print(f"  request {r['id']:>2} instance {r['instance']} turn {r['turn']} step {r['step']}: prompt {r['promptTokens']}, "
              f"cached {r['cachedTokens']}, expected {r['expectedCachedTokens']}, cause {r['cause']}{mark}")
        ok = ok and not (short and r["instance"] == instance)
    mine = [r for r in reqs if r["instance"] == instance]
    ok = ok and bool(mine)
    if check:
        print("check: " + ("passed" if ok else "FAILED") + f" ({len(mine)} requests of instance {instance})")
    return ok


def load_turns(args: argparse.Namespace) -> List[Tuple[str, Optional[str]]]:
    turns = [(t, None) for t in args.turn]
    if args.script:
        spec = json.loads(Path(args.script).read_text(encoding="utf-8"))["turns"]
        first, _, last = (args.turns or f"1-{len(spec)}").partition("-")
        for t in spec[int(first) - 1 : int(last or first)]:
            turns.append((t["user"], t.get("readFile")))
    return turns


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("turn", nargs="*", help="user messages, one turn each")
    p.add_argument("--base-url", default=os.environ.get("LLMSESSION_BASE_URL", "http://127.0.0.1:8766/v1"))
    p.add_argument("--model", default=os.environ.get("LLMSESSION_MODEL", "SmolLM2-135M-Instruct"))
    p.add_argument("--log", default="agent.jsonl", help="the session's JSONL log (resumed when it exists)")
    p.add_argument("--workspace", default=str(ROOT / "examples" / "go" / "demo" / "workspace"))
    p.add_argument("--script", help='JSON {"turns": [{"user", "readFile"?}]}')
    p.add_argument("--turns", help="the script's turns to run, e.g. 1-2 (default all)")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--no-stream", action="store_true")
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    turns = load_turns(args)
    if not turns:
        p.error("no turns: give user messages, or --script")

    client = openai.OpenAI(base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "local"))
    # Sampling fields are the call config's pass-through fields: they go into every body.
    config = {"provider": "llama.cpp", "model": args.model, "max_tokens": args.max_tokens, "temperature": 0, "seed": 42}
    with lls.Session.open_file(args.log) as session, lls.Agent(session, {"config": config, "system": SYSTEM, "tools": [READ_FILE]}) as agent:
        agent.set_renderer("openai")
        for user, read in turns:
            run_turn(client, agent, session, Path(args.workspace), user, read, not args.no_stream)
        instance = agent.request_info()["instance"]
        ok = report(session, instance, args.check)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
