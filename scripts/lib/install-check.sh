#!/usr/bin/env bash
# `make install-check`: installs twice (scripts/lib/install.sh, with the Makefile's names and
# paths in the environment, as `make install` passes them) and checks what a user gets.
#
# 1. Under PREFIX into a temporary DESTDIR, as a packager installs: two C programs built with
#    only `pkg-config --define-prefix` flags, tests/c/install_check.c and the quickstart
#    (examples/c/quickstart.c), run without LD_LIBRARY_PATH; the debug info of the library and
#    of the command is split off into lib/debug.
# 2. Into a non-system prefix of its own (no DESTDIR), as a user without root installs: the
#    quickstart built with only `pkg-config --cflags --libs llmsession` (PKG_CONFIG_PATH alone)
#    runs without LD_LIBRARY_PATH, keeps a session in a file and resumes it; a failure prints
#    the library's own message; the installed `llmsession` prints its usage and verifies the
#    log; no installed library or program has debug info; `make uninstall` (uninstall.sh)
#    removes every llmsession file and leaves the prefix's other files alone.
# CC: the C compiler.
set -euo pipefail
# A pipe into `grep ... >/dev/null`, never `grep -q`: grep -q exits at its first match, and the
# command before it can then die of SIGPIPE, which pipefail reports as a failure.
: "${REALNAME:?run it through make install-check}" "${LIBDIR:?}" "${INCLUDEDIR:?}" "${PKGCONFIGDIR:?}"
: "${BINDIR:?}" "${MANIFEST:?}"
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install-check: $*"; exit 1; }
# Nothing found through the environment: the programs must find the library by themselves.
noenv() { env -u LD_LIBRARY_PATH "$@"; }

# --- 1. PREFIX under a DESTDIR ---
dest=$tmp/dest
DESTDIR=$dest INSTALL_DEBUG=split bash scripts/lib/install.sh >/dev/null
flags=$(PKG_CONFIG_PATH="$dest$PKGCONFIGDIR" pkg-config --define-prefix --cflags --libs llmsession)
echo "install-check: DESTDIR, pkg-config --define-prefix flags: $flags"
# shellcheck disable=SC2086 # the flags are words
$cc -std=c11 -Wall -Wextra -Werror tests/c/install_check.c $flags -o "$tmp/install_check"
noenv "$tmp/install_check"
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror examples/c/quickstart.c $flags -o "$tmp/quickstart"
noenv "$tmp/quickstart" >/dev/null
for f in "$dest$LIBDIR/$REALNAME" "$dest$BINDIR/llmsession"; do
    name=$(basename "$f")
    debug=$dest$LIBDIR/debug/$name.debug
    if readelf -S "$f" | grep -e '\.debug_info' >/dev/null; then fail "$f still has debug info"; fi
    # A .debug file of a program keeps the program's headers over sections it no longer holds,
    # and readelf complains (exit 1) that the interpreter's name is missing: its status is not
    # the test, the section list is.
    { readelf -S "$debug" 2>/dev/null || true; } | grep -e '\.debug_info' >/dev/null || fail "no split debug info for $name"
    readelf -p .gnu_debuglink "$f" | grep -e "$name.debug" >/dev/null || fail "no debuglink in $name"
done
echo "install-check: debug info split off the library and the command"

# --- 2. A non-system prefix of its own ---
p=$tmp/prefix
mkdir -p "$p/lib" "$p/bin" "$p/share"
echo "not ours" >"$p/lib/other.txt"
echo "not ours" >"$p/bin/other"
PREFIX=$p LIBDIR=$p/lib INCLUDEDIR=$p/include PKGCONFIGDIR=$p/lib/pkgconfig \
    CMAKEDIR=$p/lib/cmake/llmsession BINDIR=$p/bin MANIFEST=$p/share/llmsession/install-manifest.txt \
    DESTDIR= PC_RPATH=yes bash scripts/lib/install.sh >/dev/null
flags=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --cflags --libs llmsession)
echo "install-check: prefix $p, pkg-config flags: $flags"
case " $flags " in *" -Wl,-rpath,$p/lib "*) ;; *) fail "the .pc's Libs carry no rpath" ;; esac
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror examples/c/quickstart.c $flags -o "$tmp/qs"
noenv ldd "$tmp/qs" | grep -e "libllmsession.so.* => $p/lib/" >/dev/null || fail "the quickstart does not load $p/lib's library"
log=$tmp/work/session.jsonl
mkdir -p "$tmp/work"
noenv "$tmp/qs" "$log" >"$tmp/run1.txt" || fail "the quickstart failed: $(cat "$tmp/run1.txt")"
grep -q '^quickstart: ok$' "$tmp/run1.txt" || fail "the quickstart did not finish"
noenv "$tmp/qs" "$log" >"$tmp/run2.txt" || fail "the resumed quickstart failed"
grep -q '^opened .*"turns":2,' "$tmp/run2.txt" || fail "the second run did not resume the 2 turns of the first"
# Both runs: 22 events each, and the checkpoint record written after each run's compaction.
grep -q '^verify: .*"events":46' "$tmp/run2.txt" || fail "the resumed session does not hold both runs"
echo "install-check: the quickstart ran without LD_LIBRARY_PATH and resumed its session"
# A failure prints the library's message, not the placeholder of an unset error handle.
if noenv "$tmp/qs" "$tmp/missing/dir/session.jsonl" >/dev/null 2>"$tmp/err.txt"; then
    fail "the quickstart succeeded on a path in a missing directory"
fi
grep -q 'lls_session_open_file.*failed (status [0-9]*): .*missing/dir/session.jsonl: .*No such file or directory' "$tmp/err.txt" ||
    fail "the quickstart's failure did not print the library's message: $(cat "$tmp/err.txt")"
if grep -qi 'NULL' "$tmp/err.txt"; then fail "the quickstart read the error before the call: $(cat "$tmp/err.txt")"; fi
echo "install-check: a failing call prints: $(cat "$tmp/err.txt")"
# The command: --help prints its usage on stdout and exits 0, --version names this version, and
# it verifies.
noenv "$p/bin/llmsession" --help >"$tmp/help.txt" 2>/dev/null || fail "llmsession --help exited $?"
grep -qi 'usage' "$tmp/help.txt" || fail "llmsession --help printed no usage: $(cat "$tmp/help.txt")"
noenv "$p/bin/llmsession" --version | grep -e "$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)" >/dev/null ||
    fail "llmsession --version does not name the version in Cargo.toml"
noenv "$p/bin/llmsession" verify "$log" >"$tmp/verify.txt" || fail "llmsession verify failed: $(cat "$tmp/verify.txt")"
grep -q '^ok: 46 events' "$tmp/verify.txt" || fail "llmsession verify said: $(cat "$tmp/verify.txt")"
echo "install-check: installed llmsession: $(cat "$tmp/verify.txt")"
for f in "$p/lib/$REALNAME" "$p/lib/libllmsession.a" "$p/bin/llmsession"; do
    if readelf -S "$f" | grep -e '\.debug_info' >/dev/null; then fail "$f has debug info"; fi
done
echo "install-check: sizes (KiB): $(cd "$p" && du -k "lib/$REALNAME" lib/libllmsession.a bin/llmsession | awk '{ printf "%s %s, ", $2, $1 }')debug files $(du -sk "$p/lib/debug" | cut -f1)"
MANIFEST=$p/share/llmsession/install-manifest.txt bash scripts/lib/uninstall.sh >/dev/null
left=$(cd "$p" && find . -name '*llmsession*')
[ -z "$left" ] || fail "make uninstall left: $left"
[ -f "$p/lib/other.txt" ] && [ -f "$p/bin/other" ] || fail "make uninstall removed files it did not install"
[ ! -d "$p/include" ] || fail "make uninstall left the include directory it created"
echo "install-check: uninstall removed every llmsession file and kept the others: $(cd "$p" && find . -mindepth 1 | sort | tr '\n' ' ')"
echo "install-check: ok"
