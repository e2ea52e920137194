// @ts-check
'use strict';
// An agent tree in Node: a lead hands two tasks to two child agents that run concurrently
// (Promise.all), each child's first request extending the lead's last one; the children finish
// in any order and their answers become the lead's tool results, in call order. A scripted
// "model" stands in for the provider, so this runs offline; docs/caching.md ("Agent trees").
//
//   node examples/node/tree.js [DIR]
//
// The logs go to DIR (a temporary directory by default): lead.jsonl and the children beside it,
// lead.task_1.jsonl and lead.task_2.jsonl; `llmsession tree DIR/lead.jsonl` prints the tree.
// Run by the Node tests (test/tree.test.js) and type-checked with `tsc --noEmit -p examples/node`.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const lls = require('../../bindings/node');

/** @typedef {import('../../bindings/node').Message} Message */

/** @param {string} text @param {{id: string, name: string, arguments: string}[]} [calls] @returns {Message} */
function reply(text, calls = []) {
  return {
    role: 'assistant',
    content: [{ type: 'text', text }, ...calls.map((c) => ({ type: /** @type {const} */ ('tool-call'), ...c }))],
  };
}

/** A model answering after `ms` milliseconds (so the children overlap). @param {number} ms */
const later = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const dir = process.argv[2] || fs.mkdtempSync(path.join(os.tmpdir(), 'lls-node-tree-'));
  const session = lls.Session.openFile(path.join(dir, 'lead.jsonl'), { id: 'lead' });
  const lead = new lls.Agent(session, {
    config: { provider: 'openai', model: 'gpt-4o-mini' },
    system: 'You lead a team of coding agents. Hand tasks to subagents with the task tool.',
    tools: [{ name: 'task', description: 'Hand a task to a subagent', parameters: { type: 'object' } }],
  });
  lead.setRenderer('openai');
  lead.startTurn('Fix issues #12 and #15.');
  await lead.nextBody();
  lead.recordResponse({
    message: reply('Two subagents, one per issue.', [
      { id: 'task_1', name: 'task', arguments: '{"issue":12}' },
      { id: 'task_2', name: 'task', arguments: '{"issue":15}' },
    ]),
  });
  const tasks = [
    { callId: 'task_1', directive: 'Fix issue #12 (rounding).', answer: 'Rounded to one decimal.', ms: 30 },
    { callId: 'task_2', directive: 'Fix issue #15 (timeout).', answer: 'Added a 10 s timeout.', ms: 5 },
  ];
  const children = tasks.map((t) => ({ ...t, ...lead.spawn(t.directive, { callId: t.callId }) }));
  const outcomes = await Promise.all(
    children.map(async (c) => {
      const body = await c.agent.nextBody();
      console.log(`${c.session.id}: first request, ${body.info.messageCount} messages (the lead's, its calls, the placeholders, the task)`);
      await later(c.ms);
      c.agent.recordResponse({ message: reply(c.answer) });
      return lead.finishChild(c.agent);
    }),
  );
  for (const o of outcomes) console.log(`${o.child} answered ${o.callId}: ${o.answer} (${o.recorded} result(s) logged then)`);
  const next = await lead.nextBody();
  console.log(`lead: next request, ${next.info.messageCount} messages, with both answers in call order`);
  lead.recordResponse({ message: reply('Both fixed.') });
  lead.endTurn();
  const tree = session.explain({ tree: true });
  console.log(`tree: ${tree.totals.nodes} sessions, ${tree.totals.all.requests} requests`);
  for (const c of children) {
    c.session.verify();
    c.agent.close();
    c.session.close();
  }
  lead.close();
  session.close();
  return { dir, outcomes };
}

module.exports = { main };

if (require.main === module) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
