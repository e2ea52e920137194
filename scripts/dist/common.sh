# shellcheck shell=bash
# Shared by the release scripts (scripts/dist/*.sh): sourced, not run.
#   VERSION         the release version, from the workspace Cargo.toml (the one place it is set)
#   SOURCE_DATE_EPOCH  the commit time of HEAD (or the value given): every timestamp written into
#                   an archive, so the same inputs give the same bytes
#   ROOT            the checkout
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VERSION=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$ROOT/Cargo.toml" | head -n 1)
VERSION_MAJOR=${VERSION%%.*}
VERSION_MINOR=$(echo "$VERSION" | cut -d. -f2)
if [ "$VERSION_MAJOR" = 0 ]; then SONAME=libllmsession.so.0.$VERSION_MINOR; else SONAME=libllmsession.so.$VERSION_MAJOR; fi
REALNAME=libllmsession.so.$VERSION
: "${SOURCE_DATE_EPOCH:=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH VERSION
# The platform the artefacts are for (only x86-64 Linux with glibc is built here).
export DIST_ARCH; DIST_ARCH=$(uname -m)
# Where everything lands, and the stripped files every artefact is made from (build.sh).
: "${DIST:=$ROOT/dist}"
: "${DIST_STAGE:=$ROOT/build/dist/stage}"

# System libraries the static library needs (one place: the Makefile's NATIVE_STATIC_LIBS).
NATIVE_STATIC_LIBS=$(sed -n 's/^NATIVE_STATIC_LIBS := //p' "$ROOT/Makefile")

# The files of DIST_STAGE laid out under a prefix by scripts/lib/install.sh (`make install`:
# the same soname links, .pc and CMake package files), into DESTDIR, without its manifest
# (that is for `make uninstall`; a package or an archive does not need it). Its commands go to
# DESTDIR.log, shown if it fails. The stage is stripped already, so INSTALL_DEBUG=keep.
#   install_layout DESTDIR PREFIX LIBDIR PC_RPATH
install_layout() {
    local destdir=$1 prefix=$2 libdir=$3 pc_rpath=$4
    local manifest=$prefix/share/llmsession/install-manifest.txt
    if ! (cd "$ROOT" && VERSION="$VERSION" VERSION_MAJOR="$VERSION_MAJOR" VERSION_MINOR="$VERSION_MINOR" \
        SONAME="$SONAME" REALNAME="$REALNAME" STAGE="$DIST_STAGE/lib" HEADER="$DIST_STAGE/include/llmsession.h" \
        NATIVE_STATIC_LIBS="$NATIVE_STATIC_LIBS" PREFIX="$prefix" DESTDIR="$destdir" LIBDIR="$libdir" \
        INCLUDEDIR="$prefix/include" PKGCONFIGDIR="$libdir/pkgconfig" CMAKEDIR="$libdir/cmake/llmsession" \
        INSTALL_DEBUG=keep OBJCOPY="${OBJCOPY:-objcopy}" CLI="$DIST_STAGE/bin/llmsession" BINDIR="$prefix/bin" \
        MANIFEST="$manifest" PC_RPATH="$pc_rpath" bash scripts/lib/install.sh >"$destdir.log" 2>&1); then
        cat "$destdir.log"
        echo "dist: scripts/lib/install.sh failed (above)"
        return 1
    fi
    rm -f "$destdir$manifest"
    rmdir -p --ignore-fail-on-non-empty "$destdir$prefix/share/llmsession"
}

# A tar archive whose bytes depend only on the files' contents and names: sorted, one owner,
# every mtime SOURCE_DATE_EPOCH, no pax headers that carry times. tar_reproducible OUT.tar.gz DIR NAME...
tar_reproducible() {
    local out=$1 dir=$2
    shift 2
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
        --format=gnu -C "$dir" -cf - "$@" | gzip -n -9 >"$out"
}

# Runs a command as a user with none of this project's toolchain: a PATH without cargo, rustup
# or the checkout's build directories, a HOME of its own, in a directory outside the checkout.
# Used by the install tests (test-*.sh). without_toolchain DIR CMD...
without_toolchain() {
    local dir=$1
    shift
    local p out=()
    IFS=: read -r -a parts <<<"$PATH"
    for p in "${parts[@]}"; do
        case "$p" in
        "$ROOT"* | *cargo* | *rustup* | '') ;;
        *) [ -x "$p/cargo" ] || [ -x "$p/rustc" ] || out+=("$p") ;;
        esac
    done
    local path
    path=$(IFS=:; echo "${out[*]}")
    mkdir -p "$dir/home"
    (cd "$dir" && env -u LLMSESSION_LIB -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH -u CARGO_HOME -u RUSTUP_HOME \
        -u CARGO_TARGET_DIR HOME="$dir/home" PATH="$path" "$@")
}
