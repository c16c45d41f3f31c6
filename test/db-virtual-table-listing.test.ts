// SPEC 4.7 and 4.12: status and an import's reply list a full-text index or R*Tree as the one table the user made,
// marked virtual with its module, not its shadow tables (`docs_data`, `geo_node`, …), which the user never made and
// cannot write. Shadow tables are told by SQLite's own word (PRAGMA table_list), not by name: a user's own table
// named like one (`docs_notes` beside `docs`) is listed, and a SQL export keeps it (it was dropped from the dump).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { request } from 'undici';
import { startProduct, ROOT_KEY, type Product } from './helpers/product.ts';
import { runCli } from './helpers/cli.ts';

let p: Product;
before(async () => {
  p = await startProduct();
  const made = await p.db('web', 'execute', { database: 'vt', statements: [
    { sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT)' },
    { sql: "INSERT INTO todos(title) VALUES ('a'), ('b')" },
    { sql: 'CREATE VIRTUAL TABLE docs USING fts5(body)' },
    { sql: "INSERT INTO docs(body) VALUES ('the quick brown fox')" },
    { sql: 'CREATE VIRTUAL TABLE "geo box" USING rtree(id, x0, x1)' },
    { sql: 'INSERT INTO "geo box" VALUES (1, 0, 5)' },
    { sql: 'CREATE TABLE docs_notes(note TEXT)' },
    { sql: "INSERT INTO docs_notes VALUES ('mine')" },
  ] });
  assert.equal(made.status, 200, made.text);
});
after(() => p.close());

const LISTED = [
  { name: 'docs', rows: 1, virtual: true, module: 'fts5' },
  { name: 'docs_notes', rows: 1 },
  { name: 'geo box', rows: 1, virtual: true, module: 'rtree' },
  { name: 'todos', rows: 2 },
];

test('status lists a virtual table once, marked with its module, and none of its shadow tables', async () => {
  const r = await p.db('web', 'status', { database: 'vt' });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.tables, LISTED);
});

test('the CLI status prints the virtual tables as such and no shadow table', async () => {
  const run = await runCli(['status', 'acme/web', '--database', 'vt'], { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, PORT: new URL(p.url).port, BASE_DOMAIN: 'localhost', DATA_DIR: join(p.dataDir, 'none') });
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /docs \(virtual: fts5\)\s+1/);
  assert.match(run.stdout, /geo box \(virtual: rtree\)\s+1/);
  assert.match(run.stdout, /docs_notes\s+1/);
  assert.doesNotMatch(run.stdout, /docs_(data|idx|content|docsize|config)|geo box_(node|parent|rowid)/);
});

test('a SQL export keeps a user table named like a shadow table, and its import lists what status lists', async () => {
  const res = await request(`${p.url}/web/_db/export`, {
    method: 'POST', body: JSON.stringify({ database: 'vt', format: 'sql' }),
    headers: { host: `acme.${p.config.baseDomain}`, authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' },
  });
  const dump = await res.body.text();
  assert.equal(res.statusCode, 200, dump);
  assert.match(dump, /CREATE TABLE docs_notes/);
  assert.match(dump, /INSERT INTO "docs_notes"/);
  assert.doesNotMatch(dump, /docs_data|geo box_node/, 'shadow tables are rebuilt by their table, not dumped');
  const back = await p.call('/web/_db/import?database=vt2', { method: 'POST', rawBody: Buffer.from(dump), headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/sql' } });
  assert.equal(back.status, 200, back.text);
  assert.deepEqual(back.json.tables, LISTED);
  const notes = await p.db('web', 'query', { database: 'vt2', sql: 'SELECT note FROM docs_notes' });
  assert.deepEqual(notes.json.results[0].rows, [['mine']]);
});
