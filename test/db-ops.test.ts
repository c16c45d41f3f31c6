// SPEC 4.9 and 9 for the database service: running parts alone, admin endpoints, SIGTERM, configuration,
// development keys, snapshots and change-log retention.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:net';
import { request } from 'undici';
import { call, spawnProduct, startProduct, tempDir, testEnv, ROOT_KEY } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { proxyToken } from '../src/db/remote.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const secret = repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web');
const auth = { authorization: `Bearer ${secret}` };
const freePort = async () => {
  const { createServer } = await import('node:net');
  return new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
};

describe('parts alone (serve db + serve proxy)', () => {
  test('the proxy forwards to the database service in its own process; the service answers only the proxy', async () => {
    const dataDir = tempDir();
    const dbPort = await freePort();
    const db = await spawnProduct(testEnv(dataDir, { PORT: String(dbPort) }), ['serve', 'db']);
    const proxy = await spawnProduct(testEnv(dataDir, { DB_SERVICE_URL: `http://127.0.0.1:${dbPort}` }), ['serve', 'proxy']);
    try {
      const m = await call(proxy.url, 'localhost', '/web/_db/migrate', { body: { migrations: [{ id: '1', sql: 'CREATE TABLE t(x)' }] }, headers: auth });
      assert.equal(m.status, 200, m.text);
      await call(proxy.url, 'localhost', '/web/_db/execute', { body: { sql: 'INSERT INTO t VALUES (42)' }, headers: auth });
      const q = await call(proxy.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT x FROM t' }, headers: auth });
      assert.deepEqual(q.json.results[0].rows, [[42]]);
      const snap = await call(proxy.url, 'localhost', '/web/_db/snapshot', { body: {}, headers: auth });
      assert.equal(snap.status, 200);
      assert.equal(snap.headers['x-db-version'], '2');
      // Straight to the service, without the proxy's token: refused even with the right secret and org header.
      const direct = await call(db.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT 1' }, headers: { ...auth, 'x-scopebase-org': 'acme' } });
      assert.equal(direct.status, 403);
      const forged = await call(db.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT 1' }, headers: { ...auth, 'x-scopebase-org': 'acme', 'x-scopebase-proxy-token': proxyToken(Buffer.alloc(32)) } });
      assert.equal(forged.status, 403);
    } finally {
      proxy.killAll();
      db.killAll();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('under NODE_ENV=production, serve db, serve mirror and a proxy in front of serve account need no sign-in provider nor credential keys', async () => {
    const dataDir = tempDir();
    // Production settings of a part that never signs anyone in: the root key alone (what the mirror needs besides).
    const env = { ...testEnv(dataDir), NODE_ENV: 'production', ACCOUNT_ENCRYPTION_KEYS: '' };
    const started: { killAll(): void }[] = [];
    try {
      const db = await spawnProduct({ ...env, PORT: String(await freePort()) }, ['serve', 'db']);
      started.push(db);
      const proxy = await spawnProduct({ ...env, DB_SERVICE_URL: db.url, ACCOUNT_SERVICE_URL: 'http://127.0.0.1:9' }, ['serve', 'proxy']);
      started.push(proxy);
      const mirror = await spawnProduct({ ...env, MIRROR_PORT: '0', MIRROR_SECRET: 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0', MIRROR_SOURCE_URL: proxy.url }, ['serve', 'mirror']);
      started.push(mirror);
      const s = await call(proxy.url, 'localhost', '/web/_db/status', { body: {}, headers: auth });
      assert.equal(s.status, 200, s.text);
      assert.throws(() => readFileSync(join(dataDir, 'account-encryption.key')), /ENOENT/, 'no key is generated where nothing uses it');
      // Where sign-in runs (start, serve account, a proxy without ACCOUNT_SERVICE_URL), production still requires them.
      for (const args of [['start'], ['serve', 'account'], ['serve', 'proxy']]) {
        const r = spawnSync(process.execPath, ['src/cli/main.ts', ...args], { env: { ...process.env, ...env, DB_SERVICE_URL: db.url }, encoding: 'utf8', timeout: 20_000 });
        assert.equal(r.status, 78, `${args.join(' ')}: ${r.stderr}`);
        assert.match(r.stderr, /needs 2 settings that are missing: ACCOUNT_OIDC_ISSUER .*; ACCOUNT_ENCRYPTION_KEYS/);
      }
    } finally {
      for (const p of started) p.killAll();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('operations (9)', () => {
  test('healthz, readyz and Prometheus metrics on ADMIN_PORT', async () => {
    const p = await startProduct();
    try {
      await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
      await p.db('web', 'query', { sql: 'SELECT 1' }, { secret: 'wrong' });
      await p.db('web', 'no-such-op-1', {});
      await p.db('web', 'no-such-op-2', {});
      const admin = p.running.adminUrl;
      const health = await request(`${admin}/healthz`);
      assert.equal(health.statusCode, 200);
      await health.body.dump();
      const ready = await request(`${admin}/readyz`);
      assert.equal(ready.statusCode, 200);
      await ready.body.dump();
      const metrics = await (await request(`${admin}/metrics`)).body.text();
      assert.match(metrics, /scopebase_db_requests_total\{op="execute",status="200"\} 1/);
      assert.match(metrics, /scopebase_db_requests_total\{op="query",status="401"\} 1/, 'refusals are counted too');
      assert.match(metrics, /scopebase_db_requests_total\{op="unknown",status="404"\} 2/, 'unknown ops share one label value');
      assert.doesNotMatch(metrics, /no-such-op/);
      assert.match(metrics, /process_resident_memory_bytes/);
    } finally {
      await p.close();
    }
  });

  test('while the server closes, a request behind an in-flight one gets 503 in the SPEC shape', async () => {
    const p = await startProduct();
    await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
    const port = Number(new URL(p.url).port);
    const post = (body: string) => `POST /web/_db/query HTTP/1.1\r\nhost: acme.localhost:${port}\r\nauthorization: Bearer ${p.secret('acme', 'web')}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const slow = JSON.stringify({ sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT count(*) FROM c' });
    // A second request on a connection that is busy (so not closed as idle), sent once closing has begun.
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (d) => (received += d));
    const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.write(post(slow));
    await new Promise((r) => setTimeout(r, 150));
    const closed = p.close();
    await new Promise((r) => setTimeout(r, 50));
    socket.write(post(JSON.stringify({ sql: 'SELECT 1' })));
    await closed;
    await ended;
    const replies = received.split(/(?=HTTP\/1\.1 )/);
    assert.equal(replies.length, 2, received);
    assert.match(replies[0]!, /^HTTP\/1\.1 200 /);
    assert.match(replies[1]!, /^HTTP\/1\.1 503 /);
    assert.match(replies[1]!, /\r\nretry-after: 1\r\n/i);
    assert.deepEqual(JSON.parse(replies[1]!.slice(replies[1]!.indexOf('\r\n\r\n') + 4)), { error: { code: 'unavailable', message: 'the server is shutting down' } });
  });

  test('SIGTERM lets an in-flight request finish, then the process exits 0', async () => {
    const dataDir = tempDir();
    const product = await spawnProduct(testEnv(dataDir, { LOG_LEVEL: 'info' }));
    try {
      await call(product.url, 'localhost', '/web/_db/execute', { body: { sql: 'CREATE TABLE t(x)' }, headers: auth });
      const slow = call(product.url, 'localhost', '/web/_db/query', { body: { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 4000000) SELECT count(*) FROM c' }, headers: auth });
      await new Promise((r) => setTimeout(r, 150));
      const exited = new Promise<number | null>((resolve) => product.child.on('exit', (code) => resolve(code)));
      product.child.kill('SIGTERM');
      const r = await slow;
      const answeredAt = performance.now();
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json.results[0].rows, [[4000000]]);
      assert.equal(await exited, 0);
      // Its connection, kept alive, held the drain until SHUTDOWN_TIMEOUT_MS (30 s) before: let go once answered.
      const exitedAfter = performance.now() - answeredAt;
      assert.ok(exitedAfter < 10_000, `exited ${Math.round(exitedAfter)} ms after the last answer`);
      assert.match(product.stdout(), /"msg":"draining"/);
      assert.match(product.stdout(), /"msg":"stopped"/);
      // The /_db route is served off node:http (raw-route.ts): it writes the same one access line per request.
      assert.match(product.stdout(), /"reqId":"[0-9a-f-]{36}","method":"POST","path":"\/web\/_db\/query","status":200,"ms":[0-9.]+,"msg":"request"/);
    } finally {
      try { product.killAll(); } catch { /* exited */ }
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('the log says why an executor was replaced: stopped for its time limit, or gone by itself', async () => {
    const dataDir = tempDir();
    // 1 s, not less: a first CREATE (its file's fsyncs) on a loaded machine took past 300 ms and was stopped itself.
    const product = await spawnProduct(testEnv(dataDir, { LOG_LEVEL: 'info', DB_QUERY_TIMEOUT_MS: '1000' }));
    const replaced = () => product.stdout().split('\n').filter((l) => l.includes('executor process replaced')).map((l) => JSON.parse(l).reason as string);
    const until = async (n: number) => {
      for (let i = 0; i < 200 && replaced().length < n; i++) await new Promise((r) => setTimeout(r, 50));
    };
    try {
      const created = await call(product.url, 'localhost', '/web/_db/execute', { body: { sql: 'CREATE TABLE t(x)' }, headers: auth });
      assert.equal(created.status, 200, `setup: ${created.text}`);
      const runaway = await call(product.url, 'localhost', '/web/_db/query', { body: { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c' }, headers: auth });
      assert.equal(runaway.json.error.code, 'query_timeout');
      await until(1);
      assert.deepEqual(replaced(), ['stopped: a statement ran past its time limit (DB_QUERY_TIMEOUT_MS)']);
      const executors = readFileSync(`/proc/${product.child.pid}/task/${product.child.pid}/children`, 'utf8').trim().split(' ').filter((pid) => /executor[/\\]child\.[jt]s/.test(readFileSync(`/proc/${pid}/cmdline`, 'utf8')));
      process.kill(Number(executors[0]), 'SIGKILL');
      await until(2);
      assert.equal(replaced()[1], 'exited by itself (a crash, or killed from outside)');
    } finally {
      product.killAll();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('configuration (9.1)', () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ PORT: 'eighty' }, /^scopebase: configuration error: PORT: /m],
    [{ DB_SYNC: 'sometimes' }, /DB_SYNC: must be "full" or "normal"/],
    [{ RUNTIME_ROOT_KEY: 'abc' }, /RUNTIME_ROOT_KEY: must be/],
    [{ DB_MIRRORS: '{' }, /DB_MIRRORS: must be a JSON array/],
    [{ APPS: '{"acme/web": 5}' }, /APPS: value of acme\/web/],
    [{ TRUSTED_PROXIES: 'not-an-ip' }, /TRUSTED_PROXIES: "not-an-ip" is not an IP address/],
    [{ ACCOUNT_SESSION_TTL: 'forever' }, /ACCOUNT_SESSION_TTL: must be a duration/],
    [{ DB_QUERY_TIMEOUT_MS: '-5' }, /DB_QUERY_TIMEOUT_MS: must be a whole number/],
    [{ DB_IDLE_CLOSE_MS: '1m' }, /DB_IDLE_CLOSE_MS: must be a whole number/],
    [{ ACCOUNT_LOGIN_RATE_BURST: '0' }, /ACCOUNT_LOGIN_RATE_BURST: must be between 1 and/],
    [{ ACCOUNT_LOGIN_RATE_PER_MINUTE: 'many' }, /ACCOUNT_LOGIN_RATE_PER_MINUTE: must be a whole number/],
    [{ ACCOUNT_PROVIDER_TIMEOUT_MS: '10s' }, /ACCOUNT_PROVIDER_TIMEOUT_MS: must be a whole number/],
    [{ NODE_ENV: 'production', RUNTIME_ROOT_KEY: '', ACCOUNT_OIDC_ISSUER: 'https://id.example.com', ACCOUNT_OIDC_CLIENT_ID: 'x' }, /RUNTIME_ROOT_KEY: is required when NODE_ENV=production/],
    [{ NODE_ENV: 'production' }, /ACCOUNT_OIDC_ISSUER.*ACCOUNT_GITHUB_CLIENT_ID/],
    // Every missing one at once (before: the provider, then RUNTIME_ROOT_KEY on the next start, then the other key).
    [{ NODE_ENV: 'production', RUNTIME_ROOT_KEY: '', ACCOUNT_ENCRYPTION_KEYS: '' }, /^scopebase: configuration error: NODE_ENV=production needs 3 settings that are missing: ACCOUNT_OIDC_ISSUER \(with ACCOUNT_OIDC_CLIENT_ID\) or ACCOUNT_GITHUB_CLIENT_ID \(with ACCOUNT_GITHUB_CLIENT_SECRET\), a sign-in provider; RUNTIME_ROOT_KEY \(64\+ hex digits\); ACCOUNT_ENCRYPTION_KEYS \(64 hex digits each\); .*\(docs\/deploy\.md\)\n$/],
    [{ NODE_ENV: 'production', RUNTIME_ROOT_KEY: '', ACCOUNT_ENCRYPTION_KEYS: '', ACCOUNT_GITHUB_CLIENT_ID: 'x', ACCOUNT_GITHUB_CLIENT_SECRET: 'y' }, /NODE_ENV=production needs 2 settings that are missing: RUNTIME_ROOT_KEY \(64\+ hex digits\); ACCOUNT_ENCRYPTION_KEYS /],
  ];
  // A short webhook secret was told it was not whsec_<base64>, which it was; a missing MIRROR_SECRET was found once the proxy listened.
  cases.push(
    [{ MIRROR_PORT: '0', MIRROR_SECRET: 'whsec_YWJjZA==' }, /^scopebase: configuration error: MIRROR_SECRET: is too short: whsec_ then the base64 of at least 12 random bytes .*openssl rand -base64 24\)\n$/],
    [{ DB_MIRRORS: '[{"name":"r","url":"http://127.0.0.1:1/hook","secret":"whsec_YWJjZA=="}]' }, /DB_MIRRORS: entry 0: secret is too short/],
    [{ DB_MIRRORS: '[{"name":"r","url":"http://127.0.0.1:1/hook","secret":"s3cret-s3cret-s3cret"}]' }, /DB_MIRRORS: entry 0: secret must be in Standard Webhooks form whsec_<base64>, e\.g\. whsec_\$\(openssl rand -base64 24\)/],
    [{ MIRROR_PORT: '0' }, /^scopebase: configuration error: MIRROR_SECRET: required to run the reference mirror/],
  );
  for (const [env, message] of cases) {
    test(`${Object.keys(env).join(', ')}: the start stops with a message naming the variable`, () => {
      const dataDir = tempDir();
      const r = spawnSync(process.execPath, ['src/cli/main.ts', 'start'], { env: { ...process.env, ...testEnv(dataDir), LOG_LEVEL: 'info', ...env }, encoding: 'utf8', timeout: 20_000 });
      rmSync(dataDir, { recursive: true, force: true });
      assert.equal(r.status, 78, r.stderr);
      assert.match(r.stderr, message);
      assert.doesNotMatch(r.stdout, /Server listening/, 'stopped before any part listened');
    });
  }

  test('development keys are generated into DATA_DIR once and reused', () => {
    const dataDir = tempDir();
    try {
      const env = { ...process.env, DATA_DIR: dataDir, RUNTIME_ROOT_KEY: '', ACCOUNT_ENCRYPTION_KEYS: '' };
      const first = execFileSync(process.execPath, ['src/cli/main.ts', 'secret', 'acme/web', '--create'], { env }).toString();
      const key = readFileSync(join(dataDir, 'runtime-root.key'), 'utf8').trim();
      assert.match(key, /^[0-9a-f]{64}$/);
      const second = execFileSync(process.execPath, ['src/cli/main.ts', 'secret', 'acme/web'], { env }).toString();
      assert.equal(first, second);
      assert.equal(first.trim(), repoSecret(Buffer.from(key, 'hex'), 'acme', 'web'));
      writeFileSync(join(dataDir, 'runtime-root.key'), 'garbage\n');
      const broken = spawnSync(process.execPath, ['src/cli/main.ts', 'secret', 'acme/web'], { env, encoding: 'utf8' });
      assert.equal(broken.status, 78);
      assert.match(broken.stderr, /RUNTIME_ROOT_KEY: the generated key file .* is damaged/);
      assert.doesNotMatch(broken.stderr, /garbage/);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('the limits\' defaults hold through HTTP: 100 statements, 16 MiB of reply, 64 databases, 5000 ms', async () => {
    const p = await startProduct(); // no DB_* setting: SPEC 9.1's defaults
    try {
      const batch = (n: number) => ({ statements: Array.from({ length: n }, () => ({ sql: 'SELECT 1' })) });
      assert.equal((await p.db('web', 'execute', batch(100))).status, 200);
      const over = await p.db('web', 'execute', batch(101));
      assert.deepEqual([over.status, over.json.error.code], [413, 'payload_too_large']);
      const mib = 1024 * 1024;
      assert.equal((await p.db('web', 'query', { sql: `SELECT zeroblob(${8 * mib - 64})` })).status, 200, 'an 11 MB reply');
      const big = await p.db('web', 'query', { sql: `SELECT zeroblob(${6 * mib}), zeroblob(${6 * mib})` });
      assert.deepEqual([big.status, big.json.error.code], [413, 'result_too_large'], 'a 16.8 MB reply');
      for (let i = 1; i < 64; i++) assert.equal((await p.db('web', 'execute', { database: `d${i}`, sql: 'SELECT 1' })).status, 200);
      const more = await p.db('web', 'execute', { database: 'd64', sql: 'SELECT 1' });
      assert.deepEqual([more.status, more.json.error.code], [507, 'quota_exceeded'], 'the 65th database');
      const t0 = Date.now();
      const runaway = await p.db('web', 'query', { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c' });
      assert.deepEqual([runaway.status, runaway.json.error.code], [422, 'query_timeout']);
      assert.ok(Date.now() - t0 >= 5000 && Date.now() - t0 < 15_000, `stopped after ${Date.now() - t0} ms`);
    } finally {
      await p.close();
    }
  });
});

describe('snapshot and changes (4.9)', () => {
  test('snapshot streams a consistent SQLite file with its version; changes pages events and answers 410 past retention', async () => {
    const p = await startProduct();
    try {
      await p.db('web', 'migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)' }] });
      // 1,199 more changing requests: versions 2..1200, committed concurrently in groups.
      for (let batch = 0; batch < 12; batch++) {
        const n = batch === 0 ? 99 : 100;
        const rs = await Promise.all(Array.from({ length: n }, (_, i) => p.db('web', 'execute', { sql: 'INSERT INTO t(v) VALUES (?)', params: [`${batch}-${i}`] })));
        assert.ok(rs.every((r) => r.status === 200));
      }
      const snap = await request(new URL('/web/_db/snapshot', p.url), { method: 'POST', headers: { host: `acme.localhost:${new URL(p.url).port}`, ...auth }, body: '{}' });
      assert.equal(snap.statusCode, 200);
      assert.equal(snap.headers['x-db-version'], '1200');
      assert.equal(snap.headers['content-type'], 'application/vnd.sqlite3');
      const file = join(p.dataDir, 'copy.sqlite');
      writeFileSync(file, Buffer.from(await snap.body.arrayBuffer()));
      const copy = openSqlite(file, { readOnly: true });
      assert.deepEqual({ ...copy.prepare('SELECT count(*) AS n FROM t').get() }, { n: 1199 });
      copy.close();

      // Rows of a table without an INTEGER PRIMARY KEY keep their rowids (VACUUM INTO would renumber them).
      await p.db('web', 'execute', { database: 'keyless', statements: [{ sql: 'CREATE TABLE k(v)' }, { sql: "INSERT INTO k VALUES ('a'), ('b'), ('c')" }, { sql: 'DELETE FROM k WHERE rowid = 2' }] });
      const keyless = await request(new URL('/web/_db/snapshot', p.url), { method: 'POST', headers: { host: `acme.localhost:${new URL(p.url).port}`, ...auth }, body: '{"database":"keyless"}' });
      assert.equal(keyless.statusCode, 200);
      writeFileSync(file, Buffer.from(await keyless.body.arrayBuffer()));
      const k = openSqlite(file, { readOnly: true });
      assert.deepEqual(k.prepare('SELECT rowid, v FROM k ORDER BY rowid').all().map((r) => [r.rowid, r.v]), [[1, 'a'], [3, 'c']]);
      assert.equal(Number((k.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number }).value), 1);
      k.close();

      const page = await p.db('web', 'changes', { since: 0, limit: 10 });
      assert.deepEqual(page.json.events.map((e: { version: number }) => e.version), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      assert.equal(page.json.version, 1200);
      assert.equal(page.json.events[0].type, 'database.migrated');

      // Age every event past 7 days, then cross a pruning point: only the last 1,000 are kept.
      const direct = openSqlite(join(p.dataDir, 'db', 'acme', 'web', 'main.sqlite'));
      direct.exec(`UPDATE _scopebase_changes SET committed_at = ${Date.now() - 8 * 24 * 3600 * 1000}`);
      direct.close();
      const rs = await Promise.all(Array.from({ length: 100 }, () => p.db('web', 'execute', { sql: "INSERT INTO t(v) VALUES ('more')" })));
      assert.ok(rs.every((r) => r.status === 200));
      const gone = await p.db('web', 'changes', { since: 0 });
      assert.equal(gone.status, 410);
      assert.equal(gone.json.error.code, 'gone');
      const kept = await p.db('web', 'changes', { since: 300, limit: 1 });
      assert.equal(kept.status, 200, kept.text);
      assert.equal(kept.json.events[0].version, 301);
      assert.equal((await p.db('web', 'changes', { since: 299 })).status, 410);
    } finally {
      await p.close();
    }
  });

  test('snapshot and changes of a database that does not exist are 404 database_not_found', async () => {
    const p = await startProduct();
    try {
      for (const op of ['snapshot', 'changes']) {
        const r = await p.db('web', op, op === 'changes' ? { database: 'none', since: 0 } : { database: 'none' });
        assert.equal(r.status, 404, op);
        assert.equal(r.json.error.code, 'database_not_found');
      }
    } finally {
      await p.close();
    }
  });
});
