'use strict';
// Agents: an agent instance over a session (Agent): its options, policy, tokenizer and
// callbacks; turns; the next request (nextRequest) or provider body (setRenderer, nextBody, the
// hot path); recording responses (recordBody, recordStream, recordResponse), tool results and
// provider errors; compaction, measure, stats; dispose and close. The rule for where a call runs
// (main thread or koffi worker) is `_async`'s.

const { C, S, shortString } = require('./native');
const { Status, check, takeError, outOfOrder, closedError } = require('./errors');
const { utf8, bytesArg, jsonBuf, takeBytes, takeString, callJson, seqNumber } = require('./bytes');
const { lend, Scratch, readRecorded, readRequestInfo, Body, builtRequest } = require('./body');
const { runAsync, newOp, endOp, finishOp } = require('./operation');
const { register, freeTrampoline, encoders } = require('./callbacks');
const { finalizer, livePtr } = require('./handle');
const { Session } = require('./session');
const { Stream } = require('./stream');

function userMessage(m) {
  return typeof m === 'string' ? { role: 'user', content: [{ type: 'text', text: m }] } : m;
}

const SETTLED = Promise.resolve();

/** An agent instance over a session. */
class Agent {
  /**
   * A new agent instance over `session`. Options without `config` (`{}`) wake the session: the
   * agent sends what its last request carried (a child's: its parent's; see tree.js). `adopt`
   * (internal) is an agent pointer the library already made (`lls_agent_spawn`).
   */
  constructor(session, options, adopt) {
    if (!(session instanceof Session)) throw new TypeError('Agent needs a Session');
    const out = [adopt || null];
    if (!adopt) {
      const b = jsonBuf(options);
      const err = [null];
      check(C.lls_agent_new(session._ptr, b, b.length, out, err), err);
    }
    this.session = session;
    this._core = {
      ptr: out[0],
      op: null,
      busy: false,
      callbacks: 0,
      scratch: new Scratch(),
      unbusy: null,
      free: (p) => C.lls_agent_free(p),
    };
    const core = this._core;
    core.unbusy = () => {
      core.busy = false;
    };
    finalizer.register(this, this._core, this);
  }

  static create(session, options) {
    return new Agent(session, options);
  }

  get _ptr() {
    return livePtr(this._core, 'agent');
  }

  /** The pointer, for a synchronous call: refused while an asynchronous call runs. */
  _sync(what) {
    const p = this._ptr;
    if (this._core.busy) {
      throw outOfOrder(`${what}: an asynchronous call on this agent is running (await it first)`);
    }
    return p;
  }

  _call(what, fn, ...args) {
    const err = [null];
    check(fn(this._sync(what), ...args, err), err);
  }

  _json(what, fn) {
    return callJson(fn, this._sync(what));
  }

  /**
   * Runs one operation that may call back into JS. The rule (docs/node.md, "Threads"): while the
   * agent has no JS callbacks registered (prefix or pre-step listeners, summariser, token
   * counter), the library call cannot wait for the main thread, so it runs right here, on the
   * main thread, without a worker hop; with callbacks, or with `{worker: true}`, it runs on a
   * koffi worker thread and callbacks are queued to the main thread. `call(ptr, op)` runs the
   * library function with `op.run(fn, args)` (a status, or a Promise of one).
   */
  async _async(what, options, call) {
    const ptr = this._ptr;
    const core = this._core;
    if (core.busy) throw outOfOrder(`${what}: an asynchronous call on this agent is running (await it first)`);
    const sync = !core.callbacks && !(options && options.worker);
    core.busy = true;
    let op;
    try {
      op = newOp(core, options && options.signal, sync);
    } catch (e) {
      core.busy = false;
      throw e;
    }
    try {
      return await call(ptr, op);
    } finally {
      core.busy = false;
      endOp(core, op);
    }
  }

  setOptions(options) {
    const b = jsonBuf(options);
    this._call('setOptions', C.lls_agent_set_options, b, b.length);
  }

  setPolicy(policy) {
    const b = jsonBuf(policy === undefined ? null : policy);
    this._call('setPolicy', C.lls_agent_set_policy, b, b.length);
  }

  setTokenizer(file) {
    const b = utf8(file);
    this._call('setTokenizer', C.lls_agent_set_tokenizer, b, b.length);
  }

  clearTokenCounter() {
    this._call('clearTokenCounter', C.lls_agent_clear_token_counter);
  }

  _register(what, fn, c, encode) {
    const p = this._sync(what);
    const entry = register(this._core, fn, encode);
    const err = [null];
    // On failure the library calls userdata_free, which releases the entry.
    check(c(p, entry.ptr, entry.id, freeTrampoline, err), err);
  }

  /** Adds a session prefix listener `({rest, instance, turn}, {signal}) => messages | Promise`. */
  addPrefixListener(fn) {
    this._register('addPrefixListener', fn, C.lls_agent_add_prefix_listener, encoders.messages);
  }

  /** Adds a pre-step listener `({prefix, system, tools, turn, step}, {signal}) => void | Promise`. */
  addPreStepListener(fn) {
    this._register('addPreStepListener', fn, C.lls_agent_add_pre_step_listener, encoders.ignore);
  }

  /** Sets the summariser `(input, {signal}) => {text, usage?, ...} | string | Promise`. */
  setSummariser(fn) {
    this._register('setSummariser', fn, C.lls_agent_set_summariser, encoders.summary);
  }

  /** Sets a host token counter `(item, {signal}) => number | Promise<number>`. */
  setTokenCounter(fn) {
    this._register('setTokenCounter', fn, C.lls_agent_set_token_counter, encoders.count);
  }

  /** Opens a turn with the user's message (a string or a message object); returns the turn. */
  startTurn(message) {
    const b = jsonBuf(userMessage(message));
    const turn = [0];
    this._call('startTurn', C.lls_agent_start_turn, b, b.length, turn);
    return seqNumber(turn[0]);
  }

  /**
   * Builds the next request. Resolves with `{bytes, json, envelope, info}`: the exact envelope
   * bytes as a Buffer (send these), the same as a string and parsed (both decoded on first
   * access), and its description (prefixLen, sharedMessages, digest, ...).
   */
  nextRequest(options = {}) {
    return this._async('nextRequest', options, async (ptr, op) => {
      const out = [null];
      const len = [0];
      const err = [null];
      const st = await op.run(C.lls_agent_next_request, [ptr, op.cancel, out, len, err]);
      const lent = finishOp(op, st, err, () => lend(out[0], len[0]));
      const info = callJson(C.lls_agent_request_info, ptr);
      return builtRequest(lent, info);
    });
  }

  requestInfo() {
    return this._json('requestInfo', C.lls_agent_request_info);
  }

  /**
   * Gives the agent a renderer ("openai", "openai-responses", "anthropic", "gemini", "gemini-interactions") and render
   * options (`{promptCacheKey?, promptCacheRetention?, cacheTtl?, promptCacheOptions?, promptCacheBreakpoints?}`; the prefix length is the
   * agent's own): `nextBody` then builds provider bodies, each message rendered once.
   */
  setRenderer(renderer, options) {
    const r = utf8(renderer);
    const o = options === undefined || options === null ? null : jsonBuf(options);
    this._call('setRenderer', C.lls_agent_set_renderer, r, r.length, o, o ? o.length : 0);
  }

  /**
   * Builds the next request as `nextRequest` does (logged and verified the same way) and
   * resolves with the provider body ready to POST: a `Body` with `body` (a Buffer over the
   * library's memory, freed when the garbage collector releases it or at `release()`), `info`
   * (read from the library's fixed record, no JSON) and `json`. Needs `setRenderer` first
   * (status OUT_OF_ORDER otherwise).
   */
  nextBody(options) {
    const core = this._core;
    // The common case, no callbacks, no signal, no worker: the call runs right here (as
    // `_async` would run it, synchronously on the main thread), without an operation record,
    // async frames or their microtask hops; the result is still a Promise, rejected on failure.
    // The agent stays busy until the Promise settled, as with `_async` (docs/node.md, "One
    // asynchronous call per agent at a time"): `unbusy` is queued before any reaction to the
    // returned Promise can be, as a reaction to a settled Promise (queueMicrotask would cost
    // an AsyncResource a call, about 2 µs).
    if (!core.callbacks && (!options || (!options.signal && !options.worker))) {
      if (!core.ptr || core.busy) {
        return Promise.reject(core.ptr ? outOfOrder('nextBody: an asynchronous call on this agent is running (await it first)')
          : closedError('agent'));
      }
      core.busy = true;
      SETTLED.then(core.unbusy);
      try {
        const out = [null];
        const len = [0];
        const err = [null];
        const sc = core.scratch;
        const st = C.lls_agent_next_body(core.ptr, null, out, len, sc.info, err);
        if (st !== Status.OK) throw takeError(st, err[0]);
        // Every body is lent, small ones too: the library's copy of a small body is then the
        // only one (at 100 messages, 46 KB, the body came out 7 % faster than copied again into
        // a JS Buffer: docs/performance.md, "The append path (issue 28)").
        return Promise.resolve(new Body(lend(out[0], len[0], 1), readRequestInfo(sc.info, sc.info32)));
      } catch (e) {
        return Promise.reject(e);
      }
    }
    const fn = C.lls_agent_next_body;
    return this._async('nextBody', options, async (ptr, op) => {
      const out = [null];
      const len = [0];
      const err = [null];
      // The agent's record (only one call on it runs at a time): the worker fills it, and it
      // is read here once the call returned.
      const sc = core.scratch;
      const st = await op.run(fn, [ptr, op.cancel, out, len, sc.info, err]);
      const lent = finishOp(op, st, err, () => lend(out[0], len[0], 1));
      return new Body(lent, readRequestInfo(sc.info, sc.info32));
    });
  }

  /** The envelope of the last request this agent built (the logged bytes), as a Buffer. */
  lastEnvelope() {
    const out = [null];
    const len = [0];
    const err = [null];
    check(C.lls_agent_last_envelope(this._sync('lastEnvelope'), out, len, err), err);
    return takeBytes(out[0], len[0]);
  }

  /**
   * Records the provider's response body for the open step, parsed with the agent's renderer:
   * the raw bytes (a Buffer, a Uint8Array or a string) or the parsed JSON (a plain object, such
   * as what the `openai` and `@anthropic-ai/sdk` packages return). Gives a `Recorded`: the
   * assistant message's `seq`, its `toolCalls` (id, name, arguments; read on first access),
   * `toolCallCount`, and the response's `finishReason`, normalised (`'pause-turn'` means the
   * turn is not over; absent when the response gives none), which the log does not keep.
   */
  recordBody(body) {
    if (body !== null && typeof body === 'object' && !(body instanceof Uint8Array)) body = JSON.stringify(body);
    const str = shortString(body);
    const b = str ? body : bytesArg(body, 'recordBody');
    const p = this._sync('recordBody');
    // The agent's record: the library refuses a call on the agent from its own callbacks (and
    // writes nothing on an error), so no other call can fill it before it is read.
    const sc = this._core.scratch;
    const err = [null];
    const st = str
      ? S.lls_agent_record_body_info(p, b, Buffer.byteLength(b), sc.rec, err)
      : C.lls_agent_record_body_info(p, b, b.length, sc.rec, err);
    if (st !== Status.OK) throw takeError(st, err[0]);
    return readRecorded(sc.rec, sc.rec32, this.session);
  }

  /**
   * Records a streamed response from its `Stream` at the stream's end (`{partial: true}`: the
   * message so far, as `stream.finish({partial: true})`): a `Recorded`, as `recordBody` gives
   * (`finishReason` `'incomplete'` for a cut stream recorded with `partial`).
   */
  recordStream(stream, options = {}) {
    if (!(stream instanceof Stream)) throw new TypeError('recordStream: expected a Stream');
    const fn = C.lls_agent_record_stream_info;
    const p = this._sync('recordStream');
    const sp = livePtr(stream._core, 'stream');
    const sc = this._core.scratch;
    const err = [null];
    check(fn(p, sp, !!options.partial, sc.rec, err), err);
    return readRecorded(sc.rec, sc.rec32, this.session);
  }

  /** Records the provider's response `{message, usage?}`; returns the assistant message's seq. */
  recordResponse(response) {
    const b = jsonBuf(response);
    const seq = [0];
    this._call('recordResponse', C.lls_agent_record_response, b, b.length, seq);
    return seqNumber(seq[0]);
  }

  /** Records a tool result `{callId, text} | {callId, content}`; returns how many were written. */
  recordToolResult(result) {
    let b = result;
    if (typeof b !== 'string' && !Buffer.isBuffer(b)) b = JSON.stringify(result);
    const str = shortString(b);
    // A long string through a Buffer; nothing to send (undefined, a function) gets jsonBuf's TypeError.
    if (!str) b = jsonBuf(b === undefined ? result : b);
    const p = this._sync('recordToolResult');
    const written = [0];
    const err = [null];
    const st = str
      ? S.lls_agent_record_tool_result(p, b, Buffer.byteLength(b), written, err)
      : C.lls_agent_record_tool_result(p, b, b.length, written, err);
    if (st !== Status.OK) throw takeError(st, err[0]);
    return Number(written[0]);
  }

  /** Adds durable host context; returns its seq, or null when deferred. */
  inject(message) {
    const b = jsonBuf(userMessage(message));
    const seq = [0];
    this._call('inject', C.lls_agent_inject, b, b.length, seq);
    return seqNumber(seq[0]);
  }

  /** Records a provider failure `{message, overflow?}`; resolves with `{retry}`. */
  providerError(error, options = {}) {
    const b = jsonBuf(typeof error === 'string' ? { message: error } : error);
    return this._async('providerError', options, async (ptr, op) => {
      const retry = [0];
      const err = [null];
      const st = await op.run(C.lls_agent_provider_error, [ptr, b, b.length, op.cancel, retry, err]);
      finishOp(op, st, err);
      return { retry: retry[0] === 1 };
    });
  }

  endTurn(reason = 'completed') {
    const b = utf8(reason);
    this._call('endTurn', C.lls_agent_end_turn, b, b.length);
  }

  /** Compacts now (`{span?: [start, end]}`); resolves with the outcome object. */
  compact(options = {}) {
    const o = {};
    if (options.span) o.span = options.span;
    const b = jsonBuf(o);
    return this._async('compact', options, async (ptr, op) => {
      const out = [null];
      const len = [0];
      const err = [null];
      const st = await op.run(C.lls_agent_compact, [ptr, b, b.length, op.cancel, out, len, err]);
      return JSON.parse(finishOp(op, st, err, () => takeString(out[0], len[0])));
    });
  }

  /** Measures the next request's prompt (may call a host token counter). */
  measure(options = {}) {
    return this._async('measure', options, async (ptr, op) => {
      const out = [null];
      const len = [0];
      const err = [null];
      const st = await op.run(C.lls_agent_measure, [ptr, out, len, err]);
      return JSON.parse(finishOp(op, st, err, () => takeString(out[0], len[0])));
    });
  }

  stats() {
    return this._json('stats', C.lls_agent_stats);
  }

  /** The frozen session prefix, or null before the first request. */
  prefix() {
    return this._json('prefix', C.lls_agent_prefix);
  }

  /**
   * Disposes the instance (an open turn ends `disposed`, callbacks are released). Called from
   * inside one of the agent's callbacks, the running operation then fails with `disposed`.
   */
  dispose() {
    const core = this._core;
    if (!core.ptr) return Promise.resolve();
    const ptr = core.ptr;
    if (!core.busy) {
      const err = [null];
      try {
        check(C.lls_agent_dispose(ptr, err), err);
      } catch (e) {
        return Promise.reject(e);
      }
      return Promise.resolve();
    }
    // An operation runs on a worker (we may be inside its callback): dispose from another
    // worker, which ends the operation's waits and waits for it to return.
    const err = [null];
    const p = runAsync(C.lls_agent_dispose, [ptr, err]).then((st) => check(st, err));
    if (core.op) core.op.disposeDuringCallback = p;
    return p;
  }

  /** Frees the agent handle (disposing a live instance). Idempotent. */
  close() {
    const core = this._core;
    finalizer.unregister(this);
    if (!core.ptr) return;
    if (core.busy) {
      // Inside a callback, or while an operation runs: dispose first, free when it returned.
      const p = this.dispose().catch(() => {});
      p.then(() => this.close());
      return;
    }
    const ptr = core.ptr;
    core.ptr = null;
    C.lls_agent_free(ptr);
  }

  get closed() {
    return !this._core.ptr;
  }
}

module.exports = {
  Agent,
};
