// Boots the real product for tests: in-process (real HTTP on loopback, real executor processes) or as a child process.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { after } from 'node:test';
import { request as undiciRequest } from 'undici';
import { loadConfig, type Config } from '../../src/shared/config.ts';
import { createLogger } from '../../src/shared/log.ts';
import { startParts, type Part, type Running } from '../../src/cli/start.ts';
import { repoSecret } from '../../src/shared/secrets.ts';

export const ROOT_KEY = 'a'.repeat(64);
export const ENCRYPTION_KEY = 'b'.repeat(64);

/**
 * Products started and not yet closed, stopped after the file's last test: a `before` that failed after starting one
 * (its product never assigned, so the file's own `after` could not close it) left its servers and executors holding
 * the file's process open for ever, and CI's run with it. Only under the test runner (bench scripts import this too).
 */
const leftovers = new Set<() => Promise<void>>();
if (process.env.NODE_TEST_CONTEXT !== undefined) {
  after(async () => {
    for (const stop of [...leftovers]) await stop().catch(() => {});
  });
}

export interface HttpResult {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export interface CallOptions {
  org?: string;
  host?: string;
  method?: string;
  body?: unknown;
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
  /** Bearer secret; defaults to the right one for (org, repo of the path). Pass null to send none. */
  secret?: string | null;
}

export function tempDir(prefix = 'scopebase-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** Sends one HTTP request to `base` with a Host header for the org. */
export async function call(base: string, baseDomain: string, path: string, opts: CallOptions = {}): Promise<HttpResult> {
  const org = opts.org ?? 'acme';
  const port = new URL(base).port;
  const headers: Record<string, string> = { host: opts.host ?? `${org}.${baseDomain}:${port}`, ...opts.headers };
  let body: string | Buffer | undefined;
  if (opts.rawBody !== undefined) body = opts.rawBody;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await undiciRequest(new URL(path, base), { method: (opts.method ?? (body === undefined ? 'GET' : 'POST')) as 'GET', headers, body });
  const text = await res.body.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers as HttpResult['headers'], text, json };
}

export interface Product {
  running: Running;
  config: Config;
  dataDir: string;
  url: string;
  secret(org: string, repo: string): string;
  /** POST /{repo}/_db/{op} with the repo's secret unless told otherwise. */
  db(repoPath: string, op: string, body: unknown, opts?: CallOptions): Promise<HttpResult>;
  call(path: string, opts?: CallOptions): Promise<HttpResult>;
  close(): Promise<void>;
}

export function testEnv(dataDir: string, env: Record<string, string> = {}): Record<string, string> {
  // No shedding on a late event loop unless a test asks (test/db-loop-delay.test.ts): an in-process product shares its
  // loop with the test's own work, and CI runs two suites on two cores; a refused setup step failed whole files.
  return { PORT: '0', ADMIN_PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'silent', RUNTIME_ROOT_KEY: ROOT_KEY, ACCOUNT_ENCRYPTION_KEYS: ENCRYPTION_KEY, DB_MAX_LOOP_DELAY_MS: '0', ...env };
}

export async function startProduct(env: Record<string, string> = {}, part: Part = 'all'): Promise<Product> {
  const dataDir = env.DATA_DIR ?? tempDir();
  const config = loadConfig(testEnv(dataDir, env));
  const running = await startParts(part, config, createLogger(config.logLevel));
  const url = running.url;
  const product: Product = {
    running, config, dataDir, url,
    secret: (org, repo) => repoSecret(config.rootKeys[0]!, org, repo),
    call: (path, opts) => call(url, config.baseDomain, path, opts),
    db: (repo, op, body, opts = {}) => {
      const org = opts.org ?? 'acme';
      const secret = opts.secret === undefined ? product.secret(org, repo) : opts.secret;
      const headers = { ...(secret === null ? {} : { authorization: `Bearer ${secret}` }), ...opts.headers };
      return call(url, config.baseDomain, `/${repo}/_db/${op}`, { method: 'POST', body, ...opts, headers });
    },
    close: () => (closing ??= (async () => {
      leftovers.delete(product.close);
      await running.close();
      if (env.DATA_DIR === undefined) rmSync(dataDir, { recursive: true, force: true });
    })()),
  };
  let closing: Promise<void> | undefined;
  leftovers.add(product.close);
  return product;
}

export interface SpawnedProduct {
  child: ChildProcess;
  /** SIGKILL to every process of the product (it runs in its own process group). */
  killAll(): void;
  url: string;
  stderr: () => string;
  stdout: () => string;
}

/**
 * Runs `scopebase start` (or `serve <part>`) as a real child process; resolves once its banner names the URL.
 * `openFiles` starts it under `ulimit -n` (soft and hard), as a host with a low open-files limit would; `nodeArgs` go
 * to its Node (`--import` of a test's preload), not to its executors.
 */
export function spawnProduct(env: Record<string, string>, args: string[] = ['start'], opts: { openFiles?: number; nodeArgs?: string[] } = {}): Promise<SpawnedProduct> {
  const argv = [process.execPath, ...(opts.nodeArgs ?? []), 'src/cli/main.ts', ...args];
  const [command, ...rest] = opts.openFiles === undefined ? argv : ['sh', '-c', `ulimit -n ${opts.openFiles} && exec "$@"`, 'sh', ...argv];
  const child = spawn(command!, rest, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let err = '';
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`product did not start in 20s:\n${err}`)), 20_000);
    child.stderr!.on('data', (d) => {
      err += d;
      const m = /\n {2}address: (http:\/\/[^\s]+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        // A group already gone (the file's leftovers hook, registered first, may have run first) is stopped: no ESRCH.
        const killAll = () => {
          leftovers.delete(stopped);
          try {
            process.kill(-child.pid!, 'SIGKILL');
          } catch (e) {
            if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
          }
        };
        const stopped = async () => killAll();
        leftovers.add(stopped);
        resolve({ child, url: m[1]!, stderr: () => err, stdout: () => out, killAll });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`product exited with ${code} before starting:\n${err}`));
    });
  });
}
