// `scopebase serve account` at its MAX_CONNECTIONS answers a new connection 503 `unavailable` (the connection cap,
// before any route). That answer carried no x-scopebase-account-answer mark, so the proxy took it for a gateway's and
// told the visitor "the gateway in front of it answered HTTP 503". It is the service's own answer (it is busy): marked
// when the request carries the proxy's token, relayed as it is (and said by an app's session check); a caller
// without the token gets no mark.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { rmSync } from 'node:fs';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { ROOT_KEY, spawnProduct, tempDir, testEnv, type SpawnedProduct } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { ANSWER_MARK_HEADER, answerMark } from '../src/account/contract.ts';
import { proxyToken } from '../src/account/standalone.ts';

const dir = tempDir('scopebase-account-cap-');
let account: SpawnedProduct;
let adminPort: number;
let p: AccountsProduct;
const held: Socket[] = [];

before(async () => {
  adminPort = await freePort();
  account = await spawnProduct(testEnv(dir, { ADMIN_PORT: String(adminPort), MAX_CONNECTIONS: '2', MAX_CONNECTIONS_PER_CLIENT: '2' }), ['serve', 'account']);
  // An app that needs a session: the proxy asks the account service's /verify before it (never reached here).
  p = await startAccounts({ ACCOUNT_SERVICE_URL: account.url, APPS: JSON.stringify({ 'acme/private': { url: `http://127.0.0.1:${await freePort()}`, requireSession: true } }) });
  // Both connections the service allows, each with a request in flight (a sign-out whose body is still coming).
  const port = Number(new URL(account.url).port);
  for (const from of ['127.0.0.10', '127.0.0.11']) {
    const socket = connect({ port, host: '127.0.0.1', localAddress: from });
    socket.on('error', () => {});
    await new Promise((r) => socket.once('connect', r));
    socket.write('POST /logout HTTP/1.1\r\nHost: acme.localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nreturn_to=');
    held.push(socket);
  }
  await fetch(`http://127.0.0.1:${adminPort}/healthz`); // a round trip through its event loop: the two are taken in
});
after(async () => {
  for (const s of held) s.destroy();
  await p.close();
  account.killAll();
  rmSync(dir, { recursive: true, force: true });
});

test('through the proxy, the busy account service\'s 503 is relayed as its own (Retry-After 1), not as a gateway failure', async () => {
  const r = await p.call('/web/_account/login', { headers: { accept: 'application/json' } });
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.error.code, 'unavailable');
  assert.doesNotMatch(r.json.error.message, /gateway/);
  assert.match(r.json.error.message, /too many connections open; retry in a second/);
  assert.equal(r.headers['retry-after'], '1');
  assert.deepEqual(Object.keys(r.headers).filter((h) => h.startsWith('x-scopebase-')), [], 'the mark stays between the parts');
});

test('a requireSession app\'s session check says the account service is busy, not that it gave no answer', async () => {
  const r = await p.call('/private/', { headers: { accept: 'application/json', cookie: 'session=x' } });
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.error.message, 'the account service could not check the session: the server has too many connections open; retry in a second');
  assert.equal(r.headers['retry-after'], '1');
});

test('the refusal is marked only for the proxy\'s token: a caller with a wrong one (or none) gets no mark', async () => {
  const port = new URL(account.url).port;
  const ask = (token: string) => fetch(`http://127.0.0.1:${port}/login`, { headers: { 'x-scopebase-proxy-token': token, 'x-request-id': 'req-1', 'x-scopebase-org': 'acme', 'x-scopebase-repo': 'web', 'x-scopebase-host': 'acme.localhost' } });
  const forged = await ask('not-the-token');
  assert.equal(forged.status, 503);
  assert.equal(forged.headers.get(ANSWER_MARK_HEADER), null);
  const token = proxyToken(Buffer.from(ROOT_KEY, 'hex'));
  const real = await ask(token);
  assert.equal(real.status, 503);
  assert.equal(real.headers.get(ANSWER_MARK_HEADER), answerMark(token, 'req-1'));
});
