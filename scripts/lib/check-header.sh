#!/usr/bin/env bash
# `make check-header`: the committed header must equal a fresh cbindgen generation.
#   scripts/lib/check-header.sh CBINDGEN HEADER
set -euo pipefail
cbindgen=$1 header=$2
fresh=build/llmsession.h.fresh
mkdir -p build
"$cbindgen" --config cbindgen.toml --crate llmsession-capi --quiet --output "$fresh"
if diff -u "$header" "$fresh"; then
    echo "check-header: $header is up to date"
else
    echo "check-header: $header differs from a fresh generation (above); run 'make header' and commit it"
    exit 1
fi
