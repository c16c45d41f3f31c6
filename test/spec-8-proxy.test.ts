// SPEC 8 from the outside: the proxy's defaults (PORT 8080, BASE_DOMAIN localhost: http://acme.localhost:8080/web/_db/status
// works), and routing headers a client sends, in any spelling a server folds, never choosing the org or repo on /_db.
// (Forwarding to apps, TRUSTED_PROXIES and header hygiene toward apps: apps.test.ts, apps-headers.test.ts.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { rmSync } from 'node:fs';
import { call, spawnProduct, startProduct, tempDir, ROOT_KEY, type Product } from './helpers/product.ts';
import { createHmac } from 'node:crypto';

let p: Product;
before(async () => {
  p = await startProduct();
  for (const [org, repo] of [['acme', 'web'], ['other', 'web'], ['acme', 'api']] as const) {
    const r = await p.db(repo, 'execute', { sql: 'CREATE TABLE whose(name TEXT)' }, { org });
    assert.equal(r.status, 200, r.text);
    assert.equal((await p.db(repo, 'execute', { sql: 'INSERT INTO whose VALUES (?)', params: [`${org}/${repo}`] }, { org })).status, 200);
  }
});
after(() => p.close());

test('a client\'s org or repo header, in any case or with _ or . for -, neither opens another repo nor reads one', async () => {
  const names = ['x-scopebase-org', 'X-Scopebase-Org', 'x_scopebase_org', 'X.Scopebase.Org', 'x-scopebase-repo', 'x_scopebase_repo', 'x-org', 'x-repo'];
  for (const name of names) {
    const value = /org/i.test(name) ? 'other' : 'api';
    const otherSecret = /org/i.test(name) ? p.secret('other', 'web') : p.secret('acme', 'api');
    const wrong = await p.db('web', 'query', { sql: 'SELECT name FROM whose' }, { secret: otherSecret, headers: { [name]: value } });
    assert.equal(wrong.status, 401, `${name}: ${wrong.text}`);
    const own = await p.db('web', 'query', { sql: 'SELECT name FROM whose' }, { headers: { [name]: value } });
    assert.equal(own.status, 200, `${name}: ${own.text}`);
    assert.deepEqual(own.json.results[0].rows, [['acme/web']], name);
  }
});

/** Whether something already listens on 127.0.0.1:port. */
const taken = (port: number) => new Promise<boolean>((resolve) => {
  const s = createServer().once('error', () => resolve(true)).listen(port, '127.0.0.1', () => s.close(() => resolve(false)));
});

test('with neither PORT nor BASE_DOMAIN set, http://acme.localhost:8080/web/_db/status works', { skip: (await taken(8080)) && 'port 8080 is taken on this machine' }, async () => {
  const dataDir = tempDir();
  const env: Record<string, string> = { ...process.env as Record<string, string>, DATA_DIR: dataDir, ADMIN_PORT: '0', RUNTIME_ROOT_KEY: ROOT_KEY, LOG_LEVEL: 'silent' };
  delete env.PORT;
  delete env.BASE_DOMAIN;
  const product = await spawnProduct(env);
  try {
    assert.equal(new URL(product.url).port, '8080', product.url);
    const r = await call('http://127.0.0.1:8080', 'localhost', '/web/_db/status', { method: 'POST', body: {}, headers: { authorization: `Bearer ${createHmac('sha256', Buffer.from(ROOT_KEY, 'hex')).update('db:acme/web').digest('base64url')}` } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.database, 'main');
  } finally {
    product.killAll();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
