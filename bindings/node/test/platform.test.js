'use strict';
// The package as npm lays it out for a user: llmsession in a project's node_modules, with the
// platform package (@llmsession/linux-x64-gnu, platform.js) beside it or without it. Each case
// runs a fresh `node` in that project with LLMSESSION_LIB unset, as a user's program would.
// (scripts/dist/test-node.sh does the same with the real tarballs.)
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const lls = require('..');

const pkgDir = path.resolve(__dirname, '..');
const platformName = '@llmsession/linux-x64-gnu';
const { version } = require('../package.json');
const onBuiltPlatform = process.platform === 'linux' && process.arch === 'x64' &&
  Boolean(process.report.getReport().header.glibcVersionRuntime);

/** A project with llmsession (and koffi) in node_modules; `withPlatform` adds the platform package. */
function project(t, withPlatform) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llmsession-platform-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const nm = path.join(dir, 'node_modules');
  const main = path.join(nm, 'llmsession');
  for (const f of require('../package.json').files.concat('package.json')) {
    fs.mkdirSync(path.dirname(path.join(main, f)), { recursive: true });
    fs.copyFileSync(path.join(pkgDir, f), path.join(main, f));
  }
  fs.symlinkSync(path.join(pkgDir, 'node_modules', 'koffi'), path.join(nm, 'koffi'));
  if (withPlatform) {
    const plat = path.join(nm, ...platformName.split('/'));
    fs.mkdirSync(path.join(plat, 'lib'), { recursive: true });
    fs.mkdirSync(path.join(plat, 'bin'));
    fs.symlinkSync(fs.realpathSync(lls.libraryPath), path.join(plat, 'lib', 'libllmsession.so.0.2'));
    // A stand-in for the command: prints its arguments, exits with the first one.
    fs.writeFileSync(path.join(plat, 'bin', 'llmsession'), '#!/bin/sh\necho "args: $*"\nexit "$1"\n', { mode: 0o755 });
    fs.writeFileSync(path.join(plat, 'package.json'), JSON.stringify({
      name: platformName, version,
      llmsession: { library: 'lib/libllmsession.so.0.2', command: 'bin/llmsession' },
    }));
  }
  return dir;
}

function run(dir, args) {
  const env = { ...process.env };
  delete env.LLMSESSION_LIB;
  delete env.LD_LIBRARY_PATH;
  delete env.PKG_CONFIG_PATH;
  return spawnSync(process.execPath, args, { cwd: dir, env, encoding: 'utf8' });
}

test('the library is loaded from the platform package beside the binding', { skip: !onBuiltPlatform }, (t) => {
  const dir = project(t, true);
  const r = run(dir, ['-e', "process.stdout.write(require('llmsession').libraryPath)"]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, path.join(dir, 'node_modules', '@llmsession', 'linux-x64-gnu', 'lib', 'libllmsession.so.0.2'));
});

test('the llmsession launcher runs the platform package command with its arguments and exit status',
  { skip: !onBuiltPlatform }, (t) => {
    const dir = project(t, true);
    const launcher = path.join(dir, 'node_modules', 'llmsession', 'bin', 'llmsession.js');
    const r = run(dir, [launcher, '3', 'verify', 'a log.jsonl']);
    assert.equal(r.status, 3);
    assert.equal(r.stdout, 'args: 3 verify a log.jsonl\n');
  });

test('without the platform package, loading fails with an error naming it', (t) => {
  const dir = project(t, false);
  const r = run(dir, ['-e', "require('llmsession')"]);
  if (r.status === 0) return t.skip('a libllmsession is installed on this machine (found by its system name)');
  assert.equal(r.status, 1, r.stderr);
  assert.equal(r.signal, null);
  assert.match(r.stderr, /cannot load the shared library: /);
  if (onBuiltPlatform) {
    assert.match(r.stderr, /the platform package for linux\/x64\/glibc, @llmsession\/linux-x64-gnu, is not installed/);
    assert.ok(r.stderr.includes(`npm install ${platformName}@${version}`), r.stderr);
  } else {
    assert.match(r.stderr, /no platform package of llmsession is built for /);
  }
});

test('without the platform package, the llmsession launcher says which one it needs', (t) => {
  const dir = project(t, false);
  const r = run(dir, [path.join(dir, 'node_modules', 'llmsession', 'bin', 'llmsession.js'), 'verify', 'x.jsonl']);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /the llmsession command comes with the platform package: /);
  assert.match(r.stderr, /@llmsession\//);
});

test('LLMSESSION_LIB naming a file that does not load is the error, nothing else is tried', (t) => {
  const dir = project(t, true);
  const env = { ...process.env, LLMSESSION_LIB: path.join(dir, 'no-such-lib.so') };
  const r = spawnSync(process.execPath, ['-e', "require('llmsession')"], { cwd: dir, env, encoding: 'utf8' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /cannot load the shared library LLMSESSION_LIB names: .*no-such-lib\.so/);
});
