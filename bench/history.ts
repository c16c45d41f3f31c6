// `npm run bench:history`: what time travel costs (SPEC 4.11) — history disk per commit and per day at a write rate,
// and how long restoring the oldest version takes as the history grows. docs/backups.md quotes the figures.
//   --commits N    commits written (default 20000)
//   --short        2000 commits, for CI (exit 0 when every restore answered 200 with the right content)
import { parseArgs } from 'node:util';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { repoSecret } from '../src/shared/secrets.ts';
import { startInstance, type Instance } from './scopebase/instance.ts';

const { values: args } = parseArgs({ options: { short: { type: 'boolean', default: false }, commits: { type: 'string' } } });
const COMMITS = Number(args.commits ?? (args.short ? 2000 : 20000));
const agent = new Agent({ connections: 16 });
const log = (s: string) => process.stderr.write(`[history] ${s}\n`);

async function db(inst: Instance, op: string, body: unknown): Promise<{ status: number; json: Record<string, any> }> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const res = await request(`${inst.proxyUrl}/web/_db/${op}`, {
    method: 'POST', dispatcher: agent, body: JSON.stringify(body), headersTimeout: 600_000, bodyTimeout: 600_000,
    headers: { host: inst.host, authorization: `Bearer ${repoSecret(inst.rootKey, 'acme', 'web')}`, 'content-type': 'application/json' },
  });
  return { status: res.statusCode, json: await res.body.json() as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
}

function bytesUnder(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) n += e.isDirectory() ? bytesUnder(join(dir, e.name)) : statSync(join(dir, e.name)).size;
  return n;
}

const inst = await startInstance({ mode: 'one', env: {} });
let failed = false;
try {
  await db(inst, 'execute', { sql: 'CREATE TABLE events(id INTEGER PRIMARY KEY, kind TEXT, payload TEXT, at INTEGER)' });
  const first = (await db(inst, 'execute', { sql: "INSERT INTO events(kind, payload, at) VALUES ('seed', 'first', 0)" })).json.version as number;
  const checkpoints: number[] = [];
  const t0 = performance.now();
  // One writer, one row per commit: the worst case for history (no group commit to share a commit's pages).
  for (let i = 0; i < COMMITS; i++) {
    await db(inst, 'execute', { sql: 'INSERT INTO events(kind, payload, at) VALUES (?, ?, ?)', params: ['click', `{"user":${i % 977},"page":"/p/${i % 131}"}`, i] });
    if ((i + 1) % Math.max(1, COMMITS / 4) === 0) checkpoints.push(i + 1);
  }
  const seconds = (performance.now() - t0) / 1000;
  const history = bytesUnder(join(inst.dataDir, 'history'));
  const dbBytes = statSync(join(inst.dataDir, 'db', 'acme', 'web', 'main.sqlite')).size;
  const perCommit = history / (COMMITS + 2);
  log(`${COMMITS} single-row commits in ${seconds.toFixed(1)} s (${(COMMITS / seconds).toFixed(0)}/s); database ${(dbBytes / 1048576).toFixed(1)} MiB; history ${(history / 1048576).toFixed(1)} MiB = ${(perCommit / 1024).toFixed(1)} KiB a commit`);
  log(`at 10 commits/s all day: ${(perCommit * 10 * 86400 / 1024 ** 3).toFixed(1)} GiB of history a day (DB_HISTORY_MAX_BYTES caps it)`);
  for (const [what, version] of [['the oldest version', first], ['the newest but one', first + COMMITS - 1]] as const) {
    const t = performance.now();
    const r = await db(inst, 'restore', { toVersion: version });
    const ms = performance.now() - t;
    const rows = (await db(inst, 'query', { sql: 'SELECT count(*) FROM events' })).json.results?.[0]?.rows?.[0]?.[0];
    const want = version - first + 1;
    if (r.status !== 200 || rows !== want) failed = true;
    log(`restore ${what} (version ${version}, ${want} rows): ${r.status} in ${ms.toFixed(0)} ms${rows === want ? '' : ` — WRONG: ${rows} rows`}`);
  }
} finally {
  await inst.stop();
  await agent.close();
}
process.exit(failed ? 1 : 0);
