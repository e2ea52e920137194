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
  const strings = lls.liveStringCount();
  let r = await w.agent.nextRequest();
  let bytes = r.bytes;
  r = null;
  await collect(() => false); // held through `bytes` alone: still lent
  assert.equal(lls.lentBufferCount(), before + 1);
  assert.equal(lls.liveStringCount(), strings + 1, 'the library string is still out');
  assert.equal(bytes.length > 64 * 1024, true);
  bytes = null;
  await collect(() => lls.lentBufferCount() === before);
  assert.equal(lls.lentBufferCount(), before, 'the FinalizationRegistry gave it back');
  assert.equal(lls.liveStringCount(), strings, 'and the library freed its memory');
  w.close();
});

// ---------------------------------------------------------------------------------------------
// The provider body: setRenderer, nextBody, lastEnvelope, recordBody, recordStream.

const fs = require('node:fs');
const path = require('node:path');
const STREAMS = path.join(__dirname, '..', '..', '..', 'tests', 'data', 'stream');

const PROVIDERS = [
  {
    renderer: 'openai',
    options: { promptCacheKey: 'tenant-7' },
    reply: (n) => JSON.stringify({
      id: `c${n}`, object: 'chat.completion', model: 'm-test',
      choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: 'Reading it.',
        tool_calls: [{ id: `call_${n}`, type: 'function', function: { name: 'read_file', arguments: '{"path":"a.txt"}' } }] } }],
      usage: { prompt_tokens: 50, completion_tokens: 10 },
    }),
  },
  {
    renderer: 'openai-responses',
    reply: (n) => JSON.stringify({
      id: `resp_${n}`, object: 'response', status: 'completed', model: 'm-test',
      output: [
        { type: 'message', id: `msg_${n}`, role: 'assistant', content: [{ type: 'output_text', text: 'Reading it.', annotations: [] }] },
        { type: 'function_call', id: `fc_${n}`, call_id: `call_${n}`, name: 'read_file', arguments: '{"path":"a.txt"}' },
      ],
      usage: { input_tokens: 50, output_tokens: 10 },
    }),
  },
  {
    renderer: 'anthropic',
    options: { cacheTtl: '1h' },
    reply: (n) => JSON.stringify({
      id: `msg_${n}`, type: 'message', role: 'assistant', model: 'm-test', stop_reason: 'tool_use',
      content: [{ type: 'text', text: 'Reading it.' }, { type: 'tool_use', id: `call_${n}`, name: 'read_file', input: { path: 'a.txt' } }],
      usage: { input_tokens: 50, output_tokens: 10 },
    }),
  },
  {
    renderer: 'gemini',
    reply: (n) => JSON.stringify({
      candidates: [{ finishReason: 'STOP', content: { role: 'model',
        parts: [{ text: 'Reading it.' }, { functionCall: { id: `call_${n}`, name: 'read_file', args: { path: 'a.txt' } } }] } }],
      usageMetadata: { promptTokenCount: 50, candidatesTokenCount: 10 }, modelVersion: 'm-test',
    }),
  },
];

function toolAgent(system = 'You are a careful coding agent.') {
  const session = lls.Session.memory({ id: 'hotpath-body' });
  const agent = new lls.Agent(session, {
    config: { provider: 'p', model: 'm-test', maxTokens: 256 },
    system,
    tools: [{ name: 'read_file', description: 'Read a file', parameters: { type: 'object', properties: { path: { type: 'string' } } } }],
    checkRequests: true,
  });
  return { session, agent, close: () => (agent.close(), session.close()) };
}

/** The body is the rendering of the logged envelope; the info is the JSON description's. */
function checkBody(agent, p, b) {
  const env = agent.lastEnvelope();
  assert.equal(sha256(env), b.info.digest);
  assert.equal(b.info.bytes, env.length);
  const fresh = lls.renderWithOptions(p.renderer, env, { prefixLen: b.info.prefixLen, ...(p.options || {}) });
  assert.equal(b.json, fresh, `${p.renderer}: the body is the rendered envelope`);
  assert.deepEqual(b.info, { ...agent.requestInfo(), purpose: 'conversation' });
}

test('nextBody is the rendered envelope for every renderer; recordBody records the raw reply', async () => {
  const before = lls.liveHandleCount();
  for (const p of PROVIDERS) {
    const w = toolAgent();
    w.agent.setRenderer(p.renderer, p.options);
    w.agent.startTurn('Read a.txt');
    const first = await w.agent.nextBody();
    checkBody(w.agent, p, first);
    assert.equal(first.info.step, 1);
    for (let n = 1; n <= 3; n++) {
      const r = w.agent.recordBody(Buffer.from(p.reply(n)));
      assert.equal(r.toolCallCount, 1);
      assert.deepEqual(r.toolCalls.map((c) => c.id), [`call_${n}`], p.renderer);
      assert.ok(r.seq > 0);
      assert.equal(r.finishReason, 'tool-calls', p.renderer);
      w.agent.recordToolResult({ callId: `call_${n}`, text: 'contents of a.txt' });
      const b = await w.agent.nextBody();
      checkBody(w.agent, p, b);
      assert.equal(b.info.step, n + 1);
      assert.ok(b.info.sharedMessages > 0);
      b.release();
    }
    assert.equal(JSON.stringify(w.session.history()).split('"read_file"').length - 1, 3, `${p.renderer}: three tool calls recorded`);
    // A string and a Uint8Array are taken as the body's bytes too.
    w.agent.recordBody(p.reply(9).replace(/Reading it\./, 'Done.').replace(/call_9/g, 'call_9'));
    w.close();
  }
  assert.equal(lls.liveHandleCount(), before);
});

test('a large body is a Buffer over library memory until release; then not readable through the binding', async () => {
  const w = toolAgent('Be exact. '.repeat(10000));
  const p = PROVIDERS[0];
  w.agent.setRenderer(p.renderer, p.options);
  w.agent.startTurn('Read a.txt');
  const lentBefore = lls.lentBufferCount();
  const b = await w.agent.nextBody();
  assert.ok(b.body.length > 64 * 1024);
  assert.equal(lls.lentBufferCount(), lentBefore + 1);
  const kept = Buffer.from(b.body);
  const env = w.agent.lastEnvelope();
  for (let n = 1; n <= 3; n++) {
    w.agent.recordBody(p.reply(n));
    w.agent.recordToolResult({ callId: `call_${n}`, text: 'x'.repeat(70000) });
    const later = await w.agent.nextBody();
    assert.ok(!later.body.equals(kept));
    later.release();
  }
  assert.ok(b.body.equals(kept), 'the lent bytes did not change');
  assert.equal(b.json, lls.renderWithOptions(p.renderer, env, p.options));
  assert.equal(b.released, false);
  b.release();
  assert.equal(b.released, true);
  assert.equal(lls.lentBufferCount(), lentBefore);
  assert.throws(() => b.body, { status: lls.Status.INVALID_HANDLE, message: /released/ });
  assert.equal(b.json, kept.toString(), 'the string decoded before the release stays');
  b.release();
  w.close();
});

test('a lent body nobody holds is freed after the garbage collector releases it', async () => {
  await collect(() => lls.lentBufferCount() === 0);
  assert.equal(lls.lentBufferCount(), 0);
  const w = toolAgent('Be exact. '.repeat(10000));
  w.agent.setRenderer('openai');
  w.agent.startTurn('hello');
  await w.agent.nextBody(); // dropped at once
  assert.equal(lls.lentBufferCount(), 1);
  await collect(() => lls.lentBufferCount() === 0);
  assert.equal(lls.lentBufferCount(), 0, 'given back with lls_string_free by the FinalizationRegistry');
  w.close();
});

test('recordStream records a streamed reply; a stream of another format changes nothing', async () => {
  const w = toolAgent();
  w.agent.setRenderer('openai');
  w.agent.startTurn('Lis café.txt');
  (await w.agent.nextBody()).release();
  const s = new lls.Stream('openai');
  s.feed(fs.readFileSync(path.join(STREAMS, 'openai-chat-tools.sse')));
  const r = w.agent.recordStream(s);
  assert.deepEqual(r.toolCalls.map((c) => [c.id, c.name]), [['call_Qa1', 'read_file'], ['call_Rb2', 'list_dir']]);
  assert.equal(r.finishReason, 'tool-calls');
  assert.match(JSON.stringify(w.session.history()), /"id":"call_Rb2"/);
  s.close();
  for (const id of ['call_Qa1', 'call_Rb2']) w.agent.recordToolResult({ callId: id, text: 'ok' });
  (await w.agent.nextBody()).release();
  const other = new lls.Stream('anthropic');
  other.feed(fs.readFileSync(path.join(STREAMS, 'anthropic-tools.sse')));
  const events = w.session.events().length;
  assert.throws(() => w.agent.recordStream(other), { status: lls.Status.INVALID_INPUT });
  assert.equal(w.session.events().length, events);
  other.close();
  const sse = fs.readFileSync(path.join(STREAMS, 'openai-chat-tools.sse'));
  const cut = new lls.Stream('openai');
  cut.feed(sse.subarray(0, sse.length >> 1));
  assert.throws(() => w.agent.recordStream(cut), (e) => e instanceof lls.LlmSessionError);
  const partial = w.agent.recordStream(cut, { partial: true });
  assert.ok(partial.seq > 0, 'the partial message is recorded');
  assert.equal(partial.finishReason, 'incomplete');
  cut.close();
  assert.throws(() => w.agent.recordStream(cut, { partial: true }), { status: lls.Status.INVALID_HANDLE });
  assert.throws(() => w.agent.recordStream({}), TypeError);
  w.close();
});

test('hot-path errors are clear and change nothing', async () => {
  const w = toolAgent();
  w.agent.startTurn('hello');
  await assert.rejects(w.agent.nextBody(), { status: lls.Status.OUT_OF_ORDER });
  assert.throws(() => w.agent.setRenderer('telegraph'), { status: lls.Status.INVALID_INPUT });
  assert.throws(() => w.agent.setRenderer('openai', { prefixLen: 1 }), (e) => e.status === lls.Status.INVALID_INPUT && e.detail.field === 'options.prefixLen');
  w.agent.setRenderer('openai');
  assert.throws(() => w.agent.recordBody(PROVIDERS[0].reply(1)), { status: lls.Status.OUT_OF_ORDER });
  assert.throws(() => w.agent.lastEnvelope(), { status: lls.Status.OUT_OF_ORDER });
  (await w.agent.nextBody()).release();
  const events = w.session.events().length;
  assert.throws(() => w.agent.recordBody('{"choices":'), { status: lls.Status.MALFORMED_JSON });
  assert.throws(() => w.agent.recordBody(PROVIDERS[2].reply(1)), { status: lls.Status.INVALID_INPUT });
  assert.throws(() => w.agent.recordBody(''), (e) => e instanceof lls.LlmSessionError);
  assert.throws(() => w.agent.recordBody(42), TypeError);
  assert.equal(w.session.events().length, events);
  const p = w.agent.nextBody();
  await assert.rejects(p, { status: lls.Status.OUT_OF_ORDER }, 'a request is already open');
  w.agent.recordBody(new Uint8Array(Buffer.from(PROVIDERS[0].reply(1))));
  w.close();
  await assert.rejects(w.agent.nextBody(), { status: lls.Status.INVALID_HANDLE });
});

test('nextBody with a pre-aborted signal is cancelled and ends the turn aborted', async () => {
  const w = toolAgent();
  w.agent.setRenderer('gemini');
  w.agent.startTurn('hello');
  await assert.rejects(w.agent.nextBody({ signal: AbortSignal.abort() }), { status: lls.Status.CANCELLED });
  assert.equal(w.session.events().at(-1).data.reason, 'aborted');
  w.close();
});

test('a main-thread nextBody refuses other calls until its Promise settled', async () => {
  const w = toolAgent();
  w.agent.setRenderer('openai');
  w.agent.startTurn('Read a.txt');
  const p = w.agent.nextBody();
  assert.throws(() => w.agent.recordBody(PROVIDERS[0].reply(1)), { status: lls.Status.OUT_OF_ORDER, message: /await it first/ });
  await assert.rejects(w.agent.nextBody(), { status: lls.Status.OUT_OF_ORDER, message: /await it first/ });
  (await p).release();
  w.agent.recordBody(PROVIDERS[0].reply(1));
  w.close();
});

test('recordBody and recordToolResult send the same bytes for a string, a Buffer and an object', async () => {
  // A string goes to the library as koffi's UTF-8 of it (a short one) or through a Buffer (a
  // long one): both must be what Buffer.from writes, a lone surrogate as U+FFFD included.
  const reply = (n, text) => `{"id":"c${n}","object":"chat.completion","model":"m-test","choices":[{"index":0,` +
    `"finish_reason":"tool_calls","message":{"role":"assistant","content":${JSON.stringify(text).replace('\\ud800', '\ud800')},` +
    `"tool_calls":[{"id":"call_${n}","type":"function","function":{"name":"read_file","arguments":"{}"}}]}}]}`;
  const texts = ['plain', 'café ✓ 🎉 \u0000 nul', 'lone \ud800 surrogate'];
  const long = 'y'.repeat(0x40000 + 10);
  const histories = [];
  for (const as of ['string', 'buffer']) {
    const w = toolAgent();
    w.agent.setRenderer('openai');
    w.agent.startTurn('Read a.txt');
    (await w.agent.nextBody()).release();
    for (const [i, t] of texts.entries()) {
      const r = reply(i + 1, t);
      w.agent.recordBody(as === 'string' ? r : Buffer.from(r));
      const result = { callId: `call_${i + 1}`, text: `${t} ${i === 2 ? long : ''}` };
      const text = JSON.stringify(result).replace('\\ud800', '\ud800');
      const sent = as === 'string' ? (i === 0 ? result : text) : Buffer.from(text);
      assert.equal(w.agent.recordToolResult(sent), 1);
      (await w.agent.nextBody()).release();
    }
    histories.push(JSON.stringify(w.session.history()));
    w.close();
  }
  assert.equal(histories[0], histories[1]);
  assert.match(histories[0], /café ✓ 🎉/);
  assert.match(histories[0], /lone \ufffd surrogate/);
  const w = toolAgent();
  assert.throws(() => w.agent.recordToolResult(undefined), TypeError);
  assert.throws(() => w.agent.recordToolResult(() => {}), TypeError);
  w.close();
});

test("a recorded response's finish reason is its own, not the one before it", async () => {
  const w = toolAgent();
  w.agent.setRenderer('openai');
  w.agent.startTurn('Read a.txt');
  (await w.agent.nextBody()).release();
  const first = w.agent.recordBody(PROVIDERS[0].reply(1));
  assert.equal(first.finishReason, 'tool-calls');
  w.agent.recordToolResult({ callId: 'call_1', text: 'ok' });
  (await w.agent.nextBody()).release();
  const none = JSON.parse(PROVIDERS[0].reply(2));
  delete none.choices[0].finish_reason;
  const second = w.agent.recordBody(JSON.stringify(none));
  assert.equal(second.toolCallCount, 1);
  assert.equal(second.seq > first.seq, true);
  assert.equal('finishReason' in second, false, 'no finish reason: none reported');
  w.close();
});
