// SPEC 9.1 from the outside: the database limits' defaults as a caller meets them (DB_MAX_STATEMENTS 100,
// DB_MAX_RESULT_BYTES 16 MiB, DB_QUERY_TIMEOUT_MS 5000, DB_MAX_DATABASES_PER_REPO 64), every variable of the table
// refused at `scopebase start` when malformed (exit 78, named), and an empty value taken as unset (docs: README).
// (PORT and BASE_DOMAIN's defaults: spec-8-proxy.test.ts; ACCOUNT_SESSION_TTL's: account-flow.test.ts.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { spawnProduct, startProduct, tempDir, testEnv, call, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';
import { runCli } from './helpers/cli.ts';

let p: Product;
before(async () => {
  p = await startProduct({ DB_QUEUE_TIMEOUT_MS: '10000' }); // no DB_MAX_* nor DB_QUERY_TIMEOUT_MS: their defaults
  assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
});
after(() => p.close());

test('DB_MAX_STATEMENTS defaults to 100: a batch of 100 runs, one of 101 is 413', async () => {
  const batch = (n: number) => ({ statements: Array.from({ length: n }, () => ({ sql: 'SELECT 1' })) });
  const ok = await p.db('web', 'query', batch(100));
  assert.equal(ok.status, 200, ok.text);
  assertSpecError(await p.db('web', 'query', batch(101)), 413, 'payload_too_large', '101 statements');
});

test('DB_MAX_RESULT_BYTES defaults to 16 MiB: a 10 MiB result is read, a 20 MiB one is 413 result_too_large', async () => {
  // Rows of 5 MiB each: one value stays under DB_MAX_VALUE_BYTES (8 MiB), whatever the rows add up to.
  const rows = (n: number) => ({ sql: `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ${n}) SELECT zeroblob(${5 * 1024 * 1024}) FROM c` });
  const ok = await p.db('web', 'query', rows(2));
  assert.equal(ok.status, 200, ok.text.slice(0, 300));
  assert.equal(ok.json.results[0].rows.length, 2);
  assertSpecError(await p.db('web', 'query', rows(4)), 413, 'result_too_large', '20 MiB');
});

test('DB_QUERY_TIMEOUT_MS defaults to 5000: a runaway is stopped with 422 after about 5 s', async () => {
  const started = performance.now();
  const r = await p.db('web', 'query', { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c' });
  const ms = performance.now() - started;
  assertSpecError(r, 422, 'query_timeout');
  assert.ok(ms >= 4_900 && ms < 20_000, `stopped after ${Math.round(ms)} ms`);
});

test('DB_MAX_DATABASES_PER_REPO defaults to 64: the 65th database is 507 and not made', async () => {
  for (let i = 1; i < 64; i++) {
    const r = await p.db('web', 'execute', { database: `d${i}`, sql: 'CREATE TABLE x(y)' });
    assert.equal(r.status, 200, `database ${i + 1}: ${r.text}`);
  }
  assertSpecError(await p.db('web', 'execute', { database: 'd64', sql: 'CREATE TABLE x(y)' }), 507, 'quota_exceeded', 'the 65th');
  assertSpecError(await p.db('web', 'query', { database: 'd64', sql: 'SELECT 1' }), 404, 'database_not_found');
});

test('a malformed value of each variable of the table stops the start: exit 78, one message naming it', () => {
  const key = 'a'.repeat(64);
  const cases: [string, string, Record<string, string>?][] = [
    ['PORT', '80a'], ['PORT', '70000'], ['ADMIN_PORT', 'x'], ['BASE_DOMAIN', 'not a domain'], ['RUNTIME_ROOT_KEY', 'abc'],
    ['RUNTIME_ROOT_KEY', 'z'.repeat(64)], ['RUNTIME_ROOT_KEY', 'a'.repeat(65)], ['DB_SYNC', 'off'], ['DB_SYNC', 'FULL'], ['DB_QUERY_TIMEOUT_MS', '5s'], ['DB_QUERY_TIMEOUT_MS', '0'],
    ['DB_MAX_STATEMENTS', '0'], ['DB_MAX_RESULT_BYTES', '16MiB'], ['DB_MAX_SIZE_BYTES', '1GB'], ['DB_MAX_DATABASES_PER_REPO', '-1'],
    ['DB_MIRRORS', '{"name": "m"}'], ['ACCOUNT_OIDC_ISSUER', 'not a url', { ACCOUNT_OIDC_CLIENT_ID: 'c' }], ['ACCOUNT_OIDC_CLIENT_ID', 'c'],
    ['ACCOUNT_GITHUB_CLIENT_SECRET', 's', { ACCOUNT_GITHUB_CLIENT_ID: '' }], ['ACCOUNT_GITHUB_CLIENT_ID', 'c'],
    ['ACCOUNT_ENCRYPTION_KEYS', `${key},abc`], ['ACCOUNT_ENCRYPTION_KEYS', key.slice(2)], ['ACCOUNT_SESSION_TTL', 'two weeks'],
    ['TRUSTED_PROXIES', 'lb.example'], ['MIRROR_PORT', 'x'], ['MIRROR_SECRET', 'plain'], ['MIRROR_SOURCE_URL', 'ftp://x', { MIRROR_PORT: '0', MIRROR_SECRET: 'whsec_' + Buffer.alloc(24, 1).toString('base64') }],
    ['APPS', '["http://127.0.0.1:9"]'], ['APPS', JSON.stringify({ 'acme/web': 'ftp://x' })],
  ];
  for (const [name, value, more] of cases) {
    const dir = tempDir();
    try {
      const r = spawnSync(process.execPath, ['src/cli/main.ts', 'start'], { env: { ...process.env, ...testEnv(dir, { [name]: value, ...more }) }, encoding: 'utf8', timeout: 20_000 });
      assert.equal(r.status, 78, `${name}=${value}: ${r.stderr}`);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
      assert.match(r.stderr, /^scopebase: configuration error: /, r.stderr);
      assert.ok(r.stderr.includes(name), `${name}=${value} is named: ${r.stderr}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});

test('an empty value counts as unset: the start takes the default (keys generated into DATA_DIR, the secret derived from them works)', async () => {
  const dir = tempDir();
  const empty = ['BASE_DOMAIN', 'RUNTIME_ROOT_KEY', 'DB_SYNC', 'DB_QUERY_TIMEOUT_MS', 'DB_MAX_STATEMENTS', 'DB_MAX_RESULT_BYTES', 'DB_MAX_SIZE_BYTES',
    'DB_MAX_DATABASES_PER_REPO', 'DB_MIRRORS', 'ACCOUNT_OIDC_ISSUER', 'ACCOUNT_OIDC_CLIENT_ID', 'ACCOUNT_OIDC_CLIENT_SECRET', 'ACCOUNT_GITHUB_CLIENT_ID',
    'ACCOUNT_GITHUB_CLIENT_SECRET', 'ACCOUNT_ENCRYPTION_KEYS', 'ACCOUNT_SESSION_TTL', 'TRUSTED_PROXIES', 'MIRROR_PORT', 'MIRROR_SECRET', 'MIRROR_SOURCE_URL', 'APPS', 'NODE_ENV'];
  const env = { ...testEnv(dir, Object.fromEntries(empty.map((k) => [k, '']))) };
  const product = await spawnProduct(env);
  try {
    assert.ok(existsSync(join(dir, 'runtime-root.key')), 'the development root key was generated');
    const secret = await runCli(['secret', 'acme/web'], { ...process.env, ...env });
    assert.equal(secret.code, 0, secret.stderr);
    const r = await call(product.url, 'localhost', '/web/_db/status', { method: 'POST', body: {}, headers: { authorization: `Bearer ${secret.stdout.trim()}` } });
    assert.equal(r.status, 200, r.text);
  } finally {
    product.killAll();
    rmSync(dir, { recursive: true, force: true });
  }
});
