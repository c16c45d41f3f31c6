// SPEC 4.4, 4.8, 4.10: a statement of a libSQL interactive transaction that we refuse after SQLite ran it (its result
// over DB_MAX_RESULT_BYTES, a trigger naming an internal table, ALTER COLUMN over rows that break it) leaves nothing,
// as a refused /_db/execute does: its rows were written in the transaction and COMMIT stored rows the client was told
// had failed. What SQLite itself undoes (or keeps: OR FAIL) stays SQLite's. The results allowance counts the whole
// reply in bytes: a transaction's statement passed it by its envelope, and by a multi-byte text counted in characters.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createClient, type Client, type Transaction } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type Product } from './helpers/product.ts';

const LIMIT = 16 * 1024;
let p: Product;
before(async () => {
  p = await startProduct({ DB_MAX_RESULT_BYTES: String(LIMIT), DB_MAX_VALUE_BYTES: String(LIMIT) });
});
after(() => p.close());

const client = (database: string): Client => createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${database}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
const query = async (database: string, sql: string) => (await p.db('web', 'query', { database, sql })).json.results[0].rows as unknown[][];
const version = async (database: string) => (await p.db('web', 'status', { database })).json.version as number;
const events = async (database: string, since: number) => (await p.db('web', 'changes', { database, since })).json.events as { version: number; changes: { rowsAffected: number; tables: string[] } }[];
const pipeline = (database: string, baton: string | null, requests: unknown[]) =>
  p.call(`/web/_db/${database}/v3/pipeline`, { body: { baton, requests }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
const exec = (sql: string) => ({ type: 'execute', stmt: { sql } });
type Outcome = { type: string; error?: { code: string; message: string }; response?: { result: { rows: unknown[] } } };
const codeOf = (r: Outcome) => r.error?.code ?? r.type;
const bytes = (text: string) => Buffer.byteLength(text, 'utf8');

/** Fails with the Hrana error `code`, and a message matching `message`. */
async function refused(run: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  await assert.rejects(run, (e: Error & { code?: string }) => {
    assert.equal(e.code, code, e.message);
    assert.match(e.message, message);
    return true;
  });
}

/** A write transaction on `database` through the real client; `body` runs in it, then COMMIT. */
async function inTransaction(database: string, body: (tx: Transaction) => Promise<void>): Promise<void> {
  const c = client(database);
  try {
    const tx = await c.transaction('write');
    await body(tx);
    await tx.commit();
  } finally {
    c.close();
  }
}

async function made(database: string, ...sql: string[]): Promise<number> {
  for (const s of sql) assert.equal((await p.db('web', 'execute', { database, sql: s })).status, 200, s);
  return version(database);
}

describe('a statement refused after SQLite ran it leaves nothing in the transaction', () => {
  test('INSERT … RETURNING over DB_MAX_RESULT_BYTES: SQLITE_TOOBIG, and COMMIT stores the rows before it, not its own (it stored all 40)', async () => {
    const db = 'returning';
    const start = await made(db, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)');
    await inTransaction(db, async (tx) => {
      await tx.execute("INSERT INTO t(v) VALUES ('before')");
      await refused(tx.execute("INSERT INTO t(v) SELECT printf('%.1000c', 'x') FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 40) SELECT n FROM c) RETURNING v"),
        'SQLITE_TOOBIG', /DB_MAX_RESULT_BYTES/);
      assert.deepEqual((await tx.execute('SELECT count(*) AS n FROM t')).rows.map((r) => r.n), [1], 'within the transaction too: it is gone at once');
      await tx.execute("INSERT INTO t(v) VALUES ('after')");
    });
    assert.deepEqual(await query(db, 'SELECT v FROM t ORDER BY id'), [['before'], ['after']]);
    assert.equal(await version(db), start + 1);
    assert.deepEqual((await events(db, start)).map((e) => e.changes.rowsAffected), [2], 'the event counts the two rows, not the refused 40');
  });

  test('the client\'s own SAVEPOINT, RELEASE and ROLLBACK TO nest as before around a refused statement', async () => {
    const db = 'savepoints';
    await made(db, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)');
    await inTransaction(db, async (tx) => {
      await tx.execute('SAVEPOINT a');
      await tx.execute("INSERT INTO t(v) VALUES ('in a')");
      await refused(tx.execute(`INSERT INTO t(v) SELECT printf('%.2000c', 'y') FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 10) SELECT n FROM c) RETURNING v`), 'SQLITE_TOOBIG', /DB_MAX_RESULT_BYTES/);
      await tx.execute('SAVEPOINT b');
      await tx.execute("INSERT INTO t(v) VALUES ('in b, undone')");
      await tx.execute('ROLLBACK TO b');
      await tx.execute('RELEASE b');
      await tx.execute('RELEASE a');
      await refused(tx.execute('ROLLBACK TO a'), 'SQLITE_ERROR', /no such savepoint: a/);
      await tx.execute('SAVEPOINT c');
      await tx.execute("INSERT INTO t(v) VALUES ('in c')");
    });
    assert.deepEqual(await query(db, 'SELECT v FROM t ORDER BY id'), [['in a'], ['in c']]);
  });

  test('a trigger whose body names an internal table: SQLITE_AUTH, and it is not in the committed schema (it was)', async () => {
    const db = 'trigger';
    const start = await made(db, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)');
    await inTransaction(db, async (tx) => {
      await refused(tx.execute('CREATE TRIGGER peek AFTER INSERT ON t BEGIN SELECT value FROM _scopebase_meta; END'), 'SQLITE_AUTH', /internal table/);
      await tx.execute("INSERT INTO t(v) VALUES ('kept')");
    });
    assert.deepEqual(await query(db, "SELECT name FROM sqlite_schema WHERE type = 'trigger'"), []);
    assert.deepEqual(await query(db, 'SELECT v FROM t'), [['kept']]);
    assert.equal(await version(db), start + 1);
  });

  test('ALTER COLUMN over rows that break the new definition: 409, and the committed schema is the old one (it was the new one, rows breaking it)', async () => {
    const db = 'altercolumn';
    const start = await made(db, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)', 'INSERT INTO t(v) VALUES (NULL)');
    await inTransaction(db, async (tx) => {
      await refused(tx.execute('ALTER TABLE t ALTER COLUMN v TO v TEXT NOT NULL'), 'SQLITE_CONSTRAINT', /existing rows break the new definition/);
    });
    assert.deepEqual(await query(db, "SELECT sql FROM sqlite_schema WHERE name = 't'"), [['CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)']]);
    assert.equal(await version(db), start, 'the transaction changed nothing: no version');
    assert.equal((await p.db('web', 'execute', { database: db, sql: 'INSERT INTO t(v) VALUES (NULL)' })).status, 200, 'NULLs are still allowed');
  });

  test('a transaction whose only write was refused commits no version and no event, on a table no changeset shows too (no PRIMARY KEY)', async () => {
    const db = 'nokey';
    const start = await made(db, 'CREATE TABLE t(v TEXT)');
    await inTransaction(db, async (tx) => {
      await refused(tx.execute("INSERT INTO t(v) SELECT printf('%.2000c', 'z') FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 10) SELECT n FROM c) RETURNING v"), 'SQLITE_TOOBIG', /DB_MAX_RESULT_BYTES/);
    });
    assert.deepEqual(await query(db, 'SELECT count(*) FROM t'), [[0]]);
    assert.equal(await version(db), start);
    assert.deepEqual(await events(db, start), []);
  });

  test('what SQLite undoes itself stays as SQLite leaves it: a value over DB_MAX_VALUE_BYTES mid-statement leaves none of its rows; OR FAIL keeps the rows before the failing one, and COMMIT keeps them (it judged the transaction unchanged and dropped them)', async () => {
    const db = 'sqlite';
    const start = await made(db, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)', 'CREATE TABLE u(k UNIQUE)', 'INSERT INTO u VALUES (1)');
    await inTransaction(db, async (tx) => {
      await refused(tx.execute("INSERT INTO t(v) VALUES ('a'), ('b'), (zeroblob(40000)), ('d')"), 'SQLITE_TOOBIG', /length limit/);
      await refused(tx.execute('INSERT OR FAIL INTO u(k) VALUES (20), (21), (1), (22)'), 'SQLITE_CONSTRAINT_UNIQUE', /UNIQUE constraint failed/);
    });
    assert.deepEqual(await query(db, 'SELECT count(*) FROM t'), [[0]]);
    assert.deepEqual(await query(db, 'SELECT k FROM u ORDER BY k'), [[1], [20], [21]], 'SQLite\'s own semantics of OR FAIL');
    assert.equal(await version(db), start + 1);
    const [event] = await events(db, start);
    assert.deepEqual({ ...event!.changes }, { rowsAffected: 2, tables: ['u'] });
  });
});

describe('DB_MAX_RESULT_BYTES in a transaction counts the whole reply, in bytes', () => {
  /** The executor's reply to one statement of a transaction, for a text of n bytes: measured with a small n. */
  async function envelope(db: string, sql: (n: number) => string): Promise<number> {
    const r = await pipeline(db, null, [exec('BEGIN'), exec(sql(10)), exec('ROLLBACK'), { type: 'close' }]);
    const result = r.json.results[1] as Outcome;
    assert.equal(result.type, 'ok', r.text);
    return bytes(`{"results":[${JSON.stringify(result.response!.result)}]}`) - 10;
  }

  test('a result whose rows fit but whose reply is ~20 bytes over: SQLITE_TOOBIG, and an INSERT … RETURNING of it leaves no row (both passed)', async () => {
    const db = 'envelope';
    await made(db, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)');
    const select = (n: number) => `SELECT printf('%.${n}c', 'x') AS v`;
    const around = await envelope(db, select);
    const under = await pipeline(db, null, [exec('BEGIN'), exec(select(LIMIT - around - 20)), exec('ROLLBACK'), { type: 'close' }]);
    assert.deepEqual(under.json.results.map(codeOf), ['ok', 'ok', 'ok', 'ok'], 'under the limit passes');
    const over = await pipeline(db, null, [exec('BEGIN'), exec(select(LIMIT - around + 20)), exec('ROLLBACK'), { type: 'close' }]);
    assert.deepEqual(over.json.results.map(codeOf), ['ok', 'SQLITE_TOOBIG', 'ok', 'ok'], over.text.slice(0, 300));
    const size = Number(/the reply would be (\d+) bytes, over DB_MAX_RESULT_BYTES \(\d+ bytes\)/.exec(over.json.results[1].error.message)?.[1]);
    assert.ok(size > LIMIT && size < LIMIT + 30, over.json.results[1].error.message);

    const insert = (n: number) => `INSERT INTO t(v) VALUES (printf('%.${n}c', 'x')) RETURNING v`;
    const aroundInsert = await envelope(db, insert);
    const start = await version(db);
    const r = await pipeline(db, null, [exec('BEGIN'), exec(insert(LIMIT - aroundInsert + 20)), exec("INSERT INTO t(v) VALUES ('kept')"), exec('COMMIT'), { type: 'close' }]);
    assert.deepEqual(r.json.results.map(codeOf), ['ok', 'SQLITE_TOOBIG', 'ok', 'ok', 'ok'], r.text.slice(0, 300));
    assert.deepEqual(await query(db, 'SELECT v FROM t'), [['kept']]);
    assert.equal(await version(db), start + 1);
  });

  test('a write without rows where the pipeline has ~100 bytes left: SQLITE_TOOBIG, and its row is not committed', async () => {
    const db = 'leftover';
    await made(db, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)');
    const select = (n: number) => `SELECT printf('%.${n}c', 'x') AS v`;
    const around = await envelope(db, select);
    const r = await pipeline(db, null, [exec('BEGIN'), exec(select(LIMIT - around - 100)), exec("INSERT INTO t(v) VALUES ('refused')")]);
    assert.deepEqual(r.json.results.map(codeOf), ['ok', 'ok', 'SQLITE_TOOBIG'], r.text.slice(-400));
    const done = await pipeline(db, r.json.baton, [exec("INSERT INTO t(v) VALUES ('kept')"), exec('COMMIT'), { type: 'close' }]);
    assert.deepEqual(done.json.results.map(codeOf), ['ok', 'ok', 'ok'], done.text);
    assert.deepEqual(await query(db, 'SELECT v FROM t'), [['kept']]);
  });

  test('three-byte characters count three: two results of ~60 % of the limit each in one pipeline, the second refused (both passed: it counted characters)', async () => {
    const db = 'euros';
    const euros = `SELECT replace(printf('%.${Math.floor(0.6 * LIMIT / 3)}c', 'e'), 'e', '€') AS v`;
    const r = await pipeline(db, null, [exec('BEGIN'), exec(euros), exec(euros), exec('ROLLBACK'), { type: 'close' }]);
    assert.deepEqual(r.json.results.map(codeOf), ['ok', 'ok', 'SQLITE_TOOBIG', 'ok', 'ok'], r.text.slice(0, 200));
    assert.match(r.json.results[2].error.message, /what is left of this libSQL pipeline's DB_MAX_RESULT_BYTES/);
    assert.ok(bytes(r.text) < LIMIT + 1024, `the reply is ${bytes(r.text)} bytes`);
  });
});
