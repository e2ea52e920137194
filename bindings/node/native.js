'use strict';
// Loading libllmsession and declaring its C entry points (include/llmsession.h, docs/abi.md) for
// koffi: where the library is looked for (docs/node.md, "Loading"), the ABI version and minor it
// must have, and `C`, the one table of entry points every other file of the binding calls
// through (`S`: a few hot-path ones again, taking a JS string). It requires no other file of the
// binding but platform.js, and runs once, at the first `require`: a library that does not load,
// or is too old, fails the `require` with an error saying so.

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
 * response (lls_agent_record_body_info, behind recordBody and recordStream), 6 the cache clock
 * (lls_agent_cache_clock and lls_agent_keepalive_body, behind cacheClock, keepaliveBody and
 * compactIdle: clock.js).
 */
const ABI_MINOR = 6;

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
const P_tool_calls = opaque('lls_tool_calls');
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
// Minor 6: native compaction (native_compaction.js), bound when the library has it.
if (loadedMinor >= 6) {
  def('lls_agent_native_compaction_begin', 'int32_t', `lls_agent *a, ${OUTS}`);
  def('lls_agent_native_compaction_record', 'int32_t', `lls_agent *a, const uint8_t *b, size_t len, ${OUTS}`);
  def('lls_agent_native_compaction_fail', 'int32_t', `lls_agent *a, const uint8_t *e, size_t len, ${OUTS}`);
}
// The tool calls of a message (tools.js; since minor 3). The strings are lent by the handle, each
// with its length: read as `void *` and copied out before lls_tool_calls_free.
def('lls_tool_calls_parse', 'int32_t', `const uint8_t *json, size_t len, _Out_ lls_tool_calls **out, ${ERR}`);
def('lls_tool_calls_count', 'int32_t', `const lls_tool_calls *calls, _Out_ size_t *out_count, ${ERR}`);
def('lls_tool_calls_get', 'int32_t',
  'const lls_tool_calls *calls, size_t index, _Out_ void **out_id, _Out_ size_t *out_id_len, ' +
    `_Out_ void **out_name, _Out_ size_t *out_name_len, _Out_ void **out_arguments, _Out_ size_t *out_arguments_len, ${ERR}`);
def('lls_tool_calls_free', 'void', 'lls_tool_calls *calls');
// Minor 6: the cache clock (clock.js).
def('lls_agent_cache_clock', 'int32_t', `lls_agent *a, const uint8_t *o, size_t len, ${OUTS}`);
def('lls_agent_keepalive_body', 'int32_t',
  `lls_agent *a, _Out_ lls_owned_str **body, _Out_ size_t *body_len, uint8_t *info, ${ERR}`);
// Stores named by URL (store.js).
def('lls_session_open_url', 'int32_t',
  `const uint8_t *url, size_t ulen, const uint8_t *opts, size_t len, _Out_ lls_session **out, ${ERR}`);
def('lls_store_list_sessions', 'int32_t', `const uint8_t *url, size_t ulen, const uint8_t *opts, size_t len, ${OUTS}`);
// Minor 6: agent trees (tree.js).
def('lls_agent_spawn', 'int32_t',
  `lls_agent *a, const uint8_t *opts, size_t len, _Out_ lls_session **child_session, _Out_ lls_agent **child_agent, ${ERR}`);
def('lls_agent_finish_child', 'int32_t', `lls_agent *a, lls_agent *child, const uint8_t *opts, size_t len, ${OUTS}`);

/** The loaded library's version string (lls_version). */
const version = C.lls_version();

/** Number of live library handles (errors, tokens, replies awaiting an answer, ...). */
function liveHandleCount() {
  return Number(C.lls_live_handle_count());
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

module.exports = {
  koffi,
  C,
  S,
  shortString,
  CallbackFn,
  FreeFn,
  ObserverFn,
  ABI_VERSION,
  ABI_MINOR,
  loadedAbi,
  libraryPath,
  version,
  liveHandleCount,
  liveStringCount,
  abiMinor,
};
