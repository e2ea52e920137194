#!/usr/bin/env bash
# Installs a pinned cargo tool into ROOT/bin unless that version is there already (the Makefile's
# cbindgen and cargo-fuzz stamps).
#   scripts/tools/cargo-install.sh CRATE VERSION ROOT        (CARGO: the cargo to use)
set -euo pipefail
crate=$1 version=$2 root=$3
if ! "$root/bin/$crate" --version 2>/dev/null | grep -q " $version\$"; then
    echo "installing $crate $version into $root"
    "${CARGO:-cargo}" install "$crate" --version "$version" --locked --root "$root"
fi
