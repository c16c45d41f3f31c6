// Attack round 10, SPEC 8 apps: a dot segment with `;parameters` (`..;`), which Tomcat, Jetty and Spring read as
// `..`, reached the app as sent, so such an upstream served `/web/..;/x` from outside web's base path — another app
// on the same upstream (here acme/private, requireSession, at its root) without a session. And the paths the product
// keeps for itself (`/_db`, `/_account`) reached the app when written `/./_account/…`, `/x/../_db/…` or `//_account/…`.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from 'undici';
import { appsProxyForSuite, upgrade } from './helpers/app-upstream.ts';
import type { AccountsProduct } from './helpers/accounts.ts';

let p: AccountsProduct;
appsProxyForSuite((started) => (p = started.p));

const PATHS = ['/web/..;/private/x', '/web/a/..;/..;/x', '/web/..;jsessionid=1/x', '/web/%2e%2e;/x', '/web/..%3b/x', '/web/.;/x', '/web/..;'];

describe('a dot segment with ;parameters never reaches an app', () => {
  test('plain requests: 400 invalid_request naming the `..;`, nothing sent to the app', async () => {
    // Raw paths as an attacker's client sends them (a URL parser on this side would keep or mangle them).
    const client = new Client(p.url);
    try {
      for (const path of PATHS) {
        const res = await client.request({ method: 'GET', path, headers: { host: `acme.localhost:${p.port}` } });
        const body = await res.body.json() as { error: { code: string; message: string }; url?: string };
        assert.equal(res.statusCode, 400, path);
        assert.equal(body.error.code, 'invalid_request', path);
        assert.match(body.error.message, /;parameters/, path);
      }
      // Names with dots and semicolons that are no dot segment still go through.
      for (const [path, expected] of [['/web/a;b/x', '/base/a;b/x'], ['/web/...;/x', '/base/...;/x'], ['/web/.well-known;x', '/base/.well-known;x']]) {
        const res = await client.request({ method: 'GET', path: path!, headers: { host: `acme.localhost:${p.port}` } });
        const body = await res.body.json() as { url: string };
        assert.equal(res.statusCode, 200, path);
        assert.equal(body.url, expected, path);
      }
    } finally {
      await client.close();
    }
  });

  test('WebSocket upgrades too', async () => {
    await assert.rejects(upgrade('/web/..;/ws', p), /no upgrade: 400 .*invalid_request/);
    const ok = await upgrade('/web/a;b/ws', p);
    assert.equal(JSON.parse(ok.message).url, '/base/a;b/ws');
  });
});

describe('the product\'s own paths never reach an app, however they are written', () => {
  test('dot segments, escapes and doubled slashes before /_account or /_db: 404, nothing sent to the app', async () => {
    const client = new Client(p.url);
    try {
      for (const path of ['/web/./_account/verify', '/web/x/../_account/', '/web/%2e/_db/query', '/web//_account/verify', '/web/_account%2fverify', '/web/.//_db']) {
        const res = await client.request({ method: 'GET', path, headers: { host: `acme.localhost:${p.port}`, accept: 'application/json' } });
        const body = await res.body.json() as { error?: { code: string }; url?: string };
        assert.equal(res.statusCode, 404, `${path}: ${JSON.stringify(body).slice(0, 120)}`);
        assert.equal(body.error?.code, 'not_found', path);
      }
      // A page whose name only starts like them is the app's.
      const own = await client.request({ method: 'GET', path: '/web/./_accounts/x', headers: { host: `acme.localhost:${p.port}` } });
      assert.equal(((await own.body.json()) as { url: string }).url, '/base/_accounts/x');
    } finally {
      await client.close();
    }
    await assert.rejects(upgrade('/web/./_account/ws', p), /no upgrade: 404 .*not_found/);
  });
});
