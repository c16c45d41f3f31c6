// The lag workload's write driver, run as its own process (fork from bench/lib/lag.ts): a steady, rate-limited
// stream of single-row inserts (open loop: request i leaves at t0 + i/rate whatever the replies do, at most
// `maxInFlight` outstanding). Receives a LagSpec over IPC, runs a warm-up, says {phase: 'measure'}, runs the measured
// window and sends {result}: for every 200 of the window, the version it reports and when the reply was complete
// (performance.timeOrigin + performance.now(), ms since the epoch: the sink stamps arrivals on the same clock).
import { Pool } from 'undici';
import type { LagDriverResult, LagSpec } from './lib/lag.ts';

const now = () => performance.timeOrigin + performance.now();

async function run(spec: LagSpec): Promise<LagDriverResult> {
  const origin = new URL(spec.url).origin;
  const pool = new Pool(origin, { connections: spec.maxInFlight, pipelining: 1, keepAliveTimeout: 60_000 });
  const replies: [number, number][] = [];
  const latencies: number[] = [];
  const statusCodes: Record<string, number> = {};
  let errors = 0;
  let skipped = 0;
  let inFlight = 0;
  let i = 0;

  async function one(measured: boolean): Promise<void> {
    const body = JSON.stringify({ sql: spec.sql, params: [`lag ${i++}`] });
    const sent = now();
    try {
      const res = await pool.request({ method: 'POST', path: spec.path, headers: spec.headers, body });
      const text = await res.body.text();
      const at = now();
      if (!measured) return;
      statusCodes[res.statusCode] = (statusCodes[res.statusCode] ?? 0) + 1;
      if (res.statusCode !== 200) return;
      const version = (JSON.parse(text) as { version?: unknown }).version;
      if (typeof version === 'number') replies.push([version, at]);
      latencies.push(at - sent);
    } catch {
      if (measured) errors++;
    }
  }

  /** Sends at `rate` per second for `seconds`; resolves when every request of the phase has its reply. */
  function phase(seconds: number, measured: boolean): Promise<number> {
    return new Promise((resolve) => {
      const pending = new Set<Promise<void>>();
      const t0 = performance.now();
      let sent = 0;
      const tick = () => {
        const elapsed = (performance.now() - t0) / 1000;
        const due = Math.floor(Math.min(elapsed, seconds) * spec.rate);
        while (sent < due) {
          sent++;
          if (inFlight >= spec.maxInFlight) { if (measured) skipped++; continue; } // the product fell behind
          inFlight++;
          const p = one(measured).finally(() => { inFlight--; pending.delete(p); });
          pending.add(p);
        }
        if (elapsed < seconds) setTimeout(tick, 1);
        else void Promise.all(pending).then(() => resolve((performance.now() - t0) / 1000));
      };
      tick();
    });
  }

  if (spec.warmupSeconds > 0) await phase(spec.warmupSeconds, false);
  process.send!({ phase: 'measure' });
  const cpu0 = process.cpuUsage();
  const seconds = await phase(spec.durationSeconds, true);
  const used = process.cpuUsage(cpu0);
  await pool.close();
  latencies.sort((a, b) => a - b);
  const pct = (q: number) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]! : NaN);
  return {
    replies, seconds, statusCodes, errors, skipped,
    writeP50: pct(0.5), writeP99: pct(0.99),
    driverCpu: ((used.user + used.system) / 1000 / (seconds * 1000)) * 100,
  };
}

process.once('message', (spec: LagSpec) => {
  run(spec).then((result) => {
    process.send!({ result }, () => process.exit(0));
  }, (e: Error) => {
    process.send!({ error: e.stack ?? String(e) }, () => process.exit(1));
  });
});
