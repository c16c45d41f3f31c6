// GitHub sign-in (OAuth, not OIDC) against a stand-in GitHub on loopback: the code exchange with PKCE, then the
// user and the primary *verified* email from the API.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Browser, startAccounts, type AccountsProduct } from './helpers/accounts.ts';

let github: Server;
let p: AccountsProduct;
let emails: { email: string; primary: boolean; verified: boolean }[] = [];
const challenges = new Map<string, string>(); // code → code_challenge sent to /authorize

before(async () => {
  github = createServer((req, res) => {
    const url = new URL(req.url!, 'http://github.test');
    const json = (status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (url.pathname === '/login/oauth/authorize') {
      // The user approves at once: back to redirect_uri with a code bound to this PKCE challenge.
      const code = `code-${challenges.size + 1}`;
      challenges.set(code, url.searchParams.get('code_challenge')!);
      const back = new URL(url.searchParams.get('redirect_uri')!);
      back.searchParams.set('code', code);
      back.searchParams.set('state', url.searchParams.get('state')!);
      return res.writeHead(302, { location: back.href }).end();
    }
    if (url.pathname === '/login/oauth/access_token' && req.method === 'POST') {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        const form = new URLSearchParams(body);
        const verifier = form.get('code_verifier') ?? '';
        const expected = challenges.get(form.get('code') ?? '');
        const pkceOk = expected !== undefined && createHash('sha256').update(verifier).digest('base64url') === expected;
        if (form.get('client_id') !== 'gh-client' || form.get('client_secret') !== 'gh-secret' || !pkceOk) return json(400, { error: 'bad_verification_code' });
        json(200, { access_token: 'gho_test', token_type: 'bearer', scope: 'read:user,user:email' });
      });
      return;
    }
    if (req.headers.authorization !== 'Bearer gho_test') return json(401, { message: 'Bad credentials' });
    if (url.pathname === '/user') return json(200, { id: 583231, login: 'octocat', name: 'The Octocat', avatar_url: 'https://avatars.example/u/583231' });
    if (url.pathname === '/user/emails') return json(200, emails);
    json(404, { message: 'Not Found' });
  });
  await new Promise<void>((r) => github.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(github.address() as AddressInfo).port}`;
  p = await startAccounts({ ACCOUNT_GITHUB_CLIENT_ID: 'gh-client', ACCOUNT_GITHUB_CLIENT_SECRET: 'gh-secret' }, { github: { webUrl: base, apiUrl: base } });
});
after(async () => {
  await p.close();
  await new Promise<void>((r) => github.close(() => r()));
});

async function signIn(): Promise<Browser> {
  const browser = new Browser();
  const origin = `http://acme.localhost:${p.port}`;
  const login = await browser.fetch(`${origin}/web/_account/login?return_to=/web/dashboard`, { connectTo: p.url });
  assert.equal(login.status, 302, login.text);
  const authorize = new URL(login.location!);
  assert.equal(authorize.searchParams.get('code_challenge_method'), 'S256');
  assert.equal(authorize.searchParams.get('nonce'), null, 'GitHub is not OIDC: no nonce');
  assert.equal(authorize.searchParams.get('redirect_uri'), `${origin}/web/_account/callback`);
  const back = await browser.fetch(login.location!);
  const callback = await browser.fetch(back.location!, { connectTo: p.url });
  assert.equal(callback.status, 302, callback.text);
  assert.equal(callback.location, `${origin}/web/dashboard`, 'back to return_to on the same host');
  return browser;
}

test('signs in with GitHub and takes the primary verified email', async () => {
  emails = [{ email: 'work@example.com', primary: false, verified: true }, { email: 'octo@example.com', primary: true, verified: true }];
  const browser = await signIn();
  const v = await browser.fetch(`http://acme.localhost:${p.port}/web/_account/verify`, { connectTo: p.url });
  assert.equal(v.status, 200, v.text);
  assert.equal(v.json.user.email, 'octo@example.com');
  assert.equal(v.json.user.login, 'octocat');
  assert.equal(v.json.user.name, 'The Octocat');
  assert.equal(v.headers['x-auth-user-email'], 'octo@example.com');
});

test('an unverified primary email is not taken', async () => {
  emails = [{ email: 'unverified@example.com', primary: true, verified: false }, { email: 'other@example.com', primary: false, verified: true }];
  const browser = await signIn();
  const v = await browser.fetch(`http://acme.localhost:${p.port}/web/_account/verify`, { connectTo: p.url });
  assert.equal(v.status, 200);
  assert.equal(v.json.user.email, null);
  assert.equal(v.json.user.login, 'octocat');
});
