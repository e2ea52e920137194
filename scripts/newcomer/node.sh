#!/usr/bin/env bash
# The Node newcomer path (bindings/node/README.md), followed in a temporary directory outside
# the repository: install the library into a prefix of its own (`make install PREFIX=...`,
# PKG_CONFIG_PATH pointed at it), then install the package into a new npm project in each of
# the documented ways (`npm install --install-links <folder>`, `npm pack <folder>` and the
# tarball, a plain `npm install <folder>` of a fresh copy with koffi added), and in each run the
# README's one-turn example twice (the second run resumes the session), verify the log with the
# library (`verifyFile`, in the example) and with the installed `llmsession` command, and check
# that the package holds its README and licences and loaded the library from the prefix.
#   scripts/newcomer/node.sh       (MAKE, CARGO: as make passes them)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmsession-newcomer-node.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "newcomer/node: $*"; exit 1; }
unset LLMSESSION_LIB LD_LIBRARY_PATH
npm_flags=(--no-audit --no-fund --prefer-offline --loglevel=error)

prefix=$tmp/prefix
echo "newcomer/node: make install PREFIX=$prefix"
"${MAKE:-make}" --no-print-directory -C "$root" install PREFIX="$prefix" >"$tmp/install.log" 2>&1 ||
    fail "make install failed: $(tail -n 20 "$tmp/install.log")"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig

# The README's example, as it stands there (the block after the newcomer-example marker).
example=$tmp/main.js
awk '/<!-- newcomer-example/ { on = 1; next } on && /^```js/ { inside = 1; next } inside && /^```/ { exit } inside' \
    "$root/bindings/node/README.md" >"$example"
grep -q "require('llmsession')" "$example" || fail "no example found in bindings/node/README.md"

# A fresh copy of the package folder, as a new checkout has it (no node_modules).
fresh=$tmp/checkout/bindings/node
mkdir -p "$fresh"
(cd "$root/bindings/node" && tar --exclude=node_modules -cf - .) | (cd "$fresh" && tar -xf -)

run_app() { # DIR ROUTE
    local app=$1 route=$2
    cp "$example" "$app/main.js"
    (cd "$app" && node main.js) >"$app/run1.txt" 2>&1 || fail "$route: the example failed: $(cat "$app/run1.txt")"
    grep -q '^assistant: Hello!$' "$app/run1.txt" || fail "$route: no answer printed: $(cat "$app/run1.txt")"
    grep -q '^turns: 0 before, 1 now' "$app/run1.txt" || fail "$route: first run: $(cat "$app/run1.txt")"
    (cd "$app" && node main.js) >"$app/run2.txt" 2>&1 || fail "$route: the resumed example failed: $(cat "$app/run2.txt")"
    grep -q '^turns: 1 before, 2 now' "$app/run2.txt" || fail "$route: the second run did not resume: $(cat "$app/run2.txt")"
    grep -q '^verify: {"compactions":0,"events":[0-9]*,"requests":2}$' "$app/run2.txt" ||
        fail "$route: verifyFile: $(cat "$app/run2.txt")"
    "$prefix/bin/llmsession" verify "$app/chat.jsonl" >"$app/verify.txt" || fail "$route: llmsession verify: $(cat "$app/verify.txt")"
    grep -q '^ok: .* 2 requests' "$app/verify.txt" || fail "$route: llmsession verify said: $(cat "$app/verify.txt")"
    local loaded
    loaded=$(cd "$app" && node -e "process.stdout.write(require('llmsession').libraryPath)")
    [ "$loaded" = "$prefix/lib/libllmsession.so" ] || fail "$route: loaded $loaded, not the prefix's library"
    echo "newcomer/node: $route: two runs (resumed), $(cat "$app/verify.txt")"
}

new_app() { mkdir -p "$tmp/$1" && (cd "$tmp/$1" && npm init -y >/dev/null) && echo "$tmp/$1"; }

# 1. The folder, copied.
app=$(new_app links)
(cd "$app" && npm install "${npm_flags[@]}" --install-links "$fresh") >"$app/npm.txt" 2>&1 || fail "npm install --install-links: $(cat "$app/npm.txt")"
[ ! -L "$app/node_modules/llmsession" ] || fail "--install-links made a symlink"
for f in package.json index.js index.d.ts README.md LICENSE-MIT LICENSE-APACHE; do
    [ -f "$app/node_modules/llmsession/$f" ] || fail "the installed package lacks $f"
done
[ ! -e "$app/node_modules/llmsession/test" ] || fail "the installed package carries its tests"
grep -q '"license": "MIT OR Apache-2.0"' "$app/node_modules/llmsession/package.json" || fail "licence field"
run_app "$app" "npm install --install-links"

# 2. The tarball npm pack makes.
app=$(new_app tarball)
(cd "$app" && npm pack "${npm_flags[@]}" "$fresh" && npm install "${npm_flags[@]}" ./llmsession-*.tgz) >"$app/npm.txt" 2>&1 ||
    fail "npm pack / install: $(cat "$app/npm.txt")"
tar -tzf "$app"/llmsession-*.tgz | sort >"$app/contents.txt"
for f in package/package.json package/index.js package/index.d.ts package/README.md package/LICENSE-MIT package/LICENSE-APACHE; do
    grep -qx "$f" "$app/contents.txt" || fail "the tarball lacks $f"
done
run_app "$app" "npm pack + npm install <tarball>"

# 3. A plain npm install <folder>: a symlink, and no dependency installed; the package says
# what to do, and works once the project has koffi.
app=$(new_app link)
(cd "$app" && npm install "${npm_flags[@]}" "$fresh") >"$app/npm.txt" 2>&1 || fail "npm install <folder>: $(cat "$app/npm.txt")"
[ -L "$app/node_modules/llmsession" ] || fail "npm install <folder> did not link (npm changed its default?)"
if (cd "$app" && node -e "require('llmsession')") >"$app/nokoffi.txt" 2>&1; then fail "loaded without koffi"; fi
grep -q 'cannot find the koffi package.*--install-links' "$app/nokoffi.txt" || fail "no useful message without koffi: $(cat "$app/nokoffi.txt")"
(cd "$app" && npm install "${npm_flags[@]}" koffi@2.16.3) >>"$app/npm.txt" 2>&1 || fail "npm install koffi: $(cat "$app/npm.txt")"
run_app "$app" "npm install <folder> + koffi"
echo "newcomer/node: ok"
