// SPEC 4.3 from the outside: query's request shapes, rows as arrays or objects, one snapshot per request, writes refused
// as read_only, a missing database 404 (and not created), and the version the snapshot shows.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';

let p: Product;
before(async () => {
  p = await startProduct();
  const r = await p.db('web', 'execute', { statements: [{ sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT)' }, { sql: "INSERT INTO todos VALUES (1, 'write spec')" }] });
  assert.equal(r.status, 200, r.text);
});
after(() => p.close());

test('the example: one statement, rows as arrays by default, and the version', async () => {
  const r = await p.db('web', 'query', { sql: 'SELECT id, title FROM todos WHERE id = ?', params: [1] });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { results: [{ columns: ['id', 'title'], rows: [[1, 'write spec']] }], version: 1 });
  const arrays = await p.db('web', 'query', { database: 'main', sql: 'SELECT id, title FROM todos', rows: 'arrays' });
  assert.deepEqual(arrays.json.results[0].rows, [[1, 'write spec']]);
});

test('a batch with rows as objects; named params', async () => {
  const r = await p.db('web', 'query', { statements: [{ sql: 'SELECT id FROM todos' }, { sql: 'SELECT title AS t FROM todos WHERE id = :id', params: { id: 1 } }], rows: 'objects' });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.results, [{ columns: ['id'], rows: [{ id: 1 }] }, { columns: ['t'], rows: [{ t: 'write spec' }] }]);
});

test('rows other than "arrays" or "objects" is 400 invalid_request', async () => {
  for (const rows of ['object', 'ARRAYS', 1, null]) assertSpecError(await p.db('web', 'query', { sql: 'SELECT 1', rows }), 400, 'invalid_request', String(rows));
});

test('a statement that would write is 400 read_only, alone or in a batch, and writes nothing', async () => {
  for (const sql of ["INSERT INTO todos VALUES (2, 'x')", 'UPDATE todos SET title = 1', 'DELETE FROM todos', 'CREATE TABLE w(a)', 'DROP TABLE todos',
    "INSERT INTO todos VALUES (3, 'y') RETURNING id", 'ALTER TABLE todos ADD COLUMN z']) {
    assertSpecError(await p.db('web', 'query', { sql }), 400, 'read_only', sql);
    assertSpecError(await p.db('web', 'query', { statements: [{ sql: 'SELECT 1' }, { sql }] }), 400, 'read_only', `batch ${sql}`);
  }
  const after = await p.db('web', 'query', { sql: 'SELECT count(*), (SELECT count(*) FROM sqlite_master WHERE name = \'w\'), (SELECT count(*) FROM pragma_table_info(\'todos\')) FROM todos' });
  assert.deepEqual(after.json.results[0].rows, [[1, 0, 2]]);
  assert.equal(after.json.version, 1);
});

test('a database that does not exist is 404 database_not_found and is not created by the query', async () => {
  assertSpecError(await p.db('web', 'query', { database: 'nope', sql: 'SELECT 1' }), 404, 'database_not_found');
  const s = await p.db('web', 'status', { database: 'nope' });
  assert.equal(s.json.exists, false);
  assert.ok(!s.json.databases.includes('nope'));
});

test('every statement of one request reads the same snapshot, whose version is the reply\'s, while writes commit', async () => {
  const writes = (async () => {
    for (let i = 0; i < 30; i++) assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO todos(title) VALUES (?)', params: [`w${i}`] })).status, 200);
  })();
  const sql = 'SELECT count(*) FROM todos';
  for (let i = 0; i < 30; i++) {
    const r = await p.db('web', 'query', { statements: Array.from({ length: 20 }, () => ({ sql })) });
    assert.equal(r.status, 200, r.text);
    const counts = new Set(r.json.results.map((x: { rows: number[][] }) => x.rows[0]![0]));
    assert.equal(counts.size, 1, `one snapshot: ${[...counts].join(',')}`);
    assert.equal(r.json.version, [...counts][0], 'version 1 held 1 row, and every write adds one version and one row');
  }
  await writes;
});
