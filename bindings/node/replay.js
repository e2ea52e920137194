'use strict';
// Replay: a recorded session answering a host's requests, byte for byte (lls_replay_*).

const { C } = require('./native');
const { check } = require('./errors');
const { utf8, jsonBuf, callJson } = require('./bytes');
const { finalizer, livePtr } = require('./handle');

/**
 * A recorded session that answers a host's requests: `answer(envelope)` returns the recorded
 * answer when the envelope is the recorded request, byte for byte, and throws an
 * `LlmSessionError` (status RECONSTRUCTION, detail `component`, `index`, ...) naming the first
 * divergence otherwise. Lets a host test its agent loop offline.
 */
class Replay {
  constructor(ptr) {
    this._core = { ptr, free: (p) => C.lls_replay_free(p) };
    finalizer.register(this, this._core, this);
  }

  /** Replays a stored JSONL log (read without opening it as a session). */
  static openFile(file) {
    const p = utf8(file);
    const out = [null];
    const err = [null];
    check(C.lls_replay_open_file(p, p.length, out, err), err);
    return new Replay(out[0]);
  }

  /** Replays a session's log as it is now. */
  static fromSession(session) {
    const out = [null];
    const err = [null];
    check(C.lls_replay_new(session._ptr, out, err), err);
    return new Replay(out[0]);
  }

  /**
   * The recorded answer to a request envelope (a `nextRequest` result's `bytes`, or a
   * summariser's `request`): `{purpose, id, outcome, response?, error?, overflow?, summary?}`;
   * `response` is what `agent.recordResponse` takes, `summary` what a summariser returns.
   */
  answer(envelope) {
    const e = jsonBuf(envelope);
    return callJson(C.lls_replay_answer, livePtr(this._core, 'replay'), e, e.length);
  }

  /** `{sessionId, requests, answered, next?}`. */
  info() {
    return callJson(C.lls_replay_info, livePtr(this._core, 'replay'));
  }

  /** Frees the replay. Idempotent. */
  close() {
    finalizer.unregister(this);
    if (this._core.ptr) {
      const p = this._core.ptr;
      this._core.ptr = null;
      C.lls_replay_free(p);
    }
  }
}

module.exports = {
  Replay,
};
