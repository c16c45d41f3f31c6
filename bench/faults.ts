// `npm run faults`: the product as a real process under writers, hurt over and over (docs/reliability.md):
//   - kill -9 of the whole process tree at a random moment, then a restart on the same DATA_DIR, N times in a row;
//   - kill -9 of one executor process while writes go on;
//   - SIGSTOP of one executor process for a while: writes to every database keep being acknowledged;
//   - a mirror that accepts connections and never answers (bench/faults/mirror.ts), from early on until the end
//     (through every restart): writes keep their pace; once it answers again it gets every version of every database;
//   - a damaged database file (its first page overwritten while the product is down, at the third restart): that
//     database answers 500 naming the damage, the others keep being written, every later restart serves;
//   - a full disk under writers (bench/faults/disk-full.ts, its own process on a real small tmpfs; root only);
//   - a wall-clock jump of the whole product (test/helpers/clock-shift.ts, a preload): +2 h, then 4 h back, and a
//     restart while the clock is still 2 h behind: writes keep being acknowledged, nothing is refused for it.
// After every restart, every acknowledged write must be there, and every batch whole. Exit 1 otherwise.
//   --cycles N   kill/restart cycles (default 20; --short: 3)    --stop-seconds S   SIGSTOP, hang and jump phases (10; --short: 3)
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Agent } from 'undici';
import { sendJson, type JsonAnswer } from './lib/http.ts';
import { processTree } from './lib/proc.ts';
import { ORG, REPO, startInstance, type Instance } from './scopebase/instance.ts';
import { startFaultMirror } from './faults/mirror.ts';
import { diskFullUnderLoad } from './faults/disk-full.ts';
import { damage, DAMAGED_MESSAGE } from './faults/damage.ts';

const { values: args } = parseArgs({ options: { short: { type: 'boolean', default: false }, cycles: { type: 'string' }, 'stop-seconds': { type: 'string' } } });
const CYCLES = Number(args.cycles ?? (args.short ? 3 : 20));
const STOP_SECONDS = Number(args['stop-seconds'] ?? (args.short ? 3 : 10));
const DATABASES = ['d0', 'd1', 'd2', 'd3'];
const DAMAGED = 'damaged'; // not written by the writers: its file is damaged at the third restart
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

/** The damaged database answers 500 naming the damage (no path), on a read and a write; the log names the file. */
async function checkDamaged(inst: Instance, restart: number, first: boolean): Promise<void> {
  for (const [op, body] of [['query', { sql: 'SELECT * FROM t' }], ['execute', { sql: 'INSERT INTO t VALUES (2)' }]] as const) {
    const r = await db(inst, op, { database: DAMAGED, ...body });
    if (r.status !== 500 || r.json?.error?.code !== 'internal' || !DAMAGED_MESSAGE.test(r.json?.error?.message) || JSON.stringify(r.json).includes(inst.dataDir)) {
      failures.push(`the damaged database's ${op} answered ${r.status} ${JSON.stringify(r.json).slice(0, 200)}`);
    }
  }
  await sleep(100);
  const named = inst.servers[0]!.output().split('\n').some((l) => l.includes('database request failed') && l.includes(`${DAMAGED}.sqlite`));
  if (first && !named) failures.push('the log does not name the damaged file');
  if (first && named) log(`a damaged database file since restart #${restart}: 500 "the database file is damaged (SQLITE_NOTADB …)" on a read and a write, the log names the file; the others go on`);
}

/** Writes acknowledged per database while `ms` pass. */
async function during(writers: ReturnType<typeof startWriters>, ms: number): Promise<number[]> {
  const before = writers.acked();
  await sleep(ms);
  const after = writers.acked();
  return DATABASES.map((d) => after.get(d)! - before.get(d)!);
}
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** Until every database's delivered version for the mirror is its version; returns the versions, or null on timeout. */
async function drained(inst: Instance, mirror: string, timeoutMs: number): Promise<Map<string, number> | null> {
  const until = performance.now() + timeoutMs;
  while (performance.now() < until) {
    const versions = new Map<string, number>();
    for (const database of DATABASES) {
      const r = await db(inst, 'status', { database });
      const m = (r.json?.mirrors ?? []).find((x: { name: string }) => x.name === mirror);
      if (r.status === 200 && m?.deliveredVersion === r.json.version) versions.set(database, r.json.version);
    }
    if (versions.size === DATABASES.length) return versions;
    await sleep(500);
  }
  return null;
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'scopebase-faults-'));
  const rootKeyHex = randomBytes(32).toString('hex');
  const mirror = await startFaultMirror();
  const clockFile = join(dataDir, 'clock-shift');
  const shiftClock = (ms: number) => writeFileSync(clockFile, String(ms)); // the preload reads it every 50 ms
  shiftClock(0);
  const env = {
    DB_SYNC: 'full', DB_MIRROR_MAX_BACKOFF_MS: '5000', // default attempt timeout (10 s); a shorter backoff cap for a short run
    DB_MIRRORS: JSON.stringify([{ name: 'hang', url: mirror.url, secret: `whsec_${randomBytes(24).toString('base64')}` }]),
    CLOCK_SHIFT_FILE: clockFile, NODE_OPTIONS: `--import=${fileURLToPath(new URL('../test/helpers/clock-shift.ts', import.meta.url))}`,
  };
  const start = () => startInstance({ mode: 'one', dataDir, rootKeyHex, env });
  let inst = await start();
  const t0 = performance.now();
  try {
    for (const database of DATABASES) {
      const r = await db(inst, 'migrate', { database, migrations: [{ id: '1', sql: 'CREATE TABLE a(k TEXT PRIMARY KEY); CREATE TABLE b(k TEXT PRIMARY KEY);' }] });
      if (r.status !== 200) throw new Error(`migrate: ${JSON.stringify(r.json)}`);
    }
    if ((await db(inst, 'execute', { database: DAMAGED, statements: [{ sql: 'CREATE TABLE t(x)' }, { sql: 'INSERT INTO t VALUES (1)' }] })).status !== 200) throw new Error('create the database to damage');

    // A mirror that accepts connections and never answers: writes keep their pace. It stays so until the end.
    let writers = startWriters(inst);
    await sleep(500);
    const answering = await during(writers, STOP_SECONDS * 1000);
    mirror.mode = 'hang';
    const hanging = await during(writers, STOP_SECONDS * 1000);
    log(`writes per database in ${STOP_SECONDS} s with the mirror answering ${answering.join(', ')}; with it hanging ${hanging.join(', ')} (${mirror.hung} deliveries left unanswered)`);
    if (sum(hanging) < sum(answering) / 3) failures.push(`a hanging mirror slowed writes: ${sum(answering)} → ${sum(hanging)} in ${STOP_SECONDS} s`);

    // One executor stopped (SIGSTOP): the databases whose writes it was not running keep being written.
    const stopped = executors(inst)[0];
    if (stopped !== undefined) {
      const before = writers.acked();
      signal(stopped, 'SIGSTOP');
      await sleep(STOP_SECONDS * 1000);
      const after = writers.acked();
      signal(stopped, 'SIGCONT');
      const meanwhile = DATABASES.map((d) => after.get(d)! - before.get(d)!);
      log(`an executor stopped for ${STOP_SECONDS} s: writes acknowledged meanwhile per database ${meanwhile.join(', ')}`);
      if (meanwhile.filter((n) => n > 0).length < DATABASES.length - 1) failures.push(`while one executor was stopped, more than one database stopped being written (${meanwhile.join(', ')})`);
    }
    // One executor killed (-9) under writes.
    const victim = executors(inst)[0];
    if (victim !== undefined) signal(victim, 'SIGKILL');
    await sleep(500);
    await writers.stop();
    await check(inst, 'after an executor was killed');

    // The wall clock jumps 2 h ahead, then 4 h back: every database keeps being written; the first restart below
    // happens while the clock is still 2 h behind, the second after it came back (a jump across a restart).
    writers = startWriters(inst);
    await sleep(500);
    for (const [shift, what] of [[2 * 3_600_000, '2 h ahead'], [-2 * 3_600_000, '4 h back, to 2 h behind']] as const) {
      shiftClock(shift);
      const n = await during(writers, STOP_SECONDS * 1000);
      log(`the clock jumped ${what}: writes per database in the next ${STOP_SECONDS} s ${n.join(', ')}`);
      if (n.some((x) => x === 0)) failures.push(`after the clock jumped ${what} a database took no writes (${n.join(', ')})`);
    }
    await writers.stop();
    await check(inst, 'after the clock jumps');

    // kill -9 of everything, restart on the same files, CYCLES times.
    let restartMs = 0;
    const damageAt = Math.min(3, CYCLES);
    for (let c = 1; c <= CYCLES; c++) {
      if (c === 2) shiftClock(0);
      writers = startWriters(inst);
      await sleep(200 + Math.random() * 800);
      for (const pid of [...processTree(inst.pids[0]!).keys()]) signal(pid, 'SIGKILL');
      await writers.stop();
      await agent.close();
      agent = new Agent({ connections: 64 });
      if (c === damageAt) damage(join(dataDir, 'db', ORG, REPO, `${DAMAGED}.sqlite`));
      const r0 = performance.now();
      inst = await start();
      restartMs = Math.max(restartMs, performance.now() - r0);
      await check(inst, `after kill -9 #${c}`);
      if (c >= damageAt) await checkDamaged(inst, damageAt, c === damageAt);
      const total = [...acknowledged.values()].reduce((n, l) => n + l.length, 0);
      log(`cycle ${c}/${CYCLES}: restarted in ${(performance.now() - r0).toFixed(0)} ms; ${total} acknowledged writes so far, ${failures.length} failures`);
    }
    // Status shows the hanging mirror: its backlog, and the last attempt's error (each ends at DB_MIRROR_TIMEOUT_MS).
    let st = await db(inst, 'status', { database: DATABASES[0] });
    for (let i = 0; i < 50 && st.status === 503; i++) st = await db(inst, 'status', { database: DATABASES[0] }); // shed under the writers
    const state = st.json?.mirrors?.[0];
    if (!state) log(`status: ${st.status} ${JSON.stringify(st.json)}`);
    log(`status of ${DATABASES[0]} after hanging all along: ${JSON.stringify(state)}`);
    if (!(state?.pendingEvents > 0) || typeof state?.lastError !== 'string') failures.push(`status does not show the hanging mirror's backlog and error: ${JSON.stringify(state)}`);
    // The mirror answers again: it gets every version of every database, all the while hung included.
    mirror.mode = 'answer';
    const r0 = performance.now();
    const versions = await drained(inst, 'hang', 60_000);
    if (versions === null) failures.push('the mirror that hung did not catch up within 60 s of answering again');
    for (const [database, version] of versions ?? []) {
      const got = mirror.received.get(database) ?? new Set();
      const missing = Array.from({ length: version }, (_, i) => i + 1).filter((v) => !got.has(v));
      if (missing.length) failures.push(`the mirror never got ${missing.length} versions of ${database} (first ${missing[0]})`);
    }
    log(`the mirror that hung (${mirror.hung} deliveries unanswered) answers again: caught up in ${((performance.now() - r0) / 1000).toFixed(1)} s, versions ${[...(versions ?? new Map()).values()].join(', ')}, every one received`);
    const total = [...acknowledged.values()].reduce((n, l) => n + l.length, 0);
    log(`${CYCLES} kill -9 cycles in ${((performance.now() - t0) / 1000).toFixed(1)} s; ${total} acknowledged writes, all checked after every restart; slowest restart ${restartMs.toFixed(0)} ms`);
  } finally {
    await inst.stop();
    await agent.close();
    await mirror.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  await diskFullUnderLoad(log, failures);
  if (failures.length) {
    const distinct = new Map<string, number>();
    for (const f of failures) distinct.set(f, (distinct.get(f) ?? 0) + 1);
    for (const [f, n] of [...distinct].slice(0, 20)) log(`FAIL ${f}${n > 1 ? ` (×${n})` : ''}`);
    process.exit(1);
  }
  log('OK: no acknowledged write lost, no batch half applied, every restart served');
}

await main();
