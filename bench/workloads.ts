// Every workload of the suite: which setup it runs against, what one request is, and how it compares.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { drained, runLag } from './lib/lag.ts';
import { buildRequests, randomId, type LoadRequest } from './lib/loadgen.ts';
import { track } from './lib/proc.ts';
import { http } from './lib/http.ts';
import { Unavailable } from './lib/unavailable.ts';
import { dbHeaders, ORG, REPO, type Instance } from './scopebase/instance.ts';
import { runMemory } from './scopebase/memory.ts';
import { obtainSessionCookie } from './scopebase/session.ts';
import { INSERT, POINT_READ, RANGE_READ, ROWS } from './servers/seed.ts';
import type { Running } from './setups.ts';

export type Kind = 'read' | 'write' | 'floor';

/** A load against a running server: its base URL and pre-built requests. */
export interface Load { url: string; requests: LoadRequest[] }

export interface Measured { rps: number; p50: number; p99: number; cpu?: number; otherCpu?: number; total?: number; extra?: Record<string, unknown> }

export interface Workload {
  name: string;
  setup: string;
  kind: Kind;
  what: string;
  smoke?: boolean;
  /** The load to apply; throw Unavailable when the product cannot serve it yet. */
  load?(r: Running): Promise<Load>;
  /** Runs after a successful load, before the next workload; what it returns joins the row's `extra`. */
  after?(r: Running): Promise<Record<string, unknown>>;
  /** A workload that measures itself (no autocannon load); `r` is its setup's running server, if it has one. */
  run?(opts: { warmup: number; duration: number; smoke: boolean }, r: Running): Promise<Measured>;
}

export { Unavailable };

// Pre-built requests per load (ids vary; autocannon cycles through them). Kept small: autocannon deep-clones and
// serializes the whole list once per connection at the start of each run, inside the measured window.
const N = 1024;
const N_BATCH = 32;
const json = { 'content-type': 'application/json' };

function simple(path: string, body: (i: number) => unknown): (r: Running) => Promise<Load> {
  return async (r) => ({ url: r.url, requests: buildRequests(N, (i) => ({ method: 'POST', path, headers: json, body: JSON.stringify(body(i)) })) });
}

type Target = 'proxy' | 'direct';
const pointRead = () => ({ sql: POINT_READ, params: [randomId(ROWS)] });
const rangeRead = () => ({ sql: RANGE_READ, params: [randomId(ROWS - 9)] });
const oneInsert = (i: number) => ({ sql: INSERT, params: [`bench todo ${i}`] });
/** What @libsql/client sends for one `execute`: a stream opened, the statement, the stream closed (SPEC 4.10). */
const hrana = (spec: { sql: string; params: unknown[] }) => ({
  baton: null,
  requests: [{ type: 'execute', stmt: { sql: spec.sql, args: spec.params.map((v) => (typeof v === 'number' ? { type: 'integer', value: String(v) } : { type: 'text', value: v })) } }, { type: 'close' }],
});
const batchInsert = (i: number) => ({ statements: Array.from({ length: 100 }, (_, j) => ({ sql: INSERT, params: [`bench batch ${i}.${j}`] })) });

/** A scopebase /_db load through the proxy, or straight to the database control service (split mode). */
function db(op: 'query' | 'execute' | 'v2/pipeline', target: Target, body: (i: number) => unknown, n = N): (r: Running) => Promise<Load> {
  return async (r) => {
    const inst = r.instance!;
    let url = r.url;
    if (target === 'direct') {
      if (!r.dbUrl) throw new Unavailable('no database control service URL');
      url = r.dbUrl;
    }
    const headers = target === 'direct' ? await directHeaders(inst) : dbHeaders(inst);
    const path = `/${REPO}/_db/${op}`;
    return { url, requests: buildRequests(n, (i) => ({ method: 'POST', path, headers, body: JSON.stringify(body(i)) })) };
  };
}

/** What the proxy adds when it forwards to `serve db` (src/db/remote.ts): the org and the proxy token. */
async function directHeaders(inst: Instance): Promise<Record<string, string>> {
  let remote: { proxyToken(rootKey: Buffer): string; PROXY_TOKEN_HEADER: string };
  try {
    remote = await import('../src/db/remote.ts');
  } catch (e) {
    throw new Unavailable(`src/db/remote.ts: ${(e as Error).message}`);
  }
  return { ...dbHeaders(inst), 'x-scopebase-org': ORG, [remote.PROXY_TOKEN_HEADER]: remote.proxyToken(inst.rootKey) };
}

function sbGroup(prefix: string, setup: string, target: Target, smoke: boolean): Workload[] {
  const where = target === 'direct' ? 'direct to the database control service' : setup === 'sb-split' ? 'through the proxy as its own process' : 'through the proxy, one process';
  return [
    { name: `${prefix}-read`, setup, kind: 'read', smoke, what: `point read by primary key, 100k rows, ${where}`, load: db('query', target, pointRead) },
    { name: `${prefix}-range`, setup, kind: 'read', what: `10-row range read, ${where}`, load: db('query', target, rangeRead) },
    { name: `${prefix}-insert`, setup, kind: 'write', smoke, what: `single-row insert, ${where}`, load: db('execute', target, oneInsert) },
    { name: `${prefix}-batch100`, setup, kind: 'write', what: `100-row batch insert (one transaction), ${where}`, load: db('execute', target, batchInsert, N_BATCH) },
  ];
}

/** Databases the wide read spreads over (2 repos × 50): more than DB_MAX_OPEN per executor, so connections churn. */
const WIDE = 100;

/** Point reads on WIDE small databases at random: prices closing and reopening connections (the LRU's size). */
async function wideReads(r: Running): Promise<Load> {
  const inst = r.instance!;
  const repoOf = (k: number) => `wide${Math.floor(k / 50)}`;
  for (let k = 0; k < WIDE; k++) {
    const body = { database: `db${k}`, statements: [{ sql: 'CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, x)' }, { sql: 'INSERT OR IGNORE INTO t (id, x) VALUES (1, 1)' }] };
    const res = await http(`${r.url}/${repoOf(k)}/_db/execute`, { method: 'POST', headers: dbHeaders(inst, repoOf(k)), body: JSON.stringify(body), timeoutMs: 30_000 });
    if (res.status !== 200) throw new Unavailable(`creating ${repoOf(k)}/db${k}: HTTP ${res.status} ${res.body.slice(0, 200)}`);
  }
  return {
    url: r.url,
    requests: buildRequests(N, () => {
      const k = randomId(WIDE) - 1;
      return { method: 'POST', path: `/${repoOf(k)}/_db/query`, headers: dbHeaders(inst, repoOf(k)), body: JSON.stringify({ database: `db${k}`, sql: 'SELECT x FROM t WHERE id = 1' }) };
    }),
  };
}

function engine(mode: 'read' | 'insert'): Workload['run'] {
  return async ({ warmup, duration }) => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-engine-'));
    try {
      const out = await new Promise<string>((resolve, reject) => {
        const child = track(spawn(process.execPath, [fileURLToPath(new URL('./engine.ts', import.meta.url)), join(dir, 'engine.db'), mode, String(warmup), String(duration)], { stdio: ['ignore', 'pipe', 'inherit'] }));
        let s = '';
        child.stdout!.on('data', (c: Buffer) => { s += c; });
        child.on('exit', (code) => (code === 0 ? resolve(s) : reject(new Error(`engine exited ${code}`))));
      });
      const r = JSON.parse(out) as Measured;
      return { ...r, cpu: 100 }; // one synchronous loop: one core by construction
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}

/** Writes per second of the lag workload: a steady load well under what the product sustains, so lag is not queueing. */
const LAG_RATE = 500;

/** Write reply → mirror arrival lag under a steady insert stream through the proxy, two mirrors (the sink). */
const mirrorLag: Workload['run'] = async ({ warmup, duration, smoke }, r) => {
  const inst = r.instance;
  if (!inst || !r.sinkUrl) throw new Unavailable('needs the sb-mirrors setup');
  const headers = dbHeaders(inst);
  const base = `${r.url}/${REPO}/_db`;
  const first = await http(`${base}/execute`, { method: 'POST', headers, body: JSON.stringify(oneInsert(0)), timeoutMs: 30_000 });
  if (first.status !== 200) throw new Unavailable(`HTTP ${first.status}: ${first.body.slice(0, 200)}`);
  const m = await runLag(
    { url: r.url, path: `/${REPO}/_db/execute`, headers, sql: INSERT, rate: LAG_RATE, maxInFlight: 256,
      // Smoke (CI): a very short window, enough to see events arrive and the figures come out.
      warmupSeconds: smoke ? Math.min(warmup, 0.25) : warmup, durationSeconds: smoke ? Math.min(duration, 1) : duration },
    { serverPids: r.pids, statusUrl: `${base}/status`, sinkUrl: r.sinkUrl },
  );
  // Writes not sent because 256 were outstanding (a starved machine) are reported, not a failure: lag is still measured.
  const bad = m.errors + Object.entries(m.statusCodes).filter(([c]) => c !== '200').reduce((a, [, n]) => a + n, 0);
  if (m.events === 0 || bad > m.events * 0.01) throw new Error(`${bad} of ${m.events + bad} writes failed: ${JSON.stringify(m.statusCodes)}, errors ${m.errors}`);
  if (m.missing > 0) throw new Error(`${m.missing} of ${m.events * 2} (event, mirror) deliveries did not arrive within 10 s of the window's end`);
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return {
    rps: m.rps, p50: m.p50, p99: m.p99, cpu: m.cpu, otherCpu: m.otherCpu, total: m.events,
    extra: {
      rate: LAG_RATE, events: m.events, lagMaxMs: r3(m.max), lagMeanMs: r3(m.mean), beforeReply: m.beforeReply,
      perMirror: Object.fromEntries(Object.entries(m.perMirror).map(([k, v]) => [k, { p50: r3(v.p50), p99: r3(v.p99), max: r3(v.max) }])),
      writeP50Ms: r3(m.writeP50), writeP99Ms: r3(m.writeP99), notSent: m.skipped, backlogAtStart: m.backlogAtStart, drainMs: Math.round(m.drainMs),
      driverCpu: Math.round(m.driverCpu), timeline: m.timeline,
    },
  };
};

export const WORKLOADS: Workload[] = [
  {
    name: 'floor', setup: 'floor', kind: 'floor', smoke: true, what: 'bare node:http, small JSON',
    load: async (r) => ({ url: r.url, requests: [{ method: 'GET', path: '/' }] }),
  },
  { name: 'simple-read', setup: 'simple', kind: 'read', smoke: true, what: 'node:http + node:sqlite, point read', load: simple('/read', () => ({ id: randomId(ROWS) })) },
  { name: 'simple-insert', setup: 'simple', kind: 'write', smoke: true, what: 'node:http + node:sqlite, autocommit insert (sync=FULL)', load: simple('/insert', (i) => ({ title: `bench todo ${i}` })) },
  { name: 'engine-read', setup: 'engine', kind: 'read', what: 'node:sqlite in-process point read, no HTTP', run: engine('read') },
  { name: 'engine-insert', setup: 'engine', kind: 'write', smoke: true, what: 'node:sqlite in-process autocommit insert (sync=FULL), no HTTP', run: engine('insert') },
  { name: 'd1-read', setup: 'd1', kind: 'read', smoke: true, what: 'D1 local (miniflare/workerd), point read', load: simple('/read', () => ({ id: randomId(ROWS) })) },
  { name: 'd1-insert', setup: 'd1', kind: 'write', what: 'D1 local (miniflare/workerd), insert', load: simple('/insert', (i) => ({ title: `bench todo ${i}` })) },
  ...sbGroup('sb', 'sb-one', 'proxy', true),
  { name: 'sb-libsql-read', setup: 'sb-one', kind: 'read', what: 'point read as @libsql/client sends it (Hrana v2 pipeline), through the proxy, one process', load: db('v2/pipeline', 'proxy', () => hrana(pointRead())) },
  { name: 'sb-libsql-insert', setup: 'sb-one', kind: 'write', what: 'single-row insert as @libsql/client sends it (Hrana v2 pipeline), through the proxy, one process', load: db('v2/pipeline', 'proxy', (i) => hrana(oneInsert(i))) },
  { name: 'sb-read-wide', setup: 'sb-one', kind: 'read', what: `point read spread over ${WIDE} small databases, through the proxy, one process`, load: wideReads },
  {
    name: 'sb-verify', setup: 'sb-one', kind: 'read', what: 'GET /_account/verify with a session',
    load: async (r) => {
      const cookie = await obtainSessionCookie(r.instance!, REPO); // a failed sign-in fails the workload
      return { url: r.url, requests: [{ method: 'GET', path: `/${REPO}/_account/verify`, headers: { host: r.instance!.host, cookie } }] };
    },
  },
  ...sbGroup('sb-split', 'sb-split', 'proxy', false),
  ...sbGroup('sb-direct', 'sb-split', 'direct', false),
  {
    name: 'sb-mirrors-insert', setup: 'sb-mirrors', kind: 'write', what: 'single-row insert with two mirrors configured', load: db('execute', 'proxy', oneInsert),
    // Writes never wait for delivery: how far behind were the mirrors when the load stopped, and how long to catch up?
    after: async (r) => {
      const d = await drained(`${r.url}/${REPO}/_db/status`, dbHeaders(r.instance!), 120_000);
      return { mirrorBacklogAtEnd: d.backlog, catchUpMs: Math.round(d.ms) };
    },
  },
  {
    name: 'sb-mirror-lag', setup: 'sb-mirrors', kind: 'write', smoke: true,
    what: `write 200 → mirror arrival lag, ${LAG_RATE} single-row inserts/s through the proxy, two mirrors`, run: mirrorLag,
  },
  {
    name: 'sb-memory', setup: 'memory', kind: 'write', smoke: true, what: 'touch N databases once; RSS; restart time',
    run: async ({ smoke }) => {
      const m = await runMemory(smoke ? 100 : 10_000);
      return { rps: m.touchesPerSecond, p50: NaN, p99: NaN, extra: { ...m } };
    },
  },
];

/** Sends the first request of a load once: a product that answers non-2xx is "unavailable" with its reply. */
export async function probe(load: Load): Promise<{ ok: true } | { ok: false; reason: string }> {
  const req = load.requests[0]!;
  try {
    const res = await http(load.url + req.path, { method: req.method, headers: req.headers, body: req.body, timeoutMs: 30_000 });
    if (res.status >= 200 && res.status < 300) return { ok: true };
    return { ok: false, reason: `HTTP ${res.status}: ${res.body.slice(0, 200)}` };
  } catch (e) {
    return { ok: false, reason: (e as Error).message };
  }
}
