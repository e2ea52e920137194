'use strict';
// Sessions: the append-only event log of one conversation (Session: memory, a JSONL file,
// forks; its id, info, history, events, stats, verify, explain, append, sync, refresh, export),
// and a stored JSONL log verified or explained without opening it (verifyFile, explainFile).
// Opening a store named by URL, `Session.openUrl`, is in store.js.

const { C } = require('./native');
const { check } = require('./errors');
const { SEQ_NONE, utf8, jsonBuf, callOut, callJson, seqNumber } = require('./bytes');
const { finalizer, livePtr } = require('./handle');

/** A session: the append-only event log of one conversation. */
class Session {
  constructor(ptr) {
    this._core = { ptr, free: (p) => C.lls_session_free(p) };
    finalizer.register(this, this._core, this);
  }

  /** A new session kept in memory. */
  static memory(options = {}) {
    const b = jsonBuf(options);
    const out = [null];
    const err = [null];
    check(C.lls_session_new_memory(b, b.length, out, err), err);
    return new Session(out[0]);
  }

  /**
   * Opens (or creates) the session stored in a JSONL file. A writing open holds the file's lock
   * until close(): a second writer (in this process or another) gets an error with code
   * LLS_ERR_LOCKED. `{readOnly: true}` locks, creates and changes nothing (appends throw
   * LLS_ERR_READ_ONLY; refresh() follows the writer); `mode` ("0600" by default) is the
   * permission bits of a created file.
   */
  static openFile(file, options = {}) {
    const p = utf8(file);
    const b = jsonBuf(options);
    const out = [null];
    const err = [null];
    check(C.lls_session_open_file(p, p.length, b, b.length, out, err), err);
    return new Session(out[0]);
  }

  get _ptr() {
    return livePtr(this._core, 'session');
  }

  /** Forks this session into a new one (memory, a JSONL file with `path`, a store with `url`). */
  fork(options = {}) {
    const b = jsonBuf(options);
    const out = [null];
    const err = [null];
    check(C.lls_session_fork(this._ptr, b, b.length, out, err), err);
    return new Session(out[0]);
  }

  get id() {
    return callOut(C.lls_session_id, this._ptr);
  }

  info() {
    return callJson(C.lls_session_info, this._ptr);
  }

  loadReport() {
    return callJson(C.lls_session_load_report, this._ptr);
  }

  events(from = 0, to) {
    const end = to === undefined || to === null ? SEQ_NONE : BigInt(to);
    return callJson(C.lls_session_events, this._ptr, BigInt(from), end);
  }

  history() {
    return callJson(C.lls_session_history, this._ptr);
  }

  header() {
    return callJson(C.lls_session_header, this._ptr);
  }

  stats() {
    return callJson(C.lls_session_stats, this._ptr);
  }

  verify() {
    return callJson(C.lls_session_verify, this._ptr);
  }

  /**
   * Explains every request of the log: the cacheable prefix it shares with the request before,
   * where and why they part, expected beside reported cached tokens, and the prompt spend by
   * cause, priced with a host price table (`docs/caching.md`). `options`: `{tokenizer?: path,
   * prices?: {...}, cacheRules?: {...}}`.
   */
  explain(options) {
    const o = options === undefined || options === null ? null : jsonBuf(options);
    return callJson(C.lls_session_explain, this._ptr, o, o ? o.length : 0);
  }

  /** Appends an event `{type, data, surfaceOp?, sources?}`; returns its seq. */
  append(event) {
    const b = jsonBuf(event);
    const seq = [0];
    const err = [null];
    check(C.lls_session_append(this._ptr, b, b.length, seq, err), err);
    return seqNumber(seq[0]);
  }

  sync() {
    const err = [null];
    check(C.lls_session_sync(this._ptr, err), err);
  }

  /**
   * Reads what the store holds beyond this handle's last event (what another writer appended
   * since); returns how many new events it read. A read-only handle follows a live session this
   * way; a writer gets back to appending after LLS_ERR_CONFLICT (with no live agent).
   */
  refresh() {
    const n = [0];
    const err = [null];
    check(C.lls_session_refresh(this._ptr, n, err), err);
    return seqNumber(n[0]);
  }

  /** The whole log as JSONL text, each record exactly as stored: written to a file, it opens. */
  exportJsonl() {
    return callOut(C.lls_session_export, this._ptr);
  }

  /** Frees the session handle (an agent over it keeps the state alive). Idempotent. */
  close() {
    finalizer.unregister(this);
    if (this._core.ptr) {
      const p = this._core.ptr;
      this._core.ptr = null;
      C.lls_session_free(p);
    }
  }

  get closed() {
    return !this._core.ptr;
  }
}

/** Verifies a stored JSONL log without opening it. */
function verifyFile(file) {
  const p = utf8(file);
  return callJson(C.lls_verify_file, p, p.length);
}

/** Explains a stored JSONL log without opening it (see `Session#explain`). */
function explainFile(file, options) {
  const p = utf8(file);
  const o = options === undefined || options === null ? null : jsonBuf(options);
  return callJson(C.lls_explain_file, p, p.length, o, o ? o.length : 0);
}

module.exports = {
  Session,
  verifyFile,
  explainFile,
};
