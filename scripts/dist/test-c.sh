#!/usr/bin/env bash
# Install test of the C/C++ release archive (scripts/dist/c.sh), as a user without our
# toolchain meets it (common.sh, without_toolchain): unpack it in a temporary directory, check
# its checksums and that the libraries and the command are stripped (the shared library keeping
# its soname), then
#   C:   examples/readme/hello.c built with `cc` and `pkg-config --define-prefix` pointed at the
#        unpacked lib/pkgconfig; run twice (the second run resumes the log the first wrote);
#        the log verified with the unpacked bin/llmsession;
#   C++: examples/cpp (its own CMakeLists.txt, LLMSESSION_FIND=cmake) and examples/readme/hello.cpp
#        (a CMakeLists written here, linked with the static library) built with
#        find_package(llmsession) through CMAKE_PREFIX_PATH=<unpacked>; run, verified.
set -euo pipefail
source "$(dirname "$0")/common.sh"
name=llmsession-$VERSION-linux-$DIST_ARCH
archive=$DIST/$name.tar.gz
[ -f "$archive" ] || { echo "test-c: $archive is missing (DIST_ONLY=c make dist)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmsession-test-c.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$archive" "$tmp/"
mkdir -p "$tmp/src/cpp"
cp "$ROOT/examples/readme/hello.c" "$ROOT/examples/readme/hello.cpp" "$tmp/src/"
cp "$ROOT"/examples/cpp/CMakeLists.txt "$ROOT"/examples/cpp/*.cpp "$tmp/src/cpp/"
cat >"$tmp/test.sh" <<'SCRIPT'
set -euo pipefail
name=$1
fail() { echo "test-c: $*"; exit 1; }
command -v cargo >/dev/null && fail "cargo is on PATH ($PATH)"
tar xzf "$name.tar.gz"
p=$PWD/$name
(cd "$p" && sha256sum --quiet -c SHA256SUMS) || fail "the archive's SHA256SUMS does not match its files"
echo "test-c: unpacked $name.tar.gz ($(stat -c %s "$name.tar.gz") bytes) into $p; SHA256SUMS ok"

# The libraries and the command: stripped, the soname and its links in place.
lib=$p/lib/$(basename "$(readlink -f "$p/lib/libllmsession.so")")
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] || fail "$lib has no soname"
[ -L "$p/lib/$soname" ] || fail "lib/$soname (the soname link) is missing"
[ "$(readlink -f "$p/lib/$soname")" = "$lib" ] || fail "lib/$soname does not point at $lib"
for f in "$lib" "$p/bin/llmsession"; do
    file -b "$f" | grep ', stripped' >/dev/null || fail "$f is not stripped: $(file -b "$f")"
    readelf -S "$f" | grep -E '\.debug_(info|line|str) ' >/dev/null && fail "$f has debug info"
done
readelf -S "$lib" | grep ' \.symtab ' >/dev/null && fail "$lib still has a symbol table"
readelf -W --dyn-syms "$lib" | grep ' lls_session_open_file$' >/dev/null || fail "$lib does not export lls_session_open_file"
readelf -S "$p/lib/libllmsession.a" 2>/dev/null | grep '\.debug_info' >/dev/null && fail "libllmsession.a has debug info"
echo "test-c: $(basename "$lib") (soname $soname, stripped) $(stat -c %s "$lib") bytes;" \
    "libllmsession.a $(stat -c %s "$p/lib/libllmsession.a") bytes; bin/llmsession $(stat -c %s "$p/bin/llmsession") bytes"

verify() { # LOG REQUESTS
    "$p/bin/llmsession" verify "$1" >verify.txt || fail "llmsession verify $1: $(cat verify.txt)"
    grep -q "^ok: .* $2 requests" verify.txt || fail "llmsession verify $1 said: $(cat verify.txt)"
    echo "test-c:   $p/bin/llmsession verify $1: $(cat verify.txt)"
}

# C, with pkg-config relocated to the unpacked directory.
mkdir c && cd c
cp ../src/hello.c .
flags=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --define-prefix --cflags --libs llmsession)
case "$flags" in *"-I$p/include"*"-L$p/lib"*) ;; *) fail "pkg-config --define-prefix did not relocate: $flags" ;; esac
echo "test-c: cc hello.c \$(pkg-config --define-prefix --cflags --libs llmsession): $flags"
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 -Wall -Werror hello.c $flags -o hello
ldd ./hello | grep "libllmsession.so.* => $p/lib/" >/dev/null || fail "hello does not load the unpacked library: $(ldd ./hello)"
./hello >run1.txt 2>&1 || fail "hello failed: $(cat run1.txt)"
grep -q '^sent [0-9]* bytes; verify: {"compactions":0,"events":[0-9]*,"requests":1}$' run1.txt || fail "hello, first run: $(cat run1.txt)"
./hello >run2.txt 2>&1 || fail "hello failed on resume: $(cat run2.txt)"
grep -q '"requests":2}$' run2.txt || fail "hello, second run did not resume: $(cat run2.txt)"
echo "test-c:   ./hello twice: $(cat run2.txt)"
verify hello.jsonl 2
cd ..

# C++: find_package(llmsession) through CMAKE_PREFIX_PATH.
cmake -S src/cpp -B build-cpp -DLLMSESSION_FIND=cmake -DCMAKE_PREFIX_PATH="$p" >cmake.log 2>&1 ||
    fail "cmake examples/cpp: $(cat cmake.log)"
cmake --build build-cpp >>cmake.log 2>&1 || fail "building examples/cpp: $(cat cmake.log)"
grep -q "llmsession_DIR:PATH=$p/lib/cmake/llmsession" build-cpp/CMakeCache.txt || fail "find_package did not find $p"
echo "test-c: examples/cpp built with find_package(llmsession 0.2 CONFIG) from $p/lib/cmake/llmsession"
./build-cpp/llmsession_example example.jsonl >cpp.txt 2>&1 || fail "llmsession_example: $(cat cpp.txt)"
grep -q '^verify: {' cpp.txt || fail "llmsession_example did not verify: $(cat cpp.txt)"
"$p/bin/llmsession" verify example.jsonl >verify.txt || fail "llmsession verify example.jsonl: $(cat verify.txt)"
echo "test-c:   llmsession_example; $p/bin/llmsession verify example.jsonl: $(cat verify.txt)"

mkdir -p hello-cpp && cp src/hello.cpp hello-cpp/
cat >hello-cpp/CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(hello_cpp CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(llmsession 0.2 CONFIG REQUIRED)
add_executable(hello_cpp hello.cpp)
target_link_libraries(hello_cpp PRIVATE llmsession::llmsession_static)
CMAKE
cmake -S hello-cpp -B build-hello -DCMAKE_PREFIX_PATH="$p" >cmake.log 2>&1 || fail "cmake hello.cpp: $(cat cmake.log)"
cmake --build build-hello >>cmake.log 2>&1 || fail "building hello.cpp: $(cat cmake.log)"
ldd build-hello/hello_cpp | grep libllmsession >/dev/null && fail "hello_cpp (static) loads libllmsession.so"
mkdir run-cpp && cd run-cpp
../build-hello/hello_cpp >run1.txt 2>&1 && ../build-hello/hello_cpp >run2.txt 2>&1 || fail "hello_cpp failed: $(cat run*.txt)"
grep -q '"requests":2}$' run2.txt || fail "hello_cpp, second run did not resume: $(cat run2.txt)"
echo "test-c: hello.cpp linked with llmsession::llmsession_static ($(stat -c %s ../build-hello/hello_cpp) bytes), twice: $(cat run2.txt)"
verify hello.jsonl 2
echo "test-c: the examples ran from the archive"
SCRIPT
without_toolchain "$tmp" bash test.sh "$name"

# glibc: the shared library and the command need nothing newer than DIST_GLIBC (objdump), and
# hello.c links against glibc DIST_GLIBC's symbols with the static library and with the shared
# one, and runs (common.sh, link_check_old_glibc).
p=$tmp/$name
GLIBC_CHECK_STRIP=$tmp/ bash "$ROOT/scripts/dist/glibc-check.sh" "$DIST_GLIBC" "$p/lib/$REALNAME" "$p/bin/llmsession" |
    sed 's/^/test-c: /' || { echo "test-c: the archive needs a glibc newer than $DIST_GLIBC (above)"; exit 1; }
link_check_old_glibc "$tmp/glibc" "$p/lib/libllmsession.a" "$p/include" "$p/lib/$REALNAME" | sed 's/^dist: //; s/^/test-c: /'
echo "test-c: ok (glibc $DIST_GLIBC)"
