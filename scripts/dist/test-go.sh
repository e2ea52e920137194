#!/usr/bin/env bash
# Install test of the Go module version of $DIST/goproxy (scripts/dist/go.sh), the way a Go user
# meets it, where no toolchain of ours exists (common.sh, without_toolchain: a temporary
# directory, a HOME of its own, no cargo and no checkout on PATH, no PKG_CONFIG_PATH):
#   1. the zip: its entries and sizes against Go's limits; go.sh run again from the same stage
#      gives the same bytes;
#   2. a new module (`go mod init example.com/hello`) with GOPROXY=file://$DIST/goproxy,
#      GOSUMDB=off, GOFLAGS=-mod=mod, its own GOMODCACHE/GOCACHE/GOPATH, GOTOOLCHAIN=local and
#      no build tag: `go get` the module, `go mod verify`, build the README's example
#      (examples/readme/go/main.go; its go.mod's replace is the checkout's, so not copied) and
#      run it twice (the second run resumes the log the first wrote and verifies 2 requests);
#      the program is linked statically against llmsession (ldd and its NEEDED list name no
#      libllmsession);
#   3. the module's command, `go run .../cmd/llmsession@vVERSION verify hello.jsonl` and
#      `go install`ed: verifies the log; a missing log exits 4, as the inspector does;
#   4. glibc: the module's archive links against glibc DIST_GLIBC's symbols, whole and with
#      the README's hello.c (common.sh, link_check_old_glibc: zig), and that program runs.
set -euo pipefail
source "$(dirname "$0")/common.sh"
fail() { echo "test-dist/go: $*" >&2; exit 1; }
say() { echo "test-dist/go: $*"; }
module=github.com/llmsession/llmsession/bindings/go
gover=v$VERSION
proxy=$DIST/goproxy
zip=$proxy/$module/@v/$gover.zip
for f in list "$gover.info" "$gover.mod" "$gover.zip"; do
    [ -f "$proxy/$module/@v/$f" ] || fail "$proxy/$module/@v/$f is missing (DIST_ONLY=go make dist)"
done
command -v go >/dev/null || fail "go is not on PATH"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmsession-test-go.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# 1. The zip.
unzipped=$(unzip -Zt "$zip" | sed -n 's/^[0-9]* files, \([0-9]*\) bytes uncompressed.*/\1/p')
say "$gover.zip: $(stat -c %s "$zip") bytes, $unzipped bytes unzipped ($((unzipped * 100 / (500 << 20))) % of Go's 500 MiB limit), sha256 $(sha256sum "$zip" | cut -d' ' -f1)"
[ "$unzipped" -le $((500 << 20)) ] || fail "the module is over Go's 500 MiB limit unzipped"
unzip -Z1 "$zip" | grep -v "^$module@$gover/" && fail "entries outside $module@$gover/ (above)"
unzip -Z1 "$zip" | grep "^$module@$gover/internal/native/linux_amd64/libllmsession.a$" >/dev/null ||
    fail "the zip has no internal/native/linux_amd64/libllmsession.a"
if [ -d "$DIST_STAGE/lib" ]; then
    DIST="$tmp/again" DIST_STAGE="$DIST_STAGE" bash "$ROOT/scripts/dist/go.sh" >/dev/null
    cmp -s "$zip" "$tmp/again/goproxy/$module/@v/$gover.zip" || fail "go.sh run again from the same stage gave another zip"
    say "go.sh run again from $DIST_STAGE: the same bytes"
    rm -rf "$tmp/again"
fi

# 2. and 3., as a Go user without our toolchain.
mkdir -p "$tmp/src"
cp "$ROOT/examples/readme/go/main.go" "$tmp/src/"
cat >"$tmp/test.sh" <<'SCRIPT'
set -euo pipefail
module=$1 gover=$2 proxy=$3
fail() { echo "test-dist/go: $*" >&2; exit 1; }
say() { echo "test-dist/go: $*"; }
command -v cargo >/dev/null && fail "cargo is on PATH ($PATH)"
[ -z "${PKG_CONFIG_PATH:-}" ] || fail "PKG_CONFIG_PATH is set ($PKG_CONFIG_PATH)"
export GOPROXY=file://$proxy GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=1 GOWORK=off \
    GOMODCACHE=$PWD/gomodcache GOCACHE=$PWD/gocache GOPATH=$PWD/gopath GOENV=off
say "$(go version), GOPROXY=$GOPROXY, no PKG_CONFIG_PATH, no build tag"

mkdir hello && cd hello
go mod init example.com/hello >/dev/null 2>&1
go get "$module@$gover" || fail "go get $module@$gover failed"
grep -q "^require $module $gover" go.mod || fail "go.mod does not require $module $gover: $(cat go.mod)"
go mod verify >/dev/null || fail "go mod verify failed"
cp ../src/main.go .
go build -o hello . || fail "go build of the README's example failed"
say "built the README's example ($(stat -c %s hello) bytes) with $module@$gover"
ldd hello | grep libllmsession >/dev/null && fail "hello is linked dynamically against llmsession: $(ldd hello)"
readelf -d hello | grep NEEDED | grep libllmsession >/dev/null && fail "hello NEEDs libllmsession"
say "ldd hello (no libllmsession):$(ldd hello | awk '{ printf " %s", $1 }')"

mkdir ../run && cd ../run
../hello/hello >first.out || { cat first.out; fail "the first run failed"; }
../hello/hello >second.out || { cat second.out; fail "the second run failed"; }
grep -q '"requests":1' first.out || { cat first.out; fail "the first run did not verify 1 request"; }
grep -q '"requests":2' second.out || { cat second.out; fail "the second run (resuming hello.jsonl) did not verify 2 requests"; }
say "first run: $(tr '\n' ' ' <first.out)"
say "second run: $(tr '\n' ' ' <second.out)"

# The module's command, run from the proxy (go run ...@version ignores the current module:
# no -mod flag there).
log=$PWD/hello.jsonl
out=$(cd ../hello && GOFLAGS= go run "$module/cmd/llmsession@$gover" verify "$log") ||
    fail "go run $module/cmd/llmsession@$gover verify hello.jsonl failed: $out"
echo "$out" | grep 'ok: 2 requests rebuilt' >/dev/null || fail "verify said: $out"
say "go run $module/cmd/llmsession@$gover verify hello.jsonl: $out"
GOFLAGS= GOBIN=$PWD/../bin go install "$module/cmd/llmsession@$gover" || fail "go install of the command failed"
cmd=$PWD/../bin/llmsession
ldd "$cmd" | grep libllmsession >/dev/null && fail "the command is linked dynamically against llmsession"
"$cmd" version
out=$("$cmd" verify --json hello.jsonl) || fail "llmsession verify --json failed: $out"
echo "$out" | grep '"requests":2' >/dev/null || fail "verify --json said: $out"
rc=0
"$cmd" verify missing.jsonl 2>missing.err || rc=$?
[ "$rc" = 4 ] || fail "verify of a missing log exited $rc, not 4: $(cat missing.err)"
say "installed command: verify --json $out; a missing log exits 4: $(cat missing.err)"
SCRIPT
without_toolchain "$tmp" bash test.sh "$module" "$gover" "$proxy"
# The module cache is read-only, as Go makes it.
chmod -R u+w "$tmp" 2>/dev/null || true

# 4. glibc DIST_GLIBC: the module's archive as an old system's linker sees it (whole, and with
# the README's hello.c, which is run).
mkdir -p "$tmp/archive"
unzip -q -o -j "$zip" "$module@$gover/internal/native/linux_amd64/libllmsession.a" \
    "$module@$gover/internal/native/linux_amd64/llmsession.h" -d "$tmp/archive"
link_check_old_glibc "$tmp/glibc" "$tmp/archive/libllmsession.a" "$tmp/archive" | sed 's/^dist: //; s/^/test-dist\/go: /'
say "ok"
