// CORS preflights (OPTIONS with Origin and Access-Control-Request-Method) carry no cookie, so to a requireSession app
// one is anonymous: 401 `unauthenticated`, never sent to the app, which is promised only signed-in requests
// (docs/accounts.md, "CORS preflights"; oauth2-proxy does the same unless --skip-auth-preflight). An app without
// requireSession answers its own preflights.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';

let upstream: Server;
let p: AccountsProduct;
const seen: string[] = [];

before(async () => {
  // An app that answers preflights itself, allowing a page of another org.
  upstream = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    if (req.method === 'OPTIONS') return void res.writeHead(204, { 'access-control-allow-origin': String(req.headers.origin), 'access-control-allow-headers': 'x-app' }).end();
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  p = await startAccounts({ APPS: JSON.stringify({ 'acme/private': { url, requireSession: true }, 'acme/open': url }) });
});
after(async () => {
  await p.close();
  upstream.closeAllConnections();
  await new Promise<void>((r) => upstream.close(() => r()));
});

const preflight = (path: string, origin: string) => p.call(path, {
  method: 'OPTIONS',
  headers: { origin, 'access-control-request-method': 'GET', 'access-control-request-headers': 'x-app' },
});

test('an anonymous preflight to a requireSession app is 401 unauthenticated, from any origin, and the app never sees it', async () => {
  for (const origin of [`http://other.localhost:${p.port}`, `http://acme.localhost:${p.port}`]) {
    const r = await preflight('/private/api/items', origin);
    assert.equal(r.status, 401, `${origin}: ${r.text}`);
    assert.equal(r.json.error.code, 'unauthenticated');
    assert.equal(r.json.error.message, 'this app requires a signed-in session');
    assert.equal(r.headers['access-control-allow-origin'], undefined, 'no CORS grant: the browser fails the request');
  }
  assert.deepEqual(seen, []);
});

test('an app without requireSession answers its own preflights', async () => {
  const origin = `http://other.localhost:${p.port}`;
  const r = await preflight('/open/api/items', origin);
  assert.equal(r.status, 204, r.text);
  assert.equal(r.headers['access-control-allow-origin'], origin);
  assert.deepEqual(seen, ['OPTIONS /api/items']);
});
