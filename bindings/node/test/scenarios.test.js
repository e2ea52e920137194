'use strict';
// Every scenario file (tests/scenarios/*.json and $LLMSESSION_SCENARIOS) through the JS runner,
// once with synchronous callbacks and once with async ones that await before answering.
const test = require('node:test');
const path = require('path');
const lls = require('..');
const { scenarioFiles, runFile } = require('./scenario-runner');

const files = scenarioFiles();

test('there are scenario files', () => {
  if (files.length === 0) throw new Error('no scenario files found');
});

for (const mode of ['sync', 'async']) {
  test(`scenarios (${mode} callbacks)`, async (t) => {
    for (const f of files) {
      await t.test(path.basename(f), async () => {
        await runFile(f, mode);
      });
    }
    if (lls.liveHandleCount() !== 0) throw new Error(`${lls.liveHandleCount()} live handles after the scenarios`);
    if (lls.registeredCallbackCount() !== 0) throw new Error(`${lls.registeredCallbackCount()} callbacks not released`);
  });
}
