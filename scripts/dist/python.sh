#!/usr/bin/env bash
# The Python release artefacts, into dist/python/ (docs/install.md, "Python"):
#   llmsession-VERSION-py3-none-manylinux_2_NN_ARCH.whl
#       the package with the stripped shared library (llmsession/_lib/libllmsession.so) and the
#       stripped `llmsession` command (llmsession/_bin/llmsession, run by the console script);
#       NN is the highest GLIBC_2.NN symbol version the library or the command needs
#       (objdump -T), and `auditwheel show` must agree that the wheel fits that tag
#   llmsession-VERSION.tar.gz
#       the sdist: the package, and under rust/ the Cargo workspace; its setup.py builds the
#       library and the command with cargo when no prebuilt ones are given
# Both are written by scripts/dist/python_dist.py (zipfile, tar_reproducible): the same inputs
# and SOURCE_DATE_EPOCH give the same bytes. auditwheel is installed from PyPI on first use into
# build/dist/pytools (AUDITWHEEL= names another; AUDITWHEEL=skip skips the check, with a warning).
set -euo pipefail
source "$(dirname "$0")/common.sh"
AUDITWHEEL_VERSION=6.8.2
outdir=$DIST/python
work=$ROOT/build/dist/python
python=${PYTHON:-python3}
lib=$DIST_STAGE/lib/$REALNAME
cli=$DIST_STAGE/bin/llmsession
for f in "$lib" "$cli"; do [ -f "$f" ] || { echo "dist: python: $f is missing (scripts/dist/build.sh stages it)"; exit 1; }; done
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    { echo "dist: python: $python is older than 3.11 (python_dist.py reads pyproject.toml with tomllib)"; exit 1; }
rm -rf "$work" "$outdir"
mkdir -p "$work" "$outdir"

# The manylinux tag: the newest glibc symbol version either binary needs.
glibc_minor() {
    objdump -T "$1" | grep -o 'GLIBC_2\.[0-9]*' | sed 's/GLIBC_2\.//' | sort -n | tail -n 1
}
nn_lib=$(glibc_minor "$lib")
nn_cli=$(glibc_minor "$cli")
[ -n "$nn_lib" ] && [ -n "$nn_cli" ] || { echo "dist: python: no GLIBC_ symbol versions in $lib or $cli (objdump -T)"; exit 1; }
nn=$(( nn_lib > nn_cli ? nn_lib : nn_cli ))
tag=py3-none-manylinux_2_${nn}_$DIST_ARCH
echo "python: glibc 2.$nn_lib (library), 2.$nn_cli (command): $tag"

wheel=$("$python" "$ROOT/scripts/dist/python_dist.py" wheel "$outdir" "$tag" "$lib" "$cli" "$DIST_STAGE/share/licenses")
echo "python: $wheel ($(du -h --apparent-size "$wheel" | cut -f1))"

AUDITWHEEL=${AUDITWHEEL:-$ROOT/build/dist/pytools/bin/auditwheel}
if [ "$AUDITWHEEL" = skip ]; then
    echo "python: WARNING: AUDITWHEEL=skip, the manylinux tag is not checked"
else
    if [ ! -x "$AUDITWHEEL" ] && [ "$AUDITWHEEL" = "$ROOT/build/dist/pytools/bin/auditwheel" ]; then
        echo "python: installing auditwheel $AUDITWHEEL_VERSION into build/dist/pytools"
        "$python" -m venv "$ROOT/build/dist/pytools"
        "$ROOT/build/dist/pytools/bin/pip" install --quiet --disable-pip-version-check "auditwheel==$AUDITWHEEL_VERSION"
    fi
    "$AUDITWHEEL" show "$wheel" | tee "$work/auditwheel.txt"
    # auditwheel names the most specific tag the wheel is consistent with; it must be ours.
    # (its text is wrapped: read it as one line)
    tr -s '\n ' '  ' <"$work/auditwheel.txt" |
        grep -q "is consistent with the following platform tag: \"manylinux_2_${nn}_$DIST_ARCH\"" ||
        { echo "dist: python: auditwheel show does not confirm manylinux_2_${nn}_$DIST_ARCH (above)"; exit 1; }
fi

sdist=llmsession-$VERSION
"$python" "$ROOT/scripts/dist/python_dist.py" sdist "$work/$sdist"
tar_reproducible "$outdir/$sdist.tar.gz" "$work" "$sdist"
echo "python: $outdir/$sdist.tar.gz ($(du -h --apparent-size "$outdir/$sdist.tar.gz" | cut -f1))"
