'use strict';
// The observer hook (docs/observe.md): setObserver and the `observer` EventEmitter. The observer
// is process-wide; node --test runs each file in its own process, and every test here restores
// the silent default.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const lls = require('..');

const tick = () => new Promise((r) => setImmediate(r));

/** A log with one host event and a torn last line: opening it cuts one record. */
function tornLog(id) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-observe-'));
  const file = path.join(dir, 'torn.jsonl');
  const s = lls.Session.openFile(file, { id });
  s.append({ type: 'host/note', data: {} });
  s.close();
  fs.appendFileSync(file, '{"type":"host/no');
  return { dir, file };
}

function openClose(file) {
  lls.Session.openFile(file).close();
}

test('setObserver receives a cut tail as an observation, after the call', async (t) => {
  t.after(() => lls.setObserver(null));
  const { dir, file } = tornLog('node-observe-cut');
  const seen = [];
  lls.setObserver((o) => {
    if (o.sessionId === 'node-observe-cut') seen.push(o);
  }, { level: 'warn' });
  openClose(file);
  assert.equal(seen.length, 0, 'delivered asynchronously, not inside the library call');
  await tick();
  assert.equal(seen.length, 1);
  const o = seen[0];
  assert.equal(o.kind, 'log-cut');
  assert.equal(o.level, 'warn');
  assert.equal(o.records, 1);
  assert.equal(o.line, 3);
  assert.match(o.message, /cut 1 record/);
  assert.equal(fs.readFileSync(o.savedTo, 'utf8'), '{"type":"host/no');
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the level filters, null clears, and a bad level is refused', async (t) => {
  t.after(() => lls.setObserver(null));
  const { dir, file } = tornLog('node-observe-quiet');
  let calls = 0;
  lls.setObserver(() => calls++, { level: 'error' });
  openClose(file);
  await tick();
  assert.equal(calls, 0, 'a warning passed an error minimum');
  lls.setObserver(null);
  fs.appendFileSync(file, '{');
  openClose(file);
  await tick();
  assert.equal(calls, 0, 'a cleared observer was called');
  assert.throws(() => lls.setObserver(() => {}, { level: 'loud' }), TypeError);
  assert.throws(() => lls.setObserver('no'), TypeError);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('an observer may call into the library, and its exception becomes a warning', async (t) => {
  t.after(() => lls.setObserver(null));
  const { dir, file } = tornLog('node-observe-reentrant');
  const ids = [];
  lls.setObserver((o) => {
    // Delivered outside the library call: a library call here is fine.
    const s = lls.Session.memory({ id: `${o.sessionId}-copy` });
    ids.push(s.id);
    s.close();
    throw new Error('observer bug');
  }, { level: 'debug' });
  const warned = new Promise((resolve) => process.once('warning', resolve));
  openClose(file);
  const w = await warned;
  assert.match(w.message, /observer threw: observer bug/);
  assert.deepEqual(ids, ['node-observe-reentrant-copy']);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the observer EventEmitter attaches with its first listener and detaches with its last', async (t) => {
  t.after(() => lls.setObserver(null));
  const { dir, file } = tornLog('node-observe-emitter');
  const all = [];
  const warnings = [];
  const onAll = (o) => o.sessionId === 'node-observe-emitter' && all.push(o.kind);
  const onWarn = (o) => o.sessionId === 'node-observe-emitter' && warnings.push(o.kind);
  lls.observer.level = 'debug';
  lls.observer.on('observation', onAll);
  lls.observer.on('warn', onWarn);
  openClose(file);
  await tick();
  assert.deepEqual(all, ['log-cut']);
  assert.deepEqual(warnings, ['log-cut']);
  lls.observer.off('observation', onAll);
  lls.observer.off('warn', onWarn);
  // No listener left: the library is silent again.
  fs.appendFileSync(file, '{');
  openClose(file);
  await tick();
  assert.deepEqual(all, ['log-cut']);
  assert.throws(() => {
    lls.observer.level = 'loud';
  }, TypeError);
  lls.observer.level = 'info';
  fs.rmSync(dir, { recursive: true, force: true });
});

test('observations raised on a worker thread (an agent with callbacks) arrive in order', async (t) => {
  t.after(() => lls.setObserver(null));
  const session = lls.Session.memory({ id: 'node-observe-gate' });
  const agent = new lls.Agent(session, {
    config: { provider: 'test', model: 'm1' },
    policy: { contextWindow: 4000, threshold: 0.25, retainedTokens: 50, summaryMaxTokens: 200, retries: 0 },
  });
  // An async summariser: the agent's calls run on a koffi worker thread. Its summary is empty,
  // so the library rejects it and the automatic compaction fails.
  agent.setSummariser(async () => '');
  const kinds = [];
  lls.setObserver((o) => o.sessionId === 'node-observe-gate' && kinds.push(o), { level: 'info' });
  const big = (w) => `${w} `.repeat(800);
  agent.startTurn(big('alpha'));
  await agent.nextRequest();
  agent.recordResponse({ message: { role: 'assistant', content: [{ type: 'text', text: big('answer') }] } });
  agent.endTurn();
  agent.startTurn('next');
  await agent.nextRequest(); // built over the threshold
  await tick();
  const tail = kinds.slice(-4).map((o) => o.kind);
  assert.deepEqual(tail, ['compaction-triggered', 'summary-rejected', 'compaction-failed', 'over-threshold']);
  const over = kinds.at(-1);
  assert.equal(over.level, 'warn');
  assert.equal(over.threshold, 1000);
  assert.equal(over.contextWindow, 4000);
  assert.ok(over.tokens > 1000);
  agent.close();
  session.close();
});
