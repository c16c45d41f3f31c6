// SPEC 5 from the outside: what two real mirror endpoints receive from the product: one signed Standard Webhooks POST
// per change and mirror, the event's fields for execute and migrate, version order, nothing for a request that changed
// nothing, and redelivery after a failure. (Backoff, restarts, outages: mirror-delivery.test.ts, mirror-outage.test.ts.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { rmSync } from 'node:fs';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { newSecret, Receiver, waitFor, type Received } from './helpers/mirror.ts';

let p: Product;
const a = new Receiver();
const b = new Receiver();
const secrets = { a: newSecret(), b: newSecret() };
before(async () => {
  await a.start();
  await b.start();
  p = await startProduct({ DB_MIRRORS: JSON.stringify([{ name: 'a', url: a.url, secret: secrets.a }, { name: 'b', url: b.url, secret: secrets.b }]) });
});
after(async () => {
  await p.close();
  await a.stop();
  await b.stop();
});

function verify(r: Received, secret: string): void {
  const id = String(r.headers['webhook-id']);
  const ts = String(r.headers['webhook-timestamp']);
  assert.equal(id, r.event.id);
  assert.match(id, /^evt_/);
  assert.ok(Math.abs(Number(ts) - Date.now() / 1000) < 60, `unix seconds: ${ts}`);
  const mac = createHmac('sha256', Buffer.from(secret.slice('whsec_'.length), 'base64')).update(`${id}.${ts}.${r.body}`).digest('base64');
  assert.ok(String(r.headers['webhook-signature']).split(' ').includes(`v1,${mac}`), String(r.headers['webhook-signature']));
}

test('an execute that changed a database: one signed POST to each mirror with the event of SPEC 5', async () => {
  assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, t)' })).status, 200);
  const r = await p.db('web', 'execute', { statements: [{ sql: "INSERT INTO todos(t) VALUES ('x'), ('y')" }, { sql: 'SELECT 1' }] });
  assert.equal(r.status, 200, r.text);
  await waitFor(() => a.versions().length >= 2 && b.versions().length >= 2, 10_000, 'both delivered');
  for (const [rx, secret] of [[a, secrets.a], [b, secrets.b]] as const) {
    assert.deepEqual(rx.versions(), [1, 2]);
    const got = rx.acked[1]!;
    assert.equal(got.headers['content-type']?.split(';')[0], 'application/json');
    verify(got, secret);
    const e = got.event as unknown as Record<string, unknown>;
    assert.deepEqual(Object.keys(e).sort(), ['changes', 'changeset', 'committedAt', 'database', 'id', 'operation', 'org', 'previousVersion', 'repo', 'type', 'version']);
    assert.deepEqual([e.type, e.org, e.repo, e.database, e.version, e.previousVersion, e.operation], ['database.changed', 'acme', 'web', 'main', 2, 1, 'execute']);
    assert.deepEqual(e.changes, { rowsAffected: 2, tables: ['todos'] });
    assert.equal(new Date(String(e.committedAt)).toISOString(), e.committedAt);
    assert.ok(e.changeset === null || (typeof e.changeset === 'string' && Buffer.from(e.changeset, 'base64').length > 0));
  }
  assert.equal(a.acked[1]!.event.id, b.acked[1]!.event.id, 'the same event to every mirror');
  const stored = (await p.db('web', 'changes', { since: 1 })).json.events[0];
  assert.deepEqual(stored, a.acked[1]!.event, 'the notification /_db/changes serves is the one delivered');
});

test('a migrate sends database.migrated with the applied migrations; a request that changed nothing sends nothing', async () => {
  const migrations = [{ id: '0001_tags', sql: 'CREATE TABLE tags(n);' }];
  assert.equal((await p.db('web', 'migrate', { migrations })).status, 200);
  assert.equal((await p.db('web', 'migrate', { migrations })).status, 200);
  assert.equal((await p.db('web', 'execute', { sql: 'DELETE FROM todos WHERE 0' })).status, 200);
  assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO tags VALUES (1)' })).status, 200);
  // Both: b still delivering version 4 when the next test began made its first tries 4, not 5 (a loaded CI host).
  await waitFor(() => a.versions().length >= 4 && b.versions().length >= 4, 10_000, 'delivered');
  assert.deepEqual(a.versions(), [1, 2, 3, 4]);
  const m = a.acked[2]!.event as unknown as Record<string, unknown>;
  assert.deepEqual([m.type, m.operation, m.version, m.previousVersion], ['database.migrated', 'migrate', 3, 2]);
  assert.deepEqual(m.migrations, migrations);
  verify(a.acked[2]!, secrets.a);
});

test('a mirror that fails gets the same event again, and nothing later before it is acknowledged', async () => {
  let refusals = 2;
  b.behaviour = (_req, res) => {
    if (refusals-- > 0) res.writeHead(503).end();
    else res.writeHead(200).end();
  };
  const before = b.all.length;
  for (let i = 0; i < 3; i++) assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO tags VALUES (?)', params: [i] })).status, 200);
  await waitFor(() => b.versions().includes(7) && a.versions().includes(7), 30_000, 'both caught up');
  const tries = b.all.slice(before).map((r) => r.event.version);
  assert.deepEqual(tries, [5, 5, 5, 6, 7], 'v5 retried until acknowledged, then 6 and 7');
  assert.equal(new Set(b.all.slice(before, before + 3).map((r) => r.event.id)).size, 1);
  assert.deepEqual(a.versions(), [1, 2, 3, 4, 5, 6, 7], 'the other mirror was not held back');
});

test('kept across a restart and never lost while a mirror is down: every version arrives once it is back, in order', async () => {
  const dataDir = tempDir();
  const down = new Receiver();
  await down.start();
  const port = down.port;
  await down.stop(); // connection refused from now on
  const mirrors = JSON.stringify([{ name: 'late', url: `http://127.0.0.1:${port}/hook`, secret: secrets.a }]);
  const first = await startProduct({ DATA_DIR: dataDir, DB_MIRRORS: mirrors });
  for (const sql of ['CREATE TABLE t(a)', 'INSERT INTO t VALUES (1)', 'INSERT INTO t VALUES (2)']) assert.equal((await first.db('web', 'execute', { sql })).status, 200);
  await first.close();
  const back = new Receiver();
  await back.start(port);
  const second = await startProduct({ DATA_DIR: dataDir, DB_MIRRORS: mirrors });
  try {
    assert.equal((await second.db('web', 'execute', { sql: 'INSERT INTO t VALUES (3)' })).status, 200);
    await waitFor(() => back.versions().includes(4), 30_000, 'caught up after the restart');
    assert.deepEqual([...new Set(back.versions())], [1, 2, 3, 4]);
    for (const r of back.acked) verify(r, secrets.a);
  } finally {
    await second.close();
    await back.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
