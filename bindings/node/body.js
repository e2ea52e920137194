'use strict';
// The provider body and its records (docs/node.md, "The provider body"): Buffers lent over the
// library's memory and given back (lend, releaseLent, lentBufferCount), the fixed records the
// hot path fills (lls_request_info, lls_recorded_info: an agent's Scratch and their readers),
// and the results built on them: `Body` (nextBody) and the `nextRequest` result.

const { koffi, C } = require('./native');
const { Status, bindingError } = require('./errors');
const { takeBytes } = require('./bytes');
const { Recorded } = require('./tools');

// Lent bytes: a Buffer over the library's own memory (koffi.view, no copy), given back with
// lls_string_free when the garbage collector releases its ArrayBuffer, or at an explicit
// release(). Outputs under LEND_MIN bytes were copied by the library anyway (it hands out only
// large ones without a copy) and are copied into a JS Buffer and freed at once; provider bodies
// are lent whatever their size (nextBody).

const LEND_MIN = 64 * 1024;
let lentLive = 0;

/** Gives a lent buffer back to the library, once. */
function giveBack(cell) {
  if (cell.ptr) {
    const p = cell.ptr;
    cell.ptr = null;
    lentLive--;
    C.lls_string_free(p);
  }
}

// Registered without an unregister token: release() gives the memory back itself and leaves
// the cell empty, so the collector's later call finds nothing to do. Registering with a token
// (for unregister()) cost about 3 µs a body in the hot path (V8 keeps the tokens in a hash
// table, hashing each new cell), unregister() another 0.5 µs.
const lentRegistry = new FinalizationRegistry(giveBack);

/**
 * Takes an owned output as `{buffer, cell}`: `buffer` reads the library's memory when the output
 * is large (`cell.ptr` set until it is given back), or holds a copy (`cell.ptr` null).
 */
function lend(ptr, len, min = LEND_MIN) {
  const n = Number(len);
  if (n < min) return { buffer: takeBytes(ptr, len), cell: { ptr: null } };
  const ab = koffi.view(ptr, n);
  const cell = { ptr };
  lentLive++;
  lentRegistry.register(ab, cell);
  return { buffer: Buffer.from(ab, 0, n), cell };
}

/** Gives a lent output back now (the Buffer must not be read afterwards). */
function releaseLent(cell) {
  giveBack(cell);
}

function releasedError(what) {
  const message = `${what}: this result was released`;
  return bindingError(Status.INVALID_HANDLE, message);
}

// lls_request_info (include/llmsession.h), read from a Buffer the call fills.
const RequestInfoType = koffi.struct('lls_request_info', {
  instance: 'uint64_t',
  turn: 'uint64_t',
  step: 'uint64_t',
  step_seq: 'uint64_t',
  purpose: 'uint32_t',
  prefix_len: 'uint32_t',
  message_count: 'uint32_t',
  shared_messages: 'uint32_t',
  envelope_len: 'size_t',
  digest: koffi.array('char', 72),
});
const INFO_SIZE = koffi.sizeof(RequestInfoType);
const INFO_AT = Object.fromEntries(
  ['instance', 'turn', 'step', 'step_seq', 'purpose', 'prefix_len', 'message_count', 'shared_messages', 'envelope_len', 'digest'].map(
    (f) => [f, koffi.offsetof(RequestInfoType, f)]));
const PURPOSES = ['conversation', 'compaction', 'keepalive'];

// lls_recorded_info, read from a Buffer the call fills.
const RecordedInfoType = koffi.struct('lls_recorded_info', {
  seq: 'uint64_t',
  tool_calls: 'uint32_t',
  finish_reason: koffi.array('char', 64),
});
const RECORDED_SIZE = koffi.sizeof(RecordedInfoType);
const RECORDED_AT = Object.fromEntries(['seq', 'tool_calls', 'finish_reason'].map((f) => [f, koffi.offsetof(RecordedInfoType, f)]));

// The two fixed records are filled on every hot-path call (recordBody, nextBody), so each agent
// keeps one of each (`Scratch`) instead of a Buffer.alloc per call (an ArrayBuffer with its own
// backing store each time: about 0.3 µs, and work for the collector), and reads them through a
// Uint32Array: a typed-array load per field rather than a Buffer method call (readUInt32LE,
// with its checks), which counts most before V8 optimised the reader, for the first few
// hundred calls of a process. Every offset in both structs is a multiple of 4; a uint64 is read as two
// native-order words, low word first (the little-endian platforms the library is built for).
function wordOffsets(at) {
  return Object.fromEntries(Object.entries(at).map(([f, o]) => {
    if (o % 4 !== 0) throw new Error(`llmsession: field ${f} at byte ${o} is not 4-byte aligned`);
    return [f, o / 4];
  }));
}
const INFO_U32 = wordOffsets(INFO_AT);
const RECORDED_U32 = wordOffsets(RECORDED_AT);

/** An agent's reusable lls_request_info and lls_recorded_info (see above). */
class Scratch {
  constructor() {
    this.info = Buffer.alloc(INFO_SIZE);
    this.info32 = new Uint32Array(this.info.buffer, this.info.byteOffset, INFO_SIZE >> 2);
    this.rec = Buffer.alloc(RECORDED_SIZE);
    this.rec32 = new Uint32Array(this.rec.buffer, this.rec.byteOffset, RECORDED_SIZE >> 2);
  }
}

// Buffer's own latin1Slice and utf8Slice, what toString(encoding, start, end) calls after
// checking its arguments and looking the encoding up (three JS frames, about 1 µs a call while
// interpreted); toString where a runtime has no such methods.
const SLICES = typeof Buffer.prototype.latin1Slice === 'function' && typeof Buffer.prototype.utf8Slice === 'function';

/** The little-endian uint64 at word `i` of `u32`, as a Number (exact below 2^53). */
function u64(u32, i) {
  return u32[i] + u32[i + 1] * 0x100000000;
}

/**
 * The Recorded of a filled lls_recorded_info (`rec`, `u32` its words), whose tool calls are read
 * from `session` when asked for.
 */
function readRecorded(rec, u32, session) {
  const f = RECORDED_AT.finish_reason;
  let finishReason;
  // The library writes the whole record, the reason NUL-terminated within its 64 bytes (a
  // short loop: Buffer's indexOf and toString go through several JS frames each).
  if (rec[f] !== 0) {
    let end = f + 1;
    while (end < f + 63 && rec[end] !== 0) end++;
    finishReason = SLICES ? rec.utf8Slice(f, end) : rec.toString('utf8', f, end);
  }
  return new Recorded(u64(u32, RECORDED_U32.seq), u32[RECORDED_U32.tool_calls], finishReason, session);
}

/** The request description of a filled lls_request_info, in `requestInfo()`'s shape. */
function readRequestInfo(b, u32) {
  const d = INFO_AT.digest;
  // The digest is "sha256:" and 64 hex digits: its NUL is at 71 (looked for otherwise).
  let end = b[d + 71] === 0 && b[d + 70] !== 0 ? d + 71 : b.indexOf(0, d);
  if (end < 0 || end > d + 71) end = d + 71;
  const purpose = u32[INFO_U32.purpose];
  return {
    turn: u64(u32, INFO_U32.turn),
    step: u64(u32, INFO_U32.step),
    digest: SLICES ? b.latin1Slice(d, end) : b.toString('latin1', d, end),
    bytes: u64(u32, INFO_U32.envelope_len),
    prefixLen: u32[INFO_U32.prefix_len],
    messageCount: u32[INFO_U32.message_count],
    sharedMessages: u32[INFO_U32.shared_messages],
    instance: u64(u32, INFO_U32.instance),
    stepSeq: u64(u32, INFO_U32.step_seq),
    purpose: PURPOSES[purpose] || `unknown-${purpose}`,
  };
}

/**
 * The result of `nextBody`: `body` (the provider body, a Buffer over the library's memory,
 * which the agent's renderer keeps and renders the next body from: read it, never write into
 * it), `info`, `json` (the body as a string, decoded on first access), and `release()`.
 */
class Body {
  constructor(lent, info) {
    this._lent = lent;
    this.info = info;
    this._json = undefined;
  }

  /** The provider body, ready to POST (a Buffer over the library's memory while it is large). */
  get body() {
    if (this._lent === null) throw releasedError('body');
    return this._lent.buffer;
  }

  /** The body as a string (decoded on first access, then kept). */
  get json() {
    if (this._json === undefined) this._json = this.body.toString('utf8');
    return this._json;
  }

  /**
   * Gives the body's memory back to the library now rather than when the garbage collector
   * releases it. `body` then throws; a Buffer taken from it before must not be read any more.
   */
  release() {
    if (this._lent !== null) {
      releaseLent(this._lent.cell);
      this._lent = null;
    }
  }

  get released() {
    return this._lent === null;
  }
}

/**
 * The result of `nextRequest`: `bytes` (a Buffer of the exact envelope bytes), and, decoded on
 * first use and then kept, `json` (the same bytes as a string) and `envelope` (parsed). A host
 * that sends `bytes` never pays for a JS string or an object tree of the whole request (at 1k
 * messages, about 0.5 MB: decoding takes longer than building it).
 */
function builtRequest(lent, info) {
  let json;
  let envelope;
  const r = { info };
  Object.defineProperty(r, 'bytes', {
    enumerable: true,
    get() {
      if (lent === null) throw releasedError('bytes');
      return lent.buffer;
    },
  });
  Object.defineProperty(r, 'json', {
    enumerable: true,
    get() {
      if (json === undefined) json = r.bytes.toString('utf8');
      return json;
    },
  });
  // Gives the envelope's memory back now (see Body#release).
  Object.defineProperty(r, 'release', {
    value() {
      if (lent !== null) {
        releaseLent(lent.cell);
        lent = null;
      }
    },
  });
  Object.defineProperty(r, 'envelope', {
    enumerable: true,
    get() {
      if (envelope === undefined) envelope = JSON.parse(r.json);
      return envelope;
    },
  });
  return r;
}

/** Number of Buffers over library memory not yet given back (by the collector or release()). */
function lentBufferCount() {
  return lentLive;
}

module.exports = {
  lend,
  releaseLent,
  lentBufferCount,
  Scratch,
  readRecorded,
  readRequestInfo,
  Body,
  builtRequest,
};
