#!/usr/bin/env bash
# `make fuzz-smoke`: a short run of every fuzz target over its corpus (CORPUS/<target>, built
# from the seeds by scripts/fuzz/corpus.sh). New inputs go to build/fuzz-smoke/<target>, never
# into the repository; a crashing input goes to fuzz/artifacts/<target> and fails the run.
# Targets run JOBS at a time (default: the number of cores), each for SECONDS: every target
# gets the same fuzzing time as one after another, in less wall time.
#   scripts/fuzz/smoke.sh BIN_DIR CORPUS SECONDS TARGET...     (run from the repository root)
set -euo pipefail
bin=$1 corpus=$2 seconds=$3; shift 3
jobs=${FUZZ_SMOKE_JOBS:-$(nproc 2>/dev/null || echo 1)}

one() {
    local t=$1 log=build/fuzz-smoke/$1.log
    mkdir -p "build/fuzz-smoke/$t" "fuzz/artifacts/$t"
    if "$bin/$t" -artifact_prefix="$PWD/fuzz/artifacts/$t/" "build/fuzz-smoke/$t" "$corpus/$t" \
        -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        echo "fuzz-smoke: $t: $(sed -n 's/^stat::number_of_executed_units: *//p' "$log") executions in $seconds s, no finding"
    else
        tail -n 40 "$log"
        echo "fuzz-smoke: $t failed (full log: $log, input in fuzz/artifacts/$t)"
        return 1
    fi
}

failed=0
pids=()
for t in "$@"; do
    one "$t" &
    pids+=($!)
    if (( ${#pids[@]} >= jobs )); then
        wait "${pids[0]}" || failed=1
        pids=("${pids[@]:1}")
    fi
done
for p in "${pids[@]}"; do
    wait "$p" || failed=1
done
exit "$failed"
