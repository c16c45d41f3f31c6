// End-to-end mirror lag: a write's 200 at the client → the event's arrival at a mirror, under a steady write load.
// Parent side: waits until delivery has caught up (a throughput workload before may have left a backlog), arms the
// sink (bench/servers/mirror-sink.ts), forks the write driver (bench/lag.ts), then matches each reply's version with
// its arrival at every mirror. Lag is signed: an event may reach a mirror before its writer has read the 200.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { http, postJson } from './http.ts';
import { cpuPercent, cpuSample, machineBusyTicks, ticksToPercent, track, type CpuSample } from './proc.ts';

export interface LagSpec {
  url: string;
  path: string;
  headers: Record<string, string>;
  sql: string;
  /** Writes per second. */
  rate: number;
  maxInFlight: number;
  warmupSeconds: number;
  durationSeconds: number;
}

export interface LagDriverResult {
  /** [version, reply complete at (ms since the epoch)] for every 200 of the measured window. */
  replies: [number, number][];
  seconds: number;
  statusCodes: Record<string, number>;
  errors: number;
  /** Sends not made because maxInFlight requests were outstanding (the product fell behind the rate). */
  skipped: number;
  writeP50: number;
  writeP99: number;
  driverCpu: number;
}

export interface LagResult {
  /** Achieved writes per second over the window. */
  rps: number;
  /** Lag percentiles over every (event, mirror), ms. */
  p50: number;
  p99: number;
  max: number;
  mean: number;
  perMirror: Record<string, { p50: number; p99: number; max: number }>;
  events: number;
  /** (event, mirror) pairs that never arrived within the grace period. */
  missing: number;
  /** Pairs that arrived before the writer had its 200 (negative lag). */
  beforeReply: number;
  writeP50: number;
  writeP99: number;
  statusCodes: Record<string, number>;
  errors: number;
  skipped: number;
  /** Server tree CPU over the window, % of one core; other processes' CPU (noise). */
  cpu: number;
  otherCpu: number;
  driverCpu: number;
  /** Lag over the window: [seconds into the window, p50 ms, max ms] per 250 ms of replies (a rising line = delivery falls behind). */
  timeline: [number, number, number][];
  /** Events not yet delivered when the workload started (left by an earlier workload), and how long they took to drain. */
  backlogAtStart: number;
  drainMs: number;
}

const DRIVER = fileURLToPath(new URL('../lag.ts', import.meta.url));
const MIRRORS = ['m1', 'm2'] as const;

interface StatusReply { version?: number; mirrors?: { name: string; pendingEvents: number }[] }

/** Polls /_db/status until no mirror has pending events; returns the backlog first seen and the time it took. */
export async function drained(statusUrl: string, headers: Record<string, string>, timeoutMs: number): Promise<{ backlog: number; ms: number }> {
  const t0 = performance.now();
  let backlog: number | null = null;
  for (;;) {
    const s = await postJson(statusUrl, headers, {}) as StatusReply;
    const pending = Math.max(0, ...(s.mirrors ?? []).map((m) => m.pendingEvents));
    backlog ??= pending;
    if (pending === 0) return { backlog, ms: performance.now() - t0 };
    if (performance.now() - t0 > timeoutMs) throw new Error(`mirror backlog of ${pending} events did not drain in ${timeoutMs} ms (${backlog} at start)`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function percentile(sorted: number[], q: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : NaN;
}

function drive(spec: LagSpec, serverPids: number[]): Promise<LagDriverResult & { cpu: number; otherCpu: number }> {
  return new Promise((resolve, reject) => {
    const child = track(fork(DRIVER, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
    let before: CpuSample | null = null;
    let busy0 = 0;
    let t0 = 0;
    let done = false;
    child.on('message', (m: { phase?: string; result?: LagDriverResult; error?: string }) => {
      if (m.phase === 'measure') { before = cpuSample(serverPids); busy0 = machineBusyTicks(); t0 = performance.now(); }
      if (m.result) {
        done = true;
        const seconds = (performance.now() - t0) / 1000;
        const cpu = before ? cpuPercent(before, cpuSample(serverPids), seconds) : NaN;
        const otherCpu = Math.max(0, ticksToPercent(machineBusyTicks() - busy0, seconds) - cpu - m.result.driverCpu);
        resolve({ ...m.result, cpu, otherCpu });
      }
      if (m.error) { done = true; reject(new Error(`lag driver: ${m.error}`)); }
    });
    child.once('exit', (code) => { if (!done) reject(new Error(`lag driver exited (${code}) without a result`)); });
    child.once('error', reject);
    child.send(spec);
  });
}

function buckets(replies: [number, number][], arrivals: Record<string, [number, number][]>, ms: number): [number, number, number][] {
  if (replies.length === 0) return [];
  const t0 = Math.min(...replies.map(([, t]) => t));
  const at = MIRRORS.map((m) => new Map(arrivals[m] ?? []));
  const by = new Map<number, number[]>();
  for (const [version, replyAt] of replies) {
    const b = Math.floor((replyAt - t0) / ms);
    for (const a of at) {
      const arrived = a.get(version);
      if (arrived === undefined) continue;
      if (!by.has(b)) by.set(b, []);
      by.get(b)!.push(arrived - replyAt);
    }
  }
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return [...by].sort(([a], [b]) => a - b).map(([b, lags]) => {
    lags.sort((x, y) => x - y);
    return [(b * ms) / 1000, r3(percentile(lags, 0.5)), r3(lags.at(-1)!)];
  });
}

/**
 * Runs the lag measurement: `spec` against the proxy, `statusUrl` (POST /{repo}/_db/status) to wait for a
 * caught-up start, `sinkUrl` the sink's control address. Arrivals get `graceMs` after the window to come in.
 */
export async function runLag(spec: LagSpec, opts: { serverPids: number[]; statusUrl: string; sinkUrl: string; graceMs?: number }): Promise<LagResult> {
  const drain = await drained(opts.statusUrl, spec.headers, 60_000);
  const control = (path: string) => http(opts.sinkUrl + path, { method: 'POST' });
  await control('/_bench/record');
  try {
    const d = await drive(spec, opts.serverPids);
    const maxVersion = Math.max(0, ...d.replies.map(([v]) => v));
    // Delivery is in version order per mirror: once the last version is in at both, everything before it is too.
    let arrivals: Record<string, [number, number][]> = {};
    const deadline = performance.now() + (opts.graceMs ?? 10_000);
    for (;;) {
      arrivals = JSON.parse((await http(opts.sinkUrl + '/_bench/arrivals')).body) as Record<string, [number, number][]>;
      const complete = MIRRORS.every((m) => (arrivals[m] ?? []).some(([v]) => v >= maxVersion));
      if (complete || performance.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const all: number[] = [];
    const perMirror: LagResult['perMirror'] = {};
    let missing = 0;
    for (const m of MIRRORS) {
      const at = new Map(arrivals[m] ?? []);
      const lags: number[] = [];
      for (const [version, replyAt] of d.replies) {
        const arrived = at.get(version);
        if (arrived === undefined) missing++;
        else lags.push(arrived - replyAt);
      }
      lags.sort((a, b) => a - b);
      perMirror[m] = { p50: percentile(lags, 0.5), p99: percentile(lags, 0.99), max: lags.at(-1) ?? NaN };
      all.push(...lags);
    }
    all.sort((a, b) => a - b);
    const timeline = buckets(d.replies, arrivals, 250);
    return {
      timeline,
      rps: d.replies.length / d.seconds,
      p50: percentile(all, 0.5), p99: percentile(all, 0.99), max: all.at(-1) ?? NaN,
      mean: all.length ? all.reduce((a, b) => a + b, 0) / all.length : NaN,
      perMirror, events: d.replies.length, missing, beforeReply: all.filter((x) => x < 0).length,
      writeP50: d.writeP50, writeP99: d.writeP99, statusCodes: d.statusCodes, errors: d.errors, skipped: d.skipped,
      cpu: d.cpu, otherCpu: d.otherCpu, driverCpu: d.driverCpu, backlogAtStart: drain.backlog, drainMs: drain.ms,
    };
  } finally {
    await control('/_bench/stop');
  }
}
