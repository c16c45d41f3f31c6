// `scopebase serve account` called straight by another reverse proxy's forward auth (nginx auth_request, Traefik
// forwardAuth at {account_url}/verify), under HTTPS. The service ignored TRUSTED_PROXIES, so it never learnt the
// browser's scheme: it read the plain-HTTP cookie `session` — one a page on a sibling org host can plant for the whole
// domain — and never `__Host-session`, the one browsers hold under HTTPS: every signed-in visitor was refused (401)
// while a planted cookie signed them in as its planter. A TRUSTED_PROXIES peer's x-forwarded-proto now counts, as
// at the proxy (attack round 6).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { request } from 'undici';
import { tempDir, testEnv } from './helpers/product.ts';
import { loadConfig } from '../src/shared/config.ts';
import { createLogger } from '../src/shared/log.ts';
import { publicConnections } from '../src/shared/connection-cap.ts';
import { accountAlone } from '../src/account/wiring.ts';
import { AccountStore } from '../src/account/store.ts';

async function startAlone(env: Record<string, string>) {
  const dataDir = tempDir('scopebase-alone-fa-');
  const config = loadConfig(testEnv(dataDir, env));
  const logger = createLogger('silent');
  const alone = await accountAlone(config, logger, publicConnections(config, logger));
  const url = await alone.server.listen({ port: 0, host: '127.0.0.1' });
  const store = new AccountStore(dataDir);
  const user = store.upsertUser('test', 'alice', { name: 'Alice', email: 'alice@example.test', login: 'alice', avatarUrl: null });
  const token = store.createSession('acme', user.id, 3_600_000).token;
  store.close();
  /** The status of a forward-auth check sent with `cookie` and the headers the forward-auth proxy adds. */
  const verify = async (path: string, cookie: string, headers: Record<string, string> = {}) => {
    const res = await request(`${url}${path}`, { headers: { host: 'acme.localhost', cookie, ...headers } });
    await res.body.dump();
    return res.statusCode;
  };
  return { token, verify, close: async () => { await alone.server.close(); await alone.close(); rmSync(dataDir, { recursive: true, force: true }); } };
}

for (const path of ['/verify', '/web/_account/verify']) {
  describe(`${path} of serve account with its forward-auth proxy in TRUSTED_PROXIES`, () => {
    let a: Awaited<ReturnType<typeof startAlone>>;
    before(async () => {
      a = await startAlone({ TRUSTED_PROXIES: '127.0.0.1' });
    });
    after(() => a.close());

    test('x-forwarded-proto: https: the visitor\'s __Host-session counts, a planted plain session does not', async () => {
      assert.equal(await a.verify(path, `__Host-session=${a.token}`, { 'x-forwarded-proto': 'https' }), 200);
      assert.equal(await a.verify(path, `session=${a.token}`, { 'x-forwarded-proto': 'https' }), 401);
      assert.equal(await a.verify(path, `session=${a.token}`, { 'x-forwarded-proto': 'http, https' }), 401, 'a list: its last entry');
    });

    test('plain HTTP (no x-forwarded-proto, or http): the session cookie, as before', async () => {
      assert.equal(await a.verify(path, `session=${a.token}`), 200);
      assert.equal(await a.verify(path, `__Host-session=${a.token}`, { 'x-forwarded-proto': 'http' }), 401);
    });
  });
}

test('without TRUSTED_PROXIES a client\'s x-forwarded-proto counts for nothing: plain HTTP, as before', async () => {
  const a = await startAlone({});
  try {
    assert.equal(await a.verify('/verify', `session=${a.token}`, { 'x-forwarded-proto': 'https' }), 200);
    assert.equal(await a.verify('/verify', `__Host-session=${a.token}`, { 'x-forwarded-proto': 'https' }), 401);
  } finally {
    await a.close();
  }
});
