'use strict';
// Tool calls (lls_tool_calls): the calls an assistant message makes, as data. toolCalls(value)
// reads them from a message, a response, an event or an array of these; Recorded (what
// recordBody and recordStream give) reads those of the message it logged, from the log, on
// first access.

const { koffi, C } = require('./native');
const { check } = require('./errors');
const { bytesArg, jsonBuf, takeBytes } = require('./bytes');

const UNPARSED = Symbol('unparsed');

/**
 * One tool call: `id` (the `callId` of its result, for `agent.recordToolResult`), the tool's
 * `name`, its arguments as the model wrote them (`argumentsJson`) and parsed (`arguments`).
 */
class ToolCall {
  #arguments = UNPARSED;

  constructor(id, name, argumentsJson) {
    this.id = id;
    this.name = name;
    this.argumentsJson = argumentsJson;
  }

  /**
   * The arguments parsed from `argumentsJson` (an empty text is `{}`: a tool called without
   * arguments). Text that is not JSON (a model may write that) throws a SyntaxError naming the
   * call; report it to the model as the call's error result.
   */
  get arguments() {
    if (this.#arguments === UNPARSED) {
      const text = this.argumentsJson;
      if (text.trim() === '') {
        this.#arguments = {};
      } else {
        try {
          this.#arguments = JSON.parse(text);
        } catch (e) {
          throw new SyntaxError(`tool call ${this.id} (${this.name}): its arguments are not JSON (${e.message}): ${JSON.stringify(text)}`,
            { cause: e });
        }
      }
    }
    return this.#arguments;
  }
}

function lent(ptr, len) {
  const n = Number(len);
  return n === 0 || !ptr ? '' : Buffer.from(koffi.view(ptr, n)).toString('utf8');
}

/** The calls in JSON bytes, read through an lls_tool_calls handle (freed before returning). */
function parse(b) {
  const out = [null];
  const err = [null];
  check(C.lls_tool_calls_parse(b, b.length, out, err), err);
  const h = out[0];
  try {
    const n = [0];
    check(C.lls_tool_calls_count(h, n, err), err);
    const calls = new Array(Number(n[0]));
    const id = [null], idLen = [0], name = [null], nameLen = [0], args = [null], argsLen = [0];
    for (let i = 0; i < calls.length; i++) {
      check(C.lls_tool_calls_get(h, i, id, idLen, name, nameLen, args, argsLen, err), err);
      calls[i] = new ToolCall(lent(id[0], idLen[0]), lent(name[0], nameLen[0]), lent(args[0], argsLen[0]));
    }
    return calls;
  } finally {
    C.lls_tool_calls_free(h);
  }
}

/**
 * The tool calls in `value`, in the order the model made them (`[]` when none): an assistant
 * message, a response `{message, ...}` (what parseResponse and stream.finish() give), an event,
 * or an array of these; as an object, JSON text, or a Buffer / Uint8Array of it. A malformed
 * tool-call block throws the library's invalid-input error.
 */
function toolCalls(value) {
  const b = value instanceof Uint8Array ? bytesArg(value, 'toolCalls') : jsonBuf(value);
  return parse(b.length === 0 ? Buffer.from(' ') : b);
}

/**
 * What `agent.recordBody` / `agent.recordStream` logged: `seq` of the assistant/message event,
 * `toolCallCount`, `finishReason` (normalised: 'stop', 'tool-calls', 'max-tokens', 'pause-turn'
 * (the turn is not over), 'refusal', 'context-overflow', 'content-filter', 'incomplete'; a
 * provider's own word; absent when the response gives none), and `toolCalls`: the message's
 * calls as the log holds them, read from the session on first access (nothing is read for a
 * reply without calls), so read them before the session is closed.
 */
class Recorded {
  #session;
  #calls = null;

  constructor(seq, toolCallCount, finishReason, session) {
    this.seq = seq;
    this.toolCallCount = toolCallCount;
    if (finishReason !== undefined) this.finishReason = finishReason;
    this.#session = session;
  }

  /** @returns {ToolCall[]} */
  get toolCalls() {
    if (this.#calls === null) {
      if (this.toolCallCount === 0) {
        this.#calls = [];
      } else {
        const out = [null];
        const len = [0];
        const err = [null];
        const from = BigInt(this.seq);
        check(C.lls_session_events(this.#session._ptr, from, from + 1n, out, len, err), err);
        this.#calls = parse(takeBytes(out[0], len[0]));
      }
    }
    return this.#calls;
  }
}

module.exports = {
  ToolCall,
  Recorded,
  toolCalls,
};
