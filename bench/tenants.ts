// `npm run load:tenants`: one repo under a quiet load while another floods or runs away, and the whole server at 3x
// the write rate it sustains. Prints the figures docs/performance.md ("Tenants and overload") quotes.
//   --short        a few seconds per phase, for CI (exit 0 when the server survived and answered)
//   --seconds S    seconds per measured phase (default 30: a p99 of ~3,000 samples; of 1,000 it is the 10th worst,
//                  which one hiccup of a VM moves)
//   --only starvation|overload|ratelimit   one of the three (ratelimit: the flood again, with DB_RATE_LIMIT_PER_REPO on)
//   --pin          the server on CPU 0, this load generator on the others: neither takes the other's core
//   --burst N      the ratelimit phase's DB_RATE_LIMIT_BURST (default: the rate, a second's worth)
// BENCH_SCOPEBASE_MAIN=<other checkout>/bin/scopebase.js runs the same load against another version.
import { execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { Agent, request } from 'undici';
import { retryDelayMs } from '../src/client/retry.ts';
import { bearer } from './lib/http.ts';
import { startInstance, type Instance } from './scopebase/instance.ts';
import { processTree } from './lib/proc.ts';

const { values: args } = parseArgs({ options: { short: { type: 'boolean', default: false }, seconds: { type: 'string' }, only: { type: 'string' }, pin: { type: 'boolean', default: false }, burst: { type: 'string' } } });
const SECONDS = Number(args.seconds ?? (args.short ? 2 : 30));
const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 300000000) SELECT count(*) FROM c';
const agent = new Agent({ connections: 4096, pipelining: 1, keepAliveTimeout: 30_000 });
const log = (s: string) => process.stderr.write(`[tenants] ${s}\n`);

interface Sample { ms: number; status: number; retryAfterMs?: number }

/** Where requests go: an Instance, or what of it a worker thread is given. */
type Target = Pick<Instance, 'proxyUrl' | 'host' | 'rootKey'>;

async function post(inst: Target, repo: string, op: string, body: unknown, org = 'acme'): Promise<Sample> {
  const t0 = performance.now();
  try {
    const res = await request(`${inst.proxyUrl}/${repo}/_db/${op}`, {
      method: 'POST', dispatcher: agent, body: JSON.stringify(body), headersTimeout: 120_000, bodyTimeout: 120_000,
      headers: { host: inst.host.replace(/^acme\./, `${org}.`), authorization: bearer(inst.rootKey, org, repo), 'content-type': 'application/json' },
    });
    if (process.env.TENANTS_DEBUG && res.statusCode !== 200) log(`${op} ${res.statusCode}: ${(await res.body.text()).slice(0, 200)}`);
    else await res.body.dump();
    const header = res.headers['retry-after'];
    const retryAfterMs = typeof header === 'string' ? retryDelayMs(res.statusCode, header) : null;
    return { ms: performance.now() - t0, status: res.statusCode, ...(retryAfterMs ? { retryAfterMs } : {}) };
  } catch (e) {
    if (process.env.TENANTS_DEBUG) log(`${op}: ${(e as Error).message}`);
    return { ms: performance.now() - t0, status: 0 };
  }
}

function summary(samples: Sample[]): string {
  const ok = samples.filter((s) => s.status === 200).map((s) => s.ms).sort((a, b) => a - b);
  const at = (q: number) => (ok.length ? ok[Math.min(ok.length - 1, Math.floor(ok.length * q))]!.toFixed(1) : '-');
  const codes: Record<number, number> = {};
  for (const s of samples) codes[s.status] = (codes[s.status] ?? 0) + 1;
  return `n ${samples.length}, p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms, statuses ${JSON.stringify(codes)}`;
}

/** Runs `fn` in `clients` closed loops until `until`; a loop starts a request at most every `periodMs`. */
async function loops(clients: number, until: number, fn: (i: number) => Promise<Sample>, periodMs = 0): Promise<Sample[]> {
  const out: Sample[] = [];
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = 0; performance.now() < until; i++) {
      const start = performance.now();
      out.push(await fn(c * 1_000_000 + i));
      const rest = start + periodMs - performance.now();
      if (rest > 0) await new Promise((r) => setTimeout(r, rest));
    }
  }));
  return out;
}

/**
 * Repo "quiet" of org "other": one reader and one writer, as a small app would be (100 and 50 requests/s). It runs in
 * a worker thread, as another app would be another process: on the flood's event loop its answers would wait
 * behind the flood's, a delay of the load generator's and not of the server's.
 */
function quiet(inst: Instance, until: number): Promise<[Sample[], Sample[]]> {
  return inWorker('quiet', inst, until) as Promise<[Sample[], Sample[]]>;
}

/** Runs one of the loops below in a worker thread of its own until `until`, and returns its samples. */
function inWorker(loop: 'quiet' | 'probe', inst: Instance, until: number): Promise<Sample[][]> {
  const worker = new Worker(new URL(import.meta.url), { workerData: { loop, ms: until - performance.now(), proxyUrl: inst.proxyUrl, host: inst.host, rootKey: inst.rootKey } });
  return new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

async function quietLoops(inst: Target, until: number): Promise<[Sample[], Sample[]]> {
  return Promise.all([
    loops(1, until, () => post(inst, 'quiet', 'query', { sql: 'SELECT v FROM t WHERE id = 1' }, 'other'), 10),
    loops(1, until, (i) => post(inst, 'quiet', 'execute', { sql: 'INSERT INTO t(v) VALUES (?)', params: [i] }, 'other'), 20),
  ]);
}

/**
 * One client of the overloaded repo sending the same heavy read 100 times a second: what a caller sees of the
 * server, without the open loop's own event loop (1,500+ requests a second on the same two cores) in its timings.
 */
async function probeLoops(inst: Target, until: number): Promise<[Sample[]]> {
  return [await loops(1, until, () => post(inst, 'web', 'query', { sql: HEAVY }), 10)];
}

const p99Of = (samples: Sample[]) => {
  const ok = samples.filter((s) => s.status === 200).map((s) => s.ms).sort((a, b) => a - b);
  return ok[Math.min(ok.length - 1, Math.floor(ok.length * 0.99))] ?? NaN;
};

/**
 * Repo "quiet" alone, then while repo "hog" floods with 64 writers (and `runaways` runaway statements). A `polite`
 * flood waits the Retry-After of a 429 as @scopebase/client does (with its jitter); the other sends its next request at once.
 */
async function starvation(inst: Instance, runaways: number, polite = false): Promise<void> {
  await post(inst, 'quiet', 'execute', { sql: 'INSERT OR IGNORE INTO t(id, v) VALUES (1, 0)' }, 'other');
  for (let d = 0; d < 8; d++) await post(inst, 'hog', 'execute', { database: `d${d}`, sql: 'CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v)' });
  const [r0, w0] = await quiet(inst, performance.now() + SECONDS * 1000);
  log(`quiet repo alone: read ${summary(r0)}`);
  log(`quiet repo alone: write ${summary(w0)}`);
  const until = performance.now() + SECONDS * 1000;
  const hog = Promise.all([
    loops(64, until, async (i) => {
      const r = await post(inst, 'hog', 'execute', { database: `d${i % 8}`, sql: 'INSERT INTO t(v) VALUES (?)', params: [i] });
      if (polite && r.status === 429 && r.retryAfterMs) await new Promise((done) => setTimeout(done, Math.max(0, Math.min(r.retryAfterMs!, until - performance.now()))));
      return r;
    }),
    loops(runaways, until, (i) => post(inst, 'hog', 'query', { database: `d${i % 8}`, sql: RUNAWAY })),
  ]);
  const [r1, w1] = await quiet(inst, until);
  const [hw, hr] = await hog;
  const what = `64 writers${polite ? ' that wait the Retry-After of a 429' : ''}${runaways ? ` and ${runaways} runaway statements` : ''}`;
  log(`quiet repo while another repo runs ${what}: read ${summary(r1)} (p99 ${(p99Of(r1) / p99Of(r0)).toFixed(1)}x alone)`);
  log(`quiet repo while another repo runs ${what}: write ${summary(w1)} (p99 ${(p99Of(w1) / p99Of(w0)).toFixed(1)}x alone)`);
  log(`the flooding repo: writes ${summary(hw)}${runaways ? `; runaways ${summary(hr)}` : ''}`);
}

/**
 * Requests that cost the executors ~2 ms each (a 20k-row recursive count), so the executors are what saturates: a
 * Node load generator on the same 2 cores cannot outrun the HTTP side of a server, but it can outrun this.
 */
const HEAVY = 'SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 20000) SELECT x FROM c)';

async function overload(inst: Instance): Promise<void> {
  await post(inst, 'web', 'execute', { sql: 'CREATE TABLE IF NOT EXISTS o(id INTEGER PRIMARY KEY, v)' });
  const heavy = () => post(inst, 'web', 'query', { sql: HEAVY });
  await loops(1, performance.now() + 1000, heavy); // warm-up: the first requests of a fresh server are not its latency
  const one = await loops(1, performance.now() + Math.min(SECONDS, 3) * 1000, heavy);
  log(`one client, unloaded: ${summary(one)}`);
  const [probeAlone] = await inWorker('probe', inst, performance.now() + SECONDS * 1000);
  log(`the probe (its own thread, 100/s), unloaded: ${summary(probeAlone!)}`);
  const sustained = await loops(8, performance.now() + SECONDS * 1000, heavy);
  const rate = sustained.filter((s) => s.status === 200).length / SECONDS;
  log(`8 closed loops (sustained): ${Math.round(rate)} req/s, ${summary(sustained)}`);
  // Open loop: requests leave on schedule whether or not earlier ones were answered.
  const target = Math.round(rate * 3);
  const samples: Sample[] = [];
  const pending: Promise<void>[] = [];
  const t0 = performance.now();
  const probe = inWorker('probe', inst, t0 + SECONDS * 1000);
  for (let sent = 0; performance.now() - t0 < SECONDS * 1000;) {
    for (const due = Math.floor(((performance.now() - t0) / 1000) * target); sent < due; sent++) pending.push(heavy().then((s) => void samples.push(s)));
    await new Promise((r) => setTimeout(r, 5));
  }
  await Promise.all(pending);
  const shed = samples.filter((s) => s.status === 503).length;
  const ok = samples.filter((s) => s.status === 200).map((s) => s.ms).sort((a, b) => a - b);
  const p99 = (xs: number[]) => xs[Math.min(xs.length - 1, Math.floor(xs.length * 0.99))] ?? NaN;
  const unloaded = p99(one.filter((s) => s.status === 200).map((s) => s.ms).sort((a, b) => a - b));
  log(`open loop at 3x (${target} req/s for ${SECONDS} s): ${summary(samples)}; shed ${(100 * shed / Math.max(1, samples.length)).toFixed(1)}%, accepted ${Math.round(ok.length / SECONDS)} req/s, accepted p99 ${(p99(ok) / unloaded).toFixed(1)}x unloaded`);
  const [probeLoaded] = await probe;
  log(`the probe meanwhile: ${summary(probeLoaded!)}; accepted p99 ${(p99Of(probeLoaded!) / p99Of(probeAlone!)).toFixed(1)}x its unloaded`);
  const after = await loops(1, performance.now() + 2000, heavy);
  log(`right after, one client: ${summary(after)}`);
}

/** Every thread of `pid` (and with `tree`, of every process under it) on `cpus`; processes started later inherit it. */
function pin(pid: number, cpus: string, tree = false): void {
  for (const p of tree ? processTree(pid).keys() : [pid]) execFileSync('taskset', ['-a', '-p', '-c', cpus, String(p)], { stdio: 'ignore' });
}

/** One fresh instance for `phase`; fails the run unless it still answers after. */
async function withInstance(env: Record<string, string>, phase: (inst: Instance) => Promise<void>): Promise<boolean> {
  const inst = await startInstance({ mode: 'one', env });
  if (args.pin) for (const pid of inst.pids) pin(pid, '0', true);
  try {
    await post(inst, 'quiet', 'execute', { sql: 'CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v)' }, 'other');
    await phase(inst);
    const alive = await post(inst, 'quiet', 'query', { sql: 'SELECT count(*) FROM t' }, 'other');
    log(alive.status === 200 ? 'the server survived and answers' : `the server does not answer (${alive.status})`);
    return alive.status === 200;
  } finally {
    await inst.stop();
  }
}

if (!isMainThread) {
  const { loop, ms, ...target } = workerData as Target & { loop: 'quiet' | 'probe'; ms: number };
  const run = loop === 'quiet' ? quietLoops : probeLoops;
  parentPort!.postMessage(await run({ ...target, rootKey: Buffer.from(target.rootKey) }, performance.now() + ms));
  await agent.close();
} else await main();

async function main(): Promise<void> {
  const RATE = 200; // the ratelimit phase's DB_RATE_LIMIT_PER_REPO: above what the quiet repo asks (150/s), far below the flood
  let ok = true;
  try {
    if (args.pin) pin(process.pid, `1-${availableParallelism() - 1}`);
    log(`${SECONDS} s per phase; ${process.env.BENCH_SCOPEBASE_MAIN ?? 'this checkout'}${args.pin ? '; the server on CPU 0, the load on the others' : ''}`);
    // Fairness of the scheduler alone: no rate limit, the flooding repo also runs away.
    if (!args.only || args.only === 'starvation' || args.only === 'overload') {
      ok = await withInstance({ DB_RATE_LIMIT_PER_REPO: '0' }, async (inst) => {
        if (args.only !== 'overload') await starvation(inst, 4);
        if (args.only !== 'starvation') await overload(inst);
      });
    }
    if (!args.only || args.only === 'ratelimit') {
      const burst = Number(args.burst ?? RATE);
      log(`with DB_RATE_LIMIT_PER_REPO=${RATE} and DB_RATE_LIMIT_BURST=${burst}: the flooding repo is refused past it (429), the quiet one is not`);
      ok = (await withInstance({ DB_RATE_LIMIT_PER_REPO: String(RATE), DB_RATE_LIMIT_BURST: String(burst) }, async (inst) => {
        await starvation(inst, 0, true);
        await starvation(inst, 0);
      })) && ok;
    }
  } finally {
    await agent.close();
  }
  process.exitCode = ok ? 0 : 1;
}
