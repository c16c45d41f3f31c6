// Per-client limits on `scopebase serve account` behind the proxy judge the user, not the proxy (docs/deploy.md,
// "Parts behind the proxy"): the proxy passes the client's address (a TRUSTED_PROXIES peer's x-forwarded-for), and the
// service believes it only with the proxy token. Here the sign-in rate limit, counted per client address.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { call, spawnProduct, tempDir, testEnv, type SpawnedProduct } from './helpers/product.ts';

const dir = tempDir('scopebase-account-address-');
let account: SpawnedProduct;
let p: AccountsProduct;

before(async () => {
  account = await spawnProduct(testEnv(dir, { ACCOUNT_LOGIN_RATE_BURST: '3', ACCOUNT_LOGIN_RATE_PER_MINUTE: '1' }), ['serve', 'account']);
  // The proxy behind a load balancer on 127.0.0.1: the client is the one it names in x-forwarded-for.
  p = await startAccounts({ ACCOUNT_SERVICE_URL: account.url, TRUSTED_PROXIES: '127.0.0.1' });
});
after(async () => {
  await p.close();
  account.killAll();
  rmSync(dir, { recursive: true, force: true });
});

test('through the proxy, each client has its own sign-in bucket on the service, not one for the proxy\'s address', async () => {
  const login = async (client: string) => (await p.call('/web/_account/login', { headers: { 'x-forwarded-for': client } })).status;
  const first: number[] = [];
  for (let i = 0; i < 4; i++) first.push(await login('198.51.100.1'));
  assert.deepEqual(first, [302, 302, 302, 429]);
  const second: number[] = [];
  for (let i = 0; i < 3; i++) second.push(await login('198.51.100.2'));
  assert.deepEqual(second, [302, 302, 302], 'another client is not held to the first one\'s bucket');
});

test('reached directly, a caller cannot pick the address it is counted by (x-forwarded-for, x-scopebase-client-ip)', async () => {
  const statuses: number[] = [];
  for (let i = 1; i <= 4; i++) {
    const headers = { 'x-forwarded-for': `203.0.113.${i}`, 'x-scopebase-client-ip': `203.0.113.${i}`, 'x-scopebase-proxy-token': 'forged' };
    statuses.push((await call(account.url, 'localhost', '/web/_account/login', { host: `acme.localhost:${new URL(account.url).port}`, headers })).status);
  }
  assert.deepEqual(statuses, [302, 302, 302, 429]);
});
