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
# The glibc the artefacts are built for (the Makefile's RELEASE_GLIBC: the release build links
# against it with zig, scripts/tools/zig-cargo.sh): no library or command in them may need a
# newer one (scripts/dist/glibc-check.sh), and the wheel is tagged with it.
: "${DIST_GLIBC:=2.17}"
export DIST_GLIBC
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

# The wheel's platform tag for glibc 2.N (PEP 600): manylinux_2_N_ARCH, followed by the older
# name of the same promise where there is one (manylinux1 = 2.5, manylinux2010 = 2.12,
# manylinux2014 = 2.17), which pip before 20.3 knows instead. manylinux_tag GLIBC ARCH
manylinux_tag() {
    local n=${1#2.} t
    t=manylinux_2_${n}_$2
    case "$n" in 5) t+=.manylinux1_$2 ;; 12) t+=.manylinux2010_$2 ;; 17) t+=.manylinux2014_$2 ;; esac
    echo "$t"
}

# auditwheel (PyPI), pinned; installed on first use into build/dist/pytools. AUDITWHEEL names
# another. auditwheel_cmd prints the command.
AUDITWHEEL_VERSION=6.8.2
auditwheel_cmd() {
    local own=$ROOT/build/dist/pytools/bin/auditwheel
    local cmd=${AUDITWHEEL:-$own}
    if [ "$cmd" = "$own" ] && ! "$own" --version 2>/dev/null | grep -q " $AUDITWHEEL_VERSION "; then
        echo "dist: installing auditwheel $AUDITWHEEL_VERSION into build/dist/pytools" >&2
        rm -rf "$ROOT/build/dist/pytools"
        "${PYTHON:-python3}" -m venv "$ROOT/build/dist/pytools" >&2
        "$ROOT/build/dist/pytools/bin/pip" install --quiet --disable-pip-version-check "auditwheel==$AUDITWHEEL_VERSION" >&2
    fi
    echo "$cmd"
}

# `auditwheel show WHEEL` must find the wheel consistent with manylinux_2_N for an N no newer
# than GLIBC's (auditwheel names the oldest policy every library and symbol version fits; its
# text is wrapped, so it is read as one line). The report goes to REPORT and is printed.
# auditwheel_fits AUDITWHEEL WHEEL GLIBC REPORT
auditwheel_fits() {
    local got
    if ! "$1" show "$2" >"$4" 2>&1; then
        cat "$4"
        echo "dist: auditwheel show $(basename "$2") failed (above)"
        return 1
    fi
    cat "$4"
    got=$(tr -s '\n ' '  ' <"$4" |
        sed -n 's/.*is consistent with the following platform tag: "manylinux_2_\([0-9]*\)_'"$DIST_ARCH"'".*/\1/p')
    if [ -z "$got" ] || [ "$got" -gt "${3#2.}" ]; then
        echo "dist: auditwheel show does not find $(basename "$2") consistent with manylinux_2_${3#2.}_$DIST_ARCH or older (above)"
        return 1
    fi
    echo "dist: auditwheel show: consistent with manylinux_2_${got}_$DIST_ARCH (the tag promises glibc $3)"
}

# The libraries checked against glibc DIST_GLIBC's own symbol list, as an old system's linker
# would: examples/readme/hello.c linked with zig (scripts/tools/zig-cc, against the stubs of glibc
# DIST_GLIBC that zig makes from glibc's own symbol lists) once with the static library ARCHIVE
# (and NATIVE_STATIC_LIBS) and, when SHARED is given, once with that shared library (a file
# whose directory holds its soname link); and the whole archive (every member, not only those
# hello.c reaches) linked into a shared object with -z defs. lld refuses a strong reference to
# a symbol glibc DIST_GLIBC lacks, whether in the archive's objects or among the shared
# library's undefined symbols (--no-allow-shlib-undefined): a static archive records no symbol
# versions, so such a link is how far its needs can be checked. The results are then checked
# like the release (glibc-check.sh) and each program is run twice here (the second run resumes
# the log of the first).
# Prints what it checked. link_check_old_glibc WORKDIR ARCHIVE INCLUDE_DIR [SHARED]
link_check_old_glibc() {
    local work=$1 archive=$2 include=$3 shared=${4:-}
    (
        set -euo pipefail
        source "$ROOT/scripts/tools/zig-env.sh"
        LLMSESSION_GLIBC=$DIST_GLIBC zig_env
        mkdir -p "$work"
        cd "$work"
        cp "$ROOT/examples/readme/hello.c" .
        # shellcheck disable=SC2086 # NATIVE_STATIC_LIBS are words
        "$ZIG_CC" -std=c11 -O1 -I"$include" hello.c "$archive" $NATIVE_STATIC_LIBS -o hello-static >link.log 2>&1 ||
            { cat link.log; echo "dist: $archive does not link against glibc $DIST_GLIBC (above)"; exit 1; }
        # Every member of the archive, not only those hello.c reaches: a shared object of the
        # whole archive, with no undefined symbol allowed (-z defs).
        # shellcheck disable=SC2086
        "$ZIG_CC" -shared -o whole-archive.so -Wl,--whole-archive "$archive" -Wl,--no-whole-archive \
            $NATIVE_STATIC_LIBS -Wl,-z,defs >link.log 2>&1 ||
            { cat link.log; echo "dist: the whole of $archive does not link against glibc $DIST_GLIBC (above)"; exit 1; }
        GLIBC_CHECK_STRIP="$work/" bash "$ROOT/scripts/dist/glibc-check.sh" "$DIST_GLIBC" "$work/whole-archive.so"
        kinds=(static)
        if [ -n "$shared" ]; then
            soname=$(readelf -d "$shared" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
            "$ZIG_CC" -std=c11 -O1 -I"$include" hello.c "$shared" -Wl,-rpath,"$(dirname "$shared")" -o hello-shared >link.log 2>&1 ||
                { cat link.log; echo "dist: a program does not link with $shared against glibc $DIST_GLIBC (above)"; exit 1; }
            kinds+=(shared)
        fi
        for kind in "${kinds[@]}"; do
            bin=hello-$kind
            ALLOW_NEEDED=${soname:-} ALLOW_UNVERSIONED='^lls_' GLIBC_CHECK_STRIP="$work/" \
                bash "$ROOT/scripts/dist/glibc-check.sh" "$DIST_GLIBC" "$work/$bin"
            mkdir -p "run-$kind"
            out=$(cd "run-$kind" && "../$bin" && "../$bin") || { echo "dist: $bin failed: $out"; exit 1; }
            grep -q '"requests":2}$' <<<"$out" || { echo "dist: $bin, run twice, did not resume: $out"; exit 1; }
        done
        echo "dist: hello.c linked with zig against glibc $DIST_GLIBC (${kinds[*]}), run twice each: $(tail -n 1 <<<"$out")"
    )
}
