'use strict';
// The binding's own behaviour: async callbacks that really wait (a timer, a local HTTP server),
// aborts, errors with status codes, exceptions from callbacks, handle and callback release.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const v8 = require('node:v8');
const vm = require('node:vm');
const lls = require('..');

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

const CONFIG = { provider: 'test', model: 'm1' };
const text = (t) => ({ role: 'user', content: [{ type: 'text', text: t }] });
const assistant = (t) => ({ role: 'assistant', content: [{ type: 'text', text: t }] });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A session and agent; `close()` frees both. */
function world(options = {}) {
  const session = lls.Session.memory({ id: 'binding-test' });
  const agent = new lls.Agent(session, { config: CONFIG, system: 'You help.', checkRequests: true, ...options });
  return {
    session,
    agent,
    close() {
      agent.close();
      session.close();
    },
  };
}

/** A turn that grows the history well past a small policy's threshold. */
async function bigTurn(agent, word) {
  agent.startTurn(`${word} `.repeat(400));
  await agent.nextRequest();
  agent.recordResponse({ message: assistant(`${word} answer `.repeat(400)) });
  agent.endTurn();
}

/** A local HTTP server on 127.0.0.1 that answers POST /summarise after a delay. */
async function summaryServer() {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      seen.push(JSON.parse(body));
      await sleep(Number(req.headers['x-delay'] || 20));
      if (res.destroyed) return;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ summary: `summary of ${seen.length} request(s) from the server` }));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/summarise`;
  return { url, seen, close: () => new Promise((r) => server.close(r)) };
}

test('the library is loaded and its ABI checked', () => {
  assert.equal(lls.abiVersion, lls.ABI_VERSION);
  assert.match(lls.version, /^\d+\.\d+\.\d+/);
  assert.ok(lls.libraryPath.length > 0);
});

test('status names come from the library, and errors carry them as kind', () => {
  assert.ok(lls.abiMinor() >= lls.ABI_MINOR);
  assert.equal(lls.statusName(lls.Status.OK), 'ok');
  assert.equal(lls.statusName(5), 'corrupt-log');
  assert.equal(lls.statusName(lls.Status.READ_ONLY), 'read-only');
  assert.equal(lls.statusName(102), 'invalid-handle');
  assert.equal(lls.statusName(lls.Status.OUT_OF_MEMORY), 'out-of-memory');
  assert.equal(lls.statusName(21), 'nonconforming');
  for (const unknown of [22, 99, 107, 999, -1]) assert.equal(lls.statusName(unknown), 'unknown');
  for (const bad of [1.5, '5', 2 ** 31, NaN, undefined]) assert.throws(() => lls.statusName(bad), TypeError);
  // An error without a detail takes its kind from the library too.
  assert.equal(new lls.LlmSessionError(lls.Status.CONFLICT, 'x').kind, 'conflict');

  // A failing library call: the kind is the detail's, and the library's name of the status.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-status-'));
  try {
    const junk = path.join(dir, 'junk.jsonl');
    fs.writeFileSync(junk, 'junk\n');
    assert.throws(() => lls.Session.openFile(junk), (e) => {
      assert.ok(e instanceof lls.LlmSessionError);
      assert.equal(e.status, lls.Status.CORRUPT_LOG);
      assert.equal(e.code, 'LLS_ERR_CORRUPT_LOG');
      assert.equal(e.kind, 'corrupt-log');
      assert.equal(e.detail.kind, lls.statusName(e.status));
      return true;
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  // An error the binding raises itself (a closed handle) is named the same way.
  const s = lls.Session.memory();
  s.close();
  assert.throws(() => s.history(), { status: lls.Status.INVALID_HANDLE, kind: 'invalid-handle' });
});

test('an async prefix listener that awaits a timer composes the prefix', async () => {
  const w = world();
  let calls = 0;
  w.agent.addPrefixListener(async ({ rest }) => {
    calls++;
    await sleep(30);
    return [text('project notes'), ...rest];
  });
  const seen = [];
  w.agent.addPreStepListener(async (info) => {
    await sleep(5);
    seen.push([info.turn, info.step, info.prefix.length]);
  });
  w.agent.startTurn('hello');
  const r = await w.agent.nextRequest();
  assert.equal(r.info.prefixLen, 1);
  assert.equal(r.envelope.messages[0].content[0].text, 'project notes');
  assert.equal(r.envelope.messages[1].content[0].text, 'hello');
  assert.deepEqual(w.agent.prefix(), [text('project notes')]);
  w.agent.recordResponse({ message: assistant('hi'), usage: { inputTokens: 10, outputTokens: 2 } });
  w.agent.endTurn();
  w.agent.startTurn('again');
  const r2 = await w.agent.nextRequest();
  assert.equal(r2.info.sharedMessages, 2, 'the previous request is a prefix of this one');
  assert.equal(calls, 1, 'the prefix is composed once per instance');
  assert.deepEqual(seen, [[1, 1, 1], [2, 1, 1]]);
  // The main thread stayed free while the listener waited: the event loop ran the timers.
  w.close();
});

test('the event loop keeps running while a listener waits', async () => {
  const w = world();
  let ticks = 0;
  const timer = setInterval(() => ticks++, 2);
  w.agent.addPrefixListener(async ({ rest }) => {
    await sleep(60);
    return rest;
  });
  w.agent.startTurn('hello');
  await w.agent.nextRequest();
  clearInterval(timer);
  assert.ok(ticks > 3, `the interval ran ${ticks} times during the call`);
  w.close();
});

test('an async summariser that awaits a real HTTP request on 127.0.0.1 compacts', async () => {
  const server = await summaryServer();
  const w = world();
  try {
    let input = null;
    w.agent.setSummariser(async (req, { signal }) => {
      input = req;
      const body = lls.render('openai', req.request, req.prefixLen);
      const res = await fetch(server.url, { method: 'POST', body, signal, headers: { 'x-delay': '30' } });
      const data = await res.json();
      return { text: data.summary, usage: { inputTokens: 100, outputTokens: 10 } };
    });
    await bigTurn(w.agent, 'alpha');
    await bigTurn(w.agent, 'beta');
    const out = await w.agent.compact();
    assert.equal(out.outcome, 'landed');
    assert.equal(server.seen.length, 1);
    assert.equal(input.request.purpose, 'compaction');
    // The server got the rendered summarisation request: OpenAI-shaped, ending with the instruction.
    const sent = server.seen[0];
    assert.ok(Array.isArray(sent.messages));
    assert.match(JSON.stringify(sent.messages[sent.messages.length - 1]), /compaction engine/);
    assert.match(JSON.stringify(w.session.history()), /summary of 1 request\(s\) from the server/);
    assert.deepEqual(w.session.verify().compactions, 1);
  } finally {
    w.close();
    await server.close();
  }
});

test('nextRequest gives the exact bytes as a Buffer, and decodes json and envelope on access', async () => {
  const w = world();
  w.agent.startTurn('héllo bytes');
  const r = await w.agent.nextRequest();
  assert.ok(Buffer.isBuffer(r.bytes));
  assert.equal(r.bytes.length, r.info.bytes);
  assert.equal(r.json, r.bytes.toString('utf8'));
  assert.equal(r.json, r.json, 'decoded once, then the same string');
  assert.equal(r.envelope, r.envelope, 'parsed once, then the same object');
  assert.equal(r.envelope.messages.at(-1).content[0].text, 'héllo bytes');
  const { bytes, json, envelope, info } = r; // destructuring still sees every field
  assert.equal(bytes, r.bytes);
  assert.equal(json, r.json);
  assert.equal(envelope, r.envelope);
  assert.equal(info.step, 1);
  // render takes the Buffer as the envelope's JSON text.
  assert.equal(lls.render('openai', r.bytes, r.info.prefixLen), lls.render('openai', r.json, r.info.prefixLen));
  w.close();
});

test('automatic compaction calls the async summariser from nextRequest', async () => {
  const server = await summaryServer();
  const w = world({ policy: { contextWindow: 4000, threshold: 0.25, retainedTokens: 50, summaryMaxTokens: 200 } });
  try {
    w.agent.setSummariser(async (req, { signal }) => {
      const res = await fetch(server.url, { method: 'POST', body: JSON.stringify(req.request), signal });
      return (await res.json()).summary;
    });
    await bigTurn(w.agent, 'alpha');
    w.agent.startTurn('next question');
    const r = await w.agent.nextRequest();
    assert.equal(server.seen.length, 1);
    assert.match(r.json, /from the server/);
    const ends = w.session.events().filter((e) => e.type === 'compaction/end');
    assert.equal(ends.length, 1);
    assert.equal(ends[0].data.outcome, 'landed');
  } finally {
    w.close();
    await server.close();
  }
});

test('aborting during composition fails nextRequest with CANCELLED and ends the turn aborted', async () => {
  const w = world();
  const controller = new AbortController();
  let listenerSignal = null;
  w.agent.addPrefixListener(async ({ rest }, { signal }) => {
    listenerSignal = signal;
    setTimeout(() => controller.abort(), 10);
    await sleep(200);
    return rest;
  });
  w.agent.startTurn('hello');
  await assert.rejects(w.agent.nextRequest({ signal: controller.signal }), (e) => {
    assert.ok(e instanceof lls.LlmSessionError);
    assert.equal(e.status, lls.Status.CANCELLED);
    assert.equal(e.kind, 'cancelled');
    return true;
  });
  assert.equal(listenerSignal.aborted, true, 'the listener saw the abort');
  const last = w.session.events().at(-1);
  assert.equal(last.type, 'turn/end');
  assert.equal(last.data.reason, 'aborted');
  // The abandoned reply is answered when the listener's Promise settles: nothing leaks.
  await sleep(250);
  w.close();
  assert.equal(lls.liveHandleCount(), 0);
});

test('an already aborted signal cancels before any callback runs', async () => {
  const w = world();
  w.agent.startTurn('hello');
  await assert.rejects(w.agent.nextRequest({ signal: AbortSignal.abort() }), { status: lls.Status.CANCELLED });
  w.close();
});

test('aborting during summarisation cancels the compaction and the HTTP request', async () => {
  const server = await summaryServer();
  const w = world();
  try {
    const controller = new AbortController();
    let fetchError = null;
    w.agent.setSummariser(async (req, { signal }) => {
      setTimeout(() => controller.abort(), 20);
      try {
        const res = await fetch(server.url, { method: 'POST', body: '{}', signal, headers: { 'x-delay': '2000' } });
        return (await res.json()).summary;
      } catch (e) {
        fetchError = e;
        throw e;
      }
    });
    await bigTurn(w.agent, 'alpha');
    await bigTurn(w.agent, 'beta');
    const before = JSON.stringify(w.session.history());
    await assert.rejects(w.agent.compact({ signal: controller.signal }), (e) => {
      assert.ok(e instanceof lls.LlmSessionError, `got ${e}`);
      assert.equal(e.status, lls.Status.CANCELLED);
      return true;
    });
    await sleep(20);
    assert.equal(fetchError && fetchError.name, 'AbortError');
    assert.equal(JSON.stringify(w.session.history()), before, 'the surface is untouched');
    const end = w.session.events().filter((e) => e.type === 'compaction/end').at(-1);
    assert.equal(end.data.outcome, 'cancelled');
  } finally {
    w.close();
    await server.close();
  }
  assert.equal(lls.liveHandleCount(), 0);
});

test('errors carry the status code, message and detail', async () => {
  const w = world();
  assert.throws(() => w.agent.endTurn(), (e) => {
    assert.ok(e instanceof lls.LlmSessionError);
    assert.equal(e.status, lls.Status.OUT_OF_ORDER);
    assert.equal(e.kind, 'out-of-order');
    assert.equal(e.detail.status, 3);
    return true;
  });
  assert.throws(() => w.agent.startTurn({ role: 'assistant', content: [] }), { status: lls.Status.INVALID_INPUT });
  assert.throws(() => w.agent.setPolicy({ contextWindow: 0 }), { status: lls.Status.INVALID_POLICY });
  assert.throws(() => new lls.Agent(w.session, { config: CONFIG }), { status: lls.Status.BUSY, kind: 'busy' });
  assert.throws(() => lls.Session.memory({ durability: 'sometimes' }), { status: lls.Status.INVALID_INPUT });
  assert.throws(() => lls.render('openai', '{"broken"', 0), (e) => e.status === lls.Status.MALFORMED_JSON && e.detail.line === 1);
  assert.throws(() => lls.render('nope', { provider: 'p', model: 'm', messages: [], purpose: 'conversation' }), {
    status: lls.Status.INVALID_INPUT,
  });
  await assert.rejects(w.agent.compact(), { status: lls.Status.NOTHING_TO_COMPACT });
  w.close();
  assert.throws(() => w.agent.stats(), { status: lls.Status.INVALID_HANDLE });
});

test('a listener that fails on purpose gives LISTENER with its message; the turn ends error', async () => {
  const w = world();
  w.agent.addPrefixListener(async () => {
    await sleep(1);
    throw new lls.CallbackError('no workspace');
  });
  w.agent.startTurn('hello');
  await assert.rejects(w.agent.nextRequest(), (e) => {
    assert.ok(e instanceof lls.LlmSessionError);
    assert.equal(e.status, lls.Status.LISTENER);
    assert.match(e.message, /no workspace/);
    return true;
  });
  assert.equal(w.session.events().at(-1).data.reason, 'error');
  w.close();
});

test('a JS exception in a callback rejects with the original error object', async () => {
  for (const asyncListener of [false, true]) {
    const w = world();
    const original = new TypeError('listener bug');
    w.agent.addPrefixListener(asyncListener ? async () => { await sleep(1); throw original; } : () => { throw original; });
    w.agent.startTurn('hello');
    await assert.rejects(w.agent.nextRequest(), (e) => {
      assert.equal(e, original, 'the very error object');
      return true;
    });
    w.close();
  }
});

test('a summariser exception during automatic compaction is not a silent success', async () => {
  const w = world({ policy: { contextWindow: 4000, threshold: 0.25, retainedTokens: 50, summaryMaxTokens: 200, retries: 0 } });
  const original = new RangeError('summariser bug');
  w.agent.setSummariser(async () => {
    await sleep(1);
    throw original;
  });
  await bigTurn(w.agent, 'alpha');
  w.agent.startTurn('next');
  await assert.rejects(w.agent.nextRequest(), (e) => e === original);
  // The library went ahead (a failed automatic compaction is logged); the host was told.
  const end = w.session.events().filter((e) => e.type === 'compaction/end').at(-1);
  assert.equal(end.data.outcome, 'failed');
  w.close();
});

test('a token counter may be async; measure reports it', async () => {
  const w = world();
  let calls = 0;
  w.agent.setTokenCounter(async (item) => {
    calls++;
    await sleep(1);
    return item.kind === 'message' ? 7 : { tokens: 3 };
  });
  w.agent.startTurn('hello');
  const m = await w.agent.measure();
  assert.equal(m.counter, 'host');
  assert.ok(m.total > 0);
  assert.ok(calls > 0);
  w.close();
});

test('sync calls are refused while an async call runs on the agent', async () => {
  const w = world();
  let release;
  w.agent.addPrefixListener(({ rest }) => new Promise((r) => (release = () => r(rest))));
  w.agent.startTurn('hello');
  const p = w.agent.nextRequest();
  await sleep(10);
  assert.throws(() => w.agent.stats(), { status: lls.Status.OUT_OF_ORDER });
  await assert.rejects(w.agent.compact(), { status: lls.Status.OUT_OF_ORDER });
  release();
  await p;
  w.close();
});

test('dispose from inside a listener fails the request with DISPOSED', async () => {
  const w = world();
  w.agent.addPrefixListener(({ rest }) => {
    w.agent.dispose();
    return rest;
  });
  w.agent.startTurn('hello');
  await assert.rejects(w.agent.nextRequest(), { status: lls.Status.DISPOSED });
  assert.equal(w.session.events().at(-1).data.reason, 'disposed');
  assert.equal(lls.registeredCallbackCount(), 0, 'disposal released the listener');
  w.close();
});

test('invokeCallback runs a trampoline through the library (sync, async, failing)', async () => {
  assert.deepEqual(await lls.invokeCallback((x) => ({ got: x }), { a: 1 }), { got: { a: 1 } });
  assert.deepEqual(await lls.invokeCallback(async (x) => { await sleep(5); return [x.n * 2]; }, { n: 21 }), [42]);
  await assert.rejects(lls.invokeCallback(() => { throw new lls.CallbackError('nope'); }, {}), (e) => {
    assert.equal(e.status, lls.Status.LISTENER);
    assert.equal(e.detail.callback, 'failed');
    return true;
  });
  const c = new AbortController();
  setTimeout(() => c.abort(), 5);
  await assert.rejects(lls.invokeCallback(() => sleep(100), {}, { signal: c.signal }), { status: lls.Status.CANCELLED });
  await sleep(120);
  assert.equal(lls.liveHandleCount(), 0);
  assert.equal(lls.registeredCallbackCount(), 0);
});

test('no leaked handles or callbacks after many sessions (explicit close)', async () => {
  for (let i = 0; i < 200; i++) {
    const w = world();
    w.agent.addPrefixListener(async ({ rest }) => [text(`notes ${i}`), ...rest]);
    w.agent.addPreStepListener(() => null);
    w.agent.setSummariser(() => 'summary');
    w.agent.startTurn(`question ${i}`);
    await w.agent.nextRequest();
    w.agent.recordResponse({ message: assistant('answer') });
    w.agent.endTurn();
    if (i % 10 === 0) {
      const forked = w.session.fork();
      forked.close();
    }
    w.close();
  }
  assert.equal(lls.liveHandleCount(), 0);
  assert.equal(lls.registeredCallbackCount(), 0);
});

test('the FinalizationRegistry frees sessions and agents that were never closed', async () => {
  (function make() {
    for (let i = 0; i < 50; i++) {
      const session = lls.Session.memory();
      const agent = new lls.Agent(session, { config: CONFIG });
      agent.addPrefixListener(({ rest }) => rest);
      agent.startTurn('hello');
    }
  })();
  assert.ok(lls.liveHandleCount() >= 100);
  for (let i = 0; i < 20 && (lls.liveHandleCount() > 0 || lls.registeredCallbackCount() > 0); i++) {
    gc();
    await sleep(10);
  }
  assert.equal(lls.liveHandleCount(), 0);
  assert.equal(lls.registeredCallbackCount(), 0);
});

test('close is idempotent and a closed handle is refused', () => {
  const w = world();
  w.close();
  w.close();
  assert.throws(() => w.session.history(), { status: lls.Status.INVALID_HANDLE });
  assert.equal(lls.liveHandleCount(), 0);
});

test('dispose and close from a timer while nextRequest waits on a listener', async () => {
  const w = world();
  let listenerSignal = null;
  w.agent.addPrefixListener(async ({ rest }, { signal }) => {
    listenerSignal = signal;
    await sleep(100);
    return rest;
  });
  w.agent.startTurn('hello');
  const p = w.agent.nextRequest();
  await sleep(10);
  const disposed = w.agent.dispose();
  await assert.rejects(p, { status: lls.Status.DISPOSED });
  await disposed;
  assert.equal(w.session.events().at(-1).data.reason, 'disposed');
  await assert.rejects(w.agent.nextRequest(), { status: lls.Status.DISPOSED });
  w.agent.close();
  assert.equal(listenerSignal.aborted, true);
  await sleep(120);
  w.session.close();
  assert.equal(lls.liveHandleCount(), 0);
  assert.equal(lls.registeredCallbackCount(), 0);
});

test('parseResponse output goes straight into recordResponse; usage and overflow helpers', async () => {
  const w = world();
  try {
    w.agent.startTurn('hi');
    await w.agent.nextRequest();
    const body = JSON.stringify({
      model: 'smol',
      choices: [{ finish_reason: 'stop', message: { role: 'assistant', content: 'Hello!' } }],
      usage: { prompt_tokens: 30, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 20 } },
    });
    const parsed = lls.parseResponse('openai', body);
    assert.equal(parsed.finishReason, 'stop');
    assert.deepEqual(parsed.usage, { inputTokens: 10, outputTokens: 3, cacheReadTokens: 20 });
    assert.ok(w.agent.recordResponse(parsed) > 0);
    w.agent.endTurn();
    assert.equal(w.session.verify().requests, 1);
    assert.deepEqual(lls.parseResponse('openai', Buffer.from(body)).message, parsed.message);

    assert.deepEqual(lls.usageFromProvider('anthropic', { input_tokens: 5, output_tokens: 2, cache_read_input_tokens: 9 }),
      { inputTokens: 5, outputTokens: 2, cacheReadTokens: 9 });
    assert.equal(lls.isContextOverflow(400, '{"error":{"code":"context_length_exceeded"}}'), true);
    assert.equal(lls.isContextOverflow(429, 'too many tokens per minute'), false);

    assert.throws(() => lls.parseResponse('cohere', body), (e) => e.status === lls.Status.INVALID_INPUT && /cohere/.test(e.message));
    assert.throws(() => lls.parseResponse('openai', '{"choices":'), (e) => e.status === lls.Status.MALFORMED_JSON);
    assert.throws(() => lls.usageFromProvider('openai', { completion_tokens: 1 }), /usage\.prompt_tokens/);
    assert.throws(() => lls.isContextOverflow(-1, ''), TypeError);
  } finally {
    w.close();
  }
});
