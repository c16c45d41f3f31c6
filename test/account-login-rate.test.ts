// The sign-in rate limit (ACCOUNT_LOGIN_RATE_BURST/_PER_MINUTE) counts an IPv6 client by its /64, as the connection
// caps do: one client holds a whole /64 (privacy addresses rotate within it), so per address it could start sign-ins
// without limit, each leaving a pending row in the account store for ten minutes (attack round 6); a /48 (one holder
// of 65,536 /64s) has a bucket ten times a client's, so it cannot fill ACCOUNT_MAX_PENDING_LOGINS for every org.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';

let p: AccountsProduct;
before(async () => {
  // Behind a load balancer (TRUSTED_PROXIES): the client address is the one it names in x-forwarded-for.
  p = await startAccounts({ TRUSTED_PROXIES: '127.0.0.1', ACCOUNT_LOGIN_RATE_BURST: '5', ACCOUNT_LOGIN_RATE_PER_MINUTE: '5' });
});
after(() => p.close());

const login = (client: string) => p.call('/web/_account/login', { headers: { 'x-forwarded-for': client } });

test('sign-ins from ever new addresses of one IPv6 /64 share one bucket: 429 after the burst', async () => {
  const statuses: number[] = [];
  for (let i = 1; i <= 8; i++) statuses.push((await login(`2001:db8:1:2::${i.toString(16)}`)).status);
  assert.deepEqual(statuses, [302, 302, 302, 302, 302, 429, 429, 429]);
  const limited = await login('2001:db8:1:2:ffff:eeee:dddd:cccc');
  assert.equal(limited.status, 429);
  assert.equal(limited.json.error.code, 'rate_limited');
  assert.ok(Number(limited.headers['retry-after']) >= 1);
});

test('another /64, or an IPv4 address, has its own bucket', async () => {
  assert.equal((await login('2001:db8:1:3::1')).status, 302);
  assert.equal((await login('198.51.100.7')).status, 302);
  assert.equal((await login('::ffff:198.51.100.8')).status, 302);
});

test('sign-ins from ever new /64s of one IPv6 /48 share a bucket ten times a client\'s: one holder cannot fill the pending sign-ins of every org', async () => {
  const statuses: number[] = [];
  for (let i = 1; i <= 55; i++) statuses.push((await login(`2001:db8:aa:${i.toString(16)}::1`)).status);
  assert.deepEqual(statuses, [...Array<number>(50).fill(302), ...Array<number>(5).fill(429)]);
  const limited = await login('2001:db8:aa:ffff::1');
  assert.equal(limited.status, 429);
  assert.match(limited.json.error.message, /too many sign-in attempts from this network/);
  assert.equal((await login('2001:db8:ab:1::1')).status, 302, 'another /48 has its own');
});
