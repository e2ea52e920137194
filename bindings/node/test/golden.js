'use strict';
// Golden transcripts for the Node scenario driver (docs/scenarios.md, "Golden transcripts"):
// masking a run's transcript the way the Rust runner masks it, and comparing it with the
// checked-in tests/scenarios/golden/<stem>.json (first difference by JSON Pointer).

const fs = require('fs');
const path = require('path');

const TIME = '<time>';
const CHAIN = '<chain>';
const DIR = '<dir>';

// Wording the C ABI adds around a failing host callback's message (the Rust runner's fakes fail
// with the message alone), removed from every string before comparing.
const CALLBACK_WRAPPERS = ['prefix listener callback: ', 'summariser callback: ', 'host callback failed: '];

// Wording that differs because of how a Node callback reaches the library, compared as equal on
// both sides (docs/scenarios.md, "What a binding normalises"). A JS callback runs on the main
// thread while the operation waits on a worker, so a dispose from inside it comes from another
// thread: the library ends the pending reply's wait and says so, where a dispose on the
// callback's own thread is noticed at the next check and names the phase.
const DISPOSED = /the agent instance was disposed(?: during session prefix composition)?(?: \(cancelled while waiting for a host callback's pending reply\))?/g;
// Async callbacks only: a fake that trips the cancel token before answering finds the library no
// longer waiting for its pending reply, and the op's cancellation names that wait, not the phase.
const PENDING_CANCELLED = "cancelled while waiting for a host callback's pending reply";

/** Whether two strings say the same once those wordings are set aside (`mode`: callback mode). */
function sameWording(want, got, mode) {
  const w = want.replace(DISPOSED, 'the agent instance was disposed');
  const g = got.replace(DISPOSED, 'the agent instance was disposed');
  if (w === g) return true;
  return mode === 'async' && g === PENDING_CANCELLED && / was cancelled$/.test(w);
}

// Reported differences of this binding from the golden transcripts (reported to be fixed, not masked): only the ops
// before `fromOp` are compared, and the rest must still differ (see settle).
const KNOWN_DIFFERENCES = {
  'dispose_in_callbacks.json': {
    fromOp: 16,
    why: 'a token counter that disposes the instance ends the measurement at once (its count is ' +
      'discarded), so no compaction starts; the Rust runner writes compaction/start and ' +
      'compaction/end{cancelled} before the disposal is noticed',
  },
};

/** Expands `{"$repeat": s, "times": n}` anywhere in `v` into `s` repeated `n` times. */
function expand(v) {
  if (Array.isArray(v)) return v.map(expand);
  if (v && typeof v === 'object') {
    if (Object.prototype.hasOwnProperty.call(v, '$repeat')) {
      if (typeof v.$repeat !== 'string' || typeof v.times !== 'number') throw new Error('$repeat needs a string and "times"');
      return v.$repeat.repeat(v.times);
    }
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = expand(x);
    return o;
  }
  return v;
}

/** A stored record (session header or event) with its times and chained digest masked. */
function maskedRecord(record) {
  const v = { ...record };
  for (const [k, token] of [['time', TIME], ['createdAt', TIME], ['chain', CHAIN]]) {
    if (Object.prototype.hasOwnProperty.call(v, k)) v[k] = token;
  }
  return v;
}

/** `s` with the scratch directory, sidecar times and the C ABI's callback wording masked. */
function maskString(s, dir) {
  let out = s.split(dir).join(DIR).replace(/\.cut-[0-9]+/g, `.cut-${TIME}`);
  for (const phrase of CALLBACK_WRAPPERS) out = out.split(phrase).join('');
  return out;
}

/** Applies maskString to every string of `v` (a fresh copy). */
function maskStrings(v, dir) {
  if (typeof v === 'string') return maskString(v, dir);
  if (Array.isArray(v)) return v.map((x) => maskStrings(x, dir));
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) if (x !== undefined) o[k] = maskStrings(x, dir);
    return o;
  }
  return v;
}

function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * The first place where `got` differs from `want`, depth first with object keys sorted (as the
 * Rust runner reports it): `{pointer, want, got}` (`undefined`: nothing there), or null.
 */
function firstDifference(want, got, mode, at = '') {
  if (isObject(want) && isObject(got)) {
    const keys = [...new Set([...Object.keys(want), ...Object.keys(got)])].sort();
    for (const k of keys) {
      const d = firstDifference(want[k], got[k], mode, `${at}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`);
      if (d) return d;
    }
    return null;
  }
  if (Array.isArray(want) && Array.isArray(got)) {
    for (let i = 0; i < Math.max(want.length, got.length); i++) {
      const d = firstDifference(want[i], got[i], mode, `${at}/${i}`);
      if (d) return d;
    }
    return null;
  }
  if (typeof want === 'string' && typeof got === 'string' && sameWording(want, got, mode)) return null;
  if (isObject(want) || isObject(got) || Array.isArray(want) || Array.isArray(got) || want !== got) {
    return { pointer: at, want, got };
  }
  return null;
}

function shown(v) {
  if (v === undefined) return '(nothing)';
  const s = JSON.stringify(v);
  return s.length > 400 ? `${s.slice(0, 400)}… (${s.length} characters)` : s;
}

/** Where a pointer into a transcript is, in words: `op 3 (request)`, `the final log`, ... */
function place(transcript, pointer) {
  const [, a, b] = pointer.split('/');
  if (a === 'ops' && b !== undefined) {
    const op = transcript.ops && transcript.ops[Number(b)];
    return `op ${b} (${op && op.op ? op.op : '?'})`;
  }
  if (a === 'final' && b === 'events') return 'the final log';
  if (a === 'final' && b === 'session') return 'the final session header';
  if (a === 'final' && b) return `the final ${b}`;
  return 'the transcript';
}

/** The golden file of a scenario file: `golden/<stem>.json` in the scenario's directory. */
function goldenPath(scenario) {
  return path.join(path.dirname(scenario), 'golden', `${path.basename(scenario, '.json')}.json`);
}

/**
 * Compares `transcript` with the scenario's golden file (its `$repeat` objects expanded), after
 * writing it to `outDir` for inspection; throws an Error naming the first difference (`mode`:
 * the callback mode, for the wording above; KNOWN_DIFFERENCES: what is left out).
 */
function settle(scenario, transcript, outDir, mode) {
  const golden = goldenPath(scenario);
  const known = KNOWN_DIFFERENCES[path.basename(scenario)];
  fs.mkdirSync(outDir, { recursive: true });
  const mine = path.join(outDir, path.basename(golden));
  fs.writeFileSync(mine, `${JSON.stringify(transcript, null, 2)}\n`);
  if (!fs.existsSync(golden)) throw new Error(`the golden transcript ${golden} is missing\n  this run's transcript: ${mine}`);
  const want = expand(JSON.parse(fs.readFileSync(golden, 'utf8')));
  let d = firstDifference(want, transcript, mode);
  if (known) {
    if (!d) throw new Error(`${golden}: the known difference (${known.why}) is gone: remove it from KNOWN_DIFFERENCES in test/golden.js`);
    d = firstDifference(want.ops.slice(0, known.fromOp), transcript.ops.slice(0, known.fromOp), mode, '/ops');
  }
  if (d) {
    throw new Error(`the transcript differs from ${golden} at ${place(want, d.pointer)}, ${d.pointer}\n` +
      `  expected: ${shown(d.want)}\n  got:      ${shown(d.got)}\n  this run's transcript: ${mine}`);
  }
}

module.exports = { expand, maskedRecord, maskStrings, firstDifference, settle, goldenPath };
