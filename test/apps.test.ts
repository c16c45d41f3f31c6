// SPEC 8 apps: a real upstream on loopback behind the proxy; routing, forwarding, sessions (WebSocket upgrades:
// apps-upgrades.test.ts; pages of another origin: apps-cross-origin.test.ts; header rules: apps-headers.test.ts).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { Client } from 'undici';
import { signIn, startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { appsProxyForSuite, type Upstream } from './helpers/app-upstream.ts';

let upstream: Upstream;
let p: AccountsProduct;
appsProxyForSuite((started) => ({ upstream, p } = started));

describe('forwarding', () => {
  test('streams to the upstream with the repo prefix stripped and x-forwarded-* set', async () => {
    const r = await p.call('/web/some/page?q=1', { headers: { 'x-forwarded-for': '6.6.6.6', 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https', 'x-forwarded-prefix': '/evil' } });
    assert.equal(r.status, 200);
    assert.equal(r.json.url, '/base/some/page?q=1');
    assert.equal(r.json.headers['x-forwarded-for'], '127.0.0.1', 'an untrusted client cannot inject x-forwarded-for');
    assert.equal(r.json.headers['x-forwarded-proto'], 'http');
    assert.equal(r.json.headers['x-forwarded-host'], `acme.localhost:${p.port}`);
    assert.equal(r.json.headers['x-forwarded-prefix'], '/web');
    assert.equal(r.headers['set-cookie'], 'app=1; Path=/');
    const root = await p.call('/web');
    assert.equal(root.json.url, '/base/');
  });

  test('a request in absolute form (a client using the proxy as its HTTP proxy, curl -x) reaches the app and the landing page as the path does', async () => {
    const get = (target: string, accept = '*/*') => new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: p.port, path: target, headers: { host: `acme.localhost:${p.port}`, accept } }, (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject);
      req.end();
    });
    const app = await get(`http://acme.localhost:${p.port}/web/some/page?q=1`);
    assert.equal(app.status, 200, app.body);
    assert.equal(JSON.parse(app.body).url, '/base/some/page?q=1');
    const landing = await get(`http://acme.localhost:${p.port}/docs/`, 'text/html');
    assert.equal(landing.status, 200, landing.body);
    assert.match(landing.body, /<title>acme\/docs<\/title>/);
  });

  test('the repo segment is the same name percent-encoded or in capitals, as on /_db and /_account (SPEC 2)', async () => {
    const client = new Client(p.url);
    try {
      for (const path of ['/%77eb/some/page', '/W%45B/some/page', '/%57eb/some/page']) {
        const res = await client.request({ method: 'GET', path, headers: { host: `acme.localhost:${p.port}` } });
        const body = await res.body.json() as { url: string };
        assert.equal(res.statusCode, 200, path);
        assert.equal(body.url, '/base/some/page', path);
      }
      const bad = await client.request({ method: 'GET', path: '/w%2Feb/x', headers: { host: `acme.localhost:${p.port}` } });
      assert.equal(bad.statusCode, 400);
      assert.equal((await bad.body.json() as { error: { code: string } }).error.code, 'invalid_name');
    } finally {
      await client.close();
    }
  });

  test('a crafted path can neither change the upstream host nor leave the app\'s base path', async () => {
    // Raw paths as an attacker's client sends them (a URL parser on this side would normalize them away).
    const client = new Client(p.url);
    try {
      for (const [path, expected] of [
        ['/web//evil.example/x?a=1', '/base//evil.example/x?a=1'],
        ['/web/\\\\evil.example/', '/base///evil.example/'],
        ['/web/a/../../../private/x', '/base/private/x'],
        ['/web/%2e%2e/%2e%2e/private', '/base/private'],
      ]) {
        const res = await client.request({ method: 'GET', path, headers: { host: `acme.localhost:${p.port}` } });
        const body = await res.body.json() as { url: string };
        assert.equal(res.statusCode, 200, path);
        assert.equal(body.url, expected, path);
      }
      // Dot segments behind an encoded slash: an upstream that decodes %2F first would climb out of /base there.
      for (const path of ['/web/..%2Fprivate/x', '/web/a%2F..%2F..%2Fprivate', '/web/%2e%2e%5Cprivate', '/web/x/..%5c..%5cprivate', '/web/.%2F']) {
        const res = await client.request({ method: 'GET', path, headers: { host: `acme.localhost:${p.port}` } });
        const body = await res.body.json() as { error: { code: string } };
        assert.equal(res.statusCode, 400, path);
        assert.equal(body.error.code, 'invalid_request', path);
      }
    } finally {
      await client.close();
    }
  });

  test('an app cannot set the org\'s session or sign-in cookies (session fixation across repos); its own pass', async () => {
    const r = await p.call('/web/plant-session');
    assert.equal(r.status, 200);
    assert.deepEqual([r.headers['set-cookie']].flat(), ['app=1; Path=/']);
  });

  test('SPEC 3: the caller\'s x-request-id is echoed even when the app sets its own, and the app is given the same id', async () => {
    const echoed = await p.call('/web/own-request-id', { headers: { 'x-request-id': 'caller-id-1' } });
    assert.equal(echoed.headers['x-request-id'], 'caller-id-1');
    assert.equal(echoed.json.headers['x-request-id'], 'caller-id-1');
    const fresh = await p.call('/web/own-request-id');
    assert.match(String(fresh.headers['x-request-id']), /^[0-9a-f-]{36}$/);
    assert.equal(fresh.json.headers['x-request-id'], fresh.headers['x-request-id'], 'the app logs under the id the caller sees');
  });

  test('request bodies stream through, any method', async () => {
    const big = 'x'.repeat(3 * 1024 * 1024);
    const r = await p.call('/web/upload', { method: 'PUT', rawBody: big, headers: { 'content-type': 'application/octet-stream' } });
    assert.equal(r.status, 200);
    assert.equal(r.json.method, 'PUT');
    assert.equal(r.json.body.length, big.length);
  });

  // Before: 503 "the app is not reachable right now" (undici refuses to send `expect`), to curl for any body over 1 KiB.
  test('a body sent with Expect: 100-continue (curl\'s, .NET\'s, Java\'s for larger bodies) reaches the app, without the Expect', async () => {
    const body = 'y'.repeat(64 * 1024);
    const r = await new Promise<{ status: number; json: { body: string; headers: Record<string, string> } }>((resolve, reject) => {
      const req = httpRequest(`${p.url}/web/upload`, { method: 'POST', headers: { host: `acme.localhost:${p.port}`, expect: '100-continue', 'content-length': String(body.length) } });
      req.on('continue', () => req.end(body));
      req.on('response', (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, json: JSON.parse(text) }));
      });
      req.on('error', reject);
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.body.length, body.length);
    assert.equal(r.json.headers.expect, undefined, 'the proxy answered the expectation itself: it is not passed on');
  });

  test('no app configured is 404 not_found; reserved paths never reach an app', async () => {
    for (const path of ['/docs/', '/docs', '/web/_db/query/extra', '/web/_account/nope']) {
      const r = await p.call(path, { method: 'GET' });
      assert.equal(r.status, 404, path);
      assert.equal(r.json.error.code, 'not_found');
    }
    assert.equal((await p.call('/web/x', { org: 'globex' })).status, 404);
    const bad = await p.call('/Bad!/x');
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'invalid_name');
  });

  test('an unreachable upstream is 503 unavailable', async () => {
    const q = await startAccounts({ APPS: JSON.stringify({ 'acme/web': 'http://127.0.0.1:1' }) });
    try {
      const r = await q.call('/web/');
      assert.equal(r.status, 503);
      assert.equal(r.json.error.code, 'unavailable');
    } finally {
      await q.close();
    }
  });

  // Found by the fuzz's apps lane: the 503 left a large body partly read, and the connection stuck on it.
  test('after a 503 for an unreachable upstream with a large body, the same connection serves the next request', async () => {
    const q = await startAccounts({ APPS: JSON.stringify({ 'acme/web': 'http://127.0.0.1:1' }) });
    const client = new Client(q.url, { headersTimeout: 5_000, bodyTimeout: 5_000 }); // one connection, kept alive
    try {
      for (let i = 0; i < 3; i++) {
        const r = await client.request({ path: '/web/upload', method: 'POST', headers: { host: 'acme.localhost' }, body: Buffer.alloc(1_500_000, 0x61) });
        assert.equal(r.statusCode, 503);
        await r.body.dump();
        const next = await client.request({ path: '/web/', method: 'GET', headers: { host: 'acme.localhost' } });
        assert.equal(next.statusCode, 503);
        await next.body.dump();
      }
    } finally {
      await client.close();
      await q.close();
    }
  });
});

describe('sessions and apps', () => {
  test('requireSession: an anonymous visitor is redirected to sign in with return_to', async () => {
    const r = await p.call('/private/dash?tab=2');
    assert.equal(r.status, 302);
    assert.equal(r.headers.location, `/private/_account/login?return_to=${encodeURIComponent('/private/dash?tab=2')}`);
    const post = await p.call('/private/api', { method: 'POST', rawBody: '{}' });
    assert.equal(post.status, 401);
    assert.equal(post.json.error.code, 'unauthenticated');
  });

  test('requireSession: an anonymous GET asking for JSON (a page\'s fetch) gets 401 with where to sign in, not a redirect it cannot follow', async () => {
    const login = `/private/_account/login?return_to=${encodeURIComponent('/private/api/items?page=2')}`;
    for (const accept of ['application/json', 'application/json, text/plain, */*']) {
      const r = await p.call('/private/api/items?page=2', { headers: { accept } });
      assert.equal(r.status, 401, accept);
      assert.equal(r.json.error.code, 'unauthenticated');
      assert.equal(r.json.error.details.login, login);
      assert.equal(r.headers['cache-control'], 'no-store');
    }
    // A browser's navigation (text/html among its types) and curl (*/*) are still sent to sign in.
    for (const accept of ['text/html,application/xhtml+xml,application/json;q=0.9,*/*;q=0.8', '*/*']) {
      const r = await p.call('/private/api/items?page=2', { headers: { accept } });
      assert.equal(r.status, 302, accept);
      assert.equal(r.headers.location, login);
    }
  });

  test('a signed-in visitor reaches the app with x-auth-user-* set by the proxy and without the session cookie', async () => {
    const { browser, location } = await signIn(p, { repo: 'private', returnTo: '/private/dash?tab=2', email: 'lin@example.com' });
    assert.equal(location, `http://acme.localhost:${p.port}/private/dash?tab=2`);
    browser.cookies(`acme.localhost:${p.port}`).set('theme', 'dark');
    const r = await browser.fetch(location!, { connectTo: p.url, headers: { 'x-auth-user-id': 'usr_forged', x_auth_user_id: 'usr_forged', 'x-auth-user_email': 'root@example.com', 'X.Auth.User.Id': 'usr_forged' } });
    assert.equal(r.status, 200);
    const v = await browser.fetch(`http://acme.localhost:${p.port}/private/_account/verify`, { connectTo: p.url });
    assert.equal(r.json.headers['x-auth-user-id'], v.json.user.id);
    assert.equal(r.json.headers['x-auth-user-email'], 'lin@example.com');
    assert.equal(r.json.headers['x-auth-user-name'], 'Dev User');
    assert.equal(r.json.headers['x-auth-user-login'], 'lin');
    assert.equal(r.json.headers.cookie, 'theme=dark', 'the session token stays with the proxy');
    assert.equal(r.json.headers.x_auth_user_id, undefined, 'a forged underscore spelling never sits beside the real header');
    assert.equal(r.json.headers['x-auth-user_email'], undefined);
    assert.equal(r.json.headers['x.auth.user.id'], undefined, 'nor a dotted one');
  });

  // oauth2-proxy's identity headers, which apps behind it trust: from no one, a trusted load balancer included.
  const identity = { 'x-forwarded-user': 'root', 'x-forwarded-email': 'root@example.com', 'x-forwarded-groups': 'admins', 'x-forwarded-preferred-username': 'root', 'x-forwarded-access-token': 'tok' };
  const transport = { 'x-forwarded-port': '443', 'x-forwarded-ssl': 'on', 'x-forwarded-scheme': 'https' };

  test('x-forwarded-* from a trusted proxy is kept and extended: its transport facts (port, ssl, scheme) too, never identity', async () => {
    const q = await startAccounts({ APPS: JSON.stringify({ 'acme/web': upstream.url }), TRUSTED_PROXIES: '127.0.0.1' });
    try {
      const r = await q.call('/web/x', { headers: { 'x-forwarded-for': '203.0.113.7', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'acme.example.com', 'x-forwarded-prefix': '/lb', ...transport, ...identity } });
      assert.equal(r.json.headers['x-forwarded-for'], '203.0.113.7, 127.0.0.1');
      assert.equal(r.json.headers['x-forwarded-proto'], 'https');
      assert.equal(r.json.headers['x-forwarded-host'], 'acme.example.com');
      assert.equal(r.json.headers['x-forwarded-prefix'], '/lb/web');
      for (const [name, value] of Object.entries(transport)) assert.equal(r.json.headers[name], value, `${name} from the trusted peer`);
      for (const name of Object.keys(identity)) assert.equal(r.json.headers[name], undefined, `${name} from the trusted peer`);
    } finally {
      await q.close();
    }
  });

  test('from a client that is not a trusted proxy, neither transport facts nor identity x-forwarded-* reach the app', async () => {
    const r = await p.call('/web/x', { headers: { ...transport, ...identity, 'x-forwarded-proto': 'https' } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.headers['x-forwarded-proto'], 'http', 'the scheme the proxy saw');
    for (const name of [...Object.keys(transport), ...Object.keys(identity)]) assert.equal(r.json.headers[name], undefined, name);
  });
});
