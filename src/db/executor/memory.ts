// The memory a statement adds to its executor process. Nothing else bounds it: SQLite's length limit bounds each value,
// not a row of 2,000 of them (`SELECT b, b, … FROM (SELECT zeroblob(8e6) AS b)`: node:sqlite copies every column
// out, 1–2 GB a second), nor a parse tree (an IN list of millions), so a process grew by as much as its time limit
// allowed. Read from /proc (Linux), as temp-space.ts reads temporary files; elsewhere DB_MEMORY_MAX_BYTES is not enforced.
import { readFileSync } from 'node:fs';
import { TEMP_SPACE_WATCHED } from './temp-space.ts';

/** Whether a process's memory can be read at all: where temporary files can be seen (/proc). */
export const MEMORY_WATCHED = TEMP_SPACE_WATCHED;

/** Resident memory of process `pid` now (VmRSS), in bytes; null when it cannot be read (gone, or no /proc). */
export function residentBytes(pid: number): number | null {
  try {
    const m = /^VmRSS:\s*(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/**
 * Judges one process's running message by what it added to the process's memory since it was first measured (20 ms
 * into it): what an earlier message left behind (memory the allocator keeps) is not this one's. A message that grew
 * the process by a quarter of the limit has it retired once idle, so that no later message starts on that much.
 */
export class MemoryMeter {
  private readonly pid: number;
  private readonly limit: number;
  /** The message measured, and the process's memory when it was first measured. */
  private running: unknown = undefined;
  private base = 0;
  /** The last message measured grew the process by a quarter of the limit or more. */
  bloated = false;

  constructor(pid: number, limit: number) {
    this.pid = pid;
    this.limit = limit;
  }

  /** Whether `running` (a token of the running message) has added more than the limit. */
  over(running: unknown): boolean {
    const now = residentBytes(this.pid);
    if (now === null || running === undefined) return false;
    if (running !== this.running) {
      this.running = running;
      this.base = now;
      return false;
    }
    if (now - this.base >= this.limit / 4) this.bloated = true;
    return now - this.base > this.limit;
  }
}
