// A generic OIDC issuer (oauth2-mock-server on loopback): ID token validation failures, provider down or slow.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { OAuth2Server } from 'oauth2-mock-server';
import { Browser, startAccounts, type AccountsProduct } from './helpers/accounts.ts';

let idp: OAuth2Server;
let p: AccountsProduct;

before(async () => {
  idp = new OAuth2Server();
  await idp.issuer.keys.generate('RS256');
  await idp.start(0, '127.0.0.1');
  p = await startAccounts({ ACCOUNT_OIDC_ISSUER: idp.issuer.url!, ACCOUNT_OIDC_CLIENT_ID: 'scopebase', ACCOUNT_OIDC_CLIENT_SECRET: 'test-client-secret', ACCOUNT_LOGIN_RATE_BURST: '1000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '1000' });
});
after(async () => {
  await p.close();
  await idp.stop();
});

async function signInVia(product: AccountsProduct): Promise<{ browser: Browser; callback: Awaited<ReturnType<Browser['fetch']>> }> {
  const browser = new Browser();
  const origin = `http://acme.localhost:${product.port}`;
  const login = await browser.fetch(`${origin}/web/_account/login`, { connectTo: product.url });
  assert.equal(login.status, 302, login.text);
  const authorize = await browser.fetch(login.location!);
  assert.equal(authorize.status, 302, authorize.text);
  const callback = await browser.fetch(authorize.location!, { connectTo: product.url });
  return { browser, callback };
}

/**
 * Signs in with the provider's tokens and userinfo changed while it runs (both the access token and the ID token are
 * signed: every token changes); the callback's answer and /verify's afterwards.
 */
async function signInWith(claims: (payload: Record<string, unknown>) => void, userinfo: Record<string, unknown>) {
  const onToken = (token: { payload: Record<string, unknown> }) => claims(token.payload);
  const onInfo = (res: { body: unknown }) => { res.body = userinfo; };
  idp.service.on('beforeTokenSigning', onToken);
  idp.service.on('beforeUserinfo', onInfo);
  const { browser, callback } = await signInVia(p).finally(() => {
    idp.service.off('beforeTokenSigning', onToken);
    idp.service.off('beforeUserinfo', onInfo);
  });
  return { callback, verify: await browser.fetch(`http://acme.localhost:${p.port}/web/_account/verify`, { connectTo: p.url }) };
}

describe('a configured OIDC issuer', () => {
  test('signs in with a valid ID token (discovery, PKCE, nonce)', async () => {
    const user = { sub: 'oidc-user-1', email: 'oidc@example.com', email_verified: true, name: 'Oidc User' };
    const { callback, verify: v } = await signInWith((t) => Object.assign(t, user), user);
    assert.equal(callback.status, 302, callback.text);
    assert.equal(v.status, 200);
    assert.equal(v.json.user.email, 'oidc@example.com');
  });

  const tamper: [string, (payload: Record<string, unknown>) => void][] = [
    ['wrong aud', (t) => { t.aud = 'someone-else'; }],
    ['wrong iss', (t) => { t.iss = 'https://evil.example'; }],
    ['wrong nonce', (t) => { t.nonce = 'not-the-nonce'; }],
    ['expired ID token', (t) => { t.exp = Math.floor(Date.now() / 1000) - 3600; t.iat = Math.floor(Date.now() / 1000) - 7200; }],
  ];
  for (const [name, change] of tamper) {
    test(`refuses an ID token with ${name}: 401 unauthenticated, no cookie`, async () => {
      const listener = (token: { payload: Record<string, unknown> }) => change(token.payload);
      idp.service.on('beforeTokenSigning', listener);
      const { callback } = await signInVia(p).finally(() => idp.service.off('beforeTokenSigning', listener));
      assert.equal(callback.status, 401, callback.text);
      assert.equal(callback.json.error.code, 'unauthenticated');
      assert.equal(callback.headers['set-cookie'], 'scopebase-login=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax', 'no session; the spent binding cookie cleared');
    });
  }

  // AWS Cognito's userinfo sends `"email_verified": "false"`, a string: read as "not false", it let an unverified
  // address reach apps as x-auth-user-email (attack round 6).
  for (const verified of ['false', 'FALSE', false, 0, null] as unknown[]) {
    test(`email_verified ${JSON.stringify(verified)} in userinfo: the user has no email, at /verify nor in x-auth-user-email`, async () => {
      const sub = `unverified-${JSON.stringify(verified)}`;
      const { callback, verify: v } = await signInWith((t) => { t.sub = sub; delete t.email; }, { sub, email: 'ceo@victim.example', email_verified: verified, name: 'Mallory' });
      assert.equal(callback.status, 302, callback.text);
      assert.equal(v.status, 200);
      assert.equal(v.json.user.email, null);
      assert.equal(v.json.user.name, 'Mallory');
      assert.equal(v.headers['x-auth-user-email'], undefined);
    });
  }

  test('email_verified "true" (a string) or absent: the email is used', async () => {
    for (const [sub, verified] of [['verified-string', 'true'], ['verified-absent', undefined]] as const) {
      const { verify: v } = await signInWith((t) => { t.sub = sub; delete t.email; }, { sub, email: `${sub}@example.com`, ...(verified === undefined ? {} : { email_verified: verified }) });
      assert.equal(v.json.user.email, `${sub}@example.com`, sub);
      assert.equal(v.headers['x-auth-user-email'], `${sub}@example.com`, sub);
    }
  });

  test('the provider declining the sign-in (access_denied) is 400 saying so, with a way to start again', async () => {
    const origin = `http://acme.localhost:${p.port}`;
    const declined = async (accept: string) => {
      const browser = new Browser();
      const login = await browser.fetch(`${origin}/web/_account/login?return_to=%2Fweb%2Fdash`, { connectTo: p.url });
      const state = new URL(login.location!).searchParams.get('state')!;
      return browser.fetch(`${origin}/web/_account/callback?error=access_denied&state=${state}`, { connectTo: p.url, headers: { accept } });
    };
    const r = await declined('application/json');
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_request');
    assert.equal(r.json.error.details.providerError, 'access_denied');
    assert.match(r.json.error.message, /declined/);
    assert.match(r.json.error.message, /start the sign-in again/);
    assert.doesNotMatch(r.json.error.message, /code exchange/);
    const page = await declined('text/html');
    assert.equal(page.status, 400);
    assert.match(page.text, /declined/);
    assert.match(page.text, /<a class="button primary" href="\/web\/_account\/login\?return_to=%2Fweb%2Fdash">Start the sign-in again<\/a>/);
  });

  test('the provider failing during the callback (503 at the code exchange) says to start the sign-in again, not to retry', async () => {
    const fail = (res: { statusCode: number; body: unknown }) => { res.statusCode = 503; res.body = 'Service Unavailable'; };
    idp.service.on('beforeResponse', fail);
    const { callback } = await signInVia(p).finally(() => idp.service.off('beforeResponse', fail));
    assert.equal(callback.status, 503, callback.text);
    assert.equal(callback.json.error.code, 'unavailable');
    assert.match(callback.json.error.message, /start the sign-in again/);
    assert.doesNotMatch(callback.json.error.message, /in a moment|in time/);
  });
});

describe('provider down or slow', () => {
  test('down (connection refused): 503 unavailable with Retry-After, quickly', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const q = await startAccounts({ ACCOUNT_OIDC_ISSUER: `http://127.0.0.1:${port}`, ACCOUNT_OIDC_CLIENT_ID: 'x' });
    try {
      const r = await q.call('/web/_account/login', { headers: { accept: 'text/html' } });
      assert.equal(r.status, 503);
      assert.ok(r.headers['retry-after']);
      assert.match(r.text, /could not be reached/);
      assert.match(r.text, /try again in a moment/);
    } finally {
      await q.close();
    }
  });

  test('a host name that does not resolve: 503 saying so, not "did not answer in time"', async () => {
    const q = await startAccounts({ ACCOUNT_OIDC_ISSUER: 'http://scopebase-test.invalid', ACCOUNT_OIDC_CLIENT_ID: 'x' });
    try {
      const r = await q.call('/web/_account/login');
      assert.equal(r.status, 503);
      assert.equal(r.json.error.code, 'unavailable');
      assert.match(r.json.error.message, /scopebase-test\.invalid could not be resolved \(DNS\)/);
      assert.doesNotMatch(r.json.error.message, /in time/);
    } finally {
      await q.close();
    }
  });

  test('slow (accepts, never answers): 503 after ACCOUNT_PROVIDER_TIMEOUT_MS, no hang', async () => {
    const sockets: Socket[] = [];
    const silent: Server = createServer((s) => sockets.push(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const q = await startAccounts({ ACCOUNT_OIDC_ISSUER: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, ACCOUNT_OIDC_CLIENT_ID: 'x', ACCOUNT_PROVIDER_TIMEOUT_MS: '300' });
    try {
      const t0 = Date.now();
      const r = await q.call('/web/_account/login');
      assert.equal(r.status, 503);
      assert.equal(r.json.error.code, 'unavailable');
      assert.match(r.json.error.message, /did not answer in time/);
      assert.ok(Date.now() - t0 < 3000);
    } finally {
      await q.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => silent.close(() => r()));
    }
  });
});

describe('several providers', () => {
  test('/login without provider lists them; provider=github goes to GitHub', async () => {
    const q = await startAccounts({ ACCOUNT_OIDC_ISSUER: idp.issuer.url!, ACCOUNT_OIDC_CLIENT_ID: 'scopebase', ACCOUNT_GITHUB_CLIENT_ID: 'gh-id', ACCOUNT_GITHUB_CLIENT_SECRET: 'gh-secret' });
    try {
      const page = await q.call('/web/_account/login?return_to=%2Fweb%2Fx');
      assert.equal(page.status, 200);
      assert.match(page.text, /href="\/web\/_account\/login\?provider=oidc&amp;return_to=%2Fweb%2Fx"/);
      assert.match(page.text, /Sign in with GitHub/);
      const gh = await q.call('/web/_account/login?provider=github');
      assert.equal(gh.status, 302);
      const u = new URL(String(gh.headers.location));
      assert.equal(u.origin + u.pathname, 'https://github.com/login/oauth/authorize');
      assert.equal(u.searchParams.get('client_id'), 'gh-id');
      assert.equal(u.searchParams.get('code_challenge_method'), 'S256');
      assert.equal(u.searchParams.get('nonce'), null);
    } finally {
      await q.close();
    }
  });
});

describe('an issuer identifier ending in / (authentik\'s …/application/o/{slug}/)', () => {
  test('discovery works with ACCOUNT_OIDC_ISSUER written with or without the /; an issuer that differs otherwise is still refused', async () => {
    // Discovery documents only: /login's redirect to the authorization endpoint shows discovery passed.
    const issuers: Record<string, string> = { '/application/o/app': '/application/o/app/', '/realms/x': '/realms/x', '/elsewhere': '/other/' };
    const server = createHttpServer((req, res) => {
      const path = (req.url ?? '').replace(/\/?\.well-known\/openid-configuration$/, '');
      const stated = issuers[path.replace(/\/+$/, '')];
      if (stated === undefined) return void res.writeHead(404).end();
      const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ issuer: origin + stated, authorization_endpoint: `${origin}/authorize`, token_endpoint: `${origin}/token`, jwks_uri: `${origin}/jwks`, response_types_supported: ['code'], subject_types_supported: ['public'], id_token_signing_alg_values_supported: ['RS256'] }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      // Before: the first two answered 401 "discovered metadata issuer does not match the expected issuer".
      for (const [issuer, ok] of [[`${origin}/application/o/app/`, true], [`${origin}/application/o/app`, true], [`${origin}/realms/x/`, true], [`${origin}/elsewhere/`, false]] as const) {
        const q = await startAccounts({ ACCOUNT_OIDC_ISSUER: issuer, ACCOUNT_OIDC_CLIENT_ID: 'scopebase', ACCOUNT_OIDC_CLIENT_SECRET: 'test-client-secret' });
        try {
          const r = await q.call('/web/_account/login');
          if (ok) {
            assert.equal(r.status, 302, `${issuer}: ${r.text}`);
            assert.equal(String(r.headers.location).split('?')[0], `${origin}/authorize`);
          } else {
            assert.equal(r.status, 401, `${issuer}: ${r.text}`);
            assert.match(r.json.error.details.reason, /issuer does not match/);
          }
        } finally {
          await q.close();
        }
      }
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});
