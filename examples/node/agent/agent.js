// @ts-check
'use strict';
// A tool-using agent on llmsession's body path, through the official `openai` SDK.
//
// llmsession builds every request body (agent.nextBody); the SDK sends it as it is (its JSON
// parsed: the SDK passes fields it has no type for, such as llama.cpp's cache_prompt, through);
// the reply goes back to llmsession whole (agent.recordBody takes the SDK's ChatCompletion
// object) or streamed (the raw bytes of `.asResponse()` fed to an llmsession Stream). The tool
// calls come back as data (rec.toolCalls); the host runs read_file on a workspace and records each
// result. Each run is one agent instance over the session in --log: run it again and it resumes
// the session, its first request carrying the whole history. At the end it verifies the log
// (every request rebuilt from it) and explains each request's cache figures (docs/node.md, "With
// the official SDKs").
//
//   cd examples/node/agent && npm ci        # openai, pinned in package-lock.json
//   node examples/node/agent/agent.js --log agent.jsonl "What does weather-cli do?"
//   node examples/node/agent/agent.js --log agent.jsonl --script examples/go/demo/script.json --turns 2-3
//
// --base-url: an OpenAI-compatible endpoint (default: the local llama-server of
// scripts/llama/server.sh, http://127.0.0.1:8766/v1). A turn of a --script file with "readFile"
// gets a host-scripted read_file call when the model makes none in its first reply (the small
// local model never calls tools by itself; docs/demo.md, "Host-scripted tool calls"). Requests
// are streamed except the one that gets a scripted call (--no-stream: none is). --check exits 1
// unless verify rebuilt every request and, on every request of the run but the session's first,
// the server read from its cache at least 99 % of what explain expected (the Go host's rule 9,
// docs/demo.md). Type-checked with `tsc -p examples/node/agent` (scripts/demo/sdk-agents.sh).

const fs = require('node:fs');
const path = require('node:path');
const { OpenAI, APIError } = require('openai');
const lls = require('../../../bindings/node'); // installed as a package: require('llmsession')

const ROOT = path.resolve(__dirname, '..', '..', '..');
const SYSTEM = 'You are a coding agent working in the weather-cli repository. Answer briefly. Use the read_file tool to read files.';
const READ_FILE = {
  name: 'read_file',
  description: 'Read a text file of the workspace. Paths are relative to the workspace root.',
  parameters: {
    type: 'object',
    properties: { path: { type: 'string', description: 'file path, e.g. units/units.go' } },
    required: ['path'],
  },
};

/** @typedef {{user: string, readFile?: string}} Turn */

function options() {
  const o = {
    baseUrl: process.env.LLMSESSION_BASE_URL || 'http://127.0.0.1:8766/v1',
    model: process.env.LLMSESSION_MODEL || 'SmolLM2-135M-Instruct',
    log: 'agent.jsonl',
    workspace: path.join(ROOT, 'examples', 'go', 'demo', 'workspace'),
    script: '',
    turns: '',
    maxTokens: 48,
    stream: true,
    check: false,
    /** @type {string[]} */
    messages: [],
  };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--base-url') o.baseUrl = value();
    else if (a === '--model') o.model = value();
    else if (a === '--log') o.log = value();
    else if (a === '--workspace') o.workspace = value();
    else if (a === '--script') o.script = value();
    else if (a === '--turns') o.turns = value();
    else if (a === '--max-tokens') o.maxTokens = Number(value());
    else if (a === '--no-stream') o.stream = false;
    else if (a === '--check') o.check = true;
    else if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
    else o.messages.push(a);
  }
  return o;
}

/** @param {ReturnType<typeof options>} o @returns {Turn[]} */
function loadTurns(o) {
  /** @type {Turn[]} */
  const turns = o.messages.map((user) => ({ user }));
  if (o.script) {
    /** @type {Turn[]} */
    const spec = JSON.parse(fs.readFileSync(o.script, 'utf8')).turns;
    const [first, last] = (o.turns || `1-${spec.length}`).split('-').map(Number);
    turns.push(...spec.slice(first - 1, last || first));
  }
  return turns;
}

/**
 * Runs one read_file call: [text, isError].
 * @param {string} workspace @param {lls.ToolCall} call @returns {[string, boolean]}
 */
function readFile(workspace, call) {
  let file = '';
  try {
    file = String(call.arguments.path);
    const root = path.resolve(workspace);
    const target = path.resolve(root, file);
    if (!target.startsWith(root + path.sep)) return [`${file}: outside the workspace`, true];
    return [fs.readFileSync(target, 'utf8'), false];
  } catch (e) {
    return [`${file || 'bad arguments'}: ${e instanceof Error ? e.message : e}`, true];
  }
}

/**
 * One streamed request: the raw bytes of the SDK's response go to an llmsession Stream (the
 * SDK's parsed stream drops the `data: [DONE]` the accumulator checks for).
 * @param {OpenAI} client @param {any} params @param {lls.Agent} agent @returns {Promise<lls.Recorded>}
 */
async function streamed(client, params, agent) {
  const response = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }).asResponse();
  if (!response.body) throw new Error('the streamed response has no body');
  const s = new lls.Stream('openai');
  try {
    process.stdout.write('assistant (streamed): ');
    for await (const chunk of response.body) {
      s.feed(chunk);
      for (const d of s.takeDeltas()) if (d.type === 'text') process.stdout.write(d.text);
    }
    process.stdout.write('\n');
    return agent.recordStream(s);
  } finally {
    s.close();
  }
}

/**
 * @param {OpenAI} client @param {lls.Agent} agent @param {lls.Session} session
 * @param {string} workspace @param {Turn} turn @param {boolean} stream
 */
async function runTurn(client, agent, session, workspace, turn, stream) {
  const n = agent.startTurn(turn.user);
  console.log(`user: ${turn.user}`);
  for (;;) {
    const body = await agent.nextBody();
    const step = body.info.step;
    const params = JSON.parse(body.json); // the body as it is: no split needed in Node
    body.release();
    const scripted = turn.readFile !== undefined && step === 1;
    /** @type {lls.Recorded} */
    let rec;
    try {
      if (stream && !scripted) {
        rec = await streamed(client, params, agent);
      } else {
        const completion = await client.chat.completions.create({ ...params, stream: false });
        const message = completion.choices[0].message;
        if (message.content) console.log(`assistant: ${message.content.trim()}`);
        if (scripted && !(message.tool_calls && message.tool_calls.length)) {
          console.log(`  (host-scripted tool call: read_file ${turn.readFile})`);
          message.tool_calls = [{ id: `call_t${n}_1`, type: 'function', function: { name: 'read_file', arguments: JSON.stringify({ path: turn.readFile }) } }];
          completion.choices[0].finish_reason = 'tool_calls';
        }
        rec = agent.recordBody(completion); // the SDK's object, as it is
      }
    } catch (e) {
      if (!(e instanceof APIError) || typeof e.status !== 'number') throw e;
      const overflow = lls.isContextOverflow(e.status, JSON.stringify(e.error ?? e.message));
      const { retry } = await agent.providerError({ message: e.message, overflow });
      if (retry) {
        console.log('  context overflow: compacted, retrying');
        continue;
      }
      agent.endTurn('error');
      throw e;
    }
    const usage = /** @type {lls.Usage} */ (session.events(rec.seq, rec.seq + 1)[0].data.usage || {});
    const cached = usage.cacheReadTokens || 0;
    console.log(`  [request turn ${n} step ${step}] prompt ${(usage.inputTokens || 0) + cached} tokens, cached ${cached} (server), finish ${rec.finishReason}`);
    if (rec.toolCalls.length === 0) {
      agent.endTurn(rec.finishReason === 'max-tokens' ? 'max-tokens' : 'completed');
      return;
    }
    for (const call of rec.toolCalls) {
      const [text, isError] = readFile(workspace, call);
      agent.recordToolResult({ callId: call.id, text, isError });
      console.log(`  tool ${call.name}(${call.argumentsJson}): ${text.length} characters${isError ? ' (error)' : ''}`);
    }
  }
}

/**
 * verify and explain at the end of the run; the rules of --check (true: all held).
 * @param {lls.Session} session @param {number} instance @param {boolean} check
 */
function report(session, instance, check) {
  const v = session.verify();
  console.log(`\nverify: ${v.events} events, ${v.requests} requests rebuilt from the log alone`);
  const ex = session.explain();
  console.log("explain (cached: the server's figure; expected: what the log says it could read):");
  let ok = v.requests === ex.requests.length;
  const reqs = ex.requests.filter((r) => r.kind === 'conversation');
  for (const r of reqs) {
    const short = r.id !== '1' && r.cachedTokens * 100 < r.expectedCachedTokens * 99;
    console.log(`  request ${r.id.padStart(2)} instance ${r.instance} turn ${r.turn} step ${r.step}: prompt ${r.promptTokens}, ` +
      `cached ${r.cachedTokens}, expected ${r.expectedCachedTokens}, cause ${r.cause}${short ? '  <- below expected' : ''}`);
    if (short && r.instance === instance) ok = false;
  }
  const mine = reqs.filter((r) => r.instance === instance).length;
  ok = ok && mine > 0;
  if (check) console.log(`check: ${ok ? 'passed' : 'FAILED'} (${mine} requests of instance ${instance})`);
  return ok;
}

async function main() {
  const o = options();
  const turns = loadTurns(o);
  if (turns.length === 0) throw new Error('no turns: give user messages, or --script');
  const client = new OpenAI({ baseURL: o.baseUrl, apiKey: process.env.OPENAI_API_KEY || 'local' });
  // Sampling fields are the call config's pass-through fields: they go into every body.
  const config = { provider: 'llama.cpp', model: o.model, max_tokens: o.maxTokens, temperature: 0, seed: 42 };
  const session = lls.Session.openFile(o.log);
  const agent = new lls.Agent(session, { config, system: SYSTEM, tools: [READ_FILE] });
  let ok = false;
  try {
    agent.setRenderer('openai');
    for (const turn of turns) await runTurn(client, agent, session, o.workspace, turn, o.stream);
    ok = report(session, agent.requestInfo().instance, o.check);
  } finally {
    agent.close();
    session.close();
  }
  if (o.check && !ok) process.exitCode = 1;
}

main().catch((e) => {
  console.error(e instanceof lls.LlmSessionError ? `llmsession error [${e.kind}] ${e.message}` : e);
  process.exitCode = 1;
});
