// The processes a test's product runs: executors are children of the test process (startProduct runs in-process).
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** What /proc says, or null for a process gone meanwhile (the reaper's `sed`, an executor just stopped). */
function read(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** Descendant pids of `root` (this test process, or a cluster node's) that are executors (not the reaper's shell: src/db/executor/reaper.ts). */
export function executorPids(root = process.pid): number[] {
  const out: number[] = [];
  const walk = (pid: number) => {
    let tasks: string[];
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
    } catch {
      return; // gone meanwhile
    }
    for (const tid of tasks) {
      const kids = (read(`/proc/${pid}/task/${tid}/children`) ?? '').trim();
      for (const k of kids ? kids.split(' ').map(Number) : []) {
        if (/executor[/\\]child\.[jt]s/.test(read(`/proc/${k}/cmdline`) ?? '')) out.push(k);
        walk(k);
      }
    }
  };
  walk(root);
  return out;
}

/** What a process holds open: the paths its file descriptors point to (a deleted file's ends in " (deleted)"). */
export function openFiles(pid: number): string[] {
  const paths: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      paths.push(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // fd closed meanwhile
    }
  }
  return paths;
}

/** CPU time a process has used, in clock ticks (utime + stime of /proc/<pid>/stat), or 0 once it is gone. */
function cpuTicks(pid: number): number {
  const stat = read(`/proc/${pid}/stat`);
  if (stat === null) return 0;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // the name may hold spaces
  return Number(fields[11]) + Number(fields[12]);
}

/** The executor that used the most CPU over `ms` (the one running a long statement), or undefined if none used any. */
export async function busiestExecutor(ms = 200): Promise<number | undefined> {
  const before = new Map(executorPids().map((pid) => [pid, cpuTicks(pid)]));
  await new Promise((r) => setTimeout(r, ms));
  let best: number | undefined;
  let most = 0;
  for (const [pid, ticks] of before) {
    const used = cpuTicks(pid) - ticks;
    if (used > most) [best, most] = [pid, used];
  }
  return best;
}

/** Sends `signal` to every executor spawned from now on, as soon as it is seen, until `stop`; returns those signalled. */
function signalNewExecutors(signal: NodeJS.Signals, root = process.pid): { stop(): number[] } {
  const known = new Set(executorPids(root));
  const sent: number[] = [];
  const timer = setInterval(() => {
    for (const pid of executorPids(root)) {
      if (known.has(pid)) continue;
      known.add(pid);
      try {
        process.kill(pid, signal);
        sent.push(pid);
      } catch { /* gone */ }
    }
  }, 2);
  return {
    stop() {
      clearInterval(timer);
      return sent;
    },
  };
}

/** Holds every executor spawned from now on stopped (SIGSTOP), early in its start, until `release` (SIGCONT). */
export function holdNewExecutors(): { release(): void } {
  const held = signalNewExecutors('SIGSTOP');
  return {
    release() {
      for (const pid of held.stop()) try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ }
    },
  };
}

/** Kills (SIGKILL) every executor spawned from now on under `root`, as soon as it is seen, until `stop`. */
export function killNewExecutors(root = process.pid): { stop(): void } {
  return signalNewExecutors('SIGKILL', root);
}
