'use strict';
// Stores named by URL (lls_session_open_url, lls_store_list_sessions): `file:PATH` or
// `postgres://user:password@host:port/dbname?session=ID`.
// Adds `Session.openUrl` to the Session class (session.js) and lists a store's sessions.

const { C } = require('./native');
const { check } = require('./errors');
const { utf8, jsonBuf, callJson } = require('./bytes');
const { Session } = require('./session');

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

/**
 * The sessions of the store a URL names, ordered by id: `{after?, limit?}` pages them;
 * `{parent}` lists only that session's children and forks (for a file, those beside it).
 */
function listSessions(url, options = {}) {
  const u = utf8(url);
  const b = jsonBuf(options);
  return callJson(C.lls_store_list_sessions, u, u.length, b, b.length);
}

module.exports = {
  listSessions,
};
