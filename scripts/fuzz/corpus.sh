#!/usr/bin/env bash
# `make fuzz-corpus`: the seed corpus of every fuzz target, rebuilt from fuzz/seeds (nothing of it
# is tracked): OUT/<target> holds what fuzz/seeds/<target>_seeds.py generates from the
# repository's own inputs, plus the hand-picked inputs committed in fuzz/seeds/<target>/. The
# generators are deterministic, so the same checkout always gives the same corpus.
#   scripts/fuzz/corpus.sh OUT TARGET...        (run from the repository root)
set -euo pipefail
out=$1; shift
for t in "$@"; do
    rm -rf "${out:?}/$t"
    mkdir -p "$out/$t"
    PYTHONDONTWRITEBYTECODE=1 python3 "fuzz/seeds/${t}_seeds.py" "$out/$t" >/dev/null
    if [ -d "fuzz/seeds/$t" ]; then cp fuzz/seeds/"$t"/* "$out/$t/"; fi
    echo "fuzz-corpus: $t: $(find "$out/$t" -type f | wc -l) seeds"
done
