// RFC 9112 3.2.2: a request whose target is an absolute URL (a client using the proxy as its HTTP proxy, curl -x) is
// served as its path, kept as sent. Normalized by a URL parser, `/web/%2e%2e/private/x` became `/private/x`: another
// repo than the one a path filter in front of the proxy (or the same request in origin form) saw (attack round 6).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { signIn } from './helpers/session.ts';

let app: Server;
let p: AccountsProduct;
let cookie: string;

/** One request with its target exactly as given; the status line and the body. */
function send(target: string, headers = ''): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const s = connect(Number(p.port), '127.0.0.1');
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('end', () => resolve({ status: Number(out.slice(9, 12)), body: out.slice(out.indexOf('\r\n\r\n') + 4) }));
    s.on('error', reject);
    s.write(`GET ${target} HTTP/1.1\r\nHost: acme.localhost:${p.port}\r\n${headers}Connection: close\r\n\r\n`);
  });
}

before(async () => {
  // The app answers with the repo it was reached as (its base path) and the path it got.
  app = createServer((req, res) => res.end(JSON.stringify({ url: req.url })));
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const upstream = `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
  p = await startAccounts({ APPS: JSON.stringify({ 'acme/web': `${upstream}/web-app`, 'acme/private': { url: `${upstream}/private-app`, requireSession: true } }) });
  cookie = await signIn({ dataDir: p.config.dataDir, config: p.config }, 'acme', 'alice');
});
after(async () => {
  await p.close();
  app.close();
});

describe('an absolute-form target reaches what the same path in origin form reaches', () => {
  const paths = [
    '/web/some/page?q=1',
    '/web/a/%2e%2e/b',
    '/web/%2e%2e/private/x',
    '/web/.%2E/private/x',
    '/web/%2E%2E/%2e%2e/private/x',
    '/web/../private/x',
    '/web/./../private/x?y=%2e%2e',
  ];
  for (const path of paths) {
    test(path, async () => {
      const origin = await send(path);
      const absolute = await send(`http://acme.localhost:${p.port}${path}`);
      assert.equal(origin.status, 200, origin.body);
      assert.equal(absolute.status, origin.status, absolute.body);
      assert.equal(JSON.parse(absolute.body).url, JSON.parse(origin.body).url);
      assert.match(JSON.parse(absolute.body).url, /^\/web-app\//, 'repo web\'s app, never private\'s');
    });
  }

  test('the product\'s own routes behind a dot segment are not reached in either form', async () => {
    for (const path of ['/web/%2e%2e/private/_account/verify', '/web/%2e%2e/private/_db/status', '/nothing/%2e%2e/web/_account/verify']) {
      const origin = await send(path, `Cookie: ${cookie}\r\n`);
      const absolute = await send(`http://acme.localhost:${p.port}${path}`, `Cookie: ${cookie}\r\n`);
      assert.equal(absolute.status, origin.status, `${path}: ${absolute.body}`);
      assert.equal(absolute.body, origin.body, path);
      assert.doesNotMatch(absolute.body, /"user"|"stub"/, `${path} reached /_account or /_db`);
    }
  });

  test('a target without a path is the root; a scheme without http(s) or a \\ after the host is refused', async () => {
    assert.equal((await send(`http://acme.localhost:${p.port}`)).status, (await send('/')).status);
    for (const target of [`ftp://acme.localhost:${p.port}/web/`, `http://acme.localhost:${p.port}\\web/`, `http:acme.localhost:${p.port}/web/`]) {
      const r = await send(target);
      assert.equal(r.status, 400, `${target}: ${r.body}`);
      assert.match(JSON.parse(r.body).error.message, /neither a path nor an absolute http\(s\) URL|request line is malformed/, target);
    }
  });
});
