// Child processes under test: start them, wait until they are ready, and read their process tree's CPU and RSS from /proc.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readdirSync, readFileSync } from 'node:fs';

const CLK_TCK = 100; // USER_HZ on Linux
const PAGE = 4096;

/** Every child the bench started and that is still running, so an interrupted run leaves nothing behind. */
export const children = new Set<ChildProcess>();

export function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

export interface Server {
  name: string;
  child: ChildProcess;
  pid: number;
  /** The matched ready line's regexp groups. */
  match: RegExpMatchArray;
  output(): string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface StartOptions {
  name: string;
  args: string[];
  env?: Record<string, string | undefined>;
  /** A line on stdout or stderr that says the server is ready. */
  ready: RegExp;
  timeoutMs?: number;
  cwd?: string;
}

/** Starts `node <args>` (the same Node as the bench) and resolves when `ready` appears in its output. */
export function startServer(opts: StartOptions): Promise<Server> {
  const child = track(spawn(process.execPath, opts.args, {
    cwd: opts.cwd, env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'],
  }));
  let out = '';
  // BENCH_SERVER_LOG=<file>: every line the server prints, kept whole (with BENCH_LOG_LEVEL=info, each request's ms).
  const logFile = process.env.BENCH_SERVER_LOG ? createWriteStream(process.env.BENCH_SERVER_LOG, { flags: 'a' }) : null;
  const keep = (chunk: Buffer) => {
    out = (out + chunk.toString()).slice(-20_000);
    logFile?.write(chunk);
  };
  let exited: number | null | undefined;
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code, sig) => { exited = code ?? (sig ? -1 : null); resolve(exited); }));
  const server = (match: RegExpMatchArray): Server => ({
    name: opts.name, child, pid: child.pid!, match, output: () => out,
    async stop(signal = 'SIGTERM') {
      if (exited !== undefined) return exited;
      child.kill(signal);
      const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
      const code = await exit;
      clearTimeout(t);
      return code;
    },
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`${opts.name}: not ready after ${opts.timeoutMs ?? 30_000} ms; output: ${tail(out)}`)); }, opts.timeoutMs ?? 30_000);
    const onData = (chunk: Buffer) => {
      keep(chunk);
      const m = opts.ready.exec(out);
      if (m) {
        clearTimeout(timer);
        child.stdout!.off('data', onData); child.stderr!.off('data', onData);
        child.stdout!.on('data', keep); child.stderr!.on('data', keep);
        resolve(server(m));
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('error', (e) => { clearTimeout(timer); reject(e); });
    exit.then((code) => { clearTimeout(timer); reject(new Error(`${opts.name}: exited (${code}) before ready; output: ${tail(out)}`)); });
  });
}

/** The end of a process's output without stack frames, for messages. */
export function tail(s: string, n = 1500): string {
  const t = s.split('\n').filter((l) => !/^\s+at /.test(l)).join('\n').trim();
  return t.length > n ? '…' + t.slice(-n) : t;
}

interface Stat { ppid: number; ticks: number; rssPages: number }

function readStat(pid: number): Stat | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' '); // fields from 3 (state) on
    // f[1] = ppid (field 4); utime 14, stime 15, cutime 16, cstime 17; rss 24
    return { ppid: +f[1]!, ticks: +f[11]! + +f[12]! + +f[13]! + +f[14]!, rssPages: +f[21]! };
  } catch {
    return null;
  }
}

/** Every pid in the tree rooted at `root`, with its stat. */
export function processTree(root: number): Map<number, Stat> {
  const all = new Map<number, Stat>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const st = readStat(+d);
    if (st) all.set(+d, st);
  }
  const tree = new Map<number, Stat>();
  const rootStat = all.get(root);
  if (!rootStat) return tree;
  tree.set(root, rootStat);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, st] of all) if (!tree.has(pid) && tree.has(st.ppid)) { tree.set(pid, st); grew = true; }
  }
  return tree;
}

export type CpuSample = Map<number, number>;

/** Busy ticks of the whole machine (all cores), from /proc/stat. */
export function machineBusyTicks(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: busy = all but idle and iowait (guest is already in user)
  return f.slice(0, 8).reduce((a, b) => a + b, 0) - f[3]! - f[4]!;
}

export function ticksToPercent(ticks: number, seconds: number): number {
  return (ticks / CLK_TCK / seconds) * 100;
}

export function cpuSample(roots: number[]): CpuSample {
  const m: CpuSample = new Map();
  for (const root of roots) for (const [pid, st] of processTree(root)) m.set(pid, st.ticks);
  return m;
}

/** CPU used by the tree between two samples, in % of one core (200% = both cores of this machine). */
export function cpuPercent(before: CpuSample, after: CpuSample, seconds: number): number {
  let ticks = 0;
  for (const [pid, t] of after) ticks += t - (before.get(pid) ?? 0);
  return (ticks / CLK_TCK / seconds) * 100;
}

/** Resident memory of the whole tree, bytes. */
export function treeRss(root: number): number {
  let pages = 0;
  for (const st of processTree(root).values()) pages += st.rssPages;
  return pages * PAGE;
}
