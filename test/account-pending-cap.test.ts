// ACCOUNT_MAX_PENDING_LOGINS caps the pending sign-ins held at once across every address: the per-address rate limit
// let a distributed flood of /login grow pending_logins without bound for ten minutes (attack round 7).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { DatabaseSync } from 'node:sqlite';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

let p: AccountsProduct;
let db: DatabaseSync; // another connection on the account store, as an operator's sqlite3 would be
before(async () => {
  // Every request from its own address (TRUSTED_PROXIES names them): the per-address limit never applies here.
  p = await startAccounts({ TRUSTED_PROXIES: '127.0.0.1', ACCOUNT_MAX_PENDING_LOGINS: '3' });
  db = openSqlite(join(p.config.dataDir, 'accounts.sqlite'));
});
after(async () => {
  db.close();
  await p.close();
});

let client = 0;
const login = (accept = 'application/json') => p.call('/web/_account/login', { headers: { 'x-forwarded-for': `198.51.100.${++client}`, accept } });
const rows = () => Number((db.prepare('SELECT count(*) AS n FROM pending_logins').get() as { n: number }).n);

test('past the cap /login is 503 unavailable with Retry-After, and nothing more is stored', async () => {
  const started = [await login(), await login(), await login()];
  assert.deepEqual(started.map((r) => r.status), [302, 302, 302]);
  const full = await login();
  assert.equal(full.status, 503, full.text);
  assert.equal(full.json.error.code, 'unavailable');
  assert.match(full.json.error.message, /too many sign-ins are in progress on this server at once; try again in a moment/);
  const retryAfter = Number(full.headers['retry-after']);
  assert.ok(retryAfter >= 1 && retryAfter <= 60, String(retryAfter));
  assert.equal(full.headers['set-cookie'], undefined, 'no binding cookie for a sign-in that was not started');
  const page = await login('text/html');
  assert.equal(page.status, 503);
  assert.match(page.text, /Sign-in failed/);
  assert.ok(page.headers['retry-after']);
  assert.equal(rows(), 3);

  // A callback uses its pending sign-in up (here refused: no binding cookie), which makes room for one more.
  const state = new URL(String(started[0]!.headers.location)).searchParams.get('state')!;
  assert.equal((await p.call(`/web/_account/callback?state=${state}&code=x`, { headers: { 'x-forwarded-for': '198.51.100.250' } })).status, 400);
  assert.equal((await login()).status, 302);
  assert.equal((await login()).status, 503);
});

test('expired pending sign-ins are dropped first when the cap is reached', async () => {
  assert.equal(rows(), 3);
  db.prepare('UPDATE pending_logins SET expires_at = 1').run(); // all three past their ten minutes
  assert.equal((await login()).status, 302);
  assert.equal(rows(), 1, 'the expired rows were deleted, the new one stored');
  assert.equal((await login()).status, 302);
  assert.equal((await login()).status, 302);
  assert.equal((await login()).status, 503);
});
