// SPEC 8 apps and pages of another origin (org hosts are one site to browsers): a cross-origin write or WebSocket
// upgrade reaches an app without the visitor's identity, and a requireSession app refuses it 403.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { signIn, type AccountsProduct, type Browser } from './helpers/accounts.ts';
import { appsProxyForSuite, startBehindTls, upgrade, type Upstream } from './helpers/app-upstream.ts';

let upstream: Upstream;
let p: AccountsProduct;
appsProxyForSuite((started) => ({ upstream, p } = started));

describe('writes and WebSocket upgrades from pages of another origin', () => {
  // Org hosts are sibling subdomains, one site to browsers: a page of other.localhost gets acme's SameSite=Lax cookie
  // sent with its requests to acme.localhost. The proxy must not pass them to apps as the visitor.
  const own = () => `http://acme.localhost:${p.port}`;
  const other = () => `http://other.localhost:${p.port}`;
  async function alice(): Promise<Browser> {
    return (await signIn(p, { repo: 'private', email: 'alice@example.com' })).browser;
  }
  const post = (browser: Browser, path: string, headers: Record<string, string> = {}) => browser.fetch(`${own()}${path}`, {
    connectTo: p.url, method: 'POST', body: 'action=delete-everything', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
  });

  test('the probe: a POST from another org\'s page reaches an app without the visitor\'s identity, and a requireSession app refuses it 403', async () => {
    const browser = await alice();
    const crossOrg = { origin: other(), 'sec-fetch-site': 'same-site' };
    const open = await post(browser, '/web/api/delete', crossOrg);
    assert.equal(open.status, 200);
    assert.equal(open.json.body, 'action=delete-everything', 'it reaches the app');
    assert.equal(open.json.headers['x-auth-user-id'], undefined, 'as anonymous');
    assert.equal(open.json.headers['x-auth-user-email'], undefined);
    assert.equal(open.json.headers.cookie, undefined);
    const closed = await post(browser, '/private/api/delete', crossOrg);
    assert.equal(closed.status, 403, closed.text);
    assert.equal(closed.json.error.code, 'forbidden');
    assert.match(closed.json.error.message, /requires a signed-in session, and a POST from a page of another origin is not sent as the visitor: only pages of http:\/\/acme\.localhost:\d+ may make it/);
    assert.match(String(closed.headers['x-request-id']), /^[0-9a-f-]{36}$/);
    const page = await post(browser, '/private/api/delete', { ...crossOrg, accept: 'text/html,application/xhtml+xml' });
    assert.equal(page.status, 403);
    assert.match(String(page.headers['content-type']), /^text\/html/, 'a browser\'s form post gets the error as a page');
    assert.match(page.text, /another origin/);
    for (const origin of ['https://evil.example', 'null', `http://acme.localhost:${Number(p.port) + 1}`, `https://acme.localhost:${p.port}`]) {
      const r = await post(browser, '/private/x', { origin });
      assert.equal(r.status, 403, `Origin: ${origin}`);
    }
    const scheme = await post(browser, '/private/x', { origin: `https://acme.localhost:${p.port}` });
    assert.match(scheme.json.error.message, /the page is https:\/\/ but this server was reached over http:\/\/; behind a TLS-terminating proxy, list it in TRUSTED_PROXIES/);
    for (const method of ['PUT', 'PATCH', 'DELETE']) {
      const r = await browser.fetch(`${own()}/web/x`, { connectTo: p.url, method, headers: { origin: other() } });
      assert.equal(r.status, 200, method);
      assert.equal(r.json.headers['x-auth-user-id'], undefined, method);
    }
  });

  test('a POST from a page of the org\'s own host, or without Origin (not a browser), keeps the identity; so do GET, HEAD and OPTIONS from anywhere', async () => {
    const browser = await alice();
    for (const [path, headers] of [
      ['/private/api/save', { origin: own(), 'sec-fetch-site': 'same-origin' }],
      ['/private/api/save', { origin: `http://ACME.localhost:${p.port}` }],
      ['/private/api/save', {}],
      ['/web/api/save', { origin: own() }],
      ['/web/api/save', {}],
    ] as const) {
      const r = await post(browser, path, headers);
      assert.equal(r.status, 200, `${path} ${JSON.stringify(headers)}: ${r.text}`);
      assert.match(String(r.json.headers['x-auth-user-id']), /^usr_/, `${path} ${JSON.stringify(headers)}`);
    }
    for (const method of ['GET', 'OPTIONS']) {
      const r = await browser.fetch(`${own()}/private/page`, { connectTo: p.url, method, headers: { origin: other(), 'sec-fetch-site': 'same-site' } });
      assert.equal(r.status, 200, method);
      assert.match(String(r.json.headers['x-auth-user-id']), /^usr_/, `${method}: a safe method is as before (what the app lets other origins read is its CORS)`);
    }
  });

  test('a WebSocket upgrade from another origin opens as anonymous, or is refused 403 by a requireSession app; from the org\'s own page it is the visitor\'s', async () => {
    const browser = await alice();
    const cookie = browser.cookieHeader(`acme.localhost:${p.port}`)!;
    for (const origin of ['https://evil.com', other()]) {
      assert.equal(JSON.parse((await upgrade('/web/live', p, { cookie, origin })).message).user, null, `Origin: ${origin}`);
      await assert.rejects(upgrade('/private/live', p, { cookie, origin }), /no upgrade: 403 .*"forbidden".*a WebSocket upgrade from a page of another origin/, `Origin: ${origin}`);
    }
    assert.match(JSON.parse((await upgrade('/private/live', p, { cookie, origin: own() })).message).user, /^usr_/);
    assert.match(JSON.parse((await upgrade('/web/live', p, { cookie, origin: own() })).message).user, /^usr_/);
    assert.match(JSON.parse((await upgrade('/private/live', p, { cookie })).message).user, /^usr_/, 'without Origin (not a browser): as before');
  });

  test('behind a trusted TLS-terminating proxy, the org\'s https:// pages are its own origin', async () => {
    const { q, token } = await startBehindTls(upstream, 'tls-origin');
    try {
      const headers = { cookie: `__Host-session=${token}`, 'x-forwarded-proto': 'https' };
      const https = `https://acme.localhost:${q.port}`;
      assert.match(JSON.parse((await upgrade('/private/live', q, { ...headers, origin: https })).message).user, /^usr_/);
      await assert.rejects(upgrade('/private/live', q, { ...headers, origin: `http://acme.localhost:${q.port}` }), /no upgrade: 403/, 'the http:// page of the same host is another origin');
      const r = await q.call('/private/api', { method: 'POST', rawBody: '{}', headers: { ...headers, origin: https } });
      assert.equal(r.status, 200, r.text);
      assert.match(String(r.json.headers['x-auth-user-id']), /^usr_/);
      const refused = await q.call('/private/api', { method: 'POST', rawBody: '{}', headers: { ...headers, origin: `https://other.localhost:${q.port}` } });
      assert.equal(refused.status, 403);
    } finally {
      await q.close();
    }
  });
});
