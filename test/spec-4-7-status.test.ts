// SPEC 4.7 from the outside: status's fields for a database that exists and one that does not, internal tables never
// listed, migrations, mirrors (a real receiver), the databases list, and history (4.11).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { newSecret, Receiver, waitFor } from './helpers/mirror.ts';

let p: Product;
const receiver = new Receiver();
before(async () => {
  await receiver.start();
  p = await startProduct({ DB_MIRRORS: JSON.stringify([{ name: 'replica', url: receiver.url, secret: newSecret() }]) });
});
after(async () => {
  await p.close();
  await receiver.stop();
});

test('the example: a database with a table, two migrations and a mirror that has caught up', async () => {
  const m = await p.db('web', 'migrate', { migrations: [{ id: '0001_init', sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, t TEXT);' }, { id: '0002_tags', sql: 'CREATE TABLE tags(n);' }] });
  assert.equal(m.status, 200, m.text);
  const e = await p.db('web', 'execute', { sql: "INSERT INTO todos(t) VALUES ('a'), ('b'), ('c')" });
  assert.equal(e.status, 200, e.text);
  assert.equal((await p.db('web', 'execute', { database: 'analytics', sql: 'CREATE TABLE hits(n)' })).status, 200);
  await waitFor(async () => (await p.db('web', 'status', {})).json.mirrors?.[0]?.deliveredVersion === 2, 10_000, 'delivered');
  const s = await p.db('web', 'status', {});
  assert.equal(s.status, 200, s.text);
  const { sizeBytes, history, tables, mirrors, ...rest } = s.json;
  assert.deepEqual(rest, { database: 'main', exists: true, version: 2, migrations: { applied: 2, latest: '0002_tags' }, databases: ['analytics', 'main'] });
  assert.deepEqual([...tables].sort((a, b) => a.name.localeCompare(b.name)), [{ name: 'tags', rows: 0 }, { name: 'todos', rows: 3 }]);
  assert.equal(mirrors.length, 1);
  const { name, deliveredVersion, pendingEvents, lastError } = mirrors[0]; // more fields may follow (stalled)
  assert.deepEqual({ name, deliveredVersion, pendingEvents, lastError }, { name: 'replica', deliveredVersion: 2, pendingEvents: 0, lastError: null });
  assert.ok(Number.isInteger(sizeBytes) && sizeBytes > 0);
  assert.equal(history.oldestVersion, 0);
  assert.ok(!Number.isNaN(Date.parse(history.oldestTime)), JSON.stringify(history));
  assert.ok(!JSON.stringify(s.json.tables).includes('_scopebase'), 'internal tables are not listed');
  assert.equal(s.json.tables.length, 2);
});

test('database defaults to main; a database that does not exist is 200 exists:false with the databases, and is not created', async () => {
  const s = await p.db('web', 'status', { database: 'ghost' });
  assert.equal(s.status, 200, s.text);
  assert.equal(s.json.exists, false);
  assert.equal(s.json.database, 'ghost');
  assert.deepEqual(s.json.databases, ['analytics', 'main']);
  assert.deepEqual((await p.db('web', 'status', { database: 'ghost' })).json.databases, ['analytics', 'main']);
  const other = await p.db('api', 'status', {});
  assert.equal(other.json.exists, false);
  assert.deepEqual(other.json.databases, []);
});

test('a mirror that fails shows its last error and backlog, then catches up', async () => {
  receiver.behaviour = (_req, res) => {
    res.writeHead(500).end('down');
  };
  assert.equal((await p.db('web', 'execute', { sql: "INSERT INTO todos(t) VALUES ('d')" })).status, 200);
  await waitFor(async () => (await p.db('web', 'status', {})).json.mirrors[0].lastError !== null, 10_000, 'an error shown');
  const s = (await p.db('web', 'status', {})).json.mirrors[0];
  assert.equal(s.deliveredVersion, 2);
  assert.equal(s.pendingEvents, 1);
  assert.equal(typeof s.lastError, 'string');
  receiver.behaviour = (_req, res) => {
    res.writeHead(200).end();
  };
  await waitFor(async () => (await p.db('web', 'status', {})).json.mirrors[0].deliveredVersion === 3, 30_000, 'caught up');
  const done = (await p.db('web', 'status', {})).json.mirrors[0];
  assert.equal(done.pendingEvents, 0);
});

test('SQLite\'s own sqlite_sequence is not a user table either; rows counts are exact', async () => {
  const r = await p.db('web', 'execute', { database: 'seq', statements: [
    { sql: 'CREATE TABLE a(id INTEGER PRIMARY KEY AUTOINCREMENT, x)' }, { sql: 'INSERT INTO a(x) VALUES (1), (2)' },
  ] });
  assert.equal(r.status, 200, r.text);
  const s = await p.db('web', 'status', { database: 'seq' });
  assert.deepEqual(s.json.tables, [{ name: 'a', rows: 2 }]);
});
