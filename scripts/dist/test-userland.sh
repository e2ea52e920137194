#!/usr/bin/env bash
# The wheel and the C archive used on an older system: a Debian 11 (bullseye) userland, glibc
# 2.31 (older than the 2.34 a library built on this machine natively would need), Python 3.9,
# pip 20.3, gcc 10 and binutils 2.35, in a chroot. The oldest Debian release that Debian's
# package mirror (debootstrap's default) still serves: buster, stretch and older are only in
# Debian's archive of old releases, which this machine and CI do not reach; and the oldest
# Python the wheel supports (3.9). glibc 2.17 itself is checked by the symbol checks (glibc-check.sh, auditwheel,
# the zig link in test-c.sh), not by running on it.
#   - the userland is made once with debootstrap (--variant=minbase, python3, python3-venv,
#     gcc, libc6-dev, pkg-config) into ${LLMSESSION_CACHE:-~/.cache/llmsession}/userland/bullseye
#     (about 330 MB, some minutes; bounded by USERLAND_SETUP_TIMEOUT, 1200 s) and reused;
#   - in it, in a private mount namespace (unshare: the /proc mounted there goes away with it),
#     as `env -i` with a plain PATH: a venv, `pip install --no-index` of the wheel, hello.py
#     twice (the second run resumes the log), `llmsession verify` with the wheel's command;
#     the C archive unpacked, hello.c built with gcc and `pkg-config --define-prefix` (shared)
#     and against lib/libllmsession.a (static), each run twice, the log verified with the
#     archive's bin/llmsession. Bounded by USERLAND_TIMEOUT (600 s).
# Needs root (debootstrap, chroot, mount). When the userland cannot be made (no debootstrap and
# no apt-get, or the mirror does not serve the suite), it says so and skips (exit 0, the
# symbol checks being the guard), unless LLMSESSION_USERLAND=require; LLMSESSION_USERLAND=skip
# skips it.
set -euo pipefail
source "$(dirname "$0")/common.sh"
fail() { echo "test-dist/userland: $*" >&2; exit 1; }
say() { echo "test-dist/userland: $*"; }
skip() {
    [ "${LLMSESSION_USERLAND:-}" != require ] || fail "$* (LLMSESSION_USERLAND=require)"
    say "SKIPPED: $*; the symbol checks (glibc-check.sh, auditwheel, the glibc $DIST_GLIBC link) remain the guard"
    exit 0
}
[ "${LLMSESSION_USERLAND:-}" != skip ] || skip "LLMSESSION_USERLAND=skip"
suite=bullseye
packages=python3,python3-venv,gcc,libc6-dev,pkg-config
cache=${LLMSESSION_CACHE:-$HOME/.cache/llmsession}/userland
root=$cache/$suite
stamp="$suite $packages"
[ "$(id -u)" = 0 ] || fail "debootstrap, chroot and mount need root (run it as root, or in a container or CI job that is)"

shopt -s nullglob
wheels=("$DIST"/python/llmsession-"$VERSION"-py3-none-*.whl)
shopt -u nullglob
[ ${#wheels[@]} -eq 1 ] || fail "expected one wheel in $DIST/python, found ${#wheels[@]} (make dist)"
wheel=${wheels[0]}
archive=$DIST/llmsession-$VERSION-linux-$DIST_ARCH.tar.gz
[ -f "$archive" ] || fail "$archive is missing (make dist)"

# Nothing may be mounted under a tree that is about to be removed or replaced.
mounted_under() { awk -v p="$1/" 'index($2 "/", p) == 1 { print $2 }' /proc/mounts; }

# 1. The userland, made once.
if [ "$(cat "$root/.llmsession-userland" 2>/dev/null)" != "$stamp" ]; then
    if ! command -v debootstrap >/dev/null; then
        if [ "${LLMSESSION_NO_APT:-0}" = 1 ] || ! command -v apt-get >/dev/null; then
            skip "debootstrap is not installed (apt-get install debootstrap)"
        fi
        say "apt-get install debootstrap"
        { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap; } \
            >"$cache.apt.log" 2>&1 || { tail -n 5 "$cache.apt.log"; skip "apt-get install debootstrap failed"; }
    fi
    mkdir -p "$cache"
    for d in "$root" "$root.new"; do
        [ -z "$(mounted_under "$d")" ] || fail "something is mounted under $d: $(mounted_under "$d" | tr '\n' ' ')"
    done
    rm -rf "$root.new"
    say "making the $suite userland with debootstrap (Debian's mirror) into $root (once; it is reused)"
    start=$(date +%s)
    if ! timeout "${USERLAND_SETUP_TIMEOUT:-1200}" debootstrap --variant=minbase --include="$packages" \
        "$suite" "$root.new" >"$cache/$suite.debootstrap.log" 2>&1; then
        tail -n 5 "$cache/$suite.debootstrap.log"
        rm -rf "$root.new"
        skip "debootstrap $suite failed (log: $cache/$suite.debootstrap.log)"
    fi
    # What the tests do not need: the downloaded packages, documentation, translations.
    rm -rf "$root.new"/var/cache/apt/archives/*.deb "$root.new"/usr/share/doc "$root.new"/usr/share/man \
        "$root.new"/usr/share/locale "$root.new"/var/lib/apt/lists/*_Packages
    echo "$stamp" >"$root.new/.llmsession-userland"
    rm -rf "$root"
    mv "$root.new" "$root"
    say "$suite userland made in $(( $(date +%s) - start )) s: $(du -sh "$root" | cut -f1)"
fi

# 2. The examples, in the chroot.
work=$(mktemp -d "$root/tmp/llmsession-userland.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$wheel" "$archive" "$ROOT/examples/readme/hello.py" "$ROOT/examples/readme/hello.c" "$work/"
inside=/tmp/$(basename "$work")
cat >"$work/test.sh" <<'SCRIPT'
set -euo pipefail
cd "$1"
wheel=$2 name=$3 static_libs=$4
fail() { echo "test-dist/userland: $*" >&2; exit 1; }
say() { echo "test-dist/userland: $*"; }
say "in the chroot: $(ldd --version | head -n 1), $(python3 --version), $(gcc --version | head -n 1), $(ld --version | head -n 1)"

# The wheel.
python3 -m venv venv
venv/bin/pip install --quiet --no-index --disable-pip-version-check "./$wheel" || fail "pip install --no-index $wheel failed"
say "$(venv/bin/pip --version | cut -d' ' -f1-2) installed $wheel"
mkdir py && cd py
first=$(../venv/bin/python ../hello.py) || fail "hello.py failed: $first"
[[ $first == *'verify: {"compactions":0,"events":7,"requests":1}' ]] || fail "hello.py printed: $first"
second=$(../venv/bin/python ../hello.py) || fail "hello.py failed on the resumed log: $second"
[[ $second == *'verify: {"compactions":0,"events":14,"requests":2}' ]] || fail "the resumed hello.py printed: $second"
say "hello.py twice: $second"
report=$(../venv/bin/llmsession verify hello.jsonl) || fail "the wheel's llmsession verify failed: $report"
[[ $report == "ok: 14 events, 2 requests"* ]] || fail "llmsession verify printed: $report"
say "the wheel's llmsession verify hello.jsonl: $report"
cd ..

# The C archive: shared (pkg-config --define-prefix) and static.
tar xzf "$name.tar.gz"
p=$PWD/$name
flags=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --define-prefix --cflags --libs llmsession)
# shellcheck disable=SC2086 # the flags and libraries are words
gcc -std=c11 -Wall -Werror hello.c $flags -o hello-shared || fail "gcc hello.c $flags failed"
# shellcheck disable=SC2086
gcc -std=c11 -Wall -Werror hello.c -I"$p/include" "$p/lib/libllmsession.a" $static_libs -o hello-static ||
    fail "gcc hello.c libllmsession.a $static_libs failed"
for kind in shared static; do
    mkdir "c-$kind" && cd "c-$kind"
    ../hello-$kind >run1.txt 2>&1 || fail "hello-$kind failed: $(cat run1.txt)"
    ../hello-$kind >run2.txt 2>&1 || fail "hello-$kind failed on resume: $(cat run2.txt)"
    grep -q '"requests":2}$' run2.txt || fail "hello-$kind, second run did not resume: $(cat run2.txt)"
    report=$("$p/bin/llmsession" verify hello.jsonl) || fail "$name/bin/llmsession verify failed: $report"
    [[ $report == "ok: "*" 2 requests"* ]] || fail "llmsession verify printed: $report"
    say "hello.c ($kind: $(ldd ../hello-$kind | grep -c libllmsession) libllmsession loaded) twice: $(cat run2.txt); bin/llmsession verify: $report"
    cd ..
done
SCRIPT
start=$(date +%s)
status=0
timeout "${USERLAND_TIMEOUT:-600}" unshare --mount --propagation private -- sh -c \
    'mount -t proc proc "$1/proc" && exec chroot "$@"' _ "$root" \
    /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$inside" LANG=C.UTF-8 \
    /bin/bash "$inside/test.sh" "$inside" "$(basename "$wheel")" "$(basename "$archive" .tar.gz)" "$NATIVE_STATIC_LIBS" ||
    status=$?
[ "$status" = 0 ] || fail "the examples failed in the $suite chroot (exit $status$([ "$status" = 124 ] && echo ', timed out'))"
say "ok: the wheel and the C archive ran on $suite in $(( $(date +%s) - start )) s"
