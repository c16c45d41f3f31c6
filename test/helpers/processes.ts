// The processes a test's product runs: executors are children of the test process (startProduct runs in-process).
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** Descendant pids of this test process (the executor processes). */
export function executorPids(): number[] {
  const out: number[] = [];
  const walk = (pid: number) => {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const kids = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      for (const k of kids ? kids.split(' ').map(Number) : []) {
        out.push(k);
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
