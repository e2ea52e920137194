#!/usr/bin/env bash
# `make install`: the staged libraries (build/lib), the headers, a pkg-config file and a CMake
# package file, under DESTDIR. Every path and name comes from the Makefile, in the environment:
#   VERSION VERSION_MAJOR VERSION_MINOR SONAME REALNAME STAGE HEADER NATIVE_STATIC_LIBS
#   PREFIX DESTDIR LIBDIR INCLUDEDIR PKGCONFIGDIR CMAKEDIR INSTALL_DEBUG OBJCOPY
# Each command is printed before it runs, as make prints a recipe.
#
# The debug info of the shared library (the release build keeps it) is handled by INSTALL_DEBUG:
# split (the installed library is stripped of it and points at lib/debug/<library>.debug through
# a GNU debuglink, where gdb and perf find it), strip (dropped) or keep (installed as built). The
# static library is stripped of debug info unless INSTALL_DEBUG=keep.
set -euo pipefail
for v in VERSION VERSION_MAJOR VERSION_MINOR SONAME REALNAME STAGE HEADER NATIVE_STATIC_LIBS \
    PREFIX LIBDIR INCLUDEDIR PKGCONFIGDIR CMAKEDIR INSTALL_DEBUG OBJCOPY; do
    [ -n "${!v:-}" ] || { echo "install: $v is not set (run it through make install)"; exit 1; }
done
DESTDIR=${DESTDIR:-}
case "$INSTALL_DEBUG" in
split | strip | keep) ;;
*) echo "install: INSTALL_DEBUG must be split, strip or keep (got '$INSTALL_DEBUG')"; exit 1 ;;
esac

run() { printf '%s\n' "$*"; "$@"; }
lib=$DESTDIR$LIBDIR
inc=$DESTDIR$INCLUDEDIR

run install -d "$lib" "$inc" "$DESTDIR$PKGCONFIGDIR"
run install -m 755 "$STAGE/$REALNAME" "$lib/$REALNAME"
run ln -sf "$REALNAME" "$lib/$SONAME"
run ln -sf "$SONAME" "$lib/libllmsession.so"
run install -m 644 "$STAGE/libllmsession.a" "$lib/libllmsession.a"

case "$INSTALL_DEBUG" in
split)
    run install -d "$lib/debug"
    run "$OBJCOPY" --only-keep-debug "$lib/$REALNAME" "$lib/debug/$REALNAME.debug"
    run chmod 644 "$lib/debug/$REALNAME.debug"
    run "$OBJCOPY" --strip-debug --add-gnu-debuglink="$lib/debug/$REALNAME.debug" "$lib/$REALNAME"
    ;;
strip) run "$OBJCOPY" --strip-debug "$lib/$REALNAME" ;;
keep) ;;
esac
if [ "$INSTALL_DEBUG" != keep ]; then run "$OBJCOPY" --strip-debug "$lib/libllmsession.a"; fi

run install -m 644 "$HEADER" "$inc/llmsession.h"
if [ -f include/llmsession.hpp ]; then run install -m 644 include/llmsession.hpp "$inc/llmsession.hpp"; fi

# pkg-config file; prefix-relative paths so `pkg-config --define-prefix` can relocate it.
under_prefix() { case $1 in "$PREFIX"*) printf '%s' "\${prefix}${1#"$PREFIX"}" ;; *) printf '%s' "$1" ;; esac; }
pc=$DESTDIR$PKGCONFIGDIR/llmsession.pc
echo "write $pc"
cat >"$pc" <<PC
prefix=$PREFIX
exec_prefix=\${prefix}
libdir=$(under_prefix "$LIBDIR")
includedir=$(under_prefix "$INCLUDEDIR")

Name: llmsession
Description: Session state and cache-friendly request building for LLM agents (C ABI)
Version: $VERSION
License: MIT OR Apache-2.0
Libs: -L\${libdir} -lllmsession
Libs.private: $NATIVE_STATIC_LIBS
Cflags: -I\${includedir}
PC

# CMake package file (cmake/*.cmake.in); its paths are relative to itself.
run install -d "$DESTDIR$CMAKEDIR"
inc_from_lib=$(realpath -m --relative-to="$LIBDIR" "$INCLUDEDIR")
for f in llmsessionConfig llmsessionConfigVersion; do
    echo "write $DESTDIR$CMAKEDIR/$f.cmake (from cmake/$f.cmake.in)"
    sed -e "s|@VERSION@|$VERSION|g" -e "s|@VERSION_MAJOR@|$VERSION_MAJOR|g" \
        -e "s|@VERSION_MINOR@|$VERSION_MINOR|g" -e "s|@REALNAME@|$REALNAME|g" \
        -e "s|@SONAME@|$SONAME|g" -e "s|@NATIVE_STATIC_LIBS@|${NATIVE_STATIC_LIBS// /;}|g" \
        -e "s|@INCLUDEDIR_FROM_LIBDIR@|$inc_from_lib|g" \
        "cmake/$f.cmake.in" >"$DESTDIR$CMAKEDIR/$f.cmake"
done
