// SPEC 4.5: a request that changed nothing makes no version and notifies no one. A full-text command that leaves the
// index as it was (`INSERT INTO ft(ft) VALUES('integrity-check')`) made a version and a change event: SQLite counts
// it as a row changed, and a virtual table was never judged. It is judged now by its shadow tables, as
// `UPDATE t SET v = v` is by its rows: through /_db/execute and at a libSQL transaction's COMMIT alike. SPEC 4.4: a
// command inserts no row, so its lastInsertRowid is null (it was SQLite's 0).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createClient } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

const execute = async (database: string, sql: string) => {
  const r = await p.db('web', 'execute', { database, sql });
  assert.equal(r.status, 200, `${sql}: ${r.text}`);
  return r.json as { version: number; results: { rowsAffected: number }[] };
};
const version = async (database: string) => (await p.db('web', 'status', { database })).json.version as number;
const events = async (database: string, since: number) => ((await p.db('web', 'changes', { database, since })).json.events as unknown[]).length;

/** `sql` run alone: whether it made a version (and an event). */
async function madeVersion(database: string, sql: string): Promise<boolean> {
  const start = await version(database);
  const r = await execute(database, sql);
  assert.equal(r.version, await version(database), 'the reply names the version the database is at');
  assert.equal(await events(database, start), r.version - start, 'an event for each version, none without');
  return r.version !== start;
}

test('a full-text command that changes nothing makes no version, as UPDATE t SET v = v does; one that changes the index does', async () => {
  const db = 'fts';
  await execute(db, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)');
  await execute(db, "INSERT INTO t(v) VALUES ('a')");
  await execute(db, 'CREATE VIRTUAL TABLE ft USING fts5(body)');
  await execute(db, "INSERT INTO ft(body) VALUES ('hello world'), ('second row')");
  assert.equal(await madeVersion(db, 'UPDATE t SET v = v WHERE 0'), false, 'the rule: nothing touched');
  assert.equal(await madeVersion(db, 'UPDATE t SET v = v'), false, 'the rule: rows touched, left as they were');
  assert.equal(await madeVersion(db, "INSERT INTO ft(ft) VALUES('integrity-check')"), false);
  assert.equal(await madeVersion(db, 'INSERT INTO "ft" ( "ft" ) VALUES (\'integrity-check\')'), false, 'quoted names too');
  assert.equal(await madeVersion(db, "INSERT INTO ft(ft, rank) VALUES('pgsz', 4050)"), true, 'a setting changed');
  assert.equal(await madeVersion(db, "INSERT INTO ft(body) VALUES ('third')"), true, 'a row is a change');
  assert.equal(await madeVersion(db, "INSERT INTO ft(ft) VALUES('optimize')"), true, 'merging the segments rewrites the index');
  assert.equal(await madeVersion(db, "INSERT INTO ft(ft) VALUES('integrity-check')"), false);
  const found = await p.db('web', 'query', { database: db, sql: "SELECT count(*) FROM ft WHERE ft MATCH 'hello OR third'" });
  assert.deepEqual(found.json.results[0].rows, [[2]]);
});

test('rows a full-text table holds only in memory until a savepoint (contentless, no sizes) are not taken for no change', async () => {
  const db = 'contentless';
  await execute(db, "CREATE VIRTUAL TABLE ft USING fts5(body, content='', columnsize=0)");
  const start = await version(db);
  const r = await p.db('web', 'execute', { database: db, statements: [{ sql: "INSERT INTO ft(rowid, body) VALUES (7, 'kept words')" }, { sql: "INSERT INTO ft(ft) VALUES('integrity-check')" }] });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.version, start + 1);
  const found = await p.db('web', 'query', { database: db, sql: "SELECT rowid FROM ft WHERE ft MATCH 'kept'" });
  assert.deepEqual(found.json.results[0].rows, [[7]]);
});

test('an R*Tree updated to the same values changes nothing, as a table does; moved, it does', async () => {
  const db = 'rtree';
  await execute(db, 'CREATE VIRTUAL TABLE r USING rtree(id, minX, maxX)');
  await execute(db, 'INSERT INTO r VALUES (1, 0, 10), (2, 5, 15)');
  assert.equal(await madeVersion(db, 'UPDATE r SET minX = minX'), false);
  assert.equal(await madeVersion(db, 'UPDATE r SET maxX = 20 WHERE id = 2'), true);
});

test('in a libSQL interactive transaction too: an integrity check alone commits no version', async () => {
  const db = 'ftstx';
  await execute(db, 'CREATE VIRTUAL TABLE ft USING fts5(body)');
  await execute(db, "INSERT INTO ft(body) VALUES ('hello')");
  const start = await version(db);
  const c = createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${db}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  try {
    const tx = await c.transaction('write');
    await tx.execute("INSERT INTO ft(ft) VALUES('integrity-check')");
    await tx.commit();
    assert.equal(await version(db), start);
    assert.equal(await events(db, start), 0);
    const again = await c.transaction('write');
    await again.execute("INSERT INTO ft(ft) VALUES('integrity-check')");
    await again.execute("INSERT INTO ft(body) VALUES ('more')");
    await again.commit();
    assert.equal(await version(db), start + 1, 'with a row, it is a change');
  } finally {
    c.close();
  }
});

test('FTS3/4 keep their segments under a key that may hold NULL, which no changeset shows: their commands still count as a change', async () => {
  const db = 'fts4';
  await execute(db, 'CREATE VIRTUAL TABLE f4 USING fts4(body)');
  await execute(db, "INSERT INTO f4(body) VALUES ('hello')");
  assert.equal(await madeVersion(db, "INSERT INTO f4(f4) VALUES('integrity-check')"), true);
});

test('a full-text command inserts no row: lastInsertRowid is null (SPEC 4.4), through /_db/execute and libSQL; rows inserted keep theirs', async () => {
  const db = 'rowids';
  await execute(db, 'CREATE VIRTUAL TABLE ft USING fts5(body)');
  await execute(db, 'CREATE VIRTUAL TABLE f4 USING fts4(body)');
  await execute(db, 'CREATE VIRTUAL TABLE f3 USING fts3(body)');
  await execute(db, 'CREATE VIRTUAL TABLE r USING rtree(r, lo, hi)'); // a column named as its table is no command
  await execute(db, 'CREATE TABLE t(t)');
  const rowid = async (sql: string) => {
    const r = await p.db('web', 'execute', { database: db, sql });
    assert.equal(r.status, 200, `${sql}: ${r.text}`);
    return r.json.results[0].lastInsertRowid;
  };
  assert.equal(await rowid("INSERT INTO ft(body) VALUES ('hello world')"), 1);
  for (const sql of ["INSERT INTO ft(ft) VALUES('optimize')", "INSERT INTO ft(ft) VALUES('integrity-check')", "INSERT INTO ft(ft, rank) VALUES('pgsz', 4050)", "INSERT INTO ft(ft) VALUES('rebuild')", 'INSERT INTO "ft"("ft") VALUES (\'optimize\')', "INSERT INTO f4(f4) VALUES('optimize')", "INSERT INTO f3(f3) VALUES('optimize')", "INSERT INTO f4(f4) VALUES('merge=1,2')"]) {
    assert.equal(await rowid(sql), null, sql);
  }
  const returning = await p.db('web', 'execute', { database: db, sql: "INSERT INTO ft(ft) VALUES('optimize') RETURNING 1 AS done" });
  assert.deepEqual(returning.json.results[0], { rowsAffected: 1, lastInsertRowid: null, columns: ['done'], rows: [[1]] }, 'SQLite counts the command as a change');
  assert.equal(await rowid("INSERT INTO ft(rowid, body) VALUES (0, 'row zero')"), 0, 'a row of rowid 0 is an insert');
  assert.equal(await rowid("INSERT INTO ft(ft, body) VALUES (NULL, 'no command')"), 2, 'a NULL command is a row');
  assert.equal(await rowid('INSERT INTO r(r, lo, hi) VALUES (0, 1, 2)'), 0);
  assert.equal(await rowid("INSERT INTO t(t) VALUES ('x')"), 1);
  const c = createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${db}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  try {
    assert.equal((await c.execute("INSERT INTO ft(ft) VALUES('optimize')")).lastInsertRowid, undefined);
    const tx = await c.transaction('write');
    assert.equal((await tx.execute("INSERT INTO f4(f4) VALUES('optimize')")).lastInsertRowid, undefined);
    assert.equal((await tx.execute("INSERT INTO ft(body) VALUES ('in a transaction')")).lastInsertRowid, 3n);
    await tx.commit();
  } finally {
    c.close();
  }
});
