'use strict';
// The hot path of the binding (docs/node.md, "The provider body"): operations of an agent without
// JS callbacks run on the main thread; large outputs are Buffers over the library's memory,
// given back by the garbage collector or by release().
const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const v8 = require('node:v8');
const vm = require('node:vm');
const lls = require('..');

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

const CONFIG = { provider: 'openai', model: 'm1' };
const sha256 = (b) => `sha256:${crypto.createHash('sha256').update(b).digest('hex')}`;
const assistant = (t) => ({ role: 'assistant', content: [{ type: 'text', text: t }] });

/** An agent whose requests are large (a 100 KB system prompt): the library lends them. */
function world(system = 'Be exact. '.repeat(10000)) {
  const session = lls.Session.memory({ id: 'hotpath-test' });
  const agent = new lls.Agent(session, { config: CONFIG, system });
  return {
    session,
    agent,
    close() {
      agent.close();
      session.close();
    },
  };
}

/** Lets the collector release what is unreachable and the FinalizationRegistry run. */
async function collect(until) {
  for (let i = 0; i < 50 && !until(); i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
}

test('without JS callbacks the call runs on the main thread: the step is logged before the Promise settles', async () => {
  const w = world();
  w.agent.startTurn('hello');
  const p = w.agent.nextRequest();
  // No await yet: a worker thread could not have reported back, the main thread did the call.
  assert.equal(w.session.events().at(-1).type, 'step/start');
  const r = await p;
  assert.equal(r.info.step, 1);
  w.close();
});

test('with a JS callback, or {worker: true}, the call goes to a worker and gives the same request', async () => {
  const a = world();
  const b = world();
  const c = world();
  let pre = 0;
  b.agent.addPreStepListener(() => {
    pre++;
  });
  for (const w of [a, b, c]) w.agent.startTurn('hello');
  const ra = await a.agent.nextRequest();
  const pb = b.agent.nextRequest();
  // The worker waits for the main thread to run the listener, which it cannot before this test
  // yields: the step is not written yet.
  assert.equal(b.session.events().at(-1).type, 'user/message');
  const rb = await pb;
  const rc = await c.agent.nextRequest({ worker: true });
  assert.equal(pre, 1, 'the listener ran (on the main thread, called from the worker)');
  assert.equal(ra.info.digest, rb.info.digest);
  assert.equal(ra.info.digest, rc.info.digest);
  for (const w of [a, b, c]) w.close();
});

test('a pre-aborted signal cancels a main-thread call too, and the turn ends aborted', async () => {
  const w = world();
  w.agent.startTurn('hello');
  await assert.rejects(w.agent.nextRequest({ signal: AbortSignal.abort() }), { status: lls.Status.CANCELLED });
  const last = w.session.events().at(-1);
  assert.equal(last.type, 'turn/end');
  assert.equal(last.data.reason, 'aborted');
  w.close();
  assert.equal(lls.liveHandleCount(), 0, 'no cancel token left behind');
});

test('a main-thread call refuses a second operation until it settled, like a worker call', async () => {
  const w = world();
  w.agent.startTurn('hello');
  const p = w.agent.nextRequest();
  assert.throws(() => w.agent.recordResponse({ message: assistant('hi') }), { status: lls.Status.OUT_OF_ORDER });
  await p;
  w.agent.recordResponse({ message: assistant('hi') });
  w.close();
});

test('a large envelope is lent: valid until release, then not readable through the binding', async () => {
  const w = world();
  const before = lls.lentBufferCount();
  w.agent.startTurn('first');
  const r = await w.agent.nextRequest();
  assert.ok(r.bytes.length > 64 * 1024);
  assert.equal(lls.lentBufferCount(), before + 1);
  const copy = Buffer.from(r.bytes);
  // Other requests come and go; the lent bytes stay the logged bytes.
  w.agent.recordResponse({ message: assistant('one') });
  w.agent.endTurn();
  for (let i = 0; i < 3; i++) {
    w.agent.startTurn(`turn ${i}`);
    (await w.agent.nextRequest()).release();
    w.agent.recordResponse({ message: assistant('more') });
    w.agent.endTurn();
  }
  assert.ok(r.bytes.equals(copy));
  assert.equal(sha256(r.bytes), r.info.digest);
  assert.equal(r.json.length > 0, true);
  r.release();
  assert.equal(lls.lentBufferCount(), before, 'given back to the library');
  assert.throws(() => r.bytes, { status: lls.Status.INVALID_HANDLE, message: /released/ });
  assert.ok(r.json.length > 0, 'a string decoded before the release is JS memory and stays');
  r.release(); // a second release does nothing
  assert.equal(lls.lentBufferCount(), before);
  w.close();
});

test('a small output is copied: release only makes it unreadable', async () => {
  const w = world('Short.');
  const before = lls.lentBufferCount();
  w.agent.startTurn('hello');
  const r = await w.agent.nextRequest();
  assert.ok(r.bytes.length < 64 * 1024);
  assert.equal(lls.lentBufferCount(), before, 'nothing lent');
  assert.equal(sha256(r.bytes), r.info.digest);
  r.release();
  assert.throws(() => r.json, { status: lls.Status.INVALID_HANDLE });
  w.close();
});

test('a lent envelope nobody holds is given back when the garbage collector releases it', async () => {
  await collect(() => lls.lentBufferCount() === 0); // what the tests above left to the collector
  const w = world();
  const before = lls.lentBufferCount();
  assert.equal(before, 0);
  w.agent.startTurn('first');
  let r = await w.agent.nextRequest();
  let bytes = r.bytes;
  r = null;
  await collect(() => false); // held through `bytes` alone: still lent
  assert.equal(lls.lentBufferCount(), before + 1);
  assert.equal(bytes.length > 64 * 1024, true);
  bytes = null;
  await collect(() => lls.lentBufferCount() === before);
  assert.equal(lls.lentBufferCount(), before, 'the FinalizationRegistry gave it back');
  w.close();
});
