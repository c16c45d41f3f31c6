// SPEC 4.5 from the outside: version 0 at creation, +1 per committed execute or migrate that changed rows or schema,
// unchanged (and no event in /_db/changes) for a request that changed nothing or failed.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

const version = async (database: string): Promise<number> => (await p.db('web', 'status', { database })).json.version;
const events = async (database: string): Promise<number[]> => {
  const r = await p.db('web', 'changes', { database, since: 0 });
  assert.equal(r.status, 200, r.text);
  return r.json.events.map((e: { version: number }) => e.version);
};
const ok = async (op: string, body: object): Promise<number> => {
  const r = await p.db('web', op, body);
  assert.equal(r.status, 200, r.text);
  return r.json.version;
};

test('an execute that creates a database but changes nothing leaves it at version 0, with no event', async () => {
  assert.equal(await ok('execute', { database: 'empty', sql: 'SELECT 1' }), 0);
  const s = await p.db('web', 'status', { database: 'empty' });
  assert.equal(s.json.exists, true);
  assert.equal(s.json.version, 0);
  assert.deepEqual(await events('empty'), []);
});

test('+1 for each execute or migrate that changed rows or schema; nothing for those that did not', async () => {
  const d = { database: 'v' };
  assert.equal(await ok('execute', { ...d, sql: 'CREATE TABLE t(a)' }), 1);
  assert.equal(await ok('execute', { ...d, statements: [{ sql: 'INSERT INTO t VALUES (1)' }, { sql: 'INSERT INTO t VALUES (2)' }] }), 2);
  assert.equal(await ok('execute', { ...d, sql: 'UPDATE t SET a = 3 WHERE a > 100' }), 2, 'an update of no rows');
  assert.equal(await ok('execute', { ...d, sql: 'DELETE FROM t WHERE 0' }), 2, 'a delete of no rows');
  assert.equal(await ok('execute', { ...d, sql: 'SELECT * FROM t' }), 2, 'a select');
  assert.equal(await ok('execute', { ...d, sql: 'CREATE TABLE IF NOT EXISTS t(a)' }), 2, 'DDL that did nothing');
  assert.equal(await ok('execute', { ...d, sql: 'INSERT OR IGNORE INTO t(rowid, a) VALUES (1, 9)' }), 2, 'an ignored insert');
  assert.equal(await ok('execute', { ...d, sql: 'CREATE INDEX ti ON t(a)' }), 3, 'schema only');
  assert.equal(await ok('execute', { ...d, sql: 'UPDATE t SET a = a' }), 4, 'rows updated to the same values were still updated');
  const migrations = [{ id: '0001_u', sql: 'CREATE TABLE u(b);' }];
  assert.equal(await ok('migrate', { ...d, migrations }), 5);
  assert.equal(await ok('migrate', { ...d, migrations }), 5, 'the same list again');
  assert.equal(await ok('migrate', { ...d, migrations: [...migrations, { id: '0002_x', sql: 'CREATE TABLE x(c);' }], dryRun: true }), 5, 'a dry run');
  assert.equal((await p.db('web', 'execute', { ...d, statements: [{ sql: 'INSERT INTO t VALUES (5)' }, { sql: 'INSERT INTO nowhere VALUES (1)' }] })).status, 400);
  assert.equal(await version('v'), 5, 'a failed batch');
  assert.deepEqual(await events('v'), [1, 2, 3, 4, 5]);
  assert.equal((await p.db('web', 'query', { ...d, sql: 'SELECT 1' })).json.version, 5);
});

test('versions are per database: a write to one leaves the other as it was', async () => {
  await ok('execute', { database: 'a1', sql: 'CREATE TABLE t(a)' });
  const before = await version('a1');
  await ok('execute', { database: 'a2', sql: 'CREATE TABLE t(a)' });
  await ok('execute', { database: 'a2', sql: 'INSERT INTO t VALUES (1)' });
  assert.equal(await version('a1'), before);
  assert.equal(await version('a2'), 2);
});

test('DB_SYNC takes full or normal; any other value is refused at start', async () => {
  await assert.rejects(startProduct({ DB_SYNC: 'sometimes' }), /DB_SYNC/);
});

test('statements that leave rows and schema as they were leave the version: IF EXISTS / IF NOT EXISTS no-ops, PRAGMA foreign_keys, REINDEX', async () => {
  const d = { database: 'noop' };
  await ok('execute', { ...d, statements: [{ sql: 'CREATE TABLE t(a)' }, { sql: 'CREATE INDEX ta ON t(a)' }, { sql: 'INSERT INTO t VALUES (1)' }] });
  for (const sql of ['DROP TABLE IF EXISTS nope', 'DROP INDEX IF EXISTS nope', 'CREATE INDEX IF NOT EXISTS ta ON t(a)', 'DROP VIEW IF EXISTS nope', 'PRAGMA foreign_keys = OFF', 'REINDEX', 'REINDEX ta']) {
    const r = await p.db('web', 'execute', { ...d, sql });
    assert.equal(r.status, 200, `${sql}: ${r.text}`);
    assert.equal(r.json.version, 1, sql);
  }
  assert.deepEqual(await events('noop'), [1]);
});
