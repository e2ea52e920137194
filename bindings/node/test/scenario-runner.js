'use strict';
// A scenario runner for the Node binding: the format of docs/scenarios.md, the same files the
// Rust runner (tests/scenarios.rs) runs. Declarative listeners and summarisers become JS
// functions; with `mode: 'async'` every one of them is an async function that awaits a timer
// turn before answering, so the pending-reply path runs for every callback.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { isDeepStrictEqual } = require('util');
const lls = require('..');
const golden = require('./golden');

const REPO = path.resolve(__dirname, '..', '..', '..');

function scenarioFiles() {
  if (process.env.LLMSESSION_SCENARIO_FILE) return [path.resolve(process.env.LLMSESSION_SCENARIO_FILE)];
  const dirs = [path.join(REPO, 'tests', 'scenarios')];
  if (process.env.LLMSESSION_SCENARIOS) dirs.push(path.resolve(process.env.LLMSESSION_SCENARIOS));
  const files = [];
  for (const d of dirs) {
    const inDir = fs.readdirSync(d).filter((f) => f.endsWith('.json')).sort();
    files.push(...inDir.map((f) => path.join(d, f)));
  }
  return files;
}

/** RFC 6901 JSON Pointer lookup: `{found, value}`. */
function pointer(doc, p) {
  if (p === '') return { found: true, value: doc };
  if (!p.startsWith('/')) return { found: false };
  let cur = doc;
  for (const raw of p.slice(1).split('/')) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(cur)) {
      if (!/^(0|[1-9][0-9]*)$/.test(key) || Number(key) >= cur.length) return { found: false };
      cur = cur[Number(key)];
    } else if (cur && typeof cur === 'object' && Object.prototype.hasOwnProperty.call(cur, key)) {
      cur = cur[key];
    } else {
      return { found: false };
    }
  }
  return { found: true, value: cur };
}

function isMatcher(want) {
  return want && typeof want === 'object' && !Array.isArray(want) && Object.keys(want).length > 0 &&
    Object.keys(want).every((k) => k.startsWith('$'));
}

function matches(got, want) {
  if (isMatcher(want)) {
    return Object.entries(want).every(([k, arg]) => {
      switch (k) {
        case '$contains': return got.found && typeof got.value === 'string' && got.value.includes(arg);
        case '$absent': return (!got.found) === (arg !== false);
        case '$gt': return got.found && typeof got.value === 'number' && got.value > arg;
        case '$lt': return got.found && typeof got.value === 'number' && got.value < arg;
        default: return false;
      }
    });
  }
  return got.found && isDeepStrictEqual(got.value, want);
}

function clip(s) {
  return s.length > 300 ? `${s.slice(0, 300)}… (${s.length} characters)` : s;
}

function checkPointers(what, doc, ptrs) {
  if (!ptrs || typeof ptrs !== 'object') return;
  for (const [p, want] of Object.entries(ptrs)) {
    const got = pointer(doc, p);
    if (!matches(got, want)) {
      throw new Error(`${what}: at ${p}: expected ${JSON.stringify(want)}, got ${got.found ? clip(JSON.stringify(got.value)) : '(absent)'}`);
    }
  }
}

function userMessage(v) {
  return typeof v === 'string' ? { role: 'user', content: [{ type: 'text', text: v }] } : v;
}

function contextEvent(message, source) {
  return { type: 'user/message', data: { message, source }, surfaceOp: 'append' };
}

function timesOk(spec, calls) {
  return typeof spec.times !== 'number' || calls < spec.times;
}

// Reported differences of this binding from the golden transcripts (see golden.settle).
const KNOWN_DIFFERENCES = {
  'dispose_in_callbacks.json': {
    fromOp: 16,
    why: 'a token counter that disposes the instance ends the measurement at once (its count is ' +
      'discarded), so no compaction starts; the Rust runner writes compaction/start and ' +
      'compaction/end{cancelled} before the disposal is noticed',
  },
};

const tick = () => new Promise((resolve) => setTimeout(resolve, 1));

function errStr(e) {
  return e instanceof lls.LlmSessionError ? `[${e.kind}] ${e.message}` : String(e && e.stack ? e.stack : e);
}

class World {
  constructor(sc, mode, tmp) {
    this.mode = mode;
    this.tmp = tmp;
    this.session = lls.Session.memory({ id: 'scenario-session' });
    this.sessions = [this.session];
    this.agent = null;
    this.options = { ...sc.agent, checkRequests: true };
    this.listeners = [];
    this.preSteps = [];
    this.preStepSeen = [];
    this.summaries = [];
    this.summariser = sc.summariser;
    this.policy = sc.policy;
    this.counter = sc.counter; // the host token counter's spec (counter, setCounter)
    this.disposed = false; // a callback disposed the instance during the running op
    this.loads = 0;
    this.requests = [];
    this.requestMarks = [];
    this.lastRequest = null;
    this.controller = new AbortController();
    this.journal = { calls: [], counterCalls: 0 }; // what the fakes received during the op
    this.out = {}; // what the running op produced, for its transcript entry
    this.setListeners(sc.listeners, sc.preStep);
    this.newAgent();
  }

  setListeners(listeners, pre) {
    const mk = (v, index) => ({ spec: v, index, calls: 0, held: JSON.parse(JSON.stringify(v.messages || [])) });
    if (Array.isArray(listeners)) this.listeners = listeners.map(mk);
    if (Array.isArray(pre)) this.preSteps = pre.map(mk);
  }

  /** Wraps a synchronous body as the mode asks: as is, or as an async function that awaits first. */
  wrap(note, body) {
    if (this.mode === 'async') {
      return async (input, ctx) => {
        note(input);
        await tick();
        return body(input, ctx);
      };
    }
    return (input, ctx) => {
      note(input);
      return body(input, ctx);
    };
  }

  prefixListener(st) {
    const note = (input) => this.journal.calls.push({ callback: 'prefix', listener: st.index, input });
    return this.wrap(note, ({ rest }) => {
      const n = st.calls++;
      const active = timesOk(st.spec, n);
      const kind = st.spec.kind || 'delegate';
      const held = st.held;
      switch (kind) {
        case 'prepend': return [...held, ...rest];
        case 'append': return [...rest, ...held];
        case 'delegate': return rest;
        default: break;
      }
      if (active) {
        switch (kind) {
          case 'fail': throw new lls.CallbackError(st.spec.message || 'listener failed');
          case 'invalid': return st.spec.output;
          case 'cancel':
            this.controller.abort();
            return [...held, ...rest];
          case 'dispose':
            this.disposeFromCallback();
            return rest;
          case 'append-event':
            for (const m of st.spec.events || []) this.session.append(contextEvent(m, 'plugin'));
            return [...held, ...rest];
          default: break;
        }
      }
      return [...held, ...rest];
    });
  }

  preStep(st) {
    const note = (input) => this.journal.calls.push({ callback: 'preStep', listener: st.index, input });
    return this.wrap(note, (info) => {
      const n = st.calls++;
      const active = timesOk(st.spec, n);
      this.preStepSeen.push(info);
      switch (active ? st.spec.kind || 'record' : 'record') {
        case 'inject':
          for (const m of st.spec.messages || []) this.session.append(contextEvent(m, 'plugin'));
          return null;
        case 'fail': throw new lls.CallbackError('pre-step failed');
        case 'cancel':
          this.controller.abort();
          return null;
        case 'dispose':
          this.disposeFromCallback();
          return null;
        default: return null;
      }
    });
  }

  /** Disposes the running instance from inside one of its callbacks (dropped after the op). */
  disposeFromCallback() {
    this.disposed = true;
    this.agent.dispose().catch(() => {});
  }

  /** A host token counter (docs/scenarios.md, "Token counters"). */
  makeCounter(spec) {
    let calls = 0;
    const per = typeof spec.perToken === 'number' && spec.perToken >= 1 ? spec.perToken : 4;
    const chars = (v) => {
      if (typeof v === 'string') return [...v].length;
      if (Array.isArray(v)) return v.reduce((n, x) => n + chars(x), 0);
      if (v && typeof v === 'object') return Object.values(v).reduce((n, x) => n + chars(x), 0);
      return 0;
    };
    const note = () => { this.journal.counterCalls += 1; };
    return this.wrap(note, (item) => {
      const n = calls++;
      const active = timesOk(spec, n);
      const count = Math.ceil(chars(item) / per);
      switch (active ? spec.kind || 'chars' : 'chars') {
        case 'fail': throw new lls.CallbackError('token counter failed');
        case 'append-during':
          for (const m of spec.messages || []) this.session.append(contextEvent(m, 'host'));
          return count;
        case 'dispose':
          this.disposeFromCallback();
          return count;
        default: return count;
      }
    });
  }

  makeSummariser(spec) {
    let calls = 0;
    const note = (input) => {
      const json = JSON.stringify(input.request);
      const input2 = { digest: input.digest, provider: input.provider, model: input.model, maxTokens: input.maxTokens,
        sharedMessages: input.sharedMessages, prefixLen: input.prefixLen, bytes: Buffer.byteLength(json),
        messageCount: input.request && Array.isArray(input.request.messages) ? input.request.messages.length : null };
      this.journal.calls.push({ callback: 'summariser', input: input2 });
    };
    return this.wrap(note, (input) => {
      this.summaries.push({ json: JSON.stringify(input.request), request: input.request, sharedMessages: input.sharedMessages });
      const n = calls++;
      const active = timesOk(spec, n);
      const text = typeof spec.text === 'string' ? spec.text : 'Summary of the work so far.';
      const ok = { text };
      if (spec.usage) ok.usage = spec.usage;
      switch (active ? spec.kind || 'fixed' : 'fixed') {
        case 'fail': throw new lls.CallbackError('summariser unavailable');
        case 'empty': return { ...ok, text: '   ' };
        case 'truncated': return { ...ok, truncated: true };
        case 'long': return { ...ok, text: 'very long summary '.repeat(20000) };
        case 'cancel':
          this.controller.abort();
          throw new lls.CallbackError('cancelled');
        case 'append-during':
          for (const m of spec.messages || []) this.session.append(contextEvent(m, 'host'));
          return ok;
        case 'dispose':
          this.disposeFromCallback();
          return ok;
        default: return ok;
      }
    });
  }

  newAgent() {
    const agent = new lls.Agent(this.session, this.options);
    try {
      for (const l of this.listeners) agent.addPrefixListener(this.prefixListener(l));
      for (const l of this.preSteps) agent.addPreStepListener(this.preStep(l));
      if (this.policy !== undefined) agent.setPolicy(this.policy);
      agent.setSummariser(this.makeSummariser(this.summariser || { kind: 'fixed' }));
      if (this.counter) agent.setTokenCounter(this.makeCounter(this.counter));
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
    if (this.agent) {
      const a = this.agent;
      this.agent = null;
      await a.dispose();
      a.close();
    }
  }

  events() {
    return this.session.events();
  }

  close() {
    if (this.agent) this.agent.close();
    this.agent = null;
    for (const s of this.sessions) s.close();
  }
}

function checkError(w, op, error) {
  record(w, error);
  const want = op.expectError;
  if (!want) {
    if (error) throw new Error(`unexpected error: ${errStr(error)}`);
    return;
  }
  if (!error) throw new Error(`expected an error ${JSON.stringify(want)}, got success`);
  if (!(error instanceof lls.LlmSessionError)) throw error;
  if (want.kind && want.kind !== error.kind) throw new Error(`expected error kind ${want.kind}, got ${errStr(error)}`);
  if (want.contains && !error.message.includes(want.contains)) {
    throw new Error(`expected the error message to contain ${JSON.stringify(want.contains)}, got ${errStr(error)}`);
  }
}

/** The op's outcome for the transcript: "ok", or "error" with the error's kind, field, message. */
function record(w, error) {
  if (!error || !(error instanceof lls.LlmSessionError)) {
    w.out.outcome = 'ok';
    return;
  }
  w.out.outcome = 'error';
  w.out.error = { kind: error.kind, message: error.message };
  if (error.detail && error.detail.field !== undefined && error.detail.field !== null) w.out.error.field = error.detail.field;
}

/** Runs `f` and hands its error (if any) to checkError; other failures propagate. */
async function attempt(w, op, f) {
  let error = null;
  try {
    await f();
  } catch (e) {
    if (!(e instanceof lls.LlmSessionError)) throw e;
    error = e;
  }
  checkError(w, op, error);
}

function messagesOf(req) {
  return Array.isArray(req.messages) ? req.messages : [];
}

function checkRequest(req, prev, exp) {
  checkPointers('request', req, exp.pointers);
  if (exp.equals !== undefined && !isDeepStrictEqual(exp.equals, req)) {
    throw new Error(`request differs:\n  expected ${JSON.stringify(exp.equals)}\n  got      ${JSON.stringify(req)}`);
  }
  if (typeof exp.messageCount === 'number' && messagesOf(req).length !== exp.messageCount) {
    throw new Error(`expected ${exp.messageCount} messages, got ${messagesOf(req).length}: ${JSON.stringify(req.messages)}`);
  }
  for (const p of exp.absent || []) {
    const got = pointer(req, p);
    if (got.found) throw new Error(`expected ${p} to be absent, got ${JSON.stringify(got.value)}`);
  }
  if (Array.isArray(exp.historyExcludes)) {
    const plen = exp.prefixLen || 0;
    const hist = messagesOf(req).slice(plen).map((m) => JSON.stringify(m)).join('');
    for (const t of exp.historyExcludes) if (hist.includes(t)) throw new Error(`history contains ${JSON.stringify(t)}`);
  }
  if (exp.extendsPrevious === true) {
    if (!prev) throw new Error('extendsPrevious: there is no previous request');
    for (const k of ['provider', 'model', 'system', 'tools', 'temperature', 'maxTokens', 'reasoningEffort', 'stop']) {
      if (!isDeepStrictEqual(prev[k], req[k])) {
        throw new Error(`extendsPrevious: field ${k} differs: ${JSON.stringify(prev[k])} vs ${JSON.stringify(req[k])}`);
      }
    }
    const a = messagesOf(prev);
    const b = messagesOf(req);
    if (b.length < a.length || !isDeepStrictEqual(a, b.slice(0, a.length))) {
      throw new Error(`extendsPrevious: the previous request's ${a.length} messages are not a prefix of this one's ${b.length}`);
    }
  }
}

/** Runs one op; an instance a callback disposed during it is dropped afterwards. */
async function runOp(w, op) {
  try {
    return await runOpInner(w, op);
  } finally {
    if (w.disposed) {
      w.disposed = false;
      if (w.agent) {
        w.agent.close();
        w.agent = null;
      }
    }
  }
}

/**
 * `load`: reopens the session from a log file written from the op's records, or the current
 * log's, changed as the op says (docs/scenarios.md, "Loading a log").
 */
async function load(w, op) {
  let records;
  if (op.records !== undefined) {
    if (!Array.isArray(op.records)) throw new Error('load: records must be an array');
    records = op.records.map((r) => (typeof r === 'string' ? r : JSON.stringify(r)));
  } else {
    records = [JSON.stringify(w.session.info()), ...w.events().map((e) => JSON.stringify(e))];
  }
  if (typeof op.dropLast === 'number') records = records.slice(0, Math.max(0, records.length - op.dropLast));
  for (const e of op.edit || []) {
    let i;
    if (typeof e.record === 'number') i = e.record < 0 ? records.length + e.record : e.record;
    else i = records.map((r) => r.includes(e.replace)).lastIndexOf(true);
    if (i < 0 || i >= records.length) throw new Error(`load: there is no record ${i} to edit`);
    if (!records[i].includes(e.replace)) throw new Error(`load: record ${i} does not contain ${JSON.stringify(e.replace)}`);
    records[i] = records[i].replace(e.replace, () => e.with);
  }
  let text = records.map((r) => `${r}\n`).join('');
  if (typeof op.tail === 'string') text += op.tail;
  await w.dropAgent();
  w.loads += 1;
  const file = path.join(w.tmp, `load-${w.loads}.jsonl`);
  fs.writeFileSync(file, text);
  let s;
  try {
    s = lls.Session.openFile(file);
  } catch (e) {
    if (!(e instanceof lls.LlmSessionError)) throw e;
    // The session stays the one before; a new instance drives it.
    w.newAgent();
    return checkError(w, op, e);
  }
  w.sessions.push(s);
  w.out.loadReport = s.loadReport();
  checkPointers('load report', w.out.loadReport, op.expectReport);
  w.session = s;
  w.lastRequest = null;
  w.newAgent();
  return checkError(w, op, null);
}

async function runOpInner(w, op) {
  switch (op.op) {
    case 'turn':
      return attempt(w, op, () => w.needAgent().startTurn(userMessage(op.user)));
    case 'request': {
      let signal;
      if (op.cancelled === true) {
        const c = new AbortController();
        c.abort();
        signal = c.signal;
      } else {
        w.controller = new AbortController();
        signal = w.controller.signal;
      }
      const agent = w.needAgent();
      let error = null;
      try {
        const r = await agent.nextRequest({ signal });
        w.out.request = r.info;
        const exp = op.expect || {};
        if (typeof exp.prefixLen === 'number' && r.info.prefixLen !== exp.prefixLen) {
          throw new Error(`expected prefixLen ${exp.prefixLen}, got ${r.info.prefixLen}`);
        }
        if (typeof exp.sharedMessages === 'number' && r.info.sharedMessages !== exp.sharedMessages) {
          throw new Error(`expected sharedMessages ${exp.sharedMessages}, got ${r.info.sharedMessages}`);
        }
        checkRequest(r.envelope, w.lastRequest, exp);
        w.requests.push(r.envelope);
        w.requestMarks.push(w.summaries.length);
        w.lastRequest = r.envelope;
      } catch (e) {
        if (!(e instanceof lls.LlmSessionError)) throw e;
        error = e;
        if (e.kind === 'disposed') {
          agent.close();
          if (w.agent === agent) w.agent = null;
        }
      }
      return checkError(w, op, error);
    }
    case 'respond': {
      let message = op.message;
      if (!message) {
        const content = [];
        if (typeof op.text === 'string') content.push({ type: 'text', text: op.text });
        for (const c of op.toolCalls || []) {
          content.push({ type: 'tool-call', id: c.id, name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : '{}' });
        }
        message = { role: 'assistant', content };
      }
      const response = { message };
      if (op.usage) response.usage = op.usage;
      return attempt(w, op, () => w.needAgent().recordResponse(response));
    }
    case 'toolResult': {
      const r = { callId: op.callId || '' };
      if (op.content) r.content = op.content;
      else r.text = typeof op.text === 'string' ? op.text : 'ok';
      if (op.isError !== undefined) r.isError = op.isError;
      return attempt(w, op, () => w.needAgent().recordToolResult(r));
    }
    case 'inject':
      return attempt(w, op, () => w.needAgent().inject(userMessage(op.user)));
    case 'providerError': {
      w.controller = new AbortController();
      const input = { message: typeof op.message === 'string' ? op.message : 'provider error', overflow: op.overflow === true };
      const agent = w.needAgent();
      return attempt(w, op, async () => {
        const out = await agent.providerError(input, { signal: w.controller.signal });
        const got = out.retry ? 'retry' : 'recorded';
        w.out.providerError = got;
        if (op.expectOutcome && op.expectOutcome !== got) throw new Error(`expected outcome ${op.expectOutcome}, got ${got}`);
      });
    }
    case 'endTurn':
      return attempt(w, op, () => w.needAgent().endTurn(op.reason || 'completed'));
    case 'setOptions': {
      const o = { ...w.options };
      if ('system' in op) {
        if (typeof op.system === 'string') o.system = op.system;
        else delete o.system;
      }
      if (op.tools) o.tools = op.tools;
      if (op.config) o.config = op.config;
      // Invalid options are the op's error (the library names them) and change nothing.
      return attempt(w, op, () => {
        w.needAgent().setOptions(o);
        w.options = o;
      });
    }
    case 'mutateListener': {
      const l = w.listeners[op.index || 0];
      if (!l) throw new Error('no such listener');
      for (const m of l.held) m.content = [{ type: 'text', text: op.text || 'mutated' }];
      return undefined;
    }
    case 'resume': {
      await w.dropAgent();
      if (op.reload !== false) {
        // Serialise the log (header record + events) and reopen it from storage.
        const file = path.join(w.tmp, `reload-${w.sessions.length}.jsonl`);
        fs.writeFileSync(file, w.session.exportJsonl());
        w.session = lls.Session.openFile(file);
        w.sessions.push(w.session);
      }
      w.setListeners(op.listeners, op.preStep);
      if ('system' in op) {
        if (typeof op.system === 'string') w.options = { ...w.options, system: op.system };
        else {
          w.options = { ...w.options };
          delete w.options.system;
        }
      }
      w.lastRequest = null;
      let error = null;
      try {
        w.newAgent();
      } catch (e) {
        error = e;
      }
      record(w, error);
      if (!op.expectError && error) throw error;
      if (op.expectError && !error) throw new Error('expected resume to fail');
      return undefined;
    }
    case 'secondAgent':
      return attempt(w, op, () => {
        const a = new lls.Agent(w.session, w.options);
        a.close();
      });
    case 'fork': {
      await w.dropAgent();
      const o = { id: 'forked-session' };
      if (typeof op.seedLength === 'number') o.seedLength = op.seedLength;
      let forked;
      try {
        forked = w.session.fork(o);
      } catch (e) {
        if (!(e instanceof lls.LlmSessionError)) throw e;
        checkError(w, op, e);
        w.newAgent();
        return undefined;
      }
      w.session = forked;
      w.sessions.push(forked);
      w.lastRequest = null;
      w.newAgent();
      return checkError(w, op, null);
    }
    case 'compact': {
      w.controller = new AbortController();
      const agent = w.needAgent();
      let outcome = null;
      let error = null;
      try {
        outcome = await agent.compact({ span: op.span, signal: w.controller.signal });
      } catch (e) {
        if (!(e instanceof lls.LlmSessionError)) throw e;
        // A failed compaction is an error carrying the outcome (the Rust API returns it).
        if (e.detail && e.detail.outcome && typeof e.detail.outcome === 'object') outcome = e.detail.outcome;
        else error = e;
      }
      if (outcome) w.out.compaction = outcome;
      if (outcome && op.expectOutcome && outcome.outcome !== op.expectOutcome) {
        throw new Error(`expected compaction outcome ${op.expectOutcome}, got ${outcome.outcome} (${outcome.error})`);
      }
      return checkError(w, op, error);
    }
    case 'setPolicy':
      return attempt(w, op, () => {
        w.needAgent().setPolicy(op.policy);
        w.policy = op.policy;
      });
    case 'setSummariser':
      w.summariser = op.summariser;
      w.needAgent().setSummariser(w.makeSummariser(op.summariser));
      return undefined;
    case 'dispose':
      return w.dropAgent();
    case 'setCounter':
      w.counter = op.counter || undefined;
      if (w.counter) w.needAgent().setTokenCounter(w.makeCounter(w.counter));
      else w.needAgent().clearTokenCounter();
      return undefined;
    case 'load':
      return load(w, op);
    case 'expectLog':
      return expectLog(w, op);
    case 'expectSummaryRequest':
      return expectSummary(w, op);
    case 'expectPreStep': {
      const i = op.index || 0;
      const got = w.preStepSeen[i];
      if (!got) throw new Error(`pre-step call ${i} did not happen (${w.preStepSeen.length} calls)`);
      return checkPointers('pre-step', got, op.pointers);
    }
    default:
      throw new Error(`unknown op ${JSON.stringify(op.op)}`);
  }
}

function expectLog(w, op) {
  const events = w.events();
  if (Array.isArray(op.headers)) {
    const got = events.filter((e) => e.type === 'request/header');
    if (got.length !== op.headers.length) {
      throw new Error(`expected ${op.headers.length} header snapshots, got ${got.length}: ${JSON.stringify(got.map((e) => e.data.reason))}`);
    }
    got.forEach((g, i) => checkPointers('header', g.data, op.headers[i]));
  }
  if (op.count) {
    for (const [ty, n] of Object.entries(op.count)) {
      const got = events.filter((e) => e.type === ty).length;
      if (got !== n) throw new Error(`expected ${n} ${ty} events, got ${got}`);
    }
  }
  if (Array.isArray(op.last)) {
    if (events.length < op.last.length) throw new Error('fewer events than expected');
    const tail = events.slice(events.length - op.last.length);
    tail.forEach((g, i) => checkPointers('event', g, op.last[i]));
  }
  if (typeof op.compositions === 'number') {
    const got = w.listeners.length ? w.listeners[0].calls : 0;
    if (got !== op.compositions) throw new Error(`expected ${op.compositions} compositions (calls of the first listener), got ${got}`);
  }
  const history = w.session.history();
  const h = JSON.stringify(history);
  for (const t of op.historyExcludes || []) if (h.includes(t)) throw new Error(`history contains ${JSON.stringify(t)}`);
  for (const t of op.historyIncludes || []) if (!h.includes(t)) throw new Error(`history does not contain ${JSON.stringify(t)}: ${clip(h)}`);
  if (op.historyPointers) checkPointers('history', history, op.historyPointers);
  if (typeof op.historyLength === 'number' && history.length !== op.historyLength) {
    throw new Error(`expected ${op.historyLength} history messages, got ${history.length}`);
  }
}

function expectSummary(w, op) {
  const seen = w.summaries;
  if (typeof op.count === 'number') {
    if (seen.length !== op.count) throw new Error(`expected ${op.count} summarisation requests so far, got ${seen.length}`);
    if (Object.keys(op).every((k) => k === 'op' || k === 'count')) return;
  }
  let i = typeof op.index === 'number' ? op.index : 0;
  if (i < 0) i += seen.length;
  const req = seen[i];
  if (!req) throw new Error(`summarisation request ${i} was not sent (${seen.length} sent)`);
  const v = req.request;
  checkPointers('summary request', v, op.pointers);
  for (const [key, want] of [['includes', true], ['excludes', false]]) {
    for (const t of op[key] || []) {
      if (req.json.includes(t) !== want) throw new Error(`summary request ${i} ${want ? 'does not contain' : 'contains'} ${JSON.stringify(t)}`);
    }
  }
  const replays = op.replaysLastRequest === true;
  const extendsLast = op.extendsLastRequest === true;
  if (replays || extendsLast) {
    let k = -1;
    for (let j = w.requestMarks.length - 1; j >= 0; j--) {
      if (w.requestMarks[j] <= i) {
        k = j;
        break;
      }
    }
    if (k < 0) throw new Error('no routed request precedes this summarisation request');
    const last = w.requests[k];
    checkSummaryEnvelope(v, last);
    const m = messagesOf(v);
    const l = messagesOf(last);
    const body = m.slice(0, m.length - 1);
    const [short, long, shared] = replays ? [body, l, body.length] : [l, body, l.length];
    const sb = short.map((x) => JSON.stringify(x));
    const lb = long.slice(0, short.length).map((x) => JSON.stringify(x));
    if (short.length > long.length || !isDeepStrictEqual(sb, lb)) {
      throw new Error(`the summary request without its last message (${body.length} messages) and the last routed request (${l.length} messages) do not share the ${replays ? "summary's" : "routed request's"} leading messages`);
    }
    if (req.sharedMessages !== shared) throw new Error(`sharedMessages is ${req.sharedMessages}, expected ${shared}`);
    const lastm = m[m.length - 1];
    if (!lastm || lastm.role !== 'user' || !JSON.stringify(lastm).includes('compaction engine')) {
      throw new Error(`the last message is not the instruction: ${JSON.stringify(lastm)}`);
    }
  }
}

/**
 * Every envelope field of a summarisation request but its messages, compared with the routed
 * request it replays: the routed call config with maxTokens replaced by the summary budget and
 * the model by the target's; a target of another provider keeps only the vocabulary's fields
 * (no pass-through field). System, tools and the session id are the routed request's.
 */
function checkSummaryEnvelope(summary, routed) {
  const want = { ...routed };
  for (const k of ['messages', 'turn', 'step']) delete want[k];
  if (!Number.isInteger(summary.maxTokens)) throw new Error('summary request: maxTokens (the summary budget) is missing');
  want.maxTokens = summary.maxTokens;
  want.purpose = 'compaction';
  if (summary.provider !== routed.provider) {
    const kept = new Set(['provider', 'model', 'reasoningEffort', 'temperature', 'maxTokens', 'stop', 'system', 'tools', 'sessionId', 'purpose']);
    for (const k of Object.keys(want)) if (!kept.has(k)) delete want[k];
    want.provider = summary.provider;
  }
  want.model = summary.model;
  const keys = new Set([...Object.keys(want), ...Object.keys(summary)]);
  keys.delete('messages');
  for (const k of keys) {
    if (!isDeepStrictEqual(want[k], summary[k])) {
      throw new Error(`summary request field ${k} is ${JSON.stringify(summary[k])} but the routed request gives ${JSON.stringify(want[k])}`);
    }
  }
}

/**
 * Verifies the final log, then two damaged copies (which must fail, naming the line of the
 * record whose chained digest breaks, or the step whose request differs).
 */
function verifyAndDamage(w, name) {
  const header = w.session.info();
  const events = w.events();
  const write = (evs, tag) => {
    const file = path.join(w.tmp, `verify-${tag}.jsonl`);
    fs.writeFileSync(file, [header, ...evs].map((e) => JSON.stringify(e)).join('\n') + '\n');
    return file;
  };
  let report;
  try {
    const file = path.join(w.tmp, 'verify-final.jsonl');
    fs.writeFileSync(file, w.session.exportJsonl());
    report = lls.verifyFile(file);
  } catch (e) {
    throw new Error(`${name}: verify failed on the final log: ${errStr(e)}`);
  }
  if (report.requests === 0) return;
  const mustFail = (evs, tag, what) => {
    try {
      lls.verifyFile(write(evs, tag));
    } catch (e) {
      if (!(e instanceof lls.LlmSessionError)) throw e;
      if (e.detail.step === undefined && e.detail.line === undefined) {
        throw new Error(`${name}: verify failure names neither the line nor the step: ${errStr(e)}`);
      }
      return;
    }
    throw new Error(`${name}: verify passed on a copy ${what}`);
  };
  const i = events.findIndex((e) => e.type === 'request/header' && e.data.header && e.data.header.messagePrefix !== undefined);
  if (i >= 0) {
    const bad = JSON.parse(JSON.stringify(events));
    delete bad[i].data.header.messagePrefix;
    mustFail(bad, 'noprefix', 'whose prefix was removed from the header');
  }
  let lastStep = -1;
  events.forEach((e, j) => {
    if (e.type === 'step/start') lastStep = j;
  });
  const u = events.slice(0, lastStep).findIndex((e) => e.type === 'user/message');
  if (u >= 0) {
    const bad = events.filter((_, j) => j !== u);
    mustFail(bad, 'dropped', `with event ${u} dropped`);
  }
}

/** Runs one scenario file; throws an Error naming the op that failed. */
async function runFile(file, mode = 'sync') {
  const sc = golden.expand(JSON.parse(fs.readFileSync(file, 'utf8')));
  const name = sc.name || '(unnamed)';
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-scenario-'));
  let w;
  try {
    w = new World(sc, mode, tmp);
    const ops = sc.ops;
    if (!Array.isArray(ops)) throw new Error('scenario without ops');
    const entries = [];
    for (let i = 0; i < ops.length; i++) {
      w.out = {};
      try {
        await runOp(w, ops[i]);
      } catch (e) {
        const err = new Error(`op ${i} (${JSON.stringify(ops[i].op)}): ${e.message}`, { cause: e });
        throw err;
      }
      const entry = { ...w.out, i, op: ops[i].op };
      if (entry.outcome === undefined) entry.outcome = 'ok';
      entry.events = w.events().length;
      if (w.journal.calls.length) entry.calls = w.journal.calls;
      if (w.journal.counterCalls) entry.counterCalls = w.journal.counterCalls;
      w.journal = { calls: [], counterCalls: 0 };
      entries.push(entry);
    }
    const transcript = golden.maskStrings({
      transcript: 1,
      scenario: path.basename(file),
      name,
      ops: entries,
      final: { session: golden.maskedRecord(w.session.info()), events: w.events().map(golden.maskedRecord), history: w.session.history() },
    }, tmp);
    const out = path.join(REPO, 'target', 'tmp', `scenario-transcripts-node-${mode}`);
    golden.settle(file, transcript, out, mode, KNOWN_DIFFERENCES[path.basename(file)]);
    verifyAndDamage(w, name);
  } finally {
    if (w) w.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

module.exports = { scenarioFiles, runFile, pointer, matches };
