// The summary: one row per workload (median over repeats), ratios to the floor, the simplest correct server and D1.
import type { Kind } from '../workloads.ts';

export interface Row {
  workload: string;
  setup: string;
  kind: Kind;
  what: string;
  repeat: number;
  status: 'ok' | 'unavailable' | 'failed';
  reason?: string;
  rps?: number;
  p50?: number;
  p99?: number;
  cpu?: number;
  loadCpu?: number;
  otherCpu?: number;
  total?: number;
  errors?: number;
  non2xx?: number;
  statusCodes?: Record<string, number>;
  extra?: Record<string, unknown>;
}

export interface Summary {
  workload: string;
  kind: Kind;
  what: string;
  status: Row['status'];
  reason?: string;
  runs: number[];
  rps?: number;
  p50?: number;
  p99?: number;
  cpu?: number;
  otherCpu?: number;
  vsFloor?: number;
  vsSimple?: number;
  vsD1?: number;
  /** sb-mirrors-insert only: req/s over sb-insert's (the same load without mirrors); the target is ≥ 0.9. */
  vsNoMirrors?: number;
  /** sb-mirror-lag only: [p50, p99] of every run. */
  lagRuns?: [number, number][];
  extra?: Record<string, unknown>;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

export function summarize(rows: Row[]): Summary[] {
  const names = [...new Set(rows.map((r) => r.workload))];
  const out: Summary[] = names.map((name) => {
    const all = rows.filter((r) => r.workload === name);
    const ok = all.filter((r) => r.status === 'ok');
    const first = all[0]!;
    const bad = all.find((r) => r.status !== 'ok');
    if (ok.length === 0 || bad?.status === 'failed') {
      return { workload: name, kind: first.kind, what: first.what, status: bad!.status, reason: bad!.reason, runs: ok.map((r) => r.rps!) };
    }
    // The run with the median throughput supplies the latencies and CPU. The lag workload writes at a fixed rate, so
    // its throughput says nothing: its quietest run (least CPU used by other processes) is shown instead.
    const m = median(ok.map((r) => r.rps!));
    const mid = name === 'sb-mirror-lag'
      ? ok.reduce((a, r) => ((r.otherCpu ?? 0) < (a.otherCpu ?? 0) ? r : a))
      : ok.reduce((a, r) => (Math.abs(r.rps! - m) < Math.abs(a.rps! - m) ? r : a));
    const lagRuns = name === 'sb-mirror-lag' ? ok.map((r): [number, number] => [r.p50!, r.p99!]) : undefined;
    return { workload: name, kind: first.kind, what: first.what, status: 'ok', runs: ok.map((r) => r.rps!), lagRuns, rps: m, p50: mid.p50, p99: mid.p99, cpu: mid.cpu, otherCpu: mid.otherCpu, extra: mid.extra };
  });
  const rpsOf = (n: string) => out.find((s) => s.workload === n && s.status === 'ok')?.rps;
  const floor = rpsOf('floor');
  for (const s of out) {
    // The lag workload's req/s is the rate it was told to write at: no ratio means anything there.
    if (s.rps === undefined || s.kind === 'floor' || s.workload === 'sb-memory' || s.workload === 'sb-mirror-lag') continue;
    if (floor) s.vsFloor = s.rps / floor;
    const simple = rpsOf(s.kind === 'read' ? 'simple-read' : 'simple-insert');
    const d1 = rpsOf(s.kind === 'read' ? 'd1-read' : 'd1-insert');
    if (simple) s.vsSimple = s.rps / simple;
    if (d1) s.vsD1 = s.rps / d1;
  }
  const noMirrors = rpsOf('sb-insert');
  const mirrors = out.find((s) => s.workload === 'sb-mirrors-insert');
  if (mirrors?.rps !== undefined && noMirrors) mirrors.vsNoMirrors = mirrors.rps / noMirrors;
  return placeNextTo(out);
}

/** Rows shown right after another one, whatever order their setups ran in: the mirror rows follow sb-insert. */
const NEXT_TO: Record<string, string> = { 'sb-mirrors-insert': 'sb-insert', 'sb-mirror-lag': 'sb-mirrors-insert' };

function placeNextTo(rows: Summary[]): Summary[] {
  const out = rows.filter((s) => !(NEXT_TO[s.workload] && rows.some((t) => t.workload === NEXT_TO[s.workload])));
  for (const s of rows) {
    const after = NEXT_TO[s.workload];
    if (out.includes(s) || !after) continue;
    const i = out.findIndex((t) => t.workload === after);
    if (i >= 0) out.splice(i + 1, 0, s);
    else out.push(s);
  }
  return out;
}

const n0 = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '—' : Math.round(x).toLocaleString('en-US'));
const ms = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '—' : x < 10 ? x.toFixed(2) : x.toFixed(1));
const ratio = (x: number | undefined) => (x === undefined ? '—' : x >= 10 ? x.toFixed(0) + '×' : x.toFixed(2) + '×');
const mib = (x: unknown) => `${Math.round(Number(x) / 2 ** 20)} MiB`;

function note(s: Summary): string {
  if (s.status !== 'ok') return `${s.status}: ${(s.reason ?? '').replace(/\s+/g, ' ').slice(0, 160)}`;
  const e = s.extra;
  if (s.workload === 'sb-memory' && e) {
    return `${e.databases} dbs: RSS ${mib(e.rssIdleBytes)} idle → ${mib(e.rssAfterBytes)}; restart: ready ${Math.round(Number(e.startupReadyMs))} ms, status ${Math.round(Number(e.startupStatusMs))} ms`;
  }
  const parts: string[] = [];
  if (s.workload === 'sb-mirror-lag' && e) {
    parts.push(`p50/p99 = lag (ms) from the write's 200 to the event at a mirror; ${e.events} writes at ${e.rate}/s × 2 mirrors, max ${ms(Number(e.lagMaxMs))} ms; write p50/p99 ${ms(Number(e.writeP50Ms))}/${ms(Number(e.writeP99Ms))} ms`);
    if (Number(e.notSent) > 0) parts.push(`fell behind the rate: ${e.notSent} writes not sent (256 outstanding)`);
    if (Number(e.backlogAtStart) > 0) parts.push(`started after a backlog of ${e.backlogAtStart} drained in ${e.drainMs} ms`);
  }
  if (s.vsNoMirrors !== undefined) parts.push(`×no-mirrors ${s.vsNoMirrors.toFixed(2)} (req/s over sb-insert; target ≥ 0.90)`);
  if (s.workload === 'sb-mirrors-insert' && e?.mirrorBacklogAtEnd !== undefined) {
    parts.push(`mirrors ${e.mirrorBacklogAtEnd} events behind when the load stopped, caught up in ${(Number(e.catchUpMs) / 1000).toFixed(1)} s`);
  }
  if (s.workload === 'sb-mirror-lag' && s.lagRuns && s.lagRuns.length > 1) parts.push(`quietest of ${s.lagRuns.length} runs; p50/p99 per run: ${s.lagRuns.map(([a, b]) => `${ms(a)}/${ms(b)}`).join(', ')}`);
  else if (s.runs.length > 1) parts.push('runs: ' + s.runs.map((r) => n0(r)).join(' / '));
  if ((s.otherCpu ?? 0) >= 15) parts.push(`noisy: other processes used ${s.otherCpu!.toFixed(0)}% CPU`);
  return parts.join('; ');
}

export function formatTable(summary: Summary[]): string {
  const head = ['workload', 'req/s', 'p50 ms', 'p99 ms', 'CPU %', '×floor', '×simple', '×D1', 'notes'];
  const body = summary.map((s) => [s.workload, n0(s.rps), ms(s.p50), ms(s.p99), s.cpu === undefined ? '—' : s.cpu.toFixed(0), ratio(s.vsFloor), ratio(s.vsSimple), ratio(s.vsD1), note(s)]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((r) => r[i]!.length)));
  const line = (r: string[]) => r.map((c, i) => (i === 0 || i === r.length - 1 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd();
  return [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}
