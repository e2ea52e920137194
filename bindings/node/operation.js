'use strict';
// Operations (one at a time per agent): a cancel token, an AbortSignal, errors from callbacks.
// An operation is one library call that may call back into JS; `op.run` runs it on the main
// thread (runSync) or on a koffi worker thread (runAsync), and finishOp turns its status, and
// the first exception a callback threw, into its result.

const { C } = require('./native');
const { Status, check, takeError } = require('./errors');

/** Runs `fn(...args)` on the main thread and returns its status (an operation's `run` when sync). */
function runSync(fn, args) {
  return fn(...args);
}

/** Runs `fn.async(...args, cb)` and resolves with its status. */
function runAsync(fn, args) {
  return new Promise((resolve, reject) => {
    fn.async(...args, (e, st) => (e ? reject(e) : resolve(st)));
  });
}

/**
 * A new operation. `sync`: the library call runs on the main thread (`op.run` calls it
 * directly); no callback can run during it, so the operation needs a cancel token only for a
 * `signal` (one that aborts later cannot fire while the main thread is in the call) and no
 * AbortController for callbacks. Otherwise `op.run` runs the call on a koffi worker thread.
 */
function newOp(core, signal, sync = false) {
  let cancel = null;
  if (!sync || signal) {
    const out = [null];
    const err = [null];
    check(C.lls_cancel_new(out, err), err);
    cancel = out[0];
  }
  const op = {
    cancel,
    controller: sync ? null : new AbortController(),
    errors: [],
    pending: 0,
    async: !sync,
    sync,
    disposeDuringCallback: null,
    signal,
    onAbort: null,
    run: sync ? runSync : runAsync,
  };
  if (signal) {
    op.onAbort = () => {
      C.lls_cancel_trip(op.cancel, null);
      if (op.controller) op.controller.abort(signal.reason);
    };
    if (signal.aborted) op.onAbort();
    else signal.addEventListener('abort', op.onAbort, { once: true });
  }
  core.op = op;
  return op;
}

function endOp(core, op) {
  if (op.signal && op.onAbort) op.signal.removeEventListener('abort', op.onAbort);
  if (op.cancel) C.lls_cancel_free(op.cancel);
  op.cancel = null;
  if (core.op === op) core.op = null;
}

/** The result of an operation: the first exception a callback threw wins over everything. */
function finishOp(op, status, err, onOk) {
  if (op.errors.length > 0) {
    if (status !== Status.OK && err[0]) C.lls_error_free(err[0]);
    if (status === Status.OK && onOk) {
      // The library went ahead (e.g. a failed automatic compaction is only logged), but a
      // callback threw: never report that as a success. Free what it returned.
      try {
        onOk();
      } catch (_) {
        /* ignore */
      }
    }
    if (status !== Status.OK && op.controller) op.controller.abort();
    throw op.errors[0];
  }
  if (status !== Status.OK) {
    if (op.controller) op.controller.abort();
    throw takeError(status, err[0]);
  }
  return onOk ? onOk() : undefined;
}

module.exports = {
  runSync,
  runAsync,
  newOp,
  endOp,
  finishOp,
};
