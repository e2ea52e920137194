#!/usr/bin/env bash
# `make cpp-install-check`: installs into a temporary DESTDIR (scripts/lib/install.sh, with the
# Makefile's names and paths in the environment) and builds examples/cpp against it twice: with
# pkg-config (pkg_check_modules; --define-prefix relocates the .pc) and with
# find_package(llmsession); runs both (and the agent-tree example, tree.cpp, once), and checks
# that the example does not link the in-tree library.
#   scripts/cpp/install-check.sh ROOT        (ROOT: the checkout, absolute)
set -euo pipefail
here=$1
: "${PREFIX:?run it through make cpp-install-check}" "${LIBDIR:?}" "${PKGCONFIGDIR:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DESTDIR=$tmp bash scripts/lib/install.sh >/dev/null
echo "cpp-install-check: examples/cpp with pkg-config"
PKG_CONFIG_PATH="$tmp$PKGCONFIGDIR" cmake -S examples/cpp -B "$tmp/pc" -DPKG_CONFIG_ARGN=--define-prefix >/dev/null
cmake --build "$tmp/pc" >/dev/null
LD_LIBRARY_PATH="$tmp$LIBDIR" "$tmp/pc/llmsession_example" "$tmp/pc.jsonl"
LD_LIBRARY_PATH="$tmp$LIBDIR" "$tmp/pc/llmsession_tree_example" "$tmp"
echo "cpp-install-check: examples/cpp with find_package(llmsession)"
cmake -S examples/cpp -B "$tmp/cm" -DLLMSESSION_FIND=cmake -DCMAKE_PREFIX_PATH="$tmp$PREFIX" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH="$tmp$LIBDIR" "$tmp/cm/llmsession_example" "$tmp/cm.jsonl" >/dev/null
if ldd "$tmp/cm/llmsession_example" | grep -q "$here"; then
    echo "cpp-install-check: the example links the in-tree library"; exit 1
fi
echo "cpp-install-check: ok"
