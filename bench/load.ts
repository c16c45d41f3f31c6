// The load generator, run as its own process (fork from bench/run.ts): autocannon, keep-alive, pre-built requests.
// Receives a LoadSpec over IPC, runs a warm-up, says {phase: 'measure'}, runs the measured window, sends {result}.
import { createHistogram } from 'node:perf_hooks';
import autocannon from 'autocannon';
import type { LoadResult, LoadSpec } from './lib/loadgen.ts';

async function run(spec: LoadSpec): Promise<LoadResult> {
  const base = { url: spec.url, connections: spec.connections, requests: spec.requests, timeout: 30 };
  if (spec.warmupSeconds > 0) await autocannon({ ...base, duration: spec.warmupSeconds });
  process.send!({ phase: 'measure' });
  // Latencies of 2xx replies in µs (autocannon's own histogram rounds to whole ms).
  const h = createHistogram();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const instance = autocannon({ ...base, duration: spec.durationSeconds });
  instance.on('response', (_c, status, _b, ms) => { if (status >= 200 && status < 300) h.record(Math.max(1, Math.round(ms * 1000))); });
  const r = await instance;
  const used = process.cpuUsage(cpu0);
  const loadCpu = ((used.user + used.system) / 1000 / (performance.now() - t0)) * 100;
  const statusCodes: Record<string, number> = {};
  for (const [code, s] of Object.entries(r.statusCodeStats ?? {})) statusCodes[code] = s.count;
  return {
    rps: r.requests.total / r.duration,
    total: r.requests.total,
    seconds: r.duration,
    p50: h.count ? h.percentile(50) / 1000 : NaN,
    p99: h.count ? h.percentile(99) / 1000 : NaN,
    mean: h.count ? h.mean / 1000 : NaN,
    errors: r.errors,
    timeouts: r.timeouts,
    non2xx: r.non2xx,
    statusCodes,
    loadCpu,
  };
}

process.once('message', (spec: LoadSpec) => {
  run(spec).then((result) => {
    process.send!({ result }, () => process.exit(0));
  }, (e: Error) => {
    process.send!({ error: e.stack ?? String(e) }, () => process.exit(1));
  });
});
