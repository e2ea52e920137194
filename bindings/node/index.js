'use strict';
// Node binding of llmsession's C ABI (include/llmsession.h, docs/abi.md), through koffi.
//
// This file only assembles the public API (`require('llmsession')`, declared in index.d.ts)
// from the files of the binding, one per concept (docs/node.md, "Files"). Each file requires
// only files above it in this order, never one below, so there is no require cycle:
//
//   native.js      loading the library, the ABI check, the table of C entry points (`C`, `S`)
//   errors.js      Status, LlmSessionError, CallbackError, statusName, takeError, check
//   bytes.js       arguments in, owned outputs out (takeBytes, callOut, callJson), seq numbers
//   tools.js       tool calls as data: ToolCall, toolCalls, Recorded (what recordBody gives)
//   body.js        lent Buffers, the hot path's fixed records, Body and the nextRequest result
//   operation.js   one library call that may call back: cancel token, AbortSignal, errors
//   handle.js      the FinalizationRegistry safety net, livePtr
//   callbacks.js   host callbacks, their trampolines and replies, invokeCallback
//   session.js     Session, verifyFile, explainFile
//   stream.js      Stream, readStream
//   render.js      render, renderWithOptions, parseResponse, usageFromProvider, isContextOverflow
//   replay.js      Replay
//   observe.js     setObserver, observer
//   agent.js       Agent (needs session.js and stream.js)
//   store.js       stores named by URL: Session.openUrl, listSessions (needs session.js)
//   native_compaction.js  Agent's beginNativeCompaction, recordNativeCompaction,
//                  failNativeCompaction (needs agent.js)
//   tree.js        agent trees: Agent#spawn, Agent#finishChild, Agent.wake (needs agent.js)
//   clock.js       the cache clock: Agent.prototype.cacheClock, keepaliveBody, compactIdle,
//                  Decision (needs agent.js)
//
// A new concept is a file of its own beside these, requiring what it needs from the lower
// files (its C entry points go into native.js's table), exported here and declared in
// index.d.ts, and listed in package.json's "files".

const native = require('./native');
const { Status, LlmSessionError, CallbackError, statusName } = require('./errors');
const { ToolCall, Recorded, toolCalls } = require('./tools');
const { Body, lentBufferCount } = require('./body');
const { invokeCallback, registeredCallbackCount } = require('./callbacks');
const { Session, verifyFile, explainFile } = require('./session');
const { Stream, readStream } = require('./stream');
const { render, renderWithOptions, parseResponse, usageFromProvider, isContextOverflow } = require('./render');
const { Replay } = require('./replay');
const { setObserver, observer } = require('./observe');
const { Agent } = require('./agent');
const { listSessions } = require('./store');
require('./native_compaction');
const { DEFAULT_PLACEHOLDER } = require('./tree');
const { Decision } = require('./clock');

module.exports = {
  ABI_VERSION: native.ABI_VERSION,
  ABI_MINOR: native.ABI_MINOR,
  Status,
  LlmSessionError,
  CallbackError,
  Session,
  Agent,
  Decision,
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
  DEFAULT_PLACEHOLDER,
  invokeCallback,
  Body,
  ToolCall,
  Recorded,
  toolCalls,
  liveHandleCount: native.liveHandleCount,
  lentBufferCount,
  liveStringCount: native.liveStringCount,
  abiMinor: native.abiMinor,
  statusName,
  registeredCallbackCount,
  setObserver,
  observer,
  version: native.version,
  abiVersion: native.loadedAbi,
  libraryPath: native.libraryPath,
};
