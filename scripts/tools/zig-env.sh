# shellcheck shell=bash
# Sourced, not run (scripts/tools/zig-cargo.sh, scripts/dist/common.sh): installs the pinned zig
# toolchain on first use (scripts/tools/zig-install.sh) and exports what scripts/tools/zig-cc
# needs to compile and link for x86_64-linux-gnu against glibc $LLMSESSION_GLIBC:
#   LLMSESSION_ZIGBUILD        the cargo-zigbuild whose `zig cc` zig-cc runs
#   CARGO_ZIGBUILD_ZIG_PATH    the zig it runs
#   ZIG_GLOBAL_CACHE_DIR       zig's cache (the glibc stubs, built once per version), beside them
#   ZIG_CC                     scripts/tools/zig-cc
# Returns non-zero, with a message, when LLMSESSION_GLIBC is not a glibc version or the
# toolchain cannot be installed.
zig_env() {
    local root dir
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    if ! [[ ${LLMSESSION_GLIBC:-} =~ ^2\.[0-9]+$ ]]; then
        echo "zig: LLMSESSION_GLIBC is '${LLMSESSION_GLIBC:-}', not a glibc version such as 2.17" >&2
        return 1
    fi
    dir=$(bash "$root/scripts/tools/zig-install.sh") || return 1
    export LLMSESSION_GLIBC LLMSESSION_ZIGBUILD=$dir/bin/cargo-zigbuild CARGO_ZIGBUILD_ZIG_PATH=$dir/bin/zig
    export ZIG_GLOBAL_CACHE_DIR=$dir/zig-cache ZIG_CC=$root/scripts/tools/zig-cc
}
