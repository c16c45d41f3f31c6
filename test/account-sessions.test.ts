// SPEC 7 sessions through the proxy with the development identity provider: one org each, token hashes stored,
// expiry and renewal, logout (server-side, per org, cross-site refused), a sign-in ending the session it replaces.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Browser, accountsForSuite, cookieLine, signIn, type AccountsProduct } from './helpers/accounts.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

let p: AccountsProduct;
accountsForSuite({ TRUSTED_PROXIES: '10.9.9.9', ACCOUNT_LOGIN_RATE_BURST: '10000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '10000' }, (started) => (p = started));

const origin = (org = 'acme') => `http://${org}.localhost:${p.port}`;

describe('sessions', () => {
  test('a session belongs to one org: the cookie sent to another org host is 401', async () => {
    const { browser } = await signIn(p);
    const token = browser.cookies(`acme.localhost:${p.port}`).get('session');
    const other = await p.call('/web/_account/verify', { org: 'globex', headers: { cookie: `session=${token}` } });
    assert.equal(other.status, 401);
    assert.equal(other.json.error.code, 'unauthenticated');
    const same = await p.call('/other-repo/_account/verify', { headers: { cookie: `session=${token}` } });
    assert.equal(same.status, 200, 'any repo of the same org');
  });

  test('only the token hash is stored; expiry, renewal on use and bounded cleanup', async () => {
    const { browser } = await signIn(p);
    const token = browser.cookies(`acme.localhost:${p.port}`).get('session')!;
    const db = openSqlite(join(p.config.dataDir, 'accounts.sqlite'));
    try {
      const dump = JSON.stringify(db.prepare('SELECT * FROM sessions').all(), (_k, v) => (v instanceof Uint8Array ? Buffer.from(v).toString('base64url') : v));
      assert.ok(!dump.includes(token), 'the raw token is not in the store');
      // Pretend the session was last renewed long ago: the next use extends it and re-sends the cookie.
      const hour = 3600_000;
      db.prepare('UPDATE sessions SET renewed_at = renewed_at - ?, expires_at = expires_at - ?').run(2 * hour, 2 * hour);
      const v = await browser.fetch(`${origin()}/web/_account/verify`, { connectTo: p.url });
      assert.equal(v.status, 200);
      assert.ok(Date.parse(v.json.session.expiresAt) > Date.now() + 14 * 86400_000 - 60_000);
      assert.match(String(cookieLine(v.headers['set-cookie'], 'session')), /Max-Age=1209600/);
      // Expired: not valid any more.
      db.prepare('UPDATE sessions SET expires_at = ?').run(Date.now() - 1000);
      const expired = await browser.fetch(`${origin()}/web/_account/verify`, { connectTo: p.url });
      assert.equal(expired.status, 401);
    } finally {
      db.close();
    }
  });

  test('POST /logout ends the session server-side and clears the cookie', async () => {
    const { browser } = await signIn(p);
    const token = browser.cookies(`acme.localhost:${p.port}`).get('session')!;
    // Verified once first, so the session is in the store's memory too: logout must end it there as well.
    assert.equal((await p.call('/web/_account/verify', { headers: { cookie: `session=${token}` } })).status, 200);
    const out = await browser.fetch(`${origin()}/web/_account/logout`, { method: 'POST', connectTo: p.url, headers: { origin: origin(), 'sec-fetch-site': 'same-origin' } });
    assert.equal(out.status, 204);
    assert.match(String(out.headers['set-cookie']), /^session=; Path=\/; Max-Age=0; HttpOnly; SameSite=Lax$/);
    const replay = await p.call('/web/_account/verify', { headers: { cookie: `session=${token}` } });
    assert.equal(replay.status, 401, 'the old token is revoked, not just forgotten by the browser');
  });

  test("logging out on another org's host leaves this org's session alone (the cookie is cleared there)", async () => {
    const { browser } = await signIn(p);
    const token = browser.cookies(`acme.localhost:${p.port}`).get('session')!;
    const acme = () => p.call('/web/_account/verify', { headers: { cookie: `session=${token}` } });
    assert.equal((await acme()).status, 200);
    const out = await p.call('/zz/_account/logout', { org: 'other', method: 'POST', headers: { cookie: `session=${token}` } });
    assert.equal(out.status, 204);
    assert.match(String(out.headers['set-cookie']), /^session=; Path=\/; Max-Age=0/, 'the cookie is still cleared on that host');
    assert.equal((await acme()).status, 200, "acme's session survives a logout on other.localhost");
  });

  test("finishing a sign-in on another org's host with this org's cookie leaves this org's session alone", async () => {
    const { browser } = await signIn(p);
    const token = browser.cookies(`acme.localhost:${p.port}`).get('session')!;
    const acme = () => p.call('/web/_account/verify', { headers: { cookie: `session=${token}` } });
    const elsewhere = new Browser();
    elsewhere.cookies(`other.localhost:${p.port}`).set('session', token);
    const signed = await signIn(p, { org: 'other', browser: elsewhere });
    assert.equal(signed.callback.status, 302, signed.callback.text);
    assert.notEqual(elsewhere.cookies(`other.localhost:${p.port}`).get('session'), token);
    assert.equal((await acme()).status, 200, "acme's session survives a sign-in on other.localhost");
  });

  test('signing in again in the same browser ends the session it held (no orphan session left valid)', async () => {
    const { browser } = await signIn(p);
    const first = browser.cookies(`acme.localhost:${p.port}`).get('session')!;
    assert.equal((await p.call('/web/_account/verify', { headers: { cookie: `session=${first}` } })).status, 200);
    // The same browser on the product's host (its session cookie goes along); a fresh one at the provider.
    const again = new Browser();
    again.cookies(`acme.localhost:${p.port}`).set('session', first);
    await signIn(p, { browser: again, email: 'other@example.test' });
    const second = again.cookies(`acme.localhost:${p.port}`).get('session')!;
    assert.notEqual(second, first);
    assert.equal((await p.call('/web/_account/verify', { headers: { cookie: `session=${second}` } })).status, 200);
    assert.equal((await p.call('/web/_account/verify', { headers: { cookie: `session=${first}` } })).status, 401, 'the earlier session ended');
  });

  test('a form sign-out goes back to the account page (303)', async () => {
    const { browser } = await signIn(p);
    const out = await browser.fetch(`${origin()}/web/_account/logout`, { method: 'POST', connectTo: p.url, body: 'return_to=%2F%2Fevil.example', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: origin() } });
    assert.equal(out.status, 303);
    assert.equal(out.location, `${origin()}/web/`);
  });

  test('a return_to with non-ASCII characters completes sign-in, and every Location is percent-encoded', async () => {
    for (const [returnTo, encoded] of [['/ā', '/%C4%81'], ['/web/\u2028x', '/web/%E2%80%A8x'], ['/web/🦀?q=é', '/web/%F0%9F%A6%80?q=%C3%A9']]) {
      const { browser, location, callback } = await signIn(p, { returnTo });
      assert.equal(callback.status, 302, `${returnTo}: ${callback.text.slice(0, 200)}`);
      assert.equal(location, `${origin()}${encoded}`);
      assert.ok(browser.cookies(`acme.localhost:${p.port}`).get('session'), 'the session cookie was delivered');
      const out = await browser.fetch(`${origin()}/web/_account/logout`, { method: 'POST', connectTo: p.url, body: `return_to=${encodeURIComponent(returnTo)}`, headers: { 'content-type': 'application/x-www-form-urlencoded', origin: origin() } });
      assert.equal(out.status, 303);
      assert.equal(out.location, `${origin()}${encoded}`);
    }
  });

  test('cross-site POST /logout is 403 forbidden and the session survives', async () => {
    const { browser } = await signIn(p);
    for (const headers of [{ origin: 'https://evil.example' }, { 'sec-fetch-site': 'cross-site' }, { origin: origin('globex') }] as Record<string, string>[]) {
      const r = await browser.fetch(`${origin()}/web/_account/logout`, { method: 'POST', connectTo: p.url, headers });
      assert.equal(r.status, 403);
      assert.equal(r.json.error.code, 'forbidden');
    }
    assert.equal((await browser.fetch(`${origin()}/web/_account/verify`, { connectTo: p.url })).status, 200);
  });
});
