'use strict';
// Sessions in PostgreSQL through Session.openUrl, listSessions and fork({url}) (make test-pg sets
// LLMSESSION_PG_URL to a throwaway server; without it these tests are skipped loudly), and the
// file: URL form.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const lls = require('..');

const URL = process.env.LLMSESSION_PG_URL;
const skip = URL ? false : '*** SKIPPED: LLMSESSION_PG_URL is not set; `make test-pg` starts a throwaway PostgreSQL server ***';
const text = (t) => ({ role: 'user', content: [{ type: 'text', text: t }] });
const context = (t) => ({ type: 'user/message', data: { message: text(t), source: 'host' }, surfaceOp: 'append' });
const uid = (p) => `node-${p}-${process.pid}-${Date.now()}-${Math.random().toString(16).slice(2)}`;
const LOCKED = 18;
const READ_ONLY = 20;

test('postgres: one writer, readers, the lease goes with the handle', { skip }, () => {
  const id = uid('lease');
  const w = lls.Session.openUrl(URL, { id });
  try {
    assert.equal(w.id, id);
    w.append(context('kept in PostgreSQL'));
    assert.throws(() => lls.Session.openUrl(URL, { id }), (e) => {
      assert.ok(e instanceof lls.LlmSessionError);
      assert.equal(e.status, LOCKED);
      assert.equal(e.kind, 'locked');
      assert.match(e.detail.holder, /llmsession pid \d+/);
      assert.doesNotMatch(e.message, new RegExp(URL.split('@')[0].split(':').pop()));
      return true;
    });
    const r = lls.Session.openUrl(`${URL}?session=${id}`, { readOnly: true });
    assert.throws(() => r.append(context('no')), (e) => e.status === READ_ONLY && e.kind === 'read-only');
    assert.equal(r.stats().events, 1);
    assert.equal(r.stats().readOnly, true);
    r.close();
  } finally {
    w.close();
  }
  const again = lls.Session.openUrl(URL, { id, create: false });
  assert.equal(again.stats().events, 1);
  again.verify();
  again.close();
  assert.throws(() => lls.Session.openUrl(URL, { id: uid('missing'), create: false }), (e) => e.kind === 'invalid-input');
});

test('postgres: fork into the store and list its sessions', { skip }, () => {
  const id = uid('parent');
  const p = lls.Session.openUrl(URL, { id });
  try {
    p.append(context('seed'));
    const f = p.fork({ url: URL, id: `${id}-fork` });
    assert.equal(f.info().parent.id, id);
    f.close();
    const page = lls.listSessions(URL, { after: id, limit: 1 });
    assert.equal(page.length, 1);
    assert.equal(page[0].id, `${id}-fork`);
    assert.deepEqual(page[0].parent, { id, seedLength: 1 });
    assert.equal(page[0].inUse, false);
    const me = lls.listSessions(URL).find((s) => s.id === id);
    assert.equal(me.inUse, true);
    assert.equal(me.events, 1);
    assert.equal(me.chainHead.length, 64);
  } finally {
    p.close();
  }
});

test('postgres: clear errors for a bad URL, a server that is not there, a wrong password', { skip }, () => {
  assert.throws(() => lls.Session.openUrl('postgres://nobody@127.0.0.1:1/x?connect_timeout=3', { id: 'x' }), (e) => e.kind === 'storage');
  assert.throws(() => lls.Session.openUrl(URL.replace('@', 'x@'), { id: 'x' }), (e) => e.kind === 'storage' && /authentication failed/.test(e.message));
  assert.throws(() => lls.Session.openUrl('nosuch://x'), (e) => e.kind === 'invalid-input');
  assert.throws(() => lls.Session.openUrl(URL, { readOnly: true }), (e) => e.kind === 'invalid-input');
});

test('file: URLs open JSONL logs', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-url-'));
  const file = path.join(dir, 'log.jsonl');
  const s = lls.Session.openUrl(`file:${file}`, { id: 'file-session' });
  s.append(context('in a file'));
  assert.throws(() => lls.Session.openUrl(`file://${file}`), (e) => e.status === LOCKED);
  s.close();
  assert.deepEqual(lls.listSessions(`file:${file}`).map((x) => [x.id, x.events, x.inUse]), [['file-session', 1, false]]);
  fs.rmSync(dir, { recursive: true });
});
