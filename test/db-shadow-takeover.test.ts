// A full-text table made with fts3 or fts4 takes an existing table named `<name>_stat` (fts3 also `_docsize`) as its
// own storage: SQLite then calls the user's table a shadow table. Status stopped listing it, the user could no longer
// write it, a SQL export left its rows out, and dropping the full-text table dropped it with its rows. The sandbox
// refuses the statement (CREATE VIRTUAL TABLE, or ALTER TABLE … RENAME of a full-text table) that would do so.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

const SQL_EXPORT = async (database: string) => {
  const res = await request(`${p.url}/web/_db/export`, {
    method: 'POST', body: JSON.stringify({ database, format: 'sql' }),
    headers: { host: `acme.${p.config.baseDomain}`, authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' },
  });
  const text = await res.body.text();
  assert.equal(res.statusCode, 200, text);
  return text;
};

/** The user's table is still theirs: listed by status, writable, in a SQL export, with its rows. */
async function stillTheUsers(database: string, table: string): Promise<void> {
  const status = await p.db('web', 'status', { database });
  assert.equal(status.status, 200, status.text);
  assert.ok(status.json.tables.some((t: { name: string }) => t.name === table), `status lists ${table}: ${status.text}`);
  const write = await p.db('web', 'execute', { database, sql: `INSERT INTO ${table} VALUES ('tue', 4)` });
  assert.equal(write.status, 200, write.text);
  assert.match(await SQL_EXPORT(database), new RegExp(`INSERT INTO "${table}".*'mon'`));
}

for (const module of ['fts3', 'fts4']) {
  test(`CREATE VIRTUAL TABLE … USING ${module} beside a table named <name>_stat is refused, and the table stays the user's`, async () => {
    const database = `make-${module}`;
    const made = await p.db('web', 'execute', { database, statements: [
      { sql: 'CREATE TABLE posts_stat(day TEXT, views INTEGER)' },
      { sql: "INSERT INTO posts_stat VALUES ('mon', 3)" },
    ] });
    assert.equal(made.status, 200, made.text);
    const fts = await p.db('web', 'execute', { database, sql: `CREATE VIRTUAL TABLE posts USING ${module}(title)` });
    assert.equal(fts.status, 400, fts.text);
    assert.equal(fts.json.error.code, 'not_allowed');
    assert.match(fts.json.error.message, /posts_stat/);
    await stillTheUsers(database, 'posts_stat');
  });
}

test('renaming a full-text table onto a name whose _stat table exists is refused', async () => {
  const database = 'rename';
  const made = await p.db('web', 'execute', { database, statements: [
    { sql: 'CREATE VIRTUAL TABLE old USING fts3(title)' },
    { sql: 'CREATE TABLE posts_stat(day TEXT, views INTEGER)' },
    { sql: "INSERT INTO posts_stat VALUES ('mon', 3)" },
  ] });
  assert.equal(made.status, 200, made.text);
  const renamed = await p.db('web', 'execute', { database, sql: 'ALTER TABLE old RENAME TO posts' });
  assert.equal(renamed.status, 400, renamed.text);
  assert.equal(renamed.json.error.code, 'not_allowed');
  await stillTheUsers(database, 'posts_stat');
});

test('a migration that would take a table as a full-text table\'s storage is refused, and nothing of it applied', async () => {
  const database = 'migrated';
  const migrations = [
    { id: '0001_stats', sql: "CREATE TABLE posts_stat(day TEXT, views INTEGER); INSERT INTO posts_stat VALUES ('mon', 3);" },
    { id: '0002_search', sql: 'CREATE VIRTUAL TABLE posts USING fts4(title);' },
  ];
  const r = await p.db('web', 'migrate', { database, migrations });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error.code, 'not_allowed');
  const first = await p.db('web', 'migrate', { database, migrations: migrations.slice(0, 1) });
  assert.equal(first.status, 200, first.text);
  await stillTheUsers(database, 'posts_stat');
});
