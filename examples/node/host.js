// @ts-check
'use strict';
// A small llmsession host in Node: talks to an OpenAI-compatible chat completions endpoint with
// `fetch`, composes a session prefix with an async listener, renders every request with
// lls_render("openai"), maps the provider's usage back into the log, and compacts with an async
// summariser that sends the library's summarisation request to the same endpoint.
//
//   node examples/node/host.js [--base-url URL] [--model NAME] [--log FILE] [--turns N]
//
// Environment: LLMSESSION_BASE_URL (default http://127.0.0.1:8766/v1, the local llama-server of
// scripts/llama/server.sh), LLMSESSION_MODEL, OPENAI_API_KEY (sent as a bearer token if set).
// Type-checked with `tsc --noEmit -p examples/node` against bindings/node/index.d.ts.

const lls = require('../../bindings/node');

/** @typedef {import('../../bindings/node').Usage} Usage */
/** @typedef {import('../../bindings/node').Message} Message */

/** @param {string} name @param {string} fallback */
function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const BASE_URL = arg('--base-url', process.env.LLMSESSION_BASE_URL || 'http://127.0.0.1:8766/v1').replace(/\/$/, '');
const MODEL = arg('--model', process.env.LLMSESSION_MODEL || 'smollm2');
const LOG = arg('--log', '');
const TURNS = Number(arg('--turns', '6'));

/**
 * An OpenAI-compatible response's usage, in llmsession's terms. llama-server reports cached
 * prompt tokens in `prompt_tokens_details.cached_tokens` (newer builds) or `timings.cache_n`.
 * @param {any} data
 * @returns {Usage | undefined}
 */
function usageOf(data) {
  const u = data && data.usage;
  if (!u) return undefined;
  /** @type {Usage} */
  const usage = { inputTokens: u.prompt_tokens || 0, outputTokens: u.completion_tokens || 0 };
  const cached = (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) ?? (data.timings && data.timings.cache_n);
  if (typeof cached === 'number') usage.cacheReadTokens = cached;
  return usage;
}

class ProviderError extends Error {
  /** @param {string} message @param {boolean} overflow */
  constructor(message, overflow) {
    super(message);
    this.overflow = overflow;
  }
}

/**
 * POSTs a rendered body to the chat completions endpoint.
 * @param {string} body @param {AbortSignal} [signal]
 * @returns {Promise<{text: string, usage: Usage | undefined, data: any, ms: number}>}
 */
async function complete(body, signal) {
  const started = Date.now();
  /** @type {Record<string, string>} */
  const headers = { 'content-type': 'application/json' };
  if (process.env.OPENAI_API_KEY) headers.authorization = `Bearer ${process.env.OPENAI_API_KEY}`;
  const res = await fetch(`${BASE_URL}/chat/completions`, { method: 'POST', headers, body, signal });
  const raw = await res.text();
  if (!res.ok) {
    const overflow = /context|too long|exceed/i.test(raw) && (res.status === 400 || res.status === 413);
    throw new ProviderError(`HTTP ${res.status}: ${raw.slice(0, 300)}`, overflow);
  }
  const data = JSON.parse(raw);
  const choice = data.choices && data.choices[0];
  const text = (choice && choice.message && choice.message.content) || '';
  return { text, usage: usageOf(data), data, ms: Date.now() - started };
}

/** The user's turns: questions padded with material so that the history grows. */
function userTurns() {
  const topics = ['rivers', 'mountains', 'forests', 'deserts', 'oceans', 'glaciers', 'islands', 'volcanoes'];
  return topics.map((t, i) =>
    `Question ${i + 1}: in two sentences, what is special about ${t}? ` +
    `Background notes: ${`${t} shape the land and the climate around them. `.repeat(12)}`);
}

async function main() {
  const session = LOG ? lls.Session.openFile(LOG) : lls.Session.memory();
  const agent = new lls.Agent(session, {
    config: { provider: 'openai', model: MODEL, temperature: 0, maxTokens: 64 },
    system: 'You are a concise assistant. Answer in at most two sentences.',
    // Small on purpose, so that the conversation compacts within a few turns.
    policy: { contextWindow: 2048, threshold: 0.3, retainedTokens: 200, summaryMaxTokens: 128 },
  });

  // The session prefix: composed once per agent instance, frozen, placed after the system prompt.
  agent.addPrefixListener(async ({ rest }) => {
    await new Promise((r) => setTimeout(r, 5)); // e.g. read workspace notes from disk
    /** @type {Message} */
    const notes = { role: 'user', content: [{ type: 'text', text: 'Workspace notes: the user studies geography.' }] };
    return [notes, ...rest];
  });

  /** @type {{ms: number, usage: Usage | undefined, sharedMessages: number, messages: number}[]} */
  const summaries = [];
  agent.setSummariser(async (input, { signal }) => {
    const body = lls.render('openai', input.request, input.prefixLen);
    const r = await complete(body, signal);
    summaries.push({ ms: r.ms, usage: r.usage, sharedMessages: input.sharedMessages, messages: input.request.messages.length });
    console.log(`  [summariser] ${input.request.messages.length} messages (${input.sharedMessages} shared with the last request) -> ` +
      `${r.text.length} chars in ${r.ms} ms, prompt ${r.usage && r.usage.inputTokens}, cached ${r.usage && r.usage.cacheReadTokens}`);
    return { text: r.text || 'The user asked about geography.', usage: r.usage };
  });

  const controller = new AbortController();
  process.once('SIGINT', () => controller.abort());

  /** @type {object[]} */
  const rows = [];
  for (const [i, question] of userTurns().slice(0, TURNS).entries()) {
    agent.startTurn(question);
    for (let attempt = 0; ; attempt++) {
      const req = await agent.nextRequest({ signal: controller.signal });
      const body = lls.render('openai', req.json, req.info.prefixLen);
      try {
        const r = await complete(body, controller.signal);
        agent.recordResponse({ message: { role: 'assistant', content: [{ type: 'text', text: r.text }] }, usage: r.usage });
        rows.push({
          turn: i + 1,
          messages: req.info.messageCount,
          shared: req.info.sharedMessages,
          prompt: r.usage && r.usage.inputTokens,
          cached: r.usage && r.usage.cacheReadTokens,
          ms: r.ms,
        });
        console.log(`turn ${i + 1}: ${req.info.messageCount} messages, ${req.info.sharedMessages} shared, prompt ` +
          `${r.usage && r.usage.inputTokens} tokens, cached ${r.usage && r.usage.cacheReadTokens}, ${r.ms} ms: ${JSON.stringify(r.text.slice(0, 80))}`);
        break;
      } catch (e) {
        if (!(e instanceof ProviderError) || attempt > 1) throw e;
        const { retry } = await agent.providerError({ message: e.message, overflow: e.overflow }, { signal: controller.signal });
        if (!retry) throw e;
      }
    }
    agent.endTurn();
  }

  const stats = session.stats();
  const verified = session.verify();
  console.log(`session ${session.id}: ${stats.events} events, ${stats.requests} requests, ${stats.compactions} compactions; ` +
    `verified ${verified.requests} requests and ${verified.compactions} compactions from the log`);
  console.log(JSON.stringify({ rows, summaries, stats }));
  agent.close();
  session.close();
}

main().catch((e) => {
  console.error(e instanceof lls.LlmSessionError ? `llmsession error [${e.kind}] ${e.message}` : e);
  process.exitCode = 1;
});
