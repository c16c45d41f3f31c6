// SPEC 4.10 from the outside, with the real @libsql/client given `{base_url}/{repo}/_db/` and the repo's secret: probes,
// writes as 4.4-4.5 writes (versions, events), SQLite code names, other databases, interactive transactions and batons.
// (Protocol corners, limits and transaction bounds: hrana*.test.ts.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createClient, type Client } from '@libsql/client';
import { startProduct, type Product } from './helpers/product.ts';
import { viaLoopback } from './helpers/loopback-fetch.ts';

let p: Product;
let base = '';
before(async () => {
  p = await startProduct({ DB_STREAM_IDLE_MS: '400' });
  base = `http://acme.${p.config.baseDomain}:${new URL(p.url).port}`;
});
after(() => p.close());

const client = (path: string, secret = p.secret('acme', 'web')): Client => createClient({ url: `${base}/${path}`, authToken: secret, fetch: viaLoopback });
const status = async (database = 'main') => (await p.db('web', 'status', { database })).json;
const pipeline = (body: unknown, path = 'v2/pipeline') => p.call(`/web/_db/${path}`, { method: 'POST', body, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });

test('GET …/_db/v2 and …/v3, and under {database}/, answer 200', async () => {
  for (const path of ['v2', 'v3', 'analytics/v2', 'analytics/v3']) {
    const r = await p.call(`/web/_db/${path}`, { method: 'GET', headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
    assert.equal(r.status, 200, `${path}: ${r.text}`);
  }
});

test('each write is one version with its event; a batch is one transaction; a failing one leaves nothing', async () => {
  const db = client('web/_db/');
  await db.execute('CREATE TABLE t(id INTEGER PRIMARY KEY, email TEXT UNIQUE)');
  await db.batch([{ sql: 'INSERT INTO t(email) VALUES (?)', args: ['a@x'] }, { sql: 'INSERT INTO t(email) VALUES (?)', args: ['b@x'] }], 'write');
  assert.equal((await status()).version, 2);
  await assert.rejects(db.batch([{ sql: "INSERT INTO t(email) VALUES ('c@x')", args: [] }, { sql: "INSERT INTO t(email) VALUES ('a@x')", args: [] }], 'write'),
    (e: { code?: string }) => e.code === 'SQLITE_CONSTRAINT_UNIQUE' || e.code === 'SQLITE_CONSTRAINT', 'a SQLite code name');
  await assert.rejects(db.execute("INSERT INTO t(email) VALUES ('a@x')"), (e: { code?: string }) => e.code === 'SQLITE_CONSTRAINT_UNIQUE');
  await assert.rejects(db.execute('SELECT * FROM nowhere'), (e: { code?: string }) => e.code === 'SQLITE_ERROR');
  assert.equal((await status()).version, 2);
  assert.deepEqual((await db.execute('SELECT email FROM t ORDER BY id')).rows.map((r) => r.email), ['a@x', 'b@x']);
  const events = (await p.db('web', 'changes', { since: 0 })).json.events;
  assert.deepEqual(events.map((e: { version: number; operation: string; type: string }) => [e.version, e.type]), [[1, 'database.changed'], [2, 'database.changed']]);
  assert.deepEqual(events[1].changes, { rowsAffected: 2, tables: ['t'] });
  db.close();
});

test('{database}/ in the URL is that database; the sandbox applies', async () => {
  const db = client('web/_db/analytics/');
  await db.execute('CREATE TABLE hits(n)');
  assert.equal((await status('analytics')).exists, true);
  assert.deepEqual((await status()).databases, ['analytics', 'main']);
  await assert.rejects(db.execute("ATTACH DATABASE '/tmp/x.db' AS x"), (e: { code?: string }) => /^SQLITE_/.test(e.code ?? ''));
  await assert.rejects(db.execute('DELETE FROM _scopebase_changes'), (e: { code?: string }) => /^SQLITE_/.test(e.code ?? ''));
  db.close();
});

test('another repo\'s secret is refused', async () => {
  const db = client('web/_db/', p.secret('acme', 'api'));
  await assert.rejects(db.execute('SELECT 1'), (e: { code?: string; message?: string }) => /UNAUTHORIZED|401/.test(`${e.code} ${e.message}`));
  db.close();
});

test('an interactive transaction holds its database\'s writes until COMMIT, which is one version', async () => {
  const db = client('web/_db/');
  const other = client('web/_db/');
  const tx = await db.transaction('write');
  await tx.execute("INSERT INTO t(email) VALUES ('tx1@x')");
  await tx.execute("INSERT INTO t(email) VALUES ('tx2@x')");
  let waited = false;
  const write = other.execute("INSERT INTO t(email) VALUES ('later@x')").then(() => (waited = true));
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(waited, false, 'a write of another client waits for the transaction');
  await tx.commit();
  await write;
  assert.equal((await status()).version, 4, 'the transaction, then the write behind it');
  db.close();
  other.close();
});

test('batons: unguessable, refused once used, and refused once the stream idled past DB_STREAM_IDLE_MS (its transaction rolled back)', async () => {
  const first = await pipeline({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'execute', stmt: { sql: "INSERT INTO t(email) VALUES ('idle@x')" } }] });
  assert.equal(first.status, 200, first.text);
  const baton = first.json.baton as string;
  assert.ok(baton.length >= 20, baton);
  const next = await pipeline({ baton, requests: [] });
  assert.equal(next.status, 200, next.text);
  assert.equal((await pipeline({ baton, requests: [] })).status, 400, 'used');
  await new Promise((r) => setTimeout(r, 900));
  const late = await pipeline({ baton: next.json.baton, requests: [{ type: 'execute', stmt: { sql: 'COMMIT' } }] });
  assert.equal(late.status, 400, late.text);
  const rows = await p.db('web', 'query', { sql: "SELECT count(*) FROM t WHERE email = 'idle@x'" });
  assert.deepEqual(rows.json.results[0].rows, [[0]]);
  assert.equal((await p.db('web', 'execute', { sql: "INSERT INTO t(email) VALUES ('after@x')" })).status, 200, 'writes go on');
});

test('SQL errors are Hrana errors whose code is the SQLite code name, one per constraint kind', async () => {
  const setup = await p.db('web', 'execute', { database: 'codes', statements: [
    { sql: 'CREATE TABLE parent(id INTEGER PRIMARY KEY)' },
    { sql: 'CREATE TABLE c(id INTEGER PRIMARY KEY, n NOT NULL, k CHECK (k > 0), u UNIQUE, p REFERENCES parent(id))' },
    { sql: 'INSERT INTO c VALUES (1, 1, 1, 1, NULL)' },
  ] });
  assert.equal(setup.status, 200, setup.text);
  const cases: [string, string][] = [
    ['INSERT INTO c(id, n) VALUES (2, NULL)', 'SQLITE_CONSTRAINT_NOTNULL'],
    ['INSERT INTO c(id, n, k) VALUES (2, 1, 0)', 'SQLITE_CONSTRAINT_CHECK'],
    ['INSERT INTO c(id, n, u) VALUES (2, 1, 1)', 'SQLITE_CONSTRAINT_UNIQUE'],
    ['INSERT INTO c(id, n) VALUES (1, 1)', 'SQLITE_CONSTRAINT_PRIMARYKEY'],
    ['INSERT INTO c(id, n, p) VALUES (2, 1, 99)', 'SQLITE_CONSTRAINT_FOREIGNKEY'],
    ['SELEC 1', 'SQLITE_ERROR'],
  ];
  for (const [sql, code] of cases) {
    for (const path of ['codes/v2/pipeline', 'codes/v3/pipeline']) {
      const r = await pipeline({ baton: null, requests: [{ type: 'execute', stmt: { sql } }, { type: 'close' }] }, path);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.results[0].type, 'error', r.text);
      assert.equal(r.json.results[0].error.code, code, `${path} ${sql}: ${r.text}`);
    }
  }
  assert.equal((await status('codes')).version, 1);
});

test('a database named like a path word (v2, v3, pipeline, query) is that database under {database}/', async () => {
  for (const name of ['v2', 'v3', 'pipeline', 'query']) {
    const db = client(`web/_db/${name}/`);
    await db.execute('CREATE TABLE named(a)');
    db.close();
    const s = await status(name);
    assert.deepEqual([s.exists, s.version, s.tables.map((t: { name: string }) => t.name)], [true, 1, ['named']], name);
  }
  assert.equal((await status()).tables.some((t: { name: string }) => t.name === 'named'), false, 'main untouched');
});
