// The proxy with ACCOUNT_SERVICE_URL down (nothing listening, or something in front answering 502): an app with
// requireSession answers 503 unavailable with Retry-After itself — a page to a browser — instead of sending the visitor
// to a sign-in page that fails, and forward auth's /verify is 503, never 401. Up again, the same requests sign in.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rmSync } from 'node:fs';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { tempDir, testEnv } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { loadConfig } from '../src/shared/config.ts';
import { createLogger } from '../src/shared/log.ts';
import { publicConnections } from '../src/shared/connection-cap.ts';
import { accountAlone } from '../src/account/wiring.ts';

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';
const listen = async (server: Server) => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

let app: Server;
let gateway: Server;
let appUrl: string;
let gatewayUrl: string;
before(async () => {
  app = createServer((req, res) => res.end(JSON.stringify({ user: req.headers['x-auth-user-id'] ?? null })));
  appUrl = await listen(app);
  // A reverse proxy in front of an account service that is down answers 502 itself.
  gateway = createServer((_req, res) => res.writeHead(502, { 'content-type': 'text/html' }).end('<h1>502 Bad Gateway</h1>'));
  gatewayUrl = await listen(gateway);
});
after(() => {
  app.close();
  gateway.close();
});

/** A WebSocket upgrade to `path`: the status it was answered with (101 when it went through). */
function upgradeStatus(p: AccountsProduct, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${p.url}${path}`, { headers: { host: `acme.localhost:${p.port}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', ...headers } });
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode!, headers: res.headers });
    });
    req.on('response', (res) => {
      res.resume();
      resolve({ status: res.statusCode!, headers: res.headers });
    });
    req.on('error', reject);
    req.end();
  });
}

const apps = () => JSON.stringify({ 'acme/private': { url: appUrl, requireSession: true }, 'acme/open': appUrl });

for (const down of ['nothing listening', 'a gateway answering 502'] as const) {
  describe(`ACCOUNT_SERVICE_URL down (${down})`, () => {
    let p: AccountsProduct;
    before(async () => {
      p = await startAccounts({ ACCOUNT_SERVICE_URL: down === 'nothing listening' ? `http://127.0.0.1:${await freePort()}` : gatewayUrl, APPS: apps() });
    });
    after(() => p.close());

    const unavailable = (r: { status: number; headers: Record<string, unknown> }, what: string) => {
      assert.equal(r.status, 503, what);
      assert.equal(r.headers['retry-after'], '5', what);
      assert.equal(r.headers.location, undefined, `${what}: not sent to a sign-in page that fails`);
    };

    test('a requireSession app answers 503 unavailable itself: a page to a browser, JSON to a script, for any method', async () => {
      const page = await p.call('/private/dashboard', { headers: { accept: BROWSER } });
      unavailable(page, 'a navigation (it was a 302 to the sign-in page, which then showed 503)');
      assert.match(String(page.headers['content-type']), /^text\/html/);
      assert.match(page.text, /<h1>503 — unavailable<\/h1>/);
      assert.match(page.text, /the account service (is not reachable right now|gave no usable answer)/);
      for (const [method, accept] of [['GET', 'application/json'], ['POST', 'application/json'], ['HEAD', '*/*']] as const) {
        const r = await p.call('/private/api', { method, headers: { accept } });
        unavailable(r, `${method} ${accept} (it was a 401: sign in)`);
        if (method !== 'HEAD') assert.equal(r.json.error.code, 'unavailable');
      }
      const withCookie = await p.call('/private/dashboard', { headers: { accept: BROWSER, cookie: `session=${'A'.repeat(43)}` } });
      unavailable(withCookie, 'with a session cookie');
      unavailable(await upgradeStatus(p, '/private/live'), 'a WebSocket upgrade');
    });

    test('forward auth\'s /verify is 503 unavailable, not 401 unauthenticated (nor the gateway\'s own 502)', async () => {
      for (const cookie of [undefined, `session=${'A'.repeat(43)}`]) {
        const r = await p.call('/private/_account/verify', { headers: cookie ? { cookie } : {} });
        unavailable(r, `/verify ${cookie ? 'with' : 'without'} a cookie`);
        assert.equal(r.json.error.code, 'unavailable');
      }
    });

    test('an app without requireSession still gets anonymous visitors (it needs no session check)', async () => {
      const r = await p.call('/open/page');
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json, { user: null });
    });
  });
}

test('the account service up: the same anonymous requests are sent to sign in (302, 401) as before', async () => {
  const dataDir = tempDir('scopebase-account-up-');
  const config = loadConfig(testEnv(dataDir));
  const logger = createLogger('silent');
  const alone = await accountAlone(config, logger, publicConnections(config, logger));
  const p = await startAccounts({ ACCOUNT_SERVICE_URL: await alone.server.listen({ port: 0, host: '127.0.0.1' }), APPS: apps() });
  try {
    const page = await p.call('/private/dashboard', { headers: { accept: BROWSER } });
    assert.equal(page.status, 302);
    assert.equal(page.headers.location, `/private/_account/login?${new URLSearchParams({ return_to: '/private/dashboard' })}`);
    assert.equal((await p.call('/private/api', { headers: { accept: 'application/json' } })).status, 401);
    assert.equal((await p.call('/private/api', { method: 'POST' })).status, 401);
    assert.equal((await upgradeStatus(p, '/private/live')).status, 401);
    assert.equal((await p.call('/private/_account/verify')).status, 401);
  } finally {
    await p.close();
    await alone.server.close();
    await alone.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
