// A full disk under load, for bench/faults.ts: one product process whose DATA_DIR is a real small tmpfs (mounted
// here, unmounted after; needs root — skipped otherwise). Writers fill it with 20 KB rows while a reader counts rows;
// once writes are refused, a ballast file is deleted (as an operator frees space). What must hold: writes get 507
// or 503 while it is full, never 500; reads keep answering 200; writes resume once space returns; every
// acknowledged row is there and integrity_check is ok, before and after a kill -9 and restart.
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Agent } from 'undici';
import { sendJson, type JsonAnswer } from '../lib/http.ts';
import { processTree } from '../lib/proc.ts';
import { startInstance, type Instance } from '../scopebase/instance.ts';
import { canMount, mountTmpfs } from './tmpfs.ts';

const DATABASES = ['f0', 'f1', 'f2', 'f3'];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function diskFullUnderLoad(log: (s: string) => void, failures: string[], sizeMiB = 48): Promise<void> {
  if (!canMount()) {
    log('full disk: skipped (mounting a tmpfs needs root)');
    return;
  }
  const fs = mountTmpfs('scopebase-full-', sizeMiB);
  const dir = fs.dir;
  let agent = new Agent({ connections: 32 });
  const rootKeyHex = randomBytes(32).toString('hex');
  const start = () => startInstance({ mode: 'one', dataDir: dir, rootKeyHex, env: { DB_SYNC: 'full', DB_HISTORY_DAYS: '1' } });
  let inst: Instance = await start();
  const db = (op: string, body: unknown): Promise<JsonAnswer> =>
    sendJson(`${inst.proxyUrl}/web/_db/${op}`, { dispatcher: agent, body, headers: { host: inst.host, authorization: `Bearer ${inst.secret()}` } });
  const acked = new Map<string, string[]>(DATABASES.map((d) => [d, []]));
  const writes: Record<number, number> = {};
  const reads: Record<number, number> = {};
  const t0 = performance.now();
  try {
    for (const database of DATABASES) {
      const r = await db('migrate', { database, migrations: [{ id: '1', sql: 'CREATE TABLE big(k TEXT PRIMARY KEY, pad BLOB)' }] });
      if (r.status !== 200) throw new Error(`migrate on the tmpfs: ${JSON.stringify(r.json)}`);
    }
    writeFileSync(join(dir, 'ballast'), Buffer.alloc(Math.floor(sizeMiB / 4) << 20));
    let stopped = false;
    let refusedSince: number | null = null;
    const writer = async (w: number) => {
      for (let i = 0; !stopped; i++) {
        const database = DATABASES[(w + i) % DATABASES.length]!;
        const k = `${w}-${i}`;
        const r = await db('execute', { database, sql: 'INSERT INTO big(k, pad) VALUES (?, randomblob(20000))', params: [k] });
        writes[r.status] = (writes[r.status] ?? 0) + 1;
        if (r.status === 200) {
          acked.get(database)!.push(k);
          refusedSince = null;
        } else if (r.status === 507 || r.status === 503) {
          refusedSince ??= performance.now();
          await sleep(20);
        } else failures.push(`full disk: a write got ${r.status}: ${JSON.stringify(r.json).slice(0, 200)}`);
      }
    };
    const reader = async () => {
      for (let i = 0; !stopped; i++) {
        const r = await db('query', { database: DATABASES[i % DATABASES.length], sql: 'SELECT count(*) FROM big' });
        reads[r.status] = (reads[r.status] ?? 0) + 1;
        if (r.status !== 200 && r.status !== 503) failures.push(`full disk: a read got ${r.status}: ${JSON.stringify(r.json).slice(0, 200)}`);
      }
    };
    const all = [...Array.from({ length: 6 }, (_, w) => writer(w)), reader(), reader()];
    while (performance.now() - t0 < 60_000 && !(refusedSince !== null && performance.now() - refusedSince > 2000)) await sleep(100);
    const fullAt = { ...writes };
    if (refusedSince === null) failures.push(`full disk: the ${sizeMiB} MiB tmpfs never filled in 60 s (${JSON.stringify(writes)})`);
    const readsWhileFull = { ...reads };
    await sleep(1000);
    rmSync(join(dir, 'ballast'));
    const before = [...acked.values()].reduce((n, l) => n + l.length, 0);
    await sleep(2000);
    const resumed = [...acked.values()].reduce((n, l) => n + l.length, 0) - before;
    stopped = true;
    await Promise.all(all);
    if (resumed === 0) failures.push('full disk: writes did not resume within 2 s of space returning');
    log(`full disk (${sizeMiB} MiB tmpfs): writes until full ${JSON.stringify(fullAt)}, reads meanwhile ${JSON.stringify(readsWhileFull)}; ballast removed: ${resumed} writes acknowledged in the next 2 s`);
    await checkAll(db, acked, failures, 'full disk, space back');
    for (const pid of [...processTree(inst.pids[0]!).keys()]) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch { /* gone */ }
    }
    await agent.close();
    agent = new Agent({ connections: 32 });
    inst = await start();
    await checkAll(db, acked, failures, 'full disk, after kill -9 and restart');
    log(`full disk: ${[...acked.values()].reduce((n, l) => n + l.length, 0)} acknowledged writes all present and integrity_check ok, before and after a kill -9 and restart`);
  } finally {
    await inst.stop();
    await agent.close().catch(() => undefined);
    fs.unmount();
  }
}

async function checkAll(db: (op: string, body: unknown) => Promise<JsonAnswer>, acked: Map<string, string[]>, failures: string[], when: string): Promise<void> {
  for (const [database, keys] of acked) {
    const r = await db('query', { database, statements: [{ sql: 'SELECT k FROM big' }, { sql: 'PRAGMA integrity_check' }] });
    if (r.status !== 200) {
      failures.push(`${when}: ${database} could not be read: ${r.status} ${JSON.stringify(r.json).slice(0, 200)}`);
      continue;
    }
    const have = new Set((r.json.results[0].rows as string[][]).map((row) => row[0]));
    const lost = keys.filter((k) => !have.has(k)).length;
    if (lost) failures.push(`${when}: ${lost} acknowledged writes lost in ${database}`);
    if (JSON.stringify(r.json.results[1].rows) !== '[["ok"]]') failures.push(`${when}: ${database} integrity_check ${JSON.stringify(r.json.results[1].rows)}`);
  }
}
