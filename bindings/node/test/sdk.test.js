'use strict';
// With the official SDKs (docs/node.md, "With the official SDKs"): tool calls as data, plain
// objects where a body goes, a body handed to an SDK method as it is, and the SDKs' raw streams
// fed to the accumulator. The SDKs (`openai`, `@anthropic-ai/sdk`, pinned devDependencies) talk
// HTTP to a local server that answers with the recorded provider bytes of tests/data/stream.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { OpenAI } = require('openai');
const { Anthropic } = require('@anthropic-ai/sdk');
const lls = require('..');

const DATA = path.join(__dirname, '..', '..', '..', 'tests', 'data', 'stream');
const read = (name) => fs.readFileSync(path.join(DATA, name));
const READ_FILE = {
  name: 'read_file',
  description: 'Read a file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
};
// Per renderer: the agent's config, the recorded body, its stream, and the calls it makes.
const PROVIDERS = {
  openai: [{ provider: 'llama.cpp', model: 'smollm2', cache_prompt: true }, 'openai-chat-tools.json', 'openai-chat-tools.sse',
    [['call_Qa1', 'read_file', { path: 'café.txt', lines: 20 }], ['call_Rb2', 'list_dir', { dir: 'ü/' }]]],
  anthropic: [{ provider: 'anthropic', model: 'claude-sonnet-4-5', maxTokens: 256 }, 'anthropic-tools.json', 'anthropic-tools.sse',
    [['toolu_01AbC', 'read_file', { path: 'café.txt', lines: 20 }]]],
  gemini: [{ provider: 'gemini', model: 'gemini-2.5-flash' }, 'gemini-tools.json', 'gemini-tools.sse', null],
  'openai-responses': [{ provider: 'openai', model: 'gpt-5' }, 'openai-responses-tools.json', 'openai-responses-tools.sse', null],
};

function world(renderer) {
  const session = lls.Session.memory();
  const agent = new lls.Agent(session, { config: PROVIDERS[renderer][0], system: 'Be brief.', tools: [READ_FILE] });
  agent.setRenderer(renderer);
  return {
    session,
    agent,
    close() {
      agent.close();
      session.close();
    },
  };
}

const callsOf = (calls) => calls.map((c) => [c.id, c.name, c.arguments]);

/** A local HTTP server answering every POST with `answer.body`; keeps what each request sent. */
async function server() {
  const s = { requests: [], answer: { body: Buffer.from('{}'), type: 'application/json' } };
  s.http = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(parts);
      s.requests.push([req.url, raw.length ? JSON.parse(raw) : null]);
      res.writeHead(200, { 'content-type': s.answer.type, 'content-length': s.answer.body.length });
      res.end(s.answer.body);
    });
  });
  await new Promise((r) => s.http.listen(0, '127.0.0.1', r));
  s.url = `http://127.0.0.1:${s.http.address().port}`;
  s.last = () => s.requests[s.requests.length - 1][1];
  s.close = () => new Promise((r) => s.http.close(r));
  return s;
}

// -- 1. tool calls as data --------------------------------------------------------------------

for (const renderer of Object.keys(PROVIDERS)) {
  for (const streamed of [false, true]) {
    test(`${renderer}${streamed ? ' streamed' : ''}: the recorded response gives its tool calls as data`, async () => {
      const [, body, stream, want] = PROVIDERS[renderer];
      let expected;
      if (streamed) {
        const s = new lls.Stream(renderer);
        s.feed(read(stream));
        expected = lls.toolCalls(s.finish());
        s.close();
      } else {
        expected = lls.toolCalls(lls.parseResponse(renderer, read(body)));
      }
      assert.ok(expected.length > 0, 'every fixture makes tool calls');
      if (want) assert.deepEqual(callsOf(expected), want);
      const w = world(renderer);
      w.agent.startTurn('read café.txt');
      (await w.agent.nextBody()).release();
      let rec;
      if (streamed) {
        const s = new lls.Stream(renderer);
        const raw = read(stream);
        for (let at = 0; at < raw.length; at += 5) s.feed(raw.subarray(at, at + 5));
        rec = w.agent.recordStream(s);
        s.close();
      } else {
        rec = w.agent.recordBody(read(body));
      }
      assert.ok(rec instanceof lls.Recorded);
      assert.equal(rec.finishReason, 'tool-calls');
      assert.equal(rec.toolCallCount, expected.length);
      assert.deepEqual(rec.toolCalls, expected);
      assert.equal(rec.toolCalls, rec.toolCalls, 'read once, on first access');
      for (const c of rec.toolCalls) w.agent.recordToolResult({ callId: c.id, text: 'contents' });
      // The ids answered are the ones the log holds: the next request carries the results.
      const env = (await w.agent.nextRequest()).envelope;
      const results = env.messages.flatMap((m) => m.content).filter((b) => b.type === 'tool-result').map((b) => b.toolCallId);
      assert.deepEqual(results, expected.map((c) => c.id));
      w.close();
    });
  }
}

test('a reply without calls reads nothing; calls are read while the session is open', async () => {
  const w = world('openai');
  w.agent.startTurn('hi');
  (await w.agent.nextBody()).release();
  const plain = w.agent.recordBody({ choices: [{ message: { role: 'assistant', content: 'Hello' }, finish_reason: 'stop' }] });
  assert.deepEqual(plain.toolCalls, []);
  w.agent.endTurn();
  w.agent.startTurn('read it');
  (await w.agent.nextBody()).release();
  const late = w.agent.recordBody(read('openai-chat-tools.json'));
  w.close();
  assert.equal(late.toolCallCount, 2);
  assert.throws(() => late.toolCalls, { status: lls.Status.INVALID_HANDLE });
  assert.deepEqual(plain.toolCalls, []);
});

test('toolCalls reads messages, responses, events and arrays; arguments that are not JSON throw when read', () => {
  const call = (id, args) => ({ type: 'tool-call', id, name: 'f', arguments: args });
  const msg = { role: 'assistant', content: [{ type: 'text', text: 'x' }, call('a', '{"n": 1}'), call('b', ''), call('c', '{nope')] };
  const calls = lls.toolCalls(msg);
  assert.deepEqual(calls.map((c) => c.id), ['a', 'b', 'c']);
  assert.ok(calls[0] instanceof lls.ToolCall);
  assert.deepEqual(calls[0].arguments, { n: 1 });
  assert.deepEqual(calls[1].arguments, {}, 'no arguments: {}');
  assert.throws(() => calls[2].arguments, { name: 'SyntaxError', message: /^tool call c \(f\): its arguments are not JSON/ });
  assert.equal(calls[2].argumentsJson, '{nope');
  assert.deepEqual(lls.toolCalls({ message: msg }), calls);
  assert.deepEqual(lls.toolCalls(JSON.stringify([{ message: msg }])), calls);
  assert.deepEqual(lls.toolCalls(Buffer.from(JSON.stringify(msg))), calls);
  assert.deepEqual(lls.toolCalls({ role: 'user', content: [{ type: 'text', text: 'hi' }] }), []);
  assert.throws(() => lls.toolCalls({ role: 'assistant', content: [{ type: 'tool-call', id: 'x' }] }), { status: lls.Status.INVALID_INPUT });
  assert.throws(() => lls.toolCalls('{not json'), { status: lls.Status.MALFORMED_JSON });
});

// -- 2. a plain object where a body goes --------------------------------------------------------

test('recordBody takes a plain object (what the SDKs return) as it takes the bytes', async () => {
  const raw = read('openai-chat-tools.json');
  const seen = [];
  for (const body of [raw, raw.toString(), new Uint8Array(raw), JSON.parse(raw)]) {
    const w = world('openai');
    w.agent.startTurn('read café.txt');
    (await w.agent.nextBody()).release();
    const rec = w.agent.recordBody(body);
    seen.push([w.session.events(rec.seq, rec.seq + 1)[0].data, callsOf(rec.toolCalls), rec.finishReason]);
    w.close();
  }
  for (const s of seen) assert.deepEqual(s, seen[0]);
  const w = world('openai');
  w.agent.startTurn('hi');
  (await w.agent.nextBody()).release();
  assert.throws(() => w.agent.recordBody(42), TypeError);
  assert.throws(() => w.agent.recordBody({ choices: [] }), { status: lls.Status.INVALID_INPUT });
  w.close();
});

// -- 3. a body handed to an SDK method ---------------------------------------------------------

test('openai: the parsed body goes to create() as it is, the server fields included; the reply comes back whole', async () => {
  const srv = await server();
  const client = new OpenAI({ apiKey: 'local', baseURL: `${srv.url}/v1`, maxRetries: 0 });
  const w = world('openai');
  try {
    w.agent.startTurn('read café.txt');
    const body = await w.agent.nextBody();
    srv.answer = { body: read('openai-chat-tools.json'), type: 'application/json' };
    const completion = await client.chat.completions.create(JSON.parse(body.json));
    assert.deepEqual(srv.last(), JSON.parse(body.json), 'the SDK sent what the body holds, cache_prompt included');
    assert.equal(srv.last().cache_prompt, true);
    const rec = w.agent.recordBody(completion);
    assert.deepEqual(callsOf(rec.toolCalls), PROVIDERS.openai[3]);
    for (const c of rec.toolCalls) w.agent.recordToolResult({ callId: c.id, text: 'x' });
    // The raw reply (asResponse) records the provider's own bytes.
    const next = await w.agent.nextBody();
    srv.answer = { body: Buffer.from('{"choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}'), type: 'application/json' };
    const response = await client.chat.completions.create(JSON.parse(next.json)).asResponse();
    const last = w.agent.recordBody(Buffer.from(await response.arrayBuffer()));
    assert.deepEqual(last.toolCalls, []);
    assert.equal(last.finishReason, 'stop');
  } finally {
    w.close();
    await srv.close();
  }
});

test('anthropic: the parsed body goes to messages.create() as it is', async () => {
  const srv = await server();
  srv.answer = { body: read('anthropic-tools.json'), type: 'application/json' };
  const client = new Anthropic({ apiKey: 'local', baseURL: srv.url, maxRetries: 0 });
  const w = world('anthropic');
  try {
    w.agent.startTurn('read café.txt');
    const body = await w.agent.nextBody();
    const message = await client.messages.create(JSON.parse(body.json));
    assert.deepEqual(srv.last(), JSON.parse(body.json));
    assert.deepEqual(callsOf(w.agent.recordBody(message).toolCalls), PROVIDERS.anthropic[3]);
  } finally {
    w.close();
    await srv.close();
  }
});

// -- 4. the SDKs' raw streams ------------------------------------------------------------------

test("openai: asResponse()'s body feeds the stream; the SDK's parsed chunks are refused with the way to the bytes", async () => {
  const srv = await server();
  srv.answer = { body: read('openai-chat-tools.sse'), type: 'text/event-stream' };
  const client = new OpenAI({ apiKey: 'local', baseURL: `${srv.url}/v1`, maxRetries: 0 });
  const w = world('openai');
  try {
    w.agent.startTurn('read café.txt');
    const body = await w.agent.nextBody();
    const params = { ...JSON.parse(body.json), stream: true, stream_options: { include_usage: true } };
    const response = await client.chat.completions.create(params).asResponse();
    const s = new lls.Stream('openai');
    let text = '';
    for await (const chunk of response.body) {
      s.feed(chunk);
      for (const d of s.takeDeltas()) if (d.type === 'text') text += d.text;
    }
    const rec = w.agent.recordStream(s);
    s.close();
    assert.deepEqual(srv.last(), params);
    assert.equal(text, lls.parseResponse('openai', read('openai-chat-tools.json')).message.content[0].text);
    assert.deepEqual(callsOf(rec.toolCalls), PROVIDERS.openai[3]);
    assert.equal(rec.finishReason, 'tool-calls');
    const parsed = await client.chat.completions.create(params);
    const s3 = new lls.Stream('openai');
    for await (const chunk of parsed) {
      assert.throws(() => s3.feed(chunk), { name: 'TypeError', message: /feed the raw bytes of the response instead/ });
      break;
    }
    s3.close();
  } finally {
    w.close();
    await srv.close();
  }
});

test("anthropic and the Responses API: asResponse()'s body feeds the stream", async () => {
  const srv = await server();
  try {
    for (const [renderer, sse, send] of [
      ['anthropic', 'anthropic-tools.sse', (p) => new Anthropic({ apiKey: 'local', baseURL: srv.url, maxRetries: 0 }).messages.create(p)],
      ['openai-responses', 'openai-responses-tools.sse',
        (p) => new OpenAI({ apiKey: 'local', baseURL: `${srv.url}/v1`, maxRetries: 0 }).responses.create(p)],
    ]) {
      srv.answer = { body: read(sse), type: 'text/event-stream' };
      const w = world(renderer);
      w.agent.startTurn('read café.txt');
      const params = { ...JSON.parse((await w.agent.nextBody()).json), stream: true };
      const response = await send(params).asResponse();
      assert.deepEqual(srv.last(), params);
      const s = new lls.Stream(renderer);
      for await (const chunk of response.body) s.feed(chunk);
      const rec = w.agent.recordStream(s);
      s.close();
      const want = new lls.Stream(renderer);
      want.feed(read(sse));
      assert.deepEqual(rec.toolCalls, lls.toolCalls(want.finish()), renderer);
      want.close();
      assert.ok(rec.toolCalls.length > 0);
      w.close();
    }
  } finally {
    await srv.close();
  }
});
