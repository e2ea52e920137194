#!/usr/bin/env bash
# The Python artefacts of dist/python/ (scripts/dist/python.sh), checked and used:
#   1. the wheel is tagged for glibc DIST_GLIBC (py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64,
#      WHEEL listing both tags); it holds exactly the package, the library, the command, the
#      licences and its metadata, and RECORD is true of every entry; the library is stripped and
#      has the soname, the command is stripped; neither needs a glibc newer than the tag says
#      (scripts/dist/glibc-check.sh: objdump) and `auditwheel show` agrees; its size is printed;
#   2. the sdist holds what a build from source needs (setup.py, the package, the Cargo
#      workspace: manifests, Cargo.lock, the crates' sources, the target files the manifests
#      name) and nothing built (no target/, no shared library);
#   3. python.sh run again gives the same bytes (reproducible);
#   4. without our toolchain (common.sh without_toolchain): a venv, `pip install --no-index`
#      of the wheel, the README's hello.py twice (the second run resumes the log the first
#      wrote), then `llmsession verify` of the log with the command the wheel installed.
# Building a wheel from the sdist (a full cargo release build) is not part of this test.
set -euo pipefail
source "$(dirname "$0")/common.sh"
python=${PYTHON:-python3}
fail() { echo "test-python: $*" >&2; exit 1; }
step() { echo "test-python: $*"; }

tag=py3-none-$(manylinux_tag "$DIST_GLIBC" "$DIST_ARCH")
shopt -s nullglob
wheels=("$DIST"/python/llmsession-"$VERSION"-*.whl)
shopt -u nullglob
wheel=$DIST/python/llmsession-$VERSION-$tag.whl
[ ${#wheels[@]} -eq 1 ] && [ "${wheels[0]}" = "$wheel" ] ||
    fail "expected one wheel, $(basename "$wheel") (glibc $DIST_GLIBC), in $DIST/python; found: ${wheels[*]##*/}"
sdist=$DIST/python/llmsession-$VERSION.tar.gz
[ -f "$sdist" ] || fail "$sdist is missing"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. The wheel's contents.
modules=()
for f in "$ROOT"/bindings/python/src/llmsession/*.py "$ROOT"/bindings/python/src/llmsession/py.typed; do
    [ "${f##*/}" = _checkout.py ] || modules+=("${f##*/}")
done
"$python" - "$wheel" "$VERSION" "$tmp/wheel" "${modules[@]}" <<'PY' || fail "the wheel's contents are wrong (above)"
import base64, hashlib, os, stat, sys, zipfile
wheel, version, out, modules = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
info = f"llmsession-{version}.dist-info"
want = {f"llmsession/{m}" for m in modules} | {
    "llmsession/_lib/libllmsession.so", "llmsession/_bin/llmsession",
    *(f"{info}/{f}" for f in ("METADATA", "WHEEL", "RECORD", "entry_points.txt", "top_level.txt",
                              "licenses/LICENSE-MIT", "licenses/LICENSE-APACHE"))}
z = zipfile.ZipFile(wheel)
names = z.namelist()
bad = []
if set(names) != want:
    bad.append(f"extra entries {sorted(set(names) - want)}, missing {sorted(want - set(names))}")
if names[-1] != f"{info}/RECORD":
    bad.append("RECORD is not the last entry")
record = {}
for line in z.read(f"{info}/RECORD").decode().splitlines():
    path, digest, size = line.rsplit(",", 2)
    record[path] = (digest, size)
for n in names:
    data = z.read(n)
    h = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    if n != f"{info}/RECORD" and record.get(n) != (h, str(len(data))):
        bad.append(f"RECORD is wrong about {n}")
    mode = z.getinfo(n).external_attr >> 16
    exe = n in ("llmsession/_lib/libllmsession.so", "llmsession/_bin/llmsession")
    if mode != (0o100755 if exe else 0o100644):
        bad.append(f"{n} has mode {oct(mode)}")
if set(record) != set(names):
    bad.append(f"RECORD lists {sorted(set(record) ^ set(names))} wrongly")
wheel_txt = z.read(f"{info}/WHEEL").decode()
tag = os.path.basename(wheel)[len(f"llmsession-{version}-"):-len(".whl")]
py, abi, plats = tag.split("-")
tags = [f"{py}-{abi}-{p}" for p in plats.split(".")]
if [l[len("Tag: "):] for l in wheel_txt.splitlines() if l.startswith("Tag: ")] != tags or "Root-Is-Purelib: false\n" not in wheel_txt:
    bad.append(f"WHEEL says {wheel_txt!r}, the file name {tag}")
meta = z.read(f"{info}/METADATA").decode()
for field in (f"Name: llmsession\n", f"Version: {version}\n", "License-Expression: MIT OR Apache-2.0\n"):
    if field not in meta:
        bad.append(f"METADATA has no {field.strip()!r}")
for b in bad:
    print("  " + b)
z.extract("llmsession/_lib/libllmsession.so", out)
z.extract("llmsession/_bin/llmsession", out)
sys.exit(1 if bad else 0)
PY
lib=$tmp/wheel/llmsession/_lib/libllmsession.so
cli=$tmp/wheel/llmsession/_bin/llmsession
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "$SONAME" ] || fail "the wheel's library has soname '$soname', not $SONAME"
for f in "$lib" "$cli"; do
    # (.debug_gdb_scripts is loaded data, not debug info: strip keeps it)
    ! readelf -S -W "$f" | grep -E '\] \.(debug_(info|line|str|abbrev|ranges|loc)|symtab) ' >/dev/null || fail "${f#"$tmp"/wheel/} in the wheel is not stripped (readelf -S)"
done
readelf -d "$cli" | grep 'NEEDED.*libllmsession' >/dev/null && fail "the wheel's command links libllmsession dynamically"
step "wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes ($(du -h --apparent-size "$wheel" | cut -f1)): entries and RECORD right, library $SONAME and stripped, command stripped"
# What the tag promises: glibc DIST_GLIBC, by objdump and by auditwheel.
GLIBC_CHECK_STRIP=$tmp/wheel/ bash "$ROOT/scripts/dist/glibc-check.sh" "$DIST_GLIBC" "$lib" "$cli" ||
    fail "the wheel's library or command needs a glibc newer than its tag, $tag, promises (above)"
if [ "${AUDITWHEEL:-}" = skip ]; then
    step "WARNING: AUDITWHEEL=skip: auditwheel show not run"
else
    auditwheel_fits "$(auditwheel_cmd)" "$wheel" "$DIST_GLIBC" "$tmp/auditwheel.txt" >"$tmp/auditwheel.log" ||
        { cat "$tmp/auditwheel.log"; fail "auditwheel show does not accept the wheel's tag (above)"; }
    step "$(tail -n 1 "$tmp/auditwheel.log" | sed 's/^dist: //')"
fi

# 2. The sdist's contents.
top=llmsession-$VERSION
tar -tzf "$sdist" >"$tmp/sdist.txt"
for f in PKG-INFO pyproject.toml setup.py README.md LICENSE-MIT LICENSE-APACHE src/llmsession/py.typed \
    rust/Cargo.toml rust/Cargo.lock rust/src/lib.rs rust/capi/Cargo.toml rust/capi/build.rs rust/capi/src/lib.rs \
    rust/cli/Cargo.toml rust/cli/src/main.rs; do
    grep -qx "$top/$f" "$tmp/sdist.txt" || fail "the sdist has no $top/$f"
done
for m in "${modules[@]}"; do grep -qx "$top/src/llmsession/$m" "$tmp/sdist.txt" || fail "the sdist has no $top/src/llmsession/$m"; done
for d in src capi/src cli/src; do
    n_tree=$(git -C "$ROOT" ls-files -- "$d" | wc -l)
    n_sdist=$(grep -c "^$top/rust/$d/.*[^/]$" "$tmp/sdist.txt" || true)
    [ "$n_tree" = "$n_sdist" ] || fail "the sdist has $n_sdist files of $d/, the checkout $n_tree"
done
! grep -Eq '/target/|\.so$|/_lib/|/_bin/|/_checkout\.py$|__pycache__' "$tmp/sdist.txt" || fail "the sdist carries build output: $(grep -E '/target/|\.so$|/_lib/|/_bin/|/_checkout\.py$|__pycache__' "$tmp/sdist.txt" | head -n 3)"
# cargo reads the manifests and finds every target they name (no build, no network).
if command -v cargo >/dev/null; then
    tar -xzf "$sdist" -C "$tmp"
    (cd "$tmp/$top/rust" && cargo metadata --offline --no-deps --format-version 1 >/dev/null) ||
        fail "cargo cannot read the sdist's workspace (above)"
    rm -rf "${tmp:?}/$top"
fi
step "sdist: $(basename "$sdist"), $(stat -c %s "$sdist") bytes, $(grep -c '[^/]$' "$tmp/sdist.txt") files: package, setup.py, Cargo workspace"

# 3. Reproducible: the same stage and SOURCE_DATE_EPOCH give the same bytes. The epoch the
# artefacts were made with is the sdist's mtimes (HEAD may have moved since).
if [ -d "$DIST_STAGE/lib" ]; then
    mkdir -p "$tmp/again"
    epoch=$("$python" -c 'import sys, tarfile; print(int(tarfile.open(sys.argv[1]).getmember(sys.argv[2]).mtime))' "$sdist" "$top/PKG-INFO")
    SOURCE_DATE_EPOCH=$epoch DIST="$tmp/again" bash "$ROOT/scripts/dist/python.sh" >"$tmp/again.log" 2>&1 || { cat "$tmp/again.log"; fail "python.sh failed on the second run"; }
    for f in "$wheel" "$sdist"; do
        cmp -s "$f" "$tmp/again/python/$(basename "$f")" || fail "$(basename "$f") is not reproducible: a second python.sh run wrote other bytes (or its inputs changed since make dist)"
    done
    step "reproducible: a second python.sh (SOURCE_DATE_EPOCH=$epoch) gave the same bytes ($(sha256sum "$wheel" | cut -c1-16)..., $(sha256sum "$sdist" | cut -c1-16)...)"
else
    step "reproducibility not checked: no stage in $DIST_STAGE (make dist)"
fi

# 4. Installed where no toolchain of ours is, from the wheel alone.
mkdir -p "$tmp/user"
cp "$wheel" "$ROOT/examples/readme/hello.py" "$tmp/user/"
# The user's shell gets the interpreter and the wheel's name as $1 and $2.
# shellcheck disable=SC2016
without_toolchain "$tmp/user" bash -euo pipefail -c '
    fail() { echo "test-python: $*" >&2; exit 1; }
    "$1" -m venv venv
    venv/bin/pip install --quiet --no-index --disable-pip-version-check "./$2" || fail "pip install --no-index $2 failed"
    export PATH=$PWD/venv/bin:$PATH
    loaded=$(python -c "import llmsession; print(llmsession.library_path)")
    case $loaded in "$PWD"/venv/lib/python*/site-packages/llmsession/_lib/libllmsession.so) ;; *) fail "llmsession loaded $loaded, not the library of the wheel" ;; esac
    [ "$(command -v llmsession)" = "$PWD/venv/bin/llmsession" ] || fail "no llmsession command in venv/bin"
    echo "test-python: pip install --no-index $2: ok (library $loaded, command $(llmsession --version))"
    first=$(python hello.py) || fail "hello.py failed"
    [[ $first == *"verify: {\"compactions\":0,\"events\":7,\"requests\":1}" ]] || fail "hello.py printed: $first"
    second=$(python hello.py) || fail "hello.py failed on the resumed log"
    [[ $second == *"verify: {\"compactions\":0,\"events\":14,\"requests\":2}" ]] || fail "the resumed hello.py printed: $second"
    echo "test-python: hello.py: $first"
    echo "test-python: hello.py again (resumed): $second"
    report=$(llmsession verify hello.jsonl) || fail "llmsession verify hello.jsonl failed: $report"
    [[ $report == "ok: 14 events, 2 requests"* ]] || fail "llmsession verify printed: $report"
    echo "test-python: llmsession verify hello.jsonl: $report"
' _ "$python" "$(basename "$wheel")" || fail "the wheel does not install and run (above)"
step ok
