#!/usr/bin/env bash
# Resume on another machine, shown (`make e2e-resume`, docs/storage-postgres.md): a session in
# PostgreSQL, two workers, one llama-server.
#
#   worker A  runs two turns in its own working directory and exits;
#   worker B  another process in another working directory (as if on another machine) opens
#             the same session from the database and runs a turn: its first request starts with
#             A's whole conversation, and llama-server reads that prompt from its cache;
#   llmsession verify / stats / sessions read the session straight from PostgreSQL.
#
# Checks: B's first request has at least 90 % of A's last prompt read from cache, the two
# workers were different processes in different directories, a second writer was refused with
# LOCKED while A ran, and verify passes on the stored log.
#
# Run under scripts/pg/server.sh run (which sets LLMSESSION_PG_URL). Environment:
#   LLMSESSION_RESUME  the built example (build/go/llmsession-resume)
#   LLMSESSION_CLI     the built inspector (target/release/llmsession)
#   and the variables of scripts/llama/server.sh (LLMSESSION_CACHE, LLMSESSION_LLAMA_*)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
RESUME="${LLMSESSION_RESUME:?set LLMSESSION_RESUME to the built resume example}"
CLI="${LLMSESSION_CLI:?set LLMSESSION_CLI to the built llmsession inspector}"
PG="${LLMSESSION_PG_URL:?run this under scripts/pg/server.sh run}"
OUT="$ROOT/build/e2e-resume"
rm -rf "$OUT"
mkdir -p "$OUT"

say() { printf '\n== %s\n' "$*"; }

say "llama-server: setup (cached in ${LLMSESSION_CACHE:-$HOME/.cache/llmsession})"
scripts/llama/setup.sh
export LLMSESSION_RUN_DIR="$OUT/run"
LLMSESSION_LLAMA_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
export LLMSESSION_LLAMA_PORT
dir_a="$(mktemp -d)"
dir_b="$(mktemp -d)"
cleanup() {
    scripts/llama/server.sh stop >/dev/null 2>&1 || true
    rm -rf "$dir_a" "$dir_b"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
LLAMA="$(scripts/llama/server.sh start)"
echo "server: $LLAMA"

ID="resume-$(date +%s)-$$"
STORE="$PG?session=$ID"
SHOWN="$(sed -E 's#(://[^:/@]+):[^@]*@#\1@#' <<<"$STORE")" # without the password
REPORT="$OUT/report.jsonl"
common=(-store "$STORE" -base-url "$LLAMA/v1" -model SmolLM2-135M-Instruct -max-tokens 48 -report "$REPORT"
    -system "You are a helpful assistant for a weather command-line tool. Answer in one or two sentences.")

say "worker A (in $dir_a): two turns, session $SHOWN"
(cd "$dir_a" && "$RESUME" "${common[@]}" -worker A \
    "What does a weather command-line tool usually print for the current conditions?" \
    "Which units should it use by default, and why?") &
pid_a=$!
# While A runs, a second writer is refused (A holds the session's lease).
refused=0
for _ in $(seq 1 200); do
    if ! kill -0 "$pid_a" 2>/dev/null; then break; fi
    if out="$(cd "$dir_b" && "$RESUME" -store "$STORE" -base-url "$LLAMA/v1" -worker probe -must-exist "never sent" 2>&1)"; then
        echo "the probe opened the session while worker A held it: $out" >&2
        exit 1
    elif grep -q "another worker is running this session" <<<"$out"; then
        refused=1
        echo "a second writer while A runs: refused ($(grep -o 'the session is in use[^;]*' <<<"$out" | head -n 1))"
        break
    fi
    sleep 0.1
done
wait "$pid_a"

say "worker B (in $dir_b, another process): resumes the session from PostgreSQL"
(cd "$dir_b" && "$RESUME" "${common[@]}" -worker B -must-exist "Give one example of a command a user would type.")

say "llmsession verify $SHOWN"
"$CLI" verify "$STORE"
say "llmsession stats $SHOWN"
"$CLI" stats "$STORE"
say "llmsession sessions (the database)"
"$CLI" sessions "$PG" | grep -E "^(session|$ID)"

say "e2e-resume: checks"
python3 - "$REPORT" "$refused" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
a = [r for r in rows if r["worker"] == "A"]
b = [r for r in rows if r["worker"] == "B"]
assert len(a) == 2 and len(b) == 1, rows
last_a, first_b = a[-1], b[0]
assert first_b["pid"] != last_a["pid"] and first_b["cwd"] != last_a["cwd"], "the workers must be two processes in two directories"
assert first_b["turn"] == 3, f"worker B's first turn is {first_b['turn']}, expected 3 (it resumes after A's two)"
need = 0.9 * last_a["promptTokens"]
ratio = first_b["cachedTokens"] / max(first_b["promptTokens"], 1)
print(f"worker A's last request: {last_a['promptTokens']} prompt tokens; "
      f"worker B's first request: {first_b['promptTokens']} prompt tokens, {first_b['cachedTokens']} read from cache ({ratio:.0%}), "
      f"{first_b['messages']} messages")
assert first_b["cachedTokens"] >= need, f"worker B read {first_b['cachedTokens']} tokens from cache, fewer than 90 % of A's last prompt ({last_a['promptTokens']})"
assert sys.argv[2] == "1", "the second writer was never seen refused while worker A ran"
print("e2e-resume: passed")
PY
