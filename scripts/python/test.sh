#!/usr/bin/env bash
# The Python binding's tests (bindings/python/tests) in a virtual environment:
#   test.sh fresh VENV   creates VENV anew, installs pytest and the provider SDKs the tests drive
#                        (pinned in bindings/python/tests/requirements-sdk.txt) from PyPI and
#                        the package with pip (`pip install bindings/python`, the route a user
#                        takes), runs pytest;
#   test.sh reuse VENV   the same in an existing VENV (created when missing); the package is
#                        reinstalled without build isolation (no network once the venv has
#                        pytest, wheel and the pinned SDKs);
#   test.sh venv VENV    prepares VENV as `reuse` does and runs nothing (for scripts/pg/tests.sh).
# The installed package finds the library in build/lib of this checkout (recorded at install
# time); run `make build-lib` first. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=$1 venv=$2
[[ $venv == /* ]] || venv=$PWD/$venv
shift 2
python=${PYTHON:-python3}
sdks=bindings/python/tests/requirements-sdk.txt
if [[ $mode == fresh || ! -x $venv/bin/python ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # wheel: what a later reuse needs to build the package without build isolation.
    "$venv/bin/pip" install --quiet --disable-pip-version-check pytest wheel -r "$sdks"
    "$venv/bin/pip" install --quiet --disable-pip-version-check bindings/python
else
    "$venv/bin/python" -c 'import pytest, wheel' 2>/dev/null ||
        "$venv/bin/pip" install --quiet --disable-pip-version-check pytest wheel
    # Satisfied pins are not looked up again: no network once they are installed.
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$sdks"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --no-deps \
        --force-reinstall bindings/python
fi
[[ $mode == venv ]] && exit 0
# Run from the tests' directory with the package imported from the venv, not from src/.
cd bindings/python
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" tests
