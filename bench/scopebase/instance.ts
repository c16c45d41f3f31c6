// Starting scopebase for the bench: one process (`start`), or the proxy and the database service as their own
// processes (`serve db` + `serve proxy`), in a fresh DATA_DIR; schema and 100k-row seed through the public API.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { repoSecret } from '../../src/shared/secrets.ts';
import { postJson } from '../lib/http.ts';
import { startServer, type Server } from '../lib/proc.ts';
import { freePort } from '../../test/helpers/ports.ts';
import { ROWS, SCHEMA, seedSql } from '../servers/seed.ts';

// The package's bin, as `npm start` and `npx scopebase` run it; BENCH_SCOPEBASE_MAIN: another entry point with the
// same CLI (e.g. an installed build or an older copy), to compare versions.
const MAIN = process.env.BENCH_SCOPEBASE_MAIN ?? fileURLToPath(new URL('../../bin/scopebase.js', import.meta.url));
// `address:` since the banner put the org host first; an older copy's `is running: <url> (admin`.
const READY = /\n {2}address: (http:\/\/\S+)|is running: (http:\/\/\S+) \(admin/;
export const ORG = 'acme';
export const REPO = 'web';

export interface Instance {
  servers: Server[];
  /** Root pids whose process trees are "the server" for CPU and RSS. */
  pids: number[];
  /** The proxy (public) base URL and the Host header that names the org. */
  proxyUrl: string;
  host: string;
  /** The database control service's own URL in split mode. */
  dbUrl: string | null;
  rootKey: Buffer;
  dataDir: string;
  env: Record<string, string>;
  secret(repo?: string): string;
  stop(): Promise<void>;
}

export interface InstanceOptions {
  mode: 'one' | 'split';
  env?: Record<string, string>;
  dataDir?: string;
  rootKeyHex?: string;
}

export function scopebaseEnv(dataDir: string, rootKeyHex: string, port: number, adminPort: number): Record<string, string> {
  return {
    PORT: String(port), ADMIN_PORT: String(adminPort), DATA_DIR: dataDir,
    RUNTIME_ROOT_KEY: rootKeyHex, ACCOUNT_ENCRYPTION_KEYS: randomBytes(32).toString('hex'),
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'warn', NODE_ENV: 'development',
    // The bench drives one repo past the default per-repo rate: limit it far above (the limiter still runs).
    DB_RATE_LIMIT_PER_REPO: '100000000',
  };
}

export function startOne(name: string, env: Record<string, string>, part: 'start' | 'db' | 'proxy' = 'start'): Promise<Server> {
  const args = part === 'start' ? [MAIN, 'start'] : [MAIN, 'serve', part];
  return startServer({ name, args, env, ready: READY, timeoutMs: 60_000 });
}

export async function startInstance(opts: InstanceOptions): Promise<Instance> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'scopebase-bench-'));
  const rootKeyHex = opts.rootKeyHex ?? randomBytes(32).toString('hex');
  const rootKey = Buffer.from(rootKeyHex, 'hex');
  const servers: Server[] = [];
  const stop = async () => {
    for (const s of servers.reverse()) await s.stop();
    if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    const port = await freePort();
    const env = { ...scopebaseEnv(dataDir, rootKeyHex, port, await freePort()), ...opts.env };
    let dbUrl: string | null = null;
    if (opts.mode === 'split') {
      const dbPort = await freePort();
      const db = await startOne('scopebase db', { ...env, PORT: String(dbPort), ADMIN_PORT: String(await freePort()) }, 'db');
      servers.push(db);
      dbUrl = `http://127.0.0.1:${dbPort}`;
      servers.push(await startOne('scopebase proxy', { ...env, DB_SERVICE_URL: dbUrl }, 'proxy'));
    } else {
      servers.push(await startOne('scopebase', env));
    }
    return {
      servers, pids: servers.map((s) => s.pid), proxyUrl: `http://127.0.0.1:${port}`, host: `${ORG}.localhost:${port}`,
      dbUrl, rootKey, dataDir, env, secret: (repo = REPO) => repoSecret(rootKey, ORG, repo), stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

export function dbHeaders(inst: Instance, repo = REPO): Record<string, string> {
  return { host: inst.host, authorization: `Bearer ${inst.secret(repo)}`, 'content-type': 'application/json' };
}

/** Applies the schema and seeds ROWS rows: one recursive-CTE INSERT per 10k ids, or literal batches if that is refused. */
export async function seed(inst: Instance, rows = ROWS): Promise<{ ms: number; how: string }> {
  const base = `${inst.proxyUrl}/${REPO}/_db`;
  const headers = dbHeaders(inst);
  const t0 = performance.now();
  await postJson(`${base}/migrate`, headers, { migrations: [{ id: '0001_todos', sql: SCHEMA + ';' }] });
  if (rows === 0) return { ms: performance.now() - t0, how: 'schema only' };
  try {
    for (let from = 1; from <= rows; from += 10_000) {
      await postJson(`${base}/execute`, headers, { sql: seedSql(from, Math.min(rows, from + 9_999)) });
    }
    return { ms: performance.now() - t0, how: 'recursive CTE, 10k rows per request' };
  } catch (e) {
    // Fall back to 100 statements x 10 rows with params per request.
    const firstError = (e as Error).message;
    const status = await postJson(`${base}/query`, headers, { sql: 'SELECT max(id) AS m FROM todos' }) as { results: { rows: [[number | null]] }[] };
    let next = (status.results[0]?.rows[0]?.[0] ?? 0) + 1;
    while (next <= rows) {
      const statements = [];
      for (let s = 0; s < 100 && next <= rows; s++) {
        const ids = Array.from({ length: Math.min(10, rows - next + 1) }, (_, i) => next + i);
        next += ids.length;
        statements.push({ sql: `INSERT INTO todos (id, title, done) VALUES ${ids.map(() => '(?, ?, ?)').join(', ')}`, params: ids.flatMap((id) => [id, `todo number ${id}`, id % 2]) });
      }
      await postJson(`${base}/execute`, headers, { statements });
    }
    return { ms: performance.now() - t0, how: `batches of 100 statements (CTE refused: ${firstError.slice(0, 120)})` };
  }
}
