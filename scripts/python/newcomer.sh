#!/usr/bin/env bash
# The Python newcomer path (docs/python.md, "Install" and "One turn"), run from a temporary
# directory outside the checkout: a virtual environment, `pip install <repo>/bindings/python`,
# a one-turn program, the same program again (it resumes the log), and a verify of the log. The
# package finds the library in build/lib of the checkout it was installed from (`make
# build-lib` first); LLMSESSION_LIB is unset so that this route is the one tested.
# Usage: newcomer.sh [REPO]   (PYTHON= the interpreter, default python3)
set -euo pipefail
repo=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
unset LLMSESSION_LIB PYTHONPATH

fail() { echo "python-newcomer: $*" >&2; exit 1; }
step() { echo "python-newcomer: $*"; }

"$python" -m venv venv
venv/bin/pip install --quiet --disable-pip-version-check "$repo/bindings/python" ||
    fail "pip install $repo/bindings/python failed"
step "pip install $repo/bindings/python: ok ($(venv/bin/python -c 'import llmsession; print(llmsession.library_path)'))"

# The one-turn program of docs/python.md: a canned provider reply, so no server is needed.
cat > turn.py <<'PY'
import json
import sys

import llmsession

opts = {"config": {"provider": "llama.cpp", "model": "smollm2"}, "system": "Be brief."}
with llmsession.Session.open_file("chat.jsonl") as session, llmsession.Agent(session, opts) as agent:
    agent.set_renderer("openai")
    agent.start_turn(sys.argv[1])
    body = agent.next_body()
    reply = {"choices": [{"message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 14, "completion_tokens": 3}}
    agent.record_body(json.dumps(reply))
    agent.end_turn()
    print(json.dumps({"instance": body.info["instance"], "turn": body.info["turn"],
                      "messages": body.info["messageCount"], "shared": body.info["sharedMessages"]}))
PY

first=$(venv/bin/python turn.py "Hi!") || fail "the one-turn program failed"
[[ $first == '{"instance": 1, "turn": 1, "messages": 1, "shared": 0}' ]] || fail "first run printed $first"
step "one turn: $first"

second=$(venv/bin/python turn.py "And again?") || fail "the resumed run failed"
[[ $second == '{"instance": 2, "turn": 2, "messages": 3, "shared": 1}' ]] || fail "resumed run printed $second"
step "resume: $second"

report=$(venv/bin/python -c 'import json, llmsession; print(json.dumps(llmsession.verify_file("chat.jsonl")))') ||
    fail "verify failed"
venv/bin/python - "$report" <<'PY' || fail "verify reported $report"
import json, sys
r = json.loads(sys.argv[1])
assert r["requests"] == 2 and r["events"] > 0, r
PY
step "verify: $report"
step ok
