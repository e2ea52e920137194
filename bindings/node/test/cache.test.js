'use strict';
// Cache fidelity through the Node binding: render options, explain, and replay of a recorded
// session (issue #17).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const lls = require('..');

const text = (t) => ({ role: 'user', content: [{ type: 'text', text: t }] });
const reply = (t) => ({ message: { role: 'assistant', content: [{ type: 'text', text: t }] }, usage: { inputTokens: 10, outputTokens: 2, cacheReadTokens: 90 } });

/** Two turns; `answer(envelopeBytes)` plays the provider and returns what to record. */
async function host(session, system, answer) {
  const agent = new lls.Agent(session, { config: { provider: 'openai', model: 'gpt-5' }, system });
  try {
    for (const u of ['first', 'second']) {
      agent.startTurn(u);
      const { bytes } = await agent.nextRequest();
      let r;
      try {
        r = answer(bytes);
      } catch (e) {
        agent.endTurn('error');
        throw e;
      }
      agent.recordResponse(r);
      agent.endTurn();
    }
  } finally {
    agent.close();
  }
}

test('renderWithOptions: cache key, retention, TTL, and bad options', () => {
  const env = { provider: 'openai', model: 'm', system: 'S', messages: [text('q')], sessionId: 'sess-1', purpose: 'conversation' };
  assert.equal(JSON.parse(lls.renderWithOptions('openai', env)).prompt_cache_key, 'sess-1');
  assert.equal(JSON.parse(lls.renderWithOptions('openai', env, { promptCacheKey: false })).prompt_cache_key, undefined);
  const custom = JSON.parse(lls.renderWithOptions('openai', env, { promptCacheKey: 'tenant', promptCacheRetention: '24h' }));
  assert.deepEqual([custom.prompt_cache_key, custom.prompt_cache_retention], ['tenant', '24h']);
  const a = lls.renderWithOptions('anthropic', env, { cacheTtl: '1h' });
  assert.equal(a.split('"cache_control":{"ttl":"1h","type":"ephemeral"}').length - 1, 2, a);
  assert.throws(() => lls.renderWithOptions('anthropic', env, { cacheTTL: '1h' }), (e) => e.status === lls.Status.INVALID_INPUT && /options\.cacheTTL: is not a render option/.test(e.message));
});

test('explain names the changed system line and charges the spend to it', async () => {
  const session = lls.Session.memory();
  const agent = new lls.Agent(session, { config: { provider: 'openai', model: 'gpt-5' }, system: 'Be brief.\nToday is Monday.' });
  for (const [u, sys] of [['one', 'Be brief.\nToday is Monday.'], ['two', 'Be brief.\nToday is Tuesday.']]) {
    agent.setOptions({ config: { provider: 'openai', model: 'gpt-5' }, system: sys });
    agent.startTurn(u);
    await agent.nextRequest();
    agent.recordResponse(reply('ok'));
    agent.endTurn();
  }
  const ex = session.explain();
  assert.equal(ex.requests.length, 2);
  const d = ex.requests[1].divergence;
  assert.deepEqual([d.component, d.line, d.event], ['system', 2, 'header-change']);
  assert.equal(ex.requests[1].cause, 'header-change');
  assert.equal(ex.totals.spend['header-change'], 10);
  assert.equal(ex.counter, 'estimate');
  assert.throws(() => session.explain({ tokenizer: '/nonexistent/tokenizer.json' }), (e) => e.status === lls.Status.TOKENIZER);
  agent.close();
  session.close();
});

test('a recorded session answers the same loop offline, and names the first divergence', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-replay-'));
  const file = path.join(dir, 'recorded.jsonl');
  const rec = lls.Session.openFile(file, { id: 'rec-1' });
  await host(rec, 'Be brief.', () => reply('ok'));
  rec.close();

  const replay = lls.Replay.openFile(file);
  const offline = lls.Session.memory({ id: 'rec-1' });
  await host(offline, 'Be brief.', (bytes) => {
    const a = replay.answer(bytes);
    assert.deepEqual([a.purpose, a.outcome], ['conversation', 'response']);
    return a.response;
  });
  assert.deepEqual(replay.info(), { sessionId: 'rec-1', requests: 2, answered: 2 });
  offline.verify();

  const again = lls.Replay.fromSession(offline);
  const other = lls.Session.memory({ id: 'rec-1' });
  await assert.rejects(host(other, 'Be very brief.', (bytes) => again.answer(bytes)), (e) => {
    assert.equal(e.status, lls.Status.RECONSTRUCTION);
    assert.equal(e.detail.component, 'system');
    assert.equal(e.detail.request, '1');
    assert.match(e.message, /request 1 \(turn 1 step 1\) differs from the recorded one at system line 1/);
    return true;
  });
  assert.equal(lls.explainFile(file).totals.conversationRequests, 2);
  assert.throws(() => lls.Replay.openFile(path.join(dir, 'missing.jsonl')), (e) => e.status === lls.Status.STORAGE);
  replay.close();
  replay.close();
  assert.throws(() => replay.info(), (e) => e.status === lls.Status.INVALID_HANDLE);
  again.close();
  offline.close();
  other.close();
});
