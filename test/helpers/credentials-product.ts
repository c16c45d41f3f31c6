// Boots the real product (proxy + account service + db) in-process for the credential tests, with LOG_LEVEL=info
// into a captured log so tests can check that no value, token or secret is ever logged.
import { rmSync } from 'node:fs';
import { Writable } from 'node:stream';
import { loadConfig, type Config } from '../../src/shared/config.ts';
import { createLogger } from '../../src/shared/log.ts';
import { startParts } from '../../src/cli/start.ts';
import { repoSecret } from '../../src/shared/secrets.ts';
import { call, tempDir, testEnv, type CallOptions, type HttpResult } from './product.ts';
import type { SignedIn } from './session.ts';

export { tempDir, testEnv };

export interface CredProduct {
  url: string;
  config: Config;
  dataDir: string;
  secret(org: string, repo: string): string;
  call(path: string, opts?: CallOptions): Promise<HttpResult>;
  /** Everything logged so far (JSON lines). */
  logs(): string;
  close(): Promise<void>;
}

export async function startCredentialsProduct(env: Record<string, string> = {}): Promise<CredProduct> {
  const dataDir = env.DATA_DIR ?? tempDir('scopebase-cred-');
  const config = loadConfig(testEnv(dataDir, { LOG_LEVEL: 'info', ...env }));
  const chunks: string[] = [];
  const sink = new Writable({ write(chunk, _enc, done) { chunks.push(String(chunk)); done(); } });
  const running = await startParts('all', config, createLogger(config.logLevel, sink));
  return {
    url: running.url, config, dataDir,
    secret: (org, repo) => repoSecret(config.rootKeys[0]!, org, repo),
    call: (path, opts) => call(running.url, config.baseDomain, path, opts),
    logs: () => chunks.join(''),
    async close() {
      await running.close();
      if (env.DATA_DIR === undefined) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Calls below `/{repo}/_account` on `product()`: as a signed-in user (cookie), as a repo's runtime (Bearer, ?user=). */
export function credentialCalls(product: () => CredProduct) {
  const base = '/web/_account';
  return {
    asUser(u: SignedIn, method: string, path: string, body?: unknown, extra: CallOptions = {}) {
      const headers: Record<string, string> = { cookie: u.cookie, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...extra.headers };
      return product().call(`${base}${path}`, { method, ...(body !== undefined ? { rawBody: JSON.stringify(body) } : {}), ...extra, headers });
    },
    asRuntime(method: string, path: string, user: string, body?: unknown, opts: { secret?: string; repo?: string; org?: string } = {}) {
      const p = product();
      const repo = opts.repo ?? 'web';
      const org = opts.org ?? 'acme';
      const headers: Record<string, string> = { authorization: `Bearer ${opts.secret ?? p.secret(org, repo)}` };
      if (body !== undefined) headers['content-type'] = 'application/json';
      const sep = path.includes('?') ? '&' : '?';
      return p.call(`/${repo}/_account${path}${sep}user=${encodeURIComponent(user)}`, { org, method, headers, ...(body !== undefined ? { rawBody: JSON.stringify(body) } : {}) });
    },
  };
}
