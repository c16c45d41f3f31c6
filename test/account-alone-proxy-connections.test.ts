// `scopebase serve account` behind the proxy (docs/deploy.md, "Parts behind the proxy"): every proxied request comes
// from the proxy's one address. The proxy's pool to the service opened a connection per request in flight (undici's
// default: no bound), past the service's per-client limit (a quarter of MAX_CONNECTIONS), and the service refused
// them: users got 503 "the account service is not reachable right now", with the service idle. Now the pool holds at
// most PART_POOL_CONNECTIONS (more requests wait in it), a part's per-client limit is derived no lower than that, and
// the proxy reads a body before it takes one of the pool's connections (a slow sender cannot hold them all).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { partial, type Answer } from './helpers/partial-body.ts';
import { spawnProduct, tempDir, testEnv, type SpawnedProduct } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { bodyBytesInFlight } from '../src/shared/body-budget.ts';

const dir = tempDir('scopebase-account-pool-');
let account: SpawnedProduct;
let adminPort: number;
let p: AccountsProduct;
/** The connections the proxy's pool opens to a part (PART_POOL_CONNECTIONS in src/shared/connection-cap.ts). */
const PART_POOL_CONNECTIONS = 64;
/** More sign-outs in flight at once than the proxy's pool holds, so that some wait in it. */
const REQUESTS = PART_POOL_CONNECTIONS + 6;

before(async () => {
  adminPort = await freePort();
  // 120 connections in all: a quarter, the per-client limit as derived before, is 30.
  account = await spawnProduct(testEnv(dir, { ADMIN_PORT: String(adminPort), MAX_CONNECTIONS: '120' }), ['serve', 'account']);
  p = await startAccounts({ ACCOUNT_SERVICE_URL: account.url });
});
after(async () => {
  await p.close();
  account.killAll();
  rmSync(dir, { recursive: true, force: true });
});

const metric = async (line: RegExp): Promise<number> => Number(line.exec(await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text())?.[1] ?? 0);
const openOnService = () => metric(/^scopebase_connections_open\{pool="public"\} (\d+)/m);
/** Connections of the proxy the service refused or closed at its per-client limit (a new one takes an idle one's place). */
const turnedAway = async () => (await metric(/^scopebase_connections_refused_total\{pool="public",cap="per_client"\} (\d+)/m)) + (await metric(/^scopebase_connections_closed_idle_total\{pool="public",cap="per_client"\} (\d+)/m));

test(`${REQUESTS} sign-outs whose bodies are still coming through the proxy: a sign-in is answered meanwhile, none is turned away`, async () => {
  const form = 'return_to=%2Fweb%2F_account%2F';
  const head = `POST /web/_account/logout HTTP/1.1\r\nhost: acme.localhost:${p.port}\r\norigin: http://acme.localhost:${p.port}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: ${form.length}\r\n\r\n`;
  const calls = Array.from({ length: REQUESTS }, () => partial(p.url, head, Buffer.from(form.slice(0, 1)), 30_000));
  try {
    // Until the proxy holds every body (read there first), or the service holds what the pool opens, or turned one away.
    for (let i = 0; i < 200 && bodyBytesInFlight() < REQUESTS * form.length && (await openOnService()) < PART_POOL_CONNECTIONS && (await turnedAway()) === 0; i++) await new Promise((r) => setTimeout(r, 50));
    // A slow client holds its own connection to the proxy, not one of the proxy's to the service: sign-in still works.
    const login = await partial(p.url, `GET /web/_account/login HTTP/1.1\r\nhost: acme.localhost:${p.port}\r\n\r\n`, 0, 10_000).answer;
    assert.equal(login?.status, 302, login ? login.body : 'the sign-in got no answer within 10 s');
    const open = await openOnService();
    for (const c of calls) c.socket.write(form.slice(1));
    const answers = (await Promise.all(calls.map((c) => c.answer))) as (Answer | null)[];
    const statuses = answers.map((a) => a?.status ?? 0);
    assert.deepEqual([...new Set(statuses)], [303], answers.find((a) => a?.status !== 303)?.body ?? 'a call got no answer');
    assert.equal(await turnedAway(), 0, 'the service turned away none of the proxy\'s connections');
    assert.ok(open <= PART_POOL_CONNECTIONS, `the proxy opened ${open} connections to the service: no more than its pool holds`);
  } finally {
    for (const c of calls) c.socket.destroy();
  }
});

test('a part started with a per-client limit under what the proxy opens says so, and TRUSTED_PROXIES silences it', async () => {
  const warning = /allows 10 connections from one address, under the \d+ the proxy may open to this part/;
  const dirs = [tempDir('scopebase-account-low-'), tempDir('scopebase-account-trusted-')];
  const low = await spawnProduct(testEnv(dirs[0]!, { LOG_LEVEL: 'info', MAX_CONNECTIONS_PER_CLIENT: '10' }), ['serve', 'account']);
  const trusted = await spawnProduct(testEnv(dirs[1]!, { LOG_LEVEL: 'info', MAX_CONNECTIONS_PER_CLIENT: '10', TRUSTED_PROXIES: '127.0.0.1' }), ['serve', 'account']);
  const said = (p: SpawnedProduct) => p.stdout() + p.stderr();
  try {
    // The start's lines go to stdout, the banner to stderr: the lines may come a moment after the banner.
    for (let i = 0; i < 40 && (!/connections: at most/.test(said(low)) || !/connections: at most/.test(said(trusted))); i++) await new Promise((r) => setTimeout(r, 50));
    assert.match(said(low), warning);
    assert.match(said(low), /TRUSTED_PROXIES/);
    assert.doesNotMatch(said(trusted), warning);
  } finally {
    low.killAll();
    trusted.killAll();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
});
