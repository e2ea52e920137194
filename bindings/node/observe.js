'use strict';
// The observer hook (docs/observe.md): what the library did on its own, with levels.
//
// One trampoline is registered with koffi for the life of the process (the library may still
// be calling it on another thread when the observer is replaced). It only queues the JSON it is
// given: the library calls it inside a library call, possibly on a koffi worker thread (koffi
// then runs it on the main thread while the worker waits), and it must not call back into the
// library. The queue is delivered from setImmediate, outside any library call, so a JS observer
// may do anything, library calls included.

const { EventEmitter } = require('events');
const { koffi, C, ObserverFn } = require('./native');
const { check, describe } = require('./errors');

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

module.exports = {
  setObserver,
  observer,
};
