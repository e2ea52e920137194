#!/usr/bin/env bash
# Runs cargo with zig as the C compiler and the linker for x86_64-unknown-linux-gnu, against the
# glibc version LLMSESSION_GLIBC (the Makefile's RELEASE_GLIBC, 2.17): the release build that
# `make build-lib`, `make build-cli` and `make dist` make (docs/install.md, "Which glibc each
# artefact needs"). zig links against stubs of that glibc version, so a symbol that glibc gained
# later cannot be linked by accident, and ring's C code is compiled against that version's
# headers. The toolchain is installed on first use (scripts/tools/zig-env.sh, zig-install.sh).
#   LLMSESSION_GLIBC=2.17 scripts/tools/zig-cargo.sh build --release ...     (CARGO: the cargo)
# The build stays the host's (no --target): the output is target/release as before, and build
# scripts and proc-macros are linked by zig too (they run here, on a newer glibc, as any
# program built for an older one does). Use the same environment for every release build of a
# target directory: cargo rebuilds ring and what depends on it when CC changes.
set -euo pipefail
source "$(dirname "$0")/zig-env.sh"
host=$(rustc -vV | sed -n 's/^host: //p')
[ "$host" = x86_64-unknown-linux-gnu ] ||
    { echo "zig-cargo: linking with zig is set up for x86_64-unknown-linux-gnu only (this is $host)" >&2; exit 1; }
zig_env
export CC_x86_64_unknown_linux_gnu=$ZIG_CC CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=$ZIG_CC
exec "${CARGO:-cargo}" "$@"
