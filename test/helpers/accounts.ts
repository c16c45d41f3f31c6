// Test harness for accounts and apps: the real proxy with the real account service on loopback, plus a tiny browser
// (cookie jar + manual redirects) that signs in through the development identity provider.
import { rmSync } from 'node:fs';
import { after, before } from 'node:test';
import { request } from 'undici';
import type { FastifyInstance } from 'fastify';
import { loadConfig, type Config } from '../../src/shared/config.ts';
import { createLogger } from '../../src/shared/log.ts';
import { createProxy } from '../../src/proxy/server.ts';
import { publicConnections } from '../../src/shared/connection-cap.ts';
import type { AccountTuning } from '../../src/account/wiring.ts';
import { accountForProxy } from '../../src/proxy/account-wiring.ts';
import type { DbHandler } from '../../src/db/contract.ts';
import { call, tempDir, testEnv, type CallOptions, type HttpResult } from './product.ts';

export interface AccountsProduct {
  url: string;
  port: string;
  config: Config;
  proxy: FastifyInstance;
  call(path: string, opts?: CallOptions): Promise<HttpResult>;
  close(): Promise<void>;
}

/** The database part is not under test here: a stub answers /_db so these tests do not depend on it. */
const stubDb: DbHandler = { handle: async () => ({ status: 200, body: '{"stub":true}' }) };

export async function startAccounts(env: Record<string, string> = {}, tuning: AccountTuning = {}): Promise<AccountsProduct> {
  const dataDir = env.DATA_DIR ?? tempDir('scopebase-accounts-');
  const config = loadConfig(testEnv(dataDir, env));
  const logger = createLogger(config.logLevel);
  const accounts = await accountForProxy(config, logger, tuning);
  const proxy = await createProxy({ logger, baseDomain: config.baseDomain, bodyLimit: 1024 * 1024, rootKeys: config.rootKeys, trustedProxies: config.trustedProxies, db: stubDb, account: accounts.account, apps: accounts.apps, verify: accounts.verify, connections: publicConnections(config, logger) });
  const url = await proxy.listen({ port: 0, host: '127.0.0.1' });
  return {
    url, port: new URL(url).port, config, proxy,
    call: (path, opts) => call(url, config.baseDomain, path, opts),
    async close() {
      await proxy.close();
      await accounts.close();
      if (env.DATA_DIR === undefined) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A minimal browser: per-host cookies, redirects followed by hand so tests can stop anywhere. */
export class Browser {
  readonly jar = new Map<string, Map<string, string>>();
  headers: Record<string, string> = {};

  cookies(host: string): Map<string, string> {
    let m = this.jar.get(host);
    if (!m) this.jar.set(host, (m = new Map()));
    return m;
  }

  cookieHeader(host: string): string | undefined {
    const m = this.jar.get(host);
    return m && m.size ? [...m].map(([k, v]) => `${k}=${v}`).join('; ') : undefined;
  }

  /** One request to an absolute URL; `host` is sent as the Host header (org hosts resolve to loopback by hand). */
  async fetch(url: string, opts: { method?: string; body?: string; headers?: Record<string, string>; connectTo?: string } = {}): Promise<HttpResult & { location: string | null }> {
    const u = new URL(url);
    const target = opts.connectTo ? new URL(u.pathname + u.search, opts.connectTo) : u;
    const headers: Record<string, string> = { host: u.host, ...this.headers, ...opts.headers };
    const cookie = this.cookieHeader(u.host);
    if (cookie) headers.cookie = cookie;
    const res = await request(target, { method: (opts.method ?? 'GET') as 'GET', headers, body: opts.body });
    const text = await res.body.text();
    const set = res.headers['set-cookie'];
    for (const line of set === undefined ? [] : Array.isArray(set) ? set : [set]) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair!.indexOf('=');
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      if (attrs.some((a) => /^\s*max-age=0\s*$/i.test(a)) || value === '') this.cookies(u.host).delete(name);
      else this.cookies(u.host).set(name, value);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    const loc = res.headers.location;
    return { status: res.statusCode, headers: res.headers as HttpResult['headers'], text, json, location: typeof loc === 'string' ? new URL(loc, url).href : null };
  }
}

/** Runs the development identity provider's form from a /login redirect up to (not including) the callback. */
export async function devIdpToCallback(browser: Browser, authorizeUrl: string, email = 'dev@example.com', name = 'Dev User'): Promise<string> {
  let res = await browser.fetch(authorizeUrl);
  let hops = 0;
  while (res.location && !res.location.includes('/_account/callback') && hops++ < 10) {
    if (res.location.includes('/interaction/')) {
      const form = await browser.fetch(res.location);
      if (form.status !== 200 || !form.text.includes('Development sign-in')) throw new Error(`no sign-in form: ${form.status}`);
      res = await browser.fetch(res.location, { method: 'POST', body: new URLSearchParams({ email, name }).toString(), headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    } else {
      res = await browser.fetch(res.location);
    }
  }
  if (!res.location?.includes('/_account/callback')) throw new Error(`the provider did not redirect to the callback: ${res.status} ${res.text.slice(0, 300)}`);
  return res.location;
}

/** Full sign-in on `org` through the proxy at `p`; returns the browser (holding the session cookie) and the final redirect. */
export async function signIn(p: AccountsProduct, opts: { org?: string; repo?: string; returnTo?: string; email?: string; browser?: Browser } = {}): Promise<{ browser: Browser; location: string | null; callback: HttpResult }> {
  const browser = opts.browser ?? new Browser();
  const org = opts.org ?? 'acme';
  const repo = opts.repo ?? 'web';
  const origin = `http://${org}.localhost:${p.port}`;
  const qs = opts.returnTo === undefined ? '' : `?${new URLSearchParams({ return_to: opts.returnTo })}`;
  const login = await browser.fetch(`${origin}/${repo}/_account/login${qs}`, { connectTo: p.url });
  if (login.status !== 302 || !login.location) throw new Error(`login did not redirect: ${login.status} ${login.text.slice(0, 300)}`);
  const callbackUrl = await devIdpToCallback(browser, login.location, opts.email);
  const callback = await browser.fetch(callbackUrl, { connectTo: p.url });
  return { browser, location: callback.location, callback };
}

/**
 * The proxy and account service for the enclosing file or describe: started before its tests (handed to `use`), closed
 * after them.
 */
export function accountsForSuite(env: Record<string, string>, use: (p: AccountsProduct) => void): void {
  let p: AccountsProduct | undefined;
  before(async () => {
    p = await startAccounts(env);
    use(p);
  });
  after(() => p?.close());
}

/** The `name=…` line among a response's Set-Cookie headers. */
export const cookieLine = (h: string | string[] | undefined, name: string) => (Array.isArray(h) ? h : h ? [h] : []).find((c) => c.startsWith(`${name}=`));
