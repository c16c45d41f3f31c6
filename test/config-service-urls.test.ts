// Where one part reaches another (DB_SERVICE_URL, ACCOUNT_SERVICE_URL, CLUSTER_ADVERTISE_URL): what the client would
// not send is refused at start naming the variable. DB_SERVICE_URL=http://db:8081/db stopped `serve proxy` with
// "unexpected error: invalid url" (exit 1, undici's Pool takes an origin only); a query or user:password was dropped.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { ConfigError, loadConfig } from '../src/shared/config.ts';
import { tempDir, testEnv } from './helpers/product.ts';

test('a DB_SERVICE_URL with a path stops `serve proxy` and `start` with exit 78, naming the variable', () => {
  for (const args of [['serve', 'proxy'], ['start']]) {
    const dir = tempDir();
    try {
      const r = spawnSync(process.execPath, ['src/cli/main.ts', ...args], { env: { ...process.env, ...testEnv(dir, { DB_SERVICE_URL: 'http://127.0.0.1:9/db/', ACCOUNT_SERVICE_URL: 'http://127.0.0.1:9' }) }, encoding: 'utf8', timeout: 20_000 });
      assert.equal(r.status, 78, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /DB_SERVICE_URL: must be an origin like http:\/\/10\.0\.0\.5:8081, without a path \("\/db"\): `scopebase serve db` answers at the root of its port, and a path would not be used/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});

test('what a part would not send (a query, a fragment, a user name or password) is refused in every one of them', () => {
  const node = { CLUSTER_ETCD: 'http://127.0.0.1:2379', CLUSTER_NODE_ID: 'db-1' };
  const cases: [Record<string, string>, RegExp][] = [
    [{ ACCOUNT_SERVICE_URL: 'http://127.0.0.1:9/account?tenant=a' }, /^ACCOUNT_SERVICE_URL: must not have a query or a fragment \("\?tenant=a"\): they would not be sent$/],
    [{ ACCOUNT_SERVICE_URL: 'http://127.0.0.1:9/#x' }, /^ACCOUNT_SERVICE_URL: must not have a query or a fragment \("#x"\)/],
    [{ ACCOUNT_SERVICE_URL: 'http://gw:hunter2@127.0.0.1:9/account' }, /^ACCOUNT_SERVICE_URL: must not hold a user name or password: they would not be sent/],
    [{ DB_SERVICE_URL: 'http://127.0.0.1:9?x=1' }, /^DB_SERVICE_URL: must not have a query or a fragment/],
    [{ DB_SERVICE_URL: 'https://u@db.internal' }, /^DB_SERVICE_URL: must not hold a user name or password/],
    [{ MIRROR_SOURCE_URL: 'http://127.0.0.1:8080/?token=x' }, /^MIRROR_SOURCE_URL: must not have a query or a fragment/],
    [{ ...node, CLUSTER_ADVERTISE_URL: 'http://10.0.0.1:9000/db' }, /^CLUSTER_ADVERTISE_URL: must be an origin like http:\/\/10\.0\.0\.5:8081, without a path \("\/db"\): a node's `scopebase serve db` answers/],
  ];
  for (const [env, message] of cases) {
    assert.throws(() => loadConfig(testEnv(tempDir(), env)), (e: unknown) => e instanceof ConfigError && message.test(e.message) && !e.message.includes('hunter2'), JSON.stringify(env));
  }
});

test('an origin (a trailing / is fine) is taken; ACCOUNT_SERVICE_URL keeps its path (the forwarder honours it)', () => {
  const config = loadConfig(testEnv(tempDir(), { DB_SERVICE_URL: 'http://10.0.0.5:8081/', ACCOUNT_SERVICE_URL: 'http://gw.internal/account/' }));
  assert.deepEqual(config.services, { dbUrl: 'http://10.0.0.5:8081', accountUrl: 'http://gw.internal/account' });
});
