#!/usr/bin/env bash
# `make dist`: every release artefact, into dist/ (docs/install.md, "Release artefacts").
# It starts from the release build make staged (build/lib, target/release/llmsession), linked
# with zig against glibc DIST_GLIBC (2.17; the Makefile's RELEASE_GLIBC), strips it once into
# build/dist/stage, checks that the library and the command need no newer glibc
# (scripts/dist/glibc-check.sh), and hands the stage to one script per ecosystem:
#   c.sh       llmsession-VERSION-linux-x86_64.tar.gz (library, headers, .pc, CMake, licences)
#   deb.sh     the libllmsession0.N, libllmsession-dev and llmsession .debs
#   python.sh  the wheel and the sdist
#   node.sh    the npm package and its platform package, as npm pack tarballs
#   go.sh      a Go module version (zip, .mod, .info) laid out as a GOPROXY serves it
# then writes dist/SHA256SUMS.
set -euo pipefail
source "$(dirname "$0")/common.sh"
STAGE_IN=${STAGE_IN:-$ROOT/build/lib}
CLI=${CLI:-$ROOT/${CARGO_TARGET_DIR:-target}/release/llmsession}
OBJCOPY=${OBJCOPY:-objcopy}
for f in "$STAGE_IN/$REALNAME" "$STAGE_IN/libllmsession.a" "$CLI"; do
    [ -f "$f" ] || { echo "dist: $f is missing (make build-lib build-cli)"; exit 1; }
done
echo "dist: llmsession $VERSION ($DIST_ARCH, glibc $DIST_GLIBC), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
# A full run starts from an empty dist/; DIST_ONLY rebuilds only what its scripts write (each
# overwrites its own files) and leaves the other ecosystems' artefacts as they are.
rm -rf "$DIST_STAGE"
if [ -z "${DIST_ONLY:-}" ]; then rm -rf "$DIST"; fi
mkdir -p "$DIST_STAGE/lib" "$DIST_STAGE/bin" "$DIST_STAGE/include" "$DIST_STAGE/share/licenses" "$DIST"
# The shared library keeps its dynamic symbols, the command nothing, the static library its
# symbol table (a linker needs it) without debug info; none keeps the .comment sections (the
# compilers' version strings, which nothing reads).
"$OBJCOPY" --strip-unneeded --remove-section=.comment "$STAGE_IN/$REALNAME" "$DIST_STAGE/lib/$REALNAME"
ln -sf "$REALNAME" "$DIST_STAGE/lib/$SONAME"
ln -sf "$SONAME" "$DIST_STAGE/lib/libllmsession.so"
"$OBJCOPY" --strip-debug --remove-section=.comment "$STAGE_IN/libllmsession.a" "$DIST_STAGE/lib/libllmsession.a"
"$OBJCOPY" --strip-all --remove-section=.comment "$CLI" "$DIST_STAGE/bin/llmsession"
cp "$ROOT/include/llmsession.h" "$ROOT/include/llmsession.hpp" "$DIST_STAGE/include/"
cp "$ROOT/LICENSE-MIT" "$ROOT/LICENSE-APACHE" "$DIST_STAGE/share/licenses/"
chmod 644 "$DIST_STAGE/lib/libllmsession.a" "$DIST_STAGE/include/"* "$DIST_STAGE/share/licenses/"*
chmod 755 "$DIST_STAGE/lib/$REALNAME" "$DIST_STAGE/bin/llmsession"

# What every artefact promises: nothing newer than glibc DIST_GLIBC (the Debian packages say
# what they need in their Depends, which dpkg-shlibdeps derives from the same files).
if ! bash "$ROOT/scripts/dist/glibc-check.sh" "$DIST_GLIBC" "$DIST_STAGE/lib/$REALNAME" "$DIST_STAGE/bin/llmsession"; then
    echo "dist: the release build needs a glibc newer than $DIST_GLIBC (above): build it with make (RELEASE_GLIBC=$DIST_GLIBC)"
    exit 1
fi

for eco in ${DIST_ONLY:-c deb python node go}; do
    [ "$eco" != userland ] || continue # a test only (test-userland.sh): nothing to build
    echo "dist: $eco"
    DIST="$DIST" DIST_STAGE="$DIST_STAGE" bash "$ROOT/scripts/dist/$eco.sh"
done
(cd "$DIST" && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | sed 's|^\./||' | xargs sha256sum >SHA256SUMS)
echo "dist: $(find "$DIST" -type f | wc -l) files in $DIST"
(cd "$DIST" && find . -maxdepth 3 -type f ! -path './go/*' -printf '%s\t%P\n' | LC_ALL=C sort -k2)
