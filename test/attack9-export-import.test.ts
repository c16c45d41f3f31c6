// Attack round 9, export and import (SPEC 4.12). The SQL dump wrote AUTOINCREMENT counters (sqlite_sequence) as
// JavaScript numbers, unquoted: a counter past 2^53 came back lower (after export → import the next row took a deleted
// row's id), and a counter a user had set to text was written as SQL, run by the import. A file whose integrity
// check SQLite cannot finish (a table with root page 0) was answered 500, as if the repo's own database were damaged.
// A schema text ending in a comment took the dump's `;` into the comment: the import lost every object after it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { startProduct, type Product } from './helpers/product.ts';
import { upload } from './helpers/imports.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

async function dump(database: string): Promise<string> {
  const url = new URL('/web/_db/export', p.url);
  const res = await request(url, {
    method: 'POST', body: JSON.stringify({ database, format: 'sql' }),
    headers: { host: `acme.localhost:${url.port}`, authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' },
  });
  const text = await res.body.text();
  assert.equal(res.statusCode, 200, text);
  return text;
}

const nextId = async (database: string) => {
  const r = await p.db('web', 'execute', { database, sql: "INSERT INTO t(v) VALUES ('next') RETURNING id" });
  assert.equal(r.status, 200, r.text);
  return r.json.results[0].rows[0][0];
};

test('a counter past 2^53 survives export as SQL and import: the next id is the same as in the original', async () => {
  for (const sql of ['CREATE TABLE t(id INTEGER PRIMARY KEY AUTOINCREMENT, v)', "INSERT INTO t(id, v) VALUES (9007199254740993, 'gone')", 'DELETE FROM t']) {
    const r = await p.db('web', 'execute', { database: 'big', sql });
    assert.equal(r.status, 200, r.text);
  }
  const text = await dump('big');
  assert.match(text, /^INSERT INTO sqlite_sequence VALUES\('t',9007199254740993\);$/m);
  const imported = await upload(p, 'web', 'database=copy', text, 'application/sql');
  assert.equal(imported.status, 200, imported.text);
  assert.deepEqual(await nextId('copy'), { $bigint: '9007199254740994' }, 'not 9007199254740993, the deleted row\'s id');
  assert.deepEqual(await nextId('big'), { $bigint: '9007199254740994' });
});

test('a counter set to text comes back as that text, not as SQL the import runs', async () => {
  const payload = "1); INSERT INTO t(v) VALUES ('injected'); SELECT (1";
  for (const sql of ['CREATE TABLE t(id INTEGER PRIMARY KEY AUTOINCREMENT, v)', "INSERT INTO t(v) VALUES ('one')", `UPDATE sqlite_sequence SET seq = '${payload.replaceAll("'", "''")}'`]) {
    const r = await p.db('web', 'execute', { database: 'text', sql });
    assert.equal(r.status, 200, r.text);
  }
  const imported = await upload(p, 'web', 'database=textcopy', await dump('text'), 'application/sql');
  assert.equal(imported.status, 200, imported.text);
  const rows = async (database: string) => (await p.db('web', 'query', { database, sql: 'SELECT (SELECT json_group_array(v) FROM t), (SELECT seq FROM sqlite_sequence)' })).json.results[0].rows;
  assert.deepEqual(await rows('textcopy'), await rows('text'));
  assert.deepEqual(await rows('textcopy'), [['["one"]', payload]]);
});

test('a file listing a table whose root page is 0: 400 naming the integrity check, not 500 "damaged"; nothing made', async () => {
  const path = join(p.dataDir, 'rootpage0.sqlite');
  const db = openSqlite(path);
  db.enableDefensive(false);
  db.exec("CREATE TABLE t(a); PRAGMA writable_schema=ON; INSERT INTO sqlite_schema VALUES ('table', 'u', 'u', 0, 'CREATE TABLE u(a)'); PRAGMA writable_schema=OFF");
  db.close();
  const res = await upload(p, 'web', 'database=crafted', readFileSync(path));
  assert.equal(res.status, 400, res.text);
  assert.equal(res.json.error.code, 'invalid_request');
  assert.match(res.json.error.message, /^the file fails SQLite's integrity check: database disk image is malformed/);
  assert.equal((await p.db('web', 'status', { database: 'crafted' })).json.exists, false);
});

test('a schema text ending in a comment: the dump closes it before its ";", and the import keeps every object after it', async () => {
  const setup = ['CREATE TABLE t(a)', 'CREATE VIEW v AS SELECT a FROM t /* open', 'CREATE VIEW w AS SELECT a FROM t -- line', 'CREATE UNIQUE INDEX i ON t(a)', 'CREATE TRIGGER tr BEFORE INSERT ON t BEGIN SELECT 1; END', 'INSERT INTO t VALUES (1)'];
  const made = await p.db('web', 'execute', { database: 'comments', statements: setup.map((sql) => ({ sql })) });
  assert.equal(made.status, 200, made.text);
  const text = await dump('comments');
  assert.match(text, /^CREATE VIEW v AS SELECT a FROM t \/\* open\*\/;$/m);
  assert.match(text, /^CREATE VIEW w AS SELECT a FROM t -- line\n;$/m);
  const imported = await upload(p, 'web', 'database=commentscopy', text, 'application/sql');
  assert.equal(imported.status, 200, imported.text);
  const schema = async (database: string) => (await p.db('web', 'query', { database, sql: "SELECT type, name FROM sqlite_schema WHERE name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY name" })).json.results[0].rows;
  assert.deepEqual(await schema('commentscopy'), await schema('comments'));
  assert.deepEqual((await p.db('web', 'execute', { database: 'commentscopy', sql: 'INSERT INTO t VALUES (1)' })).json.error?.code, 'constraint_violation', 'the unique index came with it');
});
