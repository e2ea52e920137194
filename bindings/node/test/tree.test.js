'use strict';
// Agent trees (tree.js): children spawned from the parent's open tool calls run concurrently
// and finish in any order; their answers become the parent's tool results in call order; each
// child's first body extends the parent's last; a child keeps its parent's model; a woken child
// carries on; the tree explains; examples/node/tree.js runs.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const lls = require('..');

const CONFIG = { config: { provider: 'openai', model: 'm1' }, system: 'You lead.' };
const calls = (...ids) => ({
  message: { role: 'assistant', content: ids.map((id) => ({ type: 'tool-call', id, name: 'task', arguments: '{}' })) },
});
const text = (t) => ({ message: { role: 'assistant', content: [{ type: 'text', text: t }] } });

test('two children run concurrently and answer in call order', async () => {
  const s = lls.Session.memory();
  const a = new lls.Agent(s, CONFIG);
  a.setRenderer('openai');
  a.startTurn('Fix both.');
  const parent = (await a.nextBody()).json;
  a.recordResponse(calls('c1', 'c2'));
  const kids = ['c1', 'c2'].map((c) => a.spawn(`Do ${c}.`, { callId: c }));
  const out = await Promise.all(
    kids.map(async ({ agent }, i) => {
      const body = (await agent.nextBody()).json;
      // Everything up to the end of the parent's conversation is the parent's.
      const end = parent.indexOf('],"model"');
      assert.ok(body.startsWith(parent.slice(0, end)), body);
      assert.ok(body.includes(lls.DEFAULT_PLACEHOLDER));
      await new Promise((r) => setTimeout(r, i === 0 ? 20 : 0));
      agent.recordResponse(text(`answer ${i + 1}`));
      return a.finishChild(agent);
    }),
  );
  assert.deepEqual(out.map((o) => o.recorded), [2, 0]);
  assert.equal(out[1].answer, 'answer 2');
  const results = s.events().filter((e) => e.type === 'tool/result').map((e) => e.data);
  assert.deepEqual(results.map((r) => r.callId), ['c1', 'c2']);
  assert.equal(results[0].child, kids[0].session.id);
  const tree = s.explain({ tree: true });
  assert.equal(tree.totals.nodes, 3);
  assert.deepEqual(tree.nodes.map((n) => n.kind), ['root', 'spawn', 'spawn']);
  for (const k of kids) {
    k.session.verify();
    k.agent.close();
    k.session.close();
  }
  a.close();
  s.close();
  assert.equal(lls.liveHandleCount(), 0);
});

test('a child keeps its model; spawn errors are clear; a woken child carries on', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-node-tree-'));
  const s = lls.Session.openFile(path.join(dir, 'lead.jsonl'));
  const a = new lls.Agent(s, CONFIG);
  assert.throws(() => a.spawn('x'), (e) => e.code === 'LLS_ERR_OUT_OF_ORDER' && /sent no request yet/.test(e.message));
  a.startTurn('hi');
  await a.nextRequest();
  a.recordResponse(calls('c1'));
  assert.throws(() => a.spawn('x', { callId: 'nope' }), (e) => e.code === 'LLS_ERR_OUT_OF_ORDER');
  const { session, agent } = a.spawn('Do it.', { callId: 'c1' });
  assert.throws(
    () => agent.setOptions({ config: { provider: 'openai', model: 'm2' }, system: 'You lead.' }),
    (e) => e.code === 'LLS_ERR_INVALID_INPUT' && e.detail.field === 'config.model' && /is a child agent/.test(e.message),
  );
  const first = await agent.nextRequest();
  agent.recordResponse(text('done'));
  agent.endTurn();
  agent.close();
  session.close();
  const again = lls.Session.openFile(path.join(dir, 'lead.c1.jsonl'));
  const woken = lls.Agent.wake(again);
  woken.startTurn('more?');
  const r = await woken.nextRequest();
  assert.deepEqual(r.envelope.messages.slice(0, first.envelope.messages.length), first.envelope.messages);
  assert.equal(r.envelope.sessionId, s.id);
  const listed = lls.listSessions(`file:${path.join(dir, 'lead.jsonl')}`, { parent: s.id });
  assert.deepEqual(listed.map((x) => [x.id, x.parent.spawned, x.parent.callId]), [[again.id, true, 'c1']]);
  woken.close();
  again.close();
  a.close();
  s.close();
});

test('examples/node/tree.js runs', async () => {
  const { main } = require('../../../examples/node/tree.js');
  const { dir, outcomes } = await main();
  assert.equal(outcomes.length, 2);
  assert.ok(fs.existsSync(path.join(dir, 'lead.task_2.jsonl')));
  assert.equal(lls.verifyFile(path.join(dir, 'lead.task_1.jsonl')).requests >= 2, true);
});
