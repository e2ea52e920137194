#!/usr/bin/env bash
# `make test-dist`: each artefact of dist/ installed and used where no toolchain of ours exists
# (scripts/dist/common.sh, without_toolchain): a temporary directory outside the checkout, no
# cargo on PATH, no build/ directory, a HOME of its own. One script per ecosystem (test-*.sh);
# each builds and runs the README's example in its language, resumes it, and verifies the log
# with the installed command.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ -f "$DIST/SHA256SUMS" ] || { echo "test-dist: $DIST has no release (make dist)"; exit 1; }
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS)
failed=()
for eco in ${DIST_ONLY:-c deb python node go}; do
    echo "=== test-dist: $eco"
    if ! DIST="$DIST" bash "$ROOT/scripts/dist/test-$eco.sh"; then failed+=("$eco"); fi
done
if [ ${#failed[@]} -gt 0 ]; then echo "test-dist: FAILED: ${failed[*]}"; exit 1; fi
echo "test-dist: every artefact installed and used"
