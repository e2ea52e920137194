#!/usr/bin/env bash
# The agent-tree part of `make e2e` (docs/demo.md, "The agent tree"), run by scripts/demo/run.sh
# on the server the demo session used:
#
#   scripts/demo/tree.sh URL OUT
#
# examples/go/tree (LLMSESSION_TREE) runs a lead that reads five files and hands two tasks to
# two children running in parallel, goes on with their answers, then wakes the first child from
# its log; each child's first request, and the woken child's, must read >= 95 % of its prompt
# from the server's cache. Then `llmsession tree` verifies every node and link, and `llmsession
# explain --tree` prints the tree's explain. The server keeps one slot with --cache-ram (set by
# run.sh): siblings share everything up to their directives, and the woken child's last prompt
# is restored from host RAM when the lead's conversation has replaced it in the slot.
set -euo pipefail

URL="${1:?usage: tree.sh URL OUT}"
OUT="${2:?usage: tree.sh URL OUT}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TREE_HOST="${LLMSESSION_TREE:?set LLMSESSION_TREE to the built tree host (build/go/llmsession-tree)}"
CLI="${LLMSESSION_CLI:?set LLMSESSION_CLI to the built llmsession inspector}"
MIN_READ="${LLMSESSION_TREE_MIN_READ:-0.95}"

say() { printf '\n== %s\n' "$*"; }

rm -rf "$OUT"
mkdir -p "$OUT"
say "e2e: an agent tree (examples/go/tree), logs in $OUT"
"$TREE_HOST" -base-url "$URL/v1" -model SmolLM2-135M-Instruct -dir "$OUT" \
    -prefix-dir "$ROOT/examples/go/demo/prefix" -workspace "$ROOT/examples/go/demo/workspace" \
    -report "$OUT/report.json" -min-read "$MIN_READ"

say "llmsession tree $OUT/lead.jsonl"
"$CLI" tree "$OUT/lead.jsonl"

say "llmsession explain $OUT/lead.jsonl --tree"
"$CLI" explain "$OUT/lead.jsonl" --tree
"$CLI" explain "$OUT/lead.jsonl" --tree --json >"$OUT/explain-tree.json"
python3 - "$OUT/explain-tree.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
kids = [n for n in t["nodes"] if n["kind"] == "spawn"]
assert len(kids) == 2, f"two children, got {[n['id'] for n in kids]}"
for n in kids:
    f = n["spawnFloor"]
    assert f["promptTokens"] > 0 and f["cachedTokens"] > 0, f"{n['id']}: no usage on its first request"
    assert n.get("answeredAt") is not None, f"{n['id']}: the lead does not record its answer"
print("e2e tree: every child answered its call; spawn floors read "
      + ", ".join(f"{n['id']} {100 * n['spawnFloor']['cachedTokens'] / n['spawnFloor']['promptTokens']:.1f}%" for n in kids))
PY
