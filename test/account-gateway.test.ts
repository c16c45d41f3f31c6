// The proxy in front of `scopebase serve account` (ACCOUNT_SERVICE_URL) reached through a gateway (nginx, a load
// balancer) that answers for a service it cannot reach: its 502, 503 or 504 page is no answer of the account service.
// Every /{repo}/_account path then gets SPEC 3's 503 unavailable with Retry-After (a page to a browser), never the
// gateway's own page; the account service's own answers, its 503s included, are relayed as they are. A gateway that
// routes by path (ACCOUNT_SERVICE_URL=http://gw/account) gets only paths under its prefix (attack round 6).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
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
const PATHS = ['/web/_account/login', '/web/_account/callback?state=x', '/web/_account/verify', '/web/_account/credentials', '/web/_account/'];

const listen = async (server: Server) => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

/** Every request header, as a gateway that echoes them all (x-request-id and the proxy's x-scopebase-* too) sends them back. */
const echoed = (req: IncomingMessage): Record<string, string> => Object.fromEntries(Object.entries(req.headers)
  .filter(([name]) => !['host', 'connection', 'content-length', 'transfer-encoding', 'keep-alive'].includes(name)).map(([name, v]) => [name, String(v)]));

const GATEWAYS: [number, string, Record<string, string>, boolean][] = [
  [502, '<html><h1>502 Bad Gateway</h1><hr><center>nginx</center></html>', { 'content-type': 'text/html' }, false],
  [503, '<html><h1>503 Service Temporarily Unavailable</h1></html>', { 'content-type': 'text/html' }, false],
  [504, 'upstream request timeout', { 'content-type': 'text/plain' }, false],
  [503, 'no healthy upstream', { 'content-type': 'text/plain', 'retry-after': '3600' }, false],
  // It echoes every request header: its 503 and 500 carried the request's own x-request-id and were relayed as the service's.
  [503, '<html><h1>down for maintenance</h1></html>', { 'content-type': 'text/html' }, true],
  [500, '<html><h1>500 Internal Server Error</h1></html>', { 'content-type': 'text/html' }, true],
];

for (const [status, page, headers, echo] of GATEWAYS) {
  describe(`a gateway at ACCOUNT_SERVICE_URL answering ${status} "${page.slice(0, 30)}"${echo ? ', echoing every request header' : ''}`, () => {
    let gateway: Server;
    let p: AccountsProduct;
    before(async () => {
      gateway = createServer((req, res) => res.writeHead(status, { ...(echo ? echoed(req) : {}), ...headers }).end(page));
      p = await startAccounts({ ACCOUNT_SERVICE_URL: await listen(gateway) });
    });
    after(async () => {
      await p.close();
      gateway.close();
    });

    test('every /_account path is 503 unavailable in SPEC 3\'s shape, with Retry-After, naming the gateway\'s status', async () => {
      for (const path of PATHS) {
        for (const method of ['GET', 'POST'] as const) {
          const r = await p.call(path, { method, headers: { accept: 'application/json', origin: `http://acme.localhost:${p.port}` }, ...(method === 'POST' ? { rawBody: '{}' } : {}) });
          assert.equal(r.status, 503, `${method} ${path}: ${r.text}`);
          assert.equal(r.headers['retry-after'], '5', `${method} ${path}`);
          assert.equal(r.json.error.code, 'unavailable', `${method} ${path}`);
          assert.equal(r.json.error.message, `the account service is not reachable right now: the gateway in front of it answered HTTP ${status}`);
          assert.match(String(r.headers['x-request-id']), /^[0-9a-f-]{36}$/);
        }
      }
    });

    test('a browser gets the product\'s page for it, never the gateway\'s', async () => {
      const r = await p.call('/web/_account/login', { headers: { accept: BROWSER } });
      assert.equal(r.status, 503);
      assert.match(String(r.headers['content-type']), /^text\/html/);
      assert.match(r.text, /<h1>503 — unavailable<\/h1>/);
      assert.match(r.text, /the gateway in front of it answered HTTP \d{3}/);
      assert.ok(!r.text.includes(page), 'the gateway\'s own page is not relayed');
    });
  });
}

/** A gateway that passes every request on to `upstream` and adds every request header to the answer (echoing them). */
function echoingGateway(upstream: string): Server {
  return createServer((req, res) => {
    const out = httpRequest(new URL(req.url!, upstream), { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode!, { ...echoed(req), ...answer.headers });
      answer.pipe(res);
    });
    req.pipe(out);
  });
}

for (const via of ['straight', 'through a gateway that echoes every request header']) test(`the account service's own answers through the proxy are relayed as they are (${via}): its 503, 401 and 404 keep their messages`, async () => {
  const dataDir = tempDir('scopebase-account-gateway-');
  // A sign-in provider that cannot be reached: the account service itself answers /login with 503 unavailable.
  const config = loadConfig(testEnv(dataDir, { ACCOUNT_OIDC_ISSUER: `http://127.0.0.1:${await freePort()}`, ACCOUNT_OIDC_CLIENT_ID: 'x' }));
  const alone = await accountAlone(config, createLogger('silent'), publicConnections(config, createLogger('silent')));
  const service = await alone.server.listen({ port: 0, host: '127.0.0.1' });
  const gateway = via === 'straight' ? null : echoingGateway(service);
  const p = await startAccounts({ ACCOUNT_SERVICE_URL: gateway ? await listen(gateway) : service });
  try {
    const login = await p.call('/web/_account/login');
    assert.equal(login.status, 503, login.text);
    assert.match(login.json.error.message, /^the sign-in provider could not be reached during the discovery/);
    const verify = await p.call('/web/_account/verify');
    assert.equal(verify.status, 401);
    assert.equal(verify.json.error.code, 'unauthenticated');
    const missing = await p.call('/web/_account/nothing-here');
    assert.equal(missing.status, 404);
    assert.equal(missing.json.error.code, 'not_found');
    // The mark and, from the echoing gateway, the proxy token itself stay between the parts.
    for (const r of [login, verify, missing]) assert.deepEqual(Object.keys(r.headers).filter((h) => h.startsWith('x-scopebase-')), []);
  } finally {
    gateway?.close();
    await p.close();
    await alone.server.close();
    await alone.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

describe('ACCOUNT_SERVICE_URL with a path (a gateway routing by path)', () => {
  let gateway: Server;
  let p: AccountsProduct;
  const seen: { url: string; token: boolean }[] = [];
  before(async () => {
    // Answers as the account service would (its request id echoed), and records what it was asked for.
    gateway = createServer((req, res) => {
      seen.push({ url: req.url!, token: req.headers['x-scopebase-proxy-token'] !== undefined });
      res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': String(req.headers['x-request-id']) }).end('{}');
    });
    p = await startAccounts({ ACCOUNT_SERVICE_URL: `${await listen(gateway)}/account` });
  });
  after(async () => {
    await p.close();
    gateway.close();
  });

  /** What the gateway was asked for when the proxy got `path` exactly as given, or the proxy's status if nothing. */
  const reach = async (path: string): Promise<string> => {
    seen.length = 0;
    const r = await new Promise<number>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: p.port, path, headers: { host: `acme.localhost:${p.port}` } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.on('error', reject);
      req.end();
    });
    if (seen.length === 0) return String(r);
    assert.ok(seen[0]!.token, 'the proxy token goes with it');
    return seen[0]!.url;
  };

  test('paths stay under the prefix: dot segments resolve inside /account, never above it with the proxy token', async () => {
    assert.equal(await reach('/web/_account/verify'), '/account/verify');
    assert.equal(await reach('/web/_account/login?return_to=%2Fweb%2F'), '/account/login?return_to=%2Fweb%2F');
    for (const [path, expected] of [
      ['/web/_account/%2e%2e/internal/admin', '/account/internal/admin'],
      ['/web/_account/../internal/admin', '/account/internal/admin'],
      ['/web/_account/x/%2E%2E/%2e%2e/internal', '/account/internal'],
      ['/web/_account/.%2e/internal?x=1', '/account/internal?x=1'],
      ['/web/_account/%2e%2e', '/account/'],
    ]) assert.equal(await reach(path), expected, path);
  });

  test('a dot segment behind an encoded slash (which a gateway may decode, then resolve) is 400, never sent on', async () => {
    for (const path of ['/web/_account/..%2F..%2Finternal', '/web/_account/x/..%2finternal', '/web/_account/%2F..', '/web/_account/..%5Cinternal']) {
      assert.equal(await reach(path), '400', path);
    }
  });
});
