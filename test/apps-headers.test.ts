// SPEC 8 header hygiene on the way to apps (plain requests and WebSocket upgrades), and the x-auth-user-* headers the
// proxy and GET /verify set: a real upstream on loopback behind the real proxy and account service.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { signIn, startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { signInUser } from './helpers/session.ts';

let upstream: Server;
let p: AccountsProduct;

before(async () => {
  // Echoes the headers it got: as JSON to requests, and as the body of a 403 declining an upgrade (the proxy relays it).
  const echo = (headers: unknown) => JSON.stringify({ headers });
  upstream = createServer((req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(echo(req.headers)));
  upstream.on('upgrade', (req, socket) => {
    const body = echo(req.headers);
    socket.end(`HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  p = await startAccounts({
    APPS: JSON.stringify({ 'acme/web': `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` }),
    ACCOUNT_LOGIN_RATE_BURST: '1000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '1000',
  });
});
after(async () => {
  await p.close();
  upstream.closeAllConnections();
  await new Promise<void>((r) => upstream.close(() => r()));
});

/** The headers the app got for a WebSocket upgrade sent with `headers`. */
function upgradeHeaders(headers: Record<string, string>): Promise<Record<string, string>> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${p.url}/web/live`, { headers: { host: `acme.localhost:${p.port}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', ...headers } });
    req.on('upgrade', () => reject(new Error('the app was to decline the upgrade')));
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => (res.statusCode === 403 ? resolve(JSON.parse(body).headers) : reject(new Error(`${res.statusCode} ${body}`))));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The names among `got` that are one of `forged` in any spelling a server folds (case, `_` or `.` for `-`). */
function reached(got: Record<string, unknown>, forged: Record<string, string>): string[] {
  const fold = (name: string) => name.toLowerCase().replace(/[^a-z0-9-]/g, '-');
  return Object.keys(got).filter((name) => Object.keys(forged).some((f) => fold(f) === fold(name)));
}

describe('headers a client may not send an app', () => {
  test('a forged x-auth-user-* or x-scopebase-* from a client never reaches the app', async () => {
    const r = await p.call('/web/', { headers: { 'x-auth-user-id': 'usr_admin', 'x-auth-user-email': 'root@example.com', 'x-scopebase-org': 'globex' } });
    assert.equal(r.json.headers['x-auth-user-id'], undefined);
    assert.equal(r.json.headers['x-auth-user-email'], undefined);
    assert.equal(r.json.headers['x-scopebase-org'], undefined);
  });

  test('the same headers spelled with underscores or mixed case never reach the app either (servers fold _ into -)', async () => {
    const forged = { x_auth_user_id: 'usr_admin', 'x-auth-user_email': 'root@example.com', X_Scopebase_Org: 'globex', x_forwarded_for: '10.9.9.9', 'X_Real_IP': '10.9.9.9', 'x-real-ip': '10.9.9.9', x_forwarded_proto: 'https' };
    const r = await p.call('/web/', { headers: forged });
    assert.equal(r.status, 200);
    for (const name of Object.keys(r.json.headers)) {
      const folded = name.toLowerCase().replaceAll('_', '-');
      assert.ok(!folded.startsWith('x-auth-user-') && !folded.startsWith('x-scopebase-') && folded !== 'x-real-ip', `${name} reached the app`);
      if (folded.startsWith('x-forwarded-')) assert.ok(!name.includes('_'), `${name} reached the app`);
    }
    assert.ok(!String(r.json.headers['x-forwarded-for']).includes('10.9.9.9'), 'an untrusted client cannot add to x-forwarded-for');
  });

  test('the same headers spelled with dots never reach the app (servers that map names to variables fold . into _, as -)', async () => {
    const forged = { 'X.Auth.User.Id': 'usr_admin', 'x.auth.user.email': 'root@example.com', 'x-auth.user-login': 'root', 'X.Scopebase.Org': 'globex',
      'X.Real.IP': '10.9.9.9', 'Remote.User': 'root', 'X.Original.URL': '/admin', 'x_auth.user_name': 'root' };
    const r = await p.call('/web/', { headers: { ...forged, 'x.forwarded.for': '10.9.9.9', 'X.Forwarded.Proto': 'https' } });
    assert.equal(r.status, 200);
    assert.deepEqual(reached(r.json.headers, forged), [], 'a plain request');
    assert.deepEqual(reached(await upgradeHeaders(forged), forged), [], 'a WebSocket upgrade');
    assert.deepEqual(Object.keys(r.json.headers).filter((name) => name.includes('.')), [], 'forwarding headers spelled with dots neither');
    assert.equal(r.json.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal(r.json.headers['x-forwarded-proto'], 'http');
  });

  test('client-address headers of CDNs and load balancers never reach the app from a client (True-Client-IP, CF-Connecting-IP, …)', async () => {
    const forged = { 'Client-IP': '10.9.9.9', 'X-Client-IP': '10.9.9.9', 'True-Client-IP': '10.9.9.9', 'CF-Connecting-IP': '10.9.9.9', 'CF-Connecting-IPv6': '::9',
      'Fastly-Client-IP': '10.9.9.9', 'X-Cluster-Client-IP': '10.9.9.9', 'X-Original-Forwarded-For': '10.9.9.9', 'X-Originating-IP': '10.9.9.9',
      'X-Remote-IP': '10.9.9.9', 'X-Remote-Addr': '10.9.9.9', 'X-Envoy-External-Address': '10.9.9.9', true_client_ip: '10.9.9.9' };
    const r = await p.call('/web/', { headers: forged });
    assert.equal(r.status, 200);
    assert.deepEqual(Object.entries(r.json.headers).filter(([, v]) => String(v).includes('10.9.9.9') || v === '::9'), []);
    assert.ok(r.json.headers['x-forwarded-for'], 'the client\'s address as the proxy saw it is still there');
  });

  test('scheme and host headers other front ends set never reach the app from a client (Front-End-Https, X-Url-Scheme, X-Host, …)', async () => {
    const forged = { 'Front-End-Https': 'on', 'X-Url-Scheme': 'https', 'X-HTTPS': 'on', HTTPS: 'on', 'X-Host': 'evil.example', 'X-Original-Host': 'evil.example', 'X-ProxyUser-Ip': '10.9.9.9', x_url_scheme: 'https' };
    const r = await p.call('/web/', { headers: forged });
    assert.equal(r.status, 200);
    assert.deepEqual(reached(r.json.headers, forged), [], 'a plain request');
    assert.deepEqual(reached(await upgradeHeaders(forged), forged), [], 'a WebSocket upgrade');
    assert.equal(r.json.headers['x-forwarded-proto'], 'http', 'the scheme the proxy saw');
  });

  test('identity headers other auth proxies use never reach the app (Remote-User, X-Auth-Request-*, X-WEBAUTH-*, …)', async () => {
    const forged = { 'x-auth-user': 'root', 'X-Auth-Request-User': 'root', 'x-auth-request-email': 'root@example.com', 'Remote-User': 'root', remote_user: 'root', 'X-Remote-User': 'root', 'X-WEBAUTH-USER': 'admin', 'x-user': 'root', 'x-email': 'root@example.com', 'x-org': 'other', 'x-repo': 'other',
      // Cloud front doors' identity headers (IAP, ALB, Azure, Cloudflare Access, Kong): an app moved from behind one trusts them.
      'X-Goog-Authenticated-User-Email': 'accounts.google.com:root@example.com', 'X-Goog-IAP-JWT-Assertion': 'x', 'X-Amzn-Oidc-Identity': 'root',
      'X-Amzn-Oidc-Data': 'x', 'X-MS-Client-Principal-Name': 'root', 'X-MS-Client-Principal': 'x', 'Cf-Access-Authenticated-User-Email': 'root@example.com',
      'Cf-Access-Jwt-Assertion': 'x', 'X-Consumer-Username': 'root', 'X-Authenticated-Userid': 'root', X_Authenticated_User: 'root' };
    const r = await p.call('/web/', { headers: forged });
    assert.equal(r.status, 200);
    assert.deepEqual(reached(r.json.headers, forged), []);
  });

  test('identity and path-override headers other proxies and servers trust never reach the app, on requests and upgrades', async () => {
    const forged = {
      'X-User-Id': 'admin', 'X-User-Email': 'root@example.com', 'X-User-Name': 'root', 'X-Username': 'root',
      'X-Original-URL': '/admin', 'X-Rewrite-URL': '/admin', 'X-Original-URI': '/admin', x_original_url: '/admin',
      'X-Forwarded-User': 'root', 'X-Forwarded-Email': 'root@example.com', 'X-Forwarded-Preferred-Username': 'root', 'X-Forwarded-Groups': 'admins',
      'X-Remote-User': 'root', 'X-Remote-Group': 'admins', 'Remote-Groups': 'admins', 'Remote-Email': 'root@example.com', 'Remote-Name': 'root',
      'X-Auth-Request-User': 'root', 'X-Auth-Request-Email': 'root@example.com', 'Remote-User': 'root', 'X-Authenticated-User': 'root', 'X-WEBAUTH-USER': 'admin',
      'X-authentik-username': 'root', 'X-Pomerium-Jwt-Assertion': 'x', 'X-Pomerium-Claim-Email': 'root@example.com', 'Tailscale-User-Login': 'root@example.com',
      'X-Vouch-User': 'root', 'X-SSL-Client-S-DN': 'CN=root', 'X-Client-Cert': 'x', 'X-Client-Verify': 'SUCCESS',
    };
    const r = await p.call('/web/', { headers: forged });
    assert.equal(r.status, 200);
    assert.deepEqual(reached(r.json.headers, forged), [], 'a plain request');
    assert.deepEqual(reached(await upgradeHeaders(forged), forged), [], 'a WebSocket upgrade');
  });
});

describe('x-auth-user-* values', () => {
  test('are percent-encoded when not printable ASCII or holding a %, so decodeURIComponent gives back the exact value; /verify and apps alike', async () => {
    const seen = [];
    for (const email of ['zoë@example.com', 'zo%c3%ab@example.com', '100%@example.com', 'plain@example.com']) {
      const { browser } = await signIn(p, { email, returnTo: '/web/' });
      const verify = await browser.fetch(`http://acme.localhost:${p.port}/web/_account/verify`, { connectTo: p.url });
      assert.equal(verify.status, 200, verify.text);
      const app = await browser.fetch(`http://acme.localhost:${p.port}/web/`, { connectTo: p.url });
      const expected = { id: verify.json.user.id, email, name: 'Dev User', login: email.split('@')[0] };
      for (const [field, value] of Object.entries(expected)) {
        const name = `x-auth-user-${field}`;
        assert.equal(decodeURIComponent(String(app.json.headers[name])), value, `${name} of ${email} decodes to the exact value`);
        assert.match(String(app.json.headers[name]), /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/, `${name} of ${email} is a visible-ASCII header value`);
      }
      seen.push({ email, verify: verify.headers, app: app.json.headers });
    }
    // GET /verify sends the same four headers, encoded by the same function (a forward-auth proxy passes them on).
    for (const { email, verify, app } of seen) {
      for (const name of ['x-auth-user-id', 'x-auth-user-email', 'x-auth-user-name', 'x-auth-user-login']) {
        assert.equal(verify[name], app[name], `${name} of ${email}: /verify and the app get the same`);
      }
    }
  });

  // HTTP drops a header value's leading and trailing spaces: sent as they were, a login or name " admin" (a provider
  // where users pick their own) reached apps and forward-auth proxies as "admin", another user's (attack round 6).
  test('a value beginning or ending with a space is percent-encoded too, so it never reaches an app as another user\'s', async () => {
    for (const login of [' admin', 'admin ', '  admin  ']) {
      const user = await signInUser({ dataDir: p.config.dataDir, config: p.config }, 'acme', login);
      const app = await p.call('/web/', { headers: { cookie: user.cookie } });
      const verify = await p.call('/web/_account/verify', { headers: { cookie: user.cookie } });
      for (const [name, value] of [['x-auth-user-login', login], ['x-auth-user-name', login], ['x-auth-user-email', `${login}@example.test`]]) {
        if (value !== value.trim()) assert.notEqual(app.json.headers[name], value.trim(), `${name} of ${JSON.stringify(login)} is not the trimmed value`);
        assert.equal(decodeURIComponent(String(app.json.headers[name])), value, `${name} of ${JSON.stringify(login)} decodes to the exact value at the app`);
        assert.equal(decodeURIComponent(String(verify.headers[name])), value, `${name} of ${JSON.stringify(login)} decodes to the exact value from /verify`);
      }
    }
  });
});
