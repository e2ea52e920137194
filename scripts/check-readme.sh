#!/usr/bin/env bash
# Keeps the README's examples true: every fenced block that follows a line
#   <!-- file: PATH -->
# must equal PATH byte for byte, and the five examples in examples/readme/ are built against the
# in-tree library (build/lib) and run twice in a scratch directory (the second run resumes the
# log the first wrote). Run by `make readme-check` (part of `make test`), after build-lib, go-pc
# and test-node's `npm ci`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
lib="$root/build/lib"

# 1. README blocks against the files.
python3 - <<'PY'
import re, sys
text = open("README.md", encoding="utf-8").read()
marks = list(re.finditer(r"<!-- file: (\S+) -->\n```[a-z+]*\n(.*?)```\n", text, re.S))
if not marks:
    sys.exit("check-readme: no '<!-- file: ... -->' blocks in README.md")
bad = 0
for m in marks:
    path, block = m.group(1), m.group(2)
    try:
        want = open(path, encoding="utf-8").read()
    except OSError as e:
        print(f"check-readme: README.md names {path}: {e.strerror}"); bad += 1; continue
    if block != want:
        print(f"check-readme: the README block for {path} differs from the file"); bad += 1
    else:
        print(f"check-readme: README block = {path}")
sys.exit(1 if bad else 0)
PY

# 2. Build and run each example.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" examples/readme/hello.c -L"$lib" -lllmsession -o "$tmp/hello_c"
c++ -std=c++17 -Wall -Wextra -Werror -I"$root/include" examples/readme/hello.cpp -L"$lib" -lllmsession -o "$tmp/hello_cpp"
(cd examples/readme/go && PKG_CONFIG_PATH="$root/build/pkgconfig" CGO_ENABLED=1 GOPROXY=off GOTOOLCHAIN=local \
    GOFLAGS=-tags=llmsession_system go build -o "$tmp/hello_go" .)

run() { # name, command...: two runs in a fresh directory; the second must see two requests
    local name=$1; shift
    mkdir "$tmp/run_$name"
    (cd "$tmp/run_$name" && "$@" >/dev/null && "$@") >"$tmp/$name.out" 2>&1 || {
        cat "$tmp/$name.out"; echo "check-readme: the $name example failed"; exit 1; }
    grep -q '"requests":2' "$tmp/$name.out" || {
        cat "$tmp/$name.out"; echo "check-readme: the $name example's second run did not verify 2 requests"; exit 1; }
    echo "check-readme: $name example: $(cat "$tmp/$name.out")"
}
run c "$tmp/hello_c"
run cpp "$tmp/hello_cpp"
run go "$tmp/hello_go"
run node env LLMSESSION_LIB="$lib/libllmsession.so" node "$root/examples/readme/hello.js"
# Python: the package from the checkout's source (it finds build/lib from there).
run python env PYTHONPATH="$root/bindings/python/src" LLMSESSION_LIB="$lib/libllmsession.so" \
    "${PYTHON:-python3}" "$root/examples/readme/hello.py"
echo "check-readme: ok"
