// Parent side of the load generator: forks bench/load.ts, samples the server's CPU over the measured window only.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { cpuPercent, cpuSample, machineBusyTicks, ticksToPercent, track, type CpuSample } from './proc.ts';

export interface LoadRequest { method: string; path: string; headers?: Record<string, string>; body?: string }

export interface LoadSpec {
  url: string;
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
  requests: LoadRequest[];
}

export interface LoadResult {
  rps: number;
  total: number;
  seconds: number;
  /** Latency in ms. */
  p50: number;
  p99: number;
  mean: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  statusCodes: Record<string, number>;
  /** The load generator's own CPU over the measured window, % of one core (near 100: it is the bottleneck). */
  loadCpu: number;
  /** Server process tree CPU over the measured window, % of one core. */
  cpu?: number;
  /** Everything else busy on the machine meanwhile (other processes), % of one core: high means a noisy run. */
  otherCpu?: number;
}

const LOAD = fileURLToPath(new URL('../load.ts', import.meta.url));

/** Runs one load (warm-up + measured window) against `spec.url`, measuring the CPU of the trees rooted at `serverPids`. */
export function runLoad(spec: LoadSpec, serverPids: number[]): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const child = track(fork(LOAD, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
    let before: CpuSample | null = null;
    let busy0 = 0;
    let t0 = 0;
    let done = false;
    child.on('message', (m: { phase?: string; result?: LoadResult; error?: string }) => {
      if (m.phase === 'measure') { before = cpuSample(serverPids); busy0 = machineBusyTicks(); t0 = performance.now(); }
      if (m.result) {
        done = true;
        const after = cpuSample(serverPids);
        const busy = machineBusyTicks() - busy0;
        const seconds = (performance.now() - t0) / 1000;
        const cpu = before ? cpuPercent(before, after, seconds) : undefined;
        const otherCpu = cpu === undefined ? undefined : Math.max(0, ticksToPercent(busy, seconds) - cpu - m.result.loadCpu);
        resolve({ ...m.result, cpu, otherCpu });
      }
      if (m.error) { done = true; reject(new Error(`load generator: ${m.error}`)); }
    });
    child.once('exit', (code) => { if (!done) reject(new Error(`load generator exited (${code}) without a result`)); });
    child.once('error', reject);
    child.send(spec);
  });
}

/** `n` pre-built requests from a body factory (ids vary per request; autocannon cycles through them). */
export function buildRequests(n: number, make: (i: number) => LoadRequest): LoadRequest[] {
  return Array.from({ length: n }, (_, i) => make(i));
}

export function randomId(max: number): number {
  return 1 + Math.floor(Math.random() * max);
}
