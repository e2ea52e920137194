'use strict';
// The cache clock (docs/node.md, "The cache clock"): what it decides from the log, the keep-warm
// request it builds and whose answer goes through recordBody, its options' errors.
const test = require('node:test');
const assert = require('node:assert/strict');
const lls = require('..');

const PRICES = { anthropic: { input: 3, cachedInput: 0.3, cacheWrite: { '5m': 3.75, '1h': 6 }, output: 15 } };
const REPLY = JSON.stringify({
  id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-sonnet-4-5', stop_reason: 'end_turn',
  content: [{ type: 'text', text: 'It reads the forecast.' }],
  usage: { input_tokens: 40, output_tokens: 8, cache_read_input_tokens: 0, cache_creation_input_tokens: 30000 },
});

/** An Anthropic agent after one turn whose request wrote 30000 tokens to the cache. */
async function afterOneTurn() {
  const session = lls.Session.memory();
  const agent = new lls.Agent(session, {
    config: { provider: 'anthropic', model: 'claude-sonnet-4-5' }, system: 'You are a coding agent.', checkRequests: true,
  });
  agent.setRenderer('anthropic');
  agent.startTurn('What does the weather module do?');
  (await agent.nextBody()).release();
  agent.recordBody(REPLY);
  agent.endTurn('completed');
  return { session, agent };
}

test('the clock keeps warm through the record path', async () => {
  const { session, agent } = await afterOneTurn();
  let d = agent.cacheClock({ prices: PRICES });
  assert.equal(d.state.tier, '5m');
  assert.equal(d.state.ttlMs, 300000);
  assert.equal(d.decision, lls.Decision.NONE);
  assert.equal(d.nextDecisionAt, d.state.lastRequestAt + 290000);
  d = agent.cacheClock({ prices: PRICES, now: d.state.lastRequestAt + 292000, returnModel: { gapsMs: [1200000], neverReturns: 0 } });
  assert.equal(d.decision, lls.Decision.KEEP_WARM, d.reason);
  assert.equal(d.tier, '1h', d.reason); // one keep-warm request at the hour tier bridges the pause
  assert.ok(d.recorded > 0);
  const body = agent.keepaliveBody();
  assert.equal(body.info.purpose, 'keepalive');
  assert.equal(JSON.parse(body.json).max_tokens, 1);
  assert.ok(body.json.includes('"ttl":"1h"'), body.json);
  body.release();
  assert.equal(agent.recordBody(REPLY).toolCallCount, 0);
  const v = session.verify();
  assert.deepEqual([v.requests, v.keepalives, v.decisions], [1, 1, 1]);
  agent.close();
  session.close();
});

test('bad clock options name the field', async () => {
  const { session, agent } = await afterOneTurn();
  assert.throws(() => agent.cacheClock({ marginMs: -1 }), (e) =>
    e.status === lls.Status.INVALID_INPUT && e.message.includes('options.marginMs') && e.detail.field === 'options.marginMs');
  await assert.rejects(agent.compactIdle(), (e) => e.status === lls.Status.OUT_OF_ORDER &&
    e.message.includes('has not decided to compact'));
  agent.close();
  session.close();
});
