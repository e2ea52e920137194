#!/usr/bin/env bash
# The npm packages, as `npm pack` tarballs in $DIST/npm/ (run by build.sh from the stage it made):
#   llmsession-VERSION.tgz                 the binding (bindings/node: the files its
#                                          package.json lists: index.js and the files it
#                                          assembles, index.d.ts, platform.js, the `llmsession`
#                                          launcher, README, licences), depending on koffi
#                                          (pinned) and, as an optional dependency at exactly
#                                          VERSION, on
#   llmsession-linux-x64-gnu-VERSION.tgz   @llmsession/linux-x64-gnu: the stripped library under
#                                          its soname, the stripped `llmsession` command, the
#                                          licences; os linux, cpu x64, libc glibc, so npm
#                                          installs it only there.
# The version is Cargo.toml's; bindings/node/package.json must say the same (the script stops
# and says so otherwise). The released package.json is the checkout's without what only a
# checkout needs ("private", "scripts", "devDependencies"), plus the optional dependency.
# npm pack gives every entry the same mtime and mode rules, so the same inputs give the same
# tarball bytes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
fail() { echo "dist/node: $*" >&2; exit 1; }
command -v npm >/dev/null || fail "npm is not on PATH (Node 20 or later with npm is needed to pack)"
command -v node >/dev/null || fail "node is not on PATH"
[ "$DIST_ARCH" = x86_64 ] || fail "only the x86-64 platform package is made here (this is $DIST_ARCH)"

src=$ROOT/bindings/node
platform_name=@llmsession/linux-x64-gnu
lib=$DIST_STAGE/lib/$REALNAME
cli=$DIST_STAGE/bin/llmsession
for f in "$lib" "$cli" "$DIST_STAGE/share/licenses/LICENSE-MIT" "$DIST_STAGE/share/licenses/LICENSE-APACHE"; do
    [ -f "$f" ] || fail "$f is missing (scripts/dist/build.sh stages it)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/llmsession-dist-node.XXXXXX")
trap 'rm -rf "$work"' EXIT
npm_out=$DIST/npm
mkdir -p "$npm_out"

# 1. The platform package, from bindings/node/platform-package.
plat=$work/platform
mkdir -p "$plat/lib" "$plat/bin"
for f in package.json.in README.md; do
    sed -e "s/@VERSION@/$VERSION/g" -e "s/@SONAME@/$SONAME/g" "$src/platform-package/$f" >"$plat/${f%.in}"
done
grep -q "\"name\": \"$platform_name\"" "$plat/package.json" || fail "platform-package/package.json.in is not $platform_name"
cp "$lib" "$plat/lib/$SONAME"
cp "$cli" "$plat/bin/llmsession"
cp "$DIST_STAGE/share/licenses/LICENSE-MIT" "$DIST_STAGE/share/licenses/LICENSE-APACHE" "$plat/"

# 2. The binding: the files its package.json lists, and the released package.json.
main=$work/main
mkdir -p "$main"
files=$(node -e 'for (const f of require(process.argv[1]).files) console.log(f)' "$src/package.json")
while IFS= read -r f; do
    [ -f "$src/$f" ] || fail "bindings/node/package.json lists $f, which is not there"
    mkdir -p "$main/$(dirname "$f")"
    cp "$src/$f" "$main/$f"
done <<<"$files"
node - "$src/package.json" "$main/package.json" "$VERSION" "$platform_name" <<'JS'
const fs = require('fs');
const [from, to, version, platformName] = process.argv.slice(2);
const pkg = JSON.parse(fs.readFileSync(from, 'utf8'));
if (pkg.version !== version) {
  console.error(`dist/node: bindings/node/package.json has version ${pkg.version}, Cargo.toml ${version}: ` +
    'set "version" in bindings/node/package.json (and package-lock.json) to the one in Cargo.toml');
  process.exit(1);
}
if (!pkg.dependencies || !/^\d+\.\d+\.\d+$/.test(pkg.dependencies.koffi || '')) {
  console.error('dist/node: bindings/node/package.json does not pin koffi to one exact version');
  process.exit(1);
}
const out = {};
for (const [k, v] of Object.entries(pkg)) {
  if (k === 'private' || k === 'scripts' || k === 'devDependencies') continue;
  out[k] = v;
  if (k === 'dependencies') out.optionalDependencies = { [platformName]: version };
}
fs.writeFileSync(to, JSON.stringify(out, null, 2) + '\n');
JS

# 3. npm pack, each into $DIST/npm (a cache of its own: nothing is fetched, nothing of the
# user's cache is touched).
pack() { # DIR: prints the tarball's name
    npm pack "$1" --pack-destination "$npm_out" --ignore-scripts --json --loglevel=error --cache "$work/npm-cache" \
        >"$work/pack.json" || fail "npm pack $1 failed"
    node -e 'console.log(require(process.argv[1])[0].filename)' "$work/pack.json"
}
plat_tgz=$(pack "$plat")
main_tgz=$(pack "$main")
[ "$main_tgz" = "llmsession-$VERSION.tgz" ] || fail "npm pack wrote $main_tgz, not llmsession-$VERSION.tgz"
[ "$plat_tgz" = "llmsession-linux-x64-gnu-$VERSION.tgz" ] || fail "npm pack wrote $plat_tgz"
for t in "$main_tgz" "$plat_tgz"; do
    echo "dist/node: npm/$t $(stat -c %s "$npm_out/$t") bytes ($(tar -tzf "$npm_out/$t" | wc -l) files)"
done
