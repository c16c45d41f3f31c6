// The processes a test's product runs: executors are children of the test process (startProduct runs in-process).
import { readdirSync, readFileSync } from 'node:fs';

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
