#!/usr/bin/env bash
# `make install-check`: installs into a temporary DESTDIR (scripts/lib/install.sh, with the
# Makefile's names and paths in the environment, as `make install` passes them) and builds two C
# programs with only pkg-config's flags, tests/c/install_check.c and the quickstart
# (examples/c/quickstart.c), and runs them; then checks that the debug info was split off the
# installed shared library. CC: the C compiler.
set -euo pipefail
: "${REALNAME:?run it through make install-check}" "${LIBDIR:?}" "${INCLUDEDIR:?}" "${PKGCONFIGDIR:?}"
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DESTDIR=$tmp INSTALL_DEBUG=split bash scripts/lib/install.sh >/dev/null
export PKG_CONFIG_PATH="$tmp$PKGCONFIGDIR"
flags=$(pkg-config --define-prefix --cflags --libs llmsession)
echo "install-check: pkg-config flags: $flags"
# shellcheck disable=SC2086 # the flags are words
$cc -std=c11 -Wall -Wextra -Werror tests/c/install_check.c $flags -o "$tmp/install_check"
LD_LIBRARY_PATH="$tmp$LIBDIR" "$tmp/install_check"
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror examples/c/quickstart.c $flags -o "$tmp/quickstart"
LD_LIBRARY_PATH="$tmp$LIBDIR" "$tmp/quickstart"
lib="$tmp$LIBDIR/$REALNAME"
debug="$tmp$LIBDIR/debug/$REALNAME.debug"
if readelf -S "$lib" | grep -q '\.debug_info'; then echo "install-check: the installed library still has debug info"; exit 1; fi
readelf -S "$debug" | grep -q '\.debug_info' || { echo "install-check: no split debug info"; exit 1; }
readelf -p .gnu_debuglink "$lib" | grep -q "$REALNAME.debug" || { echo "install-check: no debuglink"; exit 1; }
echo "install-check: debug info split: library $(du -k "$lib" | cut -f1) KiB, debug/$REALNAME.debug $(du -k "$debug" | cut -f1) KiB, static $(du -k "$tmp$LIBDIR/libllmsession.a" | cut -f1) KiB"
ls "$tmp$LIBDIR" "$tmp$INCLUDEDIR"
