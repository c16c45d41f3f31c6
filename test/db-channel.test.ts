// The proxy ↔ `serve db` channel (src/db/channel.ts): many requests per connection matched to their replies,
// authenticated upgrades only, malformed frames cut off, and a service restart survived.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { createServer, type Socket } from 'node:net';
import { rmSync } from 'node:fs';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY, type SpawnedProduct } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { PROXY_TOKEN_HEADER, proxyToken } from '../src/db/remote.ts';
import { CHANNEL_PATH, CHANNEL_PROTOCOL } from '../src/db/channel.ts';

const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };
const token = proxyToken(Buffer.from(ROOT_KEY, 'hex'));

/** Asks `serve db` for the channel upgrade; resolves with the status line's code (101) and the socket. */
function upgrade(dbUrl: string, headers: Record<string, string>, path = CHANNEL_PATH): Promise<{ status: number; socket?: Socket }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${dbUrl}${path}`, { headers: { connection: 'Upgrade', upgrade: CHANNEL_PROTOCOL, ...headers }, agent: false });
    req.on('upgrade', (res, socket) => resolve({ status: res.statusCode!, socket }));
    req.on('response', (res) => {
      res.resume();
      resolve({ status: res.statusCode! });
    });
    req.on('error', reject);
    req.end();
  });
}

const freePort = () => new Promise<number>((resolve) => {
  const srv = createServer().listen(0, '127.0.0.1', () => {
    const port = (srv.address() as { port: number }).port;
    srv.close(() => resolve(port));
  });
});

describe('the proxy ↔ serve db channel', () => {
  const dataDir = tempDir();
  let dbPort: number;
  let db: SpawnedProduct;
  let proxy: SpawnedProduct;
  // Bursts of 300 here test the channel, not load shedding: a busy CI machine must not turn them into 503s.
  const startDb = () => spawnProduct(testEnv(dataDir, { PORT: String(dbPort), DB_QUEUE_TARGET_MS: '10000', DB_QUEUE_TIMEOUT_MS: '10000' }), ['serve', 'db']);

  before(async () => {
    dbPort = await freePort();
    db = await startDb();
    proxy = await spawnProduct(testEnv(dataDir, { DB_SERVICE_URL: `http://127.0.0.1:${dbPort}` }), ['serve', 'proxy']);
    const m = await call(proxy.url, 'localhost', '/web/_db/migrate', { body: { migrations: [{ id: '1', sql: 'CREATE TABLE t(x INTEGER PRIMARY KEY, label TEXT)' }] }, headers: auth });
    assert.equal(m.status, 200, m.text);
  });
  after(() => {
    for (const p of [proxy, db]) {
      try { p.killAll(); } catch { /* gone */ }
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('import (SPEC 4.12) and restore (4.11) work through the proxy as its own process too', async () => {
    const dump = "CREATE TABLE imported(x);\nINSERT INTO imported VALUES ('through the channel');\n";
    const r = await call(proxy.url, 'localhost', '/web/_db/import?database=split', { rawBody: dump, headers: { ...auth, 'content-type': 'application/sql' } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.version, 1);
    const w = await call(proxy.url, 'localhost', '/web/_db/execute', { body: { database: 'split', sql: "INSERT INTO imported VALUES ('later')" }, headers: auth });
    assert.equal(w.json.version, 2);
    const back = await call(proxy.url, 'localhost', '/web/_db/restore', { body: { database: 'split', toVersion: 1 }, headers: auth });
    assert.equal(back.status, 200, back.text);
    const q = await call(proxy.url, 'localhost', '/web/_db/query', { body: { database: 'split', sql: 'SELECT x FROM imported' }, headers: auth });
    assert.deepEqual(q.json.results[0].rows, [['through the channel']]);
  });

  test('the libSQL protocol (SPEC 4.10) works through the proxy as its own process too', async () => {
    const res = await call(proxy.url, 'localhost', '/web/_db/analytics/v2/pipeline', {
      body: { baton: null, requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE e(x)' } }, { type: 'execute', stmt: { sql: 'SELECT 1 AS one' } }, { type: 'close' }] }, headers: auth,
    });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json.results.map((r: { type: string }) => r.type), ['ok', 'ok', 'ok']);
    assert.deepEqual(res.json.results[1].response.result.rows, [[{ type: 'integer', value: '1' }]]);
    assert.equal((await call(proxy.url, 'localhost', '/web/_db/v2', { headers: auth })).status, 200);
  });

  test('300 concurrent requests each get their own reply', async () => {
    const ids = Array.from({ length: 300 }, (_, i) => i);
    const replies = await Promise.all(ids.map((i) => call(proxy.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT ? AS n, ? AS label', params: [i, `row ${i}`] }, headers: auth })));
    for (const [i, r] of replies.entries()) {
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json.results[0].rows, [[i, `row ${i}`]]);
    }
    const bad = await call(proxy.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT nope FROM t' }, headers: auth });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'sql_error');
    const unauth = await call(proxy.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT 1' }, headers: { authorization: 'Bearer wrong' } });
    assert.equal(unauth.status, 401);
    assert.match(String(unauth.headers['www-authenticate']), /Bearer/, 'the service\'s headers come through the channel');
  });

  test('an upgrade without the proxy token, with a forged one, or to another path is refused', async () => {
    assert.equal((await upgrade(db.url, {})).status, 403);
    assert.equal((await upgrade(db.url, { [PROXY_TOKEN_HEADER]: proxyToken(Buffer.alloc(32)) })).status, 403);
    assert.equal((await upgrade(db.url, { [PROXY_TOKEN_HEADER]: token }, '/web/_db/query')).status, 404);
    const ok = await upgrade(db.url, { [PROXY_TOKEN_HEADER]: token });
    assert.equal(ok.status, 101);
    ok.socket!.destroy();
  });

  test('a frame over the size limit ends the connection; the service keeps serving', async () => {
    const { status, socket } = await upgrade(db.url, { [PROXY_TOKEN_HEADER]: token });
    assert.equal(status, 101);
    const closed = new Promise<void>((resolve) => socket!.on('close', () => resolve()));
    const frame = Buffer.alloc(12);
    frame.writeUInt32LE(0xfffffff0, 0); // a 4 GiB frame announced
    socket!.write(frame);
    await closed;
    const r = await call(proxy.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT 1' }, headers: auth });
    assert.equal(r.status, 200);
  });

  test('serve db killed mid-request: 503 with the outcome unknown; after a restart the proxy reconnects', async () => {
    const slow = call(proxy.url, 'localhost', '/web/_db/execute', { body: { sql: 'INSERT INTO t(label) SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT x FROM c)' }, headers: auth });
    await new Promise((r) => setTimeout(r, 200));
    db.killAll();
    const r = await slow;
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error.code, 'unavailable');
    assert.equal(r.json.error.details.committed, null);
    assert.equal(r.headers['retry-after'], '1');
    // The other channel connection may not have seen the kill yet, so the message is either one; the status is not.
    const down = await call(proxy.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT 1' }, headers: auth });
    assert.equal(down.status, 503);
    assert.equal(down.json.error.code, 'unavailable');
    db = await startDb();
    const deadline = Date.now() + 5000;
    let back;
    do {
      back = await call(proxy.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT count(*) FROM t' }, headers: auth });
    } while (back.status !== 200 && Date.now() < deadline && (await new Promise((res) => setTimeout(res, 100)), true));
    assert.equal(back.status, 200, back.text);
    assert.deepEqual(back.json.results[0].rows, [[0]], 'the killed write did not commit');
  });
});
