#!/usr/bin/env bash
# Installs the toolchain the release build links with, pinned by version and SHA-256, unless it
# is there already, and prints its directory (docs/install.md, "Which glibc each artefact needs"):
#   DIR/bin/zig             zig (PyPI's ziglang wheel): its `zig cc` compiles and links against
#                           stubs of the glibc version asked for (2.17 for the release), so
#                           nothing in the result can need a newer one
#   DIR/bin/cargo-zigbuild  cargo-zigbuild (PyPI's wheel of it): `cargo-zigbuild zig cc` puts
#                           rustc's linker arguments into the form zig accepts
# Both come from PyPI as prebuilt wheels (pip install --target, no venv, so the directory can be
# moved into place whole). The directory is ${LLMSESSION_CACHE:-$HOME/.cache/llmsession}/
# zig-ZIG-zigbuild-ZIGBUILD, shared by every checkout on the machine; zig's own cache (the
# glibc stubs it builds once per version) goes to DIR/zig-cache (scripts/tools/zig-cargo.sh).
#   scripts/tools/zig-install.sh          (PYTHON: the python3 whose pip downloads the wheels)
set -euo pipefail
ZIG_VERSION=0.15.2
ZIGBUILD_VERSION=0.24.1
# The x86-64 Linux wheels (the only platform the release is built on).
ZIG_SHA256=806316453d1ede7174ed3fefb8e5348154629089c3bb5fe812dfd0e172fac130
ZIGBUILD_SHA256=238a1ab54a95053a4eadc34775c81f795a8ad75f80bfed63f3f445f518102375

cache=${LLMSESSION_CACHE:-$HOME/.cache/llmsession}
dir=$cache/zig-$ZIG_VERSION-zigbuild-$ZIGBUILD_VERSION
installed() {
    [ "$("$dir/bin/zig" version 2>/dev/null)" = "$ZIG_VERSION" ] &&
        "$dir/bin/cargo-zigbuild" --version 2>/dev/null | grep -q " $ZIGBUILD_VERSION\$"
}
if installed; then
    echo "$dir"
    exit 0
fi
[ "$(uname -m)" = x86_64 ] || { echo "zig-install: only x86-64 Linux is pinned here (this is $(uname -m))" >&2; exit 1; }
python=${PYTHON:-python3}
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.zig-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "zig-install: installing zig $ZIG_VERSION and cargo-zigbuild $ZIGBUILD_VERSION from PyPI into $dir" >&2
cat >"$tmp/requirements.txt" <<EOF
ziglang==$ZIG_VERSION --hash=sha256:$ZIG_SHA256
cargo-zigbuild==$ZIGBUILD_VERSION --hash=sha256:$ZIGBUILD_SHA256
EOF
PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary :all: --require-hashes \
    --no-compile --target "$tmp/dir" -r "$tmp/requirements.txt" >&2 ||
    { echo "zig-install: pip could not install the pinned wheels (above)" >&2; exit 1; }
[ -x "$tmp/dir/ziglang/zig" ] || { echo "zig-install: the ziglang wheel has no ziglang/zig" >&2; exit 1; }
[ -x "$tmp/dir/bin/cargo-zigbuild" ] || { echo "zig-install: the cargo-zigbuild wheel put no bin/cargo-zigbuild" >&2; exit 1; }
ln -s ../ziglang/zig "$tmp/dir/bin/zig"
rm -rf "$dir"
mv "$tmp/dir" "$dir"
installed || { echo "zig-install: $dir/bin/zig or cargo-zigbuild does not report the pinned version" >&2; exit 1; }
echo "$dir"
