// A damaged database file, as a disk or a careless operator leaves it: its first page overwritten and its WAL gone,
// so SQLite no longer recognises the file. Done while the product is down (bench/faults.ts, the soak's faults).
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';

export function damage(file: string): void {
  const fd = openSync(file, 'r+');
  writeSync(fd, Buffer.alloc(100, 'garbage '), 0, 100, 0);
  closeSync(fd);
  rmSync(`${file}-wal`, { force: true });
}

/** What the damaged database must answer on every operation (SPEC 3 shape, the damage named, no server path). */
export const DAMAGED_MESSAGE = /the database file is damaged \(SQLITE_NOTADB/;
