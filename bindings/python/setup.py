"""Build hook (the metadata is in pyproject.toml): when the package is built from a checkout of
the repository, it records the checkout (``llmsession/_checkout.py``) so that the installed
package finds ``build/lib/libllmsession.so`` there; with ``LLMSESSION_BUNDLE_LIB=/path/to/
libllmsession.so`` it also copies that library into the package (``llmsession/_lib/``), which
is then found first after ``LLMSESSION_LIB`` (docs/python.md, "Install")."""

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        pkg = Path(self.build_lib) / "llmsession"
        if (ROOT / "include" / "llmsession.h").exists():
            (pkg / "_checkout.py").write_text(
                '"""Written at build time: the repository checkout this package was built from."""\n'
                f"ROOT = {str(ROOT)!r}\n"
            )
        bundle = os.environ.get("LLMSESSION_BUNDLE_LIB")
        if bundle:
            (pkg / "_lib").mkdir(exist_ok=True)
            shutil.copyfile(os.path.realpath(bundle), pkg / "_lib" / "libllmsession.so")


setup(cmdclass={"build_py": BuildPy})
