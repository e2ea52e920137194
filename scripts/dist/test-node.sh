#!/usr/bin/env bash
# The npm tarballs of $DIST/npm installed and used the way an npm user would, where no
# toolchain of ours exists (common.sh, without_toolchain: a temporary directory, a HOME and npm
# cache of its own, no cargo, no checkout on PATH; koffi comes from the npm registry):
#   1. the tarballs: their contents and sizes; the library is stripped and has the soname, the
#      command is stripped, and neither needs a glibc newer than DIST_GLIBC (glibc-check.sh;
#      npm has no field for a glibc version: docs/install.md says it); the released
#      package.json (version, koffi pin, optional dependency at exactly VERSION, not private);
#      packing the stage again gives the same bytes;
#   2. `npm install` of both tarballs in a new project (`npm init -y`): the README's example
#      (examples/readme/hello.js, with require('llmsession')) run twice, the second run resuming
#      the log the first wrote; the library loaded from the platform package; the log verified
#      with `npx llmsession verify`, and the command's exit status passed on;
#   3. `npm install` of the main tarball alone (no platform package, LLMSESSION_LIB unset): the
#      first use fails with the error naming the platform package, and so does the command.
set -euo pipefail
source "$(dirname "$0")/common.sh"
fail() { echo "test-dist/node: $*" >&2; exit 1; }
say() { echo "test-dist/node: $*"; }
npm_dir=$DIST/npm
main_tgz=llmsession-$VERSION.tgz
plat_tgz=llmsession-linux-x64-gnu-$VERSION.tgz
platform_name=@llmsession/linux-x64-gnu
for t in "$main_tgz" "$plat_tgz"; do [ -f "$npm_dir/$t" ] || fail "$npm_dir/$t is missing (make dist)"; done
command -v npm >/dev/null || fail "npm is not on PATH"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmsession-test-node.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# 1. The tarballs.
for t in "$main_tgz" "$plat_tgz"; do
    say "$t: $(stat -c %s "$npm_dir/$t") bytes, sha256 $(sha256sum "$npm_dir/$t" | cut -d' ' -f1)"
    tar -tvzf "$npm_dir/$t" | awk '{ printf "  %s %10s  %s\n", $1, $3, $6 }'
done
tar -tzf "$npm_dir/$main_tgz" | LC_ALL=C sort >"$tmp/main.txt"
# The binding's tarball holds exactly the files its package.json lists (index.js and the files
# it assembles, one per concept: docs/node.md), and package.json.
node -e 'for (const f of [...require(process.argv[1]).files, "package.json"]) console.log("package/" + f)' \
    "$ROOT/bindings/node/package.json" |
    LC_ALL=C sort | diff - "$tmp/main.txt" >/dev/null || fail "$main_tgz holds: $(tr '\n' ' ' <"$tmp/main.txt")"
tar -tzf "$npm_dir/$plat_tgz" | LC_ALL=C sort >"$tmp/plat.txt"
printf 'package/%s\n' LICENSE-APACHE LICENSE-MIT README.md bin/llmsession "lib/$SONAME" package.json |
    LC_ALL=C sort | diff - "$tmp/plat.txt" >/dev/null || fail "$plat_tgz holds: $(tr '\n' ' ' <"$tmp/plat.txt")"
mkdir "$tmp/plat"
tar -xzf "$npm_dir/$plat_tgz" -C "$tmp/plat"
so=$tmp/plat/package/lib/$SONAME
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "$SONAME" ] || fail "lib/$SONAME has soname '$soname', not $SONAME"
for f in "$so" "$tmp/plat/package/bin/llmsession"; do
    if readelf -S -W "$f" | grep -E ' \.(symtab|debug_info|debug_line) ' >/dev/null; then fail "${f#"$tmp/plat/package/"} is not stripped"; fi
done
[ -x "$tmp/plat/package/bin/llmsession" ] || fail "bin/llmsession is not executable in $plat_tgz"
say "lib/$SONAME: soname $soname, no symbol table or debug info; bin/llmsession stripped"
GLIBC_CHECK_STRIP=$tmp/plat/package/ bash "$ROOT/scripts/dist/glibc-check.sh" "$DIST_GLIBC" "$so" "$tmp/plat/package/bin/llmsession" |
    sed 's/^/test-dist\/node: /' || fail "the platform package's library or command needs a glibc newer than $DIST_GLIBC (above)"
tar -xzOf "$npm_dir/$main_tgz" package/package.json >"$tmp/main-package.json"
node - "$tmp/main-package.json" "$VERSION" "$platform_name" "$ROOT/bindings/node/package.json" <<'JS' || exit 1
const fs = require('fs');
const [file, version, platformName, checkout] = process.argv.slice(2);
const pkg = JSON.parse(fs.readFileSync(file, 'utf8'));
const src = JSON.parse(fs.readFileSync(checkout, 'utf8'));
const bad = [];
if (pkg.version !== version) bad.push(`version ${pkg.version}, not ${version}`);
if (pkg.private) bad.push('it is private');
if (pkg.dependencies.koffi !== src.dependencies.koffi) bad.push(`koffi ${pkg.dependencies.koffi}, not ${src.dependencies.koffi}`);
if (JSON.stringify(pkg.optionalDependencies) !== JSON.stringify({ [platformName]: version }))
  bad.push(`optionalDependencies ${JSON.stringify(pkg.optionalDependencies)}`);
if (!pkg.bin || pkg.bin.llmsession !== 'bin/llmsession.js') bad.push('no llmsession in "bin"');
if (bad.length) { console.error(`test-dist/node: the released package.json: ${bad.join('; ')}`); process.exit(1); }
JS
tar -xzOf "$npm_dir/$plat_tgz" package/package.json >"$tmp/plat-package.json"
# shellcheck disable=SC2016 # JavaScript, not shell
node -e '
const p = require(process.argv[1]);
const want = { name: process.argv[2], version: process.argv[3], os: ["linux"], cpu: ["x64"], libc: ["glibc"] };
for (const [k, v] of Object.entries(want)) if (JSON.stringify(p[k]) !== JSON.stringify(v)) {
  console.error(`test-dist/node: the platform package.json has ${k} ${JSON.stringify(p[k])}, not ${JSON.stringify(v)}`);
  process.exit(1);
}' "$tmp/plat-package.json" "$platform_name" "$VERSION"
say "package.json: $VERSION, koffi pinned, optional $platform_name@$VERSION; platform: os linux, cpu x64, libc glibc"
# The same stage packed again gives the same bytes (when the stage is still there).
if [ -f "$DIST_STAGE/lib/$REALNAME" ]; then
    DIST="$tmp/repack" DIST_STAGE="$DIST_STAGE" bash "$ROOT/scripts/dist/node.sh" >/dev/null
    for t in "$main_tgz" "$plat_tgz"; do
        cmp -s "$npm_dir/$t" "$tmp/repack/npm/$t" || fail "$t packed again from $DIST_STAGE differs"
    done
    say "packed again from $DIST_STAGE: both tarballs byte for byte the same"
fi

# 2. Both tarballs in a new project, without our toolchain.
cp "$npm_dir/$main_tgz" "$npm_dir/$plat_tgz" "$tmp/"
sed "s|require('../../bindings/node')|require('llmsession')|" "$ROOT/examples/readme/hello.js" >"$tmp/hello.js"
grep -q "^const lls = require('llmsession');" "$tmp/hello.js" || fail "examples/readme/hello.js no longer requires the binding as expected"
cat >"$tmp/user.sh" <<'SH'
set -euo pipefail
fail() { echo "test-dist/node: $*" >&2; exit 1; }
export npm_config_cache=$HOME/npm-cache npm_config_update_notifier=false
npm_flags=(--no-audit --no-fund --loglevel=error)
# The project: npm init -y, both tarballs.
mkdir app && cd app
npm init -y >/dev/null
npm install "${npm_flags[@]}" "../$MAIN_TGZ" "../$PLAT_TGZ" >npm.txt 2>&1 || fail "npm install: $(cat npm.txt)"
[ -f "node_modules/$PLATFORM_NAME/package.json" ] || fail "npm install put no $PLATFORM_NAME in node_modules"
cp ../hello.js .
node hello.js >run1.txt 2>&1 || fail "hello.js failed: $(cat run1.txt)"
grep -q '"requests":1' run1.txt || fail "first run: $(cat run1.txt)"
node hello.js >run2.txt 2>&1 || fail "hello.js failed when resuming: $(cat run2.txt)"
grep -q '"requests":2' run2.txt || fail "the second run did not resume the log: $(cat run2.txt)"
echo "test-dist/node: hello.js twice: $(cat run2.txt)"
loaded=$(node -e "process.stdout.write(require('llmsession').libraryPath)")
[ "$loaded" = "$PWD/node_modules/$PLATFORM_NAME/lib/$SONAME" ] || fail "loaded $loaded, not the platform package's library"
echo "test-dist/node: library loaded from node_modules/$PLATFORM_NAME/lib/$SONAME"
npx --no-install llmsession verify hello.jsonl >verify.txt 2>&1 || fail "npx llmsession verify: $(cat verify.txt)"
grep -q '^ok: .* 2 requests' verify.txt || fail "npx llmsession verify said: $(cat verify.txt)"
echo "test-dist/node: npx llmsession verify hello.jsonl: $(cat verify.txt)"
set +e
npx --no-install llmsession verify missing.jsonl >missing.txt 2>&1
rc=$?
set -e
[ "$rc" = 4 ] || fail "npx llmsession verify of a missing log exited $rc, not 4 (the command's status): $(cat missing.txt)"
echo "test-dist/node: npx llmsession verify missing.jsonl: exit 4, as the command says"
du -sk "node_modules/$PLATFORM_NAME" node_modules/llmsession node_modules/koffi |
    awk '{ printf "test-dist/node: installed %s: %d KiB\n", $2, $1 }'

# The main tarball alone: no platform package, LLMSESSION_LIB unset.
cd .. && mkdir alone && cd alone
npm init -y >/dev/null
npm install "${npm_flags[@]}" "../$MAIN_TGZ" >npm.txt 2>&1 || fail "npm install of the main tarball alone: $(cat npm.txt)"
[ ! -e "node_modules/$PLATFORM_NAME" ] || fail "$PLATFORM_NAME was installed from somewhere"
set +e
node -e "require('llmsession')" >require.txt 2>&1
rc=$?
set -e
if [ "$rc" = 0 ]; then
    # A libllmsession installed on this machine is found through the system names.
    echo "test-dist/node: main tarball alone: loaded $(node -e "process.stdout.write(require('llmsession').libraryPath)")" \
        "(a libllmsession is installed on this machine), so the missing-package error is not seen here"
else
    [ "$rc" = 1 ] || fail "require('llmsession') without the platform package exited $rc (a crash?): $(cat require.txt)"
    grep -q "cannot load the shared library: the platform package for linux/x64/glibc, $PLATFORM_NAME, is not installed" require.txt ||
        fail "require('llmsession') without the platform package: $(cat require.txt)"
    echo "test-dist/node: main tarball alone: require fails with: $(grep -m1 '^Error' require.txt | cut -c1-160)..."
fi
set +e
npx --no-install llmsession verify x.jsonl >cmd.txt 2>&1
rc=$?
set -e
[ "$rc" = 1 ] && grep -q "$PLATFORM_NAME, is not installed" cmd.txt || fail "npx llmsession without the platform package (exit $rc): $(cat cmd.txt)"
echo "test-dist/node: main tarball alone: npx llmsession exits 1 with: $(cut -c1-120 cmd.txt)..."
SH
MAIN_TGZ=$main_tgz PLAT_TGZ=$plat_tgz PLATFORM_NAME=$platform_name SONAME=$SONAME \
    without_toolchain "$tmp" bash "$tmp/user.sh"
say "ok"
