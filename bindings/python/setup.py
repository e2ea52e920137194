"""Build hook (the metadata is in pyproject.toml). Two ways the package is built:

From a checkout of the repository (``pip install bindings/python``): it records the checkout
(``llmsession/_checkout.py``) so that the installed package finds ``build/lib/libllmsession.so``
there (and the ``llmsession`` command finds ``target/release/llmsession``). With
``LLMSESSION_BUNDLE_LIB=/path/to/libllmsession.so`` it also copies that library into the package
(``llmsession/_lib/``), which is then found first after ``LLMSESSION_LIB``, and with
``LLMSESSION_BUNDLE_CLI=/path/to/llmsession`` the command (``llmsession/_bin/``).

From the sdist (``make dist``: the Cargo workspace is in ``rust/`` next to this file): the
library and the command are built with ``cargo build --release --locked`` (``CARGO`` names
cargo; ``CARGO_TARGET_DIR`` is honoured; debug info is left out unless
``CARGO_PROFILE_RELEASE_DEBUG`` says otherwise; the symbol tables are stripped with objcopy
when there is one) unless ``LLMSESSION_BUNDLE_LIB`` and ``LLMSESSION_BUNDLE_CLI`` name prebuilt
ones, and both go into the package.

A package that carries a library or a command is a platform wheel (``py3-none-<platform>``);
one that carries neither stays pure (docs/python.md, "Install")."""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools 70.1 and later
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # older setuptools: the wheel package's command
    try:
        from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]
    except ImportError:
        bdist_wheel = None  # type: ignore[assignment,misc]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RUST = HERE / "rust"
SDIST = (RUST / "Cargo.toml").exists()


def carries_binaries() -> bool:
    return SDIST or bool(os.environ.get("LLMSESSION_BUNDLE_LIB") or os.environ.get("LLMSESSION_BUNDLE_CLI"))


def cargo(*args: str) -> None:
    exe = os.environ.get("CARGO", "cargo")
    if shutil.which(exe) is None:
        raise SystemExit(
            f"llmsession: building from the sdist needs cargo (Rust 1.89 or later), and {exe!r} is not "
            "on PATH; install Rust, name prebuilt files with LLMSESSION_BUNDLE_LIB and "
            "LLMSESSION_BUNDLE_CLI, or install a wheel built for this platform"
        )
    env = dict(os.environ)
    env.setdefault("CARGO_PROFILE_RELEASE_DEBUG", "0")
    cmd = [exe, "build", "--release", "--locked", *args]
    print("llmsession: " + " ".join(cmd) + f" (in {RUST})", flush=True)
    if subprocess.run(cmd, cwd=RUST, env=env).returncode != 0:
        raise SystemExit(f"llmsession: `{' '.join(cmd)}` failed (its output is above)")


def built_dir() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or RUST / "target")
    return (target if target.is_absolute() else RUST / target) / "release"


def built(name: str) -> Path:
    path = built_dir() / name
    if not path.is_file():
        raise SystemExit(f"llmsession: cargo finished but {path} is not there")
    return path


def strip_symbols(path: Path, how: str) -> None:
    """What cargo built loses its symbol table (the library keeps the dynamic symbols), as the
    release wheel's files do; without objcopy (``OBJCOPY``) the files stay as built."""
    objcopy = os.environ.get("OBJCOPY", "objcopy")
    if shutil.which(objcopy) is None:
        print(f"llmsession: no {objcopy} on PATH: {path.name} is packaged with its symbols", flush=True)
        return
    if subprocess.run([objcopy, how, str(path)]).returncode != 0:
        raise SystemExit(f"llmsession: `{objcopy} {how} {path}` failed")


def prebuilt(var: str) -> "Path | None":
    value = os.environ.get(var)
    if not value:
        return None
    path = Path(os.path.realpath(value))
    if not path.is_file():
        raise SystemExit(f"llmsession: {var}={value} is not a file")
    return path


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        pkg = Path(self.build_lib) / "llmsession"
        lib = prebuilt("LLMSESSION_BUNDLE_LIB")
        cli = prebuilt("LLMSESSION_BUNDLE_CLI")
        if SDIST:
            if lib is None:
                cargo("-p", "llmsession-capi", "--lib")
                lib = built("libllmsession_capi.so")
            if cli is None:
                cargo("-p", "llmsession-cli", "--bin", "llmsession")
                cli = built("llmsession")
        elif (ROOT / "include" / "llmsession.h").exists():
            (pkg / "_checkout.py").write_text(
                '"""Written at build time: the repository checkout this package was built from."""\n'
                f"ROOT = {str(ROOT)!r}\n"
            )
        for src, sub, name, strip in ((lib, "_lib", "libllmsession.so", "--strip-unneeded"),
                                      (cli, "_bin", "llmsession", "--strip-all")):
            # pip builds in bindings/python/build: what an earlier bundling build left there
            # must not end up in this package.
            shutil.rmtree(pkg / sub, ignore_errors=True)
            if src is not None:
                (pkg / sub).mkdir(exist_ok=True)
                shutil.copyfile(src, pkg / sub / name)
                os.chmod(pkg / sub / name, 0o755)
                if SDIST and src.is_relative_to(built_dir()):
                    strip_symbols(pkg / sub / name, strip)


class BinaryDistribution(Distribution):
    """A package that carries the library or the command is not pure: its files go to platlib."""

    def has_ext_modules(self) -> bool:
        return carries_binaries() or super().has_ext_modules()


cmdclass = {"build_py": BuildPy}

if bdist_wheel is not None:

    class BdistWheel(bdist_wheel):
        """``py3-none-<platform>`` when the wheel carries the library or the command: the Python
        code runs on any Python 3, the binaries on this platform only."""

        def get_tag(self):  # type: ignore[no-untyped-def]
            python, abi, plat = super().get_tag()
            return ("py3", "none", plat) if carries_binaries() else (python, abi, plat)

    cmdclass["bdist_wheel"] = BdistWheel

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
