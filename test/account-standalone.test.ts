// The account service as its own process (`scopebase serve account`) behind `scopebase serve proxy`
// (with `serve db`): sign-in with the development identity provider, /verify, the account page and logout through the
// proxy, and the standalone service's refusal of routing headers that do not carry the proxy token.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { createServer, request as rawRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { signInOverHttp } from '../bench/scopebase/session.ts';
import { proxyToken } from '../src/account/standalone.ts';
import { call, ROOT_KEY, spawnProduct, tempDir, testEnv, type SpawnedProduct } from './helpers/product.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

describe('scopebase serve account behind scopebase serve proxy', () => {
  const dirs = [tempDir('scopebase-account-alone-'), tempDir('scopebase-db-alone-')];
  const [accountDir, dbDir] = dirs as [string, string];
  const procs: SpawnedProduct[] = [];
  let account: SpawnedProduct;
  let proxy: SpawnedProduct;
  let port: string;
  let host: string;
  // An app behind the proxy that requires a session: it records the headers it was sent.
  const seen: IncomingHttpHeaders[] = [];
  const app: Server = createServer((req, res) => {
    seen.push(req.headers);
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ path: req.url }));
  });

  before(async () => {
    await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
    const apps = { 'acme/web': { url: `http://127.0.0.1:${(app.address() as AddressInfo).port}`, requireSession: true } };
    // LOG_LEVEL info: the access and sign-in lines are written, so the last test can check no secret is among them.
    account = await spawnProduct(testEnv(accountDir, { LOG_LEVEL: 'info' }), ['serve', 'account']);
    procs.push(account);
    const db = await spawnProduct(testEnv(dbDir), ['serve', 'db']);
    procs.push(db);
    proxy = await spawnProduct(testEnv(dbDir, { LOG_LEVEL: 'info', DB_SERVICE_URL: db.url, ACCOUNT_SERVICE_URL: account.url, APPS: JSON.stringify(apps) }), ['serve', 'proxy']);
    procs.push(proxy);
    port = new URL(proxy.url).port;
    host = `acme.localhost:${port}`;
  });

  after(() => {
    for (const p of procs) {
      try {
        p.killAll();
      } catch { /* already gone */ }
    }
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
    app.closeAllConnections();
    app.close();
  });

  const viaProxy = (path: string, opts: Parameters<typeof call>[3] = {}) => call(proxy.url, 'localhost', path, opts);
  const signIn = (email: string, name: string, returnTo?: string) => signInOverHttp({ proxyUrl: proxy.url, host, repo: 'web', email, name, returnTo });
  const secrets: string[] = [];

  test('sign-in with the development identity provider works end to end through the proxy', async () => {
    const s = await signIn('ada@example.com', 'Ada Lovelace', '/web/after-sign-in?x=1');
    secrets.push(s.cookie.split('=')[1]!);
    assert.equal(s.location, `http://${host}/web/after-sign-in?x=1`);
    // (no assert.match on cookies: a failure message would print the token)
    assert.ok(/^session=[A-Za-z0-9_-]{43}$/.test(s.cookie), 'a host-only `session` cookie holding a 256-bit token');
    // The pending sign-in's binding cookie was cleared by the callback through the forwarder: the session is all that is left.
    assert.deepEqual([...s.jar.hosts.get('acme.localhost')!.keys()].sort(), ['session']);
  });

  test('/verify through the proxy answers 200 with the user; 401 without a session or on another org', async () => {
    const s = await signIn('grace@example.com', 'Grace Hopper');
    secrets.push(s.cookie.split('=')[1]!);
    const ok = await viaProxy('/web/_account/verify', { headers: { cookie: s.cookie } });
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual({ ...ok.json.user, id: undefined }, { id: undefined, name: 'Grace Hopper', email: 'grace@example.com', login: 'grace', avatarUrl: null });
    assert.equal(ok.json.org, 'acme');
    assert.ok(Date.parse(ok.json.session.expiresAt) > Date.now() + 13 * 86_400_000, 'default TTL is 14 days');
    assert.equal(ok.headers['x-auth-user-id'], ok.json.user.id);
    assert.equal(ok.headers['x-auth-user-email'], 'grace@example.com');
    assert.equal(ok.headers['cache-control'], 'no-store');

    // The same user signing in again is the same account.
    const again = await signIn('grace@example.com', 'Grace Hopper');
    secrets.push(again.cookie.split('=')[1]!);
    const ok2 = await viaProxy('/web/_account/verify', { headers: { cookie: again.cookie } });
    assert.equal(ok2.json.user.id, ok.json.user.id);

    // The session is valid for every repo of the org, and for no other org.
    assert.equal((await viaProxy('/docs/_account/verify', { headers: { cookie: s.cookie } })).status, 200);
    const otherOrg = await viaProxy('/web/_account/verify', { org: 'globex', headers: { cookie: s.cookie } });
    assert.equal(otherOrg.status, 401);
    assert.equal(otherOrg.json.error.code, 'unauthenticated');
    const anonymous = await viaProxy('/web/_account/verify');
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.json.error.code, 'unauthenticated');

    // A client's own routing and identity headers are dropped by the proxy: they change nothing.
    const spoofed = await viaProxy('/web/_account/verify', {
      headers: { cookie: s.cookie, 'x-scopebase-org': 'globex', 'x-scopebase-host': `globex.localhost:${port}`, 'x-scopebase-proxy-token': 'forged', 'x-auth-user-id': 'someone-else' },
    });
    assert.equal(spoofed.status, 200);
    assert.equal(spoofed.json.org, 'acme');
    assert.equal(spoofed.headers['x-auth-user-id'], ok.json.user.id);
    const spoofedAnon = await viaProxy('/web/_account/verify', { headers: { 'x-scopebase-org': 'acme', 'x-auth-user-id': ok.json.user.id } });
    assert.equal(spoofedAnon.status, 401);

    // SPEC 7's own path, called straight on the account service (forward auth from another proxy): org from Host.
    const direct = await call(account.url, 'localhost', '/verify', { headers: { cookie: s.cookie } });
    assert.equal(direct.status, 200, direct.text);
    assert.equal(direct.json.user.id, ok.json.user.id);
    assert.equal(direct.headers['x-auth-user-id'], ok.json.user.id);
    assert.equal((await call(account.url, 'localhost', '/verify')).status, 401);
    assert.equal((await call(account.url, 'localhost', '/verify', { org: 'globex', headers: { cookie: s.cookie } })).status, 401, 'another org');
  });

  test('the account page renders who is signed in, and a sign-in prompt without a session', async () => {
    const s = await signIn('linus@example.com', 'Linus <T>');
    secrets.push(s.cookie.split('=')[1]!);
    const page = await viaProxy('/web/_account/', { headers: { cookie: s.cookie, accept: 'text/html' } });
    assert.equal(page.status, 200);
    assert.match(String(page.headers['content-type']), /^text\/html/);
    assert.match(page.text, /Signed in as Linus &lt;T&gt;/);
    assert.match(page.text, /linus@example\.com/);
    assert.match(page.text, /<dd>acme<\/dd>/);
    assert.match(page.text, /action="\/web\/_account\/logout"/);
    const anonymous = await viaProxy('/web/_account/', { headers: { accept: 'text/html' } });
    assert.equal(anonymous.status, 200);
    assert.match(anonymous.text, /Not signed in/);
    assert.match(anonymous.text, /href="\/web\/_account\/login\?return_to=%2Fweb%2F_account%2F"/);
  });

  test('logout through the proxy revokes the session server-side', async () => {
    const s = await signIn('ken@example.com', 'Ken');
    secrets.push(s.cookie.split('=')[1]!);
    assert.equal((await viaProxy('/web/_account/verify', { headers: { cookie: s.cookie } })).status, 200);
    // Cross-site is refused and changes nothing.
    const cross = await viaProxy('/web/_account/logout', { method: 'POST', headers: { cookie: s.cookie, origin: 'http://evil.example' } });
    assert.equal(cross.status, 403);
    assert.equal((await viaProxy('/web/_account/verify', { headers: { cookie: s.cookie } })).status, 200);

    const out = await viaProxy('/web/_account/logout', { method: 'POST', headers: { cookie: s.cookie, origin: `http://${host}` } });
    assert.equal(out.status, 204);
    assert.match(String(out.headers['set-cookie']), /^session=;.*Max-Age=0/);
    // The old cookie, replayed, no longer works anywhere.
    const after = await viaProxy('/web/_account/verify', { headers: { cookie: s.cookie } });
    assert.equal(after.status, 401);
    const page = await viaProxy('/web/_account/', { headers: { cookie: s.cookie, accept: 'text/html' } });
    assert.match(page.text, /Not signed in/);
  });

  test('an app that requires a session gets the user from the standalone service, and renewals reach the browser', async () => {
    const anonymous = await viaProxy('/web/tools?x=1');
    assert.equal(anonymous.status, 302);
    assert.equal(anonymous.headers.location, '/web/_account/login?return_to=%2Fweb%2Ftools%3Fx%3D1');
    assert.equal(seen.length, 0);

    const s = await signIn('barbara@example.com', 'Barbara', '/web/tools?x=1');
    const token = s.cookie.split('=')[1]!;
    secrets.push(token);
    const visit = () => viaProxy('/web/tools?x=1', { headers: { cookie: `${s.cookie}; theme=dark`, 'x-auth-user-id': 'forged' } });
    const res = await visit();
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json, { path: '/tools?x=1' });
    const user = (await viaProxy('/web/_account/verify', { headers: { cookie: s.cookie } })).json.user;
    const h = seen.at(-1)!;
    assert.equal(h['x-auth-user-id'], user.id);
    assert.equal(h['x-auth-user-email'], 'barbara@example.com');
    assert.ok(h.cookie === 'theme=dark', 'the app never gets the session cookie');
    assert.ok(res.headers['set-cookie'] === undefined, 'a fresh session is not renewed on every request');

    // An hour later the session is renewed on use, server-side and in the browser (the cookie's Max-Age).
    const db = openSqlite(join(accountDir, 'accounts.sqlite'));
    try {
      db.exec('PRAGMA busy_timeout = 5000');
      db.prepare('UPDATE sessions SET renewed_at = renewed_at - 7200000, expires_at = expires_at - 7200000 WHERE user_id = ?').run(user.id);
    } finally {
      db.close();
    }
    const renewed = await visit();
    assert.equal(renewed.status, 200);
    const setCookie = String(renewed.headers['set-cookie']);
    assert.ok(setCookie.startsWith(`session=${token};`), 'the same session cookie is sent again');
    assert.equal(setCookie.slice(setCookie.indexOf(';')), '; Path=/; Max-Age=1209600; HttpOnly; SameSite=Lax');
    assert.ok((await visit()).headers['set-cookie'] === undefined, 'renewed once, not again right after');
  });

  test('the standalone service trusts routing headers only with the proxy token', async () => {
    const s = await signIn('mallory@example.com', 'Mallory');
    const token = s.cookie.split('=')[1]!;
    secrets.push(token);
    const accountPort = new URL(account.url).port;
    const direct = (path: string, headers: Record<string, string>, hostHeader = `127.0.0.1:${accountPort}`) =>
      call(account.url, 'localhost', path, { host: hostHeader, headers });
    const routing = { 'x-scopebase-org': 'acme', 'x-scopebase-repo': 'web', 'x-scopebase-host': host, 'x-scopebase-proto': 'http', 'x-scopebase-client-ip': '203.0.113.9' };

    // The proxy's own call, token included, is what works...
    const proxied = await direct('/verify', { cookie: s.cookie, ...routing, 'x-scopebase-proxy-token': proxyToken(Buffer.from(ROOT_KEY, 'hex')) });
    assert.equal(proxied.status, 200, proxied.text);
    assert.equal(proxied.json.org, 'acme');

    // ...forged routing headers without it, or with a wrong one, are not believed.
    for (const forged of [routing, { ...routing, 'x-scopebase-proxy-token': 'forged' }, { ...routing, 'x-scopebase-proxy-token': proxyToken(Buffer.from('c'.repeat(64), 'hex')) }]) {
      const res = await direct('/verify', { cookie: s.cookie, ...forged });
      assert.notEqual(res.status, 200);
      assert.equal(res.status, 404, res.text); // the org comes from Host, and 127.0.0.1 is no org host
      assert.equal(res.json.error.code, 'unknown_host');
      // Routed by Host to another org, the forged org header does not move the session there.
      const other = await direct('/web/_account/verify', { cookie: s.cookie, ...forged }, `globex.localhost:${port}`);
      assert.equal(other.status, 401, other.text);
      assert.equal(other.json.error.code, 'unauthenticated');
      // The forged host header does not steer redirect URIs either: the callback names the Host the request came with.
      const login = await direct('/web/_account/login', forged, `globex.localhost:${port}`);
      assert.equal(login.status, 302);
      const redirectUri = new URL(String(login.headers.location)).searchParams.get('redirect_uri');
      assert.equal(redirectUri, `http://globex.localhost:${port}/web/_account/callback`);
    }
    // Through the proxy, a path cannot name another repo than the one the proxy routed.
    const nested = await viaProxy('/web/_account/docs/_account/verify', { headers: { cookie: s.cookie } });
    assert.equal(nested.status, 404);
    // (sent as is: WHATWG URLs, undici's included, would resolve the dot segments on this side)
    const dots = await new Promise<number>((resolve, reject) => {
      rawRequest(proxy.url, { path: '/web/_account/%2e%2e/%2e%2e/docs/_account/verify', headers: { host, cookie: s.cookie } }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      }).on('error', reject).end();
    });
    assert.equal(dots, 404);
    // A forged identity header is never taken for a session.
    const identity = await direct('/web/_account/verify', { 'x-auth-user-id': 'u', 'x-scopebase-org': 'acme' }, host);
    assert.equal(identity.status, 401);
  });

  test('{account_url}/login and the other repo pages, asked for without a repo, say where they are (404)', async () => {
    const direct = (method: string, path: string, accept: string) => call(account.url, 'localhost', path, { method, headers: { accept } });
    for (const [method, path] of [['GET', '/login'], ['GET', '/callback'], ['GET', '/credentials'], ['GET', '/logout'], ['POST', '/logout'], ['GET', '/'], ['PUT', '/credentials/p/n']] as const) {
      const api = await direct(method, path, 'application/json');
      assert.equal(api.status, 404, `${method} ${path}: ${api.text}`);
      assert.equal(api.json.error.code, 'not_found');
      const where = `/{repo}/_account${path}`;
      assert.equal(api.json.error.message, `${method} ${path} needs a repo: it is ${where}, opened through the proxy on the organization's host, e.g. http://acme.localhost:8080/web/_account${path} (docs/accounts.md, "Running the account service alone")`);
      const page = await direct(method, path, 'text/html,application/xhtml+xml');
      assert.equal(page.status, 404);
      assert.match(String(page.headers['content-type']), /^text\/html/);
      assert.ok(page.text.includes(`needs a repo: it is ${where}, opened through the proxy`), page.text);
      assert.doesNotMatch(page.text, /Your account/, `no button to ${path}/_account/, which is no one's page`);
    }
    // What it serves without a repo is unchanged, and a path that is no account page keeps the plain 404.
    assert.equal((await direct('GET', '/verify', 'application/json')).status, 401);
    assert.equal((await direct('GET', '/nope', 'application/json')).json.error.message, 'no route for GET /nope');
  });

  test('no session token, cookie or proxy token reaches the logs', () => {
    const logs = [account, proxy].map((p) => p.stdout() + p.stderr()).join('\n');
    assert.ok(logs.includes('"path":"/web/_account/callback"'), 'the access lines were written');
    assert.ok(secrets.length >= 5);
    for (const s of [...secrets, proxyToken(Buffer.from(ROOT_KEY, 'hex'))]) assert.ok(!logs.includes(s), 'a secret was logged');
    assert.ok(!/[?&](code|state)=/.test(logs), 'no authorization code or state was logged');
  });
});
