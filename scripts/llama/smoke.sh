#!/usr/bin/env bash
# Prompt-cache smoke check for the local llama-server (reused by CI).
#
#   scripts/llama/smoke.sh [BASE_URL]
#
# Without BASE_URL it uses the server from scripts/llama/server.sh; if that one is not running it
# is started for the check and stopped again afterwards.
#
# Requests, all OpenAI-style /v1/chat/completions with temperature 0:
#   0. /apply-template with tools, an assistant tool call and a tool result: the rendered prompt
#      must contain the tool list, the <tool_call> and the <tool_response>.
#   1. system + tools + user                                       (cold)
#   2. request 1 + the assistant's reply + a new user message      must read request 1 from cache
#   3. request 2 + its reply + an assistant tool call + tool result + user
#                                                                  must read request 2 from cache
#   4. a different system prompt (another conversation)            interleaved
#   5. request 3 + its reply + a new user message                  cache figure reported
# Exit status: 0 when 0-3 pass, 1 when a check fails, 2 when the server cannot be reached.
# Request 5 is informational: with the default one slot and --cache-ram 0 the interleaved
# request 4 replaces the slot's cache; set SMOKE_EXPECT_INTERLEAVED=hit or =miss to assert it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
url="${1:-}"
started_here=0
if [[ -z "$url" ]]; then
    if ! url="$("$here/server.sh" url 2>/dev/null)"; then
        url="$("$here/server.sh" start)" || exit 2
        started_here=1
    fi
fi
cleanup() { if ((started_here)); then "$here/server.sh" stop || true; fi; }
trap cleanup EXIT

python3 - "$url" "${SMOKE_EXPECT_INTERLEAVED:-any}" <<'PY'
import json, sys, urllib.error, urllib.request

base, expect_interleaved = sys.argv[1].rstrip("/"), sys.argv[2]
failures = []

def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        print(f"FAIL {path}: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}")
        sys.exit(1)
    except (urllib.error.URLError, OSError) as e:
        print(f"FAIL cannot reach {base}{path}: {e}")
        sys.exit(2)

def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file from the project and return its content.",
        "parameters": {"type": "object",
                       "properties": {"path": {"type": "string", "description": "file path"}},
                       "required": ["path"]},
    },
}, {
    "type": "function",
    "function": {
        "name": "list_dir",
        "description": "List the entries of a directory.",
        "parameters": {"type": "object",
                       "properties": {"path": {"type": "string"}},
                       "required": ["path"]},
    },
}]
SYSTEM = ("You are a careful coding assistant working in a small Rust repository. "
          "Answer briefly. Use the tools when you need to look at files.")

def chat(messages, tools=TOOLS):
    # plain OpenAI fields only: caching must come from the server's defaults, as for a host
    body = {"model": "SmolLM2-135M-Instruct", "messages": messages, "max_tokens": 24,
            "temperature": 0, "seed": 42}
    if tools:
        body["tools"] = tools
    r = post("/v1/chat/completions", body)
    u, t = r.get("usage", {}), r.get("timings", {})
    msg = r["choices"][0]["message"]
    return {
        "prompt_tokens": u.get("prompt_tokens"),
        "cached_tokens": u.get("prompt_tokens_details", {}).get("cached_tokens"),
        "cache_n": t.get("cache_n"),
        "prompt_n": t.get("prompt_n"),
        "prompt_ms": t.get("prompt_ms"),
        "reply": msg.get("content") or "",
        "tool_calls": msg.get("tool_calls"),
    }

def show(name, r):
    print(f"     {name}: prompt_tokens={r['prompt_tokens']} cached_tokens={r['cached_tokens']} "
          f"timings.cache_n={r['cache_n']} timings.prompt_n={r['prompt_n']} "
          f"prompt_ms={r['prompt_ms']:.1f}")

def reads_prefix(name, r, prev_prompt_tokens):
    # "almost all": the whole previous prompt, give or take one token at the boundary
    check(r["cached_tokens"] is not None and r["cache_n"] is not None,
          f"{name}: response has usage.prompt_tokens_details.cached_tokens and timings.cache_n")
    if r["cached_tokens"] is None or r["cache_n"] is None:
        return
    check(r["cached_tokens"] == r["cache_n"], f"{name}: cached_tokens == timings.cache_n")
    check(r["cache_n"] + r["prompt_n"] == r["prompt_tokens"],
          f"{name}: cache_n + prompt_n == prompt_tokens")
    check(r["cached_tokens"] >= prev_prompt_tokens - 1,
          f"{name}: read the previous prompt from cache "
          f"({r['cached_tokens']} cached >= {prev_prompt_tokens} - 1)")

# 0. the template renders tools, tool calls and tool results
tool_call = {"id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": json.dumps({"path": "Cargo.toml"})}}
tpl = post("/apply-template", {"messages": [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Which crate name is in Cargo.toml?"},
    {"role": "assistant", "content": "", "tool_calls": [tool_call]},
    {"role": "tool", "tool_call_id": "call_1", "content": "[package]\nname = \"llmsession\""},
], "tools": TOOLS}).get("prompt", "")
check("<tools>" in tpl and '"read_file"' in tpl and '"list_dir"' in tpl,
      "template: tool list rendered inside <tools>")
check("<tool_call>" in tpl and "Cargo.toml" in tpl, "template: assistant tool call rendered as <tool_call>")
check("<tool_response>" in tpl and 'name = "llmsession"' in tpl,
      "template: tool result rendered as <tool_response>")

# 1. cold request
conv = [{"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What does the file src/lib.rs usually contain in a Rust library?"}]
r1 = chat(conv)
show("request 1 (cold)", r1)
check(r1["prompt_tokens"] and r1["prompt_tokens"] > 100, "request 1: prompt includes system and tools")

# 2. extension of request 1
conv += [{"role": "assistant", "content": r1["reply"]},
         {"role": "user", "content": "And what goes into Cargo.toml?"}]
r2 = chat(conv)
show("request 2 (extends 1)", r2)
reads_prefix("request 2", r2, r1["prompt_tokens"])

# 3. extension with a tool round: assistant tool call + tool result
conv += [{"role": "assistant", "content": r2["reply"]},
         {"role": "user", "content": "Read Cargo.toml and tell me the crate name."},
         {"role": "assistant", "content": "", "tool_calls": [tool_call]},
         {"role": "tool", "tool_call_id": "call_1", "content": "[package]\nname = \"llmsession\"\nversion = \"0.1.0\""}]
r3 = chat(conv)
show("request 3 (extends 2, tool round)", r3)
reads_prefix("request 3", r3, r2["prompt_tokens"])

# 4. interleaved request with a different system prompt
r4 = chat([{"role": "system", "content": "You are a terse poet. Reply in one line."},
           {"role": "user", "content": "Write about autumn leaves."}], tools=None)
show("request 4 (different system prompt)", r4)

# 5. extension of request 3 after the interleaved request
conv += [{"role": "assistant", "content": r3["reply"]},
         {"role": "user", "content": "Thanks. Anything else worth checking?"}]
r5 = chat(conv)
show("request 5 (extends 3, after 4)", r5)
hit = r5["cached_tokens"] is not None and r5["cached_tokens"] >= r3["prompt_tokens"] - 1
print(f"info interleaved different-prefix request: request 5 read "
      f"{r5['cached_tokens']} of {r5['prompt_tokens']} prompt tokens from cache -> "
      f"{'HIT (prefix was kept or restored)' if hit else 'MISS (slot cache was replaced)'}")
if expect_interleaved in ("hit", "miss"):
    check(hit == (expect_interleaved == "hit"), f"interleaved: expected {expect_interleaved}")

print(json.dumps({"r1": r1["prompt_tokens"], "r2": [r2["prompt_tokens"], r2["cached_tokens"]],
                  "r3": [r3["prompt_tokens"], r3["cached_tokens"]],
                  "r4": [r4["prompt_tokens"], r4["cached_tokens"]],
                  "r5": [r5["prompt_tokens"], r5["cached_tokens"]]}))
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("smoke: all cache checks passed")
PY
