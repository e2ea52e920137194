#!/usr/bin/env bash
# The Debian packages, into dist/, built with dpkg's own tools from a packaging tree in
# build/dist/deb (debian/control, debian/changelog and one directory per package, as debhelper
# would leave them):
#   libllmsession0.N   the shared library and its soname link (the name comes from the soname,
#                      libllmsession.so.0.N); a symbols file (dpkg-gensymbols) and the ldconfig
#                      trigger
#   libllmsession-dev  the headers, the libllmsession.so link, the static library, the .pc and
#                      the CMake package; Depends on the runtime package of the same version
#   llmsession         the `llmsession` command and its manual page
# The files are laid out by scripts/lib/install.sh (common.sh, install_layout) under /usr with
# the multiarch libdir; Depends come from dpkg-shlibdeps, the control files from dpkg-gencontrol
# (Installed-Size included), each package has its copyright (machine-readable, with the licences
# of the Rust crates linked in), changelog.Debian.gz and md5sums. Every file is dated
# SOURCE_DATE_EPOCH, so the same inputs give the same .debs.
# Environment: DEB_REVISION (default 1), DEB_MAINTAINER ("Name <address>"; the default is a
# placeholder address: set it for a release that will be published).
set -euo pipefail
source "$(dirname "$0")/common.sh"
for tool in dpkg-deb dpkg-gencontrol dpkg-shlibdeps dpkg-gensymbols dpkg-architecture; do
    command -v "$tool" >/dev/null || { echo "deb: $tool is missing (apt-get install dpkg-dev)"; exit 1; }
done
meta=$ROOT/scripts/dist/debian
debversion=$VERSION-${DEB_REVISION:-1}
maintainer=${DEB_MAINTAINER:-llmsession developers <llmsession@example.org>}
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=/usr/lib/$multiarch
libpkg=libllmsession${SONAME#libllmsession.so.}
date_rfc=$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")
date_day=$(date -u +%Y-%m-%d -d "@$SOURCE_DATE_EPOCH")
work=$ROOT/build/dist/deb
rm -rf "$work"
rm -f "$DIST"/libllmsession*_*.deb "$DIST"/llmsession_*.deb
mkdir -p "$work/debian"
cd "$work"

fill() { # TEMPLATE: @VERSION@ @DEBVERSION@ @LIBPKG@ @MAINTAINER@ @DATE@ (RFC 2822) @DAY@
    sed -e "s|@VERSION@|$VERSION|g" -e "s|@DEBVERSION@|$debversion|g" -e "s|@LIBPKG@|$libpkg|g" \
        -e "s|@MAINTAINER@|$maintainer|g" -e "s|@DATE@|$date_rfc|g" -e "s|@DAY@|$date_day|g" "$1"
}
fill "$meta/control.in" >debian/control
fill "$meta/changelog.in" >debian/changelog

# The Rust crates the library and the command link in (normal dependencies of llmsession-capi
# and llmsession-cli on this platform, without proc-macros), with the licence each declares.
crates() {
    command -v cargo >/dev/null || { echo "deb: cargo is needed to list the linked crates" >&2; return 1; }
    (cd "$ROOT" && cargo metadata --format-version 1 --offline --locked --filter-platform "$DIST_ARCH-unknown-linux-gnu") |
        python3 -c '
import json, sys
m = json.load(sys.stdin)
pk = {p["id"]: p for p in m["packages"]}
deps = {n["id"]: n["deps"] for n in m["resolve"]["nodes"]}
ws = set(m["workspace_members"])
todo = [i for i in ws if pk[i]["name"] in ("llmsession-capi", "llmsession-cli")]
seen = set()
while todo:
    i = todo.pop()
    if i in seen:
        continue
    seen.add(i)
    todo += [d["pkg"] for d in deps[i] if any(k["kind"] is None for k in d["dep_kinds"])]
macro = lambda p: any("proc-macro" in t["kind"] for t in p["targets"])
for name, version, lic in sorted((pk[i]["name"], pk[i]["version"], pk[i]["license"] or "(none declared)")
                                 for i in seen if i not in ws and not macro(pk[i])):
    print(f" {name} {version}: {lic}")
'
}
crate_list=$(crates)
{
    fill "$meta/copyright.in" | sed '/^$/,$d'
    echo " ."
    echo " The crates, each with the licence its Cargo.toml declares (an SPDX"
    echo " expression; the texts are in the crates' sources):"
    echo "$crate_list"
    echo
    fill "$meta/copyright.in" | sed '1,/^$/d'
} >debian/copyright

# The files, under /usr, split into the three packages.
install_layout "$work/root" /usr "$libdir" no
pkgs=("$libpkg" libllmsession-dev llmsession)
move() { # PACKAGE PATH...
    local pkg=$1 path
    shift
    for path in "$@"; do
        mkdir -p "debian/$pkg$(dirname "$path")"
        mv "root$path" "debian/$pkg$path"
    done
}
move "$libpkg" "$libdir/$REALNAME" "$libdir/$SONAME"
move libllmsession-dev "$libdir/libllmsession.so" "$libdir/libllmsession.a" "$libdir/pkgconfig" \
    "$libdir/cmake" /usr/include
move llmsession /usr/bin/llmsession
left=$(find root ! -type d)
[ -z "$left" ] || { echo "deb: files in no package: $left"; exit 1; }
# Policy 8.1: a shared library is not executable.
chmod 644 "debian/$libpkg$libdir/$REALNAME"
mkdir -p debian/llmsession/usr/share/man/man1
fill "$meta/llmsession.1.in" | gzip -9n >debian/llmsession/usr/share/man/man1/llmsession.1.gz
for pkg in "${pkgs[@]}"; do
    doc=debian/$pkg/usr/share/doc/$pkg
    mkdir -p "$doc" "debian/$pkg/DEBIAN"
    cp debian/copyright "$doc/copyright"
    gzip -9n <debian/changelog >"$doc/changelog.Debian.gz"
    mkdir -p "debian/$pkg/usr/share/lintian/overrides"
    sed "s|@PKG@|$pkg|g" "$meta/lintian-overrides.in" >"debian/$pkg/usr/share/lintian/overrides/$pkg"
done

# The library's symbols file (every exported symbol, since this version), with the -dev
# package named for dpkg-shlibdeps' users; a shlibs file for the tools that read only that
# (while 0.x the soname changes with every minor release, so any 0.N.x of this soname will do);
# the ldconfig trigger.
dpkg-gensymbols -q -p"$libpkg" -P"debian/$libpkg" -v"$VERSION" -O"debian/$libpkg/DEBIAN/symbols.tmp" >/dev/null
sed '1a\* Build-Depends-Package: libllmsession-dev' "debian/$libpkg/DEBIAN/symbols.tmp" >"debian/$libpkg/DEBIAN/symbols"
rm "debian/$libpkg/DEBIAN/symbols.tmp"
soversion=${SONAME#libllmsession.so.}
echo "libllmsession $soversion $libpkg (>= $VERSION)" >"debian/$libpkg/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"debian/$libpkg/DEBIAN/triggers"
echo "deb: $libpkg exports $(grep -c '^ ' "debian/$libpkg/DEBIAN/symbols") symbols"

dpkg-shlibdeps -T"debian/$libpkg.substvars" "debian/$libpkg$libdir/$REALNAME"
dpkg-shlibdeps -Tdebian/llmsession.substvars debian/llmsession/usr/bin/llmsession
: >debian/libllmsession-dev.substvars

for pkg in "${pkgs[@]}"; do
    root=debian/$pkg
    find "$root" -type d -exec chmod 755 {} +
    find "$root" -type f ! -perm -u+x -exec chmod 644 {} +
    (cd "$root" && find . -type f ! -path './DEBIAN/*' | LC_ALL=C sort | sed 's|^\./||' | xargs md5sum >DEBIAN/md5sums)
    dpkg-gencontrol -p"$pkg" -P"$root" -T"debian/$pkg.substvars" -fdebian/files
    chmod 644 "$root"/DEBIAN/*
    find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    deb=$DIST/${pkg}_${debversion}_$arch.deb
    dpkg-deb --root-owner-group -Zxz --threads-max=1 --build "$root" "$deb" >/dev/null
    echo "deb: $(basename "$deb") ($(stat -c %s "$deb") bytes): $(sed -n 's/^Depends: //p' "$root/DEBIAN/control")"
done
