// A sign-in provider's answers are read to a bound (PROVIDER_ANSWER_MAX_BYTES, 1 MiB): a broken or compromised IdP
// answering 50 MB at its token endpoint (or discovery, userinfo, GitHub's API) added ~350 MB RSS to the server per
// sign-in (attack round 7). Now the read stops at the bound, the connection is closed, and the sign-in is 503.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rmSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { OAuth2Server } from 'oauth2-mock-server';
import { Browser, startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { spawnProduct, tempDir, testEnv, type SpawnedProduct } from './helpers/product.ts';

const TOTAL = 48 * 1024 * 1024;
const MARKER = 'HOSTILE-BODY-MARKER';
const BOMB = gzipSync(Buffer.alloc(TOTAL, ' ')); // ~48 KB on the wire

/** What the hostile server managed to send of its answer before the connection ended. */
interface Sent { written: number; finished: boolean }

/** How the hostile IdP answers `path`: a stream of TOTAL bytes (declared or chunked), a gzip bomb, or a small non-JSON body. */
let hostile: { path: string; declare?: boolean; gzip?: boolean; small?: boolean; sent?: Promise<Sent> } | null = null;

function streamHuge(res: ServerResponse, declare: boolean): Promise<Sent> {
  res.writeHead(200, { 'content-type': 'application/json', ...(declare ? { 'content-length': String(TOTAL) } : {}) });
  const chunk = Buffer.alloc(64 * 1024, `${MARKER} `);
  return new Promise((resolve) => {
    let written = 0;
    res.on('close', () => resolve({ written, finished: res.writableFinished }));
    const pump = () => {
      while (written < TOTAL && !res.destroyed) {
        written += chunk.length;
        if (written >= TOTAL) return void res.end(chunk);
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
    };
    pump();
  });
}

let idp: OAuth2Server;
let front: Server;
let github: Server;
let p: SpawnedProduct;
let dir: string;
let q: AccountsProduct; // in-process, for GitHub's addresses (a test seam, no variable)

/** The IdP as the product sees it: oauth2-mock-server behind a front that answers `hostile.path` itself. */
function hostileFront(upstreamPort: () => number) {
  return (req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url!, 'http://x').pathname;
    if (hostile && path === hostile.path) {
      req.resume();
      if (hostile.small) return void res.writeHead(200, { 'content-type': 'application/json' }).end(`${MARKER} {}`);
      if (hostile.gzip) return void res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }).end(BOMB);
      hostile.sent = streamHuge(res, hostile.declare === true);
      return;
    }
    const up = httpRequest({ host: '127.0.0.1', port: upstreamPort(), method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode!, r.headers);
      r.pipe(res);
    });
    req.pipe(up);
  };
}

before(async () => {
  idp = new OAuth2Server();
  await idp.issuer.keys.generate('RS256');
  front = createServer(hostileFront(() => idp.address().port));
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
  idp.issuer.url = `http://127.0.0.1:${(front.address() as AddressInfo).port}`; // tokens and discovery name the front
  await idp.start(0, '127.0.0.1');
  // A GitHub stand-in: approves at once, a valid token, then `hostile` may answer its API.
  const gh = hostileFront(() => 0);
  github = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    if (hostile && url.pathname === hostile.path) return gh(req, res);
    if (url.pathname === '/login/oauth/authorize') {
      const back = new URL(url.searchParams.get('redirect_uri')!);
      back.searchParams.set('code', 'c');
      back.searchParams.set('state', url.searchParams.get('state')!);
      return void res.writeHead(302, { location: back.href }).end();
    }
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(url.pathname === '/login/oauth/access_token' ? { access_token: 'gho_x', token_type: 'bearer' } : []));
  });
  await new Promise<void>((r) => github.listen(0, '127.0.0.1', r));
  dir = tempDir();
  p = await spawnProduct(testEnv(dir, {
    LOG_LEVEL: 'debug', ACCOUNT_OIDC_ISSUER: idp.issuer.url, ACCOUNT_OIDC_CLIENT_ID: 'scopebase', ACCOUNT_OIDC_CLIENT_SECRET: 's',
  }));
  const gitHubUrl = `http://127.0.0.1:${(github.address() as AddressInfo).port}`;
  q = await startAccounts({ ACCOUNT_GITHUB_CLIENT_ID: 'gh', ACCOUNT_GITHUB_CLIENT_SECRET: 'gh-secret' }, { github: { webUrl: gitHubUrl, apiUrl: gitHubUrl } });
});
after(async () => {
  p.killAll();
  await q.close();
  await idp.stop();
  front.closeAllConnections();
  github.closeAllConnections();
  await new Promise<void>((r) => front.close(() => r()));
  await new Promise<void>((r) => github.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

/** /login, the provider's authorize step, and the callback; what the callback (or a failed /login) answered. */
async function signIn(product: { url: string } = p) {
  const browser = new Browser();
  const login = await browser.fetch(`http://acme.localhost:${new URL(product.url).port}/web/_account/login`, { connectTo: product.url });
  if (login.status !== 302) return login;
  const authorize = await browser.fetch(login.location!);
  assert.equal(authorize.status, 302, authorize.text);
  return browser.fetch(authorize.location!, { connectTo: product.url });
}

/** 503 `unavailable` with Retry-After and a message naming the step; nothing of the body in the answer or the log. */
function assertRefused(r: Awaited<ReturnType<typeof signIn>>, step: string) {
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.error.code, 'unavailable');
  assert.ok(Number(r.headers['retry-after']) >= 1);
  assert.equal(r.json.error.message.split(';')[0], `the sign-in provider's answer during the ${step} was over 1 MiB, more than any real one: it was not read`);
  assert.doesNotMatch(r.text, new RegExp(MARKER));
  assert.doesNotMatch(p.stdout(), new RegExp(MARKER));
}

/** The hostile server saw its connection closed before it had written its answer, well before. */
async function assertStoppedEarly() {
  const sent = await hostile!.sent!;
  assert.equal(sent.finished, false, 'the answer was read to its end');
  assert.ok(sent.written < 16 * 1024 * 1024, `${sent.written} bytes were taken before the connection closed`);
}

test('discovery answering 48 MB (chunked): /login is 503, the read stopped early', async () => {
  hostile = { path: '/.well-known/openid-configuration' };
  assertRefused(await signIn(), 'discovery');
  await assertStoppedEarly();
  hostile = null;
});

test('the token endpoint answering 48 MB (declared): refused on its Content-Length, the callback is 503', async () => {
  hostile = { path: '/token', declare: true };
  assertRefused(await signIn(), 'code exchange');
  await assertStoppedEarly();
  hostile = null;
});

test('userinfo answering a gzip bomb (48 MB of it decoded): the callback is 503', async () => {
  hostile = { path: '/userinfo', gzip: true };
  assertRefused(await signIn(), 'user lookup');
  hostile = null;
});

test("GitHub's API answering 48 MB: the callback is 503, the read stopped early", async () => {
  hostile = { path: '/user' };
  assertRefused(await signIn(q), 'user lookup');
  await assertStoppedEarly();
  hostile = null;
});

test("GitHub's API answering a small body that is not JSON: 401, and nothing of the body in the answer (JSON.parse quotes it)", async () => {
  hostile = { path: '/user', small: true };
  const r = await signIn(q);
  hostile = null;
  assert.equal(r.status, 401, r.text);
  assert.equal(r.json.error.details.reason, 'the answer is not valid JSON');
  assert.doesNotMatch(r.text, /HOSTILE/);
});

test('the same provider signs in again once its answers are sane', async () => {
  const r = await signIn();
  assert.equal(r.status, 302, r.text);
});
