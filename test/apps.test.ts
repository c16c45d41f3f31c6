// SPEC 8 apps: a real upstream on loopback behind the proxy; routing, sessions, streaming, WebSocket upgrades (header rules: apps-headers.test.ts).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { connect, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import type { Duplex } from 'node:stream';
import { Client } from 'undici';
import { signIn, startAccounts, type AccountsProduct, type Browser } from './helpers/accounts.ts';
import { waitFor } from './helpers/mirror.ts';
import { AccountStore } from '../src/account/store.ts';
import { tempDir, testEnv } from './helpers/product.ts';
import { accountAlone } from '../src/account/wiring.ts';
import { publicConnections } from '../src/shared/connection-cap.ts';
import { loadConfig } from '../src/shared/config.ts';
import { createLogger } from '../src/shared/log.ts';

let upstream: Server;
let upstreamUrl: string;
const wsSockets: Duplex[] = [];
const slowUpgrades: Duplex[] = [];
let p: AccountsProduct;

// `=session=…` is a cookie without a name, which browsers send back as its value alone: `session=planted` (attack round 6).
const PLANTED = ['session=planted; Path=/', '__Host-session=planted; Path=/; Secure', 'scopebase-login=planted; Path=/', '=session=planted; Path=/other/', ' = scopebase-login=planted'];

function echo(req: IncomingMessage, body: string) {
  return { method: req.method, url: req.url, headers: req.headers, body };
}

before(async () => {
  upstream = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      // `/plant-session`: an app trying to set the org's session cookie (fixation), besides its own.
      res.setHeader('set-cookie', req.url!.includes('plant-session') ? ['app=1; Path=/', ...PLANTED] : 'app=1; Path=/');
      if (req.url!.includes('own-request-id')) res.setHeader('x-request-id', 'the-app-own-id');
      res.end(JSON.stringify(echo(req, body)));
    });
  });
  // A minimal WebSocket server: completes the handshake, sends one text frame with what it saw.
  upstream.on('upgrade', (req, socket) => {
    wsSockets.push(socket);
    // `/slow-upgrade`: the app takes a while to accept, as a busy one does (the client may be gone by then).
    if (req.url!.includes('slow-upgrade')) {
      slowUpgrades.push(socket);
      socket.on('error', () => {});
      socket.on('end', () => socket.destroy()); // an app closes on the proxy's FIN, as WebSocket servers do
      socket.resume();
      setTimeout(() => socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n`), 300);
      return;
    }
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    const planted = req.url!.includes('plant-session') ? ['app=1; Path=/', ...PLANTED].map((c) => `Set-Cookie: ${c}\r\n`).join('') : '';
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n${planted}\r\n`);
    const text = Buffer.from(JSON.stringify({ url: req.url, user: req.headers['x-auth-user-id'] ?? null, prefix: req.headers['x-forwarded-prefix'] }));
    socket.write(Buffer.concat([Buffer.from([0x81, text.length]), text]));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  p = await startAccounts({
    APPS: JSON.stringify({ 'acme/web': `${upstreamUrl}/base`, 'acme/private': { url: upstreamUrl, requireSession: true } }),
    TRUSTED_PROXIES: '10.0.0.0/8', ACCOUNT_LOGIN_RATE_BURST: '1000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '1000',
  });
});
after(async () => {
  await p.close();
  upstream.closeAllConnections();
  for (const s of wsSockets) s.destroy();
  await new Promise<void>((r) => upstream.close(() => r()));
});

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

  test('x-forwarded-* from a trusted proxy is kept and extended', async () => {
    const q = await startAccounts({ APPS: JSON.stringify({ 'acme/web': upstreamUrl }), TRUSTED_PROXIES: '127.0.0.1' });
    try {
      const r = await q.call('/web/x', { headers: { 'x-forwarded-for': '203.0.113.7', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'acme.example.com', 'x-forwarded-prefix': '/lb' } });
      assert.equal(r.json.headers['x-forwarded-for'], '203.0.113.7, 127.0.0.1');
      assert.equal(r.json.headers['x-forwarded-proto'], 'https');
      assert.equal(r.json.headers['x-forwarded-host'], 'acme.example.com');
      assert.equal(r.json.headers['x-forwarded-prefix'], '/lb/web');
    } finally {
      await q.close();
    }
  });
});

// A raw upgrade (Node's WebSocket cannot set Host, and *.localhost does not resolve here): the 101's headers and the
// first text frame.
function upgrade(path: string, proxy = p, headers: Record<string, string> = {}): Promise<{ headers: IncomingHttpHeaders; message: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${proxy.url}${path}`, { headers: { host: `acme.localhost:${proxy.port}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'x-auth-user-id': 'usr_forged', ...headers } });
    req.on('upgrade', (res, socket, head) => {
      if (res.headers['sec-websocket-accept'] !== 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=') reject(new Error('bad handshake'));
      const onData = (buf: Buffer) => {
        resolve({ headers: res.headers, message: buf.subarray(2, 2 + buf[1]!).toString() });
        socket.destroy();
      };
      if (head.length) onData(head);
      else socket.once('data', onData);
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => reject(new Error(`no upgrade: ${res.statusCode} ${body}`)));
    });
    req.on('error', reject);
    req.end();
  });
}
describe('WebSocket upgrades', () => {
  const open = async (path: string) => (await upgrade(path)).message;

  test('upgrades are forwarded to the app with the same rules', async () => {
    const msg = JSON.parse(await open('/web/live'));
    assert.deepEqual(msg, { url: '/base/live', user: null, prefix: '/web' });
  });

  test('an app\'s 101 cannot set the org\'s session cookie either', async () => {
    assert.deepEqual([(await upgrade('/web/plant-session')).headers['set-cookie']].flat(), ['app=1; Path=/']);
  });

  test('requireSession refuses an anonymous upgrade', async () => {
    await assert.rejects(open('/private/live'), /no upgrade: 401/);
  });

  test('SPEC 3 on upgrades: the 101 and every refusal carry x-request-id; two Host headers are refused', async () => {
    assert.equal((await upgrade('/web/live', p, { 'x-request-id': 'ws-probe-1' })).headers['x-request-id'], 'ws-probe-1');
    const rawUpgrade = (head: string) => new Promise<string>((resolve, reject) => {
      const socket = connect(Number(p.port), '127.0.0.1', () => socket.write(`${head}Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`));
      let text = '';
      socket.on('data', (d) => (text += d));
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
    });
    const host = `Host: acme.localhost:${p.port}\r\n`;
    for (const [head, status] of [
      [`GET /private/live HTTP/1.1\r\n${host}x-request-id: ws-probe-2\r\n`, 401],
      [`GET /nothing-here/live HTTP/1.1\r\n${host}x-request-id: ws-probe-2\r\n`, 404],
      [`GET /web/live HTTP/1.1\r\n${host}Host: globex.localhost:${p.port}\r\nx-request-id: ws-probe-2\r\n`, 400],
    ] as const) {
      const answer = await rawUpgrade(head);
      assert.match(answer, new RegExp(`^HTTP/1.1 ${status} `), answer);
      assert.match(answer, /\r\nx-request-id: ws-probe-2\r\n/i, answer);
    }
  });

  test('a client gone before the app accepted its upgrade leaves no connection to the app open', async () => {
    for (let i = 0; i < 3; i++) {
      const socket = connect(Number(p.port), '127.0.0.1');
      socket.on('error', () => {});
      socket.write(`GET /web/slow-upgrade HTTP/1.1\r\nHost: acme.localhost:${p.port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
      await waitFor(() => slowUpgrades.length > i, 5000, 'the upgrade reached the app');
      socket.resetAndDestroy(); // gone at once (a killed tab, a dropped network), before the app answered
    }
    await waitFor(() => slowUpgrades.every((s) => s.destroyed), 3000, 'every connection to the app closed');
  });

  test('behind a trusted TLS-terminating proxy, an upgrade finds the __Host- session cookie', async () => {
    const q = await startAccounts({ APPS: JSON.stringify({ 'acme/private': { url: upstreamUrl, requireSession: true } }), TRUSTED_PROXIES: '127.0.0.1' });
    try {
      const store = new AccountStore(q.config.dataDir);
      let token: string;
      try {
        const user = store.upsertUser('dev', 'tls-user', { name: null, email: 'tls@example.com', login: null, avatarUrl: null });
        token = store.createSession('acme', user.id, 3600_000).token;
      } finally {
        store.close();
      }
      // The browser saw https, so it holds the __Host- cookie; the proxy learns the scheme from the trusted header.
      const res = await upgrade('/private/live', q, { cookie: `__Host-session=${token}`, 'x-forwarded-proto': 'https' });
      assert.match(JSON.parse(res.message).user, /^usr_/);
      await assert.rejects(upgrade('/private/live', q, { cookie: `__Host-session=${token}` }), /no upgrade: 401/, 'over plain http that cookie name is not ours');
    } finally {
      await q.close();
    }
  });

  /** The proxy with the account service in its own server (`serve account`), on loopback in this process. */
  async function withAccountServiceAlone(): Promise<{ proxy: AccountsProduct; accountDataDir: string; close(): Promise<void> }> {
    const accountDataDir = tempDir('scopebase-account-alone-');
    const config = loadConfig(testEnv(accountDataDir));
    const logger = createLogger('silent');
    const alone = await accountAlone(config, logger, publicConnections(config, logger));
    const accountUrl = await alone.server.listen({ port: 0, host: '127.0.0.1' });
    const proxy = await startAccounts({ ACCOUNT_SERVICE_URL: accountUrl, APPS: JSON.stringify({ 'acme/private': { url: upstreamUrl, requireSession: true } }) });
    return {
      proxy, accountDataDir,
      async close() {
        await proxy.close();
        await alone.server.close();
        await alone.close();
        rmSync(accountDataDir, { recursive: true, force: true });
      },
    };
  }

  for (const mode of ['one process', 'the account service alone'] as const) {
    test(`a session renewed while checking an upgrade gets its cookie in the 101 (${mode})`, async () => {
      const setup = mode === 'one process' ? { proxy: p, accountDataDir: p.config.dataDir, close: async () => {} } : await withAccountServiceAlone();
      try {
        const { proxy, accountDataDir } = setup;
        const { browser } = await signIn(proxy, { repo: 'private', email: 'ws@example.com' });
        const cookie = browser.cookieHeader(`acme.localhost:${proxy.port}`)!;
        const token = /(?:^|; )session=([^;]+)/.exec(cookie)![1]!;
        const fresh = await upgrade('/private/live', proxy, { cookie });
        const user = JSON.parse(fresh.message).user;
        assert.match(user, /^usr_/, 'the app gets the user');
        assert.equal(fresh.headers['set-cookie'], undefined, 'a fresh session is not renewed on every upgrade');

        // Two hours later the session is renewed on use: the 101 carries the cookie with a fresh Max-Age.
        const db = new DatabaseSync(join(accountDataDir, 'accounts.sqlite'));
        try {
          db.exec('PRAGMA busy_timeout = 5000');
          db.prepare('UPDATE sessions SET renewed_at = renewed_at - 7200000, expires_at = expires_at - 7200000 WHERE user_id = ?').run(user);
        } finally {
          db.close();
        }
        const renewed = await upgrade('/private/live', proxy, { cookie });
        assert.deepEqual(renewed.headers['set-cookie'], [`session=${token}; Path=/; Max-Age=1209600; HttpOnly; SameSite=Lax`]);
        assert.equal((await upgrade('/private/live', proxy, { cookie })).headers['set-cookie'], undefined, 'renewed once, not again right after');
      } finally {
        await setup.close();
      }
    });
  }
});

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
    const q = await startAccounts({ APPS: JSON.stringify({ 'acme/private': { url: upstreamUrl, requireSession: true } }), TRUSTED_PROXIES: '127.0.0.1' });
    try {
      const store = new AccountStore(q.config.dataDir);
      let token: string;
      try {
        const user = store.upsertUser('dev', 'tls-origin', { name: null, email: 'tls@example.com', login: null, avatarUrl: null });
        token = store.createSession('acme', user.id, 3600_000).token;
      } finally {
        store.close();
      }
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
