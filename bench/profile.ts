// `npx node bench/profile.ts [read|insert|libsql-read] [seconds] [split]`: starts the product with --cpu-prof (and its executor
// processes too; with `split`, `serve db` and `serve proxy` as two processes), puts a point-read or insert load on
// it through the proxy, and prints where the time went.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { request } from 'undici';
import { repoSecret } from '../src/shared/secrets.ts';
import { summarize } from './lib/cpuprofile.ts';

const mode = (['insert', 'libsql-read'] as const).find((m) => m === process.argv[2]) ?? 'read';
const seconds = Number(process.argv[3] ?? 6);
const key = 'c'.repeat(64);
const dataDir = mkdtempSync(join(tmpdir(), 'scopebase-profile-'));
const profDir = mkdtempSync(join(tmpdir(), 'scopebase-cpuprofile-'));
const port = 18_080;
const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const split = process.argv[4] === 'split';
const startPart = async (args: string[], env: Record<string, string>) => {
  const child = spawn(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${profDir}`, main, ...args], {
    env: { ...process.env, ADMIN_PORT: '0', DATA_DIR: dataDir, RUNTIME_ROOT_KEY: key, ACCOUNT_ENCRYPTION_KEYS: 'd'.repeat(64), LOG_LEVEL: 'warn', SCOPEBASE_EXECUTOR_NODE_ARGS: `--cpu-prof --cpu-prof-dir=${profDir}`, ...env },
    stdio: ['ignore', 'inherit', 'pipe'],
  });
  await new Promise<void>((resolve) => child.stderr!.on('data', (d) => /is running/.test(String(d)) && resolve()));
  return child;
};
const children = split
  ? [await startPart(['serve', 'db'], { PORT: String(port + 1) }), await startPart(['serve', 'proxy'], { PORT: String(port), DB_SERVICE_URL: `http://127.0.0.1:${port + 1}` })]
  : [await startPart(['start'], { PORT: String(port) })];
const headers = { host: `acme.localhost:${port}`, authorization: `Bearer ${repoSecret(Buffer.from(key, 'hex'), 'acme', 'web')}`, 'content-type': 'application/json' };
const post = async (op: string, body: unknown) => (await request(`http://127.0.0.1:${port}/web/_db/${op}`, { method: 'POST', headers, body: JSON.stringify(body) })).body.text();
await post('migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT, done INTEGER)' }] });
await post('execute', { sql: "INSERT INTO todos(title, done) WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) SELECT 'todo ' || x, x % 2 FROM c" });
const READ = 'SELECT id, title, done FROM todos WHERE id = ?';
const bodyOf = (i: number) => {
  const id = 1 + ((i * 7919) % 100_000);
  if (mode === 'read') return { sql: READ, params: [id] };
  if (mode === 'insert') return { sql: 'INSERT INTO todos(title, done) VALUES (?, 0)', params: [`x${i}`] };
  // what @libsql/client sends for one execute (SPEC 4.10)
  return { baton: null, requests: [{ type: 'execute', stmt: { sql: READ, args: [{ type: 'integer', value: String(id) }] } }, { type: 'close' }] };
};
const requests = Array.from({ length: 256 }, (_, i) => ({
  method: 'POST' as const, path: `/web/_db/${{ read: 'query', insert: 'execute', 'libsql-read': 'v2/pipeline' }[mode]}`, headers, body: JSON.stringify(bodyOf(i)),
}));
const result = await autocannon({ url: `http://127.0.0.1:${port}`, connections: 32, duration: seconds, requests });
console.log(`${mode}: ${Math.round(result.requests.average)} req/s, p50 ${result.latency.p50} ms, p99 ${result.latency.p99} ms, non-2xx ${result.non2xx}`);
for (const child of children.reverse()) {
  child.kill('SIGTERM');
  await new Promise((r) => child.on('exit', r));
}
for (const file of readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile')).sort()) {
  console.log(`\n== ${file} (by pid: the main process${split ? ' (db), then the proxy' : ''}, then executors)`);
  console.log(summarize(join(profDir, file), 20));
}
rmSync(dataDir, { recursive: true, force: true });
console.log(`\nprofiles kept in ${profDir} (open them in Chrome DevTools → Performance)`);
