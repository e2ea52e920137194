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
    assert.deepEqual(page[0].parent, { id, seedLength: 1, spawned: false });
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

// ---- PostgreSQL at scale: the pool, TLS and the fenced lease (all options in the URL) ----
const { execFileSync } = require('node:child_process');
const { Worker } = require('node:worker_threads');
const withParams = (base, params) => `${base}${base.includes('?') ? '&' : '?'}${params}`;
const INVALID_INPUT = 2;
const STORAGE = 6;

/** Runs one SQL statement on the test server with the server's psql (LLMSESSION_PG_BIN,
 * /usr/lib/postgresql/*\/bin, or PATH, as scripts/pg/server.sh finds the server's binaries). */
function psql(sql) {
  const candidates = [];
  if (process.env.LLMSESSION_PG_BIN) candidates.push(path.join(process.env.LLMSESSION_PG_BIN, 'psql'));
  try {
    const versions = fs.readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a));
    for (const v of versions) candidates.push(`/usr/lib/postgresql/${v}/bin/psql`);
  } catch {
    // no Debian layout
  }
  for (const d of (process.env.PATH || '').split(path.delimiter)) if (d) candidates.push(path.join(d, 'psql'));
  const bin = candidates.find((c) => fs.existsSync(c) && fs.statSync(c).isFile());
  assert.ok(bin, 'psql not found (LLMSESSION_PG_BIN, /usr/lib/postgresql/*/bin, PATH): it comes with the server binaries');
  return execFileSync(bin, ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-At', '-d', URL, '-c', sql], { encoding: 'utf8', timeout: 60000 });
}

// One worker thread: opens a writer of session `id` by `url` and appends `n` events (the library
// is loaded once per process, so every thread's sessions share the URL's pool).
const WRITER = `
const { parentPort, workerData } = require('node:worker_threads');
const lls = require(workerData.binding);
const { url, id, n } = workerData;
const s = lls.Session.openUrl(url, { id });
try {
  for (let j = 0; j < n; j++) {
    s.append({ type: 'user/message', data: { message: { role: 'user', content: [{ type: 'text', text: id + ' event ' + j }] }, source: 'host' }, surfaceOp: 'append' });
  }
  parentPort.postMessage({ events: s.stats().events });
} finally {
  s.close();
}`;

function writerThread(url, id, n) {
  return new Promise((resolve, reject) => {
    const w = new Worker(WRITER, { eval: true, workerData: { binding: path.resolve(__dirname, '..'), url, id, n } });
    let result;
    w.on('message', (m) => (result = m));
    w.on('error', reject);
    w.on('exit', (code) => (code === 0 && result ? resolve(result) : reject(new Error(`writer ${id} exited with ${code}`))));
  });
}

test('postgres: six writers share a pool of two connections (pool_size=2), from six threads at once', { skip }, async () => {
  const url = withParams(URL, 'pool_size=2&pool_timeout=20');
  const prefix = uid('pool');
  const ids = [0, 1, 2, 3, 4, 5].map((i) => `${prefix}-${i}`);
  // Six writers open at once on this thread, appending in turn...
  const writers = ids.map((id) => lls.Session.openUrl(url, { id }));
  try {
    for (let j = 0; j < 3; j++) writers.forEach((w, i) => w.append(context(`writer ${i}, event ${j}`)));
    assert.deepEqual(writers.map((w) => w.stats().events), [3, 3, 3, 3, 3, 3]);
  } finally {
    writers.forEach((w) => w.close());
  }
  // ...and six more on six worker threads at once, over the same pool.
  const results = await Promise.all(ids.map((id) => writerThread(url, `${id}-t`, 5)));
  assert.deepEqual(results.map((r) => r.events), [5, 5, 5, 5, 5, 5]);
  for (const id of ids) {
    for (const [sid, n] of [[id, 3], [`${id}-t`, 5]]) {
      const r = lls.Session.openUrl(URL, { id: sid, readOnly: true });
      assert.equal(r.verify().events, n);
      r.close();
    }
  }
  assert.throws(() => lls.Session.openUrl(withParams(URL, 'pool_size=0'), { id: `${prefix}-none` }), (e) => {
    assert.equal(e.code, 'LLS_ERR_INVALID_INPUT');
    assert.equal(e.status, INVALID_INPUT);
    assert.match(e.message, /pool_size/);
    return true;
  });
});

const CA = process.env.LLMSESSION_PG_CA;
const skipTls = skip || (CA ? false : '*** SKIPPED: LLMSESSION_PG_CA is not set (scripts/pg/server.sh run sets it when the server has TLS) ***');

test('postgres: TLS with sslmode=verify-full; an unrelated CA and a missing sslrootcert are refused', { skip: skipTls }, () => {
  const id = uid('tls');
  const s = lls.Session.openUrl(withParams(URL, `sslmode=verify-full&sslrootcert=${encodeURIComponent(CA)}`), { id });
  try {
    s.append(context('over TLS'));
    assert.equal(s.stats().events, 1);
  } finally {
    s.close();
  }
  const other = process.env.LLMSESSION_PG_OTHER_CA;
  if (other) {
    assert.throws(
      () => lls.Session.openUrl(withParams(URL, `sslmode=verify-full&connect_timeout=5&sslrootcert=${encodeURIComponent(other)}`), { id }),
      (e) => {
        assert.equal(e.code, 'LLS_ERR_STORAGE');
        assert.equal(e.status, STORAGE);
        assert.match(e.message, /certificate/i);
        return true;
      },
    );
  }
  assert.throws(() => lls.Session.openUrl(withParams(URL, 'sslmode=verify-full'), { id }), (e) => {
    assert.equal(e.code, 'LLS_ERR_INVALID_INPUT');
    assert.match(e.message, /sslrootcert/);
    return true;
  });
});

test('postgres: a writer whose lease was taken over gets LLS_ERR_LOCKED naming its epoch, and writes nothing more', { skip }, () => {
  // A long lease: the renewer (every third of it) does not renew A's lease between the expiry
  // and B's open.
  const url = withParams(URL, 'lease_time=60');
  const id = uid('takeover');
  const a = lls.Session.openUrl(url, { id });
  let b;
  try {
    a.append(context('A, before the takeover'));
    const out = psql(`UPDATE llmsession_sessions SET lease_expires = now() - interval '1 second', lease_live = NULL WHERE id = '${id}' RETURNING id`);
    assert.equal(out.trim(), id, 'the expiry matched no row');
    // Another pool (another URL), as another process would have.
    b = lls.Session.openUrl(`${url}&pool_size=3`, { id, create: false });
    b.append(context('B, after the takeover'));
    let epoch;
    assert.throws(() => a.append(context('A, refused 1')), (e) => {
      assert.ok(e instanceof lls.LlmSessionError);
      assert.equal(e.code, 'LLS_ERR_LOCKED');
      assert.equal(e.status, LOCKED);
      assert.ok(Number.isInteger(e.detail.epoch) && e.detail.epoch >= 1, JSON.stringify(e.detail));
      if (e.detail.currentEpoch !== undefined) assert.ok(e.detail.currentEpoch > e.detail.epoch, JSON.stringify(e.detail));
      epoch = e.detail.epoch;
      return true;
    });
    assert.throws(() => a.append(context('A, refused 2')), (e) => e.code === 'LLS_ERR_LOCKED' && e.detail.epoch === epoch);
    b.append(context('B, still writing'));
  } finally {
    if (b) b.close();
    a.close();
  }
  const r = lls.Session.openUrl(URL, { id, readOnly: true });
  try {
    assert.equal(r.verify().events, 3);
    const log = r.exportJsonl();
    for (const want of ['A, before the takeover', 'B, after the takeover', 'B, still writing']) assert.ok(log.includes(want), want);
    assert.ok(!log.includes('A, refused'));
  } finally {
    r.close();
  }
});
