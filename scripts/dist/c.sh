#!/usr/bin/env bash
# The C/C++ release archive: dist/llmsession-VERSION-linux-ARCH.tar.gz, one top directory
# llmsession-VERSION-linux-ARCH/ laid out as a prefix (scripts/lib/install.sh, PREFIX=/usr/local):
#   lib/libllmsession.so.VERSION, its soname link and libllmsession.so; lib/libllmsession.a
#   include/llmsession.h, include/llmsession.hpp
#   lib/pkgconfig/llmsession.pc       prefix-relative; `pkg-config --define-prefix` finds the
#                                     unpacked directory, and its Libs carry an rpath to it
#   lib/cmake/llmsession/             find_package(llmsession), paths relative to itself
#   bin/llmsession                    the inspector command
#   LICENSE-MIT, LICENSE-APACHE, SHA256SUMS (of every file in the archive)
# Unpacked into /usr/local with --strip-components=1 it is what `make install` would put there.
set -euo pipefail
source "$(dirname "$0")/common.sh"
name=llmsession-$VERSION-linux-$DIST_ARCH
work=$ROOT/build/dist/c
rm -rf "$work"
rm -f "$DIST"/llmsession-*-linux-*.tar.gz
mkdir -p "$work"
install_layout "$work/root" /usr/local /usr/local/lib yes
mv "$work/root/usr/local" "$work/$name"
top=$work/$name
cp "$DIST_STAGE/share/licenses/LICENSE-MIT" "$DIST_STAGE/share/licenses/LICENSE-APACHE" "$top/"
chmod 644 "$top/LICENSE-MIT" "$top/LICENSE-APACHE"
(cd "$top" && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | sed 's|^\./||' | xargs sha256sum >SHA256SUMS)
chmod 644 "$top/SHA256SUMS"
find "$top" -type d -exec chmod 755 {} +
tar_reproducible "$DIST/$name.tar.gz" "$work" "$name"
echo "c: $DIST/$name.tar.gz ($(du -h --apparent-size "$DIST/$name.tar.gz" | cut -f1))"
