#!/usr/bin/env bash
# `make install`: the staged libraries (build/lib), the headers, a pkg-config file, a CMake
# package file and the `llmsession` command, under DESTDIR; and a manifest of everything it put
# there, which `make uninstall` (scripts/lib/uninstall.sh) removes. Every path and name comes
# from the Makefile, in the environment:
#   VERSION VERSION_MAJOR VERSION_MINOR SONAME REALNAME STAGE HEADER NATIVE_STATIC_LIBS CLI
#   PREFIX DESTDIR LIBDIR INCLUDEDIR PKGCONFIGDIR CMAKEDIR BINDIR MANIFEST INSTALL_DEBUG OBJCOPY
#   PC_RPATH (yes: the .pc's Libs carry -Wl,-rpath,${libdir}; no: they do not)
# Each command is printed before it runs, as make prints a recipe.
#
# The debug info of the shared library and of the command (the release build keeps it) is
# handled by INSTALL_DEBUG: split (the installed file is stripped of it and of its symbol table,
# and points at lib/debug/<name>.debug through a GNU debuglink), strip (both dropped)
# or keep (installed as built). The static library is stripped of debug info unless
# INSTALL_DEBUG=keep.
set -euo pipefail
for v in VERSION VERSION_MAJOR VERSION_MINOR SONAME REALNAME STAGE HEADER NATIVE_STATIC_LIBS CLI \
    PREFIX LIBDIR INCLUDEDIR PKGCONFIGDIR CMAKEDIR BINDIR MANIFEST INSTALL_DEBUG OBJCOPY PC_RPATH; do
    [ -n "${!v:-}" ] || { echo "install: $v is not set (run it through make install)"; exit 1; }
done
DESTDIR=${DESTDIR:-}
case "$INSTALL_DEBUG" in
split | strip | keep) ;;
*) echo "install: INSTALL_DEBUG must be split, strip or keep (got '$INSTALL_DEBUG')"; exit 1 ;;
esac
case "$PC_RPATH" in
yes | no) ;;
*) echo "install: PC_RPATH must be yes or no (got '$PC_RPATH')"; exit 1 ;;
esac
[ -x "$CLI" ] || { echo "install: $CLI is missing (cargo build --release -p llmsession-cli)"; exit 1; }

run() { printf '%s\n' "$*"; "$@"; }
lib=$DESTDIR$LIBDIR
inc=$DESTDIR$INCLUDEDIR
bin=$DESTDIR$BINDIR

# The manifest: one installed path a line (without DESTDIR), files and links as `f PATH`, the
# directories this install created as `d PATH` (uninstall removes those only when empty). What
# an earlier install recorded stays recorded (an older version's library, say).
manifest=$DESTDIR$MANIFEST
created=()
installed=()
if [ -f "$manifest" ]; then
    while read -r kind path; do
        case "$kind" in d) created+=("$path") ;; f) [ "$path" = "$MANIFEST" ] || installed+=("$path") ;; esac
    done <"$manifest"
fi
mkdirs() {
    local d missing=()
    for d in "$@"; do
        while [ ! -d "$DESTDIR$d" ] && [ "$d" != / ]; do missing+=("$d"); d=$(dirname "$d"); done
    done
    run install -d "${@/#/$DESTDIR}"
    created+=("${missing[@]}")
}
record() { installed+=("$@"); }

mkdirs "$LIBDIR" "$INCLUDEDIR" "$PKGCONFIGDIR" "$BINDIR" "$(dirname "$MANIFEST")"
run install -m 755 "$STAGE/$REALNAME" "$lib/$REALNAME"
run ln -sf "$REALNAME" "$lib/$SONAME"
run ln -sf "$SONAME" "$lib/libllmsession.so"
run install -m 644 "$STAGE/libllmsession.a" "$lib/libllmsession.a"
run install -m 755 "$CLI" "$bin/llmsession"
record "$LIBDIR/$REALNAME" "$LIBDIR/$SONAME" "$LIBDIR/libllmsession.so" "$LIBDIR/libllmsession.a" \
    "$BINDIR/llmsession"

# The shared library keeps its dynamic symbols (--strip-unneeded), the command keeps nothing
# (--strip-all); with split, the symbol table is in the .debug file.
strip_flag() { case $1 in */llmsession) echo --strip-all ;; *) echo --strip-unneeded ;; esac; }
case "$INSTALL_DEBUG" in
split)
    mkdirs "$LIBDIR/debug"
    for f in "$lib/$REALNAME" "$bin/llmsession"; do
        debug=$lib/debug/$(basename "$f").debug
        run "$OBJCOPY" --only-keep-debug "$f" "$debug"
        run chmod 644 "$debug"
        # The debuglink names the file only; gdb looks for it beside the file and in debug/.
        run "$OBJCOPY" "$(strip_flag "$f")" --add-gnu-debuglink="$debug" "$f"
    done
    record "$LIBDIR/debug/$REALNAME.debug" "$LIBDIR/debug/llmsession.debug"
    ;;
strip) for f in "$lib/$REALNAME" "$bin/llmsession"; do run "$OBJCOPY" "$(strip_flag "$f")" "$f"; done ;;
keep) ;;
esac
if [ "$INSTALL_DEBUG" != keep ]; then run "$OBJCOPY" --strip-debug "$lib/libllmsession.a"; fi

run install -m 644 "$HEADER" "$inc/llmsession.h"
record "$INCLUDEDIR/llmsession.h"
if [ -f include/llmsession.hpp ]; then
    run install -m 644 include/llmsession.hpp "$inc/llmsession.hpp"
    record "$INCLUDEDIR/llmsession.hpp"
fi

# pkg-config file; prefix-relative paths so `pkg-config --define-prefix` can relocate it.
under_prefix() { case $1 in "$PREFIX"*) printf '%s' "\${prefix}${1#"$PREFIX"}" ;; *) printf '%s' "$1" ;; esac; }
# `rpath` lets a program linked with these flags find the library in a non-system libdir
# without LD_LIBRARY_PATH; `pkg-config --define-variable=rpath= --libs llmsession` drops it.
pc=$DESTDIR$PKGCONFIGDIR/llmsession.pc
rpath='-Wl,-rpath,${libdir}'
[ "$PC_RPATH" = yes ] || rpath=
echo "write $pc"
cat >"$pc" <<PC
prefix=$PREFIX
exec_prefix=\${prefix}
libdir=$(under_prefix "$LIBDIR")
includedir=$(under_prefix "$INCLUDEDIR")
rpath=$rpath

Name: llmsession
Description: Session state and cache-friendly request building for LLM agents (C ABI)
Version: $VERSION
License: MIT OR Apache-2.0
Libs: -L\${libdir} \${rpath} -lllmsession
Libs.private: $NATIVE_STATIC_LIBS
Cflags: -I\${includedir}
PC

record "$PKGCONFIGDIR/llmsession.pc"

# CMake package file (cmake/*.cmake.in); its paths are relative to itself.
mkdirs "$CMAKEDIR"
inc_from_lib=$(realpath -m --relative-to="$LIBDIR" "$INCLUDEDIR")
for f in llmsessionConfig llmsessionConfigVersion; do
    echo "write $DESTDIR$CMAKEDIR/$f.cmake (from cmake/$f.cmake.in)"
    sed -e "s|@VERSION@|$VERSION|g" -e "s|@VERSION_MAJOR@|$VERSION_MAJOR|g" \
        -e "s|@VERSION_MINOR@|$VERSION_MINOR|g" -e "s|@REALNAME@|$REALNAME|g" \
        -e "s|@SONAME@|$SONAME|g" -e "s|@NATIVE_STATIC_LIBS@|${NATIVE_STATIC_LIBS// /;}|g" \
        -e "s|@INCLUDEDIR_FROM_LIBDIR@|$inc_from_lib|g" \
        "cmake/$f.cmake.in" >"$DESTDIR$CMAKEDIR/$f.cmake"
    record "$CMAKEDIR/$f.cmake"
done

echo "write $manifest"
{
    echo "# llmsession $VERSION: what make install put under ${DESTDIR:-/} (make uninstall removes it)"
    printf '%s\n' "${installed[@]}" | sort -u | sed 's/^/f /'
    echo "f $MANIFEST"
    # Deepest first, so uninstall can remove them in order.
    if [ ${#created[@]} -gt 0 ]; then
        printf '%s\n' "${created[@]}" | sort -u | awk '{ print length($0), $0 }' | sort -rn | cut -d' ' -f2- |
            sed 's/^/d /'
    fi
} >"$manifest"
