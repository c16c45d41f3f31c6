// Mirrors against the real product: events from real writes, the reference mirror's replicas, restarts and kill -9.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { Webhook } from 'standardwebhooks';
import { call, ROOT_KEY, spawnProduct, startProduct, tempDir, testEnv, type Product } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { freePort } from './helpers/ports.ts';
import { newSecret, range, Receiver, waitFor } from './helpers/mirror.ts';
import { runCli } from './helpers/cli.ts';
import fc from 'fast-check';

const mirrorsEnv = (list: { name: string; url: string; secret: string }[]) => JSON.stringify(list);

test('real writes: one signed event per changing request, none for a no-op, migrations carry their SQL, status shows delivery', async (t) => {
  const receiver = await new Receiver().start();
  const secret = newSecret();
  const p = await startProduct({ DB_MIRRORS: mirrorsEnv([{ name: 'replica', url: receiver.url, secret }]) });
  t.after(async () => {
    await p.close();
    await receiver.stop();
  });
  const migration = { id: '0001_init', sql: 'CREATE TABLE todos (id INTEGER PRIMARY KEY, title TEXT NOT NULL)' };
  assert.equal((await p.db('web', 'migrate', { migrations: [migration] })).status, 200);
  assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO todos (title) VALUES (?), (?)', params: ['a', 'b'] })).json.version, 2);
  assert.equal((await p.db('web', 'execute', { sql: 'UPDATE todos SET title = 1 WHERE 0' })).json.version, 2); // no-op
  assert.equal((await p.db('web', 'migrate', { migrations: [migration] })).json.applied.length, 0); // nothing new
  assert.equal((await p.db('web', 'execute', { sql: 'DELETE FROM todos WHERE id = 1' })).json.version, 3);
  await waitFor(() => receiver.acked.length === 3, 5000, 'three events');
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(receiver.all.length, 3, 'no event for a no-op');
  const wh = new Webhook(secret);
  const events = receiver.acked.map((r) => wh.verify(r.body, r.headers as Record<string, string>) as Record<string, unknown>);
  assert.deepEqual(events.map((e) => e.version), [1, 2, 3]);
  assert.deepEqual(events.map((e) => e.type), ['database.migrated', 'database.changed', 'database.changed']);
  assert.deepEqual(events[0]!.migrations, [migration]);
  assert.deepEqual(events[1]!.changes, { rowsAffected: 2, tables: ['todos'] });
  assert.equal(typeof events[1]!.changeset, 'string');
  for (const [i, e] of events.entries()) {
    assert.equal(receiver.acked[i]!.headers['webhook-id'], e.id);
    assert.equal(e.previousVersion, (e.version as number) - 1);
    assert.equal(e.org, 'acme');
  }
  const status = await p.db('web', 'status', {});
  assert.deepEqual(status.json.mirrors, [{ name: 'replica', deliveredVersion: 3, pendingEvents: 0, lastError: null, stalled: false }]);
  // The CLI's table: no last error is a dash, not SQL's NULL.
  const cli = await runCli(['status', 'acme/web', '--url', p.url], { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, BASE_DOMAIN: p.config.baseDomain });
  assert.equal(cli.code, 0, cli.stderr);
  assert.match(cli.stdout, /^mirror\s+delivered\s+pending\s+last error\n[- ]+\nreplica\s+3\s+0\s+-$/m);
});

test('a mirror down while writes go on: stalled in status and metrics, then every event in order once back; the log kept them all', async (t) => {
  const receiver = await new Receiver().start();
  const port = receiver.port;
  await receiver.stop();
  const p = await startProduct({ DB_MIRRORS: mirrorsEnv([{ name: 'replica', url: `http://127.0.0.1:${port}/hook`, secret: newSecret() }]), DB_MIRROR_MAX_BACKOFF_MS: '100', DB_MIRROR_STALL_AFTER_MS: '300' });
  t.after(async () => {
    await p.close();
    await receiver.stop();
  });
  await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' });
  for (let i = 0; i < 20; i++) await p.db('web', 'execute', { sql: 'INSERT INTO t DEFAULT VALUES' });
  await waitFor(async () => (await p.db('web', 'status', {})).json.mirrors?.[0]?.stalled === true, 5000, 'stalled');
  const status = (await p.db('web', 'status', {})).json.mirrors[0];
  assert.equal(status.pendingEvents, 21);
  assert.match(status.lastError, /ECONNREFUSED/);
  const metricsText = await (await fetch(`${p.running.adminUrl}/metrics`)).text();
  assert.match(metricsText, /scopebase_mirror_stalled\{mirror="replica"\} 1/);
  assert.match(metricsText, /scopebase_mirror_pending_events\{mirror="replica"\} 21/);
  await receiver.start(port);
  await waitFor(() => receiver.versions().includes(21), 5000, 'catch up');
  assert.deepEqual(receiver.versions(), range(1, 21));
  const changes = await p.db('web', 'changes', { since: 0 });
  assert.equal(changes.status, 200);
  assert.equal(changes.json.events.length, 21);
});

test('a mirror URL with user information is sent its path and query exactly, the user and password as Basic credentials', async (t) => {
  const receiver = await new Receiver().start();
  const secret = newSecret();
  // Percent-encoded as a URL must carry them; a stray "%" is taken as typed.
  const url = `http://hook%40user:p%3Ass%word@127.0.0.1:${receiver.port}/hook/?token=abc`;
  const p = await startProduct({ DB_MIRRORS: mirrorsEnv([{ name: 'basic', url, secret }]) });
  t.after(async () => {
    await p.close();
    await receiver.stop();
  });
  await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' });
  await waitFor(() => receiver.acked.length === 1, 5000, 'the event');
  const got = receiver.acked[0]!;
  assert.equal(got.url, '/hook/?token=abc');
  assert.equal(got.headers.authorization, `Basic ${Buffer.from('hook@user:p:ss%word').toString('base64')}`);
  new Webhook(secret).verify(got.body, got.headers as Record<string, string>);
  // Errors never show the URL, whose credentials they would leak.
  receiver.behaviour = (_req, res) => void res.writeHead(401).end('who are you');
  await p.db('web', 'execute', { sql: 'INSERT INTO t DEFAULT VALUES' });
  await waitFor(async () => (await p.db('web', 'status', {})).json.mirrors[0].lastError !== null, 5000, 'a failure');
  assert.doesNotMatch(JSON.stringify((await p.db('web', 'status', {})).json), /p%3Ass|hook%40user|hook@user/);
});

test('restart with pending events and kill -9 mid-delivery: nothing lost, order kept', async (t) => {
  const receiver = await new Receiver().start();
  const dataDir = tempDir();
  t.after(async () => {
    await receiver.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  receiver.behaviour = (_req, res) => void res.writeHead(503).end();
  const env = { ...testEnv(dataDir), DB_MIRRORS: mirrorsEnv([{ name: 'replica', url: receiver.url, secret: newSecret() }]), DB_MIRROR_MAX_BACKOFF_MS: '50' };
  const first = await spawnProduct(env);
  const host = `acme.localhost:${new URL(first.url).port}`;
  const secret = repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web');
  const exec = (url: string, sql: string) => call(url, 'localhost', '/web/_db/execute', { body: { sql }, headers: { authorization: `Bearer ${secret}`, host } });
  assert.equal((await exec(first.url, 'CREATE TABLE t (id INTEGER PRIMARY KEY)')).status, 200);
  for (let i = 0; i < 5; i++) assert.equal((await exec(first.url, 'INSERT INTO t DEFAULT VALUES')).status, 200);
  // The mirror starts accepting, slowly: kill -9 while deliveries are in flight.
  receiver.behaviour = (_req, res) => void setTimeout(() => res.writeHead(200).end(), 30);
  await waitFor(() => receiver.acked.length >= 2, 5000, 'some deliveries');
  first.child.kill('SIGKILL');
  await new Promise((r) => first.child.once('exit', r));
  const second = await spawnProduct(env);
  t.after(() => void second.child.kill('SIGKILL'));
  await waitFor(() => receiver.versions().includes(6), 10_000, 'all delivered after restart');
  assert.deepEqual([...new Set(receiver.versions())], range(1, 6));
  // Across the crash, a version may be sent again (at least once), but never before its predecessor was acknowledged.
  const acked = receiver.versions();
  for (let i = 1; i < acked.length; i++) assert.ok(acked[i]! <= acked[i - 1]! + 1, `order: ${acked}`);
});

test('one busy database, two mirrors: every event once, in order, to each; counted in metrics; saved acknowledgements survive a restart', async (t) => {
  const a = await new Receiver().start();
  const b = await new Receiver().start();
  const dataDir = tempDir();
  const env = { DATA_DIR: dataDir, DB_MIRRORS: mirrorsEnv([{ name: 'busy-a', url: a.url, secret: newSecret() }, { name: 'busy-b', url: b.url, secret: newSecret() }]) };
  let p = await startProduct(env);
  t.after(async () => {
    await p.close();
    await a.stop();
    await b.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' });
  // 16 writers at once: group commits of several events, and more events than one delivery turn holds.
  const writes = 400;
  let next = 0;
  await Promise.all(Array.from({ length: 16 }, async () => {
    while (next++ < writes) assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO t DEFAULT VALUES' })).status, 200);
  }));
  const last = writes + 1;
  await waitFor(() => a.versions().length >= last && b.versions().length >= last, 20_000, 'every event at both mirrors');
  assert.deepEqual(a.versions(), range(1, last));
  assert.deepEqual(b.versions(), range(1, last));
  await waitFor(async () => (await p.db('web', 'status', {})).json.mirrors.every((m: { deliveredVersion: number }) => m.deliveredVersion === last), 2000, 'status caught up');
  const metricsText = await (await fetch(`${p.running.adminUrl}/metrics`)).text();
  assert.match(metricsText, new RegExp(`scopebase_mirror_delivered_events_total\\{mirror="busy-a"\\} ${last}\\b`));
  assert.match(metricsText, new RegExp(`scopebase_mirror_delivery_lag_seconds_count\\{mirror="busy-b"\\} ${last}\\b`));

  await p.close();
  p = await startProduct(env);
  const status = (await p.db('web', 'status', {})).json.mirrors;
  assert.deepEqual(status.map((m: { deliveredVersion: number; pendingEvents: number }) => [m.deliveredVersion, m.pendingEvents]), [[last, 0], [last, 0]]);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(a.all.length + b.all.length, 2 * last, 'nothing acknowledged was sent again');
});

async function withReferenceMirror(t: TestContext, extra: Record<string, string> = {}): Promise<{ p: Product; secret: string; mirrorUrl: string }> {
  const secret = newSecret();
  const port = await freePort();
  const p = await startProduct({
    DB_MIRRORS: mirrorsEnv([{ name: 'reference', url: `http://127.0.0.1:${port}/hook`, secret }]), MIRROR_PORT: String(port), MIRROR_SECRET: secret,
    DB_MIRROR_MAX_BACKOFF_MS: '100', ...extra,
  });
  t.after(() => p.close());
  return { p, secret, mirrorUrl: p.running.mirrorUrl! };
}

function mirrorQuery(p: Product, mirrorUrl: string, body: unknown, secret: string | null = p.secret('acme', 'web')) {
  return call(mirrorUrl, p.config.baseDomain, '/web/_db/query', { body, headers: secret === null ? {} : { authorization: `Bearer ${secret}` } });
}

test('reference mirror: a write through the proxy is readable from the mirror with minVersion in under a second', async (t) => {
  const { p, mirrorUrl } = await withReferenceMirror(t);
  await p.db('web', 'migrate', { migrations: [{ id: '0001', sql: 'CREATE TABLE todos (id INTEGER PRIMARY KEY, title TEXT, big INTEGER, data BLOB)' }] });
  await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1', minVersion: 1 }); // the replica exists (first bootstrap)
  const started = Date.now();
  const write = await p.db('web', 'execute', { sql: 'INSERT INTO todos (title, big, data) VALUES (?, ?, ?)', params: ['write spec', { $bigint: '9007199254740993' }, { $blob: 'AAEC' }] });
  const read = await mirrorQuery(p, mirrorUrl, { sql: 'SELECT id, title, big, data FROM todos', minVersion: write.json.version, rows: 'objects' });
  const elapsed = Date.now() - started;
  assert.equal(read.status, 200, read.text);
  assert.deepEqual(read.json, { results: [{ columns: ['id', 'title', 'big', 'data'], rows: [{ id: 1, title: 'write spec', big: { $bigint: '9007199254740993' }, data: { $blob: 'AAEC' } }] }], version: write.json.version });
  assert.ok(elapsed < 1000, `took ${elapsed} ms`);
  // Same sandbox and errors as the primary.
  assert.equal((await mirrorQuery(p, mirrorUrl, { sql: 'DELETE FROM todos' })).json.error.code, 'read_only');
  assert.equal((await mirrorQuery(p, mirrorUrl, { sql: "ATTACH 'x' AS y" })).json.error.code, 'not_allowed');
  assert.equal((await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1' }, null)).status, 401);
  assert.equal((await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1' }, p.secret('acme', 'other'))).status, 401);
  assert.equal((await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1', database: 'Bad' })).json.error.code, 'invalid_name');
  assert.equal((await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1', database: 'nope' })).json.error.code, 'database_not_found');
  assert.equal((await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1', minVersion: 'x' })).json.error.code, 'invalid_request');
});

test('reference mirror: DDL in execute and triggers stay exact; minVersion past the end answers 503', async (t) => {
  const { p, mirrorUrl } = await withReferenceMirror(t);
  await p.db('web', 'execute', { statements: [
    { sql: 'CREATE TABLE a (id INTEGER PRIMARY KEY, n INTEGER)' },
    { sql: 'CREATE TABLE log (id INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT)' },
    { sql: "CREATE TRIGGER a_ins AFTER INSERT ON a BEGIN INSERT INTO log (what) VALUES ('ins ' || new.id); END" },
    { sql: 'INSERT INTO a (n) VALUES (1)' },
  ] });
  await p.db('web', 'execute', { sql: 'INSERT INTO a (n) VALUES (2), (3)' });
  const alter = await p.db('web', 'execute', { statements: [{ sql: 'ALTER TABLE a ADD COLUMN label TEXT' }, { sql: "UPDATE a SET label = 'x' WHERE id = 2" }] });
  const last = await p.db('web', 'execute', { sql: 'INSERT INTO a (n, label) VALUES (4, ?)', params: ['y'] });
  assert.equal(alter.status, 200);
  const read = await mirrorQuery(p, mirrorUrl, { statements: [{ sql: 'SELECT id, n, label FROM a ORDER BY id' }, { sql: 'SELECT what FROM log ORDER BY id' }], minVersion: last.json.version });
  assert.equal(read.status, 200, read.text);
  assert.deepEqual(read.json.results[0].rows, [[1, 1, null], [2, 2, 'x'], [3, 3, null], [4, 4, 'y']]);
  assert.deepEqual(read.json.results[1].rows, [['ins 1'], ['ins 2'], ['ins 3'], ['ins 4']]);
  const started = Date.now();
  const late = await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1', minVersion: last.json.version + 5 });
  assert.equal(late.status, 503);
  assert.equal(late.headers['retry-after'], '1');
  assert.ok(Date.now() - started >= 4500);
});

test('reference mirror /hook: bad or stale signatures are refused; duplicates and early events apply once, in order; a conflict re-bootstraps', async (t) => {
  const { p, secret, mirrorUrl } = await withReferenceMirror(t);
  const receiver = await new Receiver().start();
  t.after(() => receiver.stop());
  // Capture real events to replay by hand.
  await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)' });
  const v1 = await p.db('web', 'execute', { sql: "INSERT INTO t VALUES (1, 'a')" });
  await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1', minVersion: v1.json.version });
  const changes = await p.db('web', 'changes', { since: 0 });
  const events = changes.json.events as { id: string; version: number }[];
  const wh = new Webhook(secret);
  const post = (event: unknown, opts: { secret?: string; at?: Date; id?: string } = {}) => {
    const body = JSON.stringify(event);
    const at = opts.at ?? new Date();
    const id = opts.id ?? (event as { id: string }).id;
    const signer = opts.secret ? new Webhook(opts.secret) : wh;
    return call(mirrorUrl, 'localhost', '/hook', { rawBody: body, headers: { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': signer.sign(id, at, body) } });
  };
  // Forged: a changeset deleting the row, signed with the wrong secret or five minutes stale: refused, nothing applied.
  const forged = { ...events[1]!, version: 3, previousVersion: 2 };
  assert.equal((await post(forged, { secret: newSecret() })).status, 401);
  assert.equal((await post(forged, { at: new Date(Date.now() - 6 * 60_000) })).status, 401);
  const unsigned = await call(mirrorUrl, 'localhost', '/hook', { body: forged });
  assert.equal(unsigned.status, 401);
  assert.equal(unsigned.json.error.code, 'unauthorized');
  // Signed right but not JSON: a bad request, not a wrong secret (it was 401 "signature refused").
  const at = new Date();
  const notJson = await call(mirrorUrl, 'localhost', '/hook', { rawBody: '{nope', headers: { 'content-type': 'application/json', 'webhook-id': 'evt_x', 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': wh.sign('evt_x', at, '{nope') } });
  assert.equal(notJson.status, 400, notJson.text);
  assert.equal(notJson.json.error.code, 'invalid_request');
  // Replays of what was applied: duplicates, applied once.
  const dup = await post(events[1]);
  assert.equal(dup.status, 200);
  assert.equal(dup.json.outcome, 'duplicate');
  let rows = await mirrorQuery(p, mirrorUrl, { sql: 'SELECT * FROM t' });
  assert.deepEqual(rows.json.results[0].rows, [[1, 'a']]);
  assert.equal(rows.json.version, 2);
  // A conflicting changeset (the replica diverged behind our back) re-bootstraps instead of diverging.
  const w3 = await p.db('web', 'execute', { sql: "UPDATE t SET v = 'b' WHERE id = 1" });
  await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1', minVersion: w3.json.version });
  const w4 = await p.db('web', 'execute', { sql: "INSERT INTO t VALUES (2, 'c')" });
  const all = (await p.db('web', 'changes', { since: 0 })).json.events as { id: string; version: number; changeset: string }[];
  await mirrorQuery(p, mirrorUrl, { sql: 'SELECT 1', minVersion: w4.json.version });
  // Replay event 3 as if it were event 5: its old value ('a') no longer matches: conflict → snapshot.
  const conflicting = { ...all[2]!, id: 'evt_conflict', version: 5, previousVersion: 4 };
  const healed = await post(conflicting);
  assert.equal(healed.status, 503, healed.text); // the snapshot is only at 4: not acknowledged, so the sender would retry
  rows = await mirrorQuery(p, mirrorUrl, { sql: 'SELECT * FROM t ORDER BY id' });
  assert.deepEqual(rows.json.results[0].rows, [[1, 'b'], [2, 'c']]);
  // An early event (a gap) heals from the snapshot; its predecessors then arrive as duplicates.
  const w5 = await p.db('web', 'execute', { sql: "INSERT INTO t VALUES (3, 'd')" });
  const w6 = await p.db('web', 'execute', { sql: "INSERT INTO t VALUES (4, 'e')" });
  const read = await mirrorQuery(p, mirrorUrl, { sql: 'SELECT count(*) FROM t', minVersion: w6.json.version });
  assert.deepEqual(read.json.results[0].rows, [[4]]);
  assert.ok(w5.json.version < w6.json.version);
});

test('serve mirror runs alone; without MIRROR_SECRET it refuses to start', async () => {
  const source = await startProduct();
  const p = await startProduct({ MIRROR_PORT: '0', MIRROR_SECRET: newSecret(), MIRROR_SOURCE_URL: source.url }, 'mirror');
  try {
    const res = await p.call('/web/_db/query', { body: { sql: 'select 1' }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
    assert.equal(res.json.error.code, 'database_not_found');
    assert.equal((await p.call('/hook', { body: {} })).status, 401);
  } finally {
    await p.close();
    await source.close();
  }
  await assert.rejects(startProduct({ MIRROR_PORT: '0' }, 'mirror'), /MIRROR_SECRET/);
});

test('reference mirror: random writes over every table shape reach the replica exactly, compared row by row after each one', async (t) => {
  const { p, mirrorUrl } = await withReferenceMirror(t);
  const shapes: Record<string, string> = {
    nokey: 'CREATE TABLE nokey(a, b)', // a rowid table without a declared key: the session extension records nothing
    rowid: 'CREATE TABLE rowid(id INTEGER PRIMARY KEY, v)',
    composite: 'CREATE TABLE composite(a INTEGER, b TEXT, v, PRIMARY KEY (a, b))',
    norowid: 'CREATE TABLE norowid(k TEXT PRIMARY KEY, v) WITHOUT ROWID',
    nullable: 'CREATE TABLE nullable(k TEXT PRIMARY KEY, v)', // its changesets show rows only while no key is NULL
    audit: 'CREATE TABLE audit(n, at DEFAULT 0)', // written by a trigger, no key either
  };
  const setup = await p.db('web', 'execute', { statements: [...Object.values(shapes).map((sql) => ({ sql })), { sql: 'CREATE TRIGGER log AFTER INSERT ON rowid BEGIN INSERT INTO audit VALUES (new.id); END' }] });
  assert.equal(setup.status, 200, setup.text);
  const write = fc.oneof(
    fc.tuple(fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 5 })).map(([a, b]) => ({ sql: 'INSERT INTO nokey VALUES (?, ?)', params: [a, b] })),
    fc.integer({ min: 0, max: 5 }).map((a) => ({ sql: 'UPDATE nokey SET b = b + 1 WHERE a = ?', params: [a] })),
    fc.integer({ min: 0, max: 5 }).map((a) => ({ sql: 'DELETE FROM nokey WHERE a = ?', params: [a] })),
    fc.integer({ min: 0, max: 5 }).map((v) => ({ sql: 'INSERT INTO rowid(v) VALUES (?)', params: [v] })),
    fc.tuple(fc.integer({ min: 0, max: 3 }), fc.constantFrom('x', 'y'), fc.integer()).map(([a, b, v]) => ({ sql: 'INSERT OR REPLACE INTO composite VALUES (?, ?, ?)', params: [a, b, v] })),
    fc.tuple(fc.constantFrom('k1', 'k2', 'k3'), fc.string({ maxLength: 5 })).map(([k, v]) => ({ sql: 'INSERT OR REPLACE INTO norowid VALUES (?, ?)', params: [k, v] })),
    fc.constantFrom('k1', 'k2').map((k) => ({ sql: 'DELETE FROM norowid WHERE k = ?', params: [k] })),
    fc.tuple(fc.constantFrom('n1', 'n2', null), fc.integer()).map(([k, v]) => ({ sql: 'INSERT OR REPLACE INTO nullable VALUES (?, ?)', params: [k, v] })),
    fc.constantFrom('n1', 'n2').map((k) => ({ sql: 'UPDATE nullable SET k = NULL WHERE k = ?', params: [k] })),
    fc.constantFrom('n1', 'n3').map((k) => ({ sql: 'UPDATE OR REPLACE nullable SET k = ? WHERE rowid = (SELECT min(rowid) FROM nullable WHERE k IS NULL)', params: [k] })),
    fc.constant({ sql: 'DELETE FROM nullable WHERE k IS NULL' }),
    fc.stringMatching(/^[a-z]{1,6}$/).map((name) => ({ sql: `ALTER TABLE rowid ADD COLUMN extra_${name}` })),
  );
  const dump = async (query: (body: unknown) => Promise<{ text: string; json: { results: { rows: unknown[][] }[] } }>, minVersion?: number) => {
    const out: Record<string, unknown> = {};
    for (const table of Object.keys(shapes)) {
      const r = await query({ sql: `SELECT * FROM ${table} ORDER BY 1, 2`, ...(minVersion === undefined ? {} : { minVersion }) });
      assert.ok(r.json.results, r.text);
      out[table] = r.json.results[0].rows;
    }
    return out;
  };
  await fc.assert(
    fc.asyncProperty(fc.array(write, { minLength: 1, maxLength: 3 }), async (statements) => {
      const w = await p.db('web', 'execute', { statements });
      if (w.status !== 200) return; // e.g. a duplicate column name: nothing changed
      const primary = await dump((body) => p.db('web', 'query', body));
      const replica = await dump((body) => mirrorQuery(p, mirrorUrl, body), w.json.version);
      assert.deepEqual(replica, primary, `after ${JSON.stringify(statements)} (version ${w.json.version})`);
    }),
    { numRuns: 25 },
  );
});

test('reference mirror: a restore and an import reach the replica (it takes a snapshot); the events say what happened', async (t) => {
  const { p, mirrorUrl } = await withReferenceMirror(t);
  await p.db('web', 'execute', { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)' });
  const one = await p.db('web', 'execute', { sql: "INSERT INTO t(v) VALUES ('one')" });
  await p.db('web', 'execute', { sql: "INSERT INTO t(v) VALUES ('two')" });
  const restored = await p.db('web', 'restore', { toVersion: one.json.version });
  assert.equal(restored.status, 200, restored.text);
  const read = await mirrorQuery(p, mirrorUrl, { sql: 'SELECT v FROM t', minVersion: restored.json.version });
  assert.equal(read.status, 200, read.text);
  assert.deepEqual(read.json.results[0].rows, [['one']]);
  const events = (await p.db('web', 'changes', { since: restored.json.version - 1 })).json.events;
  assert.deepEqual({ type: events[0].type, operation: events[0].operation, restoredVersion: events[0].restoredVersion, changeset: events[0].changeset },
    { type: 'database.restored', operation: 'restore', restoredVersion: one.json.version, changeset: null });

  const imported = await call(p.url, p.config.baseDomain, '/web/_db/import?mode=replace', {
    rawBody: "CREATE TABLE other(x);\nINSERT INTO other VALUES ('imported');\n", headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/sql' },
  });
  assert.equal(imported.status, 200, imported.text);
  const after = await mirrorQuery(p, mirrorUrl, { sql: 'SELECT x FROM other', minVersion: imported.json.version });
  assert.equal(after.status, 200, after.text);
  assert.deepEqual(after.json.results[0].rows, [['imported']]);
  const gone = await mirrorQuery(p, mirrorUrl, { sql: 'SELECT v FROM t', minVersion: imported.json.version });
  assert.match(gone.json.error.message, /no such table/);
});
