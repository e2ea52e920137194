#!/usr/bin/env bash
# Two builds of examples/bench_checkpoints side by side (docs/performance.md, "Resume from a
# checkpoint", "Before and after this round"): alternating pairs of a bounded open plus the next
# body, each in a process of its own, on a 1 GB log and a 24 MB log with the same last window.
#
#   benches/checkpoints_vs.sh OLD_BIN NEW_BIN            JSONL
#   PART=pg benches/checkpoints_vs.sh OLD_BIN NEW_BIN    PostgreSQL, on a throwaway server
#                                                        (scripts/pg/server.sh; ANALYZE after
#                                                        the copy, as autovacuum would)
#
# OLD_BIN: a bench_checkpoints built from another commit, e.g.
#   git worktree add /tmp/old COMMIT && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target \
#     cargo build --release --example bench_checkpoints)
# Environment: PAIRS (default 5), EVENTS (default 2,500,000), DIR (where the logs are written;
# default a temporary directory, removed at the end). Prints one line per open: which build,
# which log, the history and body sizes, open, body and total ms, resident growth in KiB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OLD="$1"
NEW="$2"
PAIRS="${PAIRS:-5}"
EVENTS="${EVENTS:-2500000}"
if [[ -z "${DIR:-}" ]]; then
    DIR="$(mktemp -d "${TMPDIR:-/tmp}/llmsession-vs.XXXXXX")"
    trap 'rm -rf "$DIR"' EXIT
fi
[[ -f "$DIR/big.jsonl" ]] || "$NEW" write "$DIR/big.jsonl" "$EVENTS" 40000 big | tail -1
[[ -f "$DIR/small.jsonl" ]] || "$NEW" write "$DIR/small.jsonl" 60000 40000 small | tail -1
if [[ "${PART:-jsonl}" == pg ]]; then
    cat >"$DIR/pg.sh" <<PG
#!/usr/bin/env bash
set -euo pipefail
U="\$LLMSESSION_PG_URL"
"$NEW" copy "$DIR/big.jsonl" "\$U"
"$NEW" copy "$DIR/small.jsonl" "\$U"
psql "\$U" -qc "ANALYZE llmsession_records" -c "ANALYZE llmsession_sessions"
PAIRS=$PAIRS PART=pg-inner DIR="$DIR" bash "$ROOT/benches/checkpoints_vs.sh" "$OLD" "$NEW"
PG
    exec bash "$ROOT/scripts/pg/server.sh" run "$DIR/pg" bash "$DIR/pg.sh"
fi
fields() {
    grep result | sed 's/.*history_bytes=\([0-9]*\) body_bytes=\([0-9]*\) open_ms=\([0-9.]*\) body_ms=\([0-9.]*\) total_ms=\([0-9.]*\).*growth_kib=\([0-9]*\).*/history=\1 body=\2 open_ms=\3 body_ms=\4 total_ms=\5 growth_kib=\6/'
}
for _ in $(seq "$PAIRS"); do
    for log in big small; do
        if [[ "${PART:-jsonl}" == pg-inner ]]; then
            src="$LLMSESSION_PG_URL?session=$log"
        else
            src="$DIR/$log.jsonl"
        fi
        echo "old $log $("$OLD" open "$src" bounded | fields)"
        echo "new $log $("$NEW" open "$src" bounded | fields)"
    done
done
