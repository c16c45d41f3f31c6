// SPEC 4.9 from the outside: /_db/snapshot is a SQLite file a client can open, at the version its header names, even
// while writes commit; /_db/changes serves events after `since`, oldest first, with the version; both need the secret.
// (410 gone past retention: mirror-change-log.test.ts and db-ops.test.ts, which can age the log.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';
import { viaLoopback } from './helpers/loopback-fetch.ts';

let p: Product;
const scratch = tempDir();
before(async () => {
  p = await startProduct();
  assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, a)' })).status, 200);
  for (let i = 0; i < 5; i++) assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO t(a) VALUES (?)', params: [i] })).status, 200);
});
after(async () => {
  await p.close();
  rmSync(scratch, { recursive: true, force: true });
});

const snapshot = async (body: object, n: number): Promise<{ version: number; rows: number }> => {
  const r = await viaLoopback(`http://acme.${p.config.baseDomain}:${new URL(p.url).port}/web/_db/snapshot`, {
    method: 'POST', body: JSON.stringify(body), headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' },
  });
  const bytes = Buffer.from(await r.arrayBuffer());
  assert.equal(r.status, 200, bytes.toString().slice(0, 200));
  const file = join(scratch, `snap${n}.sqlite`);
  writeFileSync(file, bytes);
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    assert.equal((db.prepare('PRAGMA integrity_check').get() as Record<string, string>).integrity_check, 'ok');
    return { version: Number(r.headers.get('x-db-version')), rows: Number((db.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n) };
  } finally {
    db.close();
  }
};

test('the snapshot is a SQLite file holding the database at the version in x-db-version; database defaults to main', async () => {
  assert.deepEqual(await snapshot({}, 0), { version: 6, rows: 5 });
  assert.deepEqual(await snapshot({ database: 'main' }, 1), { version: 6, rows: 5 });
});

test('a snapshot taken while writes commit is consistent: its rows match its version', async () => {
  const writes = (async () => {
    for (let i = 0; i < 20; i++) assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO t(a) VALUES (1)' })).status, 200);
  })();
  for (let i = 0; i < 8; i++) {
    const s = await snapshot({}, 10 + i);
    assert.equal(s.rows, s.version - 1, JSON.stringify(s));
  }
  await writes;
});

test('a snapshot of a database that does not exist is 404 database_not_found', async () => {
  assertSpecError(await p.db('web', 'snapshot', { database: 'nope' }), 404, 'database_not_found');
});

test('changes: the events after since, oldest first, and the current version', async () => {
  const all = await p.db('web', 'changes', { since: 0 });
  assert.equal(all.status, 200, all.text);
  assert.deepEqual(Object.keys(all.json).sort(), ['events', 'version']);
  const version = (await p.db('web', 'status', {})).json.version;
  assert.equal(all.json.version, version);
  assert.deepEqual(all.json.events.map((e: { version: number }) => e.version), Array.from({ length: version }, (_, i) => i + 1));
  const e = all.json.events[1];
  assert.equal(e.type, 'database.changed');
  assert.equal(e.previousVersion, 1);
  assert.deepEqual([e.org, e.repo, e.database, e.operation], ['acme', 'web', 'main', 'execute']);
  const later = await p.db('web', 'changes', { database: 'main', since: 4 });
  assert.deepEqual(later.json.events.map((x: { version: number }) => x.version), Array.from({ length: version - 4 }, (_, i) => i + 5));
  assert.deepEqual(later.json.events[0], all.json.events[4], 'the same stored event');
  const none = await p.db('web', 'changes', { since: version });
  assert.deepEqual(none.json, { events: [], version });
});

test('changes with since missing or not a non-negative integer is 400 invalid_request', async () => {
  for (const body of [{}, { since: -1 }, { since: '3' }, { since: 1.5 }, { since: null }]) assertSpecError(await p.db('web', 'changes', body), 400, 'invalid_request', JSON.stringify(body));
});

test('changes of a database that does not exist is 404 database_not_found naming it (it said only "the database does not exist")', async () => {
  const e = assertSpecError(await p.db('web', 'changes', { database: 'nope', since: 0 }), 404, 'database_not_found');
  assert.match(e.message, /"nope" does not exist in acme\/web/);
});

test('a snapshot or changes read while a libSQL transaction holds uncommitted writes shows only what committed', async () => {
  const auth = { authorization: `Bearer ${p.secret('acme', 'web')}` };
  const open = await p.call('/web/_db/v2/pipeline', { method: 'POST', headers: auth, body: { baton: null, requests: [
    { type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'execute', stmt: { sql: 'INSERT INTO t(a) VALUES (99)' } },
  ] } });
  assert.equal(open.status, 200, open.text);
  try {
    const version = (await p.db('web', 'status', {})).json.version;
    const s = await snapshot({}, 50);
    assert.deepEqual(s, { version, rows: version - 1 });
    assert.equal((await p.db('web', 'changes', { since: version - 1 })).json.events.length, 1);
  } finally {
    const done = await p.call('/web/_db/v2/pipeline', { method: 'POST', headers: auth, body: { baton: open.json.baton, requests: [{ type: 'execute', stmt: { sql: 'ROLLBACK' } }, { type: 'close' }] } });
    assert.equal(done.status, 200, done.text);
  }
});
