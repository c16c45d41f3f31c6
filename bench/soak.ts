// `npm run soak`: mixed traffic for minutes against one real product process with two mirrors configured (the
// reference mirror and a webhook receiver, bench/soak/receiver.ts): point and range reads, writes, batches,
// migrations, /verify, credential writes and reads, app traffic, over many databases in many orgs, and one repo
// running a runaway statement at a steady rate. Checks: no 5xx but 503, every acknowledged write present at the
// end, both mirrors drained and converged (bench/soak/converge.ts), RSS and open fds flat after warm-up; writes p99
// per operation per interval and an SVG plot (docs/soak-p99.svg, by the full form only), and the other repos' p99
// with and without a runaway in flight.
//   --short   60 s, 40 databases in 8 orgs      --seconds S  --orgs N  --dbs N   (full: 600 s, 50 orgs, 500 dbs)
//   --runaway-every S   one runaway statement (past DB_QUERY_TIMEOUT_MS) started every S seconds (8; 0: none)
//   --clock-jump        the product's wall clock (test/helpers/clock-shift.ts) jumps 2 h ahead at a third of the run
//                       and back at two thirds; the receiver, on the real clock, refuses deliveries meanwhile
//   --faults            the faults of bench/soak/faults.ts during the traffic (with --clock-jump): kill -9 of the
//                       product and of an executor (--cycles N each: 20; --short 3), SIGSTOP of an executor and a full
//                       disk (--stop-seconds S: 10; --short 3), a damaged database file, a mirror that never answers
//                       (faults until 70 % of the run; RSS and fds judged in the product's last lifetime, after them)
import { parseArgs } from 'node:util';
import { createServer } from 'node:http';
import { fork } from 'node:child_process';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent } from 'undici';
import { bearer, sendJson, type JsonAnswer } from './lib/http.ts';
import { loadConfig } from '../src/shared/config.ts';
import { processTree, treeRss } from './lib/proc.ts';
import { freePort } from '../test/helpers/ports.ts';
import { spawnProduct, tempDir, testEnv, ROOT_KEY } from '../test/helpers/product.ts';
import { signInUser } from '../test/helpers/session.ts';
import { svgLines } from './soak/plot.ts';
import { checkReceiver, compareReplicas, drain } from './soak/converge.ts';
import type { ReceiverReport } from './soak/receiver.ts';
import { signInOnce, startIdp } from './soak/signin.ts';
import { FaultWindows, runFaults } from './soak/faults.ts';
import { startFaultMirror } from './faults/mirror.ts';
import { canMount, mountTmpfs } from './faults/tmpfs.ts';

const { values: args } = parseArgs({ options: { short: { type: 'boolean', default: false }, seconds: { type: 'string' }, orgs: { type: 'string' }, dbs: { type: 'string' }, 'runaway-every': { type: 'string' }, 'clock-jump': { type: 'boolean', default: false }, faults: { type: 'boolean', default: false }, cycles: { type: 'string' }, 'stop-seconds': { type: 'string' } } });
const FAULTS = args.faults;
if (FAULTS) args['clock-jump'] = true;
const RUNAWAY_EVERY_S = Number(args['runaway-every'] ?? 8);
const SECONDS = Number(args.seconds ?? (args.short ? 60 : 600));
const ORGS = Number(args.orgs ?? (args.short ? 8 : 50));
const DBS = Number(args.dbs ?? (args.short ? 40 : 500));
const WINDOW_S = Math.max(5, Math.round(SECONDS / 30));
const log = (s: string) => process.stderr.write(`[soak] ${s}\n`);

// With --faults, DATA_DIR is a real tmpfs of its own (root only), so that a ballast file can fill it.
const tmpfs = FAULTS && canMount() ? mountTmpfs('scopebase-soak-', args.short ? 1024 : 4096) : null;
const dataDir = tmpfs?.dir ?? tempDir('scopebase-soak-');
const hangMirror = FAULTS ? await startFaultMirror() : null;
// Outside DATA_DIR: the clock must be able to jump while the disk is full (CI's run crashed so).
const clockFile = join(tmpdir(), `scopebase-soak-clock-${process.pid}`);
const windows = new FaultWindows();
const [port, mirrorPort] = [await freePort(), await freePort()];
const mirrorSecret = `whsec_${randomBytes(32).toString('base64')}`;
const receiverSecret = `whsec_${randomBytes(32).toString('base64')}`;
const receiver = fork(fileURLToPath(new URL('./soak/receiver.ts', import.meta.url)), { env: { ...process.env, RECEIVER_SECRET: receiverSecret } });
const receiverPort = await new Promise<number>((r) => receiver.once('message', (m: { port: number }) => r(m.port)));
const idp = await startIdp(); // an OIDC issuer in its own process, for the sign-in op
const upstream = createServer((req, res) => { req.resume(); res.end('app'); });
await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
const env = testEnv(dataDir, {
  PORT: String(port), MIRROR_PORT: String(mirrorPort), MIRROR_SECRET: mirrorSecret, MIRROR_SOURCE_URL: `http://127.0.0.1:${port}`,
  DB_MIRRORS: JSON.stringify([
    { name: 'reference', url: `http://127.0.0.1:${mirrorPort}/hook`, secret: mirrorSecret },
    { name: 'receiver', url: `http://127.0.0.1:${receiverPort}/events`, secret: receiverSecret },
    ...(hangMirror ? [{ name: 'hang', url: hangMirror.url, secret: `whsec_${randomBytes(32).toString('base64')}` }] : []),
  ]),
  // Errors are logged (the damaged file must be named); a shorter backoff cap so the hanging mirror catches up.
  ...(FAULTS ? { LOG_LEVEL: 'error', DB_MIRROR_MAX_BACKOFF_MS: '5000' } : {}),
  ...idp.env,
  APPS: JSON.stringify({ 'org0/app': `http://127.0.0.1:${(upstream.address() as { port: number }).port}` }),
  ...(args['clock-jump'] ? { CLOCK_SHIFT_FILE: clockFile, NODE_OPTIONS: `--import=${fileURLToPath(new URL('../test/helpers/clock-shift.ts', import.meta.url))}` } : {}),
});
const shiftClock = (ms: number) => args['clock-jump'] && writeFileSync(clockFile, String(ms));
const config = loadConfig(env);
const orgs = Array.from({ length: ORGS }, (_, i) => `org${i}`);
const cookies = new Map<string, string>();
for (const o of orgs) cookies.set(o, (await signInUser({ dataDir, config }, o, 'soaker')).cookie);
let product = await spawnProduct(env);
process.on('exit', () => { try { product.killAll(); } catch { /* already gone */ } receiver.kill(); idp.stop(); tmpfs?.unmount(); }); // also when the script throws
const rootKey = Buffer.from(ROOT_KEY, 'hex');
const agent = new Agent({ connections: 64, keepAliveTimeout: 10_000 });
const dbs = Array.from({ length: DBS }, (_, i) => ({ org: orgs[i % ORGS]!, repo: `r${Math.floor(i / ORGS) % 10}`, database: `d${i}` }));

type Db = (typeof dbs)[number];
const call = (org: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<JsonAnswer> =>
  sendJson(`${product.url}${path}`, { method, body, dispatcher: agent, headers: { host: `${org}.${config.baseDomain}:${port}`, ...headers } });
const dbCall = (d: Db, op: string, body: Record<string, unknown>) => call(d.org, 'POST', `/${d.repo}/_db/${op}`, { database: d.database, ...body }, { authorization: bearer(rootKey, d.org, d.repo) });

for (const d of dbs) {
  let r: JsonAnswer = { status: 503, json: null };
  for (let i = 0; i < 20 && r.status === 503; i++) { // shedding while the product warms up is documented: retry
    if (i) await new Promise((done) => setTimeout(done, 200));
    r = await dbCall(d, 'migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE w(id INTEGER PRIMARY KEY, k INTEGER, v TEXT)' }] });
  }
  if (r.status !== 200) throw new Error(`migrate ${JSON.stringify(d)}: ${r.status} ${JSON.stringify(r.json)}`);
}
// The runaway repo: its own database, where a statement that never ends on its own starts every RUNAWAY_EVERY_S.
const runawayDb: Db = { org: orgs[0]!, repo: 'runaway', database: 'main' };
if ((await dbCall(runawayDb, 'migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE t(x)' }] })).status !== 200) throw new Error('migrate the runaway repo');
// With --faults: a database outside the traffic, whose file is damaged while the product is down.
const damagedDb: Db = { org: orgs[0]!, repo: 'r0', database: 'damaged' };
if (FAULTS && (await dbCall(damagedDb, 'execute', { statements: [{ sql: 'CREATE TABLE t(x)' }, { sql: 'INSERT INTO t VALUES (1)' }] })).status !== 200) throw new Error('create the database to damage');
log(`${DBS} databases in ${ORGS} orgs migrated; ${SECONDS} s of mixed traffic, ${WINDOW_S} s windows; a runaway every ${RUNAWAY_EVERY_S} s`);

const acked = new Map<Db, Set<number>>(dbs.map((d) => [d, new Set()]));
const migrated = new Set<Db>();
const samples = new Map<string, number[][]>(); // op → per window latencies
const split = new Map<string, [number[], number[]]>(); // op → latencies [with no runaway in flight, with one]
const runaway = { inFlight: 0, statuses: {} as Record<string, number>, ms: [] as number[], all: [] as Promise<void>[] };
const statuses: Record<string, Record<number, number>> = {};
const bad: string[] = [];
const t0 = performance.now();
const windowOf = () => Math.floor((performance.now() - t0) / 1000 / WINDOW_S);
let nextId = 1;
const pick = <T>(a: T[]) => a[Math.floor(Math.random() * a.length)]!;

/** Reads go on while the disk is full (issue 16): a read's 507 fails the run, with what it said. */
const read = (name: string, r: JsonAnswer): number => {
  if (r.status === 507) bad.push(`a ${name} answered 507: ${JSON.stringify(r.json?.error ?? null).slice(0, 300)}`);
  return r.status;
};
const ops: [string, number, () => Promise<number>][] = [
  ['point read', 30, async () => read('point read', await dbCall(pick(dbs), 'query', { sql: 'SELECT * FROM w WHERE id = ?', params: [Math.floor(Math.random() * nextId)] }))],
  ['range read', 15, async () => read('range read', await dbCall(pick(dbs), 'query', { sql: 'SELECT * FROM w WHERE id > ? ORDER BY id LIMIT 50', params: [Math.floor(Math.random() * nextId)] }))],
  ['write', 20, async () => {
    const d = pick(dbs); const id = nextId++;
    const r = await dbCall(d, 'execute', { sql: 'INSERT INTO w(id, k, v) VALUES (?, ?, ?)', params: [id, id % 7, 'x'.repeat(64)] });
    if (r.status === 200) acked.get(d)!.add(id);
    return r.status;
  }],
  ['batch', 8, async () => {
    const d = pick(dbs); const ids = [nextId++, nextId++, nextId++];
    const r = await dbCall(d, 'execute', { statements: ids.map((id) => ({ sql: 'INSERT INTO w(id, k, v) VALUES (?, ?, ?)', params: [id, 0, 'batch'] })) });
    if (r.status === 200) for (const id of ids) acked.get(d)!.add(id);
    return r.status;
  }],
  ['migration', 1, async () => {
    const d = pick(dbs);
    const r = await dbCall(d, 'migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE w(id INTEGER PRIMARY KEY, k INTEGER, v TEXT)' }, { id: '2', sql: 'CREATE INDEX w_k ON w(k)' }] });
    if (r.status === 200) migrated.add(d);
    return r.status;
  }],
  ['verify', 8, async () => { const o = pick(orgs); return read('verify', await call(o, 'GET', '/r0/_account/verify', undefined, { cookie: cookies.get(o)! })); }],
  ['credential write', 4, async () => { const o = pick(orgs); return (await call(o, 'PUT', `/r0/_account/credentials/soak/c${Math.floor(Math.random() * 5)}`, { value: { token: String(nextId) } }, { cookie: cookies.get(o)! })).status; }],
  ['credential read', 6, async () => { const o = pick(orgs); return read('credential read', await call(o, 'GET', '/r0/_account/credentials', undefined, { cookie: cookies.get(o)! })); }],
  ['app', 8, async () => (await call('org0', 'GET', `/app/page${nextId % 10}`)).status],
  ['sign-in', 2, () => {
    const [o, s] = [pick(orgs), performance.now()];
    // A fault explains it: the product down, its disk full, or its clock 2 h off the issuer's (the ID token's
    // timestamps then fail validation: a 401 that names the claim, as any OpenID relying party answers) or jumping
    // during the sign-in (its 10-minute pending state, on the wall clock, expires: 400 "this sign-in has expired").
    const clock = /JWT timestamp claim|this sign-in has expired/;
    const excused = (why: string) => windows.covers('down', s) || windows.covers('full', s) || (windows.covers('clock', s) && clock.test(why));
    const fail = (why: string) => { if (!excused(why)) bad.push(why); };
    return signInOnce({ proxyUrl: product.url, host: `${o}.${config.baseDomain}:${port}`, org: o, dispatcher: agent, fail });
  }],
];
const weighted = ops.flatMap((o) => Array.from({ length: o[1] }, () => o));

const resources: { t: number; rss: number; fds: number; procs: number }[] = [];
const sampler = setInterval(() => {
  const tree = processTree(product.child.pid!);
  let fds = 0;
  for (const pid of tree.keys()) { try { fds += readdirSync(`/proc/${pid}/fd`).length; } catch { /* gone */ } }
  resources.push({ t: (performance.now() - t0) / 1000, rss: treeRss(product.child.pid!) / 2 ** 20, fds, procs: tree.size });
}, 5_000);
const RUNAWAY_SQL = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';
const runawayTimer = RUNAWAY_EVERY_S > 0 ? setInterval(() => {
  runaway.inFlight++;
  const s = performance.now();
  runaway.all.push(dbCall(runawayDb, 'query', { sql: RUNAWAY_SQL }).then((r) => {
    if (windows.excuses(r.status, s)) r = { status: 503, json: null }; // the product was down meanwhile
    runaway.inFlight--;
    runaway.ms.push(performance.now() - s);
    const outcome = `${r.status} ${r.json?.error?.code ?? ''}`.trim();
    runaway.statuses[outcome] = (runaway.statuses[outcome] ?? 0) + 1;
    if (outcome !== '422 query_timeout' && r.status !== 503) bad.push(`the runaway statement answered ${outcome}`);
  }));
}, RUNAWAY_EVERY_S * 1000) : null;
const until = t0 + SECONDS * 1000;
const jumps = [
  setTimeout(() => { if (shiftClock(2 * 3_600_000) !== false) windows.begin('clock'); }, SECONDS * 333),
  setTimeout(() => { if (shiftClock(0) !== false) windows.end('clock'); }, SECONDS * 667),
];
const faults = FAULTS ? runFaults({
  product: () => product,
  restart: async (whileDown) => {
    const killed = performance.now();
    const exited = new Promise((r) => product.child.once('exit', r));
    product.killAll();
    await exited;
    whileDown();
    product = await spawnProduct(env);
    return performance.now() - killed;
  },
  damagedDb: (op, body) => dbCall(damagedDb, op, body),
  hangMirror: hangMirror!, windows, log, bad,
}, {
  seconds: SECONDS, cycles: Number(args.cycles ?? (args.short ? 3 : 20)), stopSeconds: Number(args['stop-seconds'] ?? (args.short ? 3 : 10)),
  tmpfsDir: tmpfs?.dir ?? null, damagedFile: join(dataDir, 'db', damagedDb.org, damagedDb.repo, `${damagedDb.database}.sqlite`),
}) : Promise.resolve(t0);
await Promise.all(Array.from({ length: 16 }, async () => {
  while (performance.now() < until) {
    const [name, , run] = pick(weighted);
    const s = performance.now();
    const during = runaway.inFlight > 0 ? 1 : 0;
    const status = await run();
    const w = windowOf();
    const per = samples.get(name) ?? [];
    samples.set(name, per);
    (per[w] ??= []).push(performance.now() - s);
    if (!split.has(name)) split.set(name, [[], []]);
    split.get(name)![during].push(performance.now() - s);
    (statuses[name] ??= {})[status] = (statuses[name]![status] ?? 0) + 1;
    if (((status >= 500 && status !== 503) || status === 0) && !windows.excuses(status, s)) bad.push(`${name} answered ${status}`);
  }
}));
clearInterval(sampler);
for (const j of jumps) clearTimeout(j);
shiftClock(0);
if (runawayTimer) clearInterval(runawayTimer);
await Promise.all(runaway.all);
const lastFault = (await faults - t0) / 1000; // each fault was logged as it happened

let checked = 0;
for (const [d, ids] of acked) {
  const r = await dbCall(d, 'query', { sql: 'SELECT id FROM w' });
  const have = new Set<number>((r.json?.results?.[0]?.rows ?? []).map((row: number[]) => row[0]));
  const lost = [...ids].filter((id) => !have.has(id)).length;
  if (r.status !== 200 || lost) bad.push(`${d.org}/${d.repo}/${d.database}: ${r.status}, ${lost} acknowledged writes missing`);
  checked += ids.size;
}
const p99 = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] ?? 0; };
const series = [...samples].map(([name, per]) => ({ name, points: per.map((xs, i) => [(i + 1) * WINDOW_S, xs ? p99(xs) : 0] as [number, number]).filter((_, i) => per[i]) }));
// Only the full form's plots replace those in docs/: CI's run and runs of another length or size leave them alone.
const fullForm = !args.short && [args.seconds, args.orgs, args.dbs, args.cycles].every((a) => a === undefined);
const plots = fullForm ? fileURLToPath(new URL('../docs', import.meta.url)) : tmpdir();
writeFileSync(join(plots, `soak${FAULTS ? '-faults' : ''}-p99.svg`), svgLines(`p99 per operation over ${WINDOW_S} s windows (ms)`, series));
writeFileSync(join(plots, `soak${FAULTS ? '-faults' : ''}-memory.svg`), svgLines('RSS of the product (MiB) and open fds', [{ name: 'RSS MiB', points: resources.map((r) => [r.t, r.rss]) }, { name: 'open fds', points: resources.map((r) => [r.t, r.fds]) }]));
// "At one minute" and "at the end" are medians over a span (30 s; a quarter of a shorter run) of 5-s samples: the
// tree's size moves with its process count (an extra executor while a runaway holds one, retired 5 s idle after),
// and a leak shows as a trend, not as one sample.
const SPAN_S = Math.min(30, SECONDS / 4);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const over = (rs: typeof resources) => ({ t: rs[0]?.t ?? 0, rss: median(rs.map((r) => r.rss)), fds: median(rs.map((r) => r.fds)), procs: median(rs.map((r) => r.procs)) });
// With --faults every restart starts them over: they are judged in the last lifetime, after the last fault, from a
// third of it (warm-up: the databases reopened) on.
const tail = SECONDS - lastFault;
const warmFrom = FAULTS ? lastFault + Math.min(60, tail / 3) : Math.min(60, SECONDS / 2);
// Judged over at least 90 s after warm-up: a shorter run compares one or two 5-s samples, and the tree's fds swing by
// a few hundred between samples at one process count (databases opened and closed): 30 % either way, whatever the
// version (the session's start and its end alike, 2026-11-26).
const judged = (FAULTS ? tail : SECONDS - warmFrom) >= 90;
/**
 * The two spans compared at one number of processes: an extra executor (while a runaway holds one, or one the faults
 * stopped) brings ~85 MiB and ~250 fds of its own. The count most seen in both, else every sample.
 */
function alike(a: typeof resources, b: typeof resources): [typeof resources, typeof resources] {
  let best = -1;
  let seen = 0;
  for (const n of new Set(a.map((r) => r.procs))) {
    const both = Math.min(a.filter((r) => r.procs === n).length, b.filter((r) => r.procs === n).length);
    if (both > seen) [best, seen] = [n, both];
  }
  return seen > 0 ? [a.filter((r) => r.procs === best), b.filter((r) => r.procs === best)] : [a, b];
}
const [warm, last] = alike(resources.filter((r) => r.t >= warmFrom && r.t < warmFrom + SPAN_S), resources.filter((r) => r.t >= SECONDS - SPAN_S));
const atMinute = over(warm);
const end = over(last);
const growth = (a: number, b: number) => ((b - a) / a) * 100;
log(`plots in ${plots}`);
log(`${checked} acknowledged writes checked, ${migrated.size} second migrations applied; statuses ${JSON.stringify(statuses)}`);
if (FAULTS) log(`the last fault was over at ${lastFault.toFixed(0)} s: RSS and fds ${judged ? 'are judged' : 'are not judged (fewer than 90 s after it)'} from ${warmFrom.toFixed(0)} s`);
else if (!judged) log(`RSS and fds are not judged: fewer than 90 s after warm-up (${warmFrom.toFixed(0)} s); the full run judges them`);
log(`medians over ${SPAN_S.toFixed(0)} s, of the samples with ${atMinute.procs === end.procs ? atMinute.procs : `${atMinute.procs} → ${end.procs}`} processes (${warm.length} and ${last.length}): RSS ${atMinute.rss.toFixed(0)} MiB from ${atMinute.t.toFixed(0)} s → ${end.rss.toFixed(0)} MiB at the end (${growth(atMinute.rss, end.rss).toFixed(1)} %); fds ${atMinute.fds} → ${end.fds} (${growth(atMinute.fds, end.fds).toFixed(1)} %)`);
log(`samples (s: MiB/fds/processes) ${resources.map((r) => `${r.t.toFixed(0)}: ${r.rss.toFixed(0)}/${r.fds}/${r.procs}`).join(', ')}`);
for (const s of series) log(`  ${s.name.padEnd(17)} p99 per window ${s.points.map((p) => p[1].toFixed(0)).join(' ')} ms`);
if (runawayTimer) {
  log(`runaways (${runawayDb.org}/${runawayDb.repo}): ${JSON.stringify(runaway.statuses)}, answered in ${Math.min(...runaway.ms).toFixed(0)}–${Math.max(...runaway.ms).toFixed(0)} ms`);
  log('other repos, p99 with no runaway in flight → with one in flight (requests):');
  for (const [name, [calm, during]] of split) log(`  ${name.padEnd(17)} ${p99(calm).toFixed(0)} ms (${calm.length}) → ${p99(during).toFixed(0)} ms (${during.length})`);
}

// Both mirrors: drained, then the reference mirror's replicas row by row and the receiver's events against the logs.
const mirrorQuery = (d: Db, body: Record<string, unknown>) => sendJson(`http://127.0.0.1:${mirrorPort}/${d.repo}/_db/query`, {
  body: { database: d.database, ...body }, dispatcher: agent,
  headers: { host: `${d.org}.${config.baseDomain}:${mirrorPort}`, authorization: bearer(rootKey, d.org, d.repo) },
});
const drained = await drain([...dbs, runawayDb], dbCall, ['reference', 'receiver', ...(FAULTS ? ['hang'] : [])], Math.max(120, SECONDS / 2) * 1000);
bad.push(...drained.stuck);
log(`mirrors drained in ${(drained.ms / 1000).toFixed(1)} s (${drained.versions.size} databases, ${drained.stuck.length} not)`);
const replicas = await compareReplicas(drained.versions, dbCall, mirrorQuery);
bad.push(...replicas.mismatches);
log(`reference mirror: ${replicas.tables} tables, ${replicas.rows} rows compared row by row with the primary: ${replicas.mismatches.length} mismatches`);
const report = await new Promise<ReceiverReport>((r) => { receiver.once('message', r); receiver.send({ report: true }); });
const events = await checkReceiver(drained.versions, dbCall, report);
bad.push(...events.mismatches);
if (report.stale && !args['clock-jump']) bad.push(`the receiver refused ${report.stale} deliveries for their timestamp with no clock jump`);
log(`webhook receiver: ${events.events} change-log events checked in order, ${events.redelivered} re-deliveries, ${report.refused} refused by it on purpose (503), ${report.stale} for a timestamp off its clock: ${events.mismatches.length} mismatches`);
if (judged && growth(atMinute.rss, end.rss) > 10) bad.push(`RSS grew ${growth(atMinute.rss, end.rss).toFixed(1)} % after warm-up`);
if (judged && growth(atMinute.fds, end.fds) > 10) bad.push(`open fds grew ${growth(atMinute.fds, end.fds).toFixed(1)} % after warm-up`);
for (const b of [...new Set(bad)].slice(0, 30)) log(`FAIL ${b}`);
log(bad.length ? `${new Set(bad).size} distinct failures` : 'no failures');
product.killAll();
upstream.close();
receiver.kill();
await agent.close();
await hangMirror?.close();
rmSync(clockFile, { force: true });
if (tmpfs) tmpfs.unmount();
else rmSync(dataDir, { recursive: true, force: true });
process.exit(bad.length ? 1 : 0);
