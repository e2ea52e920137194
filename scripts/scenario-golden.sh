#!/usr/bin/env bash
# Regenerates the golden transcripts of the scenario files (tests/scenarios/golden/*.json; the
# format is in docs/scenarios.md, "Golden transcripts"). It runs the Rust scenario runner with
# LLMSESSION_SCENARIO_BLESS=1: every scenario still runs with all its checks, and instead of
# being compared with its golden file, its transcript is written there (a file is rewritten only
# when it changed, and golden files whose scenario file is gone are removed). The names of the
# files that changed are printed; review `git diff tests/scenarios/golden` before committing:
# each change there is a change in what a user of the library sees.
#
# Environment: CARGO (the cargo command, default `cargo`). LLMSESSION_SCENARIO_FILE (one
# scenario file) and LLMSESSION_SCENARIOS (another directory of them, with its own golden/)
# work as they do for the runner. Extra arguments go to the test binary.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CARGO="${CARGO:-cargo}"

LLMSESSION_SCENARIO_BLESS=1 "$CARGO" test --test scenarios scenarios -- --exact --nocapture "$@"
