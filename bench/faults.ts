// `npm run faults`: the product as a real process under writers, hurt over and over (docs/reliability.md):
//   - kill -9 of the whole process tree at a random moment, then a restart on the same DATA_DIR, N times in a row;
//   - kill -9 of one executor process while writes go on;
//   - SIGSTOP of one executor process for a while: writes to every database keep being acknowledged.
// After every restart, every acknowledged write must be there, and every batch whole. Exit 1 otherwise.
//   --cycles N   kill/restart cycles (default 20; --short: 3)    --stop-seconds S   SIGSTOP length (10; --short: 3)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Agent } from 'undici';
import { sendJson, type JsonAnswer } from './lib/http.ts';
import { processTree } from './lib/proc.ts';
import { startInstance, type Instance } from './scopebase/instance.ts';

const { values: args } = parseArgs({ options: { short: { type: 'boolean', default: false }, cycles: { type: 'string' }, 'stop-seconds': { type: 'string' } } });
const CYCLES = Number(args.cycles ?? (args.short ? 3 : 20));
const STOP_SECONDS = Number(args['stop-seconds'] ?? (args.short ? 3 : 10));
const DATABASES = ['d0', 'd1', 'd2', 'd3'];
const WRITERS = 8;
const log = (s: string) => process.stderr.write(`[faults] ${s}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let agent = new Agent({ connections: 64 });
const acknowledged = new Map<string, string[]>(DATABASES.map((d) => [d, []]));
const failures: string[] = [];

/** One database request; status 0 when no answer came (the process is gone). */
const db = (inst: Instance, op: string, body: unknown): Promise<JsonAnswer> =>
  sendJson(`${inst.proxyUrl}/web/_db/${op}`, { dispatcher: agent, body, headers: { host: inst.host, authorization: `Bearer ${inst.secret()}` } });

/** Writers, two per database: each batch puts one key into two tables; a 200 records it as acknowledged. */
function startWriters(inst: Instance): { stop(): Promise<void>; acked(): Map<string, number> } {
  let stopped = false;
  const count = new Map<string, number>(DATABASES.map((d) => [d, 0]));
  const one = async (w: number) => {
    const database = DATABASES[w % DATABASES.length]!;
    for (let i = 0; !stopped; i++) {
      const k = `${randomBytes(4).toString('hex')}-${w}-${i}`;
      const r = await db(inst, 'execute', { database, statements: [{ sql: 'INSERT INTO a(k) VALUES (?)', params: [k] }, { sql: 'INSERT INTO b(k) VALUES (?)', params: [k] }] });
      if (r.status === 0) {
        await sleep(20); // the process is gone: no reply, so nothing was acknowledged
      } else if (r.status === 200) {
        acknowledged.get(database)!.push(k);
        count.set(database, count.get(database)! + 1);
      } else if (r.status !== 503 && r.status !== 422) {
        // 503: refused or lost, nothing applied (or said unknown). 422: the write sat on the stopped executor past
        // DB_QUERY_TIMEOUT_MS, which stopped it as it stops any runaway; nothing of it was applied.
        failures.push(`a write got ${r.status}: ${JSON.stringify(r.json).slice(0, 200)}`);
      }
    }
  };
  const all = Array.from({ length: WRITERS }, (_, w) => one(w));
  return { stop: async () => { stopped = true; await Promise.all(all); }, acked: () => new Map(count) };
}

/** Every acknowledged key is in both tables of its database, and the tables hold the same keys. */
async function check(inst: Instance, when: string): Promise<void> {
  for (const database of DATABASES) {
    const r = await db(inst, 'query', { database, statements: [{ sql: 'SELECT k FROM a' }, { sql: 'SELECT k FROM b' }] });
    if (r.status !== 200) {
      failures.push(`${when}: ${database} could not be read: ${JSON.stringify(r.json).slice(0, 200)}`);
      continue;
    }
    const [a, b] = (r.json.results as { rows: string[][] }[]).map((x) => new Set(x.rows.map((row) => row[0])));
    const lost = acknowledged.get(database)!.filter((k) => !a!.has(k) || !b!.has(k));
    if (lost.length) failures.push(`${when}: ${lost.length} acknowledged writes lost in ${database}`);
    if (a!.size !== b!.size) failures.push(`${when}: a batch is half applied in ${database} (${a!.size} vs ${b!.size})`);
  }
}

const executors = (inst: Instance) => [...processTree(inst.pids[0]!).keys()].filter((p) => p !== inst.pids[0]);
/** Signals a process that may have exited meanwhile (an idle extra executor is closed after 5 s). */
const signal = (pid: number, sig: NodeJS.Signals) => {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
};

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'scopebase-faults-'));
  const rootKeyHex = randomBytes(32).toString('hex');
  const start = () => startInstance({ mode: 'one', dataDir, rootKeyHex, env: { DB_SYNC: 'full' } });
  let inst = await start();
  const t0 = performance.now();
  try {
    for (const database of DATABASES) {
      const r = await db(inst, 'migrate', { database, migrations: [{ id: '1', sql: 'CREATE TABLE a(k TEXT PRIMARY KEY); CREATE TABLE b(k TEXT PRIMARY KEY);' }] });
      if (r.status !== 200) throw new Error(`migrate: ${JSON.stringify(r.json)}`);
    }

    // One executor stopped (SIGSTOP): the databases whose writes it was not running keep being written.
    let writers = startWriters(inst);
    await sleep(500);
    const stopped = executors(inst)[0];
    if (stopped !== undefined) {
      const before = writers.acked();
      signal(stopped, 'SIGSTOP');
      await sleep(STOP_SECONDS * 1000);
      const after = writers.acked();
      signal(stopped, 'SIGCONT');
      const during = DATABASES.map((d) => after.get(d)! - before.get(d)!);
      log(`an executor stopped for ${STOP_SECONDS} s: writes acknowledged meanwhile per database ${during.join(', ')}`);
      if (during.filter((n) => n > 0).length < DATABASES.length - 1) failures.push(`while one executor was stopped, more than one database stopped being written (${during.join(', ')})`);
    }
    // One executor killed (-9) under writes.
    const victim = executors(inst)[0];
    if (victim !== undefined) signal(victim, 'SIGKILL');
    await sleep(500);
    await writers.stop();
    await check(inst, 'after an executor was killed');

    // kill -9 of everything, restart on the same files, CYCLES times.
    let restartMs = 0;
    for (let c = 1; c <= CYCLES; c++) {
      writers = startWriters(inst);
      await sleep(200 + Math.random() * 800);
      for (const pid of [...processTree(inst.pids[0]!).keys()]) signal(pid, 'SIGKILL');
      await writers.stop();
      await agent.close();
      agent = new Agent({ connections: 64 });
      const r0 = performance.now();
      inst = await start();
      restartMs = Math.max(restartMs, performance.now() - r0);
      await check(inst, `after kill -9 #${c}`);
      const total = [...acknowledged.values()].reduce((n, l) => n + l.length, 0);
      log(`cycle ${c}/${CYCLES}: restarted in ${(performance.now() - r0).toFixed(0)} ms; ${total} acknowledged writes so far, ${failures.length} failures`);
    }
    const total = [...acknowledged.values()].reduce((n, l) => n + l.length, 0);
    log(`${CYCLES} kill -9 cycles in ${((performance.now() - t0) / 1000).toFixed(1)} s; ${total} acknowledged writes, all checked after every restart; slowest restart ${restartMs.toFixed(0)} ms`);
  } finally {
    await inst.stop();
    await agent.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  if (failures.length) {
    for (const f of failures.slice(0, 20)) log(`FAIL ${f}`);
    process.exit(1);
  }
  log('OK: no acknowledged write lost, no batch half applied, every restart served');
}

await main();
