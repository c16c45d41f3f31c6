// The sign-in's binding cookie (scopebase-login) through the real proxy and development provider: cleared by the
// callback once no pending sign-in holds it, with the attributes it was set with; kept while another tab's sign-in does.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Browser, devIdpToCallback, startAccounts, type AccountsProduct } from './helpers/accounts.ts';

let p: AccountsProduct;
before(async () => {
  p = await startAccounts({ ACCOUNT_LOGIN_RATE_BURST: '10000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '10000' });
});
after(() => p.close());

const origin = () => `http://acme.localhost:${p.port}`;
const host = () => `acme.localhost:${p.port}`;
const setCookies = (h: string | string[] | undefined): string[] => (Array.isArray(h) ? h : h ? [h] : []);
const CLEARED = 'scopebase-login=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax';

/** Starts a sign-in in `browser` and runs the provider's form in a browser of its own: the callback URL, unused. */
async function started(browser: Browser): Promise<URL> {
  const login = await browser.fetch(`${origin()}/web/_account/login`, { connectTo: p.url });
  assert.equal(login.status, 302, login.text);
  return new URL(await devIdpToCallback(new Browser(), login.location!));
}

describe('the sign-in binding cookie', () => {
  test('a successful callback clears it, with the attributes it was set with', async () => {
    const browser = new Browser();
    const callbackUrl = await started(browser);
    assert.ok(browser.cookies(host()).get('scopebase-login'), 'premise: /login set it');
    const cb = await browser.fetch(callbackUrl.href, { connectTo: p.url });
    assert.equal(cb.status, 302, cb.text);
    const cookies = setCookies(cb.headers['set-cookie']);
    assert.ok(cookies.includes(CLEARED), `cleared (it stayed for its 10 minutes): ${JSON.stringify(cookies)}`);
    assert.ok(cookies.some((c) => c.startsWith('session=') && !c.startsWith('session=;')), 'the session cookie is still set');
    assert.deepEqual([...browser.cookies(host()).keys()], ['session']);
  });

  test('under HTTPS the __Host- cookie is cleared with Secure', async () => {
    const q = await startAccounts({ TRUSTED_PROXIES: '127.0.0.1' });
    try {
      const browser = new Browser();
      browser.headers = { 'x-forwarded-proto': 'https' };
      const login = await browser.fetch(`http://acme.localhost:${q.port}/web/_account/login`, { connectTo: q.url });
      const callbackUrl = (await devIdpToCallback(new Browser(), login.location!)).replace(/^https:/, 'http:');
      const cb = await browser.fetch(callbackUrl, { connectTo: q.url });
      assert.equal(cb.status, 302, cb.text);
      assert.ok(setCookies(cb.headers['set-cookie']).includes('__Host-scopebase-login=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax; Secure'), JSON.stringify(cb.headers['set-cookie']));
    } finally {
      await q.close();
    }
  });

  test('two tabs: the first callback keeps it for the second sign-in, which then completes and clears it', async () => {
    const browser = new Browser();
    const first = await started(browser);
    const second = await started(browser);
    const a = await browser.fetch(first.href, { connectTo: p.url });
    assert.equal(a.status, 302, a.text);
    assert.ok(!setCookies(a.headers['set-cookie']).some((c) => c.startsWith('scopebase-login=')), 'still held by the other tab\'s sign-in');
    const b = await browser.fetch(second.href, { connectTo: p.url });
    assert.equal(b.status, 302, `the second tab's sign-in completes: ${b.text}`);
    assert.ok(setCookies(b.headers['set-cookie']).includes(CLEARED));
  });

  test('a failed callback of this browser\'s sign-in (provider error, wrong code) clears it and sets no session', async () => {
    for (const spoil of [(u: URL) => u.searchParams.set('code', 'not-a-real-code'), (u: URL) => { u.searchParams.delete('code'); u.searchParams.set('error', 'access_denied'); }]) {
      const browser = new Browser();
      const callbackUrl = await started(browser);
      spoil(callbackUrl);
      const cb = await browser.fetch(callbackUrl.href, { connectTo: p.url, headers: { accept: 'text/html' } });
      assert.equal(cb.status, 400, cb.text);
      assert.match(cb.text, /Sign-in failed/);
      assert.deepEqual(setCookies(cb.headers['set-cookie']), [CLEARED]);
      assert.equal(browser.cookies(host()).size, 0, 'nothing of the sign-in is left in the browser');
    }
  });

  test('an unknown, used or missing state clears a cookie nothing holds, and keeps one a pending sign-in holds', async () => {
    const browser = new Browser();
    const pending = await started(browser);
    for (const query of ['state=tampered&code=x', 'code=x']) {
      const r = await browser.fetch(`${origin()}/web/_account/callback?${query}`, { connectTo: p.url });
      assert.equal(r.status, 400);
      assert.equal(r.headers['set-cookie'], undefined, `${query}: the pending sign-in still needs it`);
    }
    assert.equal((await browser.fetch(pending.href, { connectTo: p.url })).status, 302, 'and it completes');
    browser.cookies(host()).set('scopebase-login', 'A'.repeat(43)); // a leftover cookie, as a browser may hold one
    const replay = await browser.fetch(pending.href, { connectTo: p.url });
    assert.equal(replay.status, 400);
    assert.deepEqual(setCookies(replay.headers['set-cookie']), [CLEARED]);
  });

  test('a callback from a browser without the cookie sets none', async () => {
    const callbackUrl = await started(new Browser());
    const r = await new Browser().fetch(callbackUrl.href, { connectTo: p.url });
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /another browser/);
    assert.equal(r.headers['set-cookie'], undefined);
  });
});
