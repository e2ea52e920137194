#!/usr/bin/env bash
# The Python release artefacts, into dist/python/ (docs/install.md, "Python"):
#   llmsession-VERSION-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
#       the package with the stripped shared library (llmsession/_lib/libllmsession.so) and the
#       stripped `llmsession` command (llmsession/_bin/llmsession, run by the console script);
#       tagged for the glibc the release is built for, DIST_GLIBC (2.17: manylinux_2_17 and its
#       older name manylinux2014, so that pip before 20.3 takes it too). The library and the
#       command must need nothing newer (scripts/dist/glibc-check.sh, objdump), and
#       `auditwheel show` must find the wheel consistent with that tag or an older one
#   llmsession-VERSION.tar.gz
#       the sdist: the package, and under rust/ the Cargo workspace; its setup.py builds the
#       library and the command with cargo when no prebuilt ones are given
# Both are written by scripts/dist/python_dist.py (zipfile, tar_reproducible): the same inputs
# and SOURCE_DATE_EPOCH give the same bytes. auditwheel is installed from PyPI on first use into
# build/dist/pytools (common.sh: AUDITWHEEL= names another; AUDITWHEEL=skip skips that check,
# with a warning; the objdump check stays).
set -euo pipefail
source "$(dirname "$0")/common.sh"
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

# The manylinux tag: the glibc the release is built for, with its legacy alias where there is
# one (PEP 600; manylinux2014 is manylinux_2_17). The library and the command must keep that
# promise (objdump -T, -p: no symbol version newer, nothing but glibc and libgcc_s needed).
tag=py3-none-$(manylinux_tag "$DIST_GLIBC" "$DIST_ARCH")
bash "$ROOT/scripts/dist/glibc-check.sh" "$DIST_GLIBC" "$lib" "$cli" ||
    { echo "dist: python: the library or the command needs a glibc newer than $DIST_GLIBC (above): the tag would lie"; exit 1; }
echo "python: glibc $DIST_GLIBC: $tag"

wheel=$("$python" "$ROOT/scripts/dist/python_dist.py" wheel "$outdir" "$tag" "$lib" "$cli" "$DIST_STAGE/share/licenses")
echo "python: $wheel ($(du -h --apparent-size "$wheel" | cut -f1))"

if [ "${AUDITWHEEL:-}" = skip ]; then
    echo "python: WARNING: AUDITWHEEL=skip, the manylinux tag is not checked by auditwheel"
else
    auditwheel_fits "$(auditwheel_cmd)" "$wheel" "$DIST_GLIBC" "$work/auditwheel.txt" | sed 's/^dist: /python: /' || exit 1
fi

sdist=llmsession-$VERSION
"$python" "$ROOT/scripts/dist/python_dist.py" sdist "$work/$sdist"
tar_reproducible "$outdir/$sdist.tar.gz" "$work" "$sdist"
echo "python: $outdir/$sdist.tar.gz ($(du -h --apparent-size "$outdir/$sdist.tar.gz" | cut -f1))"
