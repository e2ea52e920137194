'use strict';
// Provider formats without an agent: rendering an envelope into a provider body (render,
// renderWithOptions), parsing a provider's response (parseResponse) and usage
// (usageFromProvider), and recognising a context overflow (isContextOverflow).

const { C } = require('./native');
const { utf8, jsonBuf, callOut, callJson } = require('./bytes');

/** Renders an envelope (object or exact JSON text) into a provider body (JSON text). */
function render(renderer, envelope, prefixLen = 0) {
  const r = utf8(renderer);
  const e = jsonBuf(envelope);
  return callOut(C.lls_render, r, r.length, e, e.length, prefixLen);
}

/**
 * Parses a provider's response body (JSON text, a Buffer or an object) into
 * `{message, usage?, finishReason?}`, which `agent.recordResponse` takes as it is.
 */
function parseResponse(renderer, body) {
  const r = utf8(renderer);
  const b = jsonBuf(body);
  return callJson(C.lls_parse_response, r, r.length, b, b.length);
}

/** Maps a provider's usage object ("openai", "llama.cpp", "deepseek", "openai-responses", "anthropic", "gemini") into a Usage. */
function usageFromProvider(provider, usage) {
  const p = utf8(provider);
  const u = jsonBuf(usage);
  return callJson(C.lls_usage_from_provider, p, p.length, u, u.length);
}

/** Whether a provider error (HTTP status and body) says the prompt did not fit the context. */
function isContextOverflow(status, body) {
  if (!Number.isInteger(status) || status < 0 || status > 65535) {
    throw new TypeError(`isContextOverflow: status must be an HTTP status code, got ${status}`);
  }
  const b = Buffer.isBuffer(body) ? body : utf8(String(body));
  return C.lls_is_context_overflow(status, b, b.length);
}

/**
 * Renders an envelope as `render` does, with render options `{prefixLen?, promptCacheKey?: true |
 * false | string, promptCacheRetention?, cacheTtl?: '5m' | '1h', promptCacheOptions?: {mode?, ttl?},
 * promptCacheBreakpoints?: boolean}` (`docs/render.md`).
 */
function renderWithOptions(renderer, envelope, options) {
  const r = utf8(renderer);
  const e = jsonBuf(envelope);
  const o = options === undefined || options === null ? null : jsonBuf(options);
  return callOut(C.lls_render_with_options, r, r.length, e, e.length, o, o ? o.length : 0);
}

module.exports = {
  render,
  renderWithOptions,
  parseResponse,
  usageFromProvider,
  isContextOverflow,
};
