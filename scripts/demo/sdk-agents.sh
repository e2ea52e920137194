#!/usr/bin/env bash
# The SDK agent examples of `make e2e` (docs/demo.md, "The SDK agents"): examples/python/agent.py
# and examples/node/agent/agent.js, each a tool loop on llmsession's body path through the
# official `openai` SDK, against the e2e run's llama-server (no server of their own):
#
#   LLMSESSION_CLI=target/release/llmsession scripts/demo/sdk-agents.sh BASE_URL OUTDIR
#
# BASE_URL is the server's root (http://127.0.0.1:PORT). Each example runs twice on one log:
# script turns 1-2, then 3-4 as a resumed instance, streaming every request but the one that gets
# the host-scripted tool call, with --check (verify rebuilt every request; the server read from
# cache at least 99 % of what explain expected). Then the CLI verifies each log and shows its
# explain. The Node example is type-checked first (tsc -p examples/node/agent).
# The SDKs are installed by the project's own pinned files: examples/python/requirements.txt
# into OUTDIR/python-venv, examples/node/agent/package-lock.json with `npm ci`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
CLI="${LLMSESSION_CLI:?set LLMSESSION_CLI to the built llmsession inspector}"
URL="${1:?usage: $0 BASE_URL OUTDIR}"
OUT="${2:?usage: $0 BASE_URL OUTDIR}"
SCRIPT="$ROOT/examples/go/demo/script.json"
mkdir -p "$OUT"

say() { printf '\n== %s\n' "$*"; }

# runs NAME LOG CMD...: the example twice on LOG (turns 1-2, then 3-4 resumed), then the CLI.
runs() {
    local name="$1" log="$2"
    shift 2
    rm -f "$log"
    say "$name: turns 1-2"
    "$@" --base-url "$URL/v1" --log "$log" --script "$SCRIPT" --turns 1-2 --check
    say "$name: turns 3-4, resumed"
    "$@" --base-url "$URL/v1" --log "$log" --script "$SCRIPT" --turns 3-4 --check
    say "$name: llmsession verify, explain"
    "$CLI" verify "$log"
    "$CLI" explain "$log"
    grep -q '"instance":2' "$log" || {
        echo "$name: the second run did not resume the session (no instance 2 in $log)" >&2
        return 1
    }
}

python_agent() {
    local venv="$OUT/python-venv"
    [[ -x "$venv/bin/python" ]] || "${PYTHON:-python3}" -m venv "$venv"
    # Satisfied pins are not looked up again.
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r examples/python/requirements.txt
    # The package from the checkout's source: it finds build/lib of this checkout.
    runs python "$OUT/python-agent.jsonl" env PYTHONPATH="$ROOT/bindings/python/src" \
        "$venv/bin/python" examples/python/agent.py
}

node_agent() {
    # The binding's own dependencies (koffi; typescript for the type check), as `make node-deps`.
    [[ bindings/node/node_modules/.package-lock.json -nt bindings/node/package-lock.json ]] ||
        (cd bindings/node && npm ci --no-audit --no-fund --loglevel=error)
    [[ examples/node/agent/node_modules/.package-lock.json -nt examples/node/agent/package-lock.json ]] ||
        (cd examples/node/agent && npm ci --no-audit --no-fund --loglevel=error)
    bindings/node/node_modules/.bin/tsc --noEmit -p examples/node/agent
    runs node "$OUT/node-agent.jsonl" env LLMSESSION_LIB="$ROOT/build/lib/libllmsession.so" \
        node examples/node/agent/agent.js
}

python_agent
node_agent
echo
echo "sdk agents: passed"
