// SPEC 4.12 from the outside: export as a clean SQLite file and as a SQL dump with x-db-version; import of either into
// a new or an existing database, all or nothing, one new version with a database.imported event, and its refusals.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';
import { viaLoopback } from './helpers/loopback-fetch.ts';

let p: Product;
const scratch = tempDir();
before(async () => {
  p = await startProduct({ DB_MAX_BODY_BYTES: '4096', DB_MAX_SIZE_BYTES: String(2 * 1024 * 1024) });
  const r = await p.db('web', 'execute', { statements: [
    { sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT NOT NULL, data BLOB)' },
    { sql: 'CREATE INDEX todos_title ON todos(title)' },
    { sql: "INSERT INTO todos(title, data) VALUES ('a', x'00ff'), ('it''s', NULL), (?, zeroblob(3000))", params: ['x'.repeat(3000)] },
  ] });
  assert.equal(r.status, 200, r.text);
});
after(async () => {
  await p.close();
  rmSync(scratch, { recursive: true, force: true });
});

const url = (path: string): string => `http://acme.${p.config.baseDomain}:${new URL(p.url).port}/web/_db/${path}`;
const auth = (): Record<string, string> => ({ authorization: `Bearer ${p.secret('acme', 'web')}` });
async function exportOf(format: string, database = 'main'): Promise<{ status: number; version: string | null; bytes: Buffer }> {
  const r = await viaLoopback(url('export'), { method: 'POST', body: JSON.stringify({ database, format }), headers: { ...auth(), 'content-type': 'application/json' } });
  return { status: r.status, version: r.headers.get('x-db-version'), bytes: Buffer.from(await r.arrayBuffer()) };
}
async function importOf(query: string, type: string, body: Buffer | string): Promise<{ status: number; json: any }> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const r = await viaLoopback(url(`import?${query}`), { method: 'POST', body: typeof body === 'string' ? body : new Uint8Array(body), headers: { ...auth(), 'content-type': type } });
  return { status: r.status, json: await r.json() };
}
const content = async (database: string): Promise<unknown> =>
  (await p.db('web', 'query', { database, sql: 'SELECT id, title, hex(data) FROM todos ORDER BY id' })).json.results[0].rows;

test('export sqlite: a clean SQLite file, no internal tables, at x-db-version', async () => {
  const e = await exportOf('sqlite');
  assert.equal(e.status, 200);
  assert.equal(e.version, '1');
  const file = join(scratch, 'x.sqlite');
  writeFileSync(file, e.bytes);
  const db = new DatabaseSync(file, { readOnly: true });
  const names = (db.prepare("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name").all() as { name: string }[]).map((r) => r.name);
  assert.deepEqual(names, ['todos', 'todos_title']);
  assert.equal((db.prepare('SELECT count(*) AS n FROM todos').get() as { n: number }).n, 3);
  db.close();
});

test('export sql: schema, then rows; importing it (create) gives the same content at version 1, with its reply', async () => {
  const e = await exportOf('sql');
  assert.equal(e.status, 200);
  assert.equal(e.version, '1');
  const sql = e.bytes.toString('utf8');
  assert.ok(sql.indexOf('CREATE TABLE') < sql.indexOf('INSERT'), 'schema first');
  assert.ok(e.bytes.length > 4096, 'larger than DB_MAX_BODY_BYTES: import is bounded by the size limit, not the body limit');
  const r = await importOf('database=fromsql&mode=create', 'application/sql', e.bytes);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.deepEqual(r.json, { database: 'fromsql', version: 1, tables: [{ name: 'todos', rows: 3 }] });
  assert.deepEqual(await content('fromsql'), await content('main'));
  const ev = (await p.db('web', 'changes', { database: 'fromsql', since: 0 })).json.events;
  assert.deepEqual(ev.map((x: { type: string; changeset: unknown; version: number }) => [x.type, x.changeset, x.version]), [['database.imported', null, 1]]);
});

test('import sqlite replace: the database then holds exactly the file\'s content, as one new version', async () => {
  assert.equal((await p.db('web', 'execute', { database: 'target', statements: [{ sql: 'CREATE TABLE old(a)' }, { sql: 'INSERT INTO old VALUES (1)' }] })).status, 200);
  const file = (await exportOf('sqlite')).bytes;
  assert.ok(file.length > 4096, 'larger than DB_MAX_BODY_BYTES');
  const r = await importOf('database=target&mode=replace', 'application/vnd.sqlite3', file);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.deepEqual(r.json, { database: 'target', version: 2, tables: [{ name: 'todos', rows: 3 }] });
  assert.deepEqual((await p.db('web', 'status', { database: 'target' })).json.tables.map((t: { name: string }) => t.name), ['todos']);
  assert.deepEqual(await content('target'), await content('main'));
});

test('create refuses an existing database with 400 invalid_request and leaves it unchanged', async () => {
  const r = await importOf('database=target&mode=create', 'application/sql', 'CREATE TABLE other(a);');
  assert.equal(r.status, 400);
  assert.equal(r.json.error.code, 'invalid_request');
  assert.equal((await p.db('web', 'status', { database: 'target' })).json.version, 2);
});

test('all or nothing: a dump that fails half way, a corrupt file, a schema the sandbox refuses, a bad mode or type leave nothing', async () => {
  const bad: [string, string, string | Buffer, number, string][] = [
    ['database=target&mode=replace', 'application/sql', 'CREATE TABLE a(x); INSERT INTO a VALUES (1); INSERT INTO nowhere VALUES (1);', 400, 'sql_error'],
    ['database=target&mode=replace', 'application/vnd.sqlite3', Buffer.concat([Buffer.from('SQLite format 3\0'), Buffer.alloc(4000, 7)]), 400, 'invalid_request'],
    ['database=target&mode=replace', 'application/sql', 'CREATE TABLE a(x); ATTACH DATABASE \'/tmp/x\' AS y;', 400, 'not_allowed'],
    ['database=target&mode=replace', 'application/sql', 'CREATE TABLE _scopebase_changes(x);', 400, 'not_allowed'],
    ['database=target&mode=merge', 'application/sql', 'CREATE TABLE a(x);', 400, 'invalid_request'],
    ['database=target&mode=replace', 'text/plain', 'CREATE TABLE a(x);', 400, 'invalid_request'],
    ['database=Bad&mode=create', 'application/sql', 'CREATE TABLE a(x);', 400, 'invalid_name'],
  ];
  for (const [query, type, body, status, code] of bad) {
    const r = await importOf(query, type, body);
    assert.deepEqual([r.status, r.json.error?.code], [status, code], `${query} ${type}: ${JSON.stringify(r.json)}`);
  }
  assert.equal((await p.db('web', 'status', { database: 'target' })).json.version, 2);
  assert.deepEqual(await content('target'), await content('main'));
});

test('an import larger than DB_MAX_SIZE_BYTES is 507 quota_exceeded and creates nothing', async () => {
  const big = `CREATE TABLE big(x);\n${`INSERT INTO big VALUES ('${'y'.repeat(60_000)}');\n`.repeat(50)}`;
  const r = await importOf('database=big&mode=create', 'application/sql', big);
  assert.deepEqual([r.status, r.json.error?.code], [507, 'quota_exceeded'], JSON.stringify(r.json));
  assert.equal((await p.db('web', 'status', { database: 'big' })).json.exists, false);
});

test('export of a database that does not exist is 404 database_not_found; an unknown format is 400 invalid_request', async () => {
  assertSpecError(await p.db('web', 'export', { database: 'nope', format: 'sql' }), 404, 'database_not_found');
  assertSpecError(await p.db('web', 'export', { format: 'csv' }), 400, 'invalid_request');
});

test('a SQLite file whose schema reaches internal tables or holds an unsafe virtual table is refused with not_allowed', async () => {
  const schemas = [
    'CREATE TABLE _scopebase_meta(k, v)',
    'CREATE TABLE a(x); CREATE TRIGGER g AFTER INSERT ON a BEGIN DELETE FROM _scopebase_changes; END',
    'CREATE VIEW v AS SELECT * FROM _scopebase_migrations',
  ];
  for (const [i, schema] of schemas.entries()) {
    const file = join(scratch, `bad${i}.sqlite`);
    const db = new DatabaseSync(file);
    db.exec(schema);
    db.close();
    const r = await importOf('database=evil&mode=create', 'application/vnd.sqlite3', readFileSync(file));
    assert.deepEqual([r.status, r.json.error?.code], [400, 'not_allowed'], `${schema}: ${JSON.stringify(r.json)}`);
  }
  const r = await importOf('database=evil&mode=create', 'application/sql', 'CREATE VIRTUAL TABLE f USING fts3tokenize(simple);');
  assert.deepEqual([r.status, r.json.error?.code], [400, 'not_allowed'], JSON.stringify(r.json));
  assert.equal((await p.db('web', 'status', { database: 'evil' })).json.exists, false);
});

test('a Content-Type with parameters is still its type: application/sql; charset=utf-8', async () => {
  const r = await importOf('database=charset&mode=create', 'application/sql; charset=utf-8', "CREATE TABLE a(x); INSERT INTO a VALUES ('é');");
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.deepEqual(r.json.tables, [{ name: 'a', rows: 1 }]);
});

test('a dump as the sqlite3 shell writes it (.dump: PRAGMA foreign_keys=OFF, BEGIN TRANSACTION … COMMIT) imports', async () => {
  const dump = "PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\nCREATE TABLE a(id INTEGER PRIMARY KEY AUTOINCREMENT, x);\nINSERT INTO a VALUES(1,'one');\nDELETE FROM sqlite_sequence;\nINSERT INTO sqlite_sequence VALUES('a',5);\nCOMMIT;\n";
  const r = await importOf('database=shelldump&mode=create', 'application/sql', dump);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.deepEqual(r.json.tables, [{ name: 'a', rows: 1 }]);
  const next = await p.db('web', 'execute', { database: 'shelldump', sql: "INSERT INTO a(x) VALUES ('two') RETURNING id" });
  assert.deepEqual(next.json.results[0].rows, [[6]]);
});

test('mode replace of a database that does not exist makes it, at version 1', async () => {
  const r = await importOf('database=newone&mode=replace', 'application/sql', 'CREATE TABLE a(x);');
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.equal(r.json.version, 1);
});

test('a SQLite file larger than DB_MAX_SIZE_BYTES is 507 quota_exceeded and creates nothing', async () => {
  const file = join(scratch, 'huge.sqlite');
  const db = new DatabaseSync(file);
  db.exec('CREATE TABLE h(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) INSERT INTO h SELECT randomblob(10000) FROM n');
  db.close();
  const r = await importOf('database=hugefile&mode=create', 'application/vnd.sqlite3', readFileSync(file));
  assert.deepEqual([r.status, r.json.error?.code], [507, 'quota_exceeded'], JSON.stringify(r.json));
  assert.equal((await p.db('web', 'status', { database: 'hugefile' })).json.exists, false);
});
