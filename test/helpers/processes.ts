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

/** Descendant pids of this test process that are executors (not the reaper's shell: src/db/executor/reaper.ts). */
export function executorPids(): number[] {
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
  walk(process.pid);
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
