// Behind a TRUSTED_PROXIES peer, the scheme is its x-forwarded-proto's last entry (Fastify's request.protocol): every
// route must read it so. The raw GET /verify and WebSocket upgrades read the whole value, so a list (`https, https`
// from two layers that each append, or a second header a load balancer adds) was http there while every other route
// said https: the plain `session` cookie — which a page on a sibling org host can plant for the whole domain, unlike
// `__Host-session` — then signed the browser in at /verify, the forward-auth check (attack round 6).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { signInUser } from './helpers/session.ts';

let app: Server;
let p: AccountsProduct;
let token: string;

before(async () => {
  app = createServer((req, res) => res.end(JSON.stringify({ user: req.headers['x-auth-user-id'] ?? null })));
  app.on('upgrade', (req, socket) => socket.end(`HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nx-user: ${req.headers['x-auth-user-id'] ?? '-'}\r\n\r\n`));
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const upstream = `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
  p = await startAccounts({ TRUSTED_PROXIES: '127.0.0.1', APPS: JSON.stringify({ 'acme/private': { url: upstream, requireSession: true } }) });
  token = (await signInUser({ dataDir: p.config.dataDir, config: p.config }, 'acme', 'mallory')).cookie.split('=')[1]!;
});
after(async () => {
  await p.close();
  app.close();
});

/** One request as the trusted load balancer passes it, with `proto` as its x-forwarded-proto line(s); the status line and head. */
function send(path: string, proto: string, cookie: string, upgrade = false): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(Number(p.port), '127.0.0.1');
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('end', () => resolve(out.slice(0, out.indexOf('\r\n\r\n'))));
    s.on('error', reject);
    const ws = upgrade ? 'Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n' : 'Connection: close\r\n';
    s.write(`GET ${path} HTTP/1.1\r\nHost: acme.localhost:${p.port}\r\n${proto}Cookie: ${cookie}\r\n${ws}\r\n`);
  });
}

const HTTPS_LISTS = ['X-Forwarded-Proto: https\r\n', 'X-Forwarded-Proto: https, https\r\n', 'X-Forwarded-Proto: http, https\r\n', 'X-Forwarded-Proto: http\r\nX-Forwarded-Proto: https\r\n'];

describe('under HTTPS by the last x-forwarded-proto entry, the plain session cookie counts on no route', () => {
  for (const proto of HTTPS_LISTS) {
    const what = JSON.stringify(proto.trim());
    test(`${what}: /verify (raw and Fastify), an app, a WebSocket upgrade`, async () => {
      for (const path of ['/private/_account/verify', '/private/_account/verify?via=fastify']) {
        assert.match(await send(path, proto, `session=${token}`), /^HTTP\/1.1 401 /, `${path} with the plain cookie`);
        assert.match(await send(path, proto, `__Host-session=${token}`), /^HTTP\/1.1 200 /, `${path} with __Host-session`);
      }
      assert.match(await send('/private/page', proto, `session=${token}`), /^HTTP\/1.1 302 /, 'an app with the plain cookie: sent to sign in');
      assert.match(await send('/private/page', proto, `__Host-session=${token}`), /^HTTP\/1.1 200 /);
      assert.match(await send('/private/live', proto, `session=${token}`, true), /^HTTP\/1.1 401 /, 'an upgrade with the plain cookie');
      assert.match(await send('/private/live', proto, `__Host-session=${token}`, true), /x-user: usr_/, 'an upgrade with __Host-session');
    });
  }

  test('the last entry http: plain HTTP on every route, as before (the __Host- cookie is the one that does not count)', async () => {
    for (const proto of ['X-Forwarded-Proto: http\r\n', 'X-Forwarded-Proto: https, http\r\n']) {
      for (const path of ['/private/_account/verify', '/private/_account/verify?via=fastify']) {
        assert.match(await send(path, proto, `session=${token}`), /^HTTP\/1.1 200 /, `${proto.trim()} ${path}`);
        assert.match(await send(path, proto, `__Host-session=${token}`), /^HTTP\/1.1 401 /, `${proto.trim()} ${path}`);
      }
    }
  });
});
