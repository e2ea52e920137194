'use strict';
// Host callbacks (listeners, summariser, token counter) and their replies.
//
// Threading model (docs/node.md): operations that may call back into JS (nextRequest, compact,
// providerError, measure) run the library call on a koffi worker thread (`fn.async`). When the
// library calls a host callback on that worker, koffi queues the JS call on the main thread and
// the worker waits for it to return. The trampoline calls the JS function; a plain value is
// answered at once (lls_reply_set_json, LLS_CB_OK); a Promise makes the trampoline return
// LLS_CB_PENDING, and the reply is completed (lls_reply_complete / lls_reply_fail) on the main
// thread when the Promise settles, while the library waits on its worker thread.
//
// A registration (register) is one koffi trampoline over a JS function; the library owns its
// userdata (an integer id) and releases it once, through freeTrampoline.

const { koffi, C, CallbackFn, FreeFn } = require('./native');
const { Status, CallbackError, describe } = require('./errors');
const { utf8, jsonBuf, takeString } = require('./bytes');
const { runAsync, newOp, endOp, finishOp } = require('./operation');

const CB_OK = 0;
const CB_PENDING = 1;
const CB_ERROR = 2;

/** Live registrations: id -> entry. An entry is released once, by the library's userdata_free. */
const registrations = new Map();
let nextId = 1;

const freeTrampoline = koffi.register((id) => {
  const entry = registrations.get(Number(id));
  if (!entry) return;
  registrations.delete(Number(id));
  entry.released = true;
  if (entry.core) entry.core.callbacks--;
  koffi.unregister(entry.ptr);
}, koffi.pointer(FreeFn));

function replyText(reply, text, pending) {
  const buf = utf8(text);
  const err = [null];
  const st = (pending ? C.lls_reply_complete : C.lls_reply_set_json)(reply, buf, buf.length, err);
  if (st !== Status.OK) {
    // The reply was answered with the failure by the library (unusable JSON), or was answered
    // already; report nothing more here, the library call fails with LISTENER.
    if (err[0]) C.lls_error_free(err[0]);
  }
}

function replyFail(reply, message) {
  const buf = utf8(message || 'host callback failed');
  const err = [null];
  C.lls_reply_fail(reply, buf, buf.length, err);
  if (err[0]) C.lls_error_free(err[0]);
}

/**
 * Creates a registration for `fn`. `encode` turns the JS result into reply JSON text. `core` is
 * the owner's state: callbacks record exceptions there (`core.op`) so that the running
 * operation re-raises them.
 */
function register(core, fn, encode) {
  if (typeof fn !== 'function') throw new TypeError('expected a function');
  const id = nextId++;
  // `core.callbacks` counts the owner's live registrations (released by the library through
  // freeTrampoline): an agent with none runs its operations on the main thread (Agent#_async).
  const entry = { id, ptr: null, released: false, core };
  core.callbacks = (core.callbacks || 0) + 1;
  entry.ptr = koffi.register((_ud, inJson, _len, reply) => {
    const op = core.op;
    const ctx = { signal: op && op.controller ? op.controller.signal : new AbortController().signal };
    let input;
    let result;
    try {
      input = JSON.parse(inJson);
      result = fn(input, ctx);
    } catch (e) {
      if (op && !(e instanceof CallbackError)) op.errors.push(e);
      replyFail(reply, describe(e));
      return CB_ERROR;
    }
    // A dispose started from a callback (on another worker) must end the operation: the reply
    // is answered only once that disposal returned, so the library is still waiting when the
    // dispose ends its wait (the answer is then discarded).
    const afterDispose = (answer) => {
      const d = op && op.disposeDuringCallback;
      if (d) d.then(answer, answer);
      else answer();
    };
    if (result && typeof result.then === 'function') {
      if (!op || !op.async) {
        const e = new CallbackError('this operation is synchronous: its callback must not return a Promise');
        replyFail(reply, e.message);
        return CB_ERROR;
      }
      op.pending++;
      Promise.resolve(result).then(
        (v) => {
          let t;
          try {
            t = encode(v);
          } catch (e) {
            op.errors.push(e);
            replyFail(reply, describe(e));
            return;
          }
          afterDispose(() => replyText(reply, t, true));
        },
        (e) => {
          // After an abort, a rejection is the callback giving up (an AbortError from fetch):
          // the operation reports CANCELLED, not this error.
          if (!(e instanceof CallbackError) && !op.controller.signal.aborted) op.errors.push(e);
          afterDispose(() => replyFail(reply, describe(e)));
        },
      ).finally(() => {
        op.pending--;
      });
      return CB_PENDING;
    }
    let text;
    try {
      text = encode(result);
    } catch (e) {
      if (op) op.errors.push(e);
      replyFail(reply, describe(e));
      return CB_ERROR;
    }
    if (op && op.disposeDuringCallback) {
      afterDispose(() => replyText(reply, text, true));
      return CB_PENDING;
    }
    replyText(reply, text, false);
    return CB_OK;
  }, koffi.pointer(CallbackFn));
  registrations.set(id, entry);
  return entry;
}

const toJson = (v) => (v === undefined ? 'null' : JSON.stringify(v));
// Replies go to the library as given; it validates them (an unusable reply fails the call
// with LISTENER and a message saying what was wrong).
const encoders = {
  messages: toJson,
  ignore: () => 'null',
  summary: (v) => JSON.stringify(typeof v === 'string' ? { text: v } : v === undefined ? null : v),
  count: toJson,
  any: toJson,
};

/**
 * Calls `fn` through the library's own callback machinery (lls_callback_invoke), as it calls
 * listeners: a self-test of the trampoline. Resolves with the answer (parsed JSON).
 */
async function invokeCallback(fn, input, options = {}) {
  const core = { op: null };
  const op = newOp(core, options.signal);
  const entry = register(core, fn, encoders.any);
  const inBuf = jsonBuf(input);
  const out = [null];
  const len = [0];
  const err = [null];
  try {
    const st = await runAsync(C.lls_callback_invoke, [entry.ptr, entry.id, freeTrampoline, inBuf, inBuf.length, op.cancel, out, len, err]);
    return JSON.parse(finishOp(op, st, err, () => takeString(out[0], len[0])));
  } finally {
    endOp(core, op);
  }
}

/** Number of JS callbacks registered with the library and not yet released. */
function registeredCallbackCount() {
  return registrations.size;
}

module.exports = {
  register,
  freeTrampoline,
  encoders,
  invokeCallback,
  registeredCallbackCount,
};
