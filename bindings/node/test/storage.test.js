'use strict';
// One writer per session on files: a second writer gets LLS_ERR_LOCKED, a read-only handle
// follows the writer with refresh() and refuses writes; exportJsonl gives the stored records.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const lls = require('..');

const note = (n) => ({ type: 'host/note', data: { n } });

test('a second writer is refused with LLS_ERR_LOCKED; a reader follows with refresh()', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-node-storage-'));
  const file = path.join(dir, 's.jsonl');
  const writer = lls.Session.openFile(file);
  assert.equal(fs.statSync(file).mode & 0o777, 0o600, 'a created log is private');
  assert.throws(() => lls.Session.openFile(file), (e) => {
    assert.ok(e instanceof lls.LlmSessionError);
    assert.equal(e.code, 'LLS_ERR_LOCKED');
    assert.equal(e.status, lls.Status.LOCKED);
    assert.match(e.message, /the session is in use/);
    assert.ok(e.detail.holder.startsWith('this process'), e.detail.holder);
    return true;
  });
  const reader = lls.Session.openFile(file, { readOnly: true });
  assert.throws(() => reader.append(note(0)), (e) => e.code === 'LLS_ERR_READ_ONLY');
  assert.throws(
    () => new lls.Agent(reader, { config: { provider: 'p', model: 'm' } }),
    (e) => e.code === 'LLS_ERR_READ_ONLY',
  );
  writer.append(note(1));
  writer.append(note(2));
  assert.equal(reader.refresh(), 2);
  assert.deepEqual(reader.events(), writer.events());
  assert.equal(reader.stats().readOnly, true);
  assert.match(reader.stats().chainHead, /^[0-9a-f]{64}$/);
  // The export is the file as stored, byte for byte.
  assert.equal(writer.exportJsonl(), fs.readFileSync(file, 'utf8'));
  writer.close();
  // The lock goes with the handle.
  const again = lls.Session.openFile(file);
  again.close();
  reader.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('checkpoints as the options say; a reopen from the last one; a directory lists its logs', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lls-node-checkpoints-'));
  const file = path.join(dir, 's.jsonl');
  const s = lls.Session.openFile(file, { id: 'cp', checkpoints: { everyEvents: 3 } });
  for (let i = 0; i < 10; i++) s.append(note(i));
  const events = s.events();
  assert.equal(events.filter((e) => e.type === 'session/checkpoint').length, 3);
  assert.throws(() => s.append({ type: 'session/checkpoint', data: {} }), (e) => e.code === 'LLS_ERR_INVALID_INPUT');
  s.close();
  for (const check of ['bounded', 'full']) {
    const r = lls.Session.openFile(file, { check });
    assert.deepEqual(r.events(), events, check);
    r.verify();
    r.close();
  }
  assert.throws(() => lls.Session.openFile(file, { check: 'sideways' }), (e) => e.code === 'LLS_ERR_INVALID_INPUT');
  const off = lls.Session.memory({ checkpoints: false });
  for (let i = 0; i < 1100; i++) off.append(note(i));
  assert.ok(!off.events().some((e) => e.type === 'session/checkpoint'));
  off.close();
  const other = lls.Session.openFile(path.join(dir, 't.jsonl'), { id: 'another' });
  const list = lls.listSessions(`file:${dir}`);
  assert.deepEqual(list.map((r) => [r.id, r.events, r.inUse]), [['another', 0, true], ['cp', 13, false]]);
  other.close();
  fs.rmSync(dir, { recursive: true, force: true });
});
