"""The Python release artefacts, for scripts/dist/python.sh (`make dist`):

  python_dist.py wheel OUTDIR TAG LIB CLI LICENSES_DIR
      writes OUTDIR/llmsession-VERSION-TAG.whl (TAG may be a compressed tag set, such as
      py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64: WHEEL then lists each tag it stands
      for): the package (bindings/python/src/llmsession),
      LIB as llmsession/_lib/libllmsession.so, CLI as llmsession/_bin/llmsession (run by the
      `llmsession` console script), the licences in the dist-info's licenses/, and METADATA,
      WHEEL, entry_points.txt and RECORD. Written with zipfile, not setuptools, so that the bytes
      depend on the inputs only: entries sorted (dist-info last, RECORD the very last), every
      timestamp SOURCE_DATE_EPOCH, modes 0644 (0755 for the library and the command), one
      compression level.
  python_dist.py sdist DIR
      lays out DIR (llmsession-VERSION/, tarred by python.sh): PKG-INFO, the package's
      pyproject.toml, setup.py, README and licences, src/llmsession, and under rust/ the Cargo
      workspace the library and the command build from (manifests, Cargo.lock, the sources
      of the three crates, every target file a manifest names, so that cargo can read them).

VERSION and SOURCE_DATE_EPOCH come from the environment (scripts/dist/common.sh); the version
in pyproject.toml and llmsession/__init__.py must be the same, or nothing is written.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]
PY = ROOT / "bindings" / "python"
PKG = PY / "src" / "llmsession"
# The crates the library (capi) and the command (cli) are built from, and what each needs.
CRATES = [".", "capi", "cli"]


def fail(msg: str) -> NoReturn:
    print(f"dist: python: {msg}", file=sys.stderr)
    sys.exit(1)


def version() -> str:
    v = os.environ.get("VERSION") or fail("VERSION is not set (scripts/dist/common.sh)")
    project = tomllib.loads((PY / "pyproject.toml").read_text())["project"]
    if project.get("version") != v:
        fail(f"bindings/python/pyproject.toml has version {project.get('version')!r}, Cargo.toml {v!r}: set both")
    m = re.search(r'^__version__ = "([^"]*)"', (PKG / "__init__.py").read_text(), re.M)
    if not m or m.group(1) != v:
        fail(f"llmsession/__init__.py has __version__ {m.group(1) if m else None!r}, Cargo.toml {v!r}: set both")
    return v


def metadata(v: str) -> str:
    """Core metadata (METADATA in the wheel, PKG-INFO in the sdist) from pyproject.toml."""
    project = tomllib.loads((PY / "pyproject.toml").read_text())["project"]
    lic = project["license"]["text"]
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {project['name']}",
        f"Version: {v}",
        f"Summary: {project['description']}",
        f"License-Expression: {lic}",
        "License-File: LICENSE-APACHE",
        "License-File: LICENSE-MIT",
    ]
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    lines.append(f"Requires-Python: {project['requires-python']}")
    for d in project.get("dependencies", []):
        lines.append(f"Requires-Dist: {d}")
    for extra, deps in sorted(project.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + (PY / project["readme"]).read_text()


def package_files() -> list[Path]:
    """The package's tracked files (no _checkout.py, no caches)."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", str(PKG)], check=True,
                         capture_output=True).stdout.decode().split("\0")
    files = [ROOT / f for f in out if f and (ROOT / f).is_file()]
    # A module added but not committed yet is still part of the package being released.
    files += [p for p in PKG.iterdir() if p.suffix == ".py" and p not in files and p.name != "_checkout.py"]
    if not any(p.name == "__init__.py" for p in files) or not any(p.name == "py.typed" for p in files):
        fail(f"{PKG} has no __init__.py or py.typed")
    return sorted(files)


def zip_time() -> tuple:
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or fail("SOURCE_DATE_EPOCH is not set"))
    return max(time.gmtime(epoch)[:6], (1980, 1, 1, 0, 0, 0))  # a zip cannot say earlier


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def expand_tag(tag: str) -> list[str]:
    """The tags a compressed tag set stands for, as WHEEL lists them (one "Tag:" line each):
    py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64 is py3-none-manylinux_2_17_x86_64 and
    py3-none-manylinux2014_x86_64."""
    py, abi, plat = tag.split("-")
    return [f"{p}-{a}-{q}" for p in py.split(".") for a in abi.split(".") for q in plat.split(".")]


def wheel(outdir: str, tag: str, lib: str, cli: str, licenses: str) -> None:
    v = version()
    name = f"llmsession-{v}-{tag}.whl"
    info = f"llmsession-{v}.dist-info"
    for f in (lib, cli):
        if not Path(f).is_file():
            fail(f"{f} is missing")
    entries: list[tuple[str, bytes, int]] = []
    for p in package_files():
        entries.append((f"llmsession/{p.relative_to(PKG).as_posix()}", p.read_bytes(), 0o644))
    entries.append(("llmsession/_lib/libllmsession.so", Path(lib).read_bytes(), 0o755))
    entries.append(("llmsession/_bin/llmsession", Path(cli).read_bytes(), 0o755))
    entries.sort()
    meta = [
        (f"{info}/METADATA", metadata(v).encode()),
        (f"{info}/WHEEL", (
            "Wheel-Version: 1.0\n"
            "Generator: llmsession scripts/dist/python_dist.py\n"
            "Root-Is-Purelib: false\n"
            + "".join(f"Tag: {t}\n" for t in expand_tag(tag))).encode()),
        (f"{info}/entry_points.txt", b"[console_scripts]\nllmsession = llmsession._cli:main\n"),
        (f"{info}/top_level.txt", b"llmsession\n"),
    ]
    for lic in ("LICENSE-APACHE", "LICENSE-MIT"):
        meta.append((f"{info}/licenses/{lic}", (Path(licenses) / lic).read_bytes()))
    entries += sorted((n, d, 0o644) for n, d in meta)
    record = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d, _ in entries) + f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode(), 0o644))
    when = zip_time()
    os.makedirs(outdir, exist_ok=True)
    tmp = Path(outdir) / (name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for n, d, mode in entries:
            zi = zipfile.ZipInfo(n, date_time=when)
            zi.create_system = 3  # Unix: the mode below is what an unzip or pip applies
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d, compresslevel=9)
    tmp.replace(Path(outdir) / name)
    print(Path(outdir) / name)


def declared_targets(crate: Path) -> list[Path]:
    """The files a manifest's [lib], [[bin]], [[test]], [[bench]] and [[example]] sections name:
    cargo reads (and refuses a manifest without) each, even when building another target."""
    manifest = tomllib.loads((crate / "Cargo.toml").read_text())
    found = []
    if isinstance(manifest.get("package", {}).get("build"), str):
        found.append(crate / manifest["package"]["build"])
    elif (crate / "build.rs").exists():
        found.append(crate / "build.rs")
    for kind, folder in (("bin", "src/bin"), ("test", "tests"), ("bench", "benches"), ("example", "examples")):
        for t in manifest.get(kind, []):
            if "path" in t:
                found.append(crate / t["path"])
            elif kind == "bin" and t["name"] == manifest.get("package", {}).get("name"):
                found.append(crate / "src" / "main.rs")
            else:
                single = crate / folder / f"{t['name']}.rs"
                found.append(single if single.exists() else crate / folder / t["name"] / "main.rs")
    for p in found:
        if not p.is_file():
            fail(f"{crate / 'Cargo.toml'} names {p}, which does not exist")
    return found


def tracked(*paths: Path) -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *map(str, paths)], check=True,
                         capture_output=True).stdout.decode().split("\0")
    return [ROOT / f for f in out if f and (ROOT / f).is_file()]


def sdist(dest: str) -> None:
    v = version()
    top = Path(dest)
    if top.exists():
        shutil.rmtree(top)
    files: dict[Path, Path] = {}
    for f in ("pyproject.toml", "setup.py", "README.md", "LICENSE-MIT", "LICENSE-APACHE"):
        files[Path(f)] = PY / f
    for p in package_files():
        files[Path("src/llmsession") / p.relative_to(PKG)] = p
    rust = [ROOT / "Cargo.toml", ROOT / "Cargo.lock"]
    for c in CRATES:
        crate = ROOT / c
        rust += [crate / "Cargo.toml", *declared_targets(crate)]
        rust += tracked(crate / "src")
    for p in rust:
        files[Path("rust") / p.relative_to(ROOT)] = p
    for rel, src in sorted(files.items()):
        out = top / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out)
        os.chmod(out, 0o644)
    (top / "PKG-INFO").write_text(metadata(v))
    os.chmod(top / "PKG-INFO", 0o644)
    for d in [top, *(p for p in top.rglob("*") if p.is_dir())]:
        os.chmod(d, 0o755)
    print(f"{top}: {len(files) + 1} files")


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "wheel":
        wheel(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "sdist":
        sdist(sys.argv[2])
    else:
        fail("usage: python_dist.py wheel OUTDIR TAG LIB CLI LICENSES_DIR | sdist DIR")
