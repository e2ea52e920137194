'use strict';
// Every scenario file (tests/scenarios/*.json and $LLMSESSION_SCENARIOS) through the JS driver,
// once with synchronous callbacks and once with async ones that await before answering; each
// run's transcript is compared with the scenario's golden file (test/golden.js).
const test = require('node:test');
const path = require('path');
const lls = require('..');
const fs = require('fs');
const golden = require('./golden');
const { runFile } = require('./scenario-runner');

const REPO = path.resolve(__dirname, '..', '..', '..');

function scenarioFiles() {
  if (process.env.LLMSESSION_SCENARIO_FILE) return [path.resolve(process.env.LLMSESSION_SCENARIO_FILE)];
  const dirs = [path.join(REPO, 'tests', 'scenarios')];
  if (process.env.LLMSESSION_SCENARIOS) dirs.push(path.resolve(process.env.LLMSESSION_SCENARIOS));
  return dirs.flatMap((d) => fs.readdirSync(d).filter((f) => f.endsWith('.json')).sort().map((f) => path.join(d, f)));
}

const files = scenarioFiles();

test('there are scenario files', () => {
  if (files.length === 0) throw new Error('no scenario files found');
});

test('the golden comparison names the first differing pointer, and masks what the Rust runner masks', () => {
  const want = golden.expand(JSON.parse(fs.readFileSync(golden.goldenPath(files[0]), 'utf8')));
  const got = JSON.parse(JSON.stringify(want));
  if (golden.firstDifference(want, got, 'sync') !== null) throw new Error('a copy differs');
  got.final.events[0].seq += 1;
  got.ops[0].events += 1;
  const d = golden.firstDifference(want, got, 'sync');
  if (!d || d.pointer !== '/final/events/0/seq' || d.got !== want.final.events[0].seq + 1) throw new Error(JSON.stringify(d));
  const m = golden.maskStrings({ a: ['/x/d/load-1.jsonl.cut-1712345678901'], b: 'summariser callback: host callback failed: no' }, '/x/d');
  if (JSON.stringify(m) !== JSON.stringify({ a: ['<dir>/load-1.jsonl.cut-<time>'], b: 'no' })) throw new Error(JSON.stringify(m));
  const r = golden.maskedRecord({ seq: 1, time: 't', chain: 'c', data: { time: 'kept' } });
  if (r.time !== '<time>' || r.chain !== '<chain>' || r.data.time !== 'kept') throw new Error(JSON.stringify(r));
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
