// `npm run bench`: runs every workload against its server (each its own child process) with one load generator
// (autocannon in its own process), prints a table and writes bench/results/<timestamp>.json.
//   --smoke            ~1.5 s per workload, a few workloads, for CI (exit 0 when everything works)
//   --only <pattern>   workloads whose name matches (a regexp; comma-separated alternatives)
//   --repeat N         run the whole suite N times (drift shows in the "runs" column)
//   --duration S       measured seconds per workload (default 10; warm-up 2, --warmup S)
//   --connections C    load generator connections (default 32)
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { closeHttp } from './lib/http.ts';
import { runLoad } from './lib/loadgen.ts';
import { children, tail } from './lib/proc.ts';
import { formatTable, summarize, type Row } from './lib/table.ts';
import { Unavailable } from './lib/unavailable.ts';
import { SETUPS, type Running } from './setups.ts';
import { probe, WORKLOADS, type Workload } from './workloads.ts';

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    only: { type: 'string' },
    repeat: { type: 'string', default: '1' },
    duration: { type: 'string' },
    warmup: { type: 'string' },
    connections: { type: 'string', default: '32' },
  },
});
const smoke = args.smoke!;
const opts = {
  smoke,
  repeat: Math.max(1, Number(args.repeat)),
  duration: Number(args.duration ?? (smoke ? 1.5 : 10)),
  warmup: Number(args.warmup ?? (smoke ? 0.5 : 2)),
  connections: Number(args.connections),
  only: args.only ?? null,
};
const only = opts.only ? new RegExp(opts.only.split(',').join('|')) : null;
const selected = WORKLOADS.filter((w) => (only ? only.test(w.name) : !smoke || w.smoke));
if (selected.length === 0) {
  process.stderr.write(`no workload matches ${opts.only}; workloads: ${WORKLOADS.map((w) => w.name).join(', ')}\n`);
  process.exit(2);
}

const machine = {
  cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, memoryBytes: os.totalmem(),
  node: process.version, platform: `${os.platform()} ${os.release()}`, arch: os.arch(),
};
const log = (s: string) => process.stderr.write(`[bench] ${s}\n`);
const alive = (pid: number) => { try { process.kill(pid, 0); return true; } catch { return false; } };

async function runWorkload(w: Workload, running: Running, repeat: number): Promise<Row> {
  const row: Row = { workload: w.name, setup: w.setup, kind: w.kind, what: w.what, repeat, status: 'ok' };
  try {
    if (w.run) {
      const m = await w.run({ warmup: opts.warmup, duration: opts.duration, smoke }, running);
      return { ...row, rps: m.rps, p50: m.p50, p99: m.p99, cpu: m.cpu, otherCpu: m.otherCpu, total: m.total, extra: m.extra };
    }
    const load = await w.load!(running);
    const p = await probe(load);
    if (!p.ok) throw (SETUPS[w.setup]!.optional ? new Unavailable(p.reason) : new Error(p.reason));
    const r = await runLoad({ url: load.url, connections: opts.connections, warmupSeconds: opts.warmup, durationSeconds: opts.duration, requests: load.requests }, running.pids);
    const dead = running.pids.filter((pid) => !alive(pid));
    const bad = r.errors + r.timeouts + r.non2xx;
    const result: Row = { ...row, rps: r.rps, p50: r.p50, p99: r.p99, cpu: r.cpu, loadCpu: r.loadCpu, otherCpu: r.otherCpu, total: r.total, errors: r.errors + r.timeouts, non2xx: r.non2xx, statusCodes: r.statusCodes };
    if (dead.length) return { ...result, status: 'failed', reason: `server process ${dead.join(', ')} died during the load` };
    if (r.total === 0 || bad > r.total * 0.01) return { ...result, status: 'failed', reason: `${bad} of ${r.total} requests failed: ${JSON.stringify(r.statusCodes)}, errors ${r.errors}, timeouts ${r.timeouts}` };
    return w.after ? { ...result, extra: await w.after(running) } : result;
  } catch (e) {
    const unavailable = e instanceof Unavailable;
    return { ...row, status: unavailable ? 'unavailable' : 'failed', reason: (e as Error).message };
  }
}

async function main(): Promise<number> {
  log(`${selected.length} workloads × ${opts.repeat}, ${opts.connections} connections, warm-up ${opts.warmup} s, ${opts.duration} s each; ${machine.cpus} cores, Node ${machine.node}`);
  const rows: Row[] = [];
  const setupNotes: Record<string, unknown> = {};
  const started = new Date();
  for (let repeat = 1; repeat <= opts.repeat; repeat++) {
    for (const setupName of [...new Set(selected.map((w) => w.setup))]) {
      const setup = SETUPS[setupName]!;
      const ws = selected.filter((w) => w.setup === setupName);
      let running: Running;
      const t0 = performance.now();
      try {
        running = await setup.start();
      } catch (e) {
        const reason = tail((e as Error).message, 600);
        log(`${setupName}: ${setup.optional ? 'unavailable' : 'FAILED'}: ${reason}`);
        for (const w of ws) rows.push({ workload: w.name, setup: setupName, kind: w.kind, what: w.what, repeat, status: setup.optional ? 'unavailable' : 'failed', reason });
        continue;
      }
      if (!setup.none) log(`${setupName}: up in ${Math.round(performance.now() - t0)} ms ${JSON.stringify(running.notes)}`);
      try {
        for (const w of ws) {
          const row = await runWorkload(w, running, repeat);
          rows.push(row);
          log(`${w.name} #${repeat}: ${row.status === 'ok' ? row.extra && !row.p50 ? `${Math.round(row.rps!)}/s ${JSON.stringify(row.extra)}` : `${Math.round(row.rps!)} req/s, p50 ${row.p50?.toFixed(3)} ms, p99 ${row.p99?.toFixed(3)} ms, CPU ${row.cpu?.toFixed(0)}%${row.loadCpu ? ` (load generator ${row.loadCpu.toFixed(0)}%, others ${row.otherCpu?.toFixed(0)}%)` : ''}${row.extra ? ` ${JSON.stringify(row.extra)}` : ''}` : `${row.status}: ${tail(row.reason ?? '', 300)}`}`);
        }
      } finally {
        await running.stop();
        setupNotes[`${setupName}#${repeat}`] = running.notes;
      }
    }
  }
  closeHttp();
  const summary = summarize(rows);
  process.stdout.write('\n' + formatTable(summary) + '\n');
  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  const file = new URL(`${started.toISOString().replace(/[:.]/g, '-')}.json`, dir);
  writeFileSync(file, JSON.stringify({ startedAt: started.toISOString(), finishedAt: new Date().toISOString(), machine, options: opts, setups: setupNotes, summary, rows }, null, 2) + '\n');
  process.stdout.write(`\nresults: ${file.pathname}\n`);
  return rows.some((r) => r.status === 'failed') ? 1 : 0;
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    for (const child of children) child.kill('SIGKILL');
    process.exit(130);
  });
}

main().then((code) => { process.exitCode = code; }, (e) => {
  process.stderr.write(`[bench] crashed: ${(e as Error).stack ?? e}\n`);
  process.exitCode = 1;
});
