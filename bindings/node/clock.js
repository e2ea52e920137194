'use strict';
// The cache clock of an agent (docs/node.md, "The cache clock"; docs/caching.md): during a
// pause, `cacheClock` says what to do about the provider's cache (lls_agent_cache_clock),
// `keepaliveBody` builds the keep-warm request it may decide (lls_agent_keepalive_body; record
// its answer with `recordBody`, `recordStream` or `providerError`), and `compactIdle` runs the
// compaction it may decide (lls_agent_compact with `{trigger: "idle"}`).
// Adds these methods to the Agent class (agent.js).

const { C } = require('./native');
const { takeError, Status } = require('./errors');
const { jsonBuf, callJson, takeString } = require('./bytes');
const { lend, readRequestInfo, Body } = require('./body');
const { finishOp } = require('./operation');
const { Agent } = require('./agent');

/** The decisions of the cache clock (`cacheClock(...).decision`). */
const Decision = Object.freeze({
  NONE: 'none',
  COMPACT: 'compact',
  KEEP_WARM: 'keep-warm',
  LET_EXPIRE: 'let-expire',
  TIER: 'tier',
});

/**
 * Asks the cache clock what to do now (options, all optional: `now` ms since the epoch,
 * `prices`, `cacheRules`, `returnModel` {gapsMs?, weights?, neverReturns?, learn?, priorWeight?},
 * `marginMs`, `tierBilling`, `compaction` {enabled?, minContextTokens?, summaryRatio?},
 * `record`, `keepWarmBudget`, `keepWarmTiers`). Returns `{decision, tier?, reason, at, warmUntil?, nextDecisionAt?,
 * returnProbability?, options, breakEven, returns, state, recorded?}`; an action decision is
 * recorded in the log once per use of the cache. Synchronous: it calls no callback.
 */
Agent.prototype.cacheClock = function cacheClock(options) {
  const b = options === undefined || options === null ? null : jsonBuf(options);
  return callJson(C.lls_agent_cache_clock, this._sync('cacheClock'), b, b ? b.length : 0);
};

/**
 * Builds the keep-warm request (decision `keep-warm`) as the provider body: the last
 * conversation request again, every cacheable byte the same, its output limit at the
 * provider's minimum (when the decision named a longer `tier`, its cache marks carry that
 * tier's TTL); a `Body` whose `info.purpose` is `'keepalive'`. Send it and record the
 * answer with `recordBody` (it never enters the history). Synchronous.
 */
Agent.prototype.keepaliveBody = function keepaliveBody() {
  const ptr = this._sync('keepaliveBody');
  const out = [null];
  const len = [0];
  const err = [null];
  const sc = this._core.scratch;
  const st = C.lls_agent_keepalive_body(ptr, out, len, sc.info, err);
  if (st !== Status.OK) throw takeError(st, err[0]);
  return new Body(lend(out[0], len[0], 1), readRequestInfo(sc.info, sc.info32));
};

/**
 * Runs the compaction the clock decided (decision `compact`): the cache-reusing compaction,
 * logged with trigger `idle`; resolves with the outcome object, as `compact` does (it calls the
 * summariser).
 */
Agent.prototype.compactIdle = function compactIdle(options = {}) {
  const b = jsonBuf({ trigger: 'idle' });
  return this._async('compactIdle', options, async (ptr, op) => {
    const out = [null];
    const len = [0];
    const err = [null];
    const st = await op.run(C.lls_agent_compact, [ptr, b, b.length, op.cancel, out, len, err]);
    return JSON.parse(finishOp(op, st, err, () => takeString(out[0], len[0])));
  });
};

module.exports = {
  Decision,
};
