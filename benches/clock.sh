#!/usr/bin/env bash
# The cache clock's benchmark (docs/performance.md, "The cache clock"): `llmsession simulate` on
# the public Claude Code transcripts (scripts/fetch-transcripts.sh), priced at Anthropic's
# published prices for the models they used (benches/clock/anthropic.json: Claude Sonnet 4, and the
# Claude 4.5 to 4.7 models of the extra transcripts below, per million tokens, from Anthropic's
# pricing page as read on 2026-12-03 and 2026-12-04), with the default
# assumptions, then the same with each assumption the report discusses changed: the old
# 30-second margin, no 1-hour tier (benches/clock/five-minutes-only.json), `prefix` tier
# billing, a lighter and a heavier prior, a host that leaves one pause in three for good, no
# keep-warm budget, no keep-warm requests at the longer tier.
# Prints one table per run and writes each run's JSON under $OUT (default target/bench-clock/).
# No timing is measured: the figures are costs.
#
# EXTRA_TRANSCRIPTS=DIR also runs the default on more real Claude Code transcripts found under DIR
# (docs/performance.md, "On 154 more real sessions"; benches/clock/extra-sources.tsv names the
# ones the report used, docs/simulate.md says how to get them): benches/clock/prepare.py sorts and
# cleans them, benches/clock/summary.py prints the table per source and in aggregate.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO="${CARGO:-cargo}"
OUT="${OUT:-target/bench-clock}"
mkdir -p "$OUT"
DIR="$(bash scripts/fetch-transcripts.sh)"
"$CARGO" build -q -p llmsession-cli
BIN="${CARGO_TARGET_DIR:-target}/debug/llmsession"
FILES=("$DIR"/*.jsonl)
PRICES=benches/clock/anthropic.json

run() {
    local name="$1" prices="$2" options="$3"
    local opts="$OUT/$name.options.json"
    printf '%s\n' "$options" >"$opts"
    echo "== $name: --prices $prices --options $options"
    "$BIN" simulate --from claude-code "${FILES[@]}" --prices "$prices" --options "$opts"
    "$BIN" simulate --from claude-code "${FILES[@]}" --prices "$prices" --options "$opts" --json >"$OUT/$name.json"
    echo
}

run default "$PRICES" '{}'
run margin-30s "$PRICES" '{"marginMs": 30000}'
run no-hour-tier benches/clock/five-minutes-only.json '{}'
run prefix-billing "$PRICES" '{"tierBilling": "prefix"}'
run prior-weight-0.5 "$PRICES" '{"returnModel": {"priorWeight": 0.5}}'
run prior-weight-10 "$PRICES" '{"returnModel": {"priorWeight": 10}}'
run never-returns-0.3 "$PRICES" '{"returnModel": {"neverReturns": 0.3}}'
run no-keep-warm-budget "$PRICES" '{"keepWarmBudget": 1000000000}'
run no-keep-warm-tiers "$PRICES" '{"keepWarmTiers": false}'
if [[ -n "${EXTRA_TRANSCRIPTS:-}" ]]; then
    rm -rf "$OUT/extra"
    python3 benches/clock/prepare.py "$EXTRA_TRANSCRIPTS" "$OUT/extra"
    shopt -s nullglob
    EXTRA=("$OUT"/extra/claude-code/*.jsonl)
    if ((${#EXTRA[@]} == 0)); then
        echo "benches/clock.sh: no Claude Code transcript under $EXTRA_TRANSCRIPTS" >&2
        exit 1
    fi
    # extra NAME TITLE [OPTIONS-FILE]: the extra transcripts under one run's options.
    extra() {
        local name="$1" title="$2" opts=()
        [[ -n "${3:-}" ]] && opts=(--options "$3")
        echo "== $title, --prices $PRICES${3:+, --options $3}"
        "$BIN" simulate --from claude-code "${EXTRA[@]}" --prices "$PRICES" "${opts[@]}" --json >"$OUT/$name.json"
        python3 benches/clock/summary.py "$OUT/$name.json"
        echo
    }
    extra extra "extra: ${#EXTRA[@]} Claude Code transcripts from $EXTRA_TRANSCRIPTS, default options"
    extra extra-no-budget "extra without the keep-warm budget" "$OUT/no-keep-warm-budget.options.json"
    extra extra-no-tiers "extra without keep-warm requests at the longer tier" "$OUT/no-keep-warm-tiers.options.json"
    extra extra-prefix "extra with prefix billing" "$OUT/prefix-billing.options.json"
fi
echo "JSON of every run: $OUT/"
