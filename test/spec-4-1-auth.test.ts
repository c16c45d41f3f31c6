// SPEC 4.1 from the outside: the secret is HMAC-SHA256(rootKey, "db:org/repo") in base64url without padding, computed here
// from the hex key alone; it opens its own (org, repo) on every /_db operation and nothing else; rotation; the root key.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { startProduct, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';
import { runCli } from './helpers/cli.ts';

const OLD = '0123456789abcdef'.repeat(4);
const NEW = 'fedcba9876543210'.repeat(5); // 80 hex digits: more than 32 bytes is allowed
const secretOf = (hexKey: string, org: string, repo: string): string =>
  createHmac('sha256', Buffer.from(hexKey, 'hex')).update(`db:${org}/${repo}`).digest('base64url');

let p: Product;
before(async () => {
  p = await startProduct({ RUNTIME_ROOT_KEY: `${NEW},${OLD}` });
});
after(() => p.close());

test('the secret computed from the current key and from an older key in the list opens the repo; it is base64url without padding', async () => {
  for (const key of [NEW, OLD]) {
    const s = secretOf(key, 'acme', 'web');
    assert.doesNotMatch(s, /[=+/]/);
    const r = await p.db('web', 'execute', { sql: 'CREATE TABLE IF NOT EXISTS t(a)' }, { secret: s });
    assert.equal(r.status, 200, r.text);
  }
});

test('org and repo are lowercased: the secret of acme/web opens ACME.host/Web', async () => {
  const r = await p.db('Web', 'query', { sql: 'SELECT 1' }, { secret: secretOf(NEW, 'acme', 'web'), host: `ACME.${p.config.baseDomain}:${new URL(p.url).port}` });
  assert.equal(r.status, 200, r.text);
});

test('missing, wrong, another repo\'s, another org\'s secret, the root key itself, or another scheme: 401 unauthorized with WWW-Authenticate: Bearer, on every operation', async () => {
  const ops: [string, unknown][] = [['query', { sql: 'SELECT 1' }], ['execute', { sql: 'SELECT 1' }], ['status', {}], ['migrate', { migrations: [] }],
    ['snapshot', {}], ['changes', { since: 0 }], ['restore', { toVersion: 0 }], ['export', { format: 'sql' }], ['v2/pipeline', { requests: [] }], ['v3/pipeline', { requests: [] }]];
  const wrongs: [string, Record<string, string>][] = [
    ['missing', {}],
    ['wrong', { authorization: `Bearer ${secretOf(NEW, 'acme', 'web').slice(0, -2)}xx` }],
    ['other repo', { authorization: `Bearer ${secretOf(NEW, 'acme', 'api')}` }],
    ['other org', { authorization: `Bearer ${secretOf(NEW, 'other', 'web')}` }],
    ['root key', { authorization: `Bearer ${NEW}` }],
    ['old root key', { authorization: `Bearer ${OLD}` }],
    ['root key bytes as base64url', { authorization: `Bearer ${Buffer.from(NEW, 'hex').toString('base64url')}` }],
    ['root key bytes as base64', { authorization: `Bearer ${Buffer.from(NEW, 'hex').toString('base64')}` }],
    ['empty bearer', { authorization: 'Bearer ' }],
    ['basic', { authorization: `Basic ${Buffer.from(`x:${secretOf(NEW, 'acme', 'web')}`).toString('base64')}` }],
  ];
  for (const [op, body] of ops) {
    for (const [what, headers] of wrongs) {
      const r = await p.db('web', op, body, { secret: null, headers });
      // The pipeline's error also carries Hrana's top-level message and code, which libSQL clients read (docs: hrana).
      if (op.includes('pipeline')) assert.equal(r.status === 401 && r.json.error.code, 'unauthorized', `${op} ${what}`);
      else assertSpecError(r, 401, 'unauthorized', `${op} ${what}`);
      assert.match(String(r.headers['www-authenticate']), /^Bearer\b/, `${op} ${what}`);
    }
  }
  const imp = await p.call('/web/_db/import?database=x&mode=create', { method: 'POST', rawBody: 'CREATE TABLE t(a);', headers: { 'content-type': 'application/sql' } });
  assertSpecError(imp, 401, 'unauthorized', 'import');
  assert.match(String(imp.headers['www-authenticate']), /^Bearer\b/);
  const probe = await p.call('/web/_db/v2', { method: 'GET' });
  assert.ok(probe.status === 200 || probe.status === 401, probe.text);
});

test('a secret of another repo reads nothing of this one, even of a database that exists', async () => {
  const r = await p.db('web', 'query', { sql: 'SELECT * FROM t' }, { secret: secretOf(NEW, 'acme', 'web2') });
  assertSpecError(r, 401, 'unauthorized');
  assert.doesNotMatch(r.text, /\bt\b.*rows/);
});

test('RUNTIME_ROOT_KEY must be at least 64 hex digits of whole bytes, every key of the list: anything else is refused at start', async () => {
  for (const bad of ['a'.repeat(62), 'g'.repeat(64), `${'a'.repeat(64)}b`, `${'a'.repeat(64)},${'c'.repeat(10)}`, `${'a'.repeat(64)},`]) {
    await assert.rejects(startProduct({ RUNTIME_ROOT_KEY: bad }), /RUNTIME_ROOT_KEY/, JSON.stringify(bad));
  }
});

test('`scopebase secret org/repo` prints the secret of 4.1, for the lowercased names', async () => {
  const r = await runCli(['secret', 'ACME/Web'], { ...process.env, RUNTIME_ROOT_KEY: `${NEW},${OLD}`, DATA_DIR: p.dataDir });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.trim(), secretOf(NEW, 'acme', 'web'));
});

test('the Bearer scheme is case-insensitive (RFC 9110), as clients and proxies may send it', async () => {
  for (const scheme of ['bearer', 'BEARER', 'Bearer']) {
    const r = await p.db('web', 'query', { sql: 'SELECT 1' }, { secret: null, headers: { authorization: `${scheme} ${secretOf(NEW, 'acme', 'web')}` } });
    assert.equal(r.status, 200, `${scheme}: ${r.text}`);
  }
});
