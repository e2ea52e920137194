'use strict';
// The package carries the whole binding. index.js assembles the API from one file per concept
// (docs/node.md, "Files"); npm packs only what package.json's "files" lists, so a concept file
// left out of that list would be missing from the tarball, and `require('llmsession')` would
// fail for everyone who installed it while every test run from the checkout passed.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));

test('package.json "files" lists every module the binding loads, and every JS file of the folder is loaded', () => {
  require('..');
  const loaded = Object.keys(require.cache)
    .filter((f) => f.startsWith(root + path.sep))
    .map((f) => path.relative(root, f))
    .filter((f) => f.endsWith('.js') && !f.startsWith(`node_modules${path.sep}`) && !f.startsWith(`test${path.sep}`));
  assert.ok(loaded.includes('index.js') && loaded.includes('native.js'), `loaded: ${loaded.join(', ')}`);
  const files = new Set(pkg.files);
  const missing = loaded.filter((f) => !files.has(f));
  assert.deepEqual(missing, [], `loaded by require('llmsession') but not in package.json "files": ${missing.join(', ')}`);
  // A JS file beside index.js that nothing loads is a concept index.js does not assemble.
  const top = fs.readdirSync(root).filter((f) => f.endsWith('.js'));
  const unused = top.filter((f) => !loaded.includes(f));
  assert.deepEqual(unused, [], `JS files in bindings/node that require('llmsession') does not load: ${unused.join(', ')}`);
});

test('every file package.json lists exists, with "main" and "types" among them', () => {
  for (const f of pkg.files) assert.ok(fs.statSync(path.join(root, f)).isFile(), `${f} is listed but not a file`);
  assert.ok(pkg.files.includes(pkg.main), `main ${pkg.main} is not in "files"`);
  assert.ok(pkg.files.includes(pkg.types), `types ${pkg.types} is not in "files"`);
});
