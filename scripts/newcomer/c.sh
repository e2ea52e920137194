#!/usr/bin/env bash
# The C and C++ newcomer path (README, "Install and link" and "One turn in each language";
# docs/install.md), followed in a temporary directory outside the repository: install into a
# prefix of its own (`make install PREFIX=...`), point PKG_CONFIG_PATH at it, build the README's
# C and C++ examples and the quickstart with only `pkg-config --cflags --libs llmsession`, run each twice
# without LD_LIBRARY_PATH (the second run resumes the session the first kept in its file),
# verify both logs with the installed `llmsession` command, then `make uninstall` and check
# that nothing of llmsession is left in the prefix.
#   scripts/newcomer/c.sh       (MAKE, CC, CXX: as make passes them)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmsession-newcomer-c.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "newcomer/c: $*"; exit 1; }
unset LD_LIBRARY_PATH
make=${MAKE:-make}
cc=${CC:-cc}
cxx=${CXX:-c++}

prefix=$tmp/prefix
echo "newcomer/c: make install PREFIX=$prefix"
"$make" --no-print-directory -C "$root" install PREFIX="$prefix" >"$tmp/install.log" 2>&1 ||
    fail "make install failed: $(tail -n 20 "$tmp/install.log")"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PATH=$prefix/bin:$PATH

app=$tmp/app
mkdir -p "$app"
cp "$root/examples/readme/hello.c" "$root/examples/readme/hello.cpp" "$root/examples/c/quickstart.c" "$app/"
cd "$app"
flags=$(pkg-config --cflags --libs llmsession)
echo "newcomer/c: cc hello.c \$(pkg-config --cflags --libs llmsession): $flags"
# shellcheck disable=SC2086 # the flags are words
"$cc" -std=c11 hello.c $flags -o hello
# shellcheck disable=SC2086
"$cc" -std=c11 quickstart.c $flags -o quickstart
# shellcheck disable=SC2086
"$cxx" -std=c++17 hello.cpp $flags -o hello_cpp

./hello >run1.txt 2>&1 || fail "hello failed: $(cat run1.txt)"
grep -q '^sent [0-9]* bytes; verify: {"compactions":0,"events":[0-9]*,"requests":1}$' run1.txt || fail "hello, first run: $(cat run1.txt)"
./hello >run2.txt 2>&1 || fail "hello failed on resume: $(cat run2.txt)"
grep -q '"requests":2}$' run2.txt || fail "hello, second run did not resume: $(cat run2.txt)"
llmsession verify hello.jsonl >verify.txt || fail "llmsession verify hello.jsonl: $(cat verify.txt)"
grep -q '^ok: .* 2 requests' verify.txt || fail "llmsession verify said: $(cat verify.txt)"
echo "newcomer/c: hello twice (resumed); llmsession verify: $(cat verify.txt)"

mkdir cpp && (cd cpp && ../hello_cpp >run1.txt 2>&1 && ../hello_cpp >run2.txt 2>&1) ||
    fail "hello.cpp failed: $(cat cpp/run*.txt)"
grep -q '"requests":2}$' cpp/run2.txt || fail "hello.cpp, second run did not resume: $(cat cpp/run2.txt)"
llmsession verify cpp/hello.jsonl >verify.txt || fail "llmsession verify cpp/hello.jsonl: $(cat verify.txt)"
grep -q '^ok: .* 2 requests' verify.txt || fail "llmsession verify said: $(cat verify.txt)"
echo "newcomer/c: hello.cpp (c++ -std=c++17, the same flags) twice (resumed); llmsession verify: $(cat verify.txt)"

./quickstart session.jsonl >qs1.txt 2>&1 || fail "quickstart failed: $(cat qs1.txt)"
grep -q '^quickstart: ok$' qs1.txt || fail "quickstart did not finish: $(cat qs1.txt)"
./quickstart session.jsonl >qs2.txt 2>&1 || fail "quickstart failed on resume: $(cat qs2.txt)"
grep -q '^opened session.jsonl: .*"turns":2,' qs2.txt || fail "quickstart did not resume: $(cat qs2.txt)"
llmsession verify session.jsonl >verify.txt || fail "llmsession verify session.jsonl: $(cat verify.txt)"
grep -q '^ok: .* 6 requests and 2 compaction requests' verify.txt || fail "llmsession verify said: $(cat verify.txt)"
echo "newcomer/c: quickstart twice (resumed); llmsession verify: $(cat verify.txt)"
if ./quickstart "$tmp/missing/session.jsonl" >/dev/null 2>err.txt; then fail "quickstart succeeded on a missing directory"; fi
grep -q 'No such file or directory' err.txt || fail "quickstart's failure message: $(cat err.txt)"

"$make" --no-print-directory -C "$root" uninstall PREFIX="$prefix" >"$tmp/uninstall.log" 2>&1 ||
    fail "make uninstall failed: $(cat "$tmp/uninstall.log")"
left=$(find "$prefix" -name '*llmsession*' 2>/dev/null || true)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "newcomer/c: make uninstall removed every installed file"
echo "newcomer/c: ok"
