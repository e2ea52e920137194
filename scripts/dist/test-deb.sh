#!/usr/bin/env bash
# Install test of the Debian packages (scripts/dist/deb.sh): `dpkg -i` the three of them, check
# what dpkg says they hold, then as a user without our toolchain (common.sh, without_toolchain)
# build examples/readme/hello.c with nothing but `cc hello.c $(pkg-config --cflags --libs
# llmsession)`, run it twice (the second run resumes the log the first wrote) and verify the
# log with the installed `llmsession`; build examples/cpp with find_package(llmsession) and no
# paths. The packages are purged on the way out, whatever happened, so the system is as before.
# Needs root (dpkg -i); refuses to run where llmsession is installed already, by a package or
# by hand, since the purge would take that away too.
set -euo pipefail
source "$(dirname "$0")/common.sh"
fail() { echo "test-deb: $*"; exit 1; }
[ "$(id -u)" = 0 ] || fail "dpkg -i needs root (run it as root, or in a container or CI job that is)"
command -v dpkg >/dev/null || fail "dpkg is missing: the Debian packages install on Debian and its derivatives only"
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=/usr/lib/$multiarch
debversion=$VERSION-${DEB_REVISION:-1}
libpkg=libllmsession${SONAME#libllmsession.so.}
pkgs=("$libpkg" libllmsession-dev llmsession)
debs=()
for pkg in "${pkgs[@]}"; do
    deb=$DIST/${pkg}_${debversion}_$arch.deb
    [ -f "$deb" ] || fail "$deb is missing (DIST_ONLY=deb make dist)"
    debs+=("$deb")
done
present=$(dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\n' 'libllmsession*' llmsession 2>/dev/null |
    awk '$3 != "un"' || true)
[ -z "$present" ] || fail "refusing: llmsession packages are installed already (the purge at the end would remove them): $present"
for f in "$libdir/$REALNAME" "$libdir/$SONAME" "$libdir/libllmsession.so" "$libdir/pkgconfig/llmsession.pc" \
    /usr/include/llmsession.h /usr/bin/llmsession; do
    [ ! -e "$f" ] || fail "refusing: $f exists already, from no package (the purge at the end would remove it)"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmsession-test-deb.XXXXXX")
cleanup() {
    local rc=$?
    if ! dpkg --purge "${pkgs[@]}" >"$tmp/purge.log" 2>&1; then
        cat "$tmp/purge.log"
        echo "test-deb: dpkg --purge ${pkgs[*]} failed"
        rc=1
    elif [ -e "$libdir/$REALNAME" ] || [ -e /usr/bin/llmsession ] || [ -e /usr/include/llmsession.h ]; then
        echo "test-deb: files of llmsession are left after dpkg --purge"
        rc=1
    fi
    rm -rf "$tmp"
    exit $rc
}
trap cleanup EXIT
dpkg -i "${debs[@]}" >"$tmp/install.log" 2>&1 || fail "dpkg -i failed: $(cat "$tmp/install.log")"
echo "test-deb: dpkg -i ${debs[*]##*/}"

# What dpkg says each package holds.
has() { # PACKAGE PATH...
    local pkg=$1 path
    shift
    for path in "$@"; do dpkg -L "$pkg" | grep -x "$path" >/dev/null || fail "dpkg -L $pkg does not list $path"; done
}
has "$libpkg" "$libdir/$REALNAME" "$libdir/$SONAME" "/usr/share/doc/$libpkg/copyright" \
    "/usr/share/doc/$libpkg/changelog.Debian.gz"
has libllmsession-dev /usr/include/llmsession.h /usr/include/llmsession.hpp "$libdir/libllmsession.so" \
    "$libdir/libllmsession.a" "$libdir/pkgconfig/llmsession.pc" "$libdir/cmake/llmsession/llmsessionConfig.cmake" \
    "$libdir/cmake/llmsession/llmsessionConfigVersion.cmake" /usr/share/doc/libllmsession-dev/copyright
has llmsession /usr/bin/llmsession /usr/share/man/man1/llmsession.1.gz /usr/share/doc/llmsession/copyright
dpkg -L "$libpkg" | grep '\.a$\|/include/\|/bin/' >/dev/null && fail "$libpkg holds more than the runtime library: $(dpkg -L "$libpkg")"
for pkg in "${pkgs[@]}"; do
    [ "$(dpkg-query -W -f '${db:Status-Abbrev}' "$pkg")" = "ii " ] || fail "$pkg is not installed: $(dpkg -s "$pkg")"
    bad=$(dpkg --verify "$pkg" 2>&1) || true
    [ -z "$bad" ] || fail "the files of $pkg do not match its md5sums: $bad"
    echo "test-deb: $pkg $(dpkg-query -W -f '${Version}, Installed-Size ${Installed-Size} KiB, Depends: ${Depends}' "$pkg")"
done
[ "$(stat -c %a "$libdir/$REALNAME")" = 644 ] || fail "$libdir/$REALNAME is not mode 644"
ldconfig -p | grep -E "$SONAME .*=> (/usr)?/lib/$multiarch/$SONAME\$" >/dev/null || fail "ldconfig does not know $SONAME (the trigger did not run)"
zcat /usr/share/man/man1/llmsession.1.gz | grep '^\.TH LLMSESSION 1' >/dev/null || fail "the man page is not a man page"

mkdir -p "$tmp/src/cpp"
cp "$ROOT/examples/readme/hello.c" "$tmp/src/"
cp "$ROOT"/examples/cpp/CMakeLists.txt "$ROOT"/examples/cpp/*.cpp "$tmp/src/cpp/"
cat >"$tmp/test.sh" <<'SCRIPT'
set -euo pipefail
libdir=$1
fail() { echo "test-deb: $*"; exit 1; }
command -v cargo >/dev/null && fail "cargo is on PATH ($PATH)"
[ "$(command -v llmsession)" = /usr/bin/llmsession ] || fail "llmsession on PATH is $(command -v llmsession), not /usr/bin/llmsession"
[ "$(pkg-config --variable=libdir llmsession)" = "$libdir" ] ||
    fail "pkg-config finds another llmsession.pc: libdir $(pkg-config --variable=libdir llmsession)"
cd src
flags=$(pkg-config --cflags --libs llmsession)
echo "test-deb: cc hello.c \$(pkg-config --cflags --libs llmsession): $flags"
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 -Wall -Werror hello.c $flags -o hello
loaded=$(ldd ./hello | awk '/libllmsession/ { print $3 }')
[ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/libllmsession.so")" ] ||
    fail "hello does not load the packaged library: $(ldd ./hello)"
./hello >run1.txt 2>&1 || fail "hello failed: $(cat run1.txt)"
grep -q '^sent [0-9]* bytes; verify: {"compactions":0,"events":[0-9]*,"requests":1}$' run1.txt || fail "hello, first run: $(cat run1.txt)"
./hello >run2.txt 2>&1 || fail "hello failed on resume: $(cat run2.txt)"
grep -q '"requests":2}$' run2.txt || fail "hello, second run did not resume: $(cat run2.txt)"
echo "test-deb:   ./hello twice: $(cat run2.txt)"
llmsession verify hello.jsonl >verify.txt || fail "llmsession verify hello.jsonl: $(cat verify.txt)"
grep -q '^ok: .* 2 requests' verify.txt || fail "llmsession verify said: $(cat verify.txt)"
echo "test-deb:   llmsession verify hello.jsonl: $(cat verify.txt)"
cmake -S cpp -B build-cpp -DLLMSESSION_FIND=cmake >cmake.log 2>&1 || fail "cmake examples/cpp: $(cat cmake.log)"
cmake --build build-cpp >>cmake.log 2>&1 || fail "building examples/cpp: $(cat cmake.log)"
grep -q "llmsession_DIR:PATH=$libdir/cmake/llmsession" build-cpp/CMakeCache.txt || fail "find_package did not find $libdir/cmake/llmsession"
./build-cpp/llmsession_example example.jsonl >cpp.txt 2>&1 || fail "llmsession_example: $(cat cpp.txt)"
llmsession verify example.jsonl >verify.txt || fail "llmsession verify example.jsonl: $(cat verify.txt)"
echo "test-deb: examples/cpp with find_package(llmsession 0.2 CONFIG), no paths; llmsession verify: $(cat verify.txt)"
SCRIPT
without_toolchain "$tmp" bash test.sh "$libdir"
echo "test-deb: ok (the packages are purged on exit)"
