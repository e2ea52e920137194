'use strict';
// Errors: the status codes (lls_status), LlmSessionError (what every failed library call
// throws, built from the library's lls_error by takeError), CallbackError (what a host callback
// throws to fail its reply on purpose), and the errors the binding raises itself with the
// detail the library would give (bindingError, outOfOrder, closedError).

const { C } = require('./native');

/** Status codes (lls_status), as in include/llmsession.h. */
const Status = Object.freeze({
  OK: 0,
  MALFORMED_JSON: 1,
  INVALID_INPUT: 2,
  OUT_OF_ORDER: 3,
  BUSY: 4,
  CORRUPT_LOG: 5,
  STORAGE: 6,
  CANCELLED: 7,
  DISPOSED: 8,
  LISTENER: 9,
  SUMMARISER: 10,
  RECONSTRUCTION: 11,
  INVALID_POLICY: 12,
  OVERFLOW_BUDGET: 13,
  NOTHING_TO_COMPACT: 14,
  TOKENIZER: 15,
  POISONED: 16,
  INTERNAL: 17,
  LOCKED: 18,
  CONFLICT: 19,
  READ_ONLY: 20,
  NULL_POINTER: 100,
  INVALID_UTF8: 101,
  INVALID_HANDLE: 102,
  PANIC: 103,
  INVALID_ARGUMENT: 104,
  REPLY_STATE: 105,
  OUT_OF_MEMORY: 106,
});

/** The C name of a status, the Node-style `code` of an error: 18 → "LLS_ERR_LOCKED". */
function codeOf(status) {
  const name = Object.keys(Status).find((k) => Status[k] === status);
  if (name === undefined) return 'LLS_ERR_UNKNOWN';
  return name === 'OK' ? 'LLS_OK' : `LLS_ERR_${name}`;
}

/**
 * An error reported by llmsession: `status` (the lls_status code), `code` (its C name, e.g.
 * "LLS_ERR_LOCKED", for `switch (e.code)`), `kind` (its stable name, e.g. "listener"),
 * `message`, and `detail` (the parsed JSON detail: field, seq, line, ...).
 */
class LlmSessionError extends Error {
  constructor(status, message, detail, options) {
    super(message, options);
    this.name = 'LlmSessionError';
    this.status = status;
    this.code = codeOf(status);
    this.kind = (detail && detail.kind) || statusName(status);
    this.detail = detail || { kind: this.kind, status, message };
  }
}

/**
 * Thrown (or rejected with) by a listener, summariser or token counter to fail its reply on
 * purpose: the library call then fails with the library's own error (LlmSessionError, status
 * LISTENER or that of the operation), whose message includes this one. Any other exception is
 * treated as a bug in the callback and re-raised as is (see docs/node.md).
 */
class CallbackError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'CallbackError';
  }
}

/**
 * The stable name of a status, as the library gives it (lls_status_name) and as error details
 * carry it in `kind`: 5 → "corrupt-log", 102 → "invalid-handle"; "unknown" for a value the
 * library does not define.
 */
function statusName(status) {
  if (!Number.isInteger(status) || status < -0x80000000 || status > 0x7fffffff) {
    throw new TypeError(`statusName: a status is a 32-bit integer, got ${String(status)}`);
  }
  return C.lls_status_name(status);
}

/** An LlmSessionError the binding raises itself, with the detail the library would give. */
function bindingError(status, message) {
  return new LlmSessionError(status, message, { kind: statusName(status), status, message });
}

/** Turns an lls_error* into an LlmSessionError and frees it. */
function takeError(status, errPtr, cause) {
  if (!errPtr) {
    return new LlmSessionError(status, `llmsession call failed with status ${status}`, null, cause ? { cause } : undefined);
  }
  const code = C.lls_error_code(errPtr);
  const message = C.lls_error_message(errPtr);
  let detail = null;
  try {
    detail = JSON.parse(C.lls_error_detail(errPtr));
  } catch (_) {
    detail = null;
  }
  C.lls_error_free(errPtr);
  return new LlmSessionError(code, message, detail, cause ? { cause } : undefined);
}

function check(status, err) {
  if (status !== Status.OK) throw takeError(status, err[0]);
}

function outOfOrder(message) {
  return bindingError(Status.OUT_OF_ORDER, message);
}

function closedError(what) {
  return bindingError(Status.INVALID_HANDLE, `this ${what} was closed`);
}

/** The message of a thrown value, for a failed reply or a warning. */
function describe(e) {
  if (e instanceof Error) return e.message;
  return String(e);
}

module.exports = {
  Status,
  LlmSessionError,
  CallbackError,
  statusName,
  bindingError,
  takeError,
  check,
  outOfOrder,
  closedError,
  describe,
};
