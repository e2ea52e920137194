#!/usr/bin/env bash
# `make check-symbols`: the staged shared library exports only lls_* symbols and carries the
# expected soname.
#   scripts/lib/check-symbols.sh LIBRARY SONAME
set -euo pipefail
lib=$1 want=$2
syms=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }')
bad=$(grep -v '^lls_' <<<"$syms" || true)
if [ -n "$bad" ]; then
    echo "check-symbols: exported symbols without the lls_ prefix:"; echo "$bad"; exit 1
fi
echo "check-symbols: $(wc -l <<<"$syms") exported symbols, all lls_*"
so=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [ "$so" != "$want" ]; then echo "check-symbols: soname is '$so', expected $want"; exit 1; fi
echo "check-symbols: soname $so"
