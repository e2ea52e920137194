"""The ``llmsession`` command a wheel installs (a console script): it runs the log inspector
shipped in the package, ``llmsession/_bin/llmsession`` (docs/cli.md: verify, stats, explain,
show, headers, sessions), with the same arguments, in place of this process.

A package installed from a checkout (``pip install bindings/python``) ships no command; there
the one ``make build-cli`` built in that checkout is run, if there is one."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, NoReturn, Optional


def command() -> Optional[Path]:
    """The inspector this package runs, or None when it has none."""
    shipped = Path(__file__).resolve().parent / "_bin" / "llmsession"
    if shipped.is_file():
        return shipped
    try:
        from . import _checkout  # type: ignore[attr-defined]  # written at install time
    except ImportError:
        return None
    built = Path(_checkout.ROOT) / "target" / "release" / "llmsession"
    return built if built.is_file() else None


def main(argv: Optional[List[str]] = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    exe = command()
    if exe is None:
        sys.exit(
            "llmsession: this installation of the Python package has no inspector command "
            "(llmsession/_bin/llmsession is missing): install the release wheel, or build the "
            "command in the checkout with `make build-cli`"
        )
    try:
        os.execv(str(exe), ["llmsession", *args])
    except OSError as e:
        sys.exit(f"llmsession: cannot run {exe}: {e}")
