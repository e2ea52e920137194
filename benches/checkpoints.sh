#!/usr/bin/env bash
# Checkpoints and the bounded open (issue #38; docs/performance.md, "Resume from a
# checkpoint"): `make bench-checkpoints`. Writes a log of EVENTS events of the benchmark fixture
# (default 2,500,000: about 1 GB) and one of SMALL events (default 60,000) with the same last
# window (compacted every 40,000 events) into a temporary directory, then, each measurement in a
# process of its own (examples/bench_checkpoints.rs):
#   - PAIRS alternating pairs of a bounded open plus the next body, the big log then the small;
#   - a whole-log open (`"check": "full"`) of the big log, once, for comparison;
#   - `verify` of the big log (time, peak resident growth beside the largest request);
#   - a directory of 10,000 sessions listed whole and in pages of 100;
#   - with LLMSESSION_BENCH_PG=1, the same pairs, whole open and verify on PostgreSQL (a log of
#     PG_EVENTS events, default 500,000, against the SMALL one) and 10,000 sessions listed, on
#     a throwaway server (scripts/pg/server.sh).
# Every log is deleted at the end. Disk: about 1.1 GB (JSONL) and 0.6 GB (the database).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EVENTS="${EVENTS:-2500000}"
SMALL="${SMALL:-60000}"
PG_EVENTS="${PG_EVENTS:-500000}"
PAIRS="${PAIRS:-5}"
BIN="${BIN:-target/release/examples/bench_checkpoints}"
DIR="$(mktemp -d "${TMPDIR:-/tmp}/llmsession-checkpoints.XXXXXX")"
trap 'rm -rf "$DIR"' EXIT
strip() { sed 's/held_lines=[0-9]* //'; }

"$BIN" write "$DIR/big.jsonl" "$EVENTS" 40000 big | tail -1
"$BIN" write "$DIR/small.jsonl" "$SMALL" 40000 small | tail -1
echo "== bounded open and the next body: the big log, then the small one, $PAIRS pairs"
for _ in $(seq "$PAIRS"); do
    "$BIN" open "$DIR/big.jsonl" bounded | grep result | strip
    "$BIN" open "$DIR/small.jsonl" bounded | grep result | strip
done
echo "== the big log opened whole (check: full)"
/usr/bin/time -f "wall %e s, max rss %M KiB" "$BIN" open "$DIR/big.jsonl" full 2>&1 | grep -E "result|wall" | strip
echo "== verify of the big log"
/usr/bin/time -f "wall %e s, max rss %M KiB" "$BIN" verify "$DIR/big.jsonl" 2>&1 | grep -E "result|wall"
rm -f "$DIR/big.jsonl"
echo "== 10,000 sessions in a directory"
mkdir -p "$DIR/sessions"
"$BIN" sessions "$DIR/sessions" 10000 2>&1 | grep -E "made|result"
"$BIN" sessions "$DIR/sessions" 10000 | grep result
rm -rf "$DIR/sessions"

if [[ "${LLMSESSION_BENCH_PG:-}" == 1 ]]; then
    "$BIN" write "$DIR/pg-big.jsonl" "$PG_EVENTS" 40000 pg-big | tail -1
    cat > "$DIR/pg.sh" <<PG
#!/usr/bin/env bash
set -euo pipefail
U="\$LLMSESSION_PG_URL"
"$BIN" copy "$DIR/pg-big.jsonl" "\$U"
"$BIN" copy "$DIR/small.jsonl" "\$U"
echo "== PostgreSQL: bounded open and the next body, $PAIRS pairs"
for _ in \$(seq $PAIRS); do
    "$BIN" open "\$U?session=pg-big" bounded | grep result | sed 's/held_lines=[0-9]* //'
    "$BIN" open "\$U?session=small" bounded | grep result | sed 's/held_lines=[0-9]* //'
done
echo "== PostgreSQL: the big log opened whole, and verified"
"$BIN" open "\$U?session=pg-big" full | grep result | sed 's/held_lines=[0-9]* //'
/usr/bin/time -f "wall %e s, max rss %M KiB" "$BIN" verify "\$U?session=pg-big" 2>&1 | grep -E "result|wall"
echo "== PostgreSQL: 10,000 sessions"
"$BIN" sessions "\$U" 10000 2>&1 | grep -E "made|result"
"$BIN" sessions "\$U" 10000 | grep result
PG
    bash scripts/pg/server.sh run "$DIR/pg" bash "$DIR/pg.sh"
fi
