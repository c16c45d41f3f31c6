// SPEC 8 WebSocket upgrades to apps through the proxy: the same routing and session rules as requests, x-request-id,
// a client gone before the app accepted, sessions renewed in the 101 (idle limits and caps: apps-websockets.test.ts).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { signIn, startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { appsProxyForSuite, startBehindTls, upgrade, type Upstream } from './helpers/app-upstream.ts';
import { waitFor } from './helpers/mirror.ts';
import { tempDir, testEnv } from './helpers/product.ts';
import { accountAlone } from '../src/account/wiring.ts';
import { publicConnections } from '../src/shared/connection-cap.ts';
import { loadConfig } from '../src/shared/config.ts';
import { createLogger } from '../src/shared/log.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

let upstream: Upstream;
let p: AccountsProduct;
appsProxyForSuite((started) => ({ upstream, p } = started));

describe('WebSocket upgrades', () => {
  const open = async (path: string) => (await upgrade(path, p)).message;

  test('upgrades are forwarded to the app with the same rules', async () => {
    const msg = JSON.parse(await open('/web/live'));
    assert.deepEqual(msg, { url: '/base/live', user: null, prefix: '/web' });
  });

  test('an app\'s 101 cannot set the org\'s session cookie either', async () => {
    assert.deepEqual([(await upgrade('/web/plant-session', p)).headers['set-cookie']].flat(), ['app=1; Path=/']);
  });

  test('requireSession refuses an anonymous upgrade', async () => {
    await assert.rejects(open('/private/live'), /no upgrade: 401/);
  });

  test('SPEC 3 on upgrades: the 101 and every refusal carry x-request-id; two Host headers are refused', async () => {
    assert.equal((await upgrade('/web/live', p, { 'x-request-id': 'ws-probe-1' })).headers['x-request-id'], 'ws-probe-1');
    const rawUpgrade = (head: string) => new Promise<string>((resolve, reject) => {
      const socket = connect(Number(p.port), '127.0.0.1', () => socket.write(`${head}Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`));
      let text = '';
      socket.on('data', (d) => (text += d));
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
    });
    const host = `Host: acme.localhost:${p.port}\r\n`;
    for (const [head, status] of [
      [`GET /private/live HTTP/1.1\r\n${host}x-request-id: ws-probe-2\r\n`, 401],
      [`GET /nothing-here/live HTTP/1.1\r\n${host}x-request-id: ws-probe-2\r\n`, 404],
      [`GET /web/live HTTP/1.1\r\n${host}Host: globex.localhost:${p.port}\r\nx-request-id: ws-probe-2\r\n`, 400],
    ] as const) {
      const answer = await rawUpgrade(head);
      assert.match(answer, new RegExp(`^HTTP/1.1 ${status} `), answer);
      assert.match(answer, /\r\nx-request-id: ws-probe-2\r\n/i, answer);
    }
  });

  test('a client gone before the app accepted its upgrade leaves no connection to the app open', async () => {
    for (let i = 0; i < 3; i++) {
      const socket = connect(Number(p.port), '127.0.0.1');
      socket.on('error', () => {});
      socket.write(`GET /web/slow-upgrade HTTP/1.1\r\nHost: acme.localhost:${p.port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
      await waitFor(() => upstream.slowUpgrades.length > i, 5000, 'the upgrade reached the app');
      socket.resetAndDestroy(); // gone at once (a killed tab, a dropped network), before the app answered
    }
    await waitFor(() => upstream.slowUpgrades.every((s) => s.destroyed), 3000, 'every connection to the app closed');
  });

  test('behind a trusted TLS-terminating proxy, an upgrade finds the __Host- session cookie', async () => {
    const { q, token } = await startBehindTls(upstream, 'tls-user');
    try {
      // The browser saw https, so it holds the __Host- cookie; the proxy learns the scheme from the trusted header.
      const res = await upgrade('/private/live', q, { cookie: `__Host-session=${token}`, 'x-forwarded-proto': 'https' });
      assert.match(JSON.parse(res.message).user, /^usr_/);
      await assert.rejects(upgrade('/private/live', q, { cookie: `__Host-session=${token}` }), /no upgrade: 401/, 'over plain http that cookie name is not ours');
    } finally {
      await q.close();
    }
  });

  /** The proxy with the account service in its own server (`serve account`), on loopback in this process. */
  async function withAccountServiceAlone(): Promise<{ proxy: AccountsProduct; accountDataDir: string; close(): Promise<void> }> {
    const accountDataDir = tempDir('scopebase-account-alone-');
    const config = loadConfig(testEnv(accountDataDir));
    const logger = createLogger('silent');
    const alone = await accountAlone(config, logger, publicConnections(config, logger));
    const accountUrl = await alone.server.listen({ port: 0, host: '127.0.0.1' });
    const proxy = await startAccounts({ ACCOUNT_SERVICE_URL: accountUrl, APPS: JSON.stringify({ 'acme/private': { url: upstream.url, requireSession: true } }) });
    return {
      proxy, accountDataDir,
      async close() {
        await proxy.close();
        await alone.server.close();
        await alone.close();
        rmSync(accountDataDir, { recursive: true, force: true });
      },
    };
  }

  for (const mode of ['one process', 'the account service alone'] as const) {
    test(`a session renewed while checking an upgrade gets its cookie in the 101 (${mode})`, async () => {
      const setup = mode === 'one process' ? { proxy: p, accountDataDir: p.config.dataDir, close: async () => {} } : await withAccountServiceAlone();
      try {
        const { proxy, accountDataDir } = setup;
        const { browser } = await signIn(proxy, { repo: 'private', email: 'ws@example.com' });
        const cookie = browser.cookieHeader(`acme.localhost:${proxy.port}`)!;
        const token = /(?:^|; )session=([^;]+)/.exec(cookie)![1]!;
        const fresh = await upgrade('/private/live', proxy, { cookie });
        const user = JSON.parse(fresh.message).user;
        assert.match(user, /^usr_/, 'the app gets the user');
        assert.equal(fresh.headers['set-cookie'], undefined, 'a fresh session is not renewed on every upgrade');

        // Two hours later the session is renewed on use: the 101 carries the cookie with a fresh Max-Age.
        const db = openSqlite(join(accountDataDir, 'accounts.sqlite'));
        try {
          db.exec('PRAGMA busy_timeout = 5000');
          db.prepare('UPDATE sessions SET renewed_at = renewed_at - 7200000, expires_at = expires_at - 7200000 WHERE user_id = ?').run(user);
        } finally {
          db.close();
        }
        const renewed = await upgrade('/private/live', proxy, { cookie });
        assert.deepEqual(renewed.headers['set-cookie'], [`session=${token}; Path=/; Max-Age=1209600; HttpOnly; SameSite=Lax`]);
        assert.equal((await upgrade('/private/live', proxy, { cookie })).headers['set-cookie'], undefined, 'renewed once, not again right after');
      } finally {
        await setup.close();
      }
    });
  }
});
