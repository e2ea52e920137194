'use strict';
// Bytes and JSON across the boundary: arguments (utf8, bytesArg, jsonBuf), the library's owned
// outputs taken into JS and freed (takeBytes, takeString), the calls whose last parameters are
// an owned output (callOut, callJson), and sequence numbers out (seqNumber, SEQ_NONE).

const { koffi, C } = require('./native');
const { check } = require('./errors');

const SEQ_NONE = 0xffffffffffffffffn;

function utf8(s) {
  return Buffer.from(s, 'utf8');
}

/** Raw bytes from a Buffer, a Uint8Array or a string (a Buffer with no address when empty). */
function bytesArg(v, what) {
  if (Buffer.isBuffer(v)) return v.length === 0 ? Buffer.alloc(1, 0).subarray(0, 0) : v;
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (typeof v === 'string') return utf8(v);
  throw new TypeError(`${what}: expected a Buffer, a Uint8Array or a string`);
}

function jsonBuf(v) {
  if (Buffer.isBuffer(v)) return v;
  return utf8(typeof v === 'string' ? v : JSON.stringify(v));
}

/** Copies an owned output into a Buffer (one memcpy, no decoding) and frees it. */
function takeBytes(ptr, len) {
  if (!ptr) return null;
  const n = Number(len);
  const bytes = Buffer.allocUnsafe(n);
  if (n > 0) bytes.set(new Uint8Array(koffi.view(ptr, n)));
  C.lls_string_free(ptr);
  return bytes;
}

/** Reads and frees an owned output string. */
function takeString(ptr, len) {
  const bytes = takeBytes(ptr, len);
  return bytes === null ? null : bytes.toString('utf8');
}

/** Calls an entry point whose last three parameters are (char **out, size_t *out_len, err). */
function callOut(fn, ...args) {
  const out = [null];
  const len = [0];
  const err = [null];
  const st = fn(...args, out, len, err);
  check(st, err);
  return takeString(out[0], len[0]);
}

function callJson(fn, ...args) {
  return JSON.parse(callOut(fn, ...args));
}

function seqNumber(v) {
  if (typeof v === 'bigint') return v === SEQ_NONE ? null : Number(v);
  return v;
}

module.exports = {
  SEQ_NONE,
  utf8,
  bytesArg,
  jsonBuf,
  takeBytes,
  takeString,
  callOut,
  callJson,
  seqNumber,
};
