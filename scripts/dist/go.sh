#!/usr/bin/env bash
# The Go module version: dist/goproxy/, laid out as a Go module proxy serves it (GOPROXY=file://...,
# or any static file server), for the module github.com/llmsession/llmsession/bindings/go:
#   <module>/@v/list           the version, vVERSION
#   <module>/@v/vVERSION.info  {"Version","Time"}: Time is SOURCE_DATE_EPOCH
#   <module>/@v/vVERSION.mod   bindings/go/go.mod
#   <module>/@v/vVERSION.zip   the module: every file of bindings/go that git tracks but the
#                              tests (*_test.go read the checkout's tests/scenarios, which the
#                              module does not hold) and .gitignore files, plus
#                              internal/native/linux_amd64/libllmsession.a (the stage's, without
#                              debug info) and llmsession.h, which link_bundled.go links by
#                              default on linux/amd64: `go get` is all a user needs.
# The zip follows Go's module zip rules (entries <module>@vVERSION/<path>, valid file paths, no
# case-insensitive duplicates, at most 500 MiB unzipped, go.mod and LICENSE files at most
# 16 MiB) and is reproducible: entries sorted, every time SOURCE_DATE_EPOCH, fixed modes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
module=github.com/llmsession/llmsession/bindings/go
src=$ROOT/bindings/go
native=internal/native/linux_amd64
fail() { echo "go: $*"; exit 1; }

[ "$(sed -n 's/^module  *//p' "$src/go.mod")" = "$module" ] || fail "$src/go.mod does not declare module $module"
case "$VERSION" in
0.* | 1.*) ;;
*) fail "version $VERSION: a major version of 2 or more needs the module path to end in /v${VERSION%%.*} (bindings/go/go.mod)" ;;
esac
gover=v$VERSION
# The static link line (link_bundled.go) must name every system library the static library needs.
native_libs=$(sed -n 's/^NATIVE_STATIC_LIBS := //p' "$ROOT/Makefile")
# shellcheck disable=SC2016 # ${SRCDIR} is cgo's, not the shell's
ldflags=$(sed -n 's|^#cgo LDFLAGS: \${SRCDIR}/'"$native"'/libllmsession.a ||p' "$src/link_bundled.go")
[ -n "$ldflags" ] || fail "$src/link_bundled.go has no '#cgo LDFLAGS: \${SRCDIR}/$native/libllmsession.a ...' line"
for l in $native_libs; do
    case " $ldflags " in *" $l "*) ;; *) fail "link_bundled.go's LDFLAGS ($ldflags) lack $l (the Makefile's NATIVE_STATIC_LIBS: $native_libs)" ;; esac
done
for f in "$DIST_STAGE/lib/libllmsession.a" "$DIST_STAGE/include/llmsession.h"; do
    [ -f "$f" ] || fail "$f is missing (scripts/dist/build.sh stages it)"
done

out=$DIST/goproxy/$module/@v
mkdir -p "$out"
files=$(cd "$ROOT" && git ls-files -- bindings/go | sed 's|^bindings/go/||' | grep -v -e '_test\.go$' -e '\(^\|/\)\.gitignore$' | LC_ALL=C sort)
[ -n "$files" ] || fail "git lists no files under bindings/go"

work=$ROOT/build/dist/go
rm -rf "$work"
mkdir -p "$work"
echo "$files" >"$work/files"
python3 - "$src" "$out/$gover.zip" "$module@$gover" "$SOURCE_DATE_EPOCH" "$work/files" \
    "$native/libllmsession.a=$DIST_STAGE/lib/libllmsession.a" \
    "$native/llmsession.h=$DIST_STAGE/include/llmsession.h" <<'PY'
import os, re, sys, time, zipfile
src, out, prefix, epoch, listing = sys.argv[1:6]
extra = dict(a.split("=", 1) for a in sys.argv[6:])
with open(listing) as fh:
    entries = {p: os.path.join(src, p) for p in fh.read().split()}
for p, f in extra.items():
    if p in entries:
        sys.exit(f"go: {p} is tracked in bindings/go; it must come from the stage only")
    entries[p] = f

# Go's module zip rules (golang.org/x/mod/zip, module.CheckFilePath), checked here so the
# proxy never serves a zip the go command refuses.
reserved = {"CON", "PRN", "AUX", "NUL"} | {f"{d}{i}" for d in ("COM", "LPT") for i in range(1, 10)}
allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&()+,-.=@[]^_{}~")
seen, total = {}, 0
for p, f in entries.items():
    for el in p.split("/"):
        short = el.split(".")[0]
        if (el in ("", ".", "..") or not set(el) <= allowed or el.endswith(".")
                or short.upper() in reserved or re.search(r"~[0-9]+$", short)):
            sys.exit(f"go: {p}: not a valid file path in a Go module zip (element {el!r})")
    low = p.lower()
    if low in seen:
        sys.exit(f"go: {p} and {seen[low]} differ only in case (Go refuses the zip)")
    seen[low] = p
    if not os.path.isfile(f) or os.path.islink(f):
        sys.exit(f"go: {f}: not a regular file")
    size = os.path.getsize(f)
    name = p.split("/")[-1]
    if (p == "go.mod" or name in ("LICENSE", "LICENSE.md", "LICENSE.txt") and "/" not in p) and size > 16 << 20:
        sys.exit(f"go: {p} is {size} bytes: over the 16 MiB limit")
    total += size
if total > 500 << 20:
    sys.exit(f"go: the module is {total} bytes unzipped: over Go's 500 MiB limit")

t = time.gmtime(max(int(epoch), 315532800))  # a zip time is no earlier than 1980
date = (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)
with zipfile.ZipFile(out, "w") as z:
    for p in sorted(entries):
        info = zipfile.ZipInfo(f"{prefix}/{p}", date_time=date)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
        info.create_system = 3
        with open(entries[p], "rb") as fh:
            z.writestr(info, fh.read(), compresslevel=9)
print(f"go: {len(entries)} files, {total} bytes unzipped ({total / (500 << 20) * 100:.1f} % of Go's 500 MiB limit)")
PY
cp "$src/go.mod" "$out/$gover.mod"
printf '{"Version":"%s","Time":"%s"}\n' "$gover" "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" >"$out/$gover.info"
echo "$gover" >"$out/list"
chmod 644 "$out/"*
echo "go: $out/$gover.zip ($(stat -c %s "$out/$gover.zip") bytes), .mod, .info, list"
