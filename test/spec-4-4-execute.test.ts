// SPEC 4.4 from the outside, through the proxy over real HTTP: one request is one transaction, transaction control is
// refused in any spelling, the reply's fields statement by statement, and what an error leaves (nothing).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

const count = async (database: string, table: string): Promise<unknown> => (await p.db('web', 'query', { database, sql: `SELECT count(*) FROM ${table}` })).json.results[0].rows[0][0];
const tables = async (database: string): Promise<string[]> => (await p.db('web', 'status', { database })).json.tables.map((t: { name: string }) => t.name);

describe('the batch is the transaction', () => {
  before(async () => {
    assert.equal((await p.db('web', 'execute', { database: 'tx', sql: 'CREATE TABLE t(a)' })).status, 200);
  });

  const control = ['BEGIN', 'begin deferred', 'BEGIN IMMEDIATE', 'BEGIN EXCLUSIVE TRANSACTION', 'COMMIT', 'COMMIT TRANSACTION', 'END', 'END TRANSACTION',
    'ROLLBACK', 'ROLLBACK TRANSACTION', 'SAVEPOINT s', 'RELEASE s', 'RELEASE SAVEPOINT s', 'ROLLBACK TO s', 'ROLLBACK TRANSACTION TO SAVEPOINT s',
    '/* leading comment */ BEGIN', '-- a line\nCOMMIT'];
  test('BEGIN, COMMIT (END), ROLLBACK, SAVEPOINT and RELEASE in any spelling are 400 not_allowed, alone or inside a batch, and leave nothing', async () => {
    const version = (await p.db('web', 'status', { database: 'tx' })).json.version;
    for (const sql of control) {
      assertSpecError(await p.db('web', 'execute', { database: 'tx', sql }), 400, 'not_allowed', sql);
      const r = await p.db('web', 'execute', { database: 'tx', statements: [{ sql: 'INSERT INTO t VALUES (1)' }, { sql }, { sql: 'INSERT INTO t VALUES (2)' }] });
      const e = assertSpecError(r, 400, 'not_allowed', `in a batch: ${sql}`);
      assert.equal(e.details?.statement, 1, sql);
    }
    assert.equal(await count('tx', 't'), 0);
    assert.equal((await p.db('web', 'status', { database: 'tx' })).json.version, version);
  });

  test('a failing statement undoes the whole batch, DDL included; details.statement is its 0-based index', async () => {
    const r = await p.db('web', 'execute', { database: 'tx', statements: [
      { sql: 'CREATE TABLE made(x)' }, { sql: 'INSERT INTO made VALUES (1)' }, { sql: 'INSERT INTO t VALUES (1)' }, { sql: 'INSERT INTO nowhere VALUES (1)' },
    ] });
    const e = assertSpecError(r, 400, 'sql_error');
    assert.equal(e.details?.statement, 3);
    assert.match(e.message, /no such table: nowhere/);
    assert.ok(!(await tables('tx')).includes('made'));
    assert.equal(await count('tx', 't'), 0);
  });

  test('a lone top-level statement that fails is statement 0', async () => {
    const e = assertSpecError(await p.db('web', 'execute', { database: 'tx', sql: 'INSERT INTO nowhere VALUES (1)' }), 400, 'sql_error');
    assert.equal(e.details?.statement, 0);
  });

  test('all commit together: every statement\'s effect is there afterwards, as one new version', async () => {
    const v = (await p.db('web', 'status', { database: 'tx' })).json.version;
    const r = await p.db('web', 'execute', { database: 'tx', statements: [{ sql: 'INSERT INTO t VALUES (1)' }, { sql: 'INSERT INTO t VALUES (2)' }, { sql: 'UPDATE t SET a = a * 10' }] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.version, v + 1);
    assert.deepEqual((await p.db('web', 'query', { database: 'tx', sql: 'SELECT a FROM t ORDER BY a' })).json.results[0].rows, [[10], [20]]);
  });
});

describe('the reply, statement by statement', () => {
  test('the example of SPEC 4.4: an INSERT, then a SELECT of its row', async () => {
    const r = await p.db('web', 'execute', { database: 'example', statements: [
      { sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT)' },
      { sql: 'INSERT INTO todos(id, title) VALUES (42, ?)', params: ['write spec'] },
      { sql: 'SELECT id FROM todos' },
    ] });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results.slice(1), [{ rowsAffected: 1, lastInsertRowid: 42 }, { rowsAffected: 0, lastInsertRowid: null, columns: ['id'], rows: [[42]] }]);
    assert.deepEqual(Object.keys(r.json).sort(), ['results', 'version']);
    assert.equal(typeof r.json.version, 'number');
  });

  test('columns and rows appear for RETURNING and SELECT (none found included), and only for them', async () => {
    const r = await p.db('web', 'execute', { database: 'shape', statements: [
      { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, a)' },
      { sql: 'INSERT INTO t(a) VALUES (1), (2), (3)' },
      { sql: 'UPDATE t SET a = a + 1 WHERE a > 100 RETURNING id' },
      { sql: 'SELECT a FROM t WHERE 0' },
      { sql: 'DELETE FROM t WHERE a >= 2 RETURNING id, a' },
      { sql: 'UPDATE t SET a = 5' },
      { sql: 'INSERT INTO t(a) VALUES (9) RETURNING *' },
    ], rows: 'objects' });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results, [
      { rowsAffected: 0, lastInsertRowid: null },
      { rowsAffected: 3, lastInsertRowid: 3 },
      { rowsAffected: 0, lastInsertRowid: null, columns: ['id'], rows: [] },
      { rowsAffected: 0, lastInsertRowid: null, columns: ['a'], rows: [] },
      { rowsAffected: 2, lastInsertRowid: null, columns: ['id', 'a'], rows: [{ id: 2, a: 2 }, { id: 3, a: 3 }] },
      { rowsAffected: 1, lastInsertRowid: null },
      { rowsAffected: 1, lastInsertRowid: 2, columns: ['id', 'a'], rows: [{ id: 2, a: 9 }] }, // max(rowid) + 1: 2 and 3 were deleted
    ]);
  });

  test('rowsAffected is 0 for DDL and SELECT right after a write; lastInsertRowid is null unless the statement inserted into a user table', async () => {
    const r = await p.db('web', 'execute', { database: 'counts', statements: [
      { sql: 'CREATE TABLE t(a)' },
      { sql: 'INSERT INTO t VALUES (1), (2), (3)' },
      { sql: 'ALTER TABLE t ADD COLUMN b' },
      { sql: 'UPDATE t SET b = 1' },
      { sql: 'CREATE VIEW tv AS SELECT a FROM t' },
      { sql: 'DELETE FROM t WHERE a = 1' },
      { sql: 'SELECT * FROM t' },
      { sql: 'INSERT INTO t(a) SELECT a FROM t WHERE 0' },
      { sql: 'CREATE TABLE u(x)' },
      { sql: 'INSERT INTO u SELECT a FROM t' },
      { sql: 'DROP TABLE u' },
      { sql: 'DROP VIEW tv' },
    ] });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results.map((x: { rowsAffected: number; lastInsertRowid: unknown }) => [x.rowsAffected, x.lastInsertRowid]), [
      [0, null], [3, 3], [0, null], [3, null], [0, null], [1, null], [0, null], [0, null], [0, null], [2, 2], [0, null], [0, null],
    ]);
  });

  test('execute creates the database it names when it does not exist', async () => {
    assert.equal((await p.db('web', 'status', { database: 'fresh' })).json.exists, false);
    const r = await p.db('web', 'execute', { database: 'fresh', sql: 'CREATE TABLE t(x)' });
    assert.equal(r.status, 200, r.text);
    const s = await p.db('web', 'status', { database: 'fresh' });
    assert.equal(s.json.exists, true);
    assert.ok(s.json.databases.includes('fresh'));
  });
});
