// SPEC 7 through the proxy with the development identity provider: sign-in, verify, cookies, return_to, callback
// failures, the account page (sessions and logout: account-sessions.test.ts).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { Browser, accountsForSuite, cookieLine, devIdpToCallback, signIn, startAccounts, type AccountsProduct } from './helpers/accounts.ts';

let p: AccountsProduct;
accountsForSuite({ TRUSTED_PROXIES: '10.9.9.9', ACCOUNT_LOGIN_RATE_BURST: '10000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '10000' }, (started) => (p = started));

const origin = (org = 'acme') => `http://${org}.localhost:${p.port}`;

describe('sign-in with the development provider', () => {
  test('login redirects with state, PKCE S256 and nonce; callback sets the cookie and returns to return_to', async () => {
    const browser = new Browser();
    const login = await browser.fetch(`${origin()}/web/_account/login?return_to=${encodeURIComponent('/web/page?x=1')}`, { connectTo: p.url });
    assert.equal(login.status, 302);
    const auth = new URL(login.location!);
    assert.equal(auth.searchParams.get('code_challenge_method'), 'S256');
    assert.ok(auth.searchParams.get('state') && auth.searchParams.get('nonce') && auth.searchParams.get('code_challenge'));
    assert.equal(auth.searchParams.get('redirect_uri'), `${origin()}/web/_account/callback`);
    const cb = await browser.fetch(await devIdpToCallback(browser, login.location!), { connectTo: p.url });
    assert.equal(cb.status, 302);
    assert.equal(cb.location, `${origin()}/web/page?x=1`);
    const cookie = cookieLine(cb.headers['set-cookie'], 'session')!;
    assert.match(cookie, /^session=[A-Za-z0-9_-]{43}; Path=\/; Max-Age=1209600; HttpOnly; SameSite=Lax$/);
    assert.doesNotMatch(cookie, /Domain=|Secure/);
  });

  test('the development provider answers with x-request-id too (echoed, or its own)', async () => {
    const browser = new Browser();
    const login = await browser.fetch(`${origin()}/web/_account/login`, { connectTo: p.url });
    const echoed = await browser.fetch(login.location!, { headers: { 'x-request-id': 'trace-dev-idp-1' } });
    assert.equal(echoed.headers['x-request-id'], 'trace-dev-idp-1');
    const own = await browser.fetch(login.location!);
    assert.match(String(own.headers['x-request-id']), /^[0-9a-f-]{36}$/);
  });

  test('verify answers the SPEC 7 shape with x-auth-user-id and x-auth-user-email', async () => {
    const { browser } = await signIn(p, { email: 'ada@example.com' });
    const v = await browser.fetch(`${origin()}/web/_account/verify`, { connectTo: p.url });
    assert.equal(v.status, 200);
    assert.deepEqual(Object.keys(v.json).sort(), ['org', 'session', 'user']);
    assert.deepEqual(Object.keys(v.json.user).sort(), ['avatarUrl', 'email', 'id', 'login', 'name']);
    assert.equal(v.json.user.email, 'ada@example.com');
    assert.equal(v.json.org, 'acme');
    assert.ok(Date.parse(v.json.session.expiresAt) > Date.now() + 13 * 86400_000);
    assert.equal(v.headers['x-auth-user-id'], v.json.user.id);
    assert.equal(v.headers['x-auth-user-email'], 'ada@example.com');
    // The same person signing in again keeps the same id.
    const again = await signIn(p, { email: 'ada@example.com' });
    const v2 = await again.browser.fetch(`${origin()}/web/_account/verify`, { connectTo: p.url });
    assert.equal(v2.json.user.id, v.json.user.id);
  });

  test('verify refuses a write or an upgrade from another org\'s page (same site to a browser, so the cookie came along)', async () => {
    const { browser } = await signIn(p);
    const host = new URL(origin()).host;
    const ask = (headers: Record<string, string>) => browser.fetch(`${origin()}/web/_account/verify`, { connectTo: p.url, headers });
    const other = `http://other.${host.split('.').slice(1).join('.')}`;
    const foreign: Record<string, string>[] = [{ 'x-forwarded-method': 'POST', origin: other }, { 'x-original-method': 'delete', origin: 'null' }, { 'x-forwarded-method': 'PUT', origin: 'https://evil.example' }];
    for (const headers of foreign) {
      const r = await ask(headers);
      assert.equal(r.status, 403, JSON.stringify(headers));
      assert.equal(r.json.error.code, 'forbidden');
      assert.match(r.json.error.message, /from another origin .* is not this organization's page/);
      assert.equal(r.headers['x-auth-user-id'], undefined, 'no identity to act with');
    }
    const allowed: Record<string, string>[] = [{ 'x-forwarded-method': 'POST', origin: origin() }, { 'x-forwarded-method': 'GET', origin: other }, { origin: other }, { 'x-forwarded-method': 'POST' }];
    for (const headers of allowed) {
      assert.equal((await ask(headers)).status, 200, `${JSON.stringify(headers)}: its own page, a read, or no browser origin`);
    }
    // A WebSocket's handshake as nginx and Traefik pass it to forward auth: Upgrade dropped, Sec-WebSocket-* kept.
    const handshake = { 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'sec-websocket-version': '13' };
    const ws = await ask({ ...handshake, origin: other });
    assert.equal(ws.status, 403, 'a cross-origin WebSocket handshake without Upgrade is refused too (it was 200)');
    assert.equal(ws.headers['x-auth-user-id'], undefined);
    assert.equal((await ask({ ...handshake, origin: origin() })).status, 200, 'its own page\'s WebSocket');
    // With Upgrade and Connection kept (as a forward-auth proxy may), /verify is still answered as a request (it was 404).
    const cookie = browser.cookieHeader(host)!;
    const raw = (extra: string) => new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(p.url).port), '127.0.0.1', () => socket.write(`GET /web/_account/verify HTTP/1.1\r\nHost: ${host}\r\nCookie: ${cookie}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n${extra}\r\n`));
      let text = '';
      socket.on('data', (d) => {
        text += d;
        if (text.includes('\r\n\r\n')) socket.destroy();
      });
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
    });
    assert.match(await raw(`Origin: ${origin()}\r\n`), /^HTTP\/1\.1 200 /);
    assert.match(await raw(`Origin: ${other}\r\n`), /^HTTP\/1\.1 403 /);
  });

  test('verify without a session, or with a bogus cookie, is 401 unauthenticated', async () => {
    for (const cookie of [undefined, 'session=nope', `session=${'A'.repeat(43)}`]) {
      const r = await p.call('/web/_account/verify', { headers: cookie ? { cookie } : {} });
      assert.equal(r.status, 401);
      assert.equal(r.json.error.code, 'unauthenticated');
    }
  });

  test('two session cookies: the first counts, as a browser sends the most specific first (docs/security.md)', async () => {
    const { browser } = await signIn(p, { email: 'twice@example.com' });
    const valid = browser.cookies(new URL(origin()).host).get('session');
    assert.ok(valid, 'premise: a session cookie');
    const bogus = 'B'.repeat(43);
    const first = await p.call('/web/_account/verify', { headers: { cookie: `session=${valid}; session=${bogus}` } });
    assert.equal(first.status, 200);
    assert.equal(first.json.user.email, 'twice@example.com');
    const second = await p.call('/web/_account/verify', { headers: { cookie: `session=${bogus}; session=${valid}` } });
    assert.equal(second.status, 401, 'a planted cookie sent first is not skipped over to find a valid one');
  });

  test('verify answers JSON even to a navigation: forward-auth subrequests carry the browser\'s own headers', async () => {
    const navigation = { accept: 'text/html,application/xhtml+xml', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' };
    const r = await p.call('/web/_account/verify', { headers: navigation });
    assert.equal(r.status, 401);
    assert.match(String(r.headers['content-type']), /^application\/json/);
    assert.equal(r.json.error.code, 'unauthenticated');
    const { browser } = await signIn(p);
    const ok = await browser.fetch(`${origin()}/web/_account/verify`, { connectTo: p.url, headers: navigation });
    assert.equal(ok.status, 200);
    assert.match(String(ok.headers['content-type']), /^application\/json/);
  });

  test('under HTTPS (x-forwarded-proto from a trusted proxy) the cookie is __Host-session with Secure', async () => {
    const browser = new Browser();
    browser.headers = { 'x-forwarded-proto': 'https', 'x-forwarded-for': '10.9.9.9' };
    // The peer is loopback, not trusted: x-forwarded-proto is ignored, so plain-HTTP names apply.
    const plain = await browser.fetch(`${origin()}/web/_account/login`, { connectTo: p.url });
    assert.match(String(plain.headers['set-cookie']), /^scopebase-login=/);
    const q = await startAccounts({ TRUSTED_PROXIES: '127.0.0.1' });
    try {
      const b = new Browser();
      b.headers = { 'x-forwarded-proto': 'https' };
      const login = await b.fetch(`http://acme.localhost:${q.port}/web/_account/login`, { connectTo: q.url });
      assert.equal(new URL(login.location!).searchParams.get('redirect_uri'), `https://acme.localhost:${q.port}/web/_account/callback`);
      assert.match(String(login.headers['set-cookie']), /^__Host-scopebase-login=.*; Secure$/);
      const cbUrl = (await devIdpToCallback(b, login.location!)).replace(/^https:/, 'http:');
      const cb = await b.fetch(cbUrl, { connectTo: q.url });
      assert.equal(cb.status, 302, cb.text);
      assert.match(cookieLine(cb.headers['set-cookie'], '__Host-session')!, /^__Host-session=[A-Za-z0-9_-]{43}; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax; Secure$/);
      const v = await b.fetch(`http://acme.localhost:${q.port}/web/_account/verify`, { connectTo: q.url });
      assert.equal(v.status, 200);
      // A plain `session` cookie is not read under HTTPS.
      const token = b.cookies(`acme.localhost:${q.port}`).get('__Host-session');
      const wrongName = await q.call('/web/_account/verify', { headers: { cookie: `session=${token}`, 'x-forwarded-proto': 'https' } });
      assert.equal(wrongName.status, 401);
    } finally {
      await q.close();
    }
  });
});
describe('return_to', () => {
  for (const bad of ['//evil.example', 'https://evil.example', '/\\evil.example', 'http://globex.localhost/web/', '/\t/evil.example', 'javascript:alert(1)', '',
    '/.//evil.example', '/web/..//evil.example', '/%2e//evil.example', '/a/b/../..//evil.example/x']) {
    test(`${JSON.stringify(bad)} falls back to /{repo}/`, async () => {
      const { location } = await signIn(p, { returnTo: bad });
      assert.equal(location, `${origin()}/web/`);
    });
  }
  test('a same-host path is kept', async () => {
    const { location } = await signIn(p, { repo: 'docs', returnTo: '/web/deep/page?q=1#x' });
    assert.equal(location, `${origin()}/web/deep/page?q=1#x`);
  });
});

describe('callback failures', () => {
  async function started(): Promise<{ browser: Browser; callbackUrl: URL }> {
    const browser = new Browser();
    const login = await browser.fetch(`${origin()}/web/_account/login`, { connectTo: p.url });
    return { browser, callbackUrl: new URL(await devIdpToCallback(browser, login.location!)) };
  }

  test('missing state is 400', async () => {
    const { browser, callbackUrl } = await started();
    callbackUrl.searchParams.delete('state');
    const r = await browser.fetch(callbackUrl.href, { connectTo: p.url });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_request');
  });

  test('tampered state is 400, and a reused state is 400', async () => {
    const { browser, callbackUrl } = await started();
    const good = callbackUrl.href;
    callbackUrl.searchParams.set('state', callbackUrl.searchParams.get('state')!.slice(0, -2) + 'xx');
    assert.equal((await browser.fetch(callbackUrl.href, { connectTo: p.url })).status, 400);
    assert.equal((await browser.fetch(good, { connectTo: p.url })).status, 302);
    const reused = await browser.fetch(good, { connectTo: p.url });
    assert.equal(reused.status, 400);
    assert.match(reused.json.error.message, /expired or was already used/);
  });

  test('a wrong code is refused by the provider: 400 with its error', async () => {
    const { browser, callbackUrl } = await started();
    callbackUrl.searchParams.set('code', 'not-a-real-code');
    const r = await browser.fetch(callbackUrl.href, { connectTo: p.url });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.details.providerError, 'invalid_grant');
    assert.deepEqual(r.headers['set-cookie'], 'scopebase-login=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax', 'no session; the spent binding cookie cleared');
  });

  test('the callback in another browser (no binding cookie) is refused', async () => {
    const { callbackUrl } = await started();
    const r = await new Browser().fetch(callbackUrl.href, { connectTo: p.url });
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /another browser/);
  });

  test('the callback on another org host is refused', async () => {
    const { browser, callbackUrl } = await started();
    const other = new URL(callbackUrl.pathname + callbackUrl.search, origin('globex'));
    browser.cookies(`globex.localhost:${p.port}`).set('scopebase-login', browser.cookies(`acme.localhost:${p.port}`).get('scopebase-login')!);
    const r = await browser.fetch(other.href, { connectTo: p.url });
    assert.equal(r.status, 400);
  });

  test('the sign-in page reached again (Back) says it was used, and links back to the repo it started from', async () => {
    const browser = new Browser();
    const login = await browser.fetch(`${origin()}/web/_account/login`, { connectTo: p.url });
    const toForm = await browser.fetch(login.location!);
    const formUrl = toForm.location!;
    assert.match(formUrl, /\/interaction\//);
    assert.equal((await browser.fetch(formUrl)).status, 200);
    let res = await browser.fetch(formUrl, { method: 'POST', body: 'email=back%40example.com', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    while (res.location && !res.location.includes('/_account/callback')) res = await browser.fetch(res.location);
    assert.equal((await browser.fetch(res.location!, { connectTo: p.url })).status, 302, 'signed in');
    const again = await browser.fetch(formUrl);
    assert.equal(again.status, 400);
    assert.match(again.text, /This sign-in page was already used/);
    assert.match(again.text, /You may already be signed in/);
    assert.ok(again.text.includes(`href="${origin()}/web/"`), again.text);
    const unknown = await browser.fetch(new URL('/interaction/nosuchattempt', formUrl).href);
    assert.match(unknown.text, /already used/);
    assert.doesNotMatch(unknown.text, /href="http/, 'no link where the start is unknown');
  });

  test('a browser gets a readable error page with the same status', async () => {
    const r = await p.call('/web/_account/callback?state=x&code=y', { headers: { accept: 'text/html' } });
    assert.equal(r.status, 400);
    assert.match(String(r.headers['content-type']), /text\/html/);
    assert.match(r.text, /Sign-in failed/);
    assert.match(r.text, /href="\/web\/_account\/login"/);
  });
});

describe('names, pages and limits', () => {
  test('an invalid repo name is 400 invalid_name on every account path', async () => {
    for (const path of ['/_x/_account/verify', '/Bad!/_account/login', '/.hidden/_account/', '/-x/_account/nope']) {
      const r = await p.call(path);
      assert.equal(r.status, 400, path);
      assert.equal(r.json.error.code, 'invalid_name');
    }
    const unknown = await p.call('/web/_account/nope');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json.error.code, 'not_found');
  });

  test('unknown provider is 400', async () => {
    const r = await p.call('/web/_account/login?provider=nope');
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_request');
  });

  test('the account page: anonymous sign-in link, then the user and a sign-out form', async () => {
    const anon = await p.call('/web/_account/');
    assert.equal(anon.status, 200);
    assert.match(anon.text, /Not signed in/);
    assert.match(anon.text, /href="\/web\/_account\/login\?return_to=%2Fweb%2F_account%2F"/);
    const { browser } = await signIn(p, { email: 'grace@example.com' });
    const page = await browser.fetch(`${origin()}/web/_account/`, { connectTo: p.url });
    assert.equal(page.status, 200);
    assert.match(String(page.headers['content-type']), /text\/html/);
    assert.match(String(page.headers['content-security-policy']), /default-src 'none'/);
    assert.match(page.text, /grace@example\.com/);
    assert.match(page.text, /<form method="post" action="\/web\/_account\/logout">/);
    assert.doesNotMatch(page.text, /<script/);
  });

  test('ACCOUNT_LOGIN_RATE_BURST/_PER_MINUTE: a login flood from one address is 429 rate_limited with Retry-After', async () => {
    const q = await startAccounts({ ACCOUNT_LOGIN_RATE_BURST: '5', ACCOUNT_LOGIN_RATE_PER_MINUTE: '5' });
    try {
      const statuses: number[] = [];
      let limited;
      for (let i = 0; i < 8; i++) {
        const r = await q.call('/web/_account/login');
        statuses.push(r.status);
        if (r.status === 429) limited = r;
      }
      assert.deepEqual(statuses, [302, 302, 302, 302, 302, 429, 429, 429]);
      assert.equal(limited!.json.error.code, 'rate_limited');
      assert.ok(Number(limited!.headers['retry-after']) >= 1);
    } finally {
      await q.close();
    }
  });
});
