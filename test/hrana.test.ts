// SPEC 4.10: the libSQL remote protocol (Hrana over HTTP, JSON) with the real @libsql/client, Drizzle and Kysely
// against the real product through the proxy; the protocol request by request is test/hrana-protocol.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createClient, type Client } from '@libsql/client';
import { drizzle } from 'drizzle-orm/libsql';
import { eq, sql } from 'drizzle-orm';
import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { Kysely, Migrator, sql as ksql, type Generated, type Migration } from 'kysely';
import { LibsqlDialect } from '@libsql/kysely-libsql';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type Product } from './helpers/product.ts';
import { wrongSecret } from '../src/shared/secrets.ts';


let p: Product;
let port: string;
const client = (path = 'web/_db/', secret = p.secret('acme', 'web')): Client =>
  createClient({ url: `http://acme.localhost:${port}/${path}`, authToken: secret, fetch: viaLoopback, intMode: 'bigint' });
const pipeline = (body: unknown, path = '/web/_db/v2/pipeline', repo = 'web') =>
  p.call(path, { body, headers: { authorization: `Bearer ${p.secret('acme', repo)}` } });
const version = async (database = 'main') => (await p.db('web', 'status', { database })).json.version as number;

before(async () => {
  p = await startProduct();
  port = new URL(p.url).port;
});
after(() => p.close());

describe('@libsql/client', () => {
  test('execute: every value type round-trips, positional and named arguments', async () => {
    const c = client();
    await c.execute('CREATE TABLE vals(id INTEGER PRIMARY KEY, i, big, f, t, b, n)');
    const big = 9007199254740993n;
    const w = await c.execute({ sql: 'INSERT INTO vals(i, big, f, t, b, n) VALUES (?, ?, ?, ?, ?, ?)', args: [42, big, 1.5, 'héllo', new Uint8Array([0, 1, 255]), null] });
    assert.equal(w.rowsAffected, 1);
    assert.equal(w.lastInsertRowid, 1n);
    await c.execute({ sql: 'INSERT INTO vals(i, t) VALUES (:i, $t)', args: { i: -9223372036854775808n, t: 'named' } });
    const r = await c.execute('SELECT i, big, f, t, b, n FROM vals ORDER BY id');
    assert.deepEqual(r.columns, ['i', 'big', 'f', 't', 'b', 'n']);
    const [a, b] = r.rows;
    assert.equal(a!.i, 42, 'a JS number is a float on the wire, a REAL in a column without a type (as on Turso)');
    assert.equal(a!.big, big);
    assert.equal(a!.f, 1.5);
    assert.equal(a!.t, 'héllo');
    assert.deepEqual([...new Uint8Array(a!.b as ArrayBuffer)], [0, 1, 255]);
    assert.equal(a!.n, null);
    assert.equal(b!.i, -9223372036854775808n);
    assert.equal(b!.t, 'named');
    c.close();
    // The libsql:// form Turso users have, with ?tls=0 for plain HTTP.
    const turso = createClient({ url: `libsql://acme.localhost:${port}/web/_db/?tls=0`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
    assert.equal((await turso.execute('SELECT count(*) AS n FROM vals')).rows[0]!.n, 2);
    turso.close();
  });

  test('a whole REAL stays a float (not a bigint), and columns carry their declared types', async () => {
    const c = client();
    await c.execute('CREATE TABLE reals(id INTEGER PRIMARY KEY, r REAL, n NUMERIC, t TEXT)');
    await c.execute({ sql: 'INSERT INTO reals(r, n, t) VALUES (?, ?, ?)', args: [5, 7, 'x'] });
    const read = await c.execute('SELECT id, r, n, t, r * 2 AS twice FROM reals');
    assert.deepEqual(read.rows.map((row) => [row.id, row.r, row.n, row.t, row.twice]), [[1n, 5, 7n, 'x', 10]]);
    assert.deepEqual(read.columnTypes, ['INTEGER', 'REAL', 'NUMERIC', 'TEXT', '']);
    const [inBatch] = await c.batch(['SELECT r FROM reals'], 'write');
    assert.equal(inBatch!.rows[0]!.r, 5, 'in a batch too');
    // @libsql/client sends every JS number as a float: it binds as REAL, as libsql-server binds it (5 / 2 is 2.5).
    const bound = await c.execute({ sql: 'SELECT ?1 / 2 AS half, typeof(?1) AS t', args: [5] });
    assert.equal(bound.rows[0]!.half, 2.5);
    assert.equal(bound.rows[0]!.t, 'real');
    const named = await c.execute({ sql: 'SELECT typeof(:n) AS t', args: { n: 3 } });
    assert.equal(named.rows[0]!.t, 'real');
    assert.equal((await c.execute({ sql: 'SELECT typeof(?) AS t', args: [3n] })).rows[0]!.t, 'integer', 'a bigint is an integer');
    const tx = await c.transaction('write');
    assert.equal((await tx.execute('SELECT r FROM reals')).rows[0]!.r, 5, 'and in a transaction');
    await tx.rollback();
    c.close();
  });

  test('batch("write") is one transaction and one version; a failing statement rolls all of it back', async () => {
    const c = client();
    await c.execute('CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT UNIQUE)');
    const v0 = await version();
    const results = await c.batch([{ sql: 'INSERT INTO items(name) VALUES (?)', args: ['a'] }, "INSERT INTO items(name) VALUES ('b')", 'SELECT count(*) AS n FROM items'], 'write');
    assert.equal(results.length, 3);
    assert.equal(results[2]!.rows[0]!.n, 2n, 'statements of the batch see each other');
    assert.equal(await version(), v0 + 1, 'one version for the whole batch');
    await assert.rejects(c.batch(["INSERT INTO items(name) VALUES ('c')", "INSERT INTO items(name) VALUES ('a')"], 'write'), (e: { code?: string; statementIndex?: number }) => {
      assert.equal(e.code, 'SQLITE_CONSTRAINT_UNIQUE');
      assert.equal(e.statementIndex, 1);
      return true;
    });
    assert.equal((await c.execute('SELECT count(*) AS n FROM items')).rows[0]!.n, 2n, 'nothing of the failed batch remains');
    assert.equal(await version(), v0 + 1);
    const read = await c.batch(['SELECT name FROM items ORDER BY id'], 'read');
    assert.deepEqual(read[0]!.rows.map((row) => row.name), ['a', 'b']);
    c.close();
  });

  test('executeMultiple, migrate, another database of the repo, errors with SQLite codes, and the sandbox', async () => {
    const c = client();
    await c.executeMultiple('CREATE TABLE m1(x); INSERT INTO m1 VALUES (1); INSERT INTO m1 VALUES (2);');
    assert.equal((await c.execute('SELECT sum(x) AS s FROM m1')).rows[0]!.s, 3n);
    await c.migrate(['CREATE TABLE m2(x)', 'INSERT INTO m2 VALUES (7)']);
    assert.equal((await c.execute('SELECT x FROM m2')).rows[0]!.x, 7n);
    const other = client('web/_db/analytics/');
    await other.execute('CREATE TABLE events(kind)');
    assert.equal((await p.db('web', 'status', { database: 'analytics' })).json.exists, true);
    await assert.rejects(c.execute('SELECT * FROM nosuch'), /no such table/);
    await assert.rejects(c.execute("ATTACH 'x.db' AS x"), (e: { code?: string }) => e.code === 'SQLITE_AUTH');
    await assert.rejects(c.execute('INSERT INTO _scopebase_meta VALUES (1, 2)'), (e: { code?: string }) => e.code === 'SQLITE_AUTH');
    other.close();
    c.close();
  });

  test('HTTP errors reach the client with the server\'s message: a wrong secret, a URL without its trailing slash', async () => {
    const wrong = client('web/_db/', 'wrong');
    await assert.rejects(wrong.execute('SELECT 1'), (e: Error & { code?: string }) => e.code === 'UNAUTHORIZED' && /wrong secret for this repo/.test(e.message));
    await assert.rejects(client('web/_db', p.secret('acme', 'web')).execute('SELECT 1'), /trailing slash \(…\/web\/_db\/\)/);
    await assert.rejects(client('Bad!Repo/_db/').execute('SELECT 1'), (e: Error & { code?: string }) => e.code === 'INVALID_NAME');
    // On the wire: SPEC 3's body still, with what libSQL clients read beside it.
    const res = await p.call('/web/_db/v2/pipeline', { body: { baton: null, requests: [] }, headers: { authorization: 'Bearer wrong' } });
    assert.equal(res.status, 401);
    assert.equal(res.headers['content-type'], 'application/json');
    const message = wrongSecret('acme', 'web');
    assert.deepEqual(res.json, { error: { code: 'unauthorized', message }, message, code: 'UNAUTHORIZED' });
    const plain = await p.call('/web/_db/query', { body: { sql: 'SELECT 1' }, headers: { authorization: 'Bearer wrong' } });
    assert.deepEqual(plain.json, { error: { code: 'unauthorized', message } }, 'the JSON API is unchanged');
  });

  test('migrate() and a stream\'s PRAGMA foreign_keys=OFF: a parent table\'s rebuild fires no ON DELETE CASCADE', async () => {
    const c = client('web/_db/fkhrana/');
    const schema = ['CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)', 'CREATE TABLE posts(id INTEGER PRIMARY KEY, author INTEGER REFERENCES users(id) ON DELETE CASCADE)'];
    const rebuild = (n: number) => [`CREATE TABLE __new_users(id INTEGER PRIMARY KEY, name TEXT, v${n} INTEGER)`, 'INSERT INTO __new_users(id, name) SELECT id, name FROM users', 'DROP TABLE users', 'ALTER TABLE __new_users RENAME TO users'];
    await c.migrate([...schema, "INSERT INTO users VALUES (1, 'a')", 'INSERT INTO posts VALUES (1, 1)']);
    await c.migrate(rebuild(1)); // @libsql/client wraps it in PRAGMA foreign_keys=off … on
    const count = async () => (await c.execute('SELECT count(*) AS n FROM posts')).rows[0]!.n;
    assert.equal(await count(), 1n, 'the post outlived its author table\'s rebuild');
    // The same on one stream by hand, around an interactive transaction: the pragma holds for the stream, as for a connection.
    const stmt = (sql: string) => ({ type: 'execute', stmt: { sql } });
    const res = await pipeline({ baton: null, requests: [stmt('PRAGMA foreign_keys=OFF'), stmt('BEGIN'), ...rebuild(2).map(stmt), stmt('COMMIT'), stmt('PRAGMA foreign_keys=ON'), { type: 'close' }] }, '/web/_db/fkhrana/v2/pipeline');
    assert.deepEqual(res.json.results.filter((r: { type: string }) => r.type !== 'ok'), [], res.text);
    assert.equal(await count(), 1n);
    // And for a sequence (executeMultiple) after it on the stream.
    const seq = await pipeline({ baton: null, requests: [stmt('PRAGMA foreign_keys=OFF'), { type: 'sequence', sql: rebuild(3).join(';\n') }, stmt('PRAGMA foreign_keys=ON'), { type: 'close' }] }, '/web/_db/fkhrana/v2/pipeline');
    assert.deepEqual(seq.json.results.filter((r: { type: string }) => r.type !== 'ok'), [], seq.text);
    assert.equal(await count(), 1n, 'a sequence on the stream kept its foreign keys off');
    await c.execute('DELETE FROM users');
    assert.equal(await count(), 0n, 'once the stream turned them on again, CASCADE runs');
    c.close();
  });
});

describe('interactive transactions', () => {
  test('transaction(): its writes are seen inside, not outside, until COMMIT (one version); writes of others wait for it; rollback leaves nothing', async () => {
    const c = client();
    const other = client();
    await c.execute('CREATE TABLE acct(id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)');
    await c.execute('INSERT INTO acct VALUES (1, 100), (2, 0)');
    const v0 = await version();
    const tx = await c.transaction('write');
    await tx.execute('UPDATE acct SET balance = balance - 30 WHERE id = 1');
    await tx.execute('UPDATE acct SET balance = balance + 30 WHERE id = 2');
    assert.deepEqual((await tx.execute('SELECT balance FROM acct ORDER BY id')).rows.map((r) => r.balance), [70n, 30n], 'seen inside');
    assert.deepEqual((await other.execute('SELECT balance FROM acct ORDER BY id')).rows.map((r) => r.balance), [100n, 0n], 'not seen outside: reads do not wait');
    let written = false;
    const waiting = other.execute('INSERT INTO acct VALUES (3, 5)').then(() => (written = true));
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(written, false, 'a write to the database waits for the transaction');
    await tx.commit();
    await waiting;
    assert.equal(await version(), v0 + 2, 'the transaction is one version, the waiting write the next');
    assert.deepEqual((await other.execute('SELECT balance FROM acct ORDER BY id')).rows.map((r) => r.balance), [70n, 30n, 5n]);

    const undone = await c.transaction('write');
    await assert.rejects(undone.execute('INSERT INTO acct VALUES (1, 1)'), (e: { code?: string }) => e.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || e.code === 'SQLITE_CONSTRAINT', 'a failing statement fails alone');
    await undone.execute('DELETE FROM acct');
    assert.equal((await undone.execute('SELECT count(*) AS n FROM acct')).rows[0]!.n, 0n, 'the transaction goes on after a failed statement');
    await undone.rollback();
    assert.equal((await c.execute('SELECT count(*) AS n FROM acct')).rows[0]!.n, 3n, 'rolled back');
    assert.equal(await version(), v0 + 2);
    // SPEC 4.5: a transaction whose writes leave every row as it was changes nothing: no version.
    const same = await c.transaction('write');
    await same.execute('UPDATE acct SET balance = balance');
    await same.execute('INSERT INTO acct VALUES (9, 9)');
    await same.execute('DELETE FROM acct WHERE id = 9');
    await same.commit();
    assert.equal(await version(), v0 + 2, 'a transaction that changed nothing makes no version');
    // A row no changeset shows (NULL in a key that allows it) is a change all the same.
    await c.execute('CREATE TABLE nk(k TEXT PRIMARY KEY, v)');
    const nk = await c.transaction('write');
    await nk.execute('INSERT INTO nk VALUES (NULL, 42)');
    await nk.commit();
    assert.deepEqual((await c.execute('SELECT v FROM nk')).rows.map((r) => r.v), [42n], 'the row committed');
    assert.equal(await version(), v0 + 4, 'the table, then the transaction');
    c.close();
    other.close();
  });

  test('transaction(\'read\') and batch(…, \'read\') only read: a write in them is SQLITE_READONLY, nothing commits, and writers do not wait for them', async () => {
    const c = client('web/_db/readonly/');
    const other = client('web/_db/readonly/');
    await c.executeMultiple("CREATE TABLE k(v); INSERT INTO k VALUES ('keep');");
    const v0 = await version('readonly');
    const tx = await c.transaction('read');
    assert.equal((await tx.execute('SELECT count(*) AS n FROM k')).rows[0]!.n, 1n);
    // A read transaction holds no lane: a write to its database commits at once (it used to wait ~1 s, then 503).
    const t0 = performance.now();
    await other.execute("INSERT INTO k VALUES ('meanwhile')");
    assert.ok(performance.now() - t0 < 500, `a writer did not wait for the read transaction (${(performance.now() - t0).toFixed(0)} ms)`);
    assert.equal((await tx.execute('SELECT count(*) AS n FROM k')).rows[0]!.n, 1n, 'the transaction reads its snapshot, from BEGIN');
    await assert.rejects(tx.execute('DELETE FROM k'), (e: { code?: string; message?: string }) => e.code === 'SQLITE_READONLY' && /read-only transaction/.test(e.message ?? ''), 'a write in it is refused');
    await tx.commit();
    await assert.rejects(c.batch(["INSERT INTO k VALUES ('batched')"], 'read'), (e: { code?: string }) => e.code === 'SQLITE_READONLY', 'a read batch that writes is refused');
    assert.deepEqual((await c.execute('SELECT v FROM k ORDER BY rowid')).rows.map((r) => r.v), ['keep', 'meanwhile'], 'nothing of the read transactions was written');
    assert.equal(await version('readonly'), v0 + 1, 'only the other client\'s write made a version');
    const rows = await c.batch(['SELECT count(*) AS n FROM k'], 'read');
    assert.equal(rows[0]!.rows[0]!.n, 2n, 'a read batch reads');
    // Of a database not made yet: an empty one is read, and none is made (nor, in a cluster, placed).
    const fresh = client('web/_db/never-made/');
    const empty = await fresh.transaction('read');
    assert.deepEqual((await empty.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_scopebase%' ESCAPE '\\'")).rows, []);
    await empty.commit();
    assert.equal((await p.db('web', 'status', { database: 'never-made' })).json.exists, false, 'no database was made');
    fresh.close();
    c.close();
    other.close();
  });

  test('Drizzle db.transaction commits, and tx.rollback() undoes', async () => {
    const db = drizzle(client('web/_db/drizzletx/'));
    const notes = sqliteTable('notes', { id: integer('id').primaryKey(), body: text('body').notNull() });
    await db.run(sql`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)`);
    await db.transaction(async (tx) => {
      await tx.insert(notes).values({ body: 'kept' });
    });
    await assert.rejects(db.transaction(async (tx) => {
      await tx.insert(notes).values({ body: 'undone' });
      tx.rollback();
    }));
    assert.deepEqual((await db.select().from(notes)).map((n) => n.body), ['kept']);
    // Nested transactions are savepoints: an inner rollback undoes only the inner writes.
    await db.transaction(async (tx) => {
      await tx.insert(notes).values({ body: 'outer' });
      await assert.rejects(tx.transaction(async (inner) => {
        await inner.insert(notes).values({ body: 'inner, undone' });
        inner.rollback();
      }));
      await tx.transaction(async (inner) => {
        await inner.insert(notes).values({ body: 'inner, kept' });
      });
    });
    assert.deepEqual((await db.select().from(notes)).map((n) => n.body), ['kept', 'outer', 'inner, kept']);
  });

  test('SAVEPOINT, RELEASE and ROLLBACK TO inside a transaction; outside one they are refused', async () => {
    const c = client('web/_db/savepoints/');
    await c.execute('CREATE TABLE s(x)');
    const tx = await c.transaction('write');
    await tx.execute('INSERT INTO s VALUES (1)');
    await tx.execute('SAVEPOINT a');
    await tx.execute('INSERT INTO s VALUES (2)');
    await tx.execute('ROLLBACK TO a');
    await tx.execute('RELEASE a');
    await tx.execute('INSERT INTO s VALUES (3)');
    await tx.commit();
    assert.deepEqual((await c.execute('SELECT x FROM s ORDER BY x')).rows.map((r) => r.x), [1n, 3n]);
    await assert.rejects(c.execute('SAVEPOINT b'), /only inside a transaction/);
    c.close();
  });

  test('executeMultiple (a sequence) inside a transaction runs in it; BEGIN … COMMIT in one is a transaction', async () => {
    const c = client('web/_db/sequences/');
    await c.execute('CREATE TABLE q(x)');
    const v0 = await version('sequences');
    const tx = await c.transaction('write');
    await tx.execute('INSERT INTO q VALUES (1)');
    const t0 = performance.now();
    await tx.executeMultiple('INSERT INTO q VALUES (2); INSERT INTO q VALUES (3);');
    assert.ok(performance.now() - t0 < 500, 'it did not wait behind its own transaction');
    assert.equal((await tx.execute('SELECT count(*) AS n FROM q')).rows[0]!.n, 3n, 'seen inside');
    assert.equal((await c.execute('SELECT count(*) AS n FROM q')).rows[0]!.n, 0n, 'not outside before COMMIT');
    await tx.rollback();
    assert.equal((await c.execute('SELECT count(*) AS n FROM q')).rows[0]!.n, 0n, 'the rollback undid the sequence too');
    await c.executeMultiple('BEGIN; INSERT INTO q VALUES (4); INSERT INTO q VALUES (5); COMMIT;');
    assert.deepEqual((await c.execute('SELECT x FROM q ORDER BY x')).rows.map((r) => r.x), [4n, 5n]);
    assert.equal(await version('sequences'), v0 + 1, 'one transaction, one version');
    await assert.rejects(c.executeMultiple('BEGIN; INSERT INTO q VALUES (6); INSERT INTO nosuch VALUES (1); COMMIT;'), /no such table/);
    assert.equal((await c.execute('SELECT count(*) AS n FROM q')).rows[0]!.n, 2n, 'a failed sequence left its transaction uncommitted');
    c.close();
  });
});

describe('Drizzle ORM (drizzle-orm/libsql)', () => {
  const todos = sqliteTable('todos', { id: integer('id').primaryKey(), title: text('title').notNull(), done: integer('done', { mode: 'boolean' }).notNull().default(false) });

  test('CRUD and db.batch', async () => {
    const db = drizzle(client('web/_db/drizzle/'));
    await db.run(sql`CREATE TABLE todos (id INTEGER PRIMARY KEY, title TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0)`);
    const [made] = await db.insert(todos).values({ title: 'write spec' }).returning();
    assert.equal(made!.title, 'write spec');
    await db.update(todos).set({ done: true }).where(eq(todos.id, made!.id));
    assert.deepEqual(await db.select().from(todos), [{ id: made!.id, title: 'write spec', done: true }]);
    await db.batch([db.insert(todos).values({ title: 'b' }), db.insert(todos).values({ title: 'c' })]);
    assert.equal((await db.select().from(todos)).length, 3);
    await db.delete(todos).where(eq(todos.title, 'b'));
    assert.deepEqual((await db.select({ title: todos.title }).from(todos)).map((t) => t.title), ['write spec', 'c']);
  });
});

describe('a transaction left open', () => {
  test('an idle stream is rolled back after DB_STREAM_IDLE_MS and the database\'s writes go on', async () => {
    const q = await startProduct({ DB_STREAM_IDLE_MS: '300' });
    try {
      const auth = { authorization: `Bearer ${q.secret('acme', 'web')}` };
      const begin = await q.call('/web/_db/v2/pipeline', { body: { baton: null, requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE t(x)' } }, { type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'execute', stmt: { sql: 'INSERT INTO t VALUES (1)' } }] }, headers: auth });
      assert.deepEqual(begin.json.results.map((r: { type: string }) => r.type), ['ok', 'ok', 'ok'], begin.text);
      const t0 = performance.now();
      const write = await q.db('web', 'execute', { sql: 'INSERT INTO t VALUES (2)' });
      assert.equal(write.status, 200, write.text);
      assert.ok(performance.now() - t0 >= 200, 'the write waited for the open transaction');
      assert.deepEqual((await q.db('web', 'query', { sql: 'SELECT x FROM t' })).json.results[0].rows, [[2]], 'the abandoned transaction left nothing');
      const late = await q.call('/web/_db/v2/pipeline', { body: { baton: begin.json.baton, requests: [{ type: 'execute', stmt: { sql: 'COMMIT' } }] }, headers: auth });
      assert.equal(late.status, 400, 'its baton is gone');
    } finally {
      await q.close();
    }
  });

  test('a write behind a transaction open longer than DB_QUEUE_TIMEOUT_MS gets 503 in time, saying what it waits for', async () => {
    const q = await startProduct({ DB_STREAM_IDLE_MS: '5000', DB_QUEUE_TIMEOUT_MS: '400' });
    try {
      const auth = { authorization: `Bearer ${q.secret('acme', 'web')}` };
      const begin = await q.call('/web/_db/v2/pipeline', { body: { baton: null, requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE t(x)' } }, { type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'execute', stmt: { sql: 'INSERT INTO t VALUES (1)' } }] }, headers: auth });
      assert.equal(begin.status, 200, begin.text);
      const t0 = performance.now();
      const write = await q.db('web', 'execute', { sql: 'INSERT INTO t VALUES (2)' });
      const waited = performance.now() - t0;
      assert.equal(write.status, 503, write.text);
      assert.equal(write.headers['retry-after'], '1');
      assert.equal(write.json.error.details.committed, false);
      assert.match(write.json.error.message, /wait behind an interactive transaction \(a libSQL stream\) open for \d+ ms; this write waited 400 ms/);
      assert.ok(waited < 3000, `answered after ${Math.round(waited)} ms, not when the transaction ended`);
      const commit = await q.call('/web/_db/v2/pipeline', { body: { baton: begin.json.baton, requests: [{ type: 'execute', stmt: { sql: 'COMMIT' } }, { type: 'close' }] }, headers: auth });
      assert.equal(commit.json.results[0].type, 'ok', commit.text);
      assert.deepEqual((await q.db('web', 'query', { sql: 'SELECT x FROM t' })).json.results[0].rows, [[1]], 'the refused write did not run');
    } finally {
      await q.close();
    }
  });

  test('a transaction kept busy is rolled back once older than DB_TRANSACTION_MAX_MS; its stream says so, and writes go on', async () => {
    const q = await startProduct({ DB_TRANSACTION_MAX_MS: '800', DB_STREAM_IDLE_MS: '10000' });
    try {
      const auth = { authorization: `Bearer ${q.secret('acme', 'web')}` };
      const send = (baton: string | null, sql: string) => q.call('/web/_db/v2/pipeline', { body: { baton, requests: [{ type: 'execute', stmt: { sql } }] }, headers: auth });
      await q.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
      let r = await send(null, 'BEGIN');
      r = await send(r.json.baton, 'INSERT INTO t VALUES (1)');
      const t0 = performance.now();
      while (r.json.results[0].type === 'ok' && performance.now() - t0 < 3000) {
        await new Promise((s) => setTimeout(s, 100)); // never idle for long
        r = await send(r.json.baton, 'SELECT count(*) FROM t');
      }
      assert.match(r.json.results[0].error?.message ?? '', /open longer than 800 ms \(DB_TRANSACTION_MAX_MS\) and was rolled back/, r.text);
      assert.ok(performance.now() - t0 < 2500, 'rolled back near its limit');
      const write = await q.db('web', 'execute', { sql: 'INSERT INTO t VALUES (2)' });
      assert.equal(write.status, 200, write.text);
      assert.deepEqual((await q.db('web', 'query', { sql: 'SELECT x FROM t' })).json.results[0].rows, [[2]], 'nothing of it was committed');
    } finally {
      await q.close();
    }
  });
});

describe('Kysely (@libsql/kysely-libsql)', () => {
  test('its Migrator, queries, and db.transaction() commit and rollback', async () => {
    interface Db { pets: { id: Generated<number>; name: string } }
    // `as never`: the dialect pins its own copy of @libsql/core's types; the object is the same client.
    const db = new Kysely<Db>({ dialect: new LibsqlDialect({ client: client('web/_db/kysely/') as never }) });
    const migrations: Record<string, Migration> = {
      '0001_pets': { up: async (k) => { await k.schema.createTable('pets').addColumn('id', 'integer', (c) => c.primaryKey()).addColumn('name', 'text', (c) => c.notNull()).execute(); } },
    };
    const { error, results } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateToLatest();
    assert.equal(error, undefined);
    assert.deepEqual(results?.map((r) => r.status), ['Success']);
    await db.insertInto('pets').values({ name: 'rex' }).execute();
    await db.transaction().execute(async (tx) => {
      await tx.insertInto('pets').values({ name: 'tom' }).execute();
    });
    await assert.rejects(db.transaction().execute(async (tx) => {
      await tx.insertInto('pets').values({ name: 'gone' }).execute();
      throw new Error('undo');
    }), /undo/);
    const names = (await db.selectFrom('pets').select('name').orderBy('id').execute()).map((r) => r.name);
    assert.deepEqual(names, ['rex', 'tom']);
    assert.equal((await ksql<{ n: bigint }>`SELECT count(*) AS n FROM pets`.execute(db)).rows[0]!.n, 2n);
    await db.destroy();
  });
});
