'use strict';
// The platform package: the prebuilt shared library and `llmsession` command for one
// os/cpu/libc, published beside this package (`@llmsession/linux-x64-gnu`) and named in the
// released package.json's optionalDependencies, so that npm installs the one that matches the
// machine and skips the others (their package.json has "os", "cpu" and "libc").
// Its package.json says where its files are: "llmsession": { "library": ..., "command": ... }.
// Used by native.js (loading the library) and bin/llmsession.js (the command).

const fs = require('fs');
const path = require('path');

const SCOPE = '@llmsession';
// The platforms a package is built for (scripts/dist/node.sh builds this one).
const BUILT = ['linux-x64-gnu'];

// "glibc" or "musl" on Linux (what npm's "libc" field means), null elsewhere.
function libc() {
  if (process.platform !== 'linux') return null;
  const report = process.report;
  const exclude = report.excludeNetwork;
  try {
    report.excludeNetwork = true; // no interface lookups: only the header is read
    return report.getReport().header.glibcVersionRuntime ? 'glibc' : 'musl';
  } catch {
    // No report: musl's loader is /lib/ld-musl-<arch>.so.1, glibc has none of that name.
    try {
      return fs.readdirSync('/lib').some((f) => f.startsWith('ld-musl-')) ? 'musl' : 'glibc';
    } catch {
      return 'glibc';
    }
  } finally {
    report.excludeNetwork = exclude;
  }
}

/**
 * This machine's platform and the package that would hold its library:
 * { os, cpu, libc, name: '@llmsession/linux-x64-gnu', built: whether such a package is made,
 *   description: 'linux/x64/glibc' }.
 */
function current() {
  const c = libc();
  const key = [process.platform, process.arch].concat(c ? [c === 'glibc' ? 'gnu' : c] : []).join('-');
  return {
    os: process.platform,
    cpu: process.arch,
    libc: c,
    name: `${SCOPE}/${key}`,
    built: BUILT.includes(key),
    description: [process.platform, process.arch].concat(c ? [c] : []).join('/'),
  };
}

/**
 * The installed platform package for this machine: { name, version, dir, library, command }
 * (absolute paths), or null when it is not installed. Looked up from this package's folder,
 * then (for a package linked with `npm install <folder>`, which Node resolves from its real
 * path) from the program's side: its main module's folder and the working directory.
 */
function find() {
  const { name } = current();
  const from = [[__dirname], [require.main && require.main.path, process.cwd()].filter(Boolean)];
  for (const paths of from) {
    let pkgFile;
    try {
      pkgFile = require.resolve(`${name}/package.json`, { paths });
    } catch {
      continue;
    }
    const dir = path.dirname(pkgFile);
    let pkg;
    try {
      pkg = JSON.parse(fs.readFileSync(pkgFile, 'utf8'));
    } catch (e) {
      throw new Error(`llmsession: ${pkgFile} (the platform package) cannot be read: ${e.message}`);
    }
    const files = pkg.llmsession || {};
    if (typeof files.library !== 'string' || typeof files.command !== 'string') {
      throw new Error(`llmsession: ${pkgFile} is not a platform package of llmsession ` +
        '(no "llmsession": { "library", "command" } in it)');
    }
    return {
      name,
      version: pkg.version,
      dir,
      library: path.join(dir, files.library),
      command: path.join(dir, files.command),
    };
  }
  return null;
}

/** What to tell a user who has no platform package (one sentence, for an error message). */
function missing(version) {
  const p = current();
  if (!p.built) {
    return `no platform package of llmsession is built for ${p.description} (the one it would be is ` +
      `${p.name}); build the library from source (docs/install.md in the repository) and name it with ` +
      'LLMSESSION_LIB';
  }
  return `the platform package for ${p.description}, ${p.name}, is not installed: npm installs it with ` +
    'llmsession as an optional dependency, so it is missing when optional dependencies were left out ' +
    '(--omit=optional, --no-optional) or the lockfile was made on another platform; install it with ' +
    `\`npm install ${p.name}@${version}\` (or its tarball, ${p.name.slice(1).replace('/', '-')}-${version}.tgz, from ` +
    'the release)';
}

module.exports = { current, find, missing };
