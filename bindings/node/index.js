'use strict';
// Node binding of llmsession's C ABI (include/llmsession.h, docs/abi.md), through koffi.
//
// Threading model (docs/node.md): operations that may call back into JS (nextRequest, compact,
// providerError, measure) run the library call on a koffi worker thread (`fn.async`). When the
// library calls a host callback on that worker, koffi queues the JS call on the main thread and
// the worker waits for it to return. The trampoline calls the JS function; a plain value is
// answered at once (lls_reply_set_json, LLS_CB_OK); a Promise makes the trampoline return
// LLS_CB_PENDING, and the reply is completed (lls_reply_complete / lls_reply_fail) on the main
// thread when the Promise settles, while the library waits on its worker thread.

const { EventEmitter } = require('events');
const fs = require('fs');
const path = require('path');
const platform = require('./platform');
const koffi = requireKoffi();

// koffi, this package's one dependency. `npm install <folder>` with a folder outside the
// project makes a symlink and installs none of the folder's dependencies, and Node resolves
// `require` from the folder's real path; so when the folder has no node_modules/koffi, koffi
// is looked up from the program's side too (its main module and working directory), where
// `npm install koffi` puts it.
function requireKoffi() {
  try {
    return require('koffi');
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND' || !String(e.message).includes("'koffi'")) throw e;
    const from = [require.main && require.main.path, process.cwd()].filter(Boolean);
    try {
      return require(require.resolve('koffi', { paths: from }));
    } catch {
      throw new Error(
        `llmsession: cannot find the koffi package from ${__dirname} or ${from.join(', ')}. ` +
          'A folder given to `npm install <folder>` is linked without its dependencies: install it with ' +
          '`npm install --install-links <folder>`, or from the tarball `npm pack` makes, or also ' +
          'run `npm install koffi@2.16.3` in your project (bindings/node/README.md).', { cause: e });
    }
  }
}

/** The C ABI version this binding was written against (LLS_ABI_VERSION). */
const ABI_VERSION = 2;
/**
 * The oldest ABI minor version (compatible additions to ABI_VERSION) this binding loads: 2
 * brought lls_status_name, which names the kind of every error, 3 the observer hook
 * (lls_set_observer, behind setObserver and observer), 4 the finish reason of a recorded
 * response (lls_agent_record_body_info, behind recordBody and recordStream).
 */
const ABI_MINOR = 4;

/** Status codes (lls_status), as in include/llmsession.h. */
const Status = Object.freeze({
  OK: 0,
  MALFORMED_JSON: 1,
  INVALID_INPUT: 2,
  OUT_OF_ORDER: 3,
  BUSY: 4,
  CORRUPT_LOG: 5,
  STORAGE: 6,
  CANCELLED: 7,
  DISPOSED: 8,
  LISTENER: 9,
  SUMMARISER: 10,
  RECONSTRUCTION: 11,
  INVALID_POLICY: 12,
  OVERFLOW_BUDGET: 13,
  NOTHING_TO_COMPACT: 14,
  TOKENIZER: 15,
  POISONED: 16,
  INTERNAL: 17,
  LOCKED: 18,
  CONFLICT: 19,
  READ_ONLY: 20,
  NULL_POINTER: 100,
  INVALID_UTF8: 101,
  INVALID_HANDLE: 102,
  PANIC: 103,
  INVALID_ARGUMENT: 104,
  REPLY_STATE: 105,
  OUT_OF_MEMORY: 106,
});

const CB_OK = 0;
const CB_PENDING = 1;
const CB_ERROR = 2;
const SEQ_NONE = 0xffffffffffffffffn;

/** The C name of a status, the Node-style `code` of an error: 18 → "LLS_ERR_LOCKED". */
function codeOf(status) {
  const name = Object.keys(Status).find((k) => Status[k] === status);
  if (name === undefined) return 'LLS_ERR_UNKNOWN';
  return name === 'OK' ? 'LLS_OK' : `LLS_ERR_${name}`;
}

/**
 * An error reported by llmsession: `status` (the lls_status code), `code` (its C name, e.g.
 * "LLS_ERR_LOCKED", for `switch (e.code)`), `kind` (its stable name, e.g. "listener"),
 * `message`, and `detail` (the parsed JSON detail: field, seq, line, ...).
 */
class LlmSessionError extends Error {
  constructor(status, message, detail, options) {
    super(message, options);
    this.name = 'LlmSessionError';
    this.status = status;
    this.code = codeOf(status);
    this.kind = (detail && detail.kind) || statusName(status);
    this.detail = detail || { kind: this.kind, status, message };
  }
}

/**
 * Thrown (or rejected with) by a listener, summariser or token counter to fail its reply on
 * purpose: the library call then fails with the library's own error (LlmSessionError, status
 * LISTENER or that of the operation), whose message includes this one. Any other exception is
 * treated as a bug in the callback and re-raised as is (see docs/node.md).
 */
class CallbackError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'CallbackError';
  }
}

// ---------------------------------------------------------------------------------------------
// Loading

// Where to look when LLMSESSION_LIB is not set, in order (docs/node.md, "Loading"), and the
// platform package when one is installed.
function candidates() {
  const list = [];
  // A checkout: the library staged by `make build-lib` (not when installed in node_modules,
  // where ../../build would be the project's own folder).
  if (path.basename(path.dirname(__dirname)) !== 'node_modules') {
    const built = path.resolve(__dirname, '..', '..', 'build', 'lib', 'libllmsession.so');
    if (fs.existsSync(built)) list.push(built);
  }
  // The platform package npm installed with this one (platform.js), when there is one.
  const pkg = platform.find();
  if (pkg) list.push(pkg.library);
  // An installed copy, found by the dynamic loader (soname first).
  list.push('libllmsession.so.0.2', 'libllmsession.so');
  // The prefix `make install` used, when pkg-config knows it (PKG_CONFIG_PATH, as for C).
  const libdir = pkgConfigLibdir();
  const dirs = libdir ? [libdir, '/usr/local/lib', '/usr/lib'] : ['/usr/local/lib', '/usr/lib'];
  for (const dir of dirs) {
    const p = path.join(dir, 'libllmsession.so');
    if (fs.existsSync(p)) list.push(p);
  }
  return { list, pkg };
}

// `pkg-config --variable=libdir llmsession`, or null (no pkg-config, no .pc file found).
function pkgConfigLibdir() {
  try {
    const out = require('child_process').execFileSync('pkg-config', ['--variable=libdir', 'llmsession'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 5000,
    });
    return out.trim() || null;
  } catch {
    return null;
  }
}

function loadLibrary() {
  if (process.env.LLMSESSION_LIB) {
    const file = process.env.LLMSESSION_LIB;
    try {
      return { lib: koffi.load(file), file };
    } catch (e) {
      throw new Error(`llmsession: cannot load the shared library LLMSESSION_LIB names: ${file}: ${e.message}`,
        { cause: e });
    }
  }
  const { list, pkg } = candidates();
  const tried = [];
  for (const c of list) {
    try {
      return { lib: koffi.load(c), file: c };
    } catch (e) {
      tried.push(`${c}: ${e.message}`);
    }
  }
  const version = require('./package.json').version;
  const why = pkg
    ? `the platform package ${pkg.name} ${pkg.version} is installed (${pkg.dir}) but its library did not load`
    : platform.missing(version);
  throw new Error(
    `llmsession: cannot load the shared library: ${why}. Otherwise build it with \`make build-lib\` ` +
      'in a checkout, install it with `make install`, or name it with LLMSESSION_LIB. Tried:\n  ' +
      tried.join('\n  '));
}

const { lib, file: libraryPath } = loadLibrary();

const opaque = (name) => koffi.pointer(name, koffi.opaque());
const P_session = opaque('lls_session');
const P_agent = opaque('lls_agent');
const P_cancel = opaque('lls_cancel');
const P_error = opaque('lls_error');
const P_reply = opaque('lls_reply');
const P_replay = opaque('lls_replay');
const P_str = opaque('lls_owned_str');
const P_stream = opaque('lls_stream');
// `void *userdata` is passed as an integer id (same register class on every supported ABI).
const CallbackFn = koffi.proto(
  'int32_t lls_callback_fn(intptr_t userdata, const char *in_json, size_t in_len, lls_reply *reply)');
const FreeFn = koffi.proto('void lls_userdata_free_fn(intptr_t userdata)');

const ERR = '_Out_ lls_error **err';
const OUTS = `_Out_ lls_owned_str **out, _Out_ size_t *out_len, ${ERR}`;
const REG = `lls_callback_fn *callback, intptr_t userdata, lls_userdata_free_fn *userdata_free, ${ERR}`;

const C = {};
function def(name, ret, params) {
  C[name] = lib.func(`${ret} ${name}(${params})`);
}
// The hot-path entry points again, with the bytes declared `const char *`, for a JS string:
// koffi writes its UTF-8 into the call's own memory, where `Buffer.from` would make a Buffer
// first (through Node's JS buffer code: 1 to 3 µs a call for a 0.5 KB reply in the naive-host
// benchmark, issue 28). The length passed with it is `Buffer.byteLength`, which counts the bytes
// V8 writes (a lone surrogate as the 3 bytes of U+FFFD, as `Buffer.from` writes it). Only for
// strings that fit koffi's call memory (2 MiB) at once, at up to 3 bytes a UTF-16 unit; a
// longer one goes through a Buffer as before (`shortString`).
const S = {};
const SHORT_STRING = 0x40000;
const shortString = (v) => typeof v === 'string' && v.length < SHORT_STRING;
def('lls_abi_version', 'uint32_t', 'void');
def('lls_version', 'const char *', 'void');
def('lls_live_handle_count', 'size_t', 'void');
def('lls_string_free', 'void', 'lls_owned_str *s');
def('lls_error_code', 'int32_t', 'const lls_error *e');
def('lls_error_message', 'const char *', 'const lls_error *e');
def('lls_error_detail', 'const char *', 'const lls_error *e');
def('lls_error_free', 'void', 'lls_error *e');
def('lls_cancel_new', 'int32_t', `_Out_ lls_cancel **out, ${ERR}`);
def('lls_cancel_trip', 'int32_t', `const lls_cancel *c, ${ERR}`);
def('lls_cancel_free', 'void', 'lls_cancel *c');
def('lls_reply_set_json', 'int32_t', `lls_reply *r, const uint8_t *json, size_t len, ${ERR}`);
def('lls_reply_complete', 'int32_t', `lls_reply *r, const uint8_t *json, size_t len, ${ERR}`);
def('lls_reply_fail', 'int32_t', `lls_reply *r, const uint8_t *msg, size_t len, ${ERR}`);
def('lls_callback_invoke', 'int32_t',
  `lls_callback_fn *callback, intptr_t userdata, lls_userdata_free_fn *userdata_free, const uint8_t *in_json, size_t in_len, const lls_cancel *cancel, ${OUTS}`);
def('lls_render', 'int32_t', `const uint8_t *renderer, size_t rlen, const uint8_t *env, size_t elen, size_t prefix_len, ${OUTS}`);
def('lls_render_with_options', 'int32_t',
  `const uint8_t *renderer, size_t rlen, const uint8_t *env, size_t elen, const uint8_t *opts, size_t olen, ${OUTS}`);
def('lls_verify_file', 'int32_t', `const uint8_t *path, size_t plen, ${OUTS}`);
def('lls_explain_file', 'int32_t', `const uint8_t *path, size_t plen, const uint8_t *opts, size_t olen, ${OUTS}`);
def('lls_replay_open_file', 'int32_t', `const uint8_t *path, size_t plen, _Out_ lls_replay **out, ${ERR}`);
def('lls_replay_new', 'int32_t', `const lls_session *s, _Out_ lls_replay **out, ${ERR}`);
def('lls_replay_answer', 'int32_t', `const lls_replay *r, const uint8_t *env, size_t elen, ${OUTS}`);
def('lls_replay_info', 'int32_t', `const lls_replay *r, ${OUTS}`);
def('lls_replay_free', 'void', 'lls_replay *r');
def('lls_parse_response', 'int32_t', `const uint8_t *renderer, size_t rlen, const uint8_t *body, size_t blen, ${OUTS}`);
def('lls_usage_from_provider', 'int32_t', `const uint8_t *provider, size_t plen, const uint8_t *usage, size_t ulen, ${OUTS}`);
def('lls_is_context_overflow', 'bool', 'uint16_t status, const uint8_t *body, size_t blen');
def('lls_stream_new', 'int32_t', `const uint8_t *format, size_t flen, _Out_ lls_stream **out, ${ERR}`);
def('lls_stream_feed', 'int32_t', `lls_stream *s, const uint8_t *bytes, size_t len, ${ERR}`);
def('lls_stream_next_delta', 'int32_t', `lls_stream *s, ${OUTS}`);
def('lls_stream_finish', 'int32_t', `lls_stream *s, bool partial, ${OUTS}`);
def('lls_stream_body', 'int32_t', `const lls_stream *s, ${OUTS}`);
def('lls_stream_free', 'void', 'lls_stream *s');

def('lls_session_new_memory', 'int32_t', `const uint8_t *opts, size_t len, _Out_ lls_session **out, ${ERR}`);
def('lls_session_open_file', 'int32_t',
  `const uint8_t *path, size_t plen, const uint8_t *opts, size_t len, _Out_ lls_session **out, ${ERR}`);
def('lls_session_fork', 'int32_t', `const lls_session *s, const uint8_t *opts, size_t len, _Out_ lls_session **out, ${ERR}`);
def('lls_session_free', 'void', 'lls_session *s');
for (const n of ['load_report', 'id', 'info', 'history', 'header', 'stats', 'verify', 'export']) {
  def(`lls_session_${n}`, 'int32_t', `const lls_session *s, ${OUTS}`);
}
def('lls_session_events', 'int32_t', `const lls_session *s, uint64_t from, uint64_t to, ${OUTS}`);
def('lls_session_explain', 'int32_t', `const lls_session *s, const uint8_t *opts, size_t olen, ${OUTS}`);
def('lls_session_append', 'int32_t', `lls_session *s, const uint8_t *ev, size_t len, _Out_ uint64_t *seq, ${ERR}`);
def('lls_session_sync', 'int32_t', `lls_session *s, ${ERR}`);
def('lls_session_refresh', 'int32_t', `lls_session *s, _Out_ uint64_t *n, ${ERR}`);

def('lls_agent_new', 'int32_t', `const lls_session *s, const uint8_t *opts, size_t len, _Out_ lls_agent **out, ${ERR}`);
def('lls_agent_set_options', 'int32_t', `lls_agent *a, const uint8_t *opts, size_t len, ${ERR}`);
def('lls_agent_set_policy', 'int32_t', `lls_agent *a, const uint8_t *p, size_t len, ${ERR}`);
def('lls_agent_set_tokenizer', 'int32_t', `lls_agent *a, const uint8_t *p, size_t len, ${ERR}`);
def('lls_agent_clear_token_counter', 'int32_t', `lls_agent *a, ${ERR}`);
for (const n of ['add_prefix_listener', 'add_pre_step_listener', 'set_summariser', 'set_token_counter']) {
  def(`lls_agent_${n}`, 'int32_t', `lls_agent *a, ${REG}`);
}
def('lls_agent_start_turn', 'int32_t', `lls_agent *a, const uint8_t *m, size_t len, _Out_ uint64_t *turn, ${ERR}`);
def('lls_agent_next_request', 'int32_t', `lls_agent *a, const lls_cancel *c, ${OUTS}`);
def('lls_agent_request_info', 'int32_t', `const lls_agent *a, ${OUTS}`);
def('lls_agent_record_response', 'int32_t', `lls_agent *a, const uint8_t *r, size_t len, _Out_ uint64_t *seq, ${ERR}`);
def('lls_agent_record_tool_result', 'int32_t', `lls_agent *a, const uint8_t *r, size_t len, _Out_ size_t *written, ${ERR}`);
// The same entry point for a JS string (see `S`).
S.lls_agent_record_tool_result = lib.func(
  `int32_t lls_agent_record_tool_result(lls_agent *a, const char *r, size_t len, _Out_ size_t *written, ${ERR})`);
def('lls_agent_inject', 'int32_t', `lls_agent *a, const uint8_t *m, size_t len, _Out_ uint64_t *seq, ${ERR}`);
def('lls_agent_provider_error', 'int32_t',
  `lls_agent *a, const uint8_t *e, size_t len, const lls_cancel *c, _Out_ int32_t *retry, ${ERR}`);
def('lls_agent_end_turn', 'int32_t', `lls_agent *a, const uint8_t *r, size_t len, ${ERR}`);
def('lls_agent_compact', 'int32_t', `lls_agent *a, const uint8_t *o, size_t len, const lls_cancel *c, ${OUTS}`);
def('lls_agent_measure', 'int32_t', `lls_agent *a, ${OUTS}`);
def('lls_agent_stats', 'int32_t', `const lls_agent *a, ${OUTS}`);
def('lls_agent_prefix', 'int32_t', `const lls_agent *a, ${OUTS}`);
def('lls_agent_dispose', 'int32_t', `lls_agent *a, ${ERR}`);
def('lls_agent_free', 'void', 'lls_agent *a');

const loadedAbi = C.lls_abi_version();
if (loadedAbi !== ABI_VERSION) {
  throw new Error(
    `llmsession: ${libraryPath} has ABI version ${loadedAbi}, but this binding needs ${ABI_VERSION}`);
}
// The additions within ABI 2 this binding calls (docs/abi.md): a library of the same ABI may
// predate them, so its minor is checked before they are bound. lls_abi_minor itself came with
// minor 1: a library without it is minor 0.
let loadedMinor = 0;
try {
  def('lls_abi_minor', 'uint32_t', 'void');
  loadedMinor = C.lls_abi_minor();
} catch (e) {
  loadedMinor = 0;
}
if (loadedMinor < ABI_MINOR) {
  throw new Error(
    `llmsession: ${libraryPath} (version ${C.lls_version()}) has ABI version ${loadedAbi}.${loadedMinor}, ` +
      `but this binding needs ${ABI_VERSION}.${ABI_MINOR} or later; use a newer libllmsession`);
}
// Minor 1: the one-way hot path (docs/node.md, "The provider body") and the string leak check.
def('lls_agent_set_renderer', 'int32_t', `lls_agent *a, const uint8_t *r, size_t rlen, const uint8_t *o, size_t olen, ${ERR}`);
def('lls_agent_next_body', 'int32_t',
  `lls_agent *a, const lls_cancel *c, _Out_ lls_owned_str **body, _Out_ size_t *body_len, uint8_t *info, ${ERR}`);
def('lls_agent_last_envelope', 'int32_t', `const lls_agent *a, ${OUTS}`);
def('lls_agent_record_body', 'int32_t',
  `lls_agent *a, const uint8_t *b, size_t len, _Out_ uint64_t *seq, _Out_ uint32_t *tool_calls, ${ERR}`);
def('lls_agent_record_stream', 'int32_t',
  `lls_agent *a, lls_stream *s, bool partial, _Out_ uint64_t *seq, _Out_ uint32_t *tool_calls, ${ERR}`);
def('lls_live_string_count', 'size_t', 'void');
// Minor 2: status names.
def('lls_status_name', 'const char *', 'int32_t status');
// Minor 3: the observer hook (setObserver, observer; docs/observe.md).
const ObserverFn = koffi.proto('void lls_observer_fn(intptr_t userdata, int32_t level, const char *json, size_t json_len)');
def('lls_set_observer', 'int32_t',
  `lls_observer_fn *observer, intptr_t userdata, lls_userdata_free_fn *userdata_free, int32_t min_level, ${ERR}`);
// Minor 4: what a recorded response was, with its finish reason (lls_recorded_info).
def('lls_agent_record_body_info', 'int32_t', `lls_agent *a, const uint8_t *b, size_t len, uint8_t *rec, ${ERR}`);
S.lls_agent_record_body_info = lib.func(
  `int32_t lls_agent_record_body_info(lls_agent *a, const char *b, size_t len, uint8_t *rec, ${ERR})`);
def('lls_agent_record_stream_info', 'int32_t', `lls_agent *a, lls_stream *s, bool partial, uint8_t *rec, ${ERR}`);

/**
 * The stable name of a status, as the library gives it (lls_status_name) and as error details
 * carry it in `kind`: 5 → "corrupt-log", 102 → "invalid-handle"; "unknown" for a value the
 * library does not define.
 */
function statusName(status) {
  if (!Number.isInteger(status) || status < -0x80000000 || status > 0x7fffffff) {
    throw new TypeError(`statusName: a status is a 32-bit integer, got ${String(status)}`);
  }
  return C.lls_status_name(status);
}

/** An LlmSessionError the binding raises itself, with the detail the library would give. */
function bindingError(status, message) {
  return new LlmSessionError(status, message, { kind: statusName(status), status, message });
}

// ---------------------------------------------------------------------------------------------
// Helpers

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

/** Turns an lls_error* into an LlmSessionError and frees it. */
function takeError(status, errPtr, cause) {
  if (!errPtr) {
    return new LlmSessionError(status, `llmsession call failed with status ${status}`, null, cause ? { cause } : undefined);
  }
  const code = C.lls_error_code(errPtr);
  const message = C.lls_error_message(errPtr);
  let detail = null;
  try {
    detail = JSON.parse(C.lls_error_detail(errPtr));
  } catch (_) {
    detail = null;
  }
  C.lls_error_free(errPtr);
  return new LlmSessionError(code, message, detail, cause ? { cause } : undefined);
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

// ---------------------------------------------------------------------------------------------
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
const PURPOSES = ['conversation', 'compaction'];

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

/** `{seq, toolCalls, finishReason?}` of a filled lls_recorded_info (`rec`, `u32` its words). */
function readRecorded(rec, u32) {
  const r = { seq: u64(u32, RECORDED_U32.seq), toolCalls: u32[RECORDED_U32.tool_calls] };
  const f = RECORDED_AT.finish_reason;
  // The library writes the whole record, the reason NUL-terminated within its 64 bytes (a
  // short loop: Buffer's indexOf and toString go through several JS frames each).
  if (rec[f] !== 0) {
    let end = f + 1;
    while (end < f + 63 && rec[end] !== 0) end++;
    r.finishReason = SLICES ? rec.utf8Slice(f, end) : rec.toString('utf8', f, end);
  }
  return r;
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
 * The result of `nextBody`: `body` (the provider body, a Buffer over the library's memory),
 * `info`, `json` (the body as a string, decoded on first access), and `release()`.
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

function check(status, err) {
  if (status !== Status.OK) throw takeError(status, err[0]);
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

function userMessage(m) {
  return typeof m === 'string' ? { role: 'user', content: [{ type: 'text', text: m }] } : m;
}

/** Runs `fn(...args)` on the main thread and returns its status (an operation's `run` when sync). */
function runSync(fn, args) {
  return fn(...args);
}

/** Runs `fn.async(...args, cb)` and resolves with its status. */
function runAsync(fn, args) {
  return new Promise((resolve, reject) => {
    fn.async(...args, (e, st) => (e ? reject(e) : resolve(st)));
  });
}

// ---------------------------------------------------------------------------------------------
// Callbacks

/** Live registrations: id -> entry. An entry is released once, by the library's userdata_free. */
const registrations = new Map();
let nextId = 1;

const freeTrampoline = koffi.register((id) => {
  const entry = registrations.get(Number(id));
  if (!entry) return;
  registrations.delete(Number(id));
  entry.released = true;
  if (entry.core) entry.core.callbacks--;
  koffi.unregister(entry.ptr);
}, koffi.pointer(FreeFn));

function replyText(reply, text, pending) {
  const buf = utf8(text);
  const err = [null];
  const st = (pending ? C.lls_reply_complete : C.lls_reply_set_json)(reply, buf, buf.length, err);
  if (st !== Status.OK) {
    // The reply was answered with the failure by the library (unusable JSON), or was answered
    // already; report nothing more here, the library call fails with LISTENER.
    if (err[0]) C.lls_error_free(err[0]);
  }
}

function replyFail(reply, message) {
  const buf = utf8(message || 'host callback failed');
  const err = [null];
  C.lls_reply_fail(reply, buf, buf.length, err);
  if (err[0]) C.lls_error_free(err[0]);
}

function describe(e) {
  if (e instanceof Error) return e.message;
  return String(e);
}

/**
 * Creates a registration for `fn`. `encode` turns the JS result into reply JSON text. `core` is
 * the owner's state: callbacks record exceptions there (`core.op`) so that the running
 * operation re-raises them.
 */
function register(core, fn, encode) {
  if (typeof fn !== 'function') throw new TypeError('expected a function');
  const id = nextId++;
  // `core.callbacks` counts the owner's live registrations (released by the library through
  // freeTrampoline): an agent with none runs its operations on the main thread (Agent#_async).
  const entry = { id, ptr: null, released: false, core };
  core.callbacks = (core.callbacks || 0) + 1;
  entry.ptr = koffi.register((_ud, inJson, _len, reply) => {
    const op = core.op;
    const ctx = { signal: op && op.controller ? op.controller.signal : new AbortController().signal };
    let input;
    let result;
    try {
      input = JSON.parse(inJson);
      result = fn(input, ctx);
    } catch (e) {
      if (op && !(e instanceof CallbackError)) op.errors.push(e);
      replyFail(reply, describe(e));
      return CB_ERROR;
    }
    // A dispose started from a callback (on another worker) must end the operation: the reply
    // is answered only once that disposal returned, so the library is still waiting when the
    // dispose ends its wait (the answer is then discarded).
    const afterDispose = (answer) => {
      const d = op && op.disposeDuringCallback;
      if (d) d.then(answer, answer);
      else answer();
    };
    if (result && typeof result.then === 'function') {
      if (!op || !op.async) {
        const e = new CallbackError('this operation is synchronous: its callback must not return a Promise');
        replyFail(reply, e.message);
        return CB_ERROR;
      }
      op.pending++;
      Promise.resolve(result).then(
        (v) => {
          let t;
          try {
            t = encode(v);
          } catch (e) {
            op.errors.push(e);
            replyFail(reply, describe(e));
            return;
          }
          afterDispose(() => replyText(reply, t, true));
        },
        (e) => {
          // After an abort, a rejection is the callback giving up (an AbortError from fetch):
          // the operation reports CANCELLED, not this error.
          if (!(e instanceof CallbackError) && !op.controller.signal.aborted) op.errors.push(e);
          afterDispose(() => replyFail(reply, describe(e)));
        },
      ).finally(() => {
        op.pending--;
      });
      return CB_PENDING;
    }
    let text;
    try {
      text = encode(result);
    } catch (e) {
      if (op) op.errors.push(e);
      replyFail(reply, describe(e));
      return CB_ERROR;
    }
    if (op && op.disposeDuringCallback) {
      afterDispose(() => replyText(reply, text, true));
      return CB_PENDING;
    }
    replyText(reply, text, false);
    return CB_OK;
  }, koffi.pointer(CallbackFn));
  registrations.set(id, entry);
  return entry;
}

const toJson = (v) => (v === undefined ? 'null' : JSON.stringify(v));
// Replies go to the library as given; it validates them (an unusable reply fails the call
// with LISTENER and a message saying what was wrong).
const encoders = {
  messages: toJson,
  ignore: () => 'null',
  summary: (v) => JSON.stringify(typeof v === 'string' ? { text: v } : v === undefined ? null : v),
  count: toJson,
  any: toJson,
};

/**
 * Calls `fn` through the library's own callback machinery (lls_callback_invoke), as it calls
 * listeners: a self-test of the trampoline. Resolves with the answer (parsed JSON).
 */
async function invokeCallback(fn, input, options = {}) {
  const core = { op: null };
  const op = newOp(core, options.signal);
  const entry = register(core, fn, encoders.any);
  const inBuf = jsonBuf(input);
  const out = [null];
  const len = [0];
  const err = [null];
  try {
    const st = await runAsync(C.lls_callback_invoke, [entry.ptr, entry.id, freeTrampoline, inBuf, inBuf.length, op.cancel, out, len, err]);
    return JSON.parse(finishOp(op, st, err, () => takeString(out[0], len[0])));
  } finally {
    endOp(core, op);
  }
}

// ---------------------------------------------------------------------------------------------
// Operations (one at a time per agent): a cancel token, an AbortSignal, errors from callbacks.

/**
 * A new operation. `sync`: the library call runs on the main thread (`op.run` calls it
 * directly); no callback can run during it, so the operation needs a cancel token only for a
 * `signal` (one that aborts later cannot fire while the main thread is in the call) and no
 * AbortController for callbacks. Otherwise `op.run` runs the call on a koffi worker thread.
 */
function newOp(core, signal, sync = false) {
  let cancel = null;
  if (!sync || signal) {
    const out = [null];
    const err = [null];
    check(C.lls_cancel_new(out, err), err);
    cancel = out[0];
  }
  const op = {
    cancel,
    controller: sync ? null : new AbortController(),
    errors: [],
    pending: 0,
    async: !sync,
    sync,
    disposeDuringCallback: null,
    signal,
    onAbort: null,
    run: sync ? runSync : runAsync,
  };
  if (signal) {
    op.onAbort = () => {
      C.lls_cancel_trip(op.cancel, null);
      if (op.controller) op.controller.abort(signal.reason);
    };
    if (signal.aborted) op.onAbort();
    else signal.addEventListener('abort', op.onAbort, { once: true });
  }
  core.op = op;
  return op;
}

function endOp(core, op) {
  if (op.signal && op.onAbort) op.signal.removeEventListener('abort', op.onAbort);
  if (op.cancel) C.lls_cancel_free(op.cancel);
  op.cancel = null;
  if (core.op === op) core.op = null;
}

/** The result of an operation: the first exception a callback threw wins over everything. */
function finishOp(op, status, err, onOk) {
  if (op.errors.length > 0) {
    if (status !== Status.OK && err[0]) C.lls_error_free(err[0]);
    if (status === Status.OK && onOk) {
      // The library went ahead (e.g. a failed automatic compaction is only logged), but a
      // callback threw: never report that as a success. Free what it returned.
      try {
        onOk();
      } catch (_) {
        /* ignore */
      }
    }
    if (status !== Status.OK && op.controller) op.controller.abort();
    throw op.errors[0];
  }
  if (status !== Status.OK) {
    if (op.controller) op.controller.abort();
    throw takeError(status, err[0]);
  }
  return onOk ? onOk() : undefined;
}

// ---------------------------------------------------------------------------------------------
// Handles and the FinalizationRegistry safety net

const finalizer = new FinalizationRegistry((core) => {
  if (core.ptr) {
    const p = core.ptr;
    core.ptr = null;
    core.free(p);
  }
});

function outOfOrder(message) {
  return bindingError(Status.OUT_OF_ORDER, message);
}

function closedError(what) {
  return bindingError(Status.INVALID_HANDLE, `this ${what} was closed`);
}

function livePtr(core, what) {
  if (!core.ptr) throw closedError(what);
  return core.ptr;
}

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

const SETTLED = Promise.resolve();

/** An agent instance over a session. */
class Agent {
  constructor(session, options) {
    if (!(session instanceof Session)) throw new TypeError('Agent needs a Session');
    const b = jsonBuf(options);
    const out = [null];
    const err = [null];
    check(C.lls_agent_new(session._ptr, b, b.length, out, err), err);
    this.session = session;
    this._core = {
      ptr: out[0],
      op: null,
      busy: false,
      callbacks: 0,
      scratch: new Scratch(),
      unbusy: null,
      free: (p) => C.lls_agent_free(p),
    };
    const core = this._core;
    core.unbusy = () => {
      core.busy = false;
    };
    finalizer.register(this, this._core, this);
  }

  static create(session, options) {
    return new Agent(session, options);
  }

  get _ptr() {
    return livePtr(this._core, 'agent');
  }

  /** The pointer, for a synchronous call: refused while an asynchronous call runs. */
  _sync(what) {
    const p = this._ptr;
    if (this._core.busy) {
      throw outOfOrder(`${what}: an asynchronous call on this agent is running (await it first)`);
    }
    return p;
  }

  _call(what, fn, ...args) {
    const err = [null];
    check(fn(this._sync(what), ...args, err), err);
  }

  _json(what, fn) {
    return callJson(fn, this._sync(what));
  }

  /**
   * Runs one operation that may call back into JS. The rule (docs/node.md, "Threads"): while the
   * agent has no JS callbacks registered (prefix or pre-step listeners, summariser, token
   * counter), the library call cannot wait for the main thread, so it runs right here, on the
   * main thread, without a worker hop; with callbacks, or with `{worker: true}`, it runs on a
   * koffi worker thread and callbacks are queued to the main thread. `call(ptr, op)` runs the
   * library function with `op.run(fn, args)` (a status, or a Promise of one).
   */
  async _async(what, options, call) {
    const ptr = this._ptr;
    const core = this._core;
    if (core.busy) throw outOfOrder(`${what}: an asynchronous call on this agent is running (await it first)`);
    const sync = !core.callbacks && !(options && options.worker);
    core.busy = true;
    let op;
    try {
      op = newOp(core, options && options.signal, sync);
    } catch (e) {
      core.busy = false;
      throw e;
    }
    try {
      return await call(ptr, op);
    } finally {
      core.busy = false;
      endOp(core, op);
    }
  }

  setOptions(options) {
    const b = jsonBuf(options);
    this._call('setOptions', C.lls_agent_set_options, b, b.length);
  }

  setPolicy(policy) {
    const b = jsonBuf(policy === undefined ? null : policy);
    this._call('setPolicy', C.lls_agent_set_policy, b, b.length);
  }

  setTokenizer(file) {
    const b = utf8(file);
    this._call('setTokenizer', C.lls_agent_set_tokenizer, b, b.length);
  }

  clearTokenCounter() {
    this._call('clearTokenCounter', C.lls_agent_clear_token_counter);
  }

  _register(what, fn, c, encode) {
    const p = this._sync(what);
    const entry = register(this._core, fn, encode);
    const err = [null];
    // On failure the library calls userdata_free, which releases the entry.
    check(c(p, entry.ptr, entry.id, freeTrampoline, err), err);
  }

  /** Adds a session prefix listener `({rest, instance, turn}, {signal}) => messages | Promise`. */
  addPrefixListener(fn) {
    this._register('addPrefixListener', fn, C.lls_agent_add_prefix_listener, encoders.messages);
  }

  /** Adds a pre-step listener `({prefix, system, tools, turn, step}, {signal}) => void | Promise`. */
  addPreStepListener(fn) {
    this._register('addPreStepListener', fn, C.lls_agent_add_pre_step_listener, encoders.ignore);
  }

  /** Sets the summariser `(input, {signal}) => {text, usage?, ...} | string | Promise`. */
  setSummariser(fn) {
    this._register('setSummariser', fn, C.lls_agent_set_summariser, encoders.summary);
  }

  /** Sets a host token counter `(item, {signal}) => number | Promise<number>`. */
  setTokenCounter(fn) {
    this._register('setTokenCounter', fn, C.lls_agent_set_token_counter, encoders.count);
  }

  /** Opens a turn with the user's message (a string or a message object); returns the turn. */
  startTurn(message) {
    const b = jsonBuf(userMessage(message));
    const turn = [0];
    this._call('startTurn', C.lls_agent_start_turn, b, b.length, turn);
    return seqNumber(turn[0]);
  }

  /**
   * Builds the next request. Resolves with `{bytes, json, envelope, info}`: the exact envelope
   * bytes as a Buffer (send these), the same as a string and parsed (both decoded on first
   * access), and its description (prefixLen, sharedMessages, digest, ...).
   */
  nextRequest(options = {}) {
    return this._async('nextRequest', options, async (ptr, op) => {
      const out = [null];
      const len = [0];
      const err = [null];
      const st = await op.run(C.lls_agent_next_request, [ptr, op.cancel, out, len, err]);
      const lent = finishOp(op, st, err, () => lend(out[0], len[0]));
      const info = callJson(C.lls_agent_request_info, ptr);
      return builtRequest(lent, info);
    });
  }

  requestInfo() {
    return this._json('requestInfo', C.lls_agent_request_info);
  }

  /**
   * Gives the agent a renderer ("openai", "openai-responses", "anthropic", "gemini", "gemini-interactions") and render
   * options (`{promptCacheKey?, promptCacheRetention?, cacheTtl?, promptCacheOptions?, promptCacheBreakpoints?}`; the prefix length is the
   * agent's own): `nextBody` then builds provider bodies, each message rendered once.
   */
  setRenderer(renderer, options) {
    const r = utf8(renderer);
    const o = options === undefined || options === null ? null : jsonBuf(options);
    this._call('setRenderer', C.lls_agent_set_renderer, r, r.length, o, o ? o.length : 0);
  }

  /**
   * Builds the next request as `nextRequest` does (logged and verified the same way) and
   * resolves with the provider body ready to POST: a `Body` with `body` (a Buffer over the
   * library's memory, freed when the garbage collector releases it or at `release()`), `info`
   * (read from the library's fixed record, no JSON) and `json`. Needs `setRenderer` first
   * (status OUT_OF_ORDER otherwise).
   */
  nextBody(options) {
    const core = this._core;
    // The common case, no callbacks, no signal, no worker: the call runs right here (as
    // `_async` would run it, synchronously on the main thread), without an operation record,
    // async frames or their microtask hops; the result is still a Promise, rejected on failure.
    // The agent stays busy until the Promise settled, as with `_async` (docs/node.md, "One
    // asynchronous call per agent at a time"): `unbusy` is queued before any reaction to the
    // returned Promise can be, as a reaction to a settled Promise (queueMicrotask would cost
    // an AsyncResource a call, about 2 µs).
    if (!core.callbacks && (!options || (!options.signal && !options.worker))) {
      if (!core.ptr || core.busy) {
        return Promise.reject(core.ptr ? outOfOrder('nextBody: an asynchronous call on this agent is running (await it first)')
          : closedError('agent'));
      }
      core.busy = true;
      SETTLED.then(core.unbusy);
      try {
        const out = [null];
        const len = [0];
        const err = [null];
        const sc = core.scratch;
        const st = C.lls_agent_next_body(core.ptr, null, out, len, sc.info, err);
        if (st !== Status.OK) throw takeError(st, err[0]);
        // Every body is lent, small ones too: the library's copy of a small body is then the
        // only one (at 100 messages, 46 KB, the body came out 7 % faster than copied again into
        // a JS Buffer: docs/performance.md, "The append path (issue 28)").
        return Promise.resolve(new Body(lend(out[0], len[0], 1), readRequestInfo(sc.info, sc.info32)));
      } catch (e) {
        return Promise.reject(e);
      }
    }
    const fn = C.lls_agent_next_body;
    return this._async('nextBody', options, async (ptr, op) => {
      const out = [null];
      const len = [0];
      const err = [null];
      // The agent's record (only one call on it runs at a time): the worker fills it, and it
      // is read here once the call returned.
      const sc = core.scratch;
      const st = await op.run(fn, [ptr, op.cancel, out, len, sc.info, err]);
      const lent = finishOp(op, st, err, () => lend(out[0], len[0], 1));
      return new Body(lent, readRequestInfo(sc.info, sc.info32));
    });
  }

  /** The envelope of the last request this agent built (the logged bytes), as a Buffer. */
  lastEnvelope() {
    const out = [null];
    const len = [0];
    const err = [null];
    check(C.lls_agent_last_envelope(this._sync('lastEnvelope'), out, len, err), err);
    return takeBytes(out[0], len[0]);
  }

  /**
   * Records the provider's raw response body (a Buffer, a Uint8Array or a string) for the open
   * step, parsed with the agent's renderer: `{seq, toolCalls, finishReason?}` (the assistant
   * message's seq, how many tool calls it made, and the response's finish reason, normalised:
   * `'pause-turn'` means the turn is not over; absent when the response gives none). The log
   * does not keep the finish reason.
   */
  recordBody(body) {
    const str = shortString(body);
    const b = str ? body : bytesArg(body, 'recordBody');
    const p = this._sync('recordBody');
    // The agent's record: the library refuses a call on the agent from its own callbacks (and
    // writes nothing on an error), so no other call can fill it before it is read.
    const sc = this._core.scratch;
    const err = [null];
    const st = str
      ? S.lls_agent_record_body_info(p, b, Buffer.byteLength(b), sc.rec, err)
      : C.lls_agent_record_body_info(p, b, b.length, sc.rec, err);
    if (st !== Status.OK) throw takeError(st, err[0]);
    return readRecorded(sc.rec, sc.rec32);
  }

  /**
   * Records a streamed response from its `Stream` at the stream's end (`{partial: true}`: the
   * message so far, as `stream.finish({partial: true})`): `{seq, toolCalls, finishReason?}`
   * (`'incomplete'` for a cut stream recorded with `partial`).
   */
  recordStream(stream, options = {}) {
    if (!(stream instanceof Stream)) throw new TypeError('recordStream: expected a Stream');
    const fn = C.lls_agent_record_stream_info;
    const p = this._sync('recordStream');
    const sp = livePtr(stream._core, 'stream');
    const sc = this._core.scratch;
    const err = [null];
    check(fn(p, sp, !!options.partial, sc.rec, err), err);
    return readRecorded(sc.rec, sc.rec32);
  }

  /** Records the provider's response `{message, usage?}`; returns the assistant message's seq. */
  recordResponse(response) {
    const b = jsonBuf(response);
    const seq = [0];
    this._call('recordResponse', C.lls_agent_record_response, b, b.length, seq);
    return seqNumber(seq[0]);
  }

  /** Records a tool result `{callId, text} | {callId, content}`; returns how many were written. */
  recordToolResult(result) {
    let b = result;
    if (typeof b !== 'string' && !Buffer.isBuffer(b)) b = JSON.stringify(result);
    const str = shortString(b);
    // A long string through a Buffer; nothing to send (undefined, a function) gets jsonBuf's TypeError.
    if (!str) b = jsonBuf(b === undefined ? result : b);
    const p = this._sync('recordToolResult');
    const written = [0];
    const err = [null];
    const st = str
      ? S.lls_agent_record_tool_result(p, b, Buffer.byteLength(b), written, err)
      : C.lls_agent_record_tool_result(p, b, b.length, written, err);
    if (st !== Status.OK) throw takeError(st, err[0]);
    return Number(written[0]);
  }

  /** Adds durable host context; returns its seq, or null when deferred. */
  inject(message) {
    const b = jsonBuf(userMessage(message));
    const seq = [0];
    this._call('inject', C.lls_agent_inject, b, b.length, seq);
    return seqNumber(seq[0]);
  }

  /** Records a provider failure `{message, overflow?}`; resolves with `{retry}`. */
  providerError(error, options = {}) {
    const b = jsonBuf(typeof error === 'string' ? { message: error } : error);
    return this._async('providerError', options, async (ptr, op) => {
      const retry = [0];
      const err = [null];
      const st = await op.run(C.lls_agent_provider_error, [ptr, b, b.length, op.cancel, retry, err]);
      finishOp(op, st, err);
      return { retry: retry[0] === 1 };
    });
  }

  endTurn(reason = 'completed') {
    const b = utf8(reason);
    this._call('endTurn', C.lls_agent_end_turn, b, b.length);
  }

  /** Compacts now (`{span?: [start, end]}`); resolves with the outcome object. */
  compact(options = {}) {
    const o = {};
    if (options.span) o.span = options.span;
    const b = jsonBuf(o);
    return this._async('compact', options, async (ptr, op) => {
      const out = [null];
      const len = [0];
      const err = [null];
      const st = await op.run(C.lls_agent_compact, [ptr, b, b.length, op.cancel, out, len, err]);
      return JSON.parse(finishOp(op, st, err, () => takeString(out[0], len[0])));
    });
  }

  /** Measures the next request's prompt (may call a host token counter). */
  measure(options = {}) {
    return this._async('measure', options, async (ptr, op) => {
      const out = [null];
      const len = [0];
      const err = [null];
      const st = await op.run(C.lls_agent_measure, [ptr, out, len, err]);
      return JSON.parse(finishOp(op, st, err, () => takeString(out[0], len[0])));
    });
  }

  stats() {
    return this._json('stats', C.lls_agent_stats);
  }

  /** The frozen session prefix, or null before the first request. */
  prefix() {
    return this._json('prefix', C.lls_agent_prefix);
  }

  /**
   * Disposes the instance (an open turn ends `disposed`, callbacks are released). Called from
   * inside one of the agent's callbacks, the running operation then fails with `disposed`.
   */
  dispose() {
    const core = this._core;
    if (!core.ptr) return Promise.resolve();
    const ptr = core.ptr;
    if (!core.busy) {
      const err = [null];
      try {
        check(C.lls_agent_dispose(ptr, err), err);
      } catch (e) {
        return Promise.reject(e);
      }
      return Promise.resolve();
    }
    // An operation runs on a worker (we may be inside its callback): dispose from another
    // worker, which ends the operation's waits and waits for it to return.
    const err = [null];
    const p = runAsync(C.lls_agent_dispose, [ptr, err]).then((st) => check(st, err));
    if (core.op) core.op.disposeDuringCallback = p;
    return p;
  }

  /** Frees the agent handle (disposing a live instance). Idempotent. */
  close() {
    const core = this._core;
    finalizer.unregister(this);
    if (!core.ptr) return;
    if (core.busy) {
      // Inside a callback, or while an operation runs: dispose first, free when it returned.
      const p = this.dispose().catch(() => {});
      p.then(() => this.close());
      return;
    }
    const ptr = core.ptr;
    core.ptr = null;
    C.lls_agent_free(ptr);
  }

  get closed() {
    return !this._core.ptr;
  }
}

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
    else throw new TypeError('Stream.feed: expected a Buffer, a Uint8Array or a string');
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

/** Explains a stored JSONL log without opening it (see `Session#explain`). */
function explainFile(file, options) {
  const p = utf8(file);
  const o = options === undefined || options === null ? null : jsonBuf(options);
  return callJson(C.lls_explain_file, p, p.length, o, o ? o.length : 0);
}

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

/** Verifies a stored JSONL log without opening it. */
function verifyFile(file) {
  const p = utf8(file);
  return callJson(C.lls_verify_file, p, p.length);
}

// ---------------------------------------------------------------------------------------------
// Stores named by URL (lls_session_open_url, lls_store_list_sessions): `file:PATH` or
// `postgres://user:password@host:port/dbname?session=ID`.

def('lls_session_open_url', 'int32_t',
  `const uint8_t *url, size_t ulen, const uint8_t *opts, size_t len, _Out_ lls_session **out, ${ERR}`);
def('lls_store_list_sessions', 'int32_t', `const uint8_t *url, size_t ulen, const uint8_t *opts, size_t len, ${OUTS}`);

/**
 * Opens (or, for a writer, creates) a session in the store a URL names. Options: `id` (which
 * session of a database; a random one is created when a writer names none), `readOnly`,
 * `create` (default true), `durability`, and for files `mode`, `maxBytes`. A second writer
 * fails with status LOCKED (kind "locked"); after a broken database connection the session
 * refuses writes until it is closed and opened again.
 */
Session.openUrl = function openUrl(url, options = {}) {
  const u = utf8(url);
  const b = jsonBuf(options);
  const out = [null];
  const err = [null];
  check(C.lls_session_open_url(u, u.length, b, b.length, out, err), err);
  return new Session(out[0]);
};

/** The sessions of the store a URL names, ordered by id: `{after?, limit?}` pages them. */
function listSessions(url, options = {}) {
  const u = utf8(url);
  const b = jsonBuf(options);
  return callJson(C.lls_store_list_sessions, u, u.length, b, b.length);
}

/** Number of live library handles (errors, tokens, replies awaiting an answer, ...). */
function liveHandleCount() {
  return Number(C.lls_live_handle_count());
}

/** Number of Buffers over library memory not yet given back (by the collector or release()). */
function lentBufferCount() {
  return lentLive;
}

/** Number of library strings handed out and not yet freed (lls_live_string_count). */
function liveStringCount() {
  return Number(C.lls_live_string_count());
}

/**
 * The loaded library's ABI minor version: its compatible additions to ABI_VERSION (1 brought
 * the provider-body hot path, 2 lls_status_name). The binding refuses to load a library older
 * than ABI_MINOR.
 */
function abiMinor() {
  return loadedMinor;
}

// ---------------------------------------------------------------------------------------------
// The observer hook (docs/observe.md): what the library did on its own, with levels.
//
// One trampoline is registered with koffi for the life of the process (the library may still
// be calling it on another thread when the observer is replaced). It only queues the JSON it is
// given: the library calls it inside a library call, possibly on a koffi worker thread (koffi
// then runs it on the main thread while the worker waits), and it must not call back into the
// library. The queue is delivered from setImmediate, outside any library call, so a JS observer
// may do anything, library calls included.

const LEVELS = Object.freeze(['debug', 'info', 'warn', 'error']);
let observerFn = null;
let observed = [];
let deliveryScheduled = false;

function levelNumber(level) {
  if (typeof level === 'number' && Number.isInteger(level) && level >= 0 && level < LEVELS.length) return level;
  const n = LEVELS.indexOf(level);
  if (n < 0) throw new TypeError(`level must be one of ${LEVELS.join(', ')} (got ${String(level)})`);
  return n;
}

function deliverObservations() {
  deliveryScheduled = false;
  const batch = observed;
  observed = [];
  for (const json of batch) {
    const fn = observerFn;
    if (!fn) return;
    let o;
    try {
      o = JSON.parse(json);
    } catch (e) {
      o = { kind: 'unreadable', level: 'warn', message: json };
    }
    try {
      fn(o);
    } catch (e) {
      process.emitWarning(`llmsession: the observer threw: ${describe(e)}`);
    }
  }
}

const observerTrampoline = koffi.register((_ud, _level, json, _len) => {
  observed.push(json);
  if (!deliveryScheduled) {
    deliveryScheduled = true;
    setImmediate(deliverObservations);
  }
}, koffi.pointer(ObserverFn));

/**
 * Sets the process-wide observer: `fn(observation)` receives what the library does on its own
 * (`{kind, level, message, sessionId?, ...fields}`), at `options.level` (default 'info') or
 * above; `null` clears it. One observer at a time (the `observer` emitter is one too). Calls
 * are delivered asynchronously, soon after the library call that caused them, in order.
 */
function setObserver(fn, options = {}) {
  if (fn !== null && typeof fn !== 'function') throw new TypeError('setObserver expects a function or null');
  const level = levelNumber(options.level === undefined ? 'info' : options.level);
  const err = [null];
  if (fn === null) {
    observerFn = null;
    check(C.lls_set_observer(null, 0, null, level, err), err);
    return;
  }
  check(C.lls_set_observer(observerTrampoline, 0, null, level, err), err);
  observerFn = fn;
}

/**
 * The observer as an EventEmitter: the first listener of 'observation' (or of a level event:
 * 'debug', 'info', 'warn', 'error') sets the process-wide observer at `observer.level` (default
 * 'info'); removing the last one clears it. Each observation is emitted as 'observation' and
 * under its level. `setObserver` replaces it (one observer at a time); adding a listener again
 * takes it back.
 */
class ObserverEmitter extends EventEmitter {
  constructor() {
    super();
    this._level = 'info';
    this._fn = null;
    this.on('newListener', (event) => {
      if (OBSERVED_EVENTS.includes(event) && (this._fn === null || observerFn !== this._fn)) this._attach();
    });
    this.on('removeListener', (event) => {
      if (OBSERVED_EVENTS.includes(event) && OBSERVED_EVENTS.every((e) => this.listenerCount(e) === 0)) this._detach();
    });
  }

  /** The minimum level observed: 'debug', 'info' (the default), 'warn' or 'error'. */
  get level() {
    return this._level;
  }

  set level(level) {
    levelNumber(level);
    this._level = level;
    if (this._fn !== null && observerFn === this._fn) this._attach();
  }

  _attach() {
    const fn = (o) => {
      this.emit('observation', o);
      if (LEVELS.includes(o.level) && this.listenerCount(o.level) > 0) this.emit(o.level, o);
    };
    setObserver(fn, { level: this._level });
    this._fn = fn;
  }

  _detach() {
    if (this._fn !== null && observerFn === this._fn) setObserver(null);
    this._fn = null;
  }
}

const OBSERVED_EVENTS = Object.freeze(['observation', ...LEVELS]);
const observer = new ObserverEmitter();

/** Number of JS callbacks registered with the library and not yet released. */
function registeredCallbackCount() {
  return registrations.size;
}

module.exports = {
  ABI_VERSION,
  ABI_MINOR,
  Status,
  LlmSessionError,
  CallbackError,
  Session,
  Agent,
  Stream,
  readStream,
  Replay,
  render,
  renderWithOptions,
  explainFile,
  parseResponse,
  usageFromProvider,
  isContextOverflow,
  verifyFile,
  listSessions,
  invokeCallback,
  Body,
  liveHandleCount,
  lentBufferCount,
  liveStringCount,
  abiMinor,
  statusName,
  registeredCallbackCount,
  setObserver,
  observer,
  version: C.lls_version(),
  abiVersion: loadedAbi,
  libraryPath,
};
