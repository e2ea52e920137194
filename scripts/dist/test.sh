#!/usr/bin/env bash
# `make test-dist`: each artefact of dist/ installed and used where no toolchain of ours exists
# (scripts/dist/common.sh, without_toolchain): a temporary directory outside the checkout, no
# cargo on PATH, no build/ directory, a HOME of its own. One script per ecosystem (test-*.sh);
# each builds and runs the README's example in its language, resumes it, and verifies the log
# with the installed command, and checks that nothing in its artefact needs a glibc newer than
# DIST_GLIBC (2.17), the glibc the artefacts promise (glibc-check.sh; auditwheel for the wheel;
# a link against glibc 2.17's symbols for the static archives). Then test-userland.sh runs the
# wheel's and the C archive's examples in an older Debian userland in a chroot, and the
# artefacts are checked to carry the same library (the wheel, the npm platform package and the
# C archive the same shared library and command; the C archive and the Go module the same
# static library; the Debian packages all three).
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ -f "$DIST/SHA256SUMS" ] || { echo "test-dist: $DIST has no release (make dist)"; exit 1; }
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS)
failed=()
for eco in ${DIST_ONLY:-c deb python node go userland}; do
    echo "=== test-dist: $eco"
    start=$(date +%s)
    if ! DIST="$DIST" bash "$ROOT/scripts/dist/test-$eco.sh"; then failed+=("$eco"); fi
    echo "=== test-dist: $eco: $(( $(date +%s) - start )) s"
done

# The same library in every artefact (only when every artefact was made).
if [ -z "${DIST_ONLY:-}" ]; then
    echo "=== test-dist: the same library in every artefact"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmsession-test-same.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    c=llmsession-$VERSION-linux-$DIST_ARCH
    module=github.com/llmsession/llmsession/bindings/go
    debversion=$VERSION-${DEB_REVISION:-1}
    arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
    libpkg=libllmsession${SONAME#libllmsession.so.}
    mkdir -p "$tmp/c" "$tmp/npm" "$tmp/wheel" "$tmp/go" "$tmp/deb"
    tar -xzf "$DIST/$c.tar.gz" -C "$tmp/c"
    tar -xzf "$DIST/npm/llmsession-linux-x64-gnu-$VERSION.tgz" -C "$tmp/npm"
    unzip -q "$DIST"/python/llmsession-"$VERSION"-*.whl 'llmsession/_lib/*' 'llmsession/_bin/*' -d "$tmp/wheel"
    unzip -q -j "$DIST/goproxy/$module/@v/v$VERSION.zip" "*/internal/native/linux_amd64/libllmsession.a" -d "$tmp/go"
    for pkg in "$libpkg" libllmsession-dev llmsession; do dpkg-deb -x "$DIST/${pkg}_${debversion}_$arch.deb" "$tmp/deb"; done
    multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
    same() { # WHAT FILE...: all the same bytes
        local what=$1 first=$2 f
        shift 2
        for f in "$@"; do
            cmp -s "$first" "$f" || { echo "test-dist: the $what differs: ${first#"$tmp"/} and ${f#"$tmp"/}"; return 1; }
        done
        echo "test-dist: the $what is the same in $(( $# + 1 )) artefacts: sha256 $(sha256sum "$first" | cut -c1-16)..."
    }
    same "shared library" "$tmp/c/$c/lib/$REALNAME" "$tmp/npm/package/lib/$SONAME" \
        "$tmp/wheel/llmsession/_lib/libllmsession.so" "$tmp/deb/usr/lib/$multiarch/$REALNAME" || failed+=(same)
    same "command" "$tmp/c/$c/bin/llmsession" "$tmp/npm/package/bin/llmsession" \
        "$tmp/wheel/llmsession/_bin/llmsession" "$tmp/deb/usr/bin/llmsession" || failed+=(same)
    same "static library" "$tmp/c/$c/lib/libllmsession.a" "$tmp/go/libllmsession.a" \
        "$tmp/deb/usr/lib/$multiarch/libllmsession.a" || failed+=(same)
fi
if [ ${#failed[@]} -gt 0 ]; then echo "test-dist: FAILED: ${failed[*]}"; exit 1; fi
echo "test-dist: every artefact installed and used, none needing a glibc newer than $DIST_GLIBC"
