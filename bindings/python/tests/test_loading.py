"""Where the package finds the library (docs/python.md, "Install"), in a fresh interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import llmsession as lls

PROBE = "import llmsession; print(llmsession.library_path)"


def probe(env: dict, cwd: Path) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "LLMSESSION_LIB"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", PROBE], env=full, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_llmsession_lib_comes_first_and_alone(tmp_path: Path) -> None:
    r = probe({"LLMSESSION_LIB": lls.library_path}, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == lls.library_path
    r = probe({"LLMSESSION_LIB": str(tmp_path / "missing.so")}, tmp_path)
    assert r.returncode != 0
    assert "cannot load the shared library" in r.stderr and "missing.so" in r.stderr and "LLMSESSION_LIB" in r.stderr


def test_a_library_shipped_in_the_package_comes_next(tmp_path: Path) -> None:
    pkg = tmp_path / "llmsession"
    shutil.copytree(Path(lls.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__", "_checkout.py"))
    (pkg / "_lib").mkdir(exist_ok=True)
    shutil.copyfile(os.path.realpath(lls.library_path), pkg / "_lib" / "libllmsession.so")
    r = probe({"PYTHONPATH": str(tmp_path)}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkg / "_lib" / "libllmsession.so")


def test_without_either_the_checkout_or_the_loader_is_used(tmp_path: Path) -> None:
    r = probe({}, tmp_path)
    assert r.returncode == 0, r.stderr
    found = r.stdout.strip()
    assert found.endswith("build/lib/libllmsession.so") or found.startswith("libllmsession.so")


def test_the_installed_package_is_typed() -> None:
    assert (Path(lls.__file__).parent / "py.typed").exists()


@pytest.mark.parametrize("abi,minor,says", [(1, 0, "has ABI version 1, but this binding needs 2"), (2, 5, "has ABI version 2.5, but this binding needs 2.6 or later")])
def test_a_library_of_another_abi_is_refused_at_import(tmp_path: Path, abi: int, minor: int, says: str) -> None:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in library")
    src = tmp_path / "old.c"
    src.write_text(
        "#include <stdint.h>\n"
        f"uint32_t lls_abi_version(void) {{ return {abi}; }}\n"
        f"uint32_t lls_abi_minor(void) {{ return {minor}; }}\n"
        'const char *lls_version(void) { return "0.0.1"; }\n'
    )
    lib = tmp_path / "libold.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=60)
    r = probe({"LLMSESSION_LIB": str(lib)}, tmp_path)
    assert r.returncode != 0 and "ImportError" in r.stderr and says in r.stderr, r.stderr
