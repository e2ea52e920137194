'use strict';
// Agent trees (lls_agent_spawn, lls_agent_finish_child; docs/caching.md, "Agent trees"): a
// child agent spawned from one of its parent's open tool calls, or at a turn boundary, whose
// first request reads the parent's cache; its answer given back as the parent's tool result.
// Adds `spawn` and `finishChild` to the Agent class (agent.js) and `Agent.wake`.

const { C } = require('./native');
const { check } = require('./errors');
const { jsonBuf, callJson } = require('./bytes');
const { Session } = require('./session');
const { Agent } = require('./agent');

/**
 * The result text a child sees for each of its parent's open tool calls (its own included)
 * unless `placeholder` is given: one constant, so siblings share everything up to their
 * directives.
 */
const DEFAULT_PLACEHOLDER = "This tool call is being worked on by another agent; its result is not shown here.";

/**
 * Spawns a child agent from this agent's open tool call `options.callId` (leave it out at a
 * turn boundary) with `directive` (a string or a user message); the other options are
 * `placeholder`, `id`, `durability`, `path`, `url`, `cacheTtl` ("5m" | "1h"), `maxTurns`.
 * Returns `{session, agent}`: the child's first request extends this agent's last one, and it
 * keeps this agent's model, tools and system. Run children concurrently (their `nextBody`
 * Promises), then `await parent.finishChild(child)` each, in any order.
 */
Agent.prototype.spawn = function spawn(directive, options = {}) {
  const o = Object.assign({}, options, {
    directive: typeof directive === 'string' ? { role: 'user', content: [{ type: 'text', text: directive }] } : directive,
  });
  const b = jsonBuf(o);
  const cs = [null];
  const ca = [null];
  const err = [null];
  check(C.lls_agent_spawn(this._sync('spawn'), b, b.length, cs, ca, err), err);
  const session = new Session(cs[0]);
  return { session, agent: new Agent(session, null, ca[0]) };
};

/**
 * Ends `child`'s open turn (completed; with `{error}`, failed) and records its answer as this
 * agent's result of the call it answers, with the child's id. Resolves with `{child, callId?,
 * answer, isError, recorded}` (`recorded` is 0 while an earlier call of the same message still
 * waits: results are logged in call order).
 */
Agent.prototype.finishChild = function finishChild(child, options) {
  try {
    if (!(child instanceof Agent)) throw new TypeError('finishChild needs the child Agent');
    const b = options === undefined || options === null ? null : jsonBuf(options);
    const out = callJson(C.lls_agent_finish_child, this._sync('finishChild'), child._sync('finishChild'), b, b ? b.length : 0);
    return Promise.resolve(out);
  } catch (e) {
    return Promise.reject(e);
  }
};

/**
 * An agent over `session` that sends what the session's last request carried (its latest
 * request header): a child woken in another process. `options`: `{checkRequests?, policy?,
 * tokenizer?}`.
 */
Agent.wake = function wake(session, options = {}) {
  return new Agent(session, Object.assign({}, options));
};

module.exports = {
  DEFAULT_PLACEHOLDER,
};
