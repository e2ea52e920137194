#!/usr/bin/env node
'use strict';
// `llmsession` for an npm project (`npx llmsession verify LOG`): runs the inspector command
// the platform package ships (platform.js) with this process's arguments and standard streams,
// and exits as it did.
const { spawnSync } = require('child_process');
const os = require('os');
const platform = require('../platform');

function main() {
  let pkg;
  try {
    pkg = platform.find();
  } catch (e) {
    return fail(e.message);
  }
  if (!pkg) return fail(`llmsession: the llmsession command comes with the platform package: ${platform.missing(require('../package.json').version)}`);
  const r = spawnSync(pkg.command, process.argv.slice(2), { stdio: 'inherit' });
  if (r.error) return fail(`llmsession: cannot run ${pkg.command} (from ${pkg.name}): ${r.error.message}`);
  if (r.signal) {
    // Die of the same signal, so that the caller sees what the command saw.
    process.kill(process.pid, r.signal);
    process.exit(128 + (os.constants.signals[r.signal] || 0));
  }
  process.exit(r.status);
}

function fail(message) {
  process.stderr.write(message + '\n');
  process.exit(1);
}

main();
