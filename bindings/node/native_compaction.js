'use strict';
// Provider-native compaction (docs/node.md, "Native compaction"; docs/compaction.md): Anthropic's
// on-demand compaction and OpenAI's POST /responses/compact, as requests the host sends (now or
// in the background, while the conversation goes on) and whose answers the library records.
// Threshold compaction needs no call of its own: with a policy whose `mechanism` is "native" or
// "auto" the conversation requests carry the provider's setting, and recordBody /
// recordResponse record a compaction block the answer holds. Adds three methods to Agent.
// Entry points of ABI 2 minor 6 (bound in native.js when the library has them).

const { C, abiMinor } = require('./native');
const { bytesArg, callJson } = require('./bytes');
const { Status, bindingError } = require('./errors');
const { Agent } = require('./agent');

function needsMinor6(what) {
  if (abiMinor() < 6) {
    throw bindingError(Status.INVALID_ARGUMENT, `${what}: the loaded library has ABI minor ${abiMinor()}; native compaction needs 6`);
  }
}

/**
 * Builds a native compaction request for the agent's route over the whole history and logs its
 * start: `{format, endpoint, betas, envelope, body, digest, span, seqs, messageCount,
 * sharedMessages}`. POST `body` (JSON text) to `endpoint` with the `anthropic-beta` flags in
 * `betas`; then `recordNativeCompaction(answer)` or `failNativeCompaction(why)`.
 */
Agent.prototype.beginNativeCompaction = function beginNativeCompaction() {
  needsMinor6('beginNativeCompaction');
  return callJson(C.lls_agent_native_compaction_begin, this._sync('beginNativeCompaction'));
};

/**
 * Records the provider's raw answer (a string, a Buffer, or the parsed object) to the native
 * compaction request in flight: `{outcome: "landed" | "failed", format, span, seqs, error?,
 * stopReason?}`. An answer without the compaction block is a failed attempt, logged.
 */
Agent.prototype.recordNativeCompaction = function recordNativeCompaction(body) {
  needsMinor6('recordNativeCompaction');
  const b = typeof body === 'object' && !Buffer.isBuffer(body) && !(body instanceof Uint8Array)
    ? Buffer.from(JSON.stringify(body), 'utf8')
    : bytesArg(body, 'body');
  return callJson(C.lls_agent_native_compaction_record, this._sync('recordNativeCompaction'), b, b.length);
};

/** Reports that the native compaction request in flight failed (why: a string). */
Agent.prototype.failNativeCompaction = function failNativeCompaction(why) {
  needsMinor6('failNativeCompaction');
  const b = Buffer.from(String(why === undefined || why === null ? '' : why), 'utf8');
  return callJson(C.lls_agent_native_compaction_fail, this._sync('failNativeCompaction'), b, b.length);
};

module.exports = {};
