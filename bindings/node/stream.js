'use strict';
// Streamed provider responses (lls_stream): Stream, fed the event stream's bytes in any
// chunking, and readStream, a whole response read from a web ReadableStream or async iterable.

const { C } = require('./native');
const { check } = require('./errors');
const { utf8, callOut, callJson } = require('./bytes');
const { finalizer, livePtr } = require('./handle');

/**
 * One streamed provider response (lls_stream). Feed it the raw bytes of the event stream as
 * they arrive (`feed`, or `consume` over a web ReadableStream / async iterable such as
 * `fetch(...).body`), take the deltas for display (`nextDelta`, `takeDeltas`), and `finish()`
 * for `{message, usage?, finishReason?}`: what `parseResponse` gives for the non-streamed
 * body, for `agent.recordResponse` as it is. Formats: "openai", "openai-responses",
 * "anthropic", "gemini", "gemini-interactions".
 */
class Stream {
  constructor(format) {
    const f = utf8(format);
    const out = [null];
    const err = [null];
    check(C.lls_stream_new(f, f.length, out, err), err);
    this.format = format;
    this._core = { ptr: out[0], free: (p) => C.lls_stream_free(p) };
    finalizer.register(this, this._core, this);
  }

  /** Feeds the next bytes (a Buffer, a Uint8Array, or text), in any chunking. */
  feed(chunk) {
    const p = livePtr(this._core, 'stream');
    let b;
    if (Buffer.isBuffer(chunk)) b = chunk;
    else if (chunk instanceof Uint8Array) b = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    else if (typeof chunk === 'string') b = utf8(chunk);
    else {
      // An SDK's parsed stream hands out chunk objects: say where the bytes are.
      const hint = chunk !== null && typeof chunk === 'object'
        ? ' (an SDK\'s parsed chunk: feed the raw bytes of the response instead, e.g. openai\'s ' +
          '`.asResponse()` and its `body`; docs/node.md, "With the official SDKs")'
        : '';
      throw new TypeError(`Stream.feed: expected a Buffer, a Uint8Array or a string${hint}`);
    }
    if (b.length === 0) return; // nothing to feed (and an empty Buffer may have no address)
    const err = [null];
    check(C.lls_stream_feed(p, b, b.length, err), err);
  }

  /** The next delta (`{type, index, text?, id?, name?, arguments?}`), or null when none is left. */
  nextDelta() {
    const text = callOut(C.lls_stream_next_delta, livePtr(this._core, 'stream'));
    return text === null ? null : JSON.parse(text);
  }

  /** Every delta not taken yet, in stream order. */
  takeDeltas() {
    const all = [];
    for (let d = this.nextDelta(); d !== null; d = this.nextDelta()) all.push(d);
    return all;
  }

  /**
   * Ends the stream: the response, or an error for a failed or cut stream (detail.stream is
   * "malformed", "provider-error" or "incomplete"); with `{partial: true}` the message so far,
   * with finishReason "incomplete".
   */
  finish(options = {}) {
    return callJson(C.lls_stream_finish, livePtr(this._core, 'stream'), !!options.partial);
  }

  /** The provider body rebuilt so far, in the non-streamed shape. */
  body() {
    return callJson(C.lls_stream_body, livePtr(this._core, 'stream'));
  }

  /**
   * Feeds every chunk of `source` (a web ReadableStream, e.g. `response.body` of fetch, or any
   * async iterable of Buffers / Uint8Arrays / strings), calling `onDelta(delta)` as deltas
   * complete, and resolves with `finish()`.
   */
  async consume(source, onDelta) {
    const iterable = source && typeof source.getReader === 'function' && !source[Symbol.asyncIterator] ? readerIterable(source) : source;
    for await (const chunk of iterable) {
      this.feed(chunk);
      if (onDelta) for (const d of this.takeDeltas()) onDelta(d);
    }
    return this.finish();
  }

  close() {
    const core = this._core;
    if (!core.ptr) return;
    finalizer.unregister(this);
    const ptr = core.ptr;
    core.ptr = null;
    C.lls_stream_free(ptr);
  }

  get closed() {
    return !this._core.ptr;
  }
}

async function* readerIterable(readable) {
  const reader = readable.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * Reads a whole streamed response from `source` (a web ReadableStream or an async iterable of
 * bytes) in `format`, calling `onDelta` for each delta; resolves with `{response, body}`. The
 * stream's handle is freed either way.
 */
async function readStream(format, source, onDelta) {
  const s = new Stream(format);
  try {
    const response = await s.consume(source, onDelta);
    return { response, body: s.body() };
  } finally {
    s.close();
  }
}

module.exports = {
  Stream,
  readStream,
};
