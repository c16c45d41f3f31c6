// SPEC 4.10: a COMMIT that fails (a deferred foreign key still broken) leaves the interactive transaction open, as
// SQLite does and as libsql-server does (its stream's connection is still in the transaction): the client can fix
// the rows and COMMIT again, or ROLLBACK, and either way the database's writes are let go. With the real
// @libsql/client through the proxy.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { DatabaseSync } from 'node:sqlite';
import { createClient, type Client } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
const client = (database: string): Client =>
  createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${database}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback, intMode: 'bigint' });
const status = async (database: string) => (await p.db('web', 'status', { database })).json as { exists: boolean; version: number };
const events = async (database: string, since: number) => (await p.db('web', 'changes', { database, since })).json.events as { version: number; changes: { tables: string[] } }[];
const isForeignKeyFailure = (e: { code?: string; message?: string }) =>
  e.code === 'SQLITE_CONSTRAINT_FOREIGNKEY' && /FOREIGN KEY constraint failed/.test(e.message ?? '') && /still open/.test(e.message ?? '');
/** Another client's write to the database: it waits for an open write transaction, so it proves the lane was let go. */
async function writeFromElsewhere(database: string, sql: string): Promise<void> {
  const other = client(database);
  try {
    await other.execute(sql);
  } finally {
    other.close();
  }
}

before(async () => {
  // A write waiting on a transaction never let go would be refused after 1 s: quick, and not a flake under load.
  p = await startProduct({ DB_QUEUE_TIMEOUT_MS: '3000' });
});
after(() => p.close());

test('a DEFERRABLE INITIALLY DEFERRED key broken at COMMIT: COMMIT fails, the transaction stays open, fixing the row and COMMIT again commits it all as one version', async () => {
  // A new database: the transaction that makes it must not lose it when its first COMMIT fails.
  const c = client('deferred');
  try {
    const tx = await c.transaction('write');
    await tx.execute('CREATE TABLE parent(id INTEGER PRIMARY KEY)');
    await tx.execute('CREATE TABLE child(id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)');
    await tx.execute('INSERT INTO child VALUES (1, 7)');
    await assert.rejects(tx.execute('COMMIT'), isForeignKeyFailure);
    // Still in it: its own rows are there, and its statements run (the client checks the stream is not in autocommit).
    assert.deepEqual((await tx.execute('SELECT id, pid FROM child')).rows.map((r) => [r.id, r.pid]), [[1n, 7n]]);
    await tx.execute('INSERT INTO parent VALUES (7)');
    await tx.commit();
    assert.deepEqual((await c.execute('SELECT c.id, p.id AS parent FROM child c JOIN parent p ON p.id = c.pid')).rows.map((r) => [r.id, r.parent]), [[1n, 7n]]);
    const s = await status('deferred');
    assert.deepEqual([s.exists, s.version], [true, 1], 'one version for the whole transaction');
    const log = await events('deferred', 0);
    assert.deepEqual(log.map((e) => [e.version, e.changes.tables]), [[1, ['child', 'parent']]], 'one event, none from the failed COMMIT');
    await writeFromElsewhere('deferred', 'INSERT INTO parent VALUES (8)');
  } finally {
    c.close();
  }
});

test('PRAGMA defer_foreign_keys=ON and an orphan at COMMIT: COMMIT fails, ROLLBACK then succeeds, nothing is applied and writes go on at once', async () => {
  const c = client('pragma');
  try {
    await c.batch(['CREATE TABLE parent(id INTEGER PRIMARY KEY)', 'CREATE TABLE child(id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent(id))', 'INSERT INTO parent VALUES (1)'], 'write');
    const v0 = (await status('pragma')).version;
    const tx = await c.transaction('write');
    await tx.execute('PRAGMA defer_foreign_keys=ON');
    await tx.execute('INSERT INTO child VALUES (1, 1)');
    await tx.execute('INSERT INTO child VALUES (2, 99)');
    await assert.rejects(tx.execute('COMMIT'), isForeignKeyFailure);
    assert.equal((await tx.execute('SELECT count(*) AS n FROM child')).rows[0]!.n, 2n, 'the transaction still holds its rows');
    await tx.rollback(); // the client's ROLLBACK: an error here (no transaction active) would reject
    assert.equal((await c.execute('SELECT count(*) AS n FROM child')).rows[0]!.n, 0n, 'nothing of it applied');
    assert.equal((await status('pragma')).version, v0);
    const started = performance.now();
    await writeFromElsewhere('pragma', 'INSERT INTO child VALUES (3, 1)');
    assert.ok(performance.now() - started < 2000, 'the write did not wait for a transaction left open');
  } finally {
    c.close();
  }
});

test('the same through the protocol: after the failed COMMIT the stream is not in autocommit, a second COMMIT after the fix commits', async () => {
  const c = client('raw');
  await c.batch(['CREATE TABLE parent(id INTEGER PRIMARY KEY)', 'CREATE TABLE child(id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)'], 'write');
  c.close();
  const send = async (baton: string | null, requests: unknown[]) => {
    const r = await p.call('/web/_db/raw/v3/pipeline', { body: { baton, requests }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
    assert.equal(r.status, 200, r.text);
    return r.json as { baton: string; results: { type: string; response?: { is_autocommit?: boolean }; error?: { code: string; message: string } }[] };
  };
  const sql = (s: string) => ({ type: 'execute', stmt: { sql: s } });
  const one = await send(null, [sql('BEGIN'), sql('INSERT INTO child VALUES (1, 5)'), sql('COMMIT'), { type: 'get_autocommit' }]);
  assert.deepEqual(one.results.map((r) => r.type), ['ok', 'ok', 'error', 'ok'], JSON.stringify(one.results));
  assert.equal(one.results[2]!.error!.code, 'SQLITE_CONSTRAINT_FOREIGNKEY');
  assert.equal(one.results[3]!.response!.is_autocommit, false, 'still in the transaction, as on libsql-server');
  const two = await send(one.baton, [sql('INSERT INTO parent VALUES (5)'), sql('COMMIT'), { type: 'get_autocommit' }, { type: 'close' }]);
  assert.deepEqual(two.results.map((r) => r.type), ['ok', 'ok', 'ok', 'ok'], JSON.stringify(two.results));
  assert.equal(two.results[2]!.response!.is_autocommit, true);
  assert.equal((await p.db('web', 'query', { database: 'raw', sql: 'SELECT count(*) FROM child' })).json.results[0].rows[0][0], 1);
  // Its event carries the whole transaction, the rows of before the failed COMMIT too: a mirror applying it has both.
  const [event, ...more] = (await p.db('web', 'changes', { database: 'raw', since: 1 })).json.events as { changeset: string | null }[];
  assert.equal(more.length, 0, 'one event');
  const mirror = new DatabaseSync(':memory:');
  mirror.exec('CREATE TABLE parent(id INTEGER PRIMARY KEY); CREATE TABLE child(id INTEGER PRIMARY KEY, pid INTEGER)');
  assert.ok(mirror.applyChangeset(Buffer.from(event!.changeset!, 'base64'), { filter: (table) => !table.startsWith('_scopebase_') }));
  assert.deepEqual({ ...mirror.prepare('SELECT (SELECT group_concat(id) FROM parent) AS p, (SELECT group_concat(id || \':\' || pid) FROM child) AS c').get() }, { p: '5', c: '1:5' });
  mirror.close();
});

test('tx.commit() that fails (COMMIT and close in one pipeline) rejects, applies nothing, and lets the writes go', async () => {
  const c = client('closing');
  try {
    await c.batch(['CREATE TABLE parent(id INTEGER PRIMARY KEY)', 'CREATE TABLE child(id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)'], 'write');
    const v0 = (await status('closing')).version;
    const tx = await c.transaction('write');
    await tx.execute('INSERT INTO child VALUES (1, 3)');
    await assert.rejects(tx.commit(), isForeignKeyFailure);
    assert.equal(tx.closed, true, 'the client closed its stream: the server rolled the transaction back');
    await writeFromElsewhere('closing', 'INSERT INTO parent VALUES (3)');
    assert.equal((await c.execute('SELECT count(*) AS n FROM child')).rows[0]!.n, 0n);
    assert.equal((await status('closing')).version, v0 + 1, 'only the other write');
  } finally {
    c.close();
  }
});
