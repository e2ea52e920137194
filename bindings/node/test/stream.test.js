'use strict';
// Streamed responses: the fixture streams of tests/data/stream (each provider's documented
// wire format) fed from a web ReadableStream, an async iterator and a real HTTP response give
// what parseResponse gives for the non-streamed body; broken streams fail clearly.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const lls = require('..');

const DATA = path.join(__dirname, '..', '..', '..', 'tests', 'data', 'stream');
const read = (name) => fs.readFileSync(path.join(DATA, name));
const FIXTURES = [
  ['openai', 'openai-chat-tools.sse', 'openai-chat-tools.json'],
  ['openai', 'openai-chat-reasoning.sse', 'openai-chat-reasoning.json'],
  ['openai-responses', 'openai-responses-tools.sse', 'openai-responses-tools.json'],
  ['anthropic', 'anthropic-tools.sse', 'anthropic-tools.json'],
  ['gemini', 'gemini-tools.sse', 'gemini-tools.json'],
  ['gemini', 'gemini-array.stream.json', 'gemini-array.json'],
];

/** A web ReadableStream giving `bytes` in chunks of `size`. */
function webStream(bytes, size) {
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= bytes.length) return controller.close();
      controller.enqueue(new Uint8Array(bytes.subarray(at, at + size)));
      at += size;
    },
  });
}

async function* chunks(bytes, size) {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
}

test('every fixture, from a web ReadableStream and an async iterator, gives the parsed response', async () => {
  const before = lls.liveHandleCount();
  for (const [format, stream, body] of FIXTURES) {
    const want = lls.parseResponse(format, read(body));
    for (const size of [1, 3, 64]) {
      let text = '';
      const { response } = await lls.readStream(format, webStream(read(stream), size), (d) => {
        if (d.type === 'text') text += d.text;
      });
      assert.deepEqual(response, want, `${stream} in chunks of ${size}`);
      const blocks = want.message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
      assert.equal(text, blocks, stream);
      const s = new lls.Stream(format);
      assert.deepEqual(await s.consume(chunks(read(stream), size)), want);
      s.close();
    }
  }
  assert.equal(lls.liveHandleCount(), before);
});

test('streaming a real HTTP response with fetch, and recording it', async () => {
  const bytes = read('openai-chat-tools.sse');
  const server = http.createServer(async (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let at = 0; at < bytes.length; at += 97) {
      res.write(bytes.subarray(at, at + 97));
      await new Promise((r) => setTimeout(r, 1));
    }
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const reply = await fetch(`http://127.0.0.1:${server.address().port}/v1/chat/completions`, { method: 'POST', body: '{}' });
    const calls = [];
    const { response, body } = await lls.readStream('openai', reply.body, (d) => d.type === 'tool-call' && calls.push(d));
    assert.equal(calls[0].id, 'call_Qa1');
    assert.equal(calls.filter((d) => d.index === 0).map((d) => d.arguments).join(''), '{"path": "café.txt", "lines": 20}');
    assert.equal(body.usage.prompt_tokens_details.cached_tokens, 1152);
    assert.equal(response.usage.cacheReadTokens, 1152);

    const session = lls.Session.memory();
    const agent = new lls.Agent(session, { config: { provider: 'openai', model: 'gpt-4.1-mini' } });
    agent.startTurn('Lis café.txt');
    await agent.nextRequest();
    agent.recordResponse(response);
    assert.match(JSON.stringify(session.history()), /"id":"call_Rb2"/);
    agent.close();
    session.close();
  } finally {
    server.close();
  }
});

test('broken streams: provider error, cut connection, malformed event, closed handle', async () => {
  const s = new lls.Stream('anthropic');
  assert.throws(
    () => s.feed('event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'),
    (e) => e instanceof lls.LlmSessionError && e.status === lls.Status.INVALID_INPUT && e.detail.stream === 'provider-error' &&
      e.detail.providerError.type === 'overloaded_error' && e.detail.overflow === false,
  );
  assert.throws(() => s.finish(), (e) => e.detail.stream === 'provider-error');
  // Nothing arrived before the error: there is no partial message.
  assert.throws(
    () => s.finish({ partial: true }),
    (e) => e instanceof lls.LlmSessionError && e.status === lls.Status.INVALID_INPUT && e.detail.stream === 'provider-error' &&
      e.detail.partial === 'empty',
  );
  s.close();
  assert.throws(() => s.feed('x'), (e) => e.status === lls.Status.INVALID_HANDLE);

  const bytes = read('openai-responses-tools.sse');
  const cut = bytes.subarray(0, bytes.indexOf('event: response.output_item.added', bytes.indexOf('"output_index":2') - 200));
  await assert.rejects(lls.readStream('openai-responses', chunks(cut, 11)), (e) => e.detail.stream === 'incomplete');
  const p = new lls.Stream('openai-responses');
  p.feed(cut);
  const partial = p.finish({ partial: true });
  assert.equal(partial.finishReason, 'incomplete');
  assert.equal(partial.message.content[1].text, 'Je regarde «\u00a0café.txt\u00a0» ☕');
  p.close();

  const m = new lls.Stream('gemini');
  assert.throws(() => m.feed('data: {oops\n\n'), (e) => e.status === lls.Status.MALFORMED_JSON && e.detail.stream === 'malformed');
  m.close();
  assert.throws(() => new lls.Stream('cohere'), (e) => e.status === lls.Status.INVALID_INPUT);
  const e = new lls.Stream('openai');
  assert.throws(() => e.feed(42), TypeError);
  e.feed(Buffer.alloc(0));
  e.feed(new Uint8Array(0));
  e.close();
});
