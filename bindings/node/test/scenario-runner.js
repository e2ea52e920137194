'use strict';
// The Node scenario driver: plays the files of docs/scenarios.md through the binding (the ops
// and the declarative fakes), records the golden transcript the Rust runner records, and compares
// it with tests/scenarios/golden/<stem>.json (test/golden.js). What a scenario asserts is checked
// once, by the Rust runner; this driver only dispatches and records. With `mode: 'async'` every
// fake is an async function that awaits a timer turn before answering (the pending-reply path).

const fs = require('fs');
const os = require('os');
const path = require('path');
const lls = require('..');
const golden = require('./golden');

const REPO = path.resolve(__dirname, '..', '..', '..');

/** Whether `v` is a count (an integer, 0 or more): what the Rust runner's `as_u64` reads. */
const isCount = (v) => Number.isInteger(v) && v >= 0;
/** `op[key]` when it is a string, else `dflt` (a key played as written: `""` stays `""`). */
const strOr = (o, key, dflt) => (typeof o[key] === 'string' ? o[key] : dflt);
const userMessage = (v) => (typeof v === 'string' ? { role: 'user', content: [{ type: 'text', text: v }] } : v);
const contextEvent = (message, source) => ({ type: 'user/message', data: { message, source }, surfaceOp: 'append' });
/** Whether call `n` (from 0) of a fake still behaves as its kind says (`times`). */
const active = (spec, n) => !isCount(spec.times) || n < spec.times;
const tick = () => new Promise((resolve) => setTimeout(resolve, 1));
/** The characters of every string in `v` (object keys left out). */
const chars = (v) => {
  if (typeof v === 'string') return [...v].length;
  if (v && typeof v === 'object') return Object.values(v).reduce((n, x) => n + chars(x), 0);
  return 0;
};

class World {
  constructor(sc, mode) {
    Object.assign(this, { mode, agent: null, listeners: [], preSteps: [], loads: 0, policy: sc.policy, counter: sc.counter });
    this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-scenario-'));
    this.session = lls.Session.memory({ id: 'scenario-session' });
    this.sessions = [this.session];
    this.options = { ...sc.agent, checkRequests: true };
    this.summariser = sc.summariser || { kind: 'fixed' };
    this.disposed = false; // a callback disposed the instance during the running op
    this.controller = new AbortController(); // the running op's cancel token (fakes may trip it)
    this.calls = []; // what the fakes received since the previous op ended (and counterCalls)
    this.counterCalls = 0;
    this.out = {}; // what the running op produced, for its transcript entry
    this.summaries = []; // every summarisation request's envelope, in order (for replay)
    this.sent = []; // every request and nativeBegin envelope: {mark, envelope} (mark: summaries before it)
    this.setListeners(sc.listeners, sc.preStep);
    this.newAgent();
  }

  setListeners(listeners, pre) {
    const mk = (spec, index) => ({ spec, index, calls: 0, held: JSON.parse(JSON.stringify(spec.messages || [])) });
    if (Array.isArray(listeners)) this.listeners = listeners.map(mk);
    if (Array.isArray(pre)) this.preSteps = pre.map(mk);
  }

  /**
   * A fake: `note` records the call when it is made; `body(input, n)` answers call `n` (after a
   * timer turn in async mode). `st.calls` counts the calls (a listener's count spans instances).
   */
  fake(note, body, st = { calls: 0 }) {
    const wait = this.mode === 'async';
    return (input) => {
      note(input);
      const n = st.calls++;
      return wait ? tick().then(() => body(input, n)) : body(input, n);
    };
  }

  append(messages, source) {
    for (const m of messages || []) this.session.append(contextEvent(m, source));
  }

  /** Disposes the running instance from inside one of its callbacks (dropped after the op). */
  disposeFromCallback() {
    this.disposed = true;
    this.agent.dispose().catch(() => {});
  }

  prefixListener(st) {
    const note = (input) => this.calls.push({ callback: 'prefix', listener: st.index, input });
    return this.fake(note, ({ rest }, n) => {
      const kind = strOr(st.spec, 'kind', 'delegate');
      if (kind === 'append') return [...rest, ...st.held];
      if (kind === 'delegate') return rest;
      if (active(st.spec, n)) {
        if (kind === 'fail') throw new lls.CallbackError(strOr(st.spec, 'message', 'listener failed'));
        if (kind === 'invalid') return st.spec.output;
        if (kind === 'cancel') this.controller.abort();
        if (kind === 'append-event') this.append(st.spec.events, 'plugin');
        if (kind === 'dispose') {
          this.disposeFromCallback();
          return rest;
        }
      }
      return [...st.held, ...rest];
    }, st);
  }

  preStep(st) {
    const note = (input) => this.calls.push({ callback: 'preStep', listener: st.index, input });
    return this.fake(note, (_info, n) => {
      const kind = active(st.spec, n) ? strOr(st.spec, 'kind', 'record') : 'record';
      if (kind === 'inject') this.append(st.spec.messages, 'plugin');
      if (kind === 'fail') throw new lls.CallbackError('pre-step failed');
      if (kind === 'cancel') this.controller.abort();
      if (kind === 'dispose') this.disposeFromCallback();
      return null;
    }, st);
  }

  /** A host token counter (docs/scenarios.md, "Token counters"). */
  makeCounter(spec) {
    const per = isCount(spec.perToken) ? Math.max(spec.perToken, 1) : 4;
    return this.fake(() => { this.counterCalls += 1; }, (item, n) => {
      const kind = active(spec, n) ? strOr(spec, 'kind', 'chars') : 'chars';
      if (kind === 'fail') throw new lls.CallbackError('token counter failed');
      if (kind === 'append-during') this.append(spec.messages, 'host');
      if (kind === 'dispose') this.disposeFromCallback();
      return Math.ceil(chars(item) / per);
    });
  }

  makeSummariser(spec) {
    // The transcript keeps a host summariser's input with the envelope as its size.
    const note = ({ request, digest, provider, model, maxTokens, sharedMessages, prefixLen }) => {
      this.summaries.push(JSON.stringify(request));
      const bytes = Buffer.byteLength(JSON.stringify(request));
      const messageCount = Array.isArray(request && request.messages) ? request.messages.length : null;
      this.calls.push({ callback: 'summariser', input: { digest, provider, model, maxTokens, sharedMessages, prefixLen, bytes, messageCount } });
    };
    return this.fake(note, (_input, n) => {
      const ok = { text: typeof spec.text === 'string' ? spec.text : 'Summary of the work so far.' };
      if ('usage' in spec) ok.usage = spec.usage;
      const kind = active(spec, n) ? strOr(spec, 'kind', 'fixed') : 'fixed';
      if (kind === 'fail') throw new lls.CallbackError('summariser unavailable');
      if (kind === 'cancel') this.controller.abort();
      if (kind === 'cancel') throw new lls.CallbackError('cancelled');
      if (kind === 'append-during') this.append(spec.messages, 'host');
      if (kind === 'dispose') this.disposeFromCallback();
      if (kind === 'empty') return { ...ok, text: '   ' };
      if (kind === 'long') return { ...ok, text: 'very long summary '.repeat(20000) };
      return kind === 'truncated' ? { ...ok, truncated: true } : ok;
    });
  }

  newAgent() {
    const agent = new lls.Agent(this.session, this.options);
    try {
      for (const l of this.listeners) agent.addPrefixListener(this.prefixListener(l));
      for (const l of this.preSteps) agent.addPreStepListener(this.preStep(l));
      if (this.policy !== undefined) agent.setPolicy(this.policy);
      agent.setSummariser(this.makeSummariser(this.summariser));
      if (this.counter !== undefined && this.counter !== null) agent.setTokenCounter(this.makeCounter(this.counter));
    } catch (e) {
      agent.close();
      throw e;
    }
    this.agent = agent;
  }

  needAgent() {
    if (!this.agent) throw new Error('no live agent (disposed?)');
    return this.agent;
  }

  async dropAgent() {
    const a = this.agent;
    this.agent = null;
    if (a) {
      await a.dispose();
      a.close();
    }
  }

  close() {
    if (this.agent) this.agent.close();
    for (const s of this.sessions) s.close();
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
}

/** Runs `f`; a library error is the op's outcome ("error" with its kind, field and message). */
async function attempt(w, f) {
  try {
    await f();
  } catch (e) {
    if (!(e instanceof lls.LlmSessionError)) throw e; // a bug of the driver or the binding
    w.out.outcome = 'error';
    w.out.error = { kind: e.kind, message: e.message };
    if (e.detail && e.detail.field !== undefined && e.detail.field !== null) w.out.error.field = e.detail.field;
  }
}

/** `load`: reopens the session from a log file written from the op's records (or the current log's). */
async function load(w, op) {
  let records = op.records !== undefined
    ? op.records.map((r) => (typeof r === 'string' ? r : JSON.stringify(r)))
    : [JSON.stringify(w.session.info()), ...w.session.events().map((e) => JSON.stringify(e))];
  if (isCount(op.dropLast)) records = records.slice(0, Math.max(0, records.length - op.dropLast));
  for (const e of op.edit || []) {
    let i = records.map((r) => r.includes(e.replace)).lastIndexOf(true);
    if (typeof e.record === 'number') i = e.record < 0 ? records.length + e.record : e.record;
    if (!records[i] || !records[i].includes(e.replace)) throw new Error(`load: record ${i} does not contain ${JSON.stringify(e.replace)}`);
    records[i] = records[i].replace(e.replace, () => e.with);
  }
  await w.dropAgent();
  const file = path.join(w.tmp, `load-${++w.loads}.jsonl`);
  fs.writeFileSync(file, records.map((r) => `${r}\n`).join('') + (typeof op.tail === 'string' ? op.tail : ''));
  await attempt(w, () => {
    const s = lls.Session.openFile(file);
    w.sessions.push(s);
    w.out.loadReport = s.loadReport();
    w.session = s;
  });
  w.newAgent(); // on a failed open the session stays the one before
}

async function runOp(w, op) {
  switch (op.op) {
    case 'turn': return attempt(w, () => w.needAgent().startTurn(userMessage(op.user)));
    case 'inject': return attempt(w, () => w.needAgent().inject(userMessage(op.user)));
    case 'endTurn': return attempt(w, () => w.needAgent().endTurn(strOr(op, 'reason', 'completed')));
    case 'request': {
      if (op.cancelled === true) w.controller.abort();
      const agent = w.needAgent();
      await attempt(w, async () => {
        const r = await agent.nextRequest({ signal: w.controller.signal });
        w.out.request = r.info;
        w.sent.push({ mark: w.summaries.length, envelope: r.json });
      });
      if (w.out.error && w.out.error.kind === 'disposed') w.disposed = true; // dropped after the op
      return undefined;
    }
    case 'respond': {
      const content = typeof op.text === 'string' ? [{ type: 'text', text: op.text }] : [];
      for (const c of op.toolCalls || []) {
        content.push({ type: 'tool-call', id: c.id, name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : '{}' });
      }
      const response = { message: 'message' in op ? op.message : { role: 'assistant', content } };
      if ('usage' in op) response.usage = op.usage;
      return attempt(w, () => w.needAgent().recordResponse(response));
    }
    case 'toolResult': {
      const r = { callId: 'callId' in op ? op.callId : '', ...('content' in op ? { content: op.content } : { text: strOr(op, 'text', 'ok') }) };
      if (op.isError !== undefined) r.isError = op.isError;
      return attempt(w, () => w.needAgent().recordToolResult(r));
    }
    case 'providerError': {
      const input = { message: typeof op.message === 'string' ? op.message : 'provider error', overflow: op.overflow === true };
      const agent = w.needAgent();
      return attempt(w, async () => {
        w.out.providerError = (await agent.providerError(input, { signal: w.controller.signal })).retry ? 'retry' : 'recorded';
      });
    }
    case 'setOptions': {
      const o = { ...w.options };
      if (typeof op.system === 'string') o.system = op.system;
      else if ('system' in op) delete o.system;
      if ('tools' in op) o.tools = op.tools; // as written: [] and {} too
      if ('config' in op) o.config = op.config;
      return attempt(w, () => {
        w.needAgent().setOptions(o);
        w.options = o; // invalid options change nothing
      });
    }
    case 'mutateListener':
      for (const m of w.listeners[isCount(op.index) ? op.index : 0].held) m.content = [{ type: 'text', text: strOr(op, 'text', 'mutated') }];
      return undefined;
    case 'resume': {
      await w.dropAgent();
      if (op.reload !== false) {
        const file = path.join(w.tmp, `reload-${w.sessions.length}.jsonl`);
        fs.writeFileSync(file, w.session.exportJsonl());
        w.session = lls.Session.openFile(file);
        w.sessions.push(w.session);
      }
      w.setListeners(op.listeners, op.preStep);
      if ('system' in op) {
        w.options = { ...w.options, system: op.system };
        if (typeof op.system !== 'string') delete w.options.system;
      }
      return attempt(w, () => w.newAgent());
    }
    case 'secondAgent': return attempt(w, () => new lls.Agent(w.session, w.options).close());
    case 'fork': {
      await w.dropAgent();
      const o = { id: 'forked-session' };
      if (isCount(op.seedLength)) o.seedLength = op.seedLength;
      await attempt(w, () => {
        w.session = w.session.fork(o);
        w.sessions.push(w.session);
      });
      return w.newAgent(); // on error the old session gets a new instance
    }
    case 'compact': {
      const agent = w.needAgent();
      return attempt(w, async () => {
        try {
          w.out.compaction = await agent.compact({ span: op.span, signal: w.controller.signal });
        } catch (e) {
          // The C ABI reports a failed compaction as an error carrying the outcome.
          if (!(e instanceof lls.LlmSessionError && e.detail && typeof e.detail.outcome === 'object')) throw e;
          w.out.compaction = e.detail.outcome;
        }
      });
    }
    case 'setPolicy':
      return attempt(w, () => {
        w.needAgent().setPolicy(op.policy);
        w.policy = op.policy;
      });
    case 'setSummariser':
      w.summariser = op.summariser;
      return w.needAgent().setSummariser(w.makeSummariser(op.summariser));
    case 'setCounter':
      w.counter = op.counter === null ? undefined : op.counter; // null: the built-in estimate; {} is a counter
      if (w.counter !== undefined) return w.needAgent().setTokenCounter(w.makeCounter(w.counter));
      return w.needAgent().clearTokenCounter();
    case 'dispose': return w.dropAgent();
    case 'load': return load(w, op);
    case 'nativeBegin':
      return attempt(w, () => {
        const r = w.needAgent().beginNativeCompaction();
        w.out.native = { ...r, envelope: Buffer.byteLength(r.envelope), body: Buffer.byteLength(r.body) };
        w.sent.push({ mark: w.summaries.length, envelope: r.envelope });
      });
    case 'nativeRecord':
      return attempt(w, () => { w.out.native = w.needAgent().recordNativeCompaction(JSON.stringify(op.body)); });
    case 'nativeFail':
      return attempt(w, () => { w.out.native = w.needAgent().failNativeCompaction(strOr(op, 'error', '')); });
    case 'replay':
      return attempt(w, () => {
        const r = lls.Replay.fromSession(w.session);
        try {
          const order = [];
          let done = 0;
          for (const { mark, envelope } of w.sent) {
            order.push(...w.summaries.slice(done, mark), envelope);
            done = mark;
          }
          order.push(...w.summaries.slice(done));
          const answers = order.map((env) => {
            const a = r.answer(env);
            return { purpose: a.purpose, id: a.id, outcome: a.outcome };
          });
          w.out.replay = { requests: r.info().requests, answers };
        } finally {
          r.close();
        }
      });
    case 'explain':
      return attempt(w, () => {
        const x = w.session.explain();
        w.out.explain = { compactions: x.compactions, compactionTotals: x.compactionTotals,
          requests: { conversation: x.totals.conversationRequests, compaction: x.totals.compactionRequests, notRebuilt: x.totals.notRebuilt } };
      });
    case 'expectLog': case 'expectSummaryRequest': case 'expectPreStep': return undefined; // checked by the Rust runner
    default: throw new Error(`unknown op ${JSON.stringify(op.op)}`);
  }
}

/** Runs one scenario file and compares its transcript with the golden file; throws on a difference. */
async function runFile(file, mode = 'sync') {
  const sc = golden.expand(JSON.parse(fs.readFileSync(file, 'utf8')));
  const w = new World(sc, mode);
  try {
    const ops = [];
    for (const [i, op] of sc.ops.entries()) {
      w.out = {};
      w.controller = new AbortController(); // the op's cancel token, which fakes may trip
      try {
        await runOp(w, op);
      } catch (e) {
        throw new Error(`op ${i} (${JSON.stringify(op.op)}): ${e.message}`, { cause: e });
      } finally {
        if (w.disposed && w.agent) w.agent.close(); // an instance a callback disposed is dropped
        if (w.disposed) w.agent = null;
        w.disposed = false;
      }
      const entry = { i, op: op.op, outcome: 'ok', ...w.out, events: w.session.events().length };
      if (w.calls.length) entry.calls = w.calls;
      if (w.counterCalls) entry.counterCalls = w.counterCalls;
      w.calls = [];
      w.counterCalls = 0;
      ops.push(entry);
    }
    const final = { session: golden.maskedRecord(w.session.info()), events: w.session.events().map(golden.maskedRecord), history: w.session.history() };
    const transcript = golden.maskStrings({ transcript: 1, scenario: path.basename(file), name: strOr(sc, 'name', '(unnamed)'), ops, final }, w.tmp);
    const out = path.join(REPO, 'target', 'tmp', `scenario-transcripts-node-${mode}`);
    golden.settle(file, transcript, out, mode);
    // The final log verifies through the binding (every request rebuilt from the log alone).
    const log = path.join(w.tmp, 'verify.jsonl');
    fs.writeFileSync(log, w.session.exportJsonl());
    lls.verifyFile(log);
  } finally {
    w.close();
  }
}

module.exports = { runFile };
