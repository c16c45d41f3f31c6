// A contentless full-text table (`content=''`) keeps no copy of its text: read back, fts5 gives NULL and fts4 refuses
// a full scan. A SQL export dumped its rows, so an fts5 one came back from import with an empty index (its search
// found nothing, silently), and a database holding an fts4 one could not be exported as SQL at all (400 "SQL logic
// error"). They are dumped as sqlite3 .dump does: the schema row under writable_schema, then the shadow tables' rows.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { DatabaseSync } from 'node:sqlite';
import { join } from 'node:path';
import { request } from 'undici';
import { startProduct, type Product } from './helpers/product.ts';
import { upload } from './helpers/imports.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

async function sqlExport(database: string): Promise<{ status: number; text: string }> {
  const res = await request(`${p.url}/web/_db/export`, {
    method: 'POST', body: JSON.stringify({ database, format: 'sql' }),
    headers: { host: `acme.${p.config.baseDomain}`, authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' },
  });
  return { status: res.statusCode, text: await res.body.text() };
}

const MATCH = "SELECT rowid FROM f WHERE f MATCH 'hello' ORDER BY rowid";

async function made(database: string, create: string): Promise<void> {
  const r = await p.db('web', 'execute', { database, statements: [
    { sql: create },
    { sql: "INSERT INTO f(rowid, a) VALUES (1, 'hello world'), (7, 'goodbye'), (9, 'hello again')" },
    { sql: 'CREATE TABLE notes(n TEXT)' },
    { sql: "INSERT INTO notes VALUES ('kept')" },
  ] });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual((await p.db('web', 'query', { database, sql: MATCH })).json.results[0].rows, [[1], [9]]);
}

test('a contentless fts5 table comes back from a SQL export with its index: its search finds what it found', async () => {
  await made('cl5', "CREATE VIRTUAL TABLE f USING fts5(a, content='')");
  const dump = await sqlExport('cl5');
  assert.equal(dump.status, 200, dump.text);
  const back = await upload(p, 'web', 'database=cl5back', dump.text, 'application/sql');
  assert.equal(back.status, 200, back.text);
  assert.deepEqual((await p.db('web', 'query', { database: 'cl5back', sql: MATCH })).json.results[0].rows, [[1], [9]]);
  assert.deepEqual((await p.db('web', 'query', { database: 'cl5back', sql: 'SELECT n FROM notes' })).json.results[0].rows, [['kept']]);
});

test('a database with a contentless fts4 table exports as SQL, and the dump loads in SQLite with the index', async () => {
  await made('cl4', "CREATE VIRTUAL TABLE f USING fts4(a, content='')");
  const dump = await sqlExport('cl4');
  assert.equal(dump.status, 200, dump.text);
  const file = join(p.dataDir, 'cl4-loaded.sqlite');
  const load = new DatabaseSync(file);
  load.enableDefensive(false); // the writable_schema form, as sqlite3 loads it
  load.exec(dump.text);
  load.close(); // a schema row written so is read by the next connection, as after `sqlite3 new.db < dump.sql`
  const db = new DatabaseSync(file);
  try {
    assert.deepEqual(db.prepare(MATCH).all().map((r) => r.rowid), [1, 9]);
    assert.deepEqual(db.prepare('SELECT n FROM notes').all().map((r) => r.n), ['kept']);
  } finally {
    db.close();
  }
});
