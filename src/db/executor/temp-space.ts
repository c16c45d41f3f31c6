// SQLite's temporary files in an executor process: sorts (ORDER BY, GROUP BY, DISTINCT, CREATE INDEX), materialized
// subqueries and CTEs, and statement journals spill to them once they outgrow memory. SQLite's unix VFS unlinks each
// one the moment it opens it, so no directory listing shows them and none outlives its process: they are found
// through the process's open files (/proc/<pid>/fd, Linux) by SQLite's name prefix, wherever SQLite put them.
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';

/** SQLITE_TEMP_FILE_PREFIX: every temporary file SQLite makes is named `etilqs_…`. */
const PREFIX = '/etilqs_';

/** Whether temporary files can be seen at all (Linux's /proc); elsewhere DB_TEMP_MAX_BYTES is not enforced. */
export const TEMP_SPACE_WATCHED = existsSync('/proc/self/fd');

/** Bytes held by SQLite's temporary files open in process `pid` now (0 when they cannot be seen). */
export function tempBytes(pid: number): number {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return 0; // gone, or no /proc
  }
  let bytes = 0;
  for (const fd of fds) {
    try {
      const link = `/proc/${pid}/fd/${fd}`;
      if (readlinkSync(link).includes(PREFIX)) bytes += statSync(link).size;
    } catch {
      // closed meanwhile
    }
  }
  return bytes;
}

/**
 * Bytes process `pid` has passed to write(2) and pwrite(2) so far (`wchar` of /proc/<pid>/io), or null when unknown.
 * Temporary files grow only by such writes, so between two measures they grow by no more than this moves: a cheap
 * bound (one read) that spares listing every open file (~7 µs each; an executor holds three per open database).
 */
export function writtenBytes(pid: number): number | null {
  try {
    const m = /^wchar: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'latin1'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/**
 * Whether one process's temporary files are over a limit, listing its open files only when they could be: when the
 * bytes it wrote since the last listing, added to what that listing found, could cross the limit.
 */
export class TempSpaceMeter {
  private readonly pid: number;
  private readonly limit: number;
  /** `writtenBytes` at the last listing, and the temporary bytes it found; -1: never listed (or no write count). */
  private writtenAt = -1;
  private found = 0;

  constructor(pid: number, limit: number) {
    this.pid = pid;
    this.limit = limit;
  }

  over(): boolean {
    const written = writtenBytes(this.pid);
    if (written !== null && this.writtenAt >= 0 && this.found + (written - this.writtenAt) <= this.limit) return false;
    this.found = tempBytes(this.pid);
    this.writtenAt = written ?? -1;
    return this.found > this.limit;
  }
}

/** A byte count as people read it: `64 MiB`, `1.5 GiB`, `3000 bytes`. */
export function sizeText(bytes: number): string {
  for (const [unit, size] of [['GiB', 1024 ** 3], ['MiB', 1024 ** 2], ['KiB', 1024]] as const) {
    if (bytes >= size) return `${Number((bytes / size).toFixed(2))} ${unit}`;
  }
  return `${bytes} bytes`;
}
