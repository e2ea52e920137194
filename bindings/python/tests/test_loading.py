"""Where the package finds the library (docs/python.md, "Install"), in a fresh interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
